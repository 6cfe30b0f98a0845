"""What the readers and analyses may ask of a trace: the `TraceSource` and `Trace` protocols, and the two facts
about an export file that every opener shares (the SQLite magic bytes, the read-only URI).

`nsys_cc.trace.reader.Trace` (what `open_trace` returns) implements both protocols. The table readers
(`cuda.py`, `nvtx.py`, `bulk.py`) need only a `TraceSource`; analyses (`nsys_cc.analysis.projection`, …) take
a `Trace`. Analyses keep what they derive from a trace in their own caches keyed by the trace object
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
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, runtime_checkable

import pandas as pd

from .. import inputs
from . import frames
from .frames import lists_columns

# The first 16 bytes of every SQLite 3 database file.
SQLITE_MAGIC = b"SQLite format 3\x00"

# pandas ≥ 3 always copies on write: a shallow copy is then a frame whose changes never reach the original.
_COPY_ON_WRITE = int(pd.__version__.split(".")[0]) >= 3


def readonly_uri(path: str | os.PathLike) -> str:
    """SQLite URI that opens `path` read-only and immutable: nothing is ever written to the file (no journal, no
    index, no lock), and SQLite does not look for changes made by others (an export never changes)."""
    # The file name's own bytes, %-encoded: a name that is not UTF-8 (Python holds it with surrogate escapes) too.
    return f"file:{urllib.parse.quote(os.fsencode(Path(path).resolve()))}?mode=ro&immutable=1"


# Seconds one SQL statement may run (issue 32, G01: a generated column or view can make a query run for hours, and
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


def is_sqlite(path: str | os.PathLike) -> bool:
    """True when the file starts with the SQLite magic bytes."""
    with inputs.open_file(path, "trace") as fh:  # a FIFO or a device is refused, never waited on
        return fh.read(len(SQLITE_MAGIC)) == SQLITE_MAGIC


def handed_out(frame: pd.DataFrame) -> pd.DataFrame:
    """`frame` as given to a caller: a new DataFrame object that shares no writable data with `frame`, so changing
    it leaves the cached original as it was. With pandas ≥ 3 (copy-on-write) a shallow copy does that and costs
    nothing per row (measured: 20 µs for a 5 M-row frame; a deep copy, 0.9 s and 0.5 GiB); older pandas gets a
    deep copy."""
    return frame.copy(deep=not _COPY_ON_WRITE)


@dataclass(frozen=True)
class TraceInfo:
    """What an export holds (`Trace.info()`, `nsys-cc info`): where it is, which nsys wrote it, whether it has CUDA
    and NVTX data, and every table with its row count.

    - `path`: the file opened (.sqlite or .nsys-rep); `sqlite_path`: the SQLite export read (the same file, or the
      cached export of a report).
    - `nsys_version`, `schema_version`: as the export's metadata says (None when it does not).
    - `has_cuda`: CUDA API calls and GPU work (kernels, copies, sets or graphs) present; `has_nvtx`: NVTX events.
    - `tables`: table name → rows, read-only.
    """

    path: str
    sqlite_path: str
    nsys_version: str | None
    schema_version: str | None
    has_cuda: bool
    has_nvtx: bool
    tables: Mapping[str, int]

    def __repr__(self) -> str:
        exported = f" (exported to {self.sqlite_path})" if self.sqlite_path != self.path else ""
        data = ", ".join(kind for kind, has in (("CUDA", self.has_cuda), ("NVTX", self.has_nvtx)) if has) or "none"
        return (f"TraceInfo({self.path}{exported}: nsys {self.nsys_version or 'unknown'}, schema "
                f"{self.schema_version or 'unknown'}, data: {data}, {len(self.tables)} tables, "
                f"{sum(self.tables.values()):,} rows)")

    def to_dict(self) -> dict:
        """Plain JSON-able data (`nsys-cc info --format json`)."""
        return {"path": self.path, "sqlite_path": self.sqlite_path, "nsys_version": self.nsys_version,
                "schema_version": self.schema_version, "has_cuda": self.has_cuda, "has_nvtx": self.has_nvtx,
                "tables": dict(self.tables)}


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
class Trace(TraceSource, Protocol):
    """An opened export with its tables (what analyses use). Every table accessor returns a frame the caller may
    change freely (`handed_out`); `has_loaded(table)` says whether that table was already read, so an analysis
    can reuse it instead of reading fewer columns again."""

    @property
    def nsys_version(self) -> str | None: ...

    @property
    def has_cuda(self) -> bool: ...

    def info(self) -> TraceInfo:
        """What the export holds: paths, versions, CUDA/NVTX presence, tables → rows (`TraceInfo`)."""
        ...

    @lists_columns(("Columns", frames.NVTX_RANGES))
    def nvtx_ranges(self, names: Collection[str] | None = None, *, prefixes: Collection[str] = (),
                    nesting: bool = True, warn: bool = True) -> pd.DataFrame:
        """NVTX push/pop and start/end ranges (definitions in `nsys_cc.trace.nvtx`); `names` / `prefixes` narrow
        the read to those ranges, `nesting=False` leaves `level` and `parent_id` <NA>; names that match nothing
        warn with the closest names unless `warn=False` (`ExportTrace.nvtx_ranges`)."""
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
