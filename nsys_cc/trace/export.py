""".nsys-rep → SQLite through `nsys export`, cached by the report's content.

The cache file is `<cache dir>/<sha256 of the report's bytes>.sqlite`, so a report is exported once
whatever its name or location, and a changed report gets a new export. The cache dir is the
`cache_dir` argument, else `$NSYS_CC_CACHE`, else `~/.cache/nsys_cc/exports`; when it cannot be
written, a per-user directory under the system temp dir is used instead. nsys writes to a temporary
name in the cache dir that is renamed (`os.replace`, atomic) into place only after a successful
export, so two analyses of the same report at once never see a half-written file. A cache entry that is not
a SQLite file (say, emptied by a full disk) is exported again.
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import tempfile
import time
from pathlib import Path

from .. import progress
from ..errors import ExportError, InputError, NsysNotFoundError
from .nsys import find_nsys, nsys_version
from .source import is_sqlite

# First bytes of every .nsys-rep / .qdrep written by Nsight Systems 2021–2026.
REPORT_MAGIC = b"NVIDIA Tegra Profiler Report"
# nsys's message for a report written by a newer nsys, e.g. "Version number is invalid: 2024@6@2@25-2462…".
_NEWER_REPORT = re.compile(r"Version number is invalid: (\d{4})@(\d+)@(\d+)")


def is_report(path: Path) -> bool:
    """True when the file starts like an Nsight Systems report."""
    with open(path, "rb") as fh:
        return fh.read(len(REPORT_MAGIC)) == REPORT_MAGIC


def content_hash(path: Path) -> str:
    """sha256 (hex) of the file's bytes."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def default_cache_dir() -> Path:
    """`$NSYS_CC_CACHE`, else `~/.cache/nsys_cc/exports`."""
    env = os.environ.get("NSYS_CC_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "nsys_cc" / "exports"


def _writable_dir(preferred: Path) -> Path:
    try:
        preferred.mkdir(parents=True, exist_ok=True)
        probe = tempfile.NamedTemporaryFile(dir=preferred, prefix=".probe-", delete=True)
        probe.close()
        return preferred
    except OSError:
        fallback = Path(tempfile.gettempdir()) / f"nsys_cc-exports-{os.getuid()}"
        try:
            fallback.mkdir(mode=0o700, parents=True, exist_ok=True)
        except OSError as exc:
            raise InputError(
                f"cannot write the export cache {preferred} nor {fallback}: {exc.strerror}; "
                "set NSYS_CC_CACHE to a writable directory"
            ) from None
        progress.say(f"export cache {preferred} is not writable; using {fallback}")
        return fallback


def _cached(target: Path) -> bool:
    """True when the cache holds an export at `target`; a leftover that is not a SQLite file does not count."""
    if not target.exists():
        return False
    if not target.is_file():
        raise InputError(f"the export cache entry {target} is not a file: remove it")
    return is_sqlite(target)


def _explain_failure(report: Path, nsys: str, output: str) -> str:
    newer = _NEWER_REPORT.search(output)
    if newer:
        year, major, minor = newer.groups()
        return (
            f"{report} was written by nsys {year}.{major}.{minor}, installed nsys is {nsys_version(nsys)}: "
            f"export it with nsys ≥ {year}.{major} (`nsys export --type sqlite {report.name}`) and pass the .sqlite"
        )
    lines = [ln.strip() for ln in output.splitlines() if "error" in ln.lower()]
    reason = lines[-1] if lines else (output.strip().splitlines() or ["no output"])[-1]
    return f"nsys could not export {report} (is it a complete .nsys-rep?): {reason[:300]}"


# A temporary export older than this was left by a process that was killed mid-export (SIGKILL, power loss);
# a live export of even a multi-GB report finishes well within it.
STALE_TEMP_SECONDS = 24 * 3600


def _remove_stale_temporaries(cache: Path) -> None:
    """Delete hidden `.<hash>-*.sqlite` files that killed exports left in the cache (best effort)."""
    limit = time.time() - STALE_TEMP_SECONDS
    for leftover in cache.glob(".*-*.sqlite"):
        try:
            if leftover.stat().st_mtime < limit:
                leftover.unlink()
        except OSError:
            pass


def export_report(report: Path, *, nsys: str | None = None, cache_dir: str | os.PathLike | None = None) -> Path:
    """Path of the SQLite export of `report`, exporting it with nsys unless the cache already holds it.

    Raises InputError (empty report), NsysNotFoundError (no nsys), ExportError (nsys refused the report).
    """
    if report.stat().st_size == 0:
        raise InputError(f"{report} is empty (0 bytes): not an Nsight Systems report")
    cache = _writable_dir(Path(cache_dir) if cache_dir is not None else default_cache_dir())
    target = cache / f"{content_hash(report)}.sqlite"
    if _cached(target):
        return target
    nsys = nsys or find_nsys()
    if nsys is None:
        raise NsysNotFoundError(f"{report} needs nsys to export: run `make nsys` or pass an existing .sqlite")
    _remove_stale_temporaries(cache)
    try:
        fd, tmp_name = tempfile.mkstemp(dir=cache, prefix=f".{target.stem[:16]}-", suffix=".sqlite")
    except OSError as exc:
        raise InputError(f"cannot write into the export cache {cache}: {exc.strerror}") from None
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        with progress.step(f"exporting {report.name} to SQLite with nsys", always=True):
            try:
                done = subprocess.run(
                    [nsys, "export", "--type", "sqlite", "-f", "true", "-o", str(tmp), str(report)],
                    capture_output=True,
                    text=True,
                    errors="replace",
                )
            except OSError as exc:
                raise NsysNotFoundError(f"cannot run nsys at {nsys}: {exc.strerror or exc}") from None
        if done.returncode != 0 or tmp.stat().st_size == 0:
            raise ExportError(_explain_failure(report, nsys, done.stdout + "\n" + done.stderr))
        try:
            os.replace(tmp, target)
        except OSError as exc:
            raise InputError(f"cannot store the export of {report} as {target}: {exc.strerror}") from None
    finally:
        tmp.unlink(missing_ok=True)
    return target
