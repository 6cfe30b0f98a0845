"""Finding the Nsight Systems command-line tool (`nsys`) and its version.

Search order of `find_nsys()`:
1. `$NSYS` — the path of an nsys binary (set to anything else, it is refused: NsysNotFoundError naming the variable;
   a typo there profiled and exported with whichever nsys came next, without a word);
2. `nsys` on `$PATH`;
3. `$NSYS_CC_NSYS_PREFIX/usr/lib/nsight-systems/bin/nsys` — another install prefix (as made by
   `scripts/install_nsys.sh PREFIX`);
4. `nsys` in the bin directory of the running Python environment, beside `nsys-cc` — where `make nsys` links
   the project-local install, so that `.venv/bin/nsys-cc` finds it without an activated environment.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from ..errors import NsysNotFoundError

# Where `scripts/install_nsys.sh PREFIX` puts the binary inside PREFIX (the layout of NVIDIA's Debian packages).
BIN_IN_PREFIX = Path("usr/lib/nsight-systems/bin/nsys")
# The environment's scripts directory (`.venv/bin`): sys.executable is not resolved, so a venv's python stays in it.
ENV_BIN_DIR = Path(sys.executable).parent


def _runnable(path: str | os.PathLike) -> str | None:
    p = Path(path)
    return str(p) if p.is_file() and os.access(p, os.X_OK) else None


def find_nsys() -> str | None:
    """Path of the nsys binary to use, or None when there is none (search order in the module docstring);
    NsysNotFoundError when `$NSYS` is set to something that is no runnable file."""
    env = os.environ.get("NSYS")
    if env:
        if _runnable(env) is None:
            raise NsysNotFoundError(f"NSYS={env!r} is not an executable file: set NSYS to the path of an nsys "
                                    "binary, or unset it to use the nsys on PATH")
        return _runnable(env)
    on_path = shutil.which("nsys")
    if on_path:
        return on_path
    prefix = os.environ.get("NSYS_CC_NSYS_PREFIX")
    if prefix and _runnable(Path(prefix) / BIN_IN_PREFIX):
        return _runnable(Path(prefix) / BIN_IN_PREFIX)
    return _runnable(ENV_BIN_DIR / "nsys")


def require_nsys() -> str:
    """Like `find_nsys()`, but raises NsysNotFoundError when no nsys is found."""
    nsys = find_nsys()
    if nsys is None:
        raise NsysNotFoundError(
            "nsys (Nsight Systems) not found: run `make nsys` to install it into .nsys/, "
            "or set NSYS=/path/to/nsys"
        )
    return nsys


@functools.cache
def nsys_version(nsys: str) -> str:
    """The version of the nsys binary at `nsys`, e.g. "2022.4.2.1" (from `nsys --version`).

    Raises NsysNotFoundError when the binary does not run or prints no version.
    """
    try:
        out = subprocess.run([nsys, "--version"], capture_output=True, text=True, timeout=60)
    except OSError as exc:
        raise NsysNotFoundError(f"cannot run nsys at {nsys}: {exc.strerror or exc}") from None
    except subprocess.TimeoutExpired:
        raise NsysNotFoundError(f"nsys at {nsys} did not answer `--version` within 60 s") from None
    match = re.search(r"(\d{4}\.\d+(?:\.\d+)*)", out.stdout + out.stderr)
    if out.returncode != 0 or match is None:
        raise NsysNotFoundError(f"nsys at {nsys} does not run (`nsys --version` exited {out.returncode})")
    return match.group(1)
