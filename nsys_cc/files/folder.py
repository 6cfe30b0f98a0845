"""The one way anything under `-o DIR` is written, made or removed: `Folder`, a directory no write, folder, removal or
rename of which follows a link out of it, and its lock (one writer at a time); `check_out_dir`, the check of a
directory argument; `is_plain` / `is_inside`, the checks of a name inside it."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import stat
import time
from collections.abc import Callable, Iterator
from pathlib import Path, PurePosixPath

from .. import inputs
from ..errors import InputError
from .atomic import write_bytes, write_text

LOCK_NAME = ".nsys_cc.lock"
# Seconds a second writer of the same `-o DIR` waits for the first before it refuses ($NSYS_CC_LOCK_WAIT).
DEFAULT_LOCK_WAIT_S = 30.0


_HELD: set[str] = set()  # the folders this process holds the lock of
# What nsys-cc's lock file holds: the process id of its latest holder and a newline (nothing, when just made).
LOCK_TEXT = re.compile(rb"(?:[0-9]{1,10}\n?)?")
LOCK_TEXT_MAX = 11


def _is_lock_text(data: bytes) -> bool:
    """Whether `data` is what nsys-cc's lock file holds (`LOCK_TEXT`): only such a file is written over (a user's
    `.nsys_cc.lock` was truncated to a pid)."""
    return len(data) <= LOCK_TEXT_MAX and LOCK_TEXT.fullmatch(data) is not None


def os_reason(exc: OSError) -> str:
    return exc.strerror or str(exc)


def is_plain(name: str) -> bool:
    parts = PurePosixPath(name).parts
    return bool(parts) and not PurePosixPath(name).is_absolute() and not any(p in ("", ".", "..") for p in parts)


def is_inside(out: Path, name: str) -> bool:
    """Whether `name` is a plain relative path whose folders inside `out` are real folders (no link leads out)."""
    if not is_plain(name):
        return False
    folder = out
    for part in Path(name).parts[:-1]:
        folder = folder / part
        if folder.is_symlink() or (folder.exists() and not folder.is_dir()):
            return False
    return True


def check_out_dir(out_dir: str | os.PathLike, what: str = "the report") -> Path:
    """`out_dir` as a Path; InputError (naming `out_dir`) when it is empty, a symbolic link (to a folder or not:
    every verb refuses it alike, none writes through it) or names something that is not a directory."""
    if isinstance(out_dir, bytes):
        raise InputError(f"out_dir: give the directory's path as text, not bytes {out_dir!r}", param="out_dir")
    if not isinstance(out_dir, (str, os.PathLike)):
        raise InputError(f"out_dir: give {what}'s directory as a path, not {type(out_dir).__name__} {out_dir!r}",
                         param="out_dir")
    if not os.fspath(out_dir):
        raise InputError(f"out_dir is empty: give {what} a directory (a new or existing one)", param="out_dir")
    out = Path(out_dir)
    if out.is_symlink():  # every verb alike: profile wrote its lock, status and runs through it, analyze refused it
        raise InputError(f"out_dir {out} is a symbolic link (to {os.readlink(out)}): nsys-cc writes only into the "
                         f"folder named, never through a link; give the folder itself ({os.path.realpath(out)})",
                         param="out_dir")
    if out.exists() and not out.is_dir():
        raise InputError(f"out_dir {out} is an existing file: {what} needs a directory (give a new or existing "
                         "directory)", param="out_dir")
    return out


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
        if not is_inside(self.root, str(p)):
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
        the process that holds it. Released when the block ends or the process dies (SIGKILL included). A file of
        that name holding anything but a process id (`LOCK_TEXT`: a file of the user's) is refused, never written
        over."""
        import fcntl

        if wait is None:
            # the one validator of every bound (nan would wait forever); 0 here: do not wait
            wait = inputs.seconds(os.environ.get("NSYS_CC_LOCK_WAIT", ""), "NSYS_CC_LOCK_WAIT",
                                  default=DEFAULT_LOCK_WAIT_S) or 0.0
        try:
            self.mkdir()
        except OSError as exc:
            raise InputError(f"cannot write {what} to {self.root}: {os_reason(exc)}", param="out_dir") from None
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
            raise InputError(f"cannot lock {self.root} for {what} ({p}: {os_reason(exc)})", param="out_dir") from None
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
            if not _is_lock_text(os.pread(fd, LOCK_TEXT_MAX + 1, 0)):  # a file of the user's by that name
                raise InputError(f"{p} is in the way: it is not nsys-cc's lock file (nsys-cc's holds a process id "
                                 "only); move it away or choose another directory; nothing was changed",
                                 param="out_dir")
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
            _HELD.add(key)
            try:
                yield
            finally:
                _HELD.discard(key)
        finally:
            os.close(fd)
