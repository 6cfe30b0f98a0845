"""Finding the Nsight Systems command-line tool (`nsys`) and its version.

Search order of `find_nsys()`:
1. `$NSYS` — the path of an nsys binary;
2. `nsys` on `$PATH`;
3. `$NSYS_CC_NSYS_PREFIX/usr/lib/nsight-systems/bin/nsys` — another install prefix (as made by
   `scripts/install_nsys.sh PREFIX`);
4. `<repo>/.nsys/usr/lib/nsight-systems/bin/nsys` — the project-local install of `make nsys`
   (`<repo>` is the directory that holds the `nsys_cc` package).
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
from pathlib import Path

from ..errors import NsysNotFoundError

# Where `scripts/install_nsys.sh PREFIX` puts the binary inside PREFIX (the layout of NVIDIA's Debian packages).
BIN_IN_PREFIX = Path("usr/lib/nsight-systems/bin/nsys")
REPO_ROOT = Path(__file__).resolve().parents[2]


def _runnable(path: str | os.PathLike) -> str | None:
    p = Path(path)
    return str(p) if p.is_file() and os.access(p, os.X_OK) else None


def find_nsys() -> str | None:
    """Path of the nsys binary to use, or None when there is none (search order in the module docstring)."""
    env = os.environ.get("NSYS")
    if env and _runnable(env):
        return _runnable(env)
    on_path = shutil.which("nsys")
    if on_path:
        return on_path
    prefix = os.environ.get("NSYS_CC_NSYS_PREFIX")
    if prefix and _runnable(Path(prefix) / BIN_IN_PREFIX):
        return _runnable(Path(prefix) / BIN_IN_PREFIX)
    return _runnable(REPO_ROOT / ".nsys" / BIN_IN_PREFIX)


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
