"""Reading PyTorch-profiler (Kineto) traces: `KinetoTrace`, the `Trace` of a Chrome-trace JSON file.

vLLM's torch profiler, `torch.profiler.profile(...).export_chrome_trace`, SGLang and TensorRT-LLM's PyTorch backend
write one such file per process (`*.pt.trace.json.gz`; `.json` too): an object whose `traceEvents` list holds every
event. `KinetoTrace` reads it once, read-only, as a stream (`kineto_stream`: the text in pieces, every bound applied
as it is read; `kineto_json`: the events decoded in batches; `kineto_collect`: only what the tables below need kept,
the rest dropped with its batch — memory grows with the kept events, never with the file), and gives the tables of
an Nsight Systems export with the same columns, dtypes and units (int64 ns; `frames.py`), so that the projection
(`nsys_cc.analysis.forwards.projection`), its CUDA-graph attribution and the analyses built on it need no second code
path:

- ranges (`nvtx_ranges`): `user_annotation` events (`torch.profiler.record_function`, Kineto's NVTX; vLLM's
  `execute_context_…_generation_…` steps), domain "". `python_function` frames (with_stack traces: most of the events)
  only when asked for by name or prefix (`nvtx_ranges(names=…, prefixes=…)`, e.g. `prefixes=["vllm/v1/spec_decode/"]`,
  compared by module path whatever the install prefix: `frame_paths`), in the domain "python_function"; or all of
  them with `python_frames()`. Nesting (`level`, `parent_id`) is among
  the ranges of the same category on the same thread. `range_id` is the event's position in `traceEvents`.
- launches (`cuda_api`): `cuda_runtime` (api "runtime") and `cuda_driver` ("driver") events, `args.correlation`.
- GPU ops (`kernels`, `memops`, `gpu_ops`): `kernel`, `gpu_memcpy`, `gpu_memset` events with `args.device`,
  `args.stream`, `args.correlation`; the process of an op is that of the launch with its correlation id (Kineto puts
  GPU ops in a pseudo-process named by the device), so the projection's join on (process, correlation id) is nsys's.
  A `cudaGraphLaunch` shares its correlation id with every kernel of the graph, as in nsys's node-level traces.
  Memcpy directions are named as nsys names them (`HtoD` → "Host-to-Device").
- processes, threads (`process_name`, `thread_name` metadata), devices (`deviceProperties`), the rank
  (`distributedInfo`), and `info()`: the versions the file states, event counts per category, CUDA and ranges present.

Ignored: `cpu_op` (aten ops), `gpu_user_annotation` (Kineto's own projection of a range onto a stream: approximate, so
the projection is computed as nsys computes it instead), flow events (`ac2g`: the correlation ids say the same),
`overhead`, `Trace`, instant and counter events, and events of the kept categories that are not complete ("X") events.

Times: `ts` and `dur` are microseconds written with the nanoseconds as three decimals, on a clock whose values have
~16 significant digits, so a float64 loses the last nanoseconds. The reader never makes a float of them: the parser
hands each one's text over (msgspec's `Raw`; the exact parser's `parse_float=str`) and `kineto_events.ns_column`
turns it into integer nanoseconds exactly (more than three decimals: rounded half to even; an integer: whole
microseconds). Times are the file's own clock (`ts` × 1000); `baseTimeNanoseconds` is reported by `info()`, not
added. A GPU op that starts before the launch call carrying its correlation id is impossible (damage): it is left
out of every table, and said (`cuda.dropped_note`; `_causal`).

Bad input: a file that is not gzip or JSON, truncated, without `traceEvents`, nested too deep, with NaN or Infinity,
numbers no nanosecond count can hold, a negative `dur`, a kept event without its times, or the same event twice (two
traces merged) raises `InputError` with one line naming the file (and the event, or the byte); so do a gzip bomb, a
file past `$NSYS_CC_MAX_TRACE_BYTES` of JSON, and too little memory (`ulimit -v`) for the events kept, each as soon
as it is seen. The file is only read. Text that is not UTF-8 is read with U+FFFD in place of the bad bytes (as the
SQLite reader does).
"""

from __future__ import annotations

import os
import re
from collections.abc import Collection, Mapping
from types import MappingProxyType
from typing import Any

import numpy as np
import pandas as pd

from .. import progress
from ..arguments import many
from ..errors import InputError
from . import cuda, frames, nvtx
from .bulk import NULL_INT, PID_MASK, nullable
from .capabilities import Recorder
from .description import TraceDescription, of_kineto
from .format_kineto import FORMAT
from .frames import lists_columns
from .kineto_collect import (  # noqa: F401  (the roles, named here as they always were)
    API_DRIVER,
    API_RUNTIME,
    FRAME,
    KERNEL,
    MEMCPY,
    MEMSET,
    RANGE,
    ROLES,
    Collected,
    Collector,
)
from .kineto_events import Damaged, Ids, Spans, categorical, no_collection, refuse_duplicates, small_int, version_text
from .kineto_json import read_document
from .kineto_stream import TraceBytes
from .nesting import NO_PARENT, nest
from .pages import small_pages
from .payload_names import split_payloads
from .source import Closable, TraceInfo, handed_out

RANGE_DOMAIN = ""
FRAME_DOMAIN = "python_function"
# Kineto's memcpy kinds (`Memcpy HtoD (Pinned -> Device)`) as nsys's ENUM_CUDA_MEMCPY_OPER labels them.
COPY_KINDS = {"HtoD": "Host-to-Device", "DtoH": "Device-to-Host", "HtoA": "Host-to-Array", "AtoH": "Array-to-Host",
              "AtoA": "Array-to-Array", "AtoD": "Array-to-Device", "DtoA": "Device-to-Array",
              "DtoD": "Device-to-Device", "HtoH": "Host-to-Host", "PtoP": "Peer-to-Peer"}
_COPY_NAME = re.compile(r"Memcpy\s+(\S+)")
# Accessor → its columns, as the SQLite reader gives them.
TABLES = frames.TABLES


class KinetoTrace(Closable):
    """One PyTorch-profiler (Kineto) trace, read once as a stream, what its tables need kept in memory (implements
    `nsys_cc.trace.Trace`; module docstring for what is mapped). Open it with `nsys_cc.open_trace(path)`.

    Attributes:
        path: the file given.
        format: "kineto".
        nsys_version: None (no nsys wrote it).
        schema_version: the file's `schemaVersion` as text, or None.
        metadata: the file's top-level entries other than `traceEvents`, read-only (versions, `deviceProperties`,
            `distributedInfo`, `with_stack`, `baseTimeNanoseconds`, …; numbers with decimals as their text).
        event_counts: events per category (events without one by phase: "(M events)"), most first.
        rank, world_size: from `distributedInfo` (None when the trace has none).
    """

    format = FORMAT.name
    capabilities = FORMAT.capabilities
    nsys_version: str | None = None

    def __init__(self, path: str | os.PathLike):
        self.path = os.fsdecode(os.fspath(path))
        self._closed = False
        self._tables: dict[str, pd.DataFrame] = {}
        try:
            with TraceBytes(path) as source:
                size = source.size
                with progress.step(f"reading {os.path.basename(self.path)} ({size / 1e6:.0f} MB)",
                                   always=size >= 50e6), small_pages(), no_collection():
                    collector = Collector()
                    try:
                        meta = read_document(source, collector)
                        self._build(meta, collector.finish())
                    except Damaged as exc:
                        raise InputError(f"{self.path}: {exc}") from None
        except MemoryError:
            raise InputError(f"{self.path}: not enough memory to read this trace (the events it keeps need more "
                             "than the memory or address space this process may use: see `ulimit -v`)") from None

    # -- reading ----------------------------------------------------------------------------------------------------
    def _build(self, meta: dict, got: Collected) -> None:
        self.metadata: Mapping[str, Any] = MappingProxyType(meta)
        self.event_counts: Mapping[str, int] = MappingProxyType(got.event_counts)
        self._process_names, self._thread_names = got.processes, got.threads
        ranges, frames_, runtime, driver = got.ranges, got.frames, got.runtime, got.driver
        ranges._names, ranges.payload = split_payloads(ranges._names or [])  # the torch route's payloads
        api = Spans(np.concatenate([runtime.index, driver.index]), runtime.names + driver.names,
                    np.concatenate([runtime.pid, driver.pid]), np.concatenate([runtime.tid, driver.tid]),
                    np.concatenate([runtime.start, driver.start]), np.concatenate([runtime.dur, driver.dur]))
        api_kind = np.repeat(np.array([0, 1], dtype=np.int8), [len(runtime), len(driver)])
        api_corr = got.api_corr
        ops = got.ops

        pids = np.concatenate([ranges.pid, frames_.pid, api.pid, ops["device_id"],
                               np.array(list(self._process_names), dtype=np.int64),
                               np.array([p for p, _ in self._thread_names], dtype=np.int64)])
        tids = np.concatenate([ranges.tid, frames_.tid, api.tid, np.zeros(1, np.int64),
                               np.array([t for _, t in self._thread_names], dtype=np.int64)])
        ids = self._ids = Ids(pids, tids)
        for spans in (ranges, frames_, api):
            spans.gtid = ids.gtid(spans.pid, spans.tid)

        # A GPU op's process is its launch's (Kineto files it under the device): correlation id → launching process.
        # An op whose correlation id no launch carries (none, 0, or its launch not recorded) stays in its device's.
        known = np.flatnonzero(api_corr != 0)
        corr = pd.Index(api_corr[known])
        first = known[~corr.duplicated(keep="first")]
        at = pd.Index(api_corr[first]).get_indexer(ops["correlation_id"])
        at[ops["correlation_id"] == 0] = -1
        found = at >= 0
        launch = first[at[found]]
        ops["global_pid"] = ids.gpid(ops["device_id"])
        ops["global_pid"][found] = (api.gtid & PID_MASK)[launch]
        ops["pid"] = ops["device_id"].copy()
        ops["pid"][found] = api.pid[launch]

        refuse_duplicates({"name": ranges.name.codes, "g": ranges.gtid, "s": ranges.start, "d": ranges.dur},
                          ranges.index, "user_annotation", lambda k: got.describe_range(k, ranges.index))
        refuse_duplicates({"k": api_kind, "name": api.name.codes, "g": api.gtid, "s": api.start, "d": api.dur,
                           "c": api_corr}, api.index, "CUDA API", lambda k: got.describe_api(k, api.index))
        refuse_duplicates({c: ops[c] for c in ("kind", "device_id", "stream_id", "start_ns", "duration_ns",
                                               "correlation_id", "name_code")}, ops["index"], "GPU",
                          lambda k: got.describe_op(k, ops["index"]))
        self._ranges, self._frames, self._api, self._api_kind, self._api_corr = ranges, frames_, api, api_kind, api_corr
        self._ops_columns = self._causal(ops, found, launch, got)
        schema = meta.get("schemaVersion")
        self.schema_version: str | None = None if schema is None else str(schema)
        dist = meta.get("distributedInfo")
        dist = dist if isinstance(dist, dict) else {}
        self.rank: int | None = dist.get("rank") if type(dist.get("rank")) is int else None
        self.world_size: int | None = dist.get("world_size") if type(dist.get("world_size")) is int else None

    def _causal(self, ops: dict[str, np.ndarray], found: np.ndarray, launch: np.ndarray, got: Collected) -> dict:
        """`ops` without the GPU ops that start before the launch call carrying their correlation id. No GPU runs
        work before it is launched (CUPTI and roctracer time both on one clock: none of the public traces has one,
        the closest starts 7 µs after its call), so such an op is damage — an edited time or a correlation id that
        is not its launch's — and neither its time nor the range its launch would give it can be trusted: it is
        left out of every table, and `cuda.dropped_note` (the notes of `analyze` and `ranges`) says how many."""
        early = np.zeros(len(ops["index"]), dtype=bool)
        early[found] = ops["start_ns"][found] < self._api.start[launch]
        if not early.any():
            return ops
        k = int(np.flatnonzero(early)[0])
        call = int(launch[int(np.flatnonzero(found[:k + 1]).size) - 1])
        cuda.note_dropped(self, f"dropped {int(early.sum())} GPU op(s) that start before the launch call carrying "
                                f"their correlation id (first: {got.describe_op(k, ops['index'])}, "
                                f"{(self._api.start[call] - ops['start_ns'][k]) / 1e3:,.3f} µs before its "
                                f"{str(self._api.name[call])!r:.60}, correlation id "
                                f"{int(ops['correlation_id'][k])}): no "
                                "GPU starts work before it is launched, the trace is damaged; the times are those of "
                                "the other ops")
        n_kernel = int((ops["kind"] == 0).sum())
        keep = ~early
        rows = {key: keep[:n_kernel] for key in ("grid", "block", "registers", "shared", "graph_node")}
        rows.update({key: keep[n_kernel:] for key in ("mem_graph_node", "bytes")})
        return {key: column[rows.get(key, keep)] for key, column in ops.items()}

    # -- the Trace protocol -------------------------------------------------------------------------------------------
    def __enter__(self) -> KinetoTrace:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        """Forget the tables (a closed trace answers no more queries: TraceClosedError; `info()` and `path` stay)."""
        self._closed = True
        self._tables.clear()

    def __repr__(self) -> str:
        return (f"Trace({self.path!r}, PyTorch profiler (Kineto), {sum(self.event_counts.values()):,} events"
                f"{', closed' if self._closed else ''})")

    @property
    def has_cuda(self) -> bool:
        """CUDA runtime/driver calls and GPU ops (kernels, copies or sets) present."""
        return len(self._api) > 0 and len(self._ops_columns["index"]) > 0

    @property
    def has_nvtx(self) -> bool:
        """`user_annotation` ranges present (Kineto's counterpart of NVTX ranges)."""
        return len(self._ranges) > 0

    def count(self, table: str) -> int:
        """Rows the accessor named `table` returns whole ("nvtx_ranges": the user_annotation ranges; "cuda_api",
        "kernels", "memops", "graph_launches" — always 0: Kineto records no graph-level activity —, "gpu_ops"), and
        for "python_frames" the file's `python_function` events."""
        if table == "python_frames":
            return int(self.event_counts.get("python_function", 0))
        kinds = self._ops_columns["kind"]
        return {"nvtx_ranges": len(self._ranges), "cuda_api": len(self._api), "kernels": int((kinds == 0).sum()),
                "memops": int((kinds > 0).sum()), "graph_launches": 0, "gpu_ops": len(kinds)}.get(table, 0)

    @property
    def recorder(self) -> Recorder:
        """What recorded the trace: the PyTorch profiler (Kineto); a Kineto trace names no torch version, only its
        trace schema (`schemaVersion`: "schema 1"), None when it states none."""
        return Recorder("PyTorch profiler (Kineto)", None if self.schema_version is None else
                        f"schema {self.schema_version}")

    def no_range_table(self) -> str | None:
        """None: a PyTorch-profiler trace's ranges are events among the others, never a table it may lack."""
        return None

    def api_times(self) -> dict[str, np.ndarray]:
        """The CUDA API calls' start_ns, end_ns, correlation_id, global_tid as int64 arrays, row for row as
        `cuda_api()` (whose frame the whole trace's read already holds)."""
        return cuda.call_arrays(self.cuda_api())

    def op_times(self) -> dict:
        """The GPU ops' kind codes, name, start_ns, end_ns, correlation_id, global_pid, row for row as `gpu_ops()`."""
        return cuda.op_arrays(self.gpu_ops())

    def has_graph_nodes(self) -> bool:
        """Whether the trace launched a CUDA graph (a `…GraphLaunch` call): Kineto records a graph's kernels one by one,
        each under its launch's correlation id."""
        return bool(self.cuda_api()["name"].astype(str).str.contains("GraphLaunch", regex=False).any())

    def has_loaded(self, table: str) -> bool:
        """True for every table: the whole file was read when the trace was opened."""
        return table in TABLES

    def info(self) -> TraceInfo:
        """What the trace holds (`nsys-cc info`): format, the versions the file states, schemaVersion, events per
        category, CUDA data and ranges present, devices, rank (`TraceInfo.details`)."""
        meta = self.metadata
        versions = {k: version_text(k, v) for k, v in meta.items() if "version" in k.lower() and k != "schemaVersion"
                    and isinstance(v, (int, str, list))}
        names = self._ranges.name
        counts = pd.Series(names.codes).value_counts()
        ranges = {str(names.categories[c]): int(n) for c, n in counts.items() if c >= 0}
        details = {
            "versions": versions,
            "devices": [{k: d.get(k) for k in ("id", "name", "totalGlobalMem", "computeMajor", "computeMinor",
                                               "numSms")} for d in self._device_properties()],
            "rank": self.rank, "world_size": self.world_size,
            "backend": (meta.get("distributedInfo") or {}).get("backend") if isinstance(meta.get("distributedInfo"),
                                                                                   dict) else None,
            "with_stack": bool(meta.get("with_stack")) if meta.get("with_stack") is not None else None,
            "python_frames": len(self._frames),
            "base_time_ns": meta.get("baseTimeNanoseconds") if type(meta.get("baseTimeNanoseconds")) is int else None,
            "processes": {str(p): v.get("name", "") for p, v in sorted(self._process_names.items())},
            "ranges": ranges,
        }
        return TraceInfo(path=self.path, sqlite_path=None, nsys_version=None, schema_version=self.schema_version,
                         has_cuda=self.has_cuda, has_nvtx=self.has_nvtx, tables=self.event_counts, format=self.format,
                         details=MappingProxyType(details), description=self.describe())

    def describe(self) -> TraceDescription:
        """Where it ran, as the file says (`description.of_kineto`: devices, runtime, engine, rank)."""
        return of_kineto(self.metadata, self._ops_columns["device_id"], self._api.name.categories,
                         [v.get("name", "") for v in self._process_names.values()], self._ranges.name.categories,
                         lambda: self._frames.name.categories if len(self._frames) else ())

    def _device_properties(self) -> list[dict]:
        props = self.metadata.get("deviceProperties")
        return [d for d in props if isinstance(d, dict)] if isinstance(props, list) else []

    def _kept(self, key: str, build) -> pd.DataFrame:
        self._check_open()
        if key not in self._tables:
            with small_pages():
                self._tables[key] = build()
        return handed_out(self._tables[key])

    # -- ranges ---------------------------------------------------------------------------------------------------
    def _range_frame(self, spans: Spans, domain: str, rows: np.ndarray | None, nesting: bool) -> pd.DataFrame:
        """Ranges in the columns of `nvtx_ranges` (rows: positions to keep, None for all), nested among `spans`."""
        n_all = len(spans)
        if nesting:
            parent, level = nest(spans.gtid, spans.start, spans.start + spans.dur, np.ones(n_all, dtype=bool))
            parent_id = np.where(parent == NO_PARENT, NULL_INT, spans.index[np.maximum(parent, 0)])
        if rows is None:
            rows = np.arange(n_all)
        n = len(rows)
        name = spans.name.take(rows) if n != n_all else spans.name
        name = nvtx.names_of_rows(pd.DataFrame({"name": name}))["name"].array
        start = spans.start[rows]
        end = start + spans.dur[rows]
        qualified = name if not domain else pd.Categorical.from_codes(
            name.codes, categories=pd.Index([f"{domain}:{c}" for c in name.categories], dtype=object))
        missing = np.full(n, NULL_INT, dtype=np.int64)
        return pd.DataFrame({
            "range_id": spans.index[rows],
            "name": name,
            "domain": pd.Categorical.from_codes(np.zeros(n, dtype=np.int8),
                                                categories=pd.Index([domain], dtype=object)),
            "qualified_name": qualified,
            "range_style": pd.Categorical.from_codes(np.zeros(n, dtype=np.int8), categories=["push/pop", "start/end"]),
            "start_ns": start,
            "end_ns": end,
            "duration_ns": end - start,
            "global_tid": spans.gtid[rows],
            "pid": spans.pid[rows],
            "tid": spans.tid[rows],
            "end_global_tid": nullable(missing),
            "ended_on_other_thread": np.zeros(n, dtype=bool),
            "level": level[rows].astype(np.int64) if nesting else nullable(missing),
            "parent_id": nullable(parent_id[rows] if nesting else missing),
            "payload": np.full(n, np.nan) if spans.payload is None else spans.payload[rows],
            "category": nullable(missing),
            "open_at_end": np.zeros(n, dtype=bool),
        }, copy=False)

    @lists_columns(("Columns", frames.NVTX_RANGES))
    def nvtx_ranges(self, names: Collection[str] | None = None, *, prefixes: Collection[str] = (),
                    nesting: bool = True, warn: bool = True) -> pd.DataFrame:
        """The trace's ranges in the columns of an export's NVTX ranges: every `user_annotation` (domain ""); with
        `names` / `prefixes`, those that match (`nsys_cc.trace.nvtx.matches`) and also the `python_function` frames
        that do (domain "python_function": `prefixes=["vllm/v1/spec_decode/"]`, or a frame's full name), by start.
        `nesting=False`: `level` and `parent_id` <NA>. Nesting is among ranges of the same category on a thread.
        Names that match nothing warn with the closest names unless `warn=False` (`ExportTrace.nvtx_ranges`)."""
        names = None if names is None else [str(n) for n in many(names, "names")]
        prefixes = [str(p) for p in many(prefixes, "prefixes")]
        if warn and names and not prefixes:
            found = self.nvtx_ranges(names, nesting=nesting, warn=False)
            if found.empty:
                nvtx.warn_no_such_names(self, names)
            return found
        whole = names is None and not prefixes
        key = f"nvtx_ranges:{None if names is None else sorted(names)!r}:{sorted(prefixes)!r}:{nesting}"
        if whole and nesting:
            key = "nvtx_ranges"

        def build() -> pd.DataFrame:
            if whole:
                return self._range_frame(self._ranges, RANGE_DOMAIN, None, nesting)
            parts: list[pd.DataFrame] = []
            for spans, domain in ((self._ranges, RANGE_DOMAIN), (self._frames, FRAME_DOMAIN)):
                probe = pd.DataFrame({"name": spans.name, "qualified_name": _qualify(spans.name, domain)}, copy=False)
                hit = np.flatnonzero(nvtx.matches(probe, names or (), prefixes))
                if len(hit) or not parts:
                    parts.append(self._range_frame(spans, domain, hit, nesting))
            if len(parts) == 1:
                return parts[0]
            out = pd.concat(parts, ignore_index=True)
            for col in ("name", "domain", "qualified_name"):
                out[col] = out[col].astype("category")
            order = np.lexsort((out["range_id"].to_numpy(), out["start_ns"].to_numpy()))
            return out.iloc[order].reset_index(drop=True)

        return self._kept(key, build)

    @lists_columns(("Columns", frames.NVTX_RANGES))
    def python_frames(self, *, nesting: bool = True) -> pd.DataFrame:
        """Every `python_function` frame (traces recorded with_stack: most of the events), in the columns of
        `nvtx_ranges` (domain "python_function"), nested among the frames of each thread (the Python call stack)."""
        return self._kept(f"python_frames:{nesting}", lambda: self._range_frame(self._frames, FRAME_DOMAIN, None,
                                                                                nesting))

    # -- CUDA -------------------------------------------------------------------------------------------------------
    @lists_columns(("Columns", frames.CUDA_API))
    def cuda_api(self) -> pd.DataFrame:
        """CUDA runtime (`cuda_runtime`) and driver (`cuda_driver`) calls, runtime first, each in file order."""
        def build() -> pd.DataFrame:
            a = self._api
            return pd.DataFrame({
                "start_ns": a.start, "end_ns": a.start + a.dur, "duration_ns": a.dur, "global_tid": a.gtid,
                "pid": a.pid, "tid": a.tid, "correlation_id": self._api_corr, "name": a.name,
                "api": pd.Categorical.from_codes(self._api_kind, categories=["runtime", "driver", "other"]),
            }, copy=False)

        return self._kept("cuda_api", build)

    def _op_frame(self, sel: np.ndarray, columns: list[str]) -> dict:
        o = self._ops_columns
        return {c: o[c][sel] for c in columns}

    @lists_columns(("Columns", frames.KERNELS))
    def kernels(self) -> pd.DataFrame:
        """GPU kernels (`kernel` events), in file order. Kineto writes one, demangled, name: `name` and
        `demangled_name` both hold it. It writes static and dynamic shared memory as one sum ("shared memory"):
        `static_shared_memory` holds that sum, `dynamic_shared_memory` 0."""
        def build() -> pd.DataFrame:
            o = d = self._ops_columns
            sel = o["kind"] == 0
            base = self._op_frame(sel, ["start_ns", "end_ns", "duration_ns", "device_id", "context_id", "stream_id",
                                        "correlation_id", "global_pid", "pid"])
            name = categorical(o["names"][sel])
            return pd.DataFrame({
                **base, "name": name, "demangled_name": name.copy(),
                "grid_x": d["grid"][:, 0], "grid_y": d["grid"][:, 1], "grid_z": d["grid"][:, 2],
                "block_x": d["block"][:, 0], "block_y": d["block"][:, 1], "block_z": d["block"][:, 2],
                "graph_node_id": nullable(d["graph_node"]), "registers_per_thread": d["registers"],
                "static_shared_memory": d["shared"], "dynamic_shared_memory": np.zeros(int(sel.sum()), np.int64),
            }, copy=False)

        return self._kept("kernels", build)

    def _copy_kinds(self, sel: np.ndarray) -> pd.Categorical:
        """Memcpy direction labels (nsys's) of the memcpy ops `sel`, from Kineto's names; NaN for memsets."""
        o = self._ops_columns
        labels = []
        for kind, name in zip(o["kind"][sel].tolist(), o["names"][sel].tolist()):
            found = _COPY_NAME.match(name) if kind == 1 else None
            labels.append(COPY_KINDS.get(found.group(1), found.group(1)) if found else
                          (None if kind == 2 else "unknown"))
        return categorical(labels)

    @lists_columns(("Columns", frames.MEMOPS))
    def memops(self) -> pd.DataFrame:
        """GPU memcpy (`gpu_memcpy`) then memset (`gpu_memset`) operations, each in file order; `copy_kind` is the
        direction in Kineto's name (`Memcpy HtoD (…)`) as nsys labels it ("Host-to-Device")."""
        def build() -> pd.DataFrame:
            o = d = self._ops_columns
            sel = o["kind"] > 0
            base = self._op_frame(sel, ["start_ns", "end_ns", "duration_ns", "device_id", "context_id", "stream_id",
                                        "correlation_id", "global_pid", "pid"])
            return pd.DataFrame({
                "kind": pd.Categorical.from_codes(o["kind"][sel] - 1, categories=["memcpy", "memset"]), **base,
                "bytes": d["bytes"], "graph_node_id": nullable(d["mem_graph_node"]), "copy_kind": self._copy_kinds(sel),
            }, copy=False)

        return self._kept("memops", build)

    @lists_columns(("Columns", frames.GRAPH_LAUNCHES))
    def graph_launches(self) -> pd.DataFrame:
        """Always empty: Kineto records a replayed CUDA graph's kernels one by one (with the launch's correlation id),
        never a graph-level row."""
        return self._kept("graph_launches", lambda: pd.DataFrame(
            {c.name: pd.Series(dtype="int64") for c in frames.GRAPH_LAUNCHES}))

    @lists_columns(("Columns", frames.GPU_OPS))
    def gpu_ops(self) -> pd.DataFrame:
        """Every GPU operation: kernels, then memcpy, then memset (each in file order); memcpy named
        '[CUDA memcpy <direction>]' and memset '[CUDA memset]' as in an export, kernels by Kineto's name."""
        def build() -> pd.DataFrame:
            o = self._ops_columns
            kind = o["kind"]
            names = o["names"].copy()
            copies = kind == 1
            if copies.any():
                names[copies] = [f"[CUDA memcpy {k}]" for k in self._copy_kinds(copies)]
            names[kind == 2] = "[CUDA memset]"
            return pd.DataFrame({
                "kind": pd.Categorical.from_codes(kind, categories=["kernel", "memcpy", "memset", "graph"]),
                "name": categorical(names), "start_ns": o["start_ns"], "end_ns": o["end_ns"],
                "duration_ns": o["duration_ns"], "device_id": o["device_id"], "stream_id": o["stream_id"],
                "correlation_id": o["correlation_id"], "global_pid": o["global_pid"], "pid": o["pid"],
            }, copy=False)

        return self._kept("gpu_ops", build)

    # -- what only a Kineto trace has -------------------------------------------------------------------------------
    @lists_columns(("Columns", frames.PROCESSES))
    def processes(self) -> pd.DataFrame:
        """Processes named by the trace's metadata events (`process_name`, `process_labels`), by pid."""
        def build() -> pd.DataFrame:
            procs = sorted(self._process_names.items())
            return pd.DataFrame({"pid": np.array([p for p, _ in procs], dtype=np.int64),
                                 "name": [v.get("name", "") for _, v in procs],
                                 "labels": [v.get("labels", "") for _, v in procs]})

        return self._kept("processes", build)

    @lists_columns(("Columns", frames.THREADS))
    def threads(self) -> pd.DataFrame:
        """Every CPU thread that is named (`thread_name`) or holds ranges or CUDA calls, by (pid, tid)."""
        def build() -> pd.DataFrame:
            pairs = {(int(p), int(t)) for p, t in zip(self._ranges.pid, self._ranges.tid)}
            pairs |= {(int(p), int(t)) for p, t in zip(self._api.pid, self._api.tid)}
            pairs |= set(self._thread_names)
            pairs_sorted = sorted(pairs)
            pid = np.array([p for p, _ in pairs_sorted], dtype=np.int64)
            tid = np.array([t for _, t in pairs_sorted], dtype=np.int64)
            gtid = self._ids.gtid(pid, tid) if len(pid) else np.empty(0, np.int64)
            per_range = pd.Series(self._ranges.gtid).value_counts()
            per_api = pd.Series(self._api.gtid).value_counts()
            return pd.DataFrame({
                "pid": pid, "tid": tid, "global_tid": gtid,
                "name": [self._thread_names.get(p, "") for p in pairs_sorted],
                "ranges": per_range.reindex(gtid, fill_value=0).to_numpy(np.int64),
                "launches": per_api.reindex(gtid, fill_value=0).to_numpy(np.int64),
            })

        return self._kept("threads", build)

    @lists_columns(("Columns", frames.DEVICES))
    def devices(self) -> pd.DataFrame:
        """The GPUs of `deviceProperties` (empty for a CPU-only trace)."""
        def build() -> pd.DataFrame:
            props = self._device_properties()

            def ints(key: str) -> np.ndarray:
                return np.array([d.get(key) if small_int(d.get(key)) else -1 for d in props], dtype=np.int64)

            return pd.DataFrame({"device_id": ints("id"), "name": [str(d.get("name", "")) for d in props],
                                 "total_memory": ints("totalGlobalMem"), "compute_major": ints("computeMajor"),
                                 "compute_minor": ints("computeMinor"), "sms": ints("numSms")})

        return self._kept("devices", build)


def _qualify(names: pd.Categorical, domain: str) -> pd.Categorical:
    if not domain:
        return names
    return pd.Categorical.from_codes(names.codes, categories=pd.Index([f"{domain}:{c}" for c in names.categories],
                                                                      dtype=object))


def open_file(path: str | os.PathLike, **_options) -> KinetoTrace:
    """`KinetoTrace(path)`: what `nsys_cc.open_trace` calls for a file of this format (`format_kineto`); the options of
    other formats (nsys, its export cache) do not apply."""
    return KinetoTrace(path)
