"""What `KinetoTrace` keeps of a PyTorch-profiler trace's events, collected batch by batch as they are read.

`Collector` is the `take` of `kineto_json.read_document`: each batch of events is sorted by category at C speed
(one dict lookup per event), and only the kept categories' fields become columns — ranges, Python frames (their
names as codes into one table of distinct names: a with_stack trace's frames are most of its events and repeat a few
thousand names), CUDA runtime/driver calls, GPU kernels/copies/sets — plus the process and thread names of the
metadata events and the events counted per category. Everything else (aten ops, flow events, Kineto's GPU
projections, …) is counted and dropped with its batch. A damaged kept event raises `Damaged` as its batch is read.
`finish()` gives the columns (`Collected`). Definitions: `kineto`.
"""

from __future__ import annotations

import operator
import re
from collections import Counter, defaultdict
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from .kineto_events import (
    MAX_NS,
    Damaged,
    Spans,
    arg_ints,
    check_names,
    complete,
    describe,
    describe_event,
    ints,
    ns_column,
    refuse_negative,
    small_int,
)
from .kineto_json import UNSET, Args, Event

# Kineto's categories (lower case: older Kineto wrote "Kernel", "Runtime", "Memcpy", …) → what the reader makes of them.
RANGE, FRAME, API_RUNTIME, API_DRIVER, KERNEL, MEMCPY, MEMSET = range(7)
ROLES = {
    "user_annotation": RANGE, "python_function": FRAME,
    "cuda_runtime": API_RUNTIME, "runtime": API_RUNTIME, "cuda_driver": API_DRIVER, "driver": API_DRIVER,
    "kernel": KERNEL, "gpu_memcpy": MEMCPY, "memcpy": MEMCPY, "gpu_memset": MEMSET, "memset": MEMSET,
}
OTHER, NO_CATEGORY = -1, -2
_CAT = operator.attrgetter("cat")
_ARGS = operator.attrgetter("args")
_NO_ARGS = Args()
_STREAM_TID = re.compile(r"(?:stream\s*)?(\d{1,18})")



def _checked_times(at: list[int], sel: list, names: list, ts: list, dur: list) -> tuple[np.ndarray, np.ndarray]:
    """A batch's start and duration in ns, its names checked and no duration negative (`Damaged` otherwise)."""
    check_names(at, sel, names)
    start = ns_column(at, sel, ts, "ts")
    duration = ns_column(at, sel, dur, "dur")
    refuse_negative(at, sel, duration)
    return start, duration

def _args(sel: list) -> list[Args]:
    return [a if a is not None else _NO_ARGS for a in map(_ARGS, sel)]


def _cat(parts: list, dtype) -> np.ndarray:
    return np.concatenate(parts) if parts else np.empty(0, dtype=dtype)


@dataclass
class Collected:
    """The columns of a whole trace (`Collector.finish`)."""

    event_counts: dict[str, int]
    processes: dict[int, dict[str, str]]
    threads: dict[tuple[int, int], str]
    ranges: Spans
    frames: Spans
    runtime: Spans
    driver: Spans
    api_corr: np.ndarray
    ops: dict[str, np.ndarray]
    describe_range: Any
    describe_api: Any
    describe_op: Any


class Collector:
    """The `take` of `kineto_json.read_document` (module docstring)."""

    def __init__(self) -> None:
        self.cat_counts: dict[str, int] = {}
        self.phase_counts: dict[str, int] = {}
        self.role_of: dict[Any, int] = {None: NO_CATEGORY, UNSET: NO_CATEGORY}
        self.spelling: dict[str, int] = {}
        self.processes: dict[int, dict[str, str]] = {}
        self.threads: dict[tuple[int, int], str] = {}
        self.parts: list[defaultdict[str, list]] = [defaultdict(list) for _ in range(7)]
        self.frame_names: dict[str, str] = {}

    # -- a batch ----------------------------------------------------------------------------------------------------
    def __call__(self, first: int, events: list) -> None:
        if len(events) == 1 and type(events[0]) is not Event:
            raise Damaged(f"traceEvents[{first}] is not an event (a JSON object): {events[0]!r:.60}")
        cats = list(map(_CAT, events))
        try:
            counts = Counter(cats)
        except TypeError:  # an unhashable `cat` (a list, an object)
            k = next(k for k, c in enumerate(cats) if isinstance(c, (list, dict)))
            raise Damaged(f"traceEvents[{first + k}] has a 'cat' that is not a name: {cats[k]!r:.60}") from None
        present: set[int] = set()
        for cat, n in counts.items():
            role = self.role_of.get(cat)
            if role is None:
                role = self.role_of[cat] = ROLES.get(cat.lower(), OTHER) if isinstance(cat, str) else OTHER
            present.add(role)
            if role != NO_CATEGORY:
                key = str(cat)
                self.cat_counts[key] = self.cat_counts.get(key, 0) + n
        if present <= {OTHER}:
            return
        codes = np.fromiter(map(self.role_of.__getitem__, cats), dtype=np.int8, count=len(cats))
        if NO_CATEGORY in present:
            for k in np.flatnonzero(codes == NO_CATEGORY).tolist():
                self._uncategorised(events[k])
        for role in sorted(present - {OTHER, NO_CATEGORY}):
            idx = np.flatnonzero(codes == role).tolist()
            sel = list(operator.itemgetter(*idx)(events)) if len(idx) > 1 else [events[idx[0]]]
            at = [first + k for k in idx]
            if role >= KERNEL:
                self._gpu(role, at, sel)
            else:
                self._spans(role, at, sel)

    def _uncategorised(self, e: Event) -> None:
        """An event without a category: counted by its phase; process_name / process_labels / thread_name metadata
        of integer processes and threads kept."""
        ph = None if e.ph is UNSET else e.ph
        key = f"({ph!s:.8} events)"
        self.phase_counts[key] = self.phase_counts.get(key, 0) + 1
        if ph != "M":
            return
        args, pid, tid = e.args, e.pid, e.tid
        if not small_int(pid) or args is None:
            return
        kind = e.name
        if kind == "process_name" and isinstance(args.name, str):
            self.processes.setdefault(pid, {})["name"] = args.name
        elif kind == "process_labels" and isinstance(args.labels, str):
            self.processes.setdefault(pid, {})["labels"] = args.labels
        elif kind == "thread_name" and small_int(tid) and isinstance(args.name, str):
            self.threads[(pid, tid)] = args.name

    def _spellings(self, sel: list) -> list[int]:
        spelling = self.spelling
        return [spelling.setdefault(c, len(spelling)) for c in map(_CAT, sel)]

    def _spans(self, role: int, at: list[int], sel: list) -> None:
        at, sel, (names, pid, tid, ts, dur) = complete(at, sel)
        if not at:
            return
        start, duration = _checked_times(at, sel, names, ts, dur)
        part = self.parts[role]
        part["index"].append(np.asarray(at, dtype=np.int64))
        part["pid"].append(ints(at, sel, pid, "pid"))
        part["tid"].append(ints(at, sel, tid, "tid"))
        part["start"].append(start)
        part["dur"].append(duration)
        if role == FRAME:  # each distinct name kept once: the batch's copies go with it
            part["names"].extend(map(self.frame_names.setdefault, names, names))
            return
        part["names"].extend(names)
        part["cat"].extend(self._spellings(sel))
        if role in (API_RUNTIME, API_DRIVER):
            part["corr"].append(arg_ints(at, sel, _args(sel), "correlation", 0, "correlation id"))

    def _gpu(self, role: int, at: list[int], sel: list) -> None:
        """A batch's GPU ops of one kind: times, device, stream, correlation, launch shape, bytes."""
        at, sel, (names, _pid, _tid, ts, dur) = complete(at, sel)
        if not at:
            return
        start, duration = _checked_times(at, sel, names, ts, dur)
        args = _args(sel)
        device = arg_ints(at, sel, args, "device", -1, "device")
        stream = arg_ints(at, sel, args, "stream", -1, "stream")
        for k in np.flatnonzero((device == -1) | (stream == -1)).tolist():  # older Kineto: no args.device/stream
            e = sel[k]
            pid, tid = e.pid, e.tid
            named = _STREAM_TID.fullmatch(tid.strip()) if isinstance(tid, str) else None
            if device[k] == -1:
                if not small_int(pid):
                    raise Damaged(f"{describe_event(at[k], e)} names no device (args.device, or an integer pid)")
                device[k] = pid
            if stream[k] == -1:
                if not small_int(tid) and not named:
                    raise Damaged(f"{describe_event(at[k], e)} names no stream (args.stream, or an integer tid)")
                stream[k] = tid if small_int(tid) else int(named.group(1)) if named else -1
        part = self.parts[role]
        part["index"].append(np.asarray(at, dtype=np.int64))
        part["names"].extend(names)
        part["cat"].extend(self._spellings(sel))
        part["start"].append(start)
        part["dur"].append(duration)
        part["device"].append(device)
        part["stream"].append(stream)
        part["context"].append(arg_ints(at, sel, args, "context", 0, "context"))
        part["corr"].append(arg_ints(at, sel, args, "correlation", 0, "correlation id"))
        part["graph_node"].append(arg_ints(at, sel, args, "graph_node", None, "graph node id"))
        if role != KERNEL:
            part["bytes"].append(arg_ints(at, sel, args, "bytes", 0, "bytes"))
            return
        part["grid"].append(self._dims(at, sel, args, "grid"))
        part["block"].append(self._dims(at, sel, args, "block"))
        part["registers"].append(arg_ints(at, sel, args, "registers", 0, "registers per thread"))
        part["shared"].append(arg_ints(at, sel, args, "shared", 0, "shared memory"))

    @staticmethod
    def _dims(at: list[int], sel: list, args: list[Args], key: str) -> np.ndarray:
        """A kernel's `args.grid` / `args.block` (three integers; zeros when missing) as an (n, 3) int64 array."""
        dims = list(map(operator.attrgetter(key), args))
        try:
            out = np.array(dims)
            if out.dtype == np.int64 and out.shape == (len(dims), 3) and (len(dims) == 0 or abs(out).max() < MAX_NS):
                return out
        except (TypeError, ValueError, OverflowError):
            pass
        out = np.zeros((len(dims), 3), dtype=np.int64)
        for k, d in enumerate(dims):
            if isinstance(d, list) and len(d) == 3 and all(small_int(v) for v in d):
                out[k] = d
            elif d is not None:
                raise Damaged(f"{describe_event(at[k], sel[k])} has an args.{key} that is not three integers "
                              f"({d!r:.40})")
        return out

    # -- the whole trace --------------------------------------------------------------------------------------------
    def _spans_of(self, role: int) -> Spans:
        p = self.parts[role]
        return Spans(_cat(p["index"], np.int64), p["names"], _cat(p["pid"], np.int64), _cat(p["tid"], np.int64),
                     _cat(p["start"], np.int64), _cat(p["dur"], np.int64))

    def finish(self) -> Collected:
        counts = {**self.cat_counts, **self.phase_counts}
        spellings = list(self.spelling)
        ranges, runtime, driver = (self._spans_of(r) for r in (RANGE, API_RUNTIME, API_DRIVER))
        api_names = runtime.names + driver.names
        api_cat = self.parts[API_RUNTIME]["cat"] + self.parts[API_DRIVER]["cat"]
        range_names, range_cat = list(ranges.names), self.parts[RANGE]["cat"]
        gpu = [self.parts[r] for r in (KERNEL, MEMCPY, MEMSET)]
        op_names = [n for p in gpu for n in p["names"]]
        op_cat = [c for p in gpu for c in p["cat"]]

        def column(key: str, parts=gpu, dtype=np.int64) -> np.ndarray:
            return _cat([a for p in parts for a in p[key]], dtype)

        start, dur = column("start"), column("dur")
        n_kernel = sum(len(a) for a in gpu[0]["index"])
        ops = {
            "index": column("index"),
            "kind": np.repeat(np.array([0, 1, 2], dtype=np.int8), [sum(len(a) for a in p["index"]) for p in gpu]),
            "names": np.asarray(op_names, dtype=object),
            "name_code": pd.factorize(np.asarray(op_names, dtype=object))[0],
            "start_ns": start, "duration_ns": dur, "end_ns": start + dur, "device_id": column("device"),
            "context_id": column("context"), "stream_id": column("stream"), "correlation_id": column("corr"),
            "grid": column("grid").reshape(n_kernel, 3), "block": column("block").reshape(n_kernel, 3),
            "registers": column("registers"), "shared": column("shared"),
            "graph_node": column("graph_node", gpu[:1]), "mem_graph_node": column("graph_node", gpu[1:]),
            "bytes": column("bytes"),
        }
        return Collected(
            event_counts=dict(sorted(counts.items(), key=lambda kv: -kv[1])), processes=self.processes,
            threads=self.threads, ranges=ranges, frames=self._spans_of(FRAME), runtime=runtime, driver=driver,
            api_corr=_cat(self.parts[API_RUNTIME]["corr"] + self.parts[API_DRIVER]["corr"], np.int64), ops=ops,
            describe_range=lambda k, idx: describe(int(idx[k]), spellings[range_cat[k]], range_names[k]),
            describe_api=lambda k, idx: describe(int(idx[k]), spellings[api_cat[k]], api_names[k]),
            describe_op=lambda k, idx: describe(int(idx[k]), spellings[op_cat[k]], op_names[k]),
        )
