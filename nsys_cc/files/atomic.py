"""Files written so that nobody ever sees half of one.

`write_text(path, text)` / `write_bytes`: into a temporary file in the same directory, flushed, then renamed over
`path` (`os.replace`, atomic on POSIX): a reader sees the old content or the new, never a mix; a failure (a full
disk, a file too large, Ctrl-C) leaves the old file as it was. A symbolic link at `path` is replaced by the file, its
target is never written.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


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
        os.chmod(tmp, mode & ~current_umask())
        os.replace(tmp, p)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        if exc.filename is None or os.fspath(exc.filename) == os.fspath(tmp):  # a full disk names the file written
            raise OSError(exc.errno, exc.strerror, os.fspath(p)) from None
        raise
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return p


def write_text(path: str | os.PathLike, text: str, *, mode: int = 0o644) -> Path:
    """`write_bytes` of `text` in UTF-8."""
    return write_bytes(path, text.encode("utf-8"), mode=mode)


_UMASK: int | None = None


def current_umask() -> int:
    """The process's umask (read once: reading it means setting it)."""
    global _UMASK
    if _UMASK is None:
        current = os.umask(0o022)
        os.umask(current)
        _UMASK = current
    return _UMASK
