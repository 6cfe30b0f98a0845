"""What nsys-cc may replace or remove under `-o DIR`: only what it can prove it wrote — the one rule of every route
(`profile` interleaved or one process per model, nsys or torch; `tune`'s rounds; a sweep's cells), as `publishing` has
it for reports.

A file is proven by its content: its sha256 among those a record of nsys-cc's lists for its name (a run's
`done.json` records every file its run left, `digests`). Nothing else proves a file — a name alone never does, except
where a caller says so for a layout written before records held digests (`unproven`'s `accept`). A link is proven
whatever it says: removing or replacing it loses nothing (its target is never touched). A folder is proven when all
it holds is.

`unproven(folder, accept)` lists what a folder holds that is not proven, so that a caller refuses before it changes
anything, or leaves the folder with what is not its own (`remove_proven`).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import stat
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

# What a record of digests says: relative name (POSIX) → the sha256 of the file nsys-cc left there.
Record = Mapping[str, str]


def sha256(path: str | os.PathLike) -> str:
    """sha256 (hex) of a regular file's bytes, read without following a link at `path`."""
    digest = hashlib.sha256()
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    with os.fdopen(fd, "rb") as fh:
        if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
            raise OSError(0, "not a regular file", os.fspath(path))
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _entries(folder: Path, prefix: str = "") -> Iterable[tuple[str, Path, os.stat_result]]:
    """(relative name, path, lstat) of every entry under `folder`, depth first, links never followed."""
    try:
        names = sorted(os.listdir(folder))
    except FileNotFoundError:
        return
    for name in names:
        path = folder / name
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            continue
        rel = f"{prefix}{name}"
        yield rel, path, st
        if stat.S_ISDIR(st.st_mode):
            yield from _entries(path, f"{rel}/")


def digests(folder: str | os.PathLike, *, skip: Iterable[str] = ()) -> dict[str, str]:
    """name → sha256 of every regular file under `folder` (names relative, POSIX; `skip`: names left out, e.g. the
    record itself): what a record keeps so that the folder's files can be proven later."""
    left_out = set(skip)
    return {rel: sha256(path) for rel, path, st in _entries(Path(folder))
            if stat.S_ISREG(st.st_mode) and rel not in left_out}


def by_digest(*records: Record | None) -> Callable[[str, Path], bool]:
    """`accept` for `unproven`: a regular file whose sha256 one of `records` lists for its name."""
    known: dict[str, set[str]] = {}
    for record in records:
        for name, digest in (record or {}).items():
            if isinstance(name, str) and isinstance(digest, str):
                known.setdefault(name, set()).add(digest)

    def accept(name: str, path: Path) -> bool:
        if name not in known:
            return False
        try:
            return sha256(path) in known[name]
        except OSError:
            return False

    return accept


def unproven(folder: str | os.PathLike, accept: Callable[[str, Path], bool]) -> list[str]:
    """What `folder` holds that nsys-cc cannot prove it wrote (relative names, depth first): each regular file that
    `accept(name, path)` does not accept, each special file (a FIFO, a socket); links and folders are proven (a
    folder by what it holds). Empty when the whole folder may be removed."""
    found = []
    for rel, path, st in _entries(Path(folder)):
        if stat.S_ISLNK(st.st_mode) or stat.S_ISDIR(st.st_mode):
            continue
        if not (stat.S_ISREG(st.st_mode) and accept(rel, path)):
            found.append(rel)
    return found


def remove_proven(folder: str | os.PathLike, accept: Callable[[str, Path], bool]) -> list[str]:
    """Remove from `folder` every link and every file `accept` proves, then every folder left empty (`folder`
    included); return what stays (`unproven`'s names). Nothing is followed through a link."""
    root = Path(folder)
    left = []
    entries = list(_entries(root))
    for rel, path, st in entries:
        if stat.S_ISDIR(st.st_mode):
            continue
        if stat.S_ISLNK(st.st_mode) or (stat.S_ISREG(st.st_mode) and accept(rel, path)):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
        else:
            left.append(rel)
    for _, path, st in reversed(entries):
        if stat.S_ISDIR(st.st_mode):
            with contextlib.suppress(OSError):
                os.rmdir(path)
    with contextlib.suppress(OSError):
        os.rmdir(root)
    return left


def shown(names: list[str], most: int = 3) -> str:
    """A few names for a line (`a, b, c and 4 more`)."""
    head = ", ".join(names[:most])
    return head + (f" and {len(names) - most} more" if len(names) > most else "")
