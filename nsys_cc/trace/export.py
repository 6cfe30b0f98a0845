""".nsys-rep → SQLite through `nsys export`, cached by the report's content.

The cache file is `<cache dir>/<sha256 of the report's bytes>.sqlite`, so a report is exported once
whatever its name or location, and a changed report gets a new export. The cache dir is the
`cache_dir` argument, else `$NSYS_CC_CACHE`, else `~/.cache/nsys_cc/exports`; when it cannot be
written, a per-user directory under the system temp dir is used instead, which must be private (a real directory,
owned by the user, mode 0700: checked on every use, refused otherwise — another user could make it first). nsys
writes to a temporary name in the cache dir that is renamed (`os.replace`, atomic) into place only after a
successful export, so two analyses of the same report at once never see a half-written file. Beside each entry
`<hash>.json` records what it was exported from (the report's sha256 and size) and the entry's own size and time;
an entry without it, or that changed since, or that is not a SQLite file (say, emptied by a full disk) is exported
again. An export that takes longer than its timeout (`$NSYS_CC_EXPORT_TIMEOUT`, default 1800 s; the verbs'
`--timeout`) is stopped with an ExportError.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import stat
import subprocess
import tempfile
import time
from pathlib import Path

from .. import inputs, keeper, progress
from ..errors import ExportError, InputError, NsysNotFoundError
from ..files import atomic, users
from ..files.folder import Folder
from .format_nsys import is_sqlite
from .nsys import find_nsys, nsys_version

# Seconds an `nsys export` may take unless NSYS_CC_EXPORT_TIMEOUT (or `--timeout`) says otherwise.
DEFAULT_EXPORT_TIMEOUT_S = 1800.0
ENV_EXPORT_TIMEOUT = "NSYS_CC_EXPORT_TIMEOUT"
RECORD_FORMAT = "nsys_cc.export_record"
# nsys's message for a report written by a newer nsys, e.g. "Version number is invalid: 2024@6@2@25-2462…".
_NEWER_REPORT = re.compile(r"Version number is invalid: (\d{4})@(\d+)@(\d+)")


def content_hash(path: Path) -> str:
    """sha256 (hex) of the file's bytes."""
    digest = hashlib.sha256()
    with inputs.open_file(path, "report") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def default_cache_dir() -> Path:
    """`$NSYS_CC_CACHE`, else `~/.cache/nsys_cc/exports`."""
    env = os.environ.get("NSYS_CC_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "nsys_cc" / "exports"


def fallback_cache_dir() -> Path:
    """The per-user export cache in the system's temporary directory, used when the preferred one cannot be
    written: `<tmp>/nsys_cc-exports-<uid>`, private (see `_private`)."""
    return Path(tempfile.gettempdir()) / f"nsys_cc-exports-{os.getuid()}"


def _private(folder: Path) -> Path:
    """`folder` once it is checked to be private: a real directory (not a link), owned by this user, with no access
    for anyone else (mode 0700). The temporary directory is shared: another user could make the folder first and
    fill it with exports of their own, which an analysis would then read. Checked on every use; InputError if not."""
    return _owned(folder, 0o077, "others may use it (mode {mode}, not 0700)", "is not private",
                  "someone else may have made it")


def _trusted(folder: Path) -> Path:
    """`folder` once checked to be a cache of this user's: a real directory (not a link) owned by you
    (`users.my_uid`) that no one else may write (no group or world write bit). InputError otherwise: another user
    could have planted exports there, which an analysis would read as yours."""
    return _owned(folder, 0o022, "others may write in it (mode {mode})", "is not yours alone",
                  "its entries cannot be trusted")


def _owned(folder: Path, others: int, others_problem: str, verdict: str, consequence: str) -> Path:
    """`folder` when it is a real directory of this user's whose mode has none of the bits `others`; else InputError
    saying every problem (`others_problem` formatted with the mode), `verdict` and `consequence`."""
    try:
        st = os.lstat(folder)
    except OSError as exc:
        raise InputError(f"cannot use the export cache {folder}: {exc.strerror}") from None
    problems = []
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
        problems.append("it is not a directory of its own (a link or a file)")
    else:
        if st.st_uid != users.my_uid():
            problems.append(f"it belongs to user id {st.st_uid}, not to you ({users.my_uid()})")
        if st.st_mode & others:
            problems.append(others_problem.format(mode=f"{stat.S_IMODE(st.st_mode):04o}"))
    if problems:
        raise InputError(f"the export cache {folder} {verdict}: {'; '.join(problems)} — {consequence}; remove it, or "
                         "set NSYS_CC_CACHE to a directory of your own")
    return folder


def _writable_dir(preferred: Path) -> Path:
    try:
        if not preferred.is_dir():
            preferred.mkdir(parents=True, exist_ok=True, mode=0o700)  # private from the start (C01)
        _trusted(preferred)
        probe = tempfile.NamedTemporaryFile(dir=preferred, prefix=".probe-", delete=True)
        probe.close()
        return preferred
    except OSError:
        fallback = fallback_cache_dir()
        try:
            fallback.mkdir(mode=0o700, exist_ok=True)
        except OSError as exc:
            raise InputError(
                f"cannot write the export cache {preferred} nor {fallback}: {exc.strerror}; "
                "set NSYS_CC_CACHE to a writable directory"
            ) from None
        _private(fallback)
        progress.say(f"export cache {preferred} is not writable; using {fallback}")
        return fallback


def _record_path(entry: Path) -> Path:
    """The record beside a cache entry: what it was exported from, and the entry's own size and time."""
    return entry.with_suffix(".json")


RECORD_SHAPE = {"format": str, "report_sha256": str, "report_size": int, "sqlite_size": int, "sqlite_mtime_ns": int}


def _record(report: Path, digest: str, entry: Path) -> dict:
    st, rep = entry.stat(), report.stat()
    return {"format": RECORD_FORMAT, "report_sha256": digest, "report_size": rep.st_size,
            "sqlite_size": st.st_size, "sqlite_mtime_ns": st.st_mtime_ns}


@contextlib.contextmanager
def _cache_lock(cache: Path, exclusive: bool):
    """An advisory lock on the cache folder itself (no lock file): an entry and its record change together under
    the exclusive lock, and are read together under the shared one — two processes that export the same report at
    once never leave one's record beside the other's entry."""
    try:
        fd = os.open(cache, os.O_RDONLY | os.O_DIRECTORY)  # a folder only: never a wait
    except OSError:
        yield
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        yield
    finally:
        os.close(fd)  # releases the lock


def _valid(entry: Path, report: Path, digest: str) -> bool:
    """Whether `entry` is the export this cache made of `report` (content `digest`): its record says so, and the
    entry is still the size and age it was when recorded. Anything else (no record: an older cache or a file put
    there by something else; an entry changed since) is exported again."""
    try:
        with _cache_lock(entry.parent, exclusive=False):
            record = inputs.load_json(_record_path(entry), "export cache record", shape=RECORD_SHAPE)
            st = entry.stat()
            if {st.st_uid, _record_path(entry).stat().st_uid} != {users.my_uid()}:
                return False  # written by someone else: never trusted
    except (OSError, InputError):  # none, a FIFO or another special file, not JSON, misshapen: exported again (C05)
        return False
    return (isinstance(record, dict) and record.get("format") == RECORD_FORMAT
            and record.get("report_sha256") == digest and record.get("report_size") == report.stat().st_size
            and record.get("sqlite_size") == st.st_size and record.get("sqlite_mtime_ns") == st.st_mtime_ns)


def _cached(target: Path, report: Path, digest: str) -> bool:
    """True when the cache holds the export of `report` at `target` (`_valid`); a leftover that is not a SQLite file
    does not count."""
    if not target.exists() and not target.is_symlink():
        return False
    if target.is_symlink() or not target.is_file():
        raise InputError(f"the export cache entry {target} is not a file: remove it")
    return is_sqlite(target) and _valid(target, report, digest)


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


LEDGER = ".nsys_cc-ledger.json"


def _ledger(cache: Path) -> set[str]:
    """The names of the temporary exports this cache started and has not finished (its ledger): the only files it
    ever cleans up. A file it did not record — a user's trace in a folder named by NSYS_CC_CACHE — is never touched."""
    try:
        if not stat.S_ISREG(os.lstat(cache / LEDGER).st_mode):
            return set()
        doc = inputs.load_json(cache / LEDGER, "export cache ledger")
    except (OSError, InputError):
        return set()
    names = doc.get("temporaries") if isinstance(doc, dict) else None
    return {n for n in names if isinstance(n, str) and "/" not in n} if isinstance(names, list) else set()


def _record_temporary(cache: Path, name: str, *, add: bool) -> None:
    with _cache_lock(cache, exclusive=True):
        names = _ledger(cache)
        names = names | {name} if add else names - {name}
        if names:
            Folder(cache).write_text(LEDGER, json.dumps({"temporaries": sorted(names)}) + "\n", mode=0o600)
        else:  # nothing under way: no ledger (the cache holds its entries and their records only)
            Folder(cache).remove(LEDGER)


def _remove_stale_temporaries(cache: Path) -> None:
    """Delete the temporary exports that killed exports left in the cache, older than a day: only those its
    ledger records as its own (best effort)."""
    limit = time.time() - STALE_TEMP_SECONDS
    folder = Folder(cache)
    for name in sorted(_ledger(cache)):
        leftover = cache / name
        try:
            st = os.lstat(leftover)
            if stat.S_ISREG(st.st_mode) and st.st_uid == users.my_uid() and st.st_mtime < limit:
                folder.remove(name)
        except FileNotFoundError:
            pass
        except OSError:
            continue
        with contextlib.suppress(OSError):
            if not leftover.exists():
                _record_temporary(cache, name, add=False)


def export_timeout() -> float | None:
    """Seconds an export may take: `$NSYS_CC_EXPORT_TIMEOUT` (0: no limit), else DEFAULT_EXPORT_TIMEOUT_S."""
    from ..inputs import seconds

    text = os.environ.get(ENV_EXPORT_TIMEOUT, "")
    return seconds(text, ENV_EXPORT_TIMEOUT, default=DEFAULT_EXPORT_TIMEOUT_S)


def _run_export(cmd: list[str], timeout: float | None, report: Path) -> tuple[int, str]:
    """`nsys export` run under its keeper (`nsys_cc.keeper`): stopped with everything it started on a timeout, on
    Ctrl-C, and when nsys-cc itself ends however it ends (a `kill -9` left it exporting into the cache)."""
    proc, alive = keeper.start(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace")
    try:
        output, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _stop(proc, alive)
        raise ExportError(f"nsys export of {report} did not finish within {timeout:g} s (timeout={timeout:g}); "
                          "allow more time (0: no limit), or export it yourself and pass the .sqlite",
                          param="timeout") from None
    except BaseException:
        _stop(proc, alive)
        raise
    keeper.stop_now(alive)
    why = keeper.cannot_run(proc.returncode, output)
    if why is not None:
        raise NsysNotFoundError(f"cannot run nsys at {cmd[0]}: {why}")
    return proc.returncode, output


def _stop(proc: subprocess.Popen, alive: int) -> None:
    """Kill nsys and whatever it started (its keeper does, at once, when its pipe closes), and wait for the keeper."""
    keeper.stop_now(alive)
    proc.communicate()


def export_report(report: Path, *, nsys: str | None = None, cache_dir: str | os.PathLike | None = None,
                  timeout: float | None | str = "env") -> Path:
    """Path of the SQLite export of `report`, exporting it with nsys unless the cache already holds it.

    `timeout`: seconds the export may take (None: no limit; "env", the default: `export_timeout()`); nsys is then
    stopped.
    Raises InputError (empty report, an unusable cache), NsysNotFoundError (no nsys), ExportError (nsys refused the
    report, or ran out of time).
    """
    limit = timeout if timeout is None or isinstance(timeout, (int, float)) else export_timeout()
    if report.stat().st_size == 0:
        raise InputError(f"{report} is empty (0 bytes): not an Nsight Systems report")
    cache = _writable_dir(Path(cache_dir) if cache_dir is not None else default_cache_dir())
    digest = content_hash(report)
    target = cache / f"{digest}.sqlite"
    if _cached(target, report, digest):
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
        _record_temporary(cache, tmp.name, add=True)
        # A refused export raises inside the step: its line then never says "done" before the error.
        with progress.step(f"exporting {report.name} to SQLite with nsys", always=True):
            rc, output = _run_export([nsys, "export", "--type", "sqlite", "-f", "true", "-o", str(tmp), str(report)],
                                     limit, report)
            if rc != 0 or tmp.stat().st_size == 0:
                raise ExportError(_explain_failure(report, nsys, output))
        try:
            with _cache_lock(cache, exclusive=True):
                os.replace(tmp, target)
                atomic.write_text(_record_path(target), json.dumps(_record(report, digest, target)) + "\n",
                                  mode=0o600)
        except OSError as exc:
            raise InputError(f"cannot store the export of {report} as {target}: {exc.strerror}") from None
    finally:
        tmp.unlink(missing_ok=True)
        with contextlib.suppress(OSError):
            _record_temporary(cache, tmp.name, add=False)
    return target
