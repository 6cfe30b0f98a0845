"""Reading a file the user names (a metrics dump, a manifest): only ever a regular file, never a wait.

`read_bytes(path, what)` opens without blocking (`O_NONBLOCK`: a FIFO that nobody writes, a terminal or a device
would otherwise wait forever), checks with `fstat` on the open file (no race with a rename) that it is a regular
file, and reads it. Every failure is an InputError naming the file as `what` (a "metrics dump", a "manifest").
"""

from __future__ import annotations

import os
import stat

from .errors import InputError


def read_bytes(path: str | os.PathLike, what: str) -> bytes:
    """The bytes of the regular file at `path` (module docstring); InputError when it is missing, not a regular
    file (a directory, a FIFO, a device, a socket) or cannot be read."""
    name = os.fsdecode(os.fspath(path))
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise InputError(f"{what} not found: {name}") from None
    except OSError as exc:
        raise InputError(f"cannot read the {what} {name}: {exc.strerror or exc}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            kind = "a directory" if stat.S_ISDIR(st.st_mode) else "a FIFO (named pipe)" if stat.S_ISFIFO(
                st.st_mode) else "a device or socket"
            raise InputError(f"the {what} {name} is {kind}, not a file")
        os.set_blocking(fd, True)
        with os.fdopen(fd, "rb", closefd=True) as fh:
            fd = -1
            return fh.read()
    except OSError as exc:
        raise InputError(f"cannot read the {what} {name}: {exc.strerror or exc}") from None
    finally:
        if fd >= 0:
            os.close(fd)
