"""Reading an Nsight Systems export read-only (the format `format_nsys`): `ExportTrace`, opened by `open_file` (what
`nsys_cc.open_trace` calls for a file of this format).

A `.sqlite` export is opened through SQLAlchemy on a read-only, immutable SQLite connection
(`file:…?mode=ro&immutable=1`): nothing is ever written to the user's file, no index is created in it, no side file
is created next to it. An immutable connection does not see a `-wal` file (nor a hot `-journal`), so a file whose
committed data is partly there (a copy switched to WAL mode and written by another tool; nsys never writes one) is
read through a private copy instead: the file and its side file copied into a 0700 temporary folder, folded together
there by SQLite, removed when the trace is closed.
A `.nsys-rep` report is first exported with nsys into a content-addressed cache (see `export.py`).

`ExportTrace` (the `nsys_cc.trace.Trace` protocol, `source.py`) exposes the export's metadata and its tables as
DataFrames (`nvtx_ranges()`, `cuda_api()`, `kernels()`, `memops()`, `graph_launches()`, `gpu_ops()`); every
accessor returns an empty frame with the documented columns when the export lacks the tables (nsys creates
tables lazily). Each table is read once and kept; callers get a frame of their own (`source.handed_out`:
changing it never changes a later result).

Errors: whatever the file holds — a truncated or corrupt database, missing tables or columns, values of a
type nsys never writes, ranges that end before they start — `open_file` and every accessor raise only
`NsysCCError` subclasses (`InputError`, `NsysNotFoundError`, `ExportError`) with a one-line message naming
the file. Any other exception is a bug in nsys_cc. Text that is not valid UTF-8 (NVTX messages are the
application's bytes) is read with U+FFFD in place of the bad bytes.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sqlite3
import tempfile
import threading
from collections.abc import Collection, Iterator, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from .. import inputs, progress
from ..arguments import many
from ..errors import InputError
from . import cuda, frames, nvtx
from .capabilities import Recorder
from .connection import connect, connect_readonly, too_slow
from .description import TraceDescription, of_export
from .export import export_report
from .format_nsys import FORMAT, is_sqlite
from .frames import lists_columns
from .pages import small_pages
from .source import Closable, TraceInfo, handed_out, quote_identifier

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine

# Tables whose presence makes a SQLite file an Nsight Systems export.
META_TABLES = ("EXPORT_META_DATA", "META_DATA_EXPORT")


# Longest part of an exception text quoted in a one-line error (values can be megabytes of text).
QUOTE_CHARS = 160


def _quote(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text if len(text) <= QUOTE_CHARS else text[: QUOTE_CHARS - 1] + "…"


class ExportTrace(Closable):
    """One Nsight Systems export, opened read-only (implements the `nsys_cc.trace.Trace` protocol).

    Attributes:
        path: the file the user gave (a .sqlite or a .nsys-rep).
        sqlite_path: the SQLite file actually read (the cached export for a .nsys-rep).
        nsys_version: version of the nsys that wrote the export (EXPORT_PRODUCT_VERSION), or None.
        schema_version: EXPORT_SCHEMA_VERSION of the export, or None.
        tables: every table of the export → its row count.
        has_cuda: CUPTI_ACTIVITY_KIND_RUNTIME has rows and so does one of KERNEL/MEMCPY/MEMSET/GRAPH_TRACE.
        has_nvtx: NVTX_EVENTS has rows.
        engine: a SQLAlchemy engine on the export (read-only connections), made on first use: nsys_cc reads
            through the standard library's sqlite3 (one read-only connection per thread), so that opening a trace
            does not import SQLAlchemy.
    """

    format = FORMAT.name
    capabilities = FORMAT.capabilities

    def __init__(self, path: str | os.PathLike, sqlite_path: Path):
        self.path = str(path)
        self.sqlite_path = sqlite_path
        self._connect = connect_readonly(sqlite_path)
        self._local = threading.local()  # this thread's connection, and the `_opened` count it belongs to
        self._connections: list[sqlite3.Connection] = []
        self._opened = 0  # times the connections were closed (a connection of an earlier count is closed)
        self._lock = threading.Lock()
        self._engine: Engine | None = None
        self._private: tempfile.TemporaryDirectory | None = None  # a private copy of a WAL-mode file (open_trace)
        self._closed = False  # `close()` was called: every read raises TraceClosedError
        self._described: TraceDescription | None = None  # where it ran (`describe`), asked of the file once
        self._tables: dict[str, pd.DataFrame] = {}
        self._strings: Mapping[int, str] | None = None
        self._columns: dict[str, tuple[str, ...]] = {}
        self.views: frozenset[str] = frozenset()  # views among the names (`_count_tables`)
        try:
            with self.reading():
                self.tables = self._count_tables()
                meta = self._metadata()
        except BaseException:
            self.close()
            raise
        if not (set(META_TABLES) & set(self.tables) or "NVTX_EVENTS" in self.tables or self._cupti_tables()):
            self.close()
            raise InputError(
                f"{self.path} is not an Nsight Systems SQLite export: "
                "no EXPORT_META_DATA/META_DATA_EXPORT and no NVTX or CUDA tables"
            )
        self.nsys_version: str | None = meta.get("EXPORT_PRODUCT_VERSION") or meta.get("NSIGHT_SYSTEMS_VERSION")
        self.schema_version: str | None = meta.get("EXPORT_SCHEMA_VERSION")

    # -- context manager ---------------------------------------------------------------------------------
    def __enter__(self) -> ExportTrace:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        """Close every connection to the export (and remove the private copy of a WAL-mode file). A closed trace
        answers no more queries (TraceClosedError); its `info()` and `path` stay."""
        with self._lock:
            self._closed = True
            connections, self._connections = self._connections, []
            engine, self._engine = self._engine, None
            self._opened += 1
        for conn in connections:
            conn.close()
        if engine is not None:
            engine.dispose()
        if self._private is not None:
            self._private.cleanup()

    @property
    def engine(self) -> Engine:
        """A SQLAlchemy engine on the export (read-only connections), made on first use."""
        self._check_open()
        with self._lock:
            if self._engine is None:
                from sqlalchemy import create_engine

                self._engine = create_engine("sqlite://", creator=self._connect)
            return self._engine

    def _connection(self) -> sqlite3.Connection:
        """This thread's read-only connection to the export (opened on first use, kept until `close`)."""
        self._check_open()
        conn, opened = getattr(self._local, "conn", (None, -1))
        if conn is None or opened != self._opened:
            conn = self._connect()
            with self._lock:
                self._connections.append(conn)
                self._local.conn = conn, self._opened
        return conn

    def __repr__(self) -> str:
        return (f"Trace({self.path!r}, nsys {self.nsys_version}, {len(self.tables)} tables"
                f"{', closed' if self._closed else ''})")

    # -- schema ------------------------------------------------------------------------------------------
    @property
    def _source(self) -> str:
        """The file named in error messages: the user's path, and for a report the export actually read."""
        if Path(self.path).expanduser() == self.sqlite_path or self._private is not None:
            return self.path
        return f"{self.path} (exported to {self.sqlite_path})"

    @contextlib.contextmanager
    def reading(self) -> Iterator:
        """A raw DBAPI connection to the export. Failures while reading become InputError naming the file:
        SQLite errors (a missing table or column, a corrupt or truncated file) and values that do not convert
        (text or blobs where nsys writes integers, NULL where it never does, integers beyond 64 bits)."""
        try:
            conn = self._connection()
        except sqlite3.Error as exc:
            raise InputError(f"{self._source}: cannot open as SQLite: {_quote(exc)}") from None
        try:
            yield conn
        except sqlite3.OperationalError as exc:
            slow = too_slow(conn, self._source, exc)
            if slow is not None:
                raise slow from None
            if "no such" not in str(exc):
                raise InputError(f"{self._source} is a corrupt or truncated SQLite file: {_quote(exc)}") from None
            raise InputError(
                f"{self._source} is not a complete Nsight Systems export ({_quote(exc)}): "
                "export it again with `nsys export --type sqlite`"
            ) from None
        except sqlite3.DatabaseError as exc:
            raise InputError(f"{self._source} is a corrupt or truncated SQLite file: {_quote(exc)}") from None
        except (ValueError, TypeError, OverflowError) as exc:
            raise self._damaged(exc) from None

    def _damaged(self, exc: Exception) -> InputError:
        return InputError(
            f"{self._source} holds a value an Nsight Systems export never has ({type(exc).__name__}: "
            f"{_quote(exc)}): the file is damaged"
        )

    def _from_file(self, table: str, build) -> pd.DataFrame:
        """`build(self)`, read once and kept; the caller gets its own frame (`handed_out`). Values of the wrong type
        can get past SQL and fail later (text compared with integers, a blob where nsys writes text): the file's
        fault, so InputError too."""
        self._check_open()
        if table not in self._tables:
            try:
                with small_pages():
                    self._tables[table] = build(self)
            except (ValueError, TypeError, OverflowError) as exc:
                raise self._damaged(exc) from None
        return handed_out(self._tables[table])

    def _count_tables(self) -> dict[str, int]:
        with self.reading() as conn:
            # a view of a table's name is no table nsys wrote (the file was edited): said as such where the table is
            # looked for, never read (its rows have no rowid order) nor called missing (issue 45)
            self.views = frozenset(r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='view'"))
            names = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table' ORDER BY name")]
            return {name: conn.execute(f"SELECT count(*) FROM {quote_identifier(name)}").fetchone()[0]
                    for name in names}

    def _metadata(self) -> dict[str, str]:
        meta: dict[str, str] = {}
        with self.reading() as conn:
            for table in ("META_DATA_CAPTURE", *META_TABLES):
                if self.has_table(table):
                    rows = conn.execute(f"SELECT name, value FROM {quote_identifier(table)}")
                    meta.update({str(k): str(v) for k, v in rows})
        return meta

    def _cupti_tables(self) -> list[str]:
        return [t for t in self.tables if t.startswith("CUPTI_ACTIVITY_KIND_")]

    def has_table(self, name: str) -> bool:
        """True when the export has a table `name` (even an empty one)."""
        return name in self.tables

    def rows(self, name: str) -> int:
        """Row count of table `name`, 0 when absent."""
        return self.tables.get(name, 0)

    def columns(self, table: str) -> tuple[str, ...]:
        """Column names of `table` (empty when absent); columns differ between nsys versions."""
        self._check_open()
        if table not in self._columns:
            if not self.has_table(table):
                return ()
            with self.reading() as conn:
                info = conn.execute(f"PRAGMA table_info({quote_identifier(table)})")
                self._columns[table] = tuple(r[1] for r in info)
        return self._columns[table]

    @property
    def has_nvtx(self) -> bool:
        return self.rows("NVTX_EVENTS") > 0

    def count(self, table: str) -> int:
        """Rows of the export's tables behind the accessor named `table`, from their row counts (before rows whose end
        is missing or before their start are dropped): "cuda_api" (CUPTI RUNTIME and DRIVER), "kernels", "memops"
        (MEMCPY and MEMSET), "graph_launches" (GRAPH_TRACE), "gpu_ops" (all four), "nvtx_ranges" (NVTX_EVENTS: marks
        and domain rows included); 0 for any other name."""
        return sum(self.rows(t) for t in _COUNTED.get(table, ()))

    @property
    def has_cuda(self) -> bool:
        gpu = ("KERNEL", "MEMCPY", "MEMSET", "GRAPH_TRACE")
        return self.rows("CUPTI_ACTIVITY_KIND_RUNTIME") > 0 and any(
            self.rows(f"CUPTI_ACTIVITY_KIND_{t}") > 0 for t in gpu
        )

    def info(self) -> TraceInfo:
        """What the export holds (`nsys-cc info` shows it): paths, versions, whether CUDA/NVTX data is present,
        tables → rows. `.to_dict()` gives plain data."""
        read = self.path if self._private is not None else str(self.sqlite_path)  # a WAL file: its own data
        return TraceInfo(path=self.path, sqlite_path=read, nsys_version=self.nsys_version,
                         schema_version=self.schema_version, has_cuda=self.has_cuda, has_nvtx=self.has_nvtx,
                         tables=MappingProxyType(dict(self.tables)),
                         description=self._described if self._closed else self.describe())

    @property
    def recorder(self) -> Recorder:
        """What recorded the export: nsys, in the version the export states (`nsys_version`)."""
        return Recorder("nsys", self.nsys_version)

    def no_range_table(self) -> str | None:
        """Why the export holds no NVTX ranges at all, with what to do (no NVTX_EVENTS table: traced without NVTX; a
        view of that name: the file was edited), or None when it has the table."""
        if self.has_table("NVTX_EVENTS"):
            return None
        if "NVTX_EVENTS" in self.views:
            return ("its NVTX_EVENTS is a view, not the table nsys exports (the file was edited): export the report "
                    "again, or make NVTX_EVENTS a table")
        return "the trace has no NVTX_EVENTS table (profile with `nsys profile -t nvtx`)"

    def api_times(self) -> dict[str, np.ndarray]:
        """The CUDA API calls' start_ns, end_ns, correlation_id, global_tid as int64 arrays, row for row as
        `cuda_api()`: from its frame when it was read, else only these columns of the export (reading is the cost on
        big exports)."""
        return cuda.call_arrays(self.cuda_api()) if self.has_loaded("cuda_api") else cuda.api_times(self)

    def op_times(self) -> dict:
        """The GPU ops' kind (int8 codes into `cuda.OP_KINDS`), name (Categorical), start_ns, end_ns, correlation_id,
        global_pid, row for row as `gpu_ops()`: from its frame when it was read, else only these columns."""
        return cuda.op_arrays(self.gpu_ops()) if self.has_loaded("gpu_ops") else cuda.op_times(self)

    def has_graph_nodes(self) -> bool:
        """Whether the export holds kernels of CUDA graphs traced node by node (a kernel with a `graphNodeId`), which
        share their graph launch's correlation id."""
        if "graphNodeId" not in self.columns(cuda.KERNEL):
            return False
        with self.reading() as conn:  # one row at most: is any kernel a graph's node?
            return conn.execute(f"SELECT 1 FROM {quote_identifier(cuda.KERNEL)} WHERE graphNodeId IS NOT NULL "
                                "LIMIT 1").fetchone() is not None

    # -- DataFrames (read once, kept; each caller gets its own frame) ---------------------------------------
    def describe(self) -> TraceDescription:
        """Where it ran, as the export says (`description.of_export`: devices, the driver's CUDA version, engine);
        asked of the file once, kept."""
        if self._described is None:
            with self.reading() as conn:
                self._described = of_export(conn, self.has_table, self.has_cuda)
        return self._described

    def has_loaded(self, table: str) -> bool:
        """True when the accessor named `table` ("nvtx_ranges", "cuda_api", "kernels", "memops", "graph_launches",
        "gpu_ops") already read its table, so asking for it again costs nothing."""
        return table in self._tables

    def strings(self) -> Mapping[int, str]:
        """StringIds as a read-only mapping id → value (empty when the table is absent)."""
        self._check_open()
        if self._strings is None:
            with self.reading() as conn:
                rows = dict(conn.execute("SELECT id, value FROM StringIds")) if self.has_table("StringIds") else {}
            self._strings = MappingProxyType(rows)
        return self._strings

    @lists_columns(("Columns", frames.NVTX_RANGES))
    def nvtx_ranges(self, names: Collection[str] | None = None, *, prefixes: Collection[str] = (),
                    nesting: bool = True, warn: bool = True) -> pd.DataFrame:
        """NVTX push/pop and start/end ranges; definitions in `nsys_cc.trace.nvtx`.

        `names` / `prefixes`: only the ranges whose name or qualified name is one of `names`, or whose name starts
        with one of `prefixes` (`nsys_cc.trace.nvtx.matches`); SQLite leaves the others out, so on an NVTX-heavy
        trace this costs the rows asked for (plus one scan), not all of them. `nesting=False`: `level` and
        `parent_id` are <NA>, not worked out (nesting needs every range of the thread: with `names`, all rows'
        times are read for it).
        A bare string is one name (or prefix), as a one-item list (`nsys_cc.arguments.many`).
        When `names` (without prefixes) match no range, the empty frame comes with an `NsysCCWarning` naming the
        trace's closest names (a typo is not silently nothing; `warn=False`: a read that only asks whether a range
        is there).
        Raises InputError when a range ends before it starts (nsys never writes one; every duration ≥ 0)."""
        names = None if names is None else [str(n) for n in many(names, "names")]
        prefixes = [str(p) for p in many(prefixes, "prefixes")]
        if warn and names and not prefixes:
            found = self.nvtx_ranges(names, nesting=nesting, warn=False)
            if found.empty:
                nvtx.warn_no_such_names(self, names)
            return found
        whole = names is None and not prefixes
        if whole and nesting:
            return self._from_file("nvtx_ranges", _checked_ranges)
        key = f"nvtx_ranges:{None if names is None else sorted(names)!r}:{sorted(prefixes)!r}:{nesting}"
        if "nvtx_ranges" in self._tables and key not in self._tables:  # the whole table is here: pick from it
            full = self._tables["nvtx_ranges"]
            part = full if whole else nvtx.names_of_rows(
                full[nvtx.matches(full, names or (), prefixes)].reset_index(drop=True))
            if not nesting:
                part = nvtx.without_nesting(part)
            self._tables[key] = part
        return self._from_file(key, lambda t: _checked_ranges(t, names, prefixes, nesting))

    @lists_columns(("Columns", frames.NVTX_RANGES))
    def python_frames(self, *, nesting: bool = True) -> pd.DataFrame:
        """Always empty: an export times no Python frame (nsys samples Python call stacks, it records no ranges of
        them); the columns of `nvtx_ranges`."""
        self._check_open()
        return nvtx.empty_ranges(nesting)

    @lists_columns(("Columns", frames.CUDA_API))
    def cuda_api(self) -> pd.DataFrame:
        """CUDA runtime and driver API calls (CUPTI_ACTIVITY_KIND_RUNTIME, and _DRIVER when present)."""
        return self._from_file("cuda_api", cuda.read_api)

    @lists_columns(("Columns", frames.KERNELS))
    def kernels(self) -> pd.DataFrame:
        """GPU kernels, one row per kernel execution (raw rows; `CostCoefficientResult.kernel_summary` aggregates)."""
        return self._from_file("kernels", cuda.read_kernels)

    @lists_columns(("Columns", frames.MEMOPS))
    def memops(self) -> pd.DataFrame:
        """GPU memcpy and memset operations (CUPTI_ACTIVITY_KIND_MEMCPY, then _MEMSET)."""
        return self._from_file("memops", cuda.read_memops)

    @lists_columns(("Columns", frames.GRAPH_LAUNCHES))
    def graph_launches(self) -> pd.DataFrame:
        """Whole CUDA-graph executions (CUPTI_ACTIVITY_KIND_GRAPH_TRACE)."""
        return self._from_file("graph_launches", cuda.read_graph_launches)

    @lists_columns(("Columns", frames.GPU_OPS))
    def gpu_ops(self) -> pd.DataFrame:
        """Every GPU operation: kernels, then memcpy, memset and graph launches (each table in rowid order)."""
        return self._from_file("gpu_ops", cuda.gpu_ops)


# The export's tables behind each accessor (`ExportTrace.count`).
_COUNTED = {
    "cuda_api": (cuda.RUNTIME, cuda.DRIVER),
    "kernels": (cuda.KERNEL,),
    "memops": (cuda.MEMCPY, cuda.MEMSET),
    "graph_launches": (cuda.GRAPH_TRACE,),
    "gpu_ops": cuda.OP_TABLES,
    "nvtx_ranges": ("NVTX_EVENTS",),
}


def _checked_ranges(trace: ExportTrace, names: Collection[str] | None = None, prefixes: Collection[str] = (),
                    nesting: bool = True) -> pd.DataFrame:
    ranges = nvtx.read_ranges(trace, names, prefixes=prefixes, nesting=nesting)
    backwards = ranges[ranges["duration_ns"] < 0]
    if len(backwards):
        first = backwards.iloc[0]
        if int(first["start_ns"]) <= int(first["end_ns"]):  # the duration overflowed int64: no time nsys writes
            raise InputError(
                f"{trace._source}: {len(backwards)} NVTX range(s) have impossible timestamps (first: NVTX_EVENTS row "
                f"{first['range_id']}, start {first['start_ns']}, end {first['end_ns']}: a span longer than 2^63 ns, "
                "int64 sentinels such as a never-closed end, not times on a trace's timeline): the export is damaged"
            )
        raise InputError(
            f"{trace._source}: {len(backwards)} NVTX range(s) end before they start (first: NVTX_EVENTS row "
            f"{first['range_id']}, start {first['start_ns']} > end {first['end_ns']}): the export is damaged"
        )
    return ranges


def _export_beside(report: Path) -> Path | None:
    """`X.sqlite` beside the report `X.nsys-rep` when it is that report's export, as `nsys export` writes it by
    default and `nsys stats` reuses it: a SQLite file at least as new as the report whose export record names the
    report's file as its input (`EXPORT_META_DATA.EXPORT_INPUT_FILE`); else None (the report is exported)."""
    beside = report.with_suffix(".sqlite")
    try:
        if beside == report or not beside.is_file() or beside.stat().st_mtime < report.stat().st_mtime:
            return None
        if not is_sqlite(beside):
            return None
        with contextlib.closing(connect(f"{beside.resolve().as_uri()}?mode=ro", uri=True)) as conn:
            row = conn.execute("SELECT value FROM EXPORT_META_DATA WHERE name = 'EXPORT_INPUT_FILE'").fetchone()
    except (OSError, InputError, sqlite3.Error):
        return None
    return beside if row is not None and row[0] == report.name else None


# Bytes 18 and 19 of a SQLite header: the file format's write and read versions, 2 in WAL mode.
_WAL_HEADER = b"\x02\x02"
# A WAL file holding at least one frame is longer than its 32-byte header.
_WAL_HEADER_SIZE = 32


def _pending(path: Path) -> Path | None:
    """The side file holding data of `path` that is not in the file itself: a `-wal` of a WAL-mode database with
    frames in it (committed transactions not yet checkpointed), or a rollback `-journal` left by a writer that
    stopped mid-transaction (its changes in the file must be undone). None when there is none (as for every export
    nsys writes). Names as SQLite derives them: from the file's real path."""
    real = path.resolve()
    with inputs.open_file(real, "trace") as fh:
        header = fh.read(20)
    wal, journal = Path(f"{real}-wal"), Path(f"{real}-journal")
    with contextlib.suppress(OSError):
        if header[18:20] == _WAL_HEADER and wal.is_file() and wal.stat().st_size > _WAL_HEADER_SIZE:
            return wal
        if header[18:20] != _WAL_HEADER and journal.is_file() and journal.stat().st_size > 0:
            return journal
    return None


def _private_copy(path: Path, side: Path) -> tuple[Path, tempfile.TemporaryDirectory]:
    """A copy of `path` and its `side` file in a private temporary folder (mode 0700), opened once read-write there
    so that SQLite folds the WAL in (or rolls the journal back): the copy then holds exactly the committed data and
    reads like any export. The user's files are only read; SQLite's -shm goes into the private folder."""
    folder = tempfile.TemporaryDirectory(prefix="nsys_cc-wal-")
    copy = Path(folder.name) / "trace.sqlite"
    try:
        with progress.step(f"{path}: committed data is in {side.name}; reading it through a private copy",
                           always=True):
            shutil.copyfile(path.resolve(), copy)
            shutil.copyfile(side, Path(f"{copy}{side.name[len(path.resolve().name):]}"))
            conn = connect(str(copy))
            try:
                conn.execute("PRAGMA journal_mode=DELETE").fetchall()  # checkpoints a WAL, rolls a journal back
            except sqlite3.Error as exc:
                slow = too_slow(conn, str(path), exc)
                if slow is not None:
                    raise slow from None
                raise
            finally:
                conn.close()
    except InputError:
        folder.cleanup()
        raise
    except (OSError, sqlite3.Error) as exc:
        folder.cleanup()
        detail = exc.strerror if isinstance(exc, OSError) and exc.strerror else _quote(exc)
        raise InputError(f"{path}: part of its data is in {side} and cannot be read ({detail}); open it once with "
                         "sqlite3 to fold it in, or export the report again") from None
    return copy, folder


def open_file(path: str | os.PathLike, *, nsys: str | None = None, cache_dir: str | os.PathLike | None = None,
              timeout: float | None | str = "env", **_options) -> ExportTrace:
    """An Nsight Systems export (.sqlite) or report (.nsys-rep) opened read-only (what `registry.open_trace` calls for
    a file of this format, `format_nsys`): a report read from its export beside it, else exported into the cache
    (`open_trace` says how); an export whose committed data is partly in a `-wal` or hot journal read through a
    private copy. Raises InputError, NsysNotFoundError or ExportError with a one-line reason."""
    p = Path(path).expanduser()
    try:
        report = not is_sqlite(p)
    except OSError as exc:
        raise InputError(f"{path}: cannot read: {exc.strerror}") from None
    if report:
        beside = _export_beside(p)
        if beside is not None:
            progress.say(f"reading {beside.name}, the export of {p.name} beside it (delete it to export again)")
            return ExportTrace(path, beside)
        return ExportTrace(path, export_report(p, nsys=nsys, cache_dir=cache_dir, timeout=timeout))
    try:
        side = _pending(p)
    except OSError as exc:
        raise InputError(f"{path}: cannot read: {exc.strerror}") from None
    if side is None:
        return ExportTrace(path, p)
    copy, folder = _private_copy(p, side)
    try:
        trace = ExportTrace(path, copy)
    except BaseException:
        folder.cleanup()
        raise
    trace._private = folder  # removed with the trace (close, or when it is collected)
    return trace
