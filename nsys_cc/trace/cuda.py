"""CUDA tables of an export as DataFrames: API calls, kernels, memcpy/memset, graph launches.

Times are int64 ns; `duration_ns = end_ns - start_ns`. `pid` is decoded from globalPid/globalTid
(bits 24–47); `global_pid` keeps the full value, which is what joins GPU work to its API call
(`global_pid == global_tid & PID_MASK` together with `correlation_id`). A NULL correlationId (CUPTI
never writes one for real work) reads as 0, CUPTI's "no correlation". Name columns are Categoricals
resolved from StringIds. Columns missing from an older schema read as NULL (nullable columns) or 0.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass

import numpy as np
import pandas as pd
from pandas.api.types import union_categoricals

from . import frames
from .bulk import (
    NULL_INT,
    categorical,
    categorical_values,
    decode_pid,
    decode_tid,
    nullable,
    read_columns,
)
from .source import TraceSource

RUNTIME = "CUPTI_ACTIVITY_KIND_RUNTIME"
DRIVER = "CUPTI_ACTIVITY_KIND_DRIVER"
KERNEL = "CUPTI_ACTIVITY_KIND_KERNEL"
MEMCPY = "CUPTI_ACTIVITY_KIND_MEMCPY"
MEMSET = "CUPTI_ACTIVITY_KIND_MEMSET"
GRAPH_TRACE = "CUPTI_ACTIVITY_KIND_GRAPH_TRACE"

@dataclass(frozen=True)
class Col:
    """One output column read from one SQL column: `int` (NOT NULL, 0 if the column is missing),
    `nint` (nullable → Int64), `sid` (StringIds id → Categorical name)."""

    out: str
    sql: str
    kind: str = "int"


# Rows of a CUDA table whose end is before their start or missing (NULL), or whose end is past IMPOSSIBLE_NS (the
# int64 sentinel 2⁶³ − 1, not a time): CUPTI writes none, so such a row is damage; as a time it would shift every sum
# it reaches (a NULL end read as 0 is −start ns; an end at 2⁶³ − 1 made one range last 576460752195.6 ms and a
# phase "6941013947022× slower"). They are dropped by every reader below, and counted per trace and table
# (`dropped_rows`) so that the analysis says so.
IMPOSSIBLE_NS = 1 << 62  # ns since the capture began: 146 years
_DROPPED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def dropped_rows(trace: object) -> dict[str, int]:
    """Table → number of its rows dropped so far because their end is missing or before their start (only tables
    already read, and only those with such rows)."""
    try:
        return dict(_DROPPED.get(trace, {}))
    except TypeError:  # a source that cannot be weakly referenced records nothing
        return {}


# Rows a reader left out for a reason of its own, said in its own words (the Kineto reader: GPU ops that start before
# the launch call carrying their correlation id): trace → notes.
_NOTED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def note_dropped(trace: object, note: str) -> None:
    """Record `note` (rows `trace`'s reader left out, and why) for `dropped_note`."""
    try:
        _NOTED.setdefault(trace, []).append(note)
    except TypeError:  # a source that cannot be weakly referenced records nothing
        pass


def dropped_note(trace: object) -> str:
    """The note on the rows `dropped_rows` left out ("" when none): how many of which table, and why; then the notes
    of rows the reader left out for reasons of its own (`note_dropped`)."""
    dropped = dropped_rows(trace)
    try:
        noted = list(_NOTED.get(trace, []))
    except TypeError:
        noted = []
    if not dropped:
        return "; ".join(noted)
    parts = ", ".join(f"{n} of {table}" for table, n in dropped.items())
    return "; ".join([f"dropped {sum(dropped.values())} CUDA row(s) whose end is missing or before their start, or "
                      f"past 2⁶² ns ({parts}): CUPTI writes none, the export is damaged; the times are those of the "
                      "other rows", *noted])


def _damaged(start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Rows whose end is missing (NULL_INT, before any start), before their start, or past IMPOSSIBLE_NS."""
    return (end < start) | (end >= IMPOSSIBLE_NS)


def _timed(trace: TraceSource, table: str, data: dict) -> np.ndarray | None:
    """Positions of the rows of `data` (a read of `table`) to keep: None when all are (end ≥ start), else the rows
    whose end is there and not before their start; the others are counted in `dropped_rows`."""
    if "start_ns" not in data or "end_ns" not in data:
        return None
    bad = _damaged(np.asarray(data["start_ns"]), np.asarray(data["end_ns"]))
    n = int(bad.sum())
    if not n:
        return None
    try:
        _DROPPED.setdefault(trace, {})[table] = n
    except TypeError:
        pass
    return np.flatnonzero(~bad)


def _take(data: dict, keep: np.ndarray | None) -> dict:
    if keep is None:
        return data
    return {k: (v.take(keep) if isinstance(v, pd.Categorical) else np.asarray(v)[keep] if isinstance(v, np.ndarray)
                else v.take(keep).reset_index(drop=True) if isinstance(v, pd.Series) else v[keep])
            for k, v in data.items()}


def _read_arrays(trace: TraceSource, table: str, cols: list[Col], out: dict | None = None) -> dict:
    """`cols` of `table` in rowid order (so separate reads of one table line up row by row), as arrays; `out`
    maps some `int` columns to arrays of the table's row count to fill (see `read_columns`). Without `out`, rows
    whose end is missing or before their start are left out (`dropped_rows`); with it, the caller leaves them out."""
    present = set(trace.columns(table))
    exprs = []
    for c in cols:
        if c.sql not in present:
            exprs.append("0" if c.kind == "int" else str(NULL_INT))
        elif c.out == "end_ns":  # a missing end must not read as 0 (a time): NULL_INT, before every start
            exprs.append(f"coalesce({c.sql}, {NULL_INT})")
        elif c.kind == "int":
            exprs.append(f"coalesce({c.sql}, 0)")
        else:
            exprs.append(f"coalesce({c.sql}, {NULL_INT})")
    data = read_columns(trace, table, exprs, out=[(out or {}).get(c.out) for c in cols])
    result = {}
    for c, v in zip(cols, data):
        result[c.out] = v if c.kind == "int" else nullable(v) if c.kind == "nint" else categorical(v, trace.strings())
    return result if out else _take(result, _timed(trace, table, result))


def _read(trace: TraceSource, table: str, cols: list[Col]) -> pd.DataFrame:
    return pd.DataFrame(_read_arrays(trace, table, cols), copy=False)


def _times(frame: pd.DataFrame) -> pd.DataFrame:
    frame.insert(frame.columns.get_loc("end_ns") + 1, "duration_ns", frame["end_ns"] - frame["start_ns"])
    return frame


def _with_pid(frame: pd.DataFrame, after: str = "global_pid") -> pd.DataFrame:
    frame.insert(frame.columns.get_loc(after) + 1, "pid", decode_pid(frame[after].to_numpy()))
    return frame


@frames.lists_columns(("Columns", frames.CUDA_API))
def read_api(trace: TraceSource) -> pd.DataFrame:
    """CUDA runtime and driver API calls: CUPTI_ACTIVITY_KIND_RUNTIME (eventClass 0 runtime, 1 driver),
    plus a CUPTI_ACTIVITY_KIND_DRIVER table should an export have one."""
    cols = [
        Col("start_ns", "start"),
        Col("end_ns", "end"),
        Col("global_tid", "globalTid"),
        Col("correlation_id", "correlationId"),
        Col("name", "nameId", "sid"),
        Col("event_class", "eventClass"),
    ]
    parts = [_read(trace, RUNTIME, cols)]
    if trace.has_table(DRIVER):
        driver = _read(trace, DRIVER, cols)
        driver["event_class"] = 1
        parts.append(driver)
    frame = pd.concat(parts, ignore_index=True) if len(parts) > 1 else parts[0]
    frame["name"] = frame["name"].astype("category")
    api = frame.pop("event_class").to_numpy()
    frame = _times(frame)
    gtid = frame["global_tid"].to_numpy()
    frame.insert(frame.columns.get_loc("global_tid") + 1, "pid", decode_pid(gtid))
    frame.insert(frame.columns.get_loc("pid") + 1, "tid", decode_tid(gtid))
    frame["api"] = pd.Categorical.from_codes(
        np.select([api == 0, api == 1], [0, 1], 2).astype(np.int8), categories=["runtime", "driver", "other"]
    )
    return frame


# The columns every CUPTI GPU-activity table (KERNEL, MEMCPY, MEMSET, GRAPH_TRACE) starts with.
GPU_ACTIVITY = (
    Col("start_ns", "start"),
    Col("end_ns", "end"),
    Col("device_id", "deviceId"),
    Col("context_id", "contextId"),
    Col("stream_id", "streamId"),
    Col("correlation_id", "correlationId"),
    Col("global_pid", "globalPid"),
)


@frames.lists_columns(("Columns", frames.KERNELS))
def read_kernels(trace: TraceSource) -> pd.DataFrame:
    """GPU kernels (CUPTI_ACTIVITY_KIND_KERNEL)."""
    cols = [
        *GPU_ACTIVITY,
        Col("name", "shortName", "sid"),
        Col("demangled_name", "demangledName", "sid"),
        Col("grid_x", "gridX"),
        Col("grid_y", "gridY"),
        Col("grid_z", "gridZ"),
        Col("block_x", "blockX"),
        Col("block_y", "blockY"),
        Col("block_z", "blockZ"),
        Col("graph_node_id", "graphNodeId", "nint"),
        Col("registers_per_thread", "registersPerThread"),
        Col("static_shared_memory", "staticSharedMemory"),
        Col("dynamic_shared_memory", "dynamicSharedMemory"),
    ]
    return _with_pid(_times(_read(trace, KERNEL, cols)))


def _memcpy_labels(trace: TraceSource) -> dict[int, str]:
    if not trace.has_table("ENUM_CUDA_MEMCPY_OPER"):
        return {}
    with trace.reading() as conn:
        return {int(k): str(v) for k, v in conn.execute("SELECT id, label FROM ENUM_CUDA_MEMCPY_OPER")}


@frames.lists_columns(("Columns", frames.MEMOPS))
def read_memops(trace: TraceSource) -> pd.DataFrame:
    """GPU memory operations: CUPTI_ACTIVITY_KIND_MEMCPY ∪ CUPTI_ACTIVITY_KIND_MEMSET."""
    base = [
        *GPU_ACTIVITY,
        Col("bytes", "bytes"),
        Col("graph_node_id", "graphNodeId", "nint"),
    ]
    memcpy = _read(trace, MEMCPY, [*base, Col("copy_kind", "copyKind", "nint")])
    memset = _read(trace, MEMSET, base)
    labels = _memcpy_labels(trace)
    kinds = memcpy.pop("copy_kind").to_numpy(dtype=np.int64, na_value=NULL_INT)
    names = {int(k): labels.get(int(k), str(int(k))) for k in np.unique(kinds) if k != NULL_INT}
    memcpy["copy_kind"] = categorical(kinds, names)
    memset["copy_kind"] = pd.Categorical.from_codes(np.full(len(memset), -1),
                                                    categories=memcpy["copy_kind"].cat.categories)
    memcpy.insert(0, "kind", "memcpy")
    memset.insert(0, "kind", "memset")
    frame = pd.concat([memcpy, memset], ignore_index=True)
    frame["kind"] = pd.Categorical(frame["kind"], categories=["memcpy", "memset"])
    frame["copy_kind"] = frame["copy_kind"].astype(pd.CategoricalDtype(memcpy["copy_kind"].cat.categories))
    return _with_pid(_times(frame))


@frames.lists_columns(("Columns", frames.GRAPH_LAUNCHES))
def read_graph_launches(trace: TraceSource) -> pd.DataFrame:
    """Whole CUDA-graph executions (CUPTI_ACTIVITY_KIND_GRAPH_TRACE; recorded with nsys's
    `--cuda-graph-trace=graph`)."""
    cols = [
        *GPU_ACTIVITY,
        Col("graph_id", "graphId"),
        Col("graph_exec_id", "graphExecId"),
    ]
    return _with_pid(_times(_read(trace, GRAPH_TRACE, cols)))


TIME_COLUMNS = [Col("start_ns", "start"), Col("end_ns", "end"), Col("correlation_id", "correlationId")]
OP_KINDS = ["kernel", "memcpy", "memset", "graph"]
OP_TABLES = (KERNEL, MEMCPY, MEMSET, GRAPH_TRACE)


def api_times(trace: TraceSource) -> dict[str, np.ndarray]:
    """Just what the projection needs of the API calls, row for row as `read_api`, as arrays: start_ns, end_ns,
    correlation_id, global_tid (4 values per row instead of 6, and no frame: reading is the cost on big exports)."""
    cols = [*TIME_COLUMNS, Col("global_tid", "globalTid")]
    parts = [_read_arrays(trace, RUNTIME, cols)]
    if trace.has_table(DRIVER):
        parts.append(_read_arrays(trace, DRIVER, cols))
    return parts[0] if len(parts) == 1 else {c.out: np.concatenate([p[c.out] for p in parts]) for c in cols}


def op_times(trace: TraceSource) -> dict:
    """Just what an analysis needs of the GPU ops, row for row as `gpu_ops`, as arrays: kind (int8 codes into
    OP_KINDS), name (Categorical, as `gpu_ops`), start_ns, end_ns, correlation_id, global_pid."""
    return _op_columns(trace, [*TIME_COLUMNS, Col("global_pid", "globalPid")])


def call_arrays(frame: pd.DataFrame) -> dict[str, np.ndarray]:
    """`api_times` of a `cuda_api()` frame already read: its start_ns, end_ns, correlation_id, global_tid."""
    return {c: frame[c].to_numpy(np.int64) for c in ("start_ns", "end_ns", "correlation_id", "global_tid")}


def op_arrays(frame: pd.DataFrame) -> dict:
    """`op_times` of a `gpu_ops()` frame already read: kind codes, name, start_ns, end_ns, correlation_id,
    global_pid."""
    ops = {c: frame[c].to_numpy(np.int64) for c in ("start_ns", "end_ns", "correlation_id", "global_pid")}
    ops["kind"] = frame["kind"].cat.codes.to_numpy(np.int8)
    ops["name"] = frame["name"].array
    return ops


def _op_columns(trace: TraceSource, common: list[Col]) -> dict:
    # The tables' rows go straight into one array per column (no concatenation of per-table copies).
    sizes = [trace.rows(t) for t in OP_TABLES]
    whole = {c.out: np.empty(sum(sizes), np.int64) for c in common}
    at = np.concatenate([[0], np.cumsum(sizes)])
    into = [{name: arr[at[i]:at[i + 1]] for name, arr in whole.items()} for i in range(len(OP_TABLES))]
    k = _read_arrays(trace, KERNEL, [*common, Col("name", "shortName", "sid")], into[0])
    m = _read_arrays(trace, MEMCPY, [*common, Col("copy_kind", "copyKind", "nint")], into[1])
    z = _read_arrays(trace, MEMSET, common, into[2])
    g = _read_arrays(trace, GRAPH_TRACE, [*common, Col("graph_id", "graphId")], into[3])
    labels = _memcpy_labels(trace)
    kinds = m["copy_kind"].to_numpy(dtype=np.int64, na_value=NULL_INT)
    copy_names = {int(c): f"[CUDA memcpy {labels.get(int(c), str(int(c)))}]" for c in pd.unique(kinds)}
    names = union_categoricals(
        [
            k["name"],
            categorical(kinds, copy_names),
            categorical_values(np.full(len(z["start_ns"]), "[CUDA memset]", dtype=object)),
            categorical_values(np.array([f"[CUDA graph {i}]" for i in g["graph_id"].tolist()], dtype=object)),
        ],
        ignore_order=True,
    )
    parts = (k, m, z, g)
    out = {
        "kind": np.repeat(np.arange(len(OP_KINDS), dtype=np.int8), [len(p["start_ns"]) for p in parts]),
        "name": names,
    }
    out.update(whole)
    bad = _damaged(whole["start_ns"], whole["end_ns"])
    if not bad.any():
        return out
    for i, table in enumerate(OP_TABLES):
        n = int(bad[at[i]:at[i + 1]].sum())
        if n:
            try:
                _DROPPED.setdefault(trace, {})[table] = n
            except TypeError:
                pass
    return _take(out, np.flatnonzero(~bad))


GPU_OP_COLUMNS = frames.names(frames.GPU_OPS)


@frames.lists_columns(("Columns", frames.GPU_OPS))
def gpu_ops(trace: TraceSource) -> pd.DataFrame:
    """Every GPU operation: kernels ∪ memcpy ∪ memset ∪ graph launches, in that order (each table in rowid
    order). Reads only these columns, not all of `read_kernels`'s."""
    common = [
        Col("start_ns", "start"),
        Col("end_ns", "end"),
        Col("device_id", "deviceId"),
        Col("stream_id", "streamId"),
        Col("correlation_id", "correlationId"),
        Col("global_pid", "globalPid"),
    ]
    cols = _op_columns(trace, common)
    cols["kind"] = pd.Categorical.from_codes(cols["kind"], categories=OP_KINDS)
    cols["duration_ns"] = cols["end_ns"] - cols["start_ns"]
    cols["pid"] = decode_pid(cols["global_pid"])
    return pd.DataFrame({c: cols[c] for c in GPU_OP_COLUMNS}, copy=False)
