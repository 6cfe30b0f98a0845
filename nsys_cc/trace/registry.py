"""The trace formats nsys_cc reads, one line each (`FORMATS`), and the one place that tells a file's format.

Each format is one module (`format_nsys.py`, `format_kineto.py`: a `format.TraceFormat`) with a reader module that
implements the `Trace` protocol (`reader.py`, `kineto.py`); nothing above `nsys_cc.trace` asks which format a trace
is: it asks the trace (`Trace.capabilities`, `Trace.recorder`, the protocol's tables), or this registry.

The one rule (`head_of`, then each format in order): a file is of the first format that `recognise`s its first bytes
(for certain: magic bytes, top-level keys) — `recognised(path)`, what the sweep's manifests and the folders of traces
are told apart by; when none does, `open_trace` hands it to the first format that `claims` it, so that its reader
says what is wrong with it (`reader_of`); else it is no trace, and says so in one line.

Names: a trace's label is its file name without its format's suffix (`trace_stem`); a folder's traces are the files
named with one (`traces_in`; a plain `.json` only when a format recognises its content); a run's trace is `trace` +
the first suffix found (`trace_named`).
Nothing here imports a reader or pandas until a trace is opened.
"""

from __future__ import annotations

import errno
import gzip
import os
import stat
import zlib
from pathlib import Path
from typing import TYPE_CHECKING

from .. import inputs
from ..arguments import one_path
from ..errors import InputError
from . import format_kineto, format_nsys
from .format import HEAD_BYTES, Head, TraceFormat
from .kineto_stream import GZIP_MAGIC

if TYPE_CHECKING:
    from .source import Trace

# THE REGISTRY: one line per format, in the order their rules are tried (and their suffixes preferred).
FORMATS: tuple[TraceFormat, ...] = (
    format_nsys.FORMAT,
    format_kineto.FORMAT,
)

# The text that `claims` reads: what a reader was handed by before the registry read more of a file.
_START = 256
# The suffix of every JSON file, traces or not (manifests, status.json, X.bench.json): it alone names no trace.
_ANY_JSON = (".json",)

__all__ = ["FORMATS", "format_named", "head_of", "open_trace", "reader_of", "recognised", "suffixes", "trace_named",
           "trace_stem", "traces_in"]


def format_named(name: str) -> TraceFormat:
    """The registered format called `name` (`Trace.format`, `TraceInfo.format`); ValueError for another name."""
    for fmt in FORMATS:
        if fmt.name == name:
            return fmt
    raise ValueError(f"no trace format is named {name!r} (formats: {', '.join(f.name for f in FORMATS)})")


def head_of(path: str | os.PathLike) -> Head:
    """The first bytes of `path` (`format.Head`), read once through `nsys_cc.inputs` (a FIFO or a device is refused
    with InputError, never waited on; OSError when it cannot be read)."""
    with inputs.open_file(path, "trace") as fh:
        raw = fh.read(HEAD_BYTES)
        text, start, damaged, compressed = raw, raw[:_START], False, raw.startswith(GZIP_MAGIC)
        if compressed:
            fh.seek(0)
            try:
                with gzip.GzipFile(fileobj=fh, mode="rb") as gz:
                    start = text = gz.read(_START)
                    try:
                        text = start + gz.read(HEAD_BYTES - len(start))
                    except (EOFError, OSError, zlib.error):  # damaged past its start: what came out is the text
                        pass
            except (EOFError, OSError, zlib.error):
                start, text, damaged = b"", b"", True
    return Head(raw=raw, text=text, start=start, suffix=Path(path).suffix.lower(), gzip=compressed, damaged=damaged)


def recognised(path: str | os.PathLike) -> TraceFormat | None:
    """The format whose rule recognises `path` for certain (module docstring), None for none. InputError when it is
    no regular file, OSError when it cannot be read."""
    head = head_of(path)
    return next((fmt for fmt in FORMATS if fmt.recognise(head)), None)


def reader_of(path: str | os.PathLike) -> TraceFormat | None:
    """The format whose reader `open_trace` hands `path` to: the one that recognises it, else the first that claims
    it (its reader says what is wrong), else None. InputError / OSError as `recognised`."""
    head = head_of(path)
    return (next((fmt for fmt in FORMATS if fmt.recognise(head)), None)
            or next((fmt for fmt in FORMATS if fmt.claims(head)), None))


def suffixes() -> tuple[str, ...]:
    """Every registered format's file-name suffixes, in the registry's order (each before its own endings)."""
    return tuple(s for fmt in FORMATS for s in fmt.suffixes)


def _suffix_of(name: str) -> str | None:
    return next((s for s in suffixes() if name.endswith(s) and len(name) > len(s)), None)


def trace_stem(path: str | os.PathLike) -> str:
    """The path without its trace suffix (`.sqlite`, `.nsys-rep`, a torch trace's `.pt.trace.json.gz`, `.json`, …:
    `suffixes`): a model's label from its file name, and where `X.bench.json` and `X.metrics.json` sit beside
    `X.sqlite`. A name without one is returned whole."""
    text = os.fspath(path)
    suffix = _suffix_of(text)
    return text[: -len(suffix)] if suffix else text


def trace_named(folder: str | os.PathLike, label: str) -> Path | None:
    """`folder/<label><suffix>` for the first registered suffix such a file exists with (an export before its report),
    None when there is none."""
    for suffix in suffixes():
        candidate = Path(folder) / f"{label}{suffix}"
        if candidate.exists():
            return candidate
    return None


def traces_in(folder: str | os.PathLike) -> dict[str, str]:
    """The traces of `folder` by label, in name order: each file named with a registered suffix, under its name
    without it — by its name alone (a damaged `X.sqlite` is still X's trace, whose reader says what is wrong), except
    a file named only `.json`, the suffix of every JSON file (`X.bench.json`, `X.metrics.json` beside a trace): a
    trace when a format recognises its content (`recognised`). Where one label has several files (an export beside
    its report), the one of the earliest suffix."""
    found: dict[str, tuple[int, str]] = {}
    order = suffixes()
    for name in sorted(os.listdir(folder)):
        suffix = _suffix_of(name)
        path = os.path.join(folder, name)
        if suffix is None or not os.path.isfile(path):
            continue
        if suffix in _ANY_JSON:
            try:
                if recognised(path) is None:
                    continue
            except (InputError, OSError):
                continue
        label, rank = name[: -len(suffix)], order.index(suffix)
        if label not in found or rank < found[label][0]:
            found[label] = (rank, path)
    return {label: found[label][1] for label in sorted(found)}


def open_trace(path: str | os.PathLike, *, nsys: str | None = None, cache_dir: str | os.PathLike | None = None,
               timeout: float | None | str = "env") -> Trace:
    """Open a trace of any registered format read-only — an Nsight Systems export (.sqlite) or report (.nsys-rep), a
    PyTorch-profiler (Kineto) trace (.json or .json.gz) —; which one it is, is told by the file's content
    (`reader_of`), whatever its name. Returns the format's `Trace` (`ExportTrace`, `KinetoTrace`).

    A report is exported once with `nsys` (default: `find_nsys()`) into `cache_dir` (default
    `$NSYS_CC_CACHE` or `~/.cache/nsys_cc/exports`) and the cached export is reused afterwards; the export may take
    `timeout` seconds (None: no limit; default `$NSYS_CC_EXPORT_TIMEOUT` or 1800).
    A report with its own export beside it (`X.sqlite` next to `X.nsys-rep`, as `nsys export` and `profile` leave
    them) is read from that export when it is at least as new as the report: nothing is exported again.
    `path` is one path (a list holding one is that path); anything else is an InputError.
    Raises InputError, NsysNotFoundError or ExportError with a one-line reason.
    """
    path = one_path(path, "path")
    p = Path(path).expanduser()
    try:
        st = p.stat()
    except (FileNotFoundError, NotADirectoryError):
        raise InputError(f"{path}: no such file") from None
    except OSError as exc:  # a folder on the way that may not be searched (chmod 000), a loop of links, …
        if exc.errno == errno.ENAMETOOLONG:  # the CLI's own line names the limit
            raise
        raise InputError(f"{path}: cannot read: {exc.strerror or exc}") from None
    if not stat.S_ISREG(st.st_mode):
        raise InputError(f"{path} is not a file")
    try:
        fmt = reader_of(p)
    except OSError as exc:
        raise InputError(f"{path}: cannot read: {exc.strerror}") from None
    if fmt is None:
        if st.st_size == 0:
            raise InputError(f"{path} is empty (0 bytes): not an Nsight Systems export")
        kinds = [kind for f in FORMATS for kind in f.kinds]
        raise InputError(f"{path} is neither {' nor '.join(kinds)}")
    return fmt.open_file(path, nsys=nsys, cache_dir=cache_dir, timeout=timeout)
