"""A report directory's files replaced as a whole: `publish(out_dir, build, manifest=…)` — by one rename, so that even
a SIGKILL leaves the earlier report or the new one (its names are links into a generation folder) — touching only
files it wrote and can prove it wrote (their sha256 in a manifest); `withdraw` removes such a report; see their
docstrings. The report of `-o DIR`, the sweep table and the tune report are all published here.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import re
import shutil
import stat
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from .. import inputs
from ..errors import InputError
from .atomic import current_umask, write_bytes, write_text
from .folder import Folder, check_out_dir, is_inside, is_plain, os_reason
from .signals import signals_deferred

# -- a directory of files replaced as a whole (the report of `-o DIR`, the sweep table) ------------------------------
MANIFEST_FORMAT = "nsys_cc.report_manifest"
MANIFEST_VERSION = 3
# Only files of these kinds are ever removed as stale, whatever a manifest lists (never a trace, never a .sqlite).
REMOVABLE_SUFFIXES = (".md", ".json", ".csv", ".png", ".parquet")
# A staging directory older than this was left by a killed writer (a live one finishes well within it).
STALE_STAGING_SECONDS = 24 * 3600
# A report's generations (`publish`): DIR/<store>/g-…/ holds one whole report, DIR/<store>/current is a link naming
# the one shown, and each of the report's names in DIR is a link through it, so one rename shows the next report.
CURRENT = "current"
GENERATION_PREFIX = "g-"
GENERATION_MANIFEST = ".manifest.json"
_GENERATION_NAME = re.compile(re.escape(GENERATION_PREFIX) + r"[A-Za-z0-9_.-]+")
# What `os.symlink` raises on a file system without symbolic links: the report is then put in place file by file.
_NO_LINKS = frozenset({errno.EPERM, errno.EOPNOTSUPP, errno.ENOSYS})


def sha256(path: str | os.PathLike) -> str:
    """sha256 (hex) of a file's bytes."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _named(exc: OSError) -> str:
    """`exc`'s reason and, when it names one, the file it concerns."""
    return os_reason(exc) + (f" ({os.fsdecode(exc.filename)})" if exc.filename is not None else "")


def store_of(manifest: str) -> str:
    """The hidden folder in DIR that holds `manifest`'s generations (`.nsys_cc_report.json` → `.nsys_cc_report`)."""
    return manifest[:-len(".json")] if manifest.endswith(".json") else f"{manifest}.d"


def link_text(name: str, store: str) -> str:
    """What the link at `DIR/name` of a report in generations says: `store/current/name`, relative to its folder."""
    return "../" * (len(PurePosixPath(name).parts) - 1) + f"{store}/{CURRENT}/{name}"


def _ours(path: Path, text: str) -> bool:
    """Whether `path` is a link saying exactly `text` (one `publish` placed)."""
    try:
        return os.readlink(path) == text
    except OSError:
        return False


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
            raise InputError(f"cannot write {self.out / name}: {os_reason(exc)}; nothing in {self.out} was changed",
                             param="out_dir") from None
        if name not in self.names:
            self.names.append(name)


@dataclass
class _Earlier:
    """What the manifests of the earlier files say: name → the contents written (sha256); `by_name`: names an older
    manifest (without hashes) lists, which may be written over but are never removed; `generation`: the folder of
    the report shown (its files, name → sha256, in `files`), None before round 4's layout or without one."""

    hashes: dict[str, set[str]] = field(default_factory=dict)
    by_name: set[str] = field(default_factory=set)
    text: bytes | None = None
    generation: Path | None = None
    files: dict[str, str] = field(default_factory=dict)

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


def _generation(store: Path) -> Path | None:
    """The generation `store/current` names: a real folder in `store` (anything else: none)."""
    try:
        name = os.readlink(store / CURRENT)
    except OSError:
        return None
    if not _GENERATION_NAME.fullmatch(name):
        return None
    try:
        return store / name if stat.S_ISDIR(os.lstat(store / name).st_mode) else None
    except OSError:
        return None


def _earlier(out: Path, manifest: str) -> _Earlier:
    """What `out` holds of `manifest`'s report: a manifest of an older layout (a regular file) and the generation
    shown, its files and their recorded contents."""
    earlier = _read_manifest(out / manifest)
    store = out / store_of(manifest)
    if store.is_symlink():
        return earlier
    gen = _generation(store)
    if gen is not None:
        recorded = _read_manifest(gen / GENERATION_MANIFEST).hashes
        earlier.generation = gen
        earlier.files = {n: next(iter(d)) for n, d in recorded.items() if len(d) == 1 and is_plain(n)}
        for name, digest in earlier.files.items():
            earlier.hashes.setdefault(name, set()).add(digest)
    return earlier


def _remove_stale_staging(out: Path, prefix: str) -> None:
    limit = time.time() - STALE_STAGING_SECONDS
    for old in out.glob(f"{prefix}*"):
        with contextlib.suppress(OSError):
            if old.is_dir() and not old.is_symlink() and old.stat().st_mtime < limit:
                shutil.rmtree(old)


def _unlink_ours(out: Path, store: str, names) -> None:
    """Remove the links `publish` placed at `names` in `out` (a link saying anything else, or a file, stays)."""
    for name in names:
        if is_plain(name) and is_inside(out, name) and _ours(out / name, link_text(name, store)):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(out / name)


def _remove_stale_generations(out: Path, store: Path, earlier: _Earlier) -> None:
    """What a killed `publish` left in `store` (never the generation shown): a generation it was building or had
    just replaced, with the links it had placed for names the shown one does not hold, and its switch link. The
    caller holds the lock of `out`, so no live writer is building one."""
    shown = earlier.generation.name if earlier.generation is not None else None
    for entry in list(store.iterdir()):
        if entry.name in (CURRENT, shown):
            continue
        if entry.name.startswith(f"{CURRENT}.tmp-") and entry.is_symlink():
            entry.unlink()
        elif _GENERATION_NAME.fullmatch(entry.name) and entry.is_dir() and not entry.is_symlink():
            left = _read_manifest(entry / GENERATION_MANIFEST).hashes
            _unlink_ours(out, store.name, [n for n in left if n not in earlier.files])
            shutil.rmtree(entry, ignore_errors=True)


def publish(out_dir: str | os.PathLike, build: Callable[[Stage], None], *, manifest: str,
            what: str = "the report") -> dict[str, Path]:
    """Replace the files an earlier `publish` with the same `manifest` wrote in `out_dir` by those `build` writes,
    as a whole — a SIGKILL or a power loss included: `build(stage)` writes every file into a new generation folder,
    `out_dir/<store>/g-…/` (`store_of(manifest)`, `Stage.file`); each name of the report in `out_dir` is a relative
    link `store/current/<name>`, and one rename of the link `store/current` to the new generation shows the new
    report instead of the earlier one. Ctrl-C is held until that rename (`signals_deferred`). Every step before it
    leaves the earlier report shown (links for new names lead nowhere yet), every step after it the new one (links
    for names no longer written lead nowhere until removed), so an interrupted or failed write leaves the earlier
    report or the new one, never a mix; a full disk is an InputError naming the file, nothing changed. On a file
    system without symbolic links the files are renamed into place one by one (round 3's way: Ctrl-C and failures
    still leave a whole report, a SIGKILL between two renames a mix).

    Only files are touched that this writer puts in place or can prove it wrote: every generation records each
    file's sha256 (`out_dir/manifest` is a link to the shown one's record). A file in the way that it did not write
    (or that changed since) is refused; a link in the way is replaced (its target is never written); a file of the
    shown report edited through its link is refused where the new report writes the name, and otherwise left in
    place as the user's own plain file. Files of an older layout (plain files its manifest proves) are first taken
    into a generation, their content unchanged. Returns name → path in `out_dir`, in the order written."""
    out = check_out_dir(out_dir, what)
    folder = Folder(out)
    with folder.lock(what):
        return _publish(folder, build, manifest, what)


def check_publishable(out_dir: str | os.PathLike, names, *, manifest: str, what: str = "the report") -> None:
    """InputError when `publish` with `manifest` would refuse one of `names` in `out_dir` (a file of the user's in the
    way, a link on the way out): for a command that works long before it writes its report (`tune` profiling)."""
    out = check_out_dir(out_dir, what)
    if out.is_dir():
        _check(out, store_of(manifest), list(names), {}, _earlier(out, manifest))


def _publish(folder: Folder, build: Callable[[Stage], None], manifest: str, what: str) -> dict[str, Path]:
    out = folder.root
    try:
        _remove_stale_staging(out, f"{manifest}.tmp-")  # an older layout's staging folders
        store = folder.mkdir(store_of(manifest))
        earlier = _earlier(out, manifest)
        _remove_stale_generations(out, store, earlier)
        gen = _new_generation(store)
    except OSError as exc:
        raise InputError(f"cannot write {what} to {out}: {_named(exc)}", param="out_dir") from None
    shown = False
    try:
        stage = Stage(gen, out)
        build(stage)
        with signals_deferred():
            shown = _put_in_place(out, store, gen, stage.names, earlier, manifest)
    finally:
        if not shown:
            shutil.rmtree(gen, ignore_errors=True)
            with contextlib.suppress(OSError):
                store.rmdir()  # only when empty: the first report, refused or failed
    return {name: out / name for name in stage.names}


def _manifest_text(files: dict[str, str], replacing: dict[str, set[str]] | None = None) -> str:
    doc: dict = {"format": MANIFEST_FORMAT, "version": MANIFEST_VERSION, "files": files}
    if replacing:
        doc["replacing"] = {k: sorted(v) for k, v in sorted(replacing.items())}
    return json.dumps(doc, indent=1) + "\n"


def _in_the_way(dest: Path) -> InputError:
    return InputError(f"{dest} is in the way: nsys-cc did not write it, or it changed since (move it away or choose "
                      "another out_dir); nothing was changed", param="out_dir")


def _edited(earlier: _Earlier) -> list[str]:
    """The names of the shown generation whose file is no longer what was recorded (edited through its link)."""
    changed = []
    if earlier.generation is not None:
        for name, digest in earlier.files.items():
            p = earlier.generation / name
            try:
                if not stat.S_ISREG(os.lstat(p).st_mode) or sha256(p) != digest:
                    changed.append(name)
            except FileNotFoundError:
                continue
    return changed


def _release_edited(out: Path, store: Path, earlier: _Earlier) -> None:
    """Every file of the shown generation edited since (through its link) becomes the user's own plain file at its
    name (one rename over the link: what a reader finds there is the same), never removed with its generation; one
    whose name no longer holds the link (moved away) is refused, nothing changed."""
    changed = _edited(earlier)
    for name in changed:
        if not _ours(out / name, link_text(name, store.name)):
            raise InputError(f"{earlier.generation}/{name} was edited since nsys-cc wrote it, and {out / name} no "
                             "longer leads to it: move the file out of that folder (or choose another out_dir); "
                             "nothing was changed", param="out_dir")
    for name in changed:
        assert earlier.generation is not None
        os.replace(earlier.generation / name, out / name)
        del earlier.files[name]


def _check(out: Path, store: str, names: list[str], new: dict[str, str], earlier: _Earlier) -> None:
    """Everything in the way of `names`, checked before anything changes (InputError: nothing was changed)."""
    changed = set(_edited(earlier))
    for name in names:
        dest = out / name
        if not is_inside(out, name):
            raise InputError(f"cannot write {dest}: a folder on its way is a link or a file (nsys-cc writes only "
                             f"inside {out}); nothing was changed", param="out_dir")
        if name in changed:
            raise _in_the_way(dest)
        try:
            mode = os.lstat(dest).st_mode
        except FileNotFoundError:
            continue
        if stat.S_ISLNK(mode):
            continue  # nsys-cc's own link, or one that is replaced (its target never written)
        if stat.S_ISREG(mode):
            digest = sha256(dest)
            # An older manifest's names alone prove nothing (the file may have been edited since): refused.
            if digest == new.get(name) or earlier.wrote(name, digest):
                continue
        raise _in_the_way(dest)


def _older_layout(out: Path, names: list[str], new: dict[str, str], earlier: _Earlier) -> dict[str, str]:
    """The plain files of an older layout to take into a generation: at a new name, proven or the same bytes; at a
    name only recorded, proven and of a kind `publish` writes (they are then removed as stale)."""
    found = {}
    for name in {*names, *earlier.hashes}:
        if not is_inside(out, name):
            continue
        try:
            if not stat.S_ISREG(os.lstat(out / name).st_mode):
                continue
            digest = sha256(out / name)
        except OSError:
            continue
        if (name in new and digest == new[name]) or (earlier.wrote(name, digest)
                                                      and (name in new or name.endswith(REMOVABLE_SUFFIXES))):
            found[name] = digest
    return found


def _link_or_copy(src: Path, dst: Path) -> None:
    dst.parent.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(FileNotFoundError):
        dst.unlink()
    try:
        os.link(src, dst)
    except OSError:
        shutil.copyfile(src, dst)  # no hard links here


def _place_link(out: Path, store: Path, name: str, text: str) -> None:
    """`out/name` made a link saying `text` by one rename (whatever was there: a link, a proven file); the link is
    made in `store` first, where a kill leaves it for the next `publish` to remove."""
    dest = out / name
    if _ours(dest, text):
        return
    dest.parent.mkdir(parents=True, exist_ok=True)  # `is_inside` checked: no link on the way
    tmp = store / f"{CURRENT}.tmp-link-{os.getpid()}-{time.monotonic_ns()}"
    os.symlink(text, tmp)
    try:
        os.replace(tmp, dest)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _show(store: Path, gen: Path) -> None:
    """The one rename: `store/current` names `gen`."""
    switch = store / f"{CURRENT}.tmp-{gen.name}"
    with contextlib.suppress(FileNotFoundError):
        switch.unlink()
    os.symlink(gen.name, switch)
    os.replace(switch, store / CURRENT)


def _new_generation(store: Path) -> Path:
    """A new empty generation folder in `store`, readable as the report's files were (mode 0777 less the umask)."""
    gen = Path(tempfile.mkdtemp(dir=store, prefix=GENERATION_PREFIX))
    os.chmod(gen, 0o777 & ~current_umask())
    return gen


def _write_generation_manifest(gen: Path, files: dict[str, str]) -> None:
    with open(gen / GENERATION_MANIFEST, "w", encoding="utf-8") as fh:
        fh.write(_manifest_text(files))
        fh.flush()
        os.fsync(fh.fileno())


def _take_in(out: Path, store: Path, earlier: _Earlier, older: dict[str, str]) -> None:
    """Files of an older layout taken into a generation with the shown one's (hard links, or copies), shown by one
    rename, then each replaced by its link: the content at every name stays the same at every step."""
    gen = _new_generation(store)
    files: dict[str, str] = {}
    try:
        if earlier.generation is not None:
            for name, digest in earlier.files.items():
                if (earlier.generation / name).is_file():
                    _link_or_copy(earlier.generation / name, gen / name)
                    files[name] = digest
        for name, digest in older.items():
            _link_or_copy(out / name, gen / name)
            files[name] = digest
        _write_generation_manifest(gen, files)
        _show(store, gen)
    except BaseException:
        shutil.rmtree(gen, ignore_errors=True)
        raise
    before, earlier.generation, earlier.files = earlier.generation, gen, files
    for name in older:
        earlier.hashes.setdefault(name, set()).add(files[name])
        _place_link(out, store, name, link_text(name, store.name))
    if before is not None:
        shutil.rmtree(before, ignore_errors=True)


def _put_in_place(out: Path, store: Path, gen: Path, names: list[str], earlier: _Earlier, manifest: str) -> bool:
    """Show generation `gen` (holding `names`) in `out` (`publish`); False when this file system has no symbolic
    links and the files were renamed into place one by one instead."""
    new = {name: sha256(gen / name) for name in names}
    try:
        probe = store / f"{CURRENT}.tmp-{gen.name}"
        os.symlink(gen.name, probe)
        probe.unlink()
    except OSError as exc:
        if exc.errno not in _NO_LINKS:
            raise InputError(f"cannot write the report to {out}: {_named(exc)}; nothing was changed",
                             param="out_dir") from None
        _commit(out, gen, names, earlier, manifest)
        return False
    placed: list[str] = []
    try:
        _release_edited(out, store, earlier)  # edited through its link: the user's own plain file from now on
        _check(out, store.name, names, new, earlier)
        _write_generation_manifest(gen, new)
        older = _older_layout(out, names, new, earlier)
        if older:
            _take_in(out, store, earlier, older)
        for name in [*names, manifest]:
            text = link_text(GENERATION_MANIFEST if name == manifest else name, store.name)
            if not _ours(out / name, text):
                _place_link(out, store, name, text)  # until the switch: the earlier file at that name, or nothing
                placed.append(name)
        _show(store, gen)  # the switch: from here on the new report
    except OSError as exc:
        _unlink_ours(out, store.name, [n for n in placed if n not in earlier.files])
        raise InputError(f"cannot put the report in place in {out}: {_named(exc)}; the earlier files were left as "
                         "they were", param="out_dir") from None
    with contextlib.suppress(OSError):  # leftovers of the earlier report, no longer shown
        _unlink_ours(out, store.name, [n for n in earlier.files if n not in new])
        if earlier.generation is not None:
            shutil.rmtree(earlier.generation)
    return True


def _commit(out: Path, staging: Path, names: list[str], earlier: _Earlier, manifest: str) -> None:
    """`publish` on a file system without symbolic links: every file renamed into place, one by one."""
    new = {name: sha256(staging / name) for name in names}
    _check(out, "", names, new, _Earlier(hashes=earlier.hashes, by_name=earlier.by_name, text=earlier.text))
    manifest_path = out / manifest
    try:
        # Until the last rename, both the earlier and the new contents count as written by this writer.
        write_text(manifest_path, _manifest_text(new, earlier.hashes))
    except OSError as exc:
        raise InputError(f"cannot write {manifest_path}: {os_reason(exc)}; nothing in {out} was changed",
                         param="out_dir") from None
    backup = staging / ".earlier"
    moved: list[tuple[Path, Path | None]] = []
    dest = out
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
        for dest_, kept in reversed(moved):
            with contextlib.suppress(OSError):
                if kept is not None:
                    os.replace(kept, dest_)
                else:
                    dest_.unlink()
        with contextlib.suppress(OSError):
            if earlier.text is not None:
                write_bytes(manifest_path, earlier.text)
            else:
                manifest_path.unlink()
        raise InputError(f"cannot put {dest} in place: {os_reason(exc)}; the earlier files in {out} were left as they "
                         "were", param="out_dir") from None
    with contextlib.suppress(OSError):  # the transitional manifest above is a correct record too
        write_text(manifest_path, _manifest_text(new))
    _remove_proven(out, {n: d for n, d in earlier.hashes.items() if n not in new})


def _remove_proven(out: Path, hashes: dict[str, set[str]]) -> list[str]:
    """Remove each file named that is a regular file inside `out` (no link on the way), of a kind `publish` writes,
    with one of the contents recorded; return the names removed."""
    removed = []
    for name, digests in hashes.items():
        if not name.endswith(REMOVABLE_SUFFIXES) or not is_inside(out, name):
            continue
        stale = out / name
        with contextlib.suppress(OSError):
            if stat.S_ISREG(os.lstat(stale).st_mode) and sha256(stale) in digests:
                stale.unlink()
                removed.append(name)
    return removed


def withdraw(out_dir: str | os.PathLike, *, manifest: str) -> list[str]:
    """Remove what an earlier `publish` with `manifest` put in `out_dir` and can prove it wrote, as a whole: the
    link `current` first (every name of the report then leads nowhere at once), then the links and generations; a
    file edited through its link stays as the user's plain file. An older layout's proven files are removed as
    `publish` removes stale files, then its manifest. Returns the names removed. For a report that no longer
    describes its inputs."""
    out = Path(out_dir)
    earlier = _earlier(out, manifest)
    store = out / store_of(manifest)
    removed: list[str] = []
    with signals_deferred():
        if earlier.generation is not None:
            with contextlib.suppress(OSError, InputError):
                _release_edited(out, store, earlier)
                os.unlink(store / CURRENT)
                removed = [n for n in earlier.files if _ours(out / n, link_text(n, store.name))]
                _unlink_ours(out, store.name, earlier.files)
                if _ours(out / manifest, link_text(GENERATION_MANIFEST, store.name)):
                    os.unlink(out / manifest)
                _remove_stale_generations(out, store, _Earlier())
                store.rmdir()
        legacy = _read_manifest(out / manifest)
        removed += _remove_proven(out, legacy.hashes)
        if legacy.text is not None:
            with contextlib.suppress(OSError):
                (out / manifest).unlink()
    return removed
