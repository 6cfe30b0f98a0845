"""What the readers and analyses may ask of a trace: the `TraceSource` and `Trace` protocols, and the read-only URI
every opener of an export shares.

Analyses (`nsys_cc.analysis.forwards.projection`, …) take a `Trace`: what every reader gives, whatever the file's
format (`registry.py`); what a format gives beyond the tables is asked of the trace (`capabilities`, `recorder`,
`no_range_table()`, …), never of the format's name. `ExportTrace` (`reader.py`, an Nsight Systems export) implements
it and `TraceSource`, the SQLite reading surface the table readers (`cuda.py`, `nvtx.py`, `bulk.py`) need;
`KinetoTrace` (`kineto.py`, a PyTorch-profiler trace) only `Trace`. Inside `nsys_cc.trace`, what only an export has is
asked for through `sqlite_source(trace)` (None for another format); nothing above it runs SQL.
Analyses keep what they derive from a trace in their own caches keyed by the trace object
(`weakref.WeakKeyDictionary`), not on the reader.

Frames a `Trace` hands out are the user's to change: changing one (assigning a column, `.loc[...] = …`,
`inplace=True`) never changes what the trace or any analysis returns later (`handed_out`).
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import urllib.parse
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, Protocol, runtime_checkable

import numpy as np
import pandas as pd

from .. import inputs
from ..errors import TraceClosedError
from . import frames
from .capabilities import Capabilities, Recorder
from .description import TraceDescription
from .frames import lists_columns

# pandas ≥ 3 always copies on write: a shallow copy is then a frame whose changes never reach the original.
_COPY_ON_WRITE = int(pd.__version__.split(".")[0]) >= 3


def readonly_uri(path: str | os.PathLike) -> str:
    """SQLite URI that opens `path` read-only and immutable: nothing is ever written to the file (no journal, no
    index, no lock), and SQLite does not look for changes made by others (an export never changes)."""
    # The file name's own bytes, %-encoded: a name that is not UTF-8 (Python holds it with surrogate escapes) too.
    return f"file:{urllib.parse.quote(os.fsencode(Path(path).resolve()))}?mode=ro&immutable=1"


# Seconds one SQL statement may run (a generated column or view can make a query run for hours, and
# SIGALRM cannot interrupt SQLite): $NSYS_CC_QUERY_TIMEOUT, 0 for no limit.
ENV_QUERY_TIMEOUT = "NSYS_CC_QUERY_TIMEOUT"
DEFAULT_QUERY_TIMEOUT_S = 600.0

def query_timeout() -> float | None:
    """Seconds one statement may run: `$NSYS_CC_QUERY_TIMEOUT` (0: no limit), else DEFAULT_QUERY_TIMEOUT_S."""
    return inputs.seconds(os.environ.get(ENV_QUERY_TIMEOUT, ""), ENV_QUERY_TIMEOUT, default=DEFAULT_QUERY_TIMEOUT_S)


def quote_identifier(name: str) -> str:
    """`name` as an SQL identifier: in double quotes, each double quote doubled. Every table or column name that
    reaches SQL goes through this — a name read from the file is the file's text, and a table named `a"b` (or one
    whose name is SQL meant to run) must stay one name."""
    if "\x00" in name:
        raise ValueError(f"an SQL name holds a NUL character: {name!r}")
    return '"' + name.replace('"', '""') + '"'


def handed_out(frame: pd.DataFrame) -> pd.DataFrame:
    """`frame` as given to a caller: a new DataFrame object that shares no writable data with `frame`, so changing
    it leaves the cached original as it was. With pandas ≥ 3 (copy-on-write) a shallow copy does that and costs
    nothing per row (measured: 20 µs for a 5 M-row frame; a deep copy, 0.9 s and 0.5 GiB); older pandas gets a
    deep copy."""
    return frame.copy(deep=not _COPY_ON_WRITE)


@dataclass(frozen=True)
class TraceInfo:
    """What a trace holds (`Trace.info()`, `nsys-cc info`): where it is, what wrote it, whether it has CUDA data and
    ranges, and what it is made of.

    - `path`: the file opened (.sqlite, .nsys-rep, or a PyTorch-profiler .json/.json.gz).
    - `format`: "nsys" (an Nsight Systems export) or "kineto" (a PyTorch-profiler trace).
    - `sqlite_path`: the SQLite export read (the same file, or the cached export of a report); None for a Kineto trace.
    - `nsys_version`, `schema_version`: as the file's metadata says (None when it does not; a Kineto trace has its
      `schemaVersion` and no nsys version).
    - `has_cuda`: CUDA API calls and GPU work (kernels, copies, sets or graphs) present; `has_nvtx`: ranges present
      (NVTX events; a Kineto trace's `user_annotation`s).
    - `tables`: table name → rows (an export), or event category → events (a Kineto trace), read-only.
    - `details`: what else the format tells (a Kineto trace: the versions it states, devices, rank, Python frames,
      range names → counts); empty for an export.
    - `description`: where it ran (`Trace.describe()`: platform, GPUs, runtime, engine and version, rank).
    """

    path: str
    sqlite_path: str | None
    nsys_version: str | None
    schema_version: str | None
    has_cuda: bool
    has_nvtx: bool
    tables: Mapping[str, int]
    format: str = "nsys"
    details: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    description: TraceDescription | None = None

    def __repr__(self) -> str:
        data = ", ".join(kind for kind, has in (("CUDA", self.has_cuda), ("ranges" if self.format == "kineto"
                                                                           else "NVTX", self.has_nvtx)) if has)
        data = data or "none"
        if self.format == "kineto":
            return (f"TraceInfo({self.path}: PyTorch profiler (Kineto), schema {self.schema_version or 'unknown'}, "
                    f"data: {data}, {len(self.tables)} event categories, {sum(self.tables.values()):,} events)")
        exported = f" (exported to {self.sqlite_path})" if self.sqlite_path != self.path else ""
        return (f"TraceInfo({self.path}{exported}: nsys {self.nsys_version or 'unknown'}, schema "
                f"{self.schema_version or 'unknown'}, data: {data}, {len(self.tables)} tables, "
                f"{sum(self.tables.values()):,} rows)")

    def to_dict(self) -> dict:
        """Plain JSON-able data (`nsys-cc info --format json`)."""
        out = {"path": self.path, "format": self.format, "sqlite_path": self.sqlite_path,
               "nsys_version": self.nsys_version, "schema_version": self.schema_version, "has_cuda": self.has_cuda,
               "has_nvtx": self.has_nvtx, "tables": dict(self.tables)}
        if self.details:
            out["details"] = _plain(self.details)
        if self.description is not None:
            out["description"] = self.description.to_dict()
        return out


def _plain(value: Any) -> Any:
    """`value` with read-only mappings made dicts (JSON-able)."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


class Closable:
    """What a trace reader shares about being closed: `closed`, and `_check_open` before every read (a closed trace
    answers no more queries: TraceClosedError). The reader sets `_closed` (False when opened, True in `close()`)."""

    path: str
    _closed: bool

    @property
    def closed(self) -> bool:
        """Whether `close()` was called (the end of a `with open_trace(…)` block calls it)."""
        return self._closed

    def _check_open(self) -> None:
        if self._closed:
            raise TraceClosedError(f"{self.path}: the trace is closed (its `with` block ended, or close() was called): "
                                   "open it again with nsys_cc.open_trace(path), or query it inside the block")


@runtime_checkable
class TraceSource(Protocol):
    """The reading surface of an export: schema facts and raw connections (what the table readers use)."""

    @property
    def path(self) -> str: ...

    @property
    def sqlite_path(self) -> Path: ...

    def has_table(self, name: str) -> bool: ...

    def rows(self, name: str) -> int: ...

    def columns(self, table: str) -> tuple[str, ...]: ...

    def reading(self) -> contextlib.AbstractContextManager[sqlite3.Connection]: ...

    def strings(self) -> Mapping[int, str]: ...


@runtime_checkable
class Trace(Protocol):
    """An opened trace with its tables (what analyses use), whatever its format: an Nsight Systems export
    (`ExportTrace`, which is also a `TraceSource`) or a PyTorch-profiler trace (`KinetoTrace`). Every table accessor
    returns a frame the caller may change freely (`handed_out`); `has_loaded(table)` says whether that table was
    already read, so an analysis can reuse it instead of reading fewer columns again. What only an SQLite export has
    (`sqlite_path`, `reading()`, `strings()`, `columns()`, `has_table()`, `rows()`) is asked for through
    `sqlite_source(trace)`."""

    @property
    def path(self) -> str: ...

    def __enter__(self) -> Trace: ...

    def __exit__(self, *exc: object) -> None: ...

    def close(self) -> None:
        """Let go of the file (and what was read of it): a closed trace answers no more queries (TraceClosedError)."""
        ...

    @property
    def format(self) -> str:
        """Its format's name (`registry.FORMATS`): "nsys" (an Nsight Systems export) or "kineto" (a PyTorch-profiler
        trace). For a record, never for a branch: what a format gives is asked of `capabilities`."""
        ...

    @property
    def capabilities(self) -> Capabilities:
        """What the analysis may ask of a trace of its format (`format.Capabilities`: the words its ranges are called
        by, whether engines write their steps into it)."""
        ...

    @property
    def recorder(self) -> Recorder:
        """What recorded it, and its version, as the trace says (`format.Recorder`: "nsys 2024.5.1.113")."""
        ...

    @property
    def nsys_version(self) -> str | None: ...

    @property
    def has_cuda(self) -> bool: ...

    @property
    def has_nvtx(self) -> bool: ...

    def count(self, table: str) -> int:
        """Rows the file holds for the accessor named `table` ("cuda_api", "kernels", "memops", "graph_launches",
        "gpu_ops", "nvtx_ranges", "python_frames"), read from its metadata, before damaged rows are dropped; 0 when it
        has none."""
        ...

    def no_range_table(self) -> str | None:
        """Why the file holds no ranges at all (no table of them, or not the one its recorder writes), in words with
        what to do; None when it has its ranges' table, empty or not."""
        ...

    def api_times(self) -> dict[str, np.ndarray]:
        """What the join of launches to GPU work needs of the CUDA API calls, row for row as `cuda_api()`: start_ns,
        end_ns, correlation_id, global_tid (int64 arrays; `analysis.forwards.launches`)."""
        ...

    def op_times(self) -> dict:
        """What the join needs of the GPU ops, row for row as `gpu_ops()`: kind (int8 codes into `cuda.OP_KINDS`),
        name (Categorical), start_ns, end_ns, correlation_id, global_pid."""
        ...

    def has_graph_nodes(self) -> bool:
        """Whether the trace holds kernels of CUDA graphs recorded node by node, each sharing the correlation id of its
        graph's launch (so shared ids are no damage)."""
        ...

    def info(self) -> TraceInfo:
        """What the trace holds: paths, format, versions, CUDA/range presence, tables → rows (`TraceInfo`)."""
        ...

    def describe(self) -> TraceDescription:
        """Where it ran, as the trace says: platform, GPUs, runtime, engine and version, rank (`TraceDescription`)."""
        ...

    @lists_columns(("Columns", frames.NVTX_RANGES))
    def nvtx_ranges(self, names: Collection[str] | None = None, *, prefixes: Collection[str] = (),
                    nesting: bool = True, warn: bool = True) -> pd.DataFrame:
        """NVTX push/pop and start/end ranges (definitions in `nsys_cc.trace.nvtx`); `names` / `prefixes` narrow
        the read to those ranges, `nesting=False` leaves `level` and `parent_id` <NA>; names that match nothing
        warn with the closest names unless `warn=False` (`ExportTrace.nvtx_ranges`)."""
        ...

    @lists_columns(("Columns", frames.NVTX_RANGES))
    def python_frames(self, *, nesting: bool = True) -> pd.DataFrame:
        """The Python frames the trace times (a PyTorch-profiler trace recorded with stacks), in the columns of
        `nvtx_ranges`; empty for a trace without them (an export)."""
        ...

    @lists_columns(("Columns", frames.CUDA_API))
    def cuda_api(self) -> pd.DataFrame:
        """CUDA runtime and driver API calls."""
        ...

    @lists_columns(("Columns", frames.KERNELS))
    def kernels(self) -> pd.DataFrame:
        """GPU kernels, one row per kernel execution (raw rows; `CostCoefficientResult.kernel_summary` aggregates)."""
        ...

    @lists_columns(("Columns", frames.MEMOPS))
    def memops(self) -> pd.DataFrame:
        """GPU memcpy and memset operations."""
        ...

    @lists_columns(("Columns", frames.GRAPH_LAUNCHES))
    def graph_launches(self) -> pd.DataFrame:
        """Whole CUDA-graph executions (GRAPH_TRACE, recorded with nsys's graph-level tracing)."""
        ...

    @lists_columns(("Columns", frames.GPU_OPS))
    def gpu_ops(self) -> pd.DataFrame:
        """Every GPU operation: kernels, then memcpy, memset and graph launches."""
        ...

    def has_loaded(self, table: str) -> bool: ...


def sqlite_source(trace: Trace) -> TraceSource | None:
    """The SQLite reading surface of `trace` when it is an Nsight Systems export (the trace itself), else None (a
    PyTorch-profiler trace has no SQLite file): what the few SQLite-only users (`nsys-cc info`'s table list, the
    table readers) ask for."""
    return trace if isinstance(trace, TraceSource) else None
