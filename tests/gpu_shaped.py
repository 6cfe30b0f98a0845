"""GPU-shaped traces for tests: a real CPU trace with CUDA activity added whose every forward's GPU work is known.

There is no GPU on the development machines, so GPU logic is tested on copies of real CPU traces (the project's
fixtures, made by the real nsys 2022.4 and vLLM's CPU build) to which this helper adds the CUPTI tables a GPU run
would have. These are NOT GPU traces and must never be presented as such; they exist so that tests know the exact
GPU work each forward range launched and can check the analysis against it.

What is added, with the schema of real exports (nsys 2022.4's `--lazy=false` DDL for RUNTIME and KERNEL, the newer
documented `CUPTI_ACTIVITY_KIND_GRAPH_TRACE` columns; docs/NSYS_REFERENCE.md, the public traces):
- `CUPTI_ACTIVITY_KIND_RUNTIME`: launch API calls (`cudaLaunchKernel_v7000`, `cudaGraphLaunch_v10000`, names in
  StringIds as in real exports, eventClass 0 = runtime) inside each chosen NVTX range, on the range's own thread
  (or another thread, to model kernels launched from elsewhere), each with its own correlationId (counting up from
  1 per process, as CUPTI does);
- `CUPTI_ACTIVITY_KIND_KERNEL`: the kernels, asynchronous: a kernel starts after its launch call has returned and
  after the previous kernel on the stream ended, so GPU work trails the CPU range and may run past its end (and past
  the next range's start). A CUDA graph launched node by node (`--cuda-graph-trace=node`) gives several kernel rows
  sharing the `cudaGraphLaunch` call's correlationId, each with a `graphNodeId`;
- `CUPTI_ACTIVITY_KIND_GRAPH_TRACE`: a graph recorded whole (`--cuda-graph-trace=graph`, the default of recent
  nsys): one row per launch, no kernel rows.

`add_gpu_work(src, dst, plan)` copies `src` to `dst` (the source is never modified), adds the work that `plan`
gives for every range it names, and returns a `GpuShaped` with, per range, the exact GPU figures the analysis
should find (`Work`: span, kernel sum, busy union, kernel and launch counts), computed here in plain Python from
the rows written. `plan(rng)` returns a list of `Launch`es for a range (`Range`: name, start, end, thread, payload);
`steady(...)` makes a simple plan in which each range's GPU time is a chosen multiple of its wall time.
"""

from __future__ import annotations

import shutil
import sqlite3
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

FORWARD = "model_executable()"
DRAFT = "draft_model_executable()"
LAUNCH_KERNEL = "cudaLaunchKernel_v7000"
GRAPH_LAUNCH = "cudaGraphLaunch_v10000"
PID_MASK = 0xFFFFFFFFFF000000  # globalPid = globalTid & PID_MASK (docs/NSYS_REFERENCE.md)
STREAM = 7
DEVICE = 0
CONTEXT = 1

RUNTIME_DDL = """CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (
    start INTEGER NOT NULL, end INTEGER NOT NULL, eventClass INTEGER NOT NULL, globalTid INTEGER,
    correlationId INTEGER, nameId INTEGER NOT NULL, returnValue INTEGER NOT NULL, callchainId INTEGER)"""
KERNEL_DDL = """CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (
    start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId INTEGER NOT NULL, contextId INTEGER NOT NULL,
    streamId INTEGER NOT NULL, correlationId INTEGER, globalPid INTEGER, demangledName INTEGER NOT NULL,
    shortName INTEGER NOT NULL, mangledName INTEGER, launchType INTEGER, cacheConfig INTEGER,
    registersPerThread INTEGER NOT NULL, gridX INTEGER NOT NULL, gridY INTEGER NOT NULL, gridZ INTEGER NOT NULL,
    blockX INTEGER NOT NULL, blockY INTEGER NOT NULL, blockZ INTEGER NOT NULL, staticSharedMemory INTEGER NOT NULL,
    dynamicSharedMemory INTEGER NOT NULL, localMemoryPerThread INTEGER NOT NULL, localMemoryTotal INTEGER NOT NULL,
    gridId INTEGER NOT NULL, sharedMemoryExecuted INTEGER, graphNodeId INTEGER, sharedMemoryLimitConfig INTEGER)"""
GRAPH_TRACE_DDL = """CREATE TABLE CUPTI_ACTIVITY_KIND_GRAPH_TRACE (
    start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId INTEGER NOT NULL, contextId INTEGER NOT NULL,
    greenContextId INTEGER, streamId INTEGER NOT NULL, correlationId INTEGER, globalPid INTEGER,
    graphId INTEGER NOT NULL, graphExecId INTEGER NOT NULL)"""


@dataclass(frozen=True)
class Range:
    """An NVTX push/pop range of the source trace, as the plan sees it."""

    name: str
    start: int
    end: int
    global_tid: int
    payload: int | None

    @property
    def duration(self) -> int:
        return self.end - self.start


@dataclass(frozen=True)
class Launch:
    """One launch API call made at `offset` ns after the range start, lasting `api_ns`, whose GPU work is
    `kernels` (durations, ns, run back to back on the stream) — a plain kernel launch when there is one kernel and
    `graph` is None. `graph`: "node" (a cudaGraphLaunch whose kernels are recorded one by one) or "whole" (one
    GRAPH_TRACE row as long as the kernels together, no kernel rows). `lag`: ns between the call's return and the
    earliest GPU start. `thread`: launch from this globalTid instead of the range's own. `names`: the kernels'
    names (default `kernel_0`, `kernel_1`, `kernel_2`, … in turn)."""

    offset: int
    api_ns: int
    kernels: tuple[int, ...]
    graph: str | None = None
    lag: int = 2_000
    thread: int | None = None
    names: tuple[str, ...] | None = None


@dataclass
class Work:
    """The GPU work written for one range, and what a projection must find for it (ns; None where nothing)."""

    range: Range
    # (start, end, kind, name): kind "kernel" | "graph"; name the kernel's (a graph's is "[CUDA graph 1]")
    ops: list[tuple[int, int, str, str]] = field(default_factory=list)
    launches: int = 0  # launch calls inside the range on its thread whose work was written
    api_ns: int = 0  # their summed duration

    @property
    def span_ns(self) -> int | None:
        return max(o[1] for o in self.ops) - min(o[0] for o in self.ops) if self.ops else None

    @property
    def kernel_sum_ns(self) -> int | None:
        """Sum of kernel durations; None when any of the work is a graph recorded whole (its kernels are unknown)."""
        if not self.ops or any(o[2] == "graph" for o in self.ops):
            return None
        return sum(o[1] - o[0] for o in self.ops)

    @property
    def kernels(self) -> int:
        return sum(o[2] == "kernel" for o in self.ops)

    @property
    def busy_ns(self) -> int | None:
        if not self.ops:
            return None
        total, reach = 0, None
        for s, e, *_ in sorted(self.ops):
            if reach is None or s > reach:
                total, reach = total + e - s, e
            elif e > reach:
                total, reach = total + e - reach, e
        return total

    @property
    def gpu_end(self) -> int | None:
        return max(o[1] for o in self.ops) if self.ops else None


@dataclass
class GpuShaped:
    """The trace written (`path`) and the work of every range the plan gave work to, in trace order."""

    path: Path
    work: list[Work]

    def of(self, name: str) -> list[Work]:
        return [w for w in self.work if w.range.name == name]


def read_ranges(path: str | Path, names: Sequence[str]) -> list[Range]:
    """Closed push/pop ranges named `names` (text or registered string), by start — read with plain SQL."""
    con = sqlite3.connect(f"file:{Path(path).resolve()}?mode=ro", uri=True)
    try:
        marks = ",".join("?" * len(names))
        rows = con.execute(
            "SELECT coalesce(e.text, s.value), e.start, e.\"end\", e.globalTid, e.int64Value FROM NVTX_EVENTS e "
            "LEFT JOIN StringIds s ON s.id = e.textId WHERE e.eventType = 59 AND e.\"end\" IS NOT NULL "
            f"AND coalesce(e.text, s.value) IN ({marks}) ORDER BY e.start", tuple(names)).fetchall()
    finally:
        con.close()
    return [Range(n, int(s), int(e), int(t), None if p is None else int(p)) for n, s, e, t, p in rows]


def steady(gpu_factor: float = 1.5, launches: int = 4, graph: str | None = None, api_ns: int = 5_000,
           names: Sequence[str] = (FORWARD, DRAFT), thread: int | None = None) -> Callable[[Range], list[Launch]]:
    """A plan: every range named `names` launches `launches` calls spread over its first 60 %, whose kernels take
    `gpu_factor` × the range's wall time in all (so with a factor above ~0.4 the GPU work ends after the range).
    `graph` "node"/"whole": the range instead makes one cudaGraphLaunch running `launches` kernels."""

    def plan(rng: Range) -> list[Launch]:
        if rng.name not in names:
            return []
        total = max(int(rng.duration * gpu_factor), launches)
        each = total // launches
        kernels = tuple([each] * (launches - 1) + [total - each * (launches - 1)])
        if graph is not None:
            return [Launch(rng.duration // 10, min(api_ns, rng.duration // 4), kernels, graph=graph, thread=thread)]
        step = max(rng.duration * 6 // (10 * launches), 1)
        api = min(api_ns, max(step - 1, 1))
        return [Launch(i * step, api, (k,), thread=thread) for i, k in enumerate(kernels)]

    return plan


def add_gpu_work(src: str | Path, dst: str | Path, plan: Callable[[Range], list[Launch]],
                 names: Sequence[str] = (FORWARD, DRAFT), *, gpu_rows: bool = True) -> GpuShaped:
    """Copy `src` to `dst` and add, for every range named `names`, the CUDA activity `plan` gives (module docstring).

    gpu_rows=False writes the launch calls but no GPU activity (kernels/graphs), as when CUPTI loses it."""
    dst = Path(dst)
    shutil.copyfile(src, dst)
    ranges = read_ranges(dst, names)
    con = sqlite3.connect(dst)
    try:
        strings = dict(con.execute("SELECT value, id FROM StringIds"))
        next_id = max(strings.values(), default=-1) + 1

        def sid(text: str) -> int:
            nonlocal next_id
            if text not in strings:
                con.execute("INSERT INTO StringIds (id, value) VALUES (?, ?)", (next_id, text))
                strings[text], next_id = next_id, next_id + 1
            return strings[text]

        existing = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        for table, ddl in (("CUPTI_ACTIVITY_KIND_RUNTIME", RUNTIME_DDL), ("CUPTI_ACTIVITY_KIND_KERNEL", KERNEL_DDL),
                           ("CUPTI_ACTIVITY_KIND_GRAPH_TRACE", GRAPH_TRACE_DDL)):
            if table not in existing:
                con.execute(ddl)
        corr: dict[int, int] = {}  # per process: the last correlationId given
        stream_free: dict[int, int] = {}  # per process: when the stream is next idle
        grid = 0
        work = []
        for rng in ranges:
            w = Work(rng)
            for launch in plan(rng):
                tid = launch.thread if launch.thread is not None else rng.global_tid
                pid = tid & PID_MASK
                corr[pid] = corr.get(pid, 0) + 1
                api_start = rng.start + launch.offset
                api_end = api_start + launch.api_ns
                assert api_end <= rng.end, "a plan's launch must lie inside its range"
                name = LAUNCH_KERNEL if launch.graph is None else GRAPH_LAUNCH
                con.execute("INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (?, ?, 0, ?, ?, ?, 0, NULL)",
                            (api_start, api_end, tid, corr[pid], sid(name)))
                if not gpu_rows:
                    continue
                t = max(api_end + launch.lag, stream_free.get(pid, 0))
                ops = []
                if launch.graph == "whole":
                    end = t + sum(launch.kernels)
                    con.execute("INSERT INTO CUPTI_ACTIVITY_KIND_GRAPH_TRACE VALUES (?, ?, ?, ?, NULL, ?, ?, ?, 1, 1)",
                                (t, end, DEVICE, CONTEXT, STREAM, corr[pid], pid))
                    ops.append((t, end, "graph", "[CUDA graph 1]"))
                    t = end
                else:
                    for node, dur in enumerate(launch.kernels):
                        grid += 1
                        label = launch.names[node] if launch.names else f"kernel_{node % 3}"
                        kname = sid(label)
                        node_id = node + 1 if launch.graph == "node" else None
                        con.execute(
                            "INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, NULL, 0, 0, 32, "
                            "1, 1, 1, 128, 1, 1, 0, 0, 0, 0, ?, NULL, ?, 0)",
                            (t, t + dur, DEVICE, CONTEXT, STREAM, corr[pid], pid, kname, kname, grid, node_id))
                        ops.append((t, t + dur, "kernel", label))
                        t += dur
                stream_free[pid] = t
                if launch.thread is None or launch.thread == rng.global_tid:
                    w.ops += ops
                    w.launches += 1
                    w.api_ns += launch.api_ns
            work.append(w)
        con.commit()
    finally:
        con.close()
    return GpuShaped(dst, work)


# Kernels of known names (name, share of a forward's wall time), a target's and a draft's, for `named_plan`.
TARGET_KERNELS = (("ampere_sgemm_128x64_tn", 0.45), ("flash_fwd_kernel", 0.25), ("rms_norm_kernel", 0.10))
DRAFT_KERNELS = (("ampere_sgemm_64x32_tn", 0.30), ("flash_fwd_kernel", 0.35), ("silu_and_mul_kernel", 0.05))


def named_plan(kernels: tuple[tuple[str, float], ...], graph: str | None = None):
    """Each forward launches one kernel per (name, share of its wall time), one after the other in its first half; or,
    with `graph`, one CUDA graph running them all."""
    def plan(rng: Range) -> list[Launch]:
        if rng.name != FORWARD:
            return []
        durations = tuple(max(int(rng.duration * share), 1) for _, share in kernels)
        names = tuple(n for n, _ in kernels)
        if graph:
            return [Launch(rng.duration // 10, 1_000, durations, graph=graph, names=names)]
        step = rng.duration // (2 * len(kernels))
        return [Launch(i * step, 1_000, (d,), names=(n,)) for i, (n, d) in enumerate(zip(names, durations))]

    return plan
