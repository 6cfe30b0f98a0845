"""Files written so that nobody ever sees half of one, and signals that wait until a change is complete.

- `write_text(path, text)` / `write_bytes`: into a temporary file in the same directory, flushed, then renamed over
  `path` (`os.replace`, atomic on POSIX): a reader sees the old content or the new, never a mix; a failure (a full
  disk, a file too large, Ctrl-C) leaves the old file as it was. A symbolic link at `path` is replaced by the file,
  its target is never written.
- `signals_deferred()`: SIGINT, SIGTERM and SIGHUP received inside it take effect when it ends (as
  KeyboardInterrupt, or the signal's own handler), so a few renames that belong together are not split by Ctrl-C.
"""

from __future__ import annotations

import contextlib
import os
import signal
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

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
