"""Files written so that nobody ever sees half of one, and signals that wait until a change is complete.

- `write_text(path, text)` / `write_bytes`: into a temporary file in the same directory, flushed, then renamed over
  `path` (`os.replace`, atomic on POSIX): a reader sees the old content or the new, never a mix; a failure (a full
  disk, a file too large, Ctrl-C) leaves the old file as it was. A symbolic link at `path` is replaced by the file,
  its target is never written.
- `signals_deferred()`: SIGINT, SIGTERM and SIGHUP received inside it take effect when it ends (as
  KeyboardInterrupt, or the signal's own handler), so a few renames that belong together are not split by Ctrl-C.
- `publish(out_dir, build, manifest=…)`: a directory's files (a report) replaced as a whole, touching only files it
  wrote and can prove it wrote (their sha256 in a manifest); see its docstring.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import signal
import stat
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from . import inputs
from .errors import InputError

DEFERRED_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def temporary_beside(path: str | os.PathLike, *, suffix: str = ".tmp") -> Path:
    """A new empty file, hidden, in the directory of `path` (so that a rename onto `path` is atomic)."""
    p = Path(path)
    fd, name = tempfile.mkstemp(dir=p.parent, prefix=f".{p.name[:80]}.", suffix=suffix)
    os.close(fd)
    return Path(name)


def write_bytes(path: str | os.PathLike, data: bytes, *, mode: int = 0o644) -> Path:
    """Write `data` to `path` atomically (module docstring); returns `path`. Raises OSError (the old file intact)."""
    p = Path(path)
    tmp = temporary_beside(p)
    try:
        with open(tmp, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, mode & ~_umask())
        os.replace(tmp, p)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return p


def write_text(path: str | os.PathLike, text: str, *, mode: int = 0o644) -> Path:
    """`write_bytes` of `text` in UTF-8."""
    return write_bytes(path, text.encode("utf-8"), mode=mode)


_UMASK: int | None = None


def _umask() -> int:
    global _UMASK
    if _UMASK is None:
        current = os.umask(0o022)
        os.umask(current)
        _UMASK = current
    return _UMASK


@contextlib.contextmanager
def signals_deferred() -> Iterator[None]:
    """Hold SIGINT/SIGTERM/SIGHUP until the block ends, then act on the first one received (module docstring).
    Outside the main thread (where Python delivers signals) it does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    received: list[signal.Signals] = []
    previous: dict[signal.Signals, object] = {}
    for sig in DEFERRED_SIGNALS:
        try:
            previous[sig] = signal.signal(sig, lambda signum, frame: received.append(signal.Signals(signum)))
        except (ValueError, OSError):  # not settable here (e.g. an embedded interpreter)
            pass
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)  # type: ignore[arg-type]
        if received:
            first = received[0]
            handler = previous.get(first)
            if callable(handler):
                handler(first, None)
            elif handler == signal.SIG_DFL:
                if first == signal.SIGINT:
                    raise KeyboardInterrupt
                os.kill(os.getpid(), first)


# -- a directory of files replaced as a whole (the report of `-o DIR`, the sweep table) ------------------------------
MANIFEST_FORMAT = "nsys_cc.report_manifest"
MANIFEST_VERSION = 2
# Only files of these kinds are ever removed as stale, whatever a manifest lists (never a trace, never a .sqlite).
REMOVABLE_SUFFIXES = (".md", ".json", ".csv", ".png", ".parquet")
# A staging directory older than this was left by a killed writer (a live one finishes well within it).
STALE_STAGING_SECONDS = 24 * 3600


def sha256(path: str | os.PathLike) -> str:
    """sha256 (hex) of a file's bytes."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _why(exc: OSError) -> str:
    return exc.strerror or str(exc)


class Stage:
    """Where a `publish` writes its files before they are put in place: `with stage.file("plots/a.png") as path:`
    gives the path to write; a failure (a full disk, a file too large) becomes an InputError naming the file."""

    def __init__(self, root: Path, out: Path):
        self.root, self.out = root, out
        self.names: list[str] = []

    @contextlib.contextmanager
    def file(self, name: str) -> Iterator[Path]:
        path = self.root / name
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            yield path
        except OSError as exc:
            raise InputError(f"cannot write {self.out / name}: {_why(exc)}; nothing in {self.out} was changed",
                             param="out_dir") from None
        if name not in self.names:
            self.names.append(name)


@dataclass
class _Earlier:
    """What the manifest of the earlier files says: name → the contents it wrote (sha256); `by_name`: names an older
    manifest (without hashes) lists, which may be written over but are never removed."""

    hashes: dict[str, set[str]] = field(default_factory=dict)
    by_name: set[str] = field(default_factory=set)
    text: bytes | None = None

    def wrote(self, name: str, digest: str) -> bool:
        return digest in self.hashes.get(name, ())


def _read_manifest(path: Path) -> _Earlier:
    try:
        if not stat.S_ISREG(os.lstat(path).st_mode):  # a link (to anywhere) or a special file says nothing
            return _Earlier()
        text = inputs.read_bytes(path, "report manifest")
        doc = inputs.parse_json(text, "report manifest")
    except (OSError, InputError):
        return _Earlier()
    earlier = _Earlier(text=text)
    files = doc.get("files") if isinstance(doc, dict) else None
    if isinstance(files, list):  # version 1: names only
        earlier.by_name = {n for n in files if isinstance(n, str)}
    elif isinstance(files, dict):
        for source in (files, doc.get("replacing") or {}):
            if not isinstance(source, dict):
                continue
            for name, digests in source.items():
                digests = [digests] if isinstance(digests, str) else digests
                if isinstance(name, str) and isinstance(digests, list):
                    earlier.hashes.setdefault(name, set()).update(d for d in digests if isinstance(d, str))
    return earlier


def _inside(out: Path, name: str) -> bool:
    """Whether `name` is a plain relative path whose folders inside `out` are real folders (no link leads out)."""
    parts = Path(name).parts
    if not parts or Path(name).is_absolute() or any(p in ("", ".", "..") for p in parts):
        return False
    folder = out
    for part in parts[:-1]:
        folder = folder / part
        if folder.is_symlink() or (folder.exists() and not folder.is_dir()):
            return False
    return True


def _remove_stale_staging(out: Path, prefix: str) -> None:
    limit = time.time() - STALE_STAGING_SECONDS
    for old in out.glob(f"{prefix}*"):
        with contextlib.suppress(OSError):
            if old.is_dir() and not old.is_symlink() and old.stat().st_mtime < limit:
                shutil.rmtree(old)


def check_out_dir(out_dir: str | os.PathLike, what: str = "the report") -> Path:
    """`out_dir` as a Path; InputError (naming `out_dir`) when it names something that is not a directory."""
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise InputError(f"out_dir {out} is an existing file: {what} needs a directory (give a new or existing "
                         "directory)", param="out_dir")
    return out


def publish(out_dir: str | os.PathLike, build: Callable[[Stage], None], *, manifest: str,
            what: str = "the report") -> dict[str, Path]:
    """Replace the files an earlier `publish` with the same `manifest` wrote in `out_dir` by those `build` writes,
    as a whole: `build(stage)` writes every file into a staging folder inside `out_dir` (`Stage.file`); only when
    all are written are they renamed into place, with Ctrl-C held until the last rename (`signals_deferred`), and
    a rename that fails puts the earlier files back. So an interrupted or failed write leaves the earlier files, or
    none, never a mix; a full disk is an InputError naming the file, with nothing changed.

    Only files are touched that this writer puts in place or can prove it wrote: `manifest` (in `out_dir`) records
    each file's sha256. A file in the way that it did not write (or that changed since) is refused; a link in the
    way is replaced (its target is never written); an earlier file not written again is removed only when it is a
    regular file inside `out_dir` (no link on the way), of a kind this writer makes (`REMOVABLE_SUFFIXES`), with the
    content recorded. Returns name → path in `out_dir`, in the order written."""
    out = check_out_dir(out_dir, what)
    folder = Folder(out)
    with folder.lock(what):
        return _publish(folder, build, manifest, what)


def _publish(folder: Folder, build: Callable[[Stage], None], manifest: str, what: str) -> dict[str, Path]:
    out = folder.root
    try:
        _remove_stale_staging(out, f"{manifest}.tmp-")
        staging = Path(tempfile.mkdtemp(dir=out, prefix=f"{manifest}.tmp-"))
    except OSError as exc:
        raise InputError(f"cannot write {what} to {out}: {_why(exc)}", param="out_dir") from None
    try:
        stage = Stage(staging, out)
        build(stage)
        earlier = _read_manifest(out / manifest)
        with signals_deferred():
            _commit(out, staging, stage.names, earlier, manifest)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return {name: out / name for name in stage.names}


def _manifest_text(files: dict[str, str], replacing: dict[str, set[str]] | None = None) -> str:
    doc: dict = {"format": MANIFEST_FORMAT, "version": MANIFEST_VERSION, "files": files}
    if replacing:
        doc["replacing"] = {k: sorted(v) for k, v in sorted(replacing.items())}
    return json.dumps(doc, indent=1) + "\n"


def _commit(out: Path, staging: Path, names: list[str], earlier: _Earlier, manifest: str) -> None:
    new = {name: sha256(staging / name) for name in names}
    for name in names:  # everything in the way is checked before anything changes
        dest = out / name
        if not _inside(out, name):
            raise InputError(f"cannot write {dest}: a folder on its way is a link or a file (nsys-cc writes only "
                             f"inside {out}); nothing was changed", param="out_dir")
        try:
            mode = os.lstat(dest).st_mode
        except FileNotFoundError:
            continue
        if stat.S_ISLNK(mode):
            continue
        if stat.S_ISREG(mode):
            digest = sha256(dest)
            # An older manifest's names alone prove nothing (the file may have been edited since): refused.
            if digest == new[name] or earlier.wrote(name, digest):
                continue
        raise InputError(f"{dest} is in the way: nsys-cc did not write it, or it changed since (move it away or "
                         "choose another out_dir); nothing was changed", param="out_dir")
    manifest_path = out / manifest
    try:
        # Until the last rename, both the earlier and the new contents count as written by this writer.
        write_text(manifest_path, _manifest_text(new, earlier.hashes))
    except OSError as exc:
        raise InputError(f"cannot write {manifest_path}: {_why(exc)}; nothing in {out} was changed",
                         param="out_dir") from None
    backup = staging / ".earlier"
    moved: list[tuple[Path, Path | None]] = []
    try:
        for name in names:
            dest = out / name
            dest.parent.mkdir(parents=True, exist_ok=True)
            kept = None
            if dest.is_file() and not dest.is_symlink():
                kept = backup / name
                kept.parent.mkdir(parents=True, exist_ok=True)
                try:
                    os.link(dest, kept)
                except OSError:
                    kept = None  # no hard links here: this file cannot be put back
            os.replace(staging / name, dest)
            moved.append((dest, kept))
    except OSError as exc:
        for dest, kept in reversed(moved):
            with contextlib.suppress(OSError):
                if kept is not None:
                    os.replace(kept, dest)
                else:
                    dest.unlink()
        with contextlib.suppress(OSError):
            if earlier.text is not None:
                write_bytes(manifest_path, earlier.text)
            else:
                manifest_path.unlink()
        raise InputError(f"cannot put {dest} in place: {_why(exc)}; the earlier files in {out} were left as they "
                         "were", param="out_dir") from None
    with contextlib.suppress(OSError):  # the transitional manifest above is a correct record too
        write_text(manifest_path, _manifest_text(new))
    _remove_proven(out, {n: d for n, d in earlier.hashes.items() if n not in new})


def _remove_proven(out: Path, hashes: dict[str, set[str]]) -> list[str]:
    """Remove each file named that is a regular file inside `out` (no link on the way), of a kind `publish` writes,
    with one of the contents recorded; return the names removed."""
    removed = []
    for name, digests in hashes.items():
        if not name.endswith(REMOVABLE_SUFFIXES) or not _inside(out, name):
            continue
        stale = out / name
        with contextlib.suppress(OSError):
            if stat.S_ISREG(os.lstat(stale).st_mode) and sha256(stale) in digests:
                stale.unlink()
                removed.append(name)
    return removed


def withdraw(out_dir: str | os.PathLike, *, manifest: str) -> list[str]:
    """Remove what an earlier `publish` with `manifest` put in `out_dir` and can prove it wrote (as `publish` removes
    stale files), then the manifest; return the names removed. For a report that no longer describes its inputs."""
    out = Path(out_dir)
    earlier = _read_manifest(out / manifest)
    with signals_deferred():
        removed = _remove_proven(out, earlier.hashes)
        if earlier.text is not None:
            with contextlib.suppress(OSError):
                (out / manifest).unlink()
    return removed


# -- the one way anything under `-o DIR` is written, made or removed ------------------------------------------------
LOCK_NAME = ".nsys_cc.lock"
# Seconds a second writer of the same `-o DIR` waits for the first before it refuses ($NSYS_CC_LOCK_WAIT).
DEFAULT_LOCK_WAIT_S = 30.0


_HELD: set[str] = set()  # the folders this process holds the lock of


def my_uid() -> int:
    """The user id files must belong to, to be trusted (a function, so that a test can play another user)."""
    return os.geteuid()


class Folder:
    """A directory (`-o DIR`) that every writer goes through: each name is a plain relative path whose folders are
    real folders inside it, so no write, folder, removal or rename ever follows a link out of it. A link where a
    file is written is replaced by the file (its target untouched); a link where a folder is needed is refused (an
    InputError); a link that is removed is removed itself, never what it points to. `lock()`: one writer at a time."""

    def __init__(self, root: str | os.PathLike):
        self.root = Path(root)

    def path(self, name: str | os.PathLike) -> Path:
        """`root/name` once checked that no folder on its way is a link or a file (InputError otherwise); `name`
        may also be a path already under `root`."""
        p = Path(name)
        try:
            p = p.relative_to(self.root)
        except ValueError:
            if p.is_absolute():
                raise InputError(f"cannot write {p}: nsys-cc writes only inside {self.root}",
                                 param="out_dir") from None
        if not _inside(self.root, str(p)):
            raise InputError(f"cannot write {self.root / p}: a folder on its way is a link or a file (nsys-cc writes "
                             f"only inside {self.root})", param="out_dir")
        return self.root / p

    def mkdir(self, name: str | os.PathLike = "", *, mode: int = 0o777) -> Path:
        """`root/name` as a real folder (made with its parents as needed); a link or a file there is refused."""
        parts = self.path(name).relative_to(self.root).parts if str(name) not in ("", ".") else ()
        folder = self.root
        for part in ("", *parts):
            folder = folder / part if part else folder
            try:
                os.mkdir(folder, mode)
            except FileExistsError:
                pass
            except FileNotFoundError:
                folder.mkdir(parents=True, mode=mode)  # only for root's own parents (the user's path)
            if folder.is_symlink() or not folder.is_dir():
                raise InputError(f"{folder} is a link or a file where nsys-cc needs a folder of its own (move it "
                                 "away or choose another directory)", param="out_dir")
        return folder

    def write_text(self, name: str | os.PathLike, text: str, *, mode: int = 0o644) -> Path:
        return write_text(self.path(name), text, mode=mode)

    def write_bytes(self, name: str | os.PathLike, data: bytes, *, mode: int = 0o644) -> Path:
        return write_bytes(self.path(name), data, mode=mode)

    def check_own(self, name: str | os.PathLike, ours: Callable[[bytes], bool], what: str = "nsys-cc") -> Path:
        """`root/name`, checked to be absent, a link (which a write replaces) or a regular file `ours(its bytes)`
        accepts as one this writer makes; otherwise (a user's own file of that name) an InputError, nothing
        changed."""
        p = self.path(name)
        try:
            st = os.lstat(p)
        except FileNotFoundError:
            return p
        if stat.S_ISLNK(st.st_mode):
            return p
        try:
            mine = stat.S_ISREG(st.st_mode) and ours(inputs.read_bytes(p, f"{what} file"))
        except (OSError, InputError):
            mine = False
        if not mine:
            raise InputError(f"{p} is in the way: it is not a {what} file (move it away or choose another out_dir); "
                             "nothing was changed", param="out_dir")
        return p

    def write_own(self, name: str | os.PathLike, text: str, ours: Callable[[bytes], bool],
                  what: str = "nsys-cc") -> Path:
        """`write_text`, but a file already there is replaced only when `ours` accepts it (`check_own`)."""
        return write_text(self.check_own(name, ours, what), text)

    def open_new(self, name: str | os.PathLike, mode: str = "w"):
        """`name` opened for writing afresh (a log): whatever was there (a file, a link) is removed first, and the
        file is created without following a link (O_EXCL | O_NOFOLLOW)."""
        p = self.path(name)
        self.remove(p)
        fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
        return os.fdopen(fd, mode)

    def remove(self, name: str | os.PathLike) -> None:
        """Remove the file (or the link itself) at `name`; nothing when absent; a real folder is left."""
        p = self.path(name)
        with contextlib.suppress(FileNotFoundError, IsADirectoryError):
            if not stat.S_ISDIR(os.lstat(p).st_mode):
                os.unlink(p)

    def remove_tree(self, name: str | os.PathLike) -> None:
        """Remove the folder `name` and all in it (links inside removed themselves, never followed); a link there
        is removed itself; nothing when absent."""
        p = self.path(name)
        try:
            st = os.lstat(p)
        except FileNotFoundError:
            return
        if stat.S_ISDIR(st.st_mode):
            shutil.rmtree(p)  # fd-based on Linux: never follows a link inside
        else:
            os.unlink(p)

    def rmdir(self, name: str | os.PathLike) -> None:
        """Remove the folder `name` when it is empty (best effort)."""
        with contextlib.suppress(OSError):
            os.rmdir(self.path(name))

    def replace(self, src: str | os.PathLike, dst: str | os.PathLike) -> None:
        """Rename `src` over `dst`, both inside (`os.replace`; a link at `dst` is replaced, never followed)."""
        os.replace(self.path(src), self.path(dst))

    @contextlib.contextmanager
    def lock(self, what: str = "write", wait: float | None = None) -> Iterator[None]:
        """Hold `root/.nsys_cc.lock` (fcntl.flock) for the block: a second writer of the same folder waits up to
        `wait` seconds (default `$NSYS_CC_LOCK_WAIT` or DEFAULT_LOCK_WAIT_S), then refuses with one line naming
        the process that holds it. Released when the block ends or the process dies (SIGKILL included)."""
        import fcntl

        if wait is None:
            # the one validator of every bound (nan would wait forever); 0 here: do not wait
            wait = inputs.seconds(os.environ.get("NSYS_CC_LOCK_WAIT", ""), "NSYS_CC_LOCK_WAIT",
                                  default=DEFAULT_LOCK_WAIT_S) or 0.0
        try:
            self.mkdir()
        except OSError as exc:
            raise InputError(f"cannot write {what} to {self.root}: {_why(exc)}", param="out_dir") from None
        key = os.path.realpath(self.root)
        if key in _HELD:  # this process holds it already (profile's report written by analyze): re-entrant
            yield
            return
        p = self.path(LOCK_NAME)
        try:
            fd = os.open(p, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK, 0o644)
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                os.close(fd)
                raise OSError(0, "not a regular file")
        except OSError as exc:
            raise InputError(f"cannot lock {self.root} for {what} ({p}: {_why(exc)})", param="out_dir") from None
        try:
            deadline = time.monotonic() + max(wait, 0.0)
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() >= deadline:
                        holder = os.pread(fd, 64, 0).decode("ascii", "replace").strip() or "unknown"
                        raise InputError(f"another nsys-cc (pid {holder}) is writing {self.root}: wait for it to "
                                         f"finish, or choose another directory (waited {wait:g} s)",
                                         param="out_dir") from None
                    time.sleep(0.1)
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
            _HELD.add(key)
            try:
                yield
            finally:
                _HELD.discard(key)
        finally:
            os.close(fd)
