"""The columns of every table a `Trace` hands out: name, unit and meaning, in the order of the frame.

One place for them: the accessors' docstrings (`help(Trace.kernels)`, `help(nsys_cc.project)`) are written from
these lists by `lists_columns`, and the tests check that the frames read from real exports have exactly these
columns, so the documentation cannot drift from what is returned. Times are int64 nanoseconds on the session
timeline (the export's own clock); `duration_ns` is always `end_ns - start_ns`.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar


@dataclass(frozen=True)
class Column:
    """One column of a returned frame: its `name`, its `unit` ("ns", "bytes", "count" or "" for ids, names and
    flags) and what it means."""

    name: str
    unit: str
    meaning: str


def names(columns: Sequence[Column]) -> list[str]:
    return [c.name for c in columns]


def describe(columns: Sequence[Column], title: str = "Columns") -> str:
    """The columns as a docstring section: one line per column, `name [unit]: meaning`."""
    lines = [f"{title}, in order (name [unit]: meaning):"]
    for c in columns:
        unit = f" [{c.unit}]" if c.unit else ""
        lines.append(f"    {c.name}{unit}: {c.meaning}")
    return "\n".join(lines)


F = TypeVar("F", bound=Callable)


def lists_columns(*sections: tuple[str, Sequence[Column]]) -> Callable[[F], F]:
    """Decorator: append the column sections (title, columns) to the function's docstring."""

    def add(fn: F) -> F:
        doc = inspect.cleandoc(fn.__doc__ or "")
        fn.__doc__ = "\n\n".join([doc, *(describe(cols, title) for title, cols in sections)])
        return fn

    return add


_TIMES = (
    Column("start_ns", "ns", "start on the session timeline"),
    Column("end_ns", "ns", "end on the session timeline"),
    Column("duration_ns", "ns", "end_ns - start_ns"),
)
_GPU_ACTIVITY = (
    *_TIMES,
    Column("device_id", "", "CUDA device (deviceId)"),
    Column("context_id", "", "CUDA context (contextId)"),
    Column("stream_id", "", "CUDA stream (streamId)"),
    Column("correlation_id", "", "joins the op to the API call that launched it (with global_pid); 0 = none"),
    Column("global_pid", "", "nsys's globalPid of the process (full value, for the join)"),
    Column("pid", "", "process id decoded from global_pid"),
)

NVTX_RANGES = (
    Column("range_id", "", "NVTX_EVENTS rowid (nsys's RangeId in nvtxgpuproj)"),
    Column("name", "", "the range's message (registered string or inline text; one leading ':' dropped)"),
    Column("domain", "", "NVTX domain name, '' for the default domain"),
    Column("qualified_name", "", "'domain:name', or name in the default domain (what nsys 2022.4's reports show)"),
    Column("range_style", "", "'push/pop' or 'start/end' (nsys's Style; `style` is pandas' DataFrame.style)"),
    *_TIMES,
    Column("global_tid", "", "nsys's globalTid of the thread the range started on"),
    Column("pid", "", "process id decoded from global_tid"),
    Column("tid", "", "thread id decoded from global_tid"),
    Column("end_global_tid", "", "thread a start/end range ended on, when another one (nullable)"),
    Column("ended_on_other_thread", "", "True when end_global_tid is set (nsys does not project such ranges)"),
    Column("level", "count", "nesting depth on the range's own thread (0 = outermost)"),
    Column("parent_id", "", "range_id of the shortest enclosing range on the thread (nullable)"),
    Column("payload", "", "the range's numeric payload (float64, NaN when none; nsys_cc writes token counts)"),
    Column("category", "", "NVTX category id (nullable)"),
    Column("open_at_end", "", "True when the range was still open when the capture ended"),
)

CUDA_API = (
    *_TIMES,
    Column("global_tid", "", "nsys's globalTid of the calling thread"),
    Column("pid", "", "process id decoded from global_tid"),
    Column("tid", "", "thread id decoded from global_tid"),
    Column("correlation_id", "", "joins the call to the GPU work it launched"),
    Column("name", "", "API function, e.g. cudaLaunchKernel"),
    Column("api", "", "'runtime', 'driver' or 'other'"),
)

KERNELS = (
    *_GPU_ACTIVITY,
    Column("name", "", "kernel base name (shortName)"),
    Column("demangled_name", "", "full demangled kernel name"),
    Column("grid_x", "count", "grid size in blocks, x"),
    Column("grid_y", "count", "grid size in blocks, y"),
    Column("grid_z", "count", "grid size in blocks, z"),
    Column("block_x", "count", "block size in threads, x"),
    Column("block_y", "count", "block size in threads, y"),
    Column("block_z", "count", "block size in threads, z"),
    Column("graph_node_id", "", "CUDA graph node, when the kernel ran as a graph node traced per node (nullable)"),
    Column("registers_per_thread", "count", "registers per thread"),
    Column("static_shared_memory", "bytes", "static shared memory per block"),
    Column("dynamic_shared_memory", "bytes", "dynamic shared memory per block"),
)

MEMOPS = (
    Column("kind", "", "'memcpy' or 'memset'"),
    *_GPU_ACTIVITY,
    Column("bytes", "bytes", "bytes copied or set"),
    Column("graph_node_id", "", "CUDA graph node, when run as one (nullable)"),
    Column("copy_kind", "", "memcpy direction, e.g. 'Host-to-Device' (the CUPTI number as text without the "
                            "export's ENUM_CUDA_MEMCPY_OPER table); missing for memsets"),
)

GRAPH_LAUNCHES = (
    *_GPU_ACTIVITY,
    Column("graph_id", "", "CUDA graph id"),
    Column("graph_exec_id", "", "executable graph id"),
)

GPU_OPS = (
    Column("kind", "", "'kernel', 'memcpy', 'memset' or 'graph'"),
    Column("name", "", "kernel base name; '[CUDA memcpy <direction>]'; '[CUDA memset]'; '[CUDA graph <graph_id>]'"),
    *_TIMES,
    Column("device_id", "", "CUDA device (deviceId)"),
    Column("stream_id", "", "CUDA stream (streamId)"),
    Column("correlation_id", "", "joins the op to the API call that launched it (with global_pid); 0 = none"),
    Column("global_pid", "", "nsys's globalPid of the process (full value, for the join)"),
    Column("pid", "", "process id decoded from global_pid"),
)

# Frames only a PyTorch-profiler (Kineto) trace gives (`KinetoTrace.processes()`, `.threads()`, `.devices()`).
PROCESSES = (
    Column("pid", "", "process id (the events' pid)"),
    Column("name", "", "process_name metadata (e.g. 'python', 'VLLM::EngineCore'); '' when none"),
    Column("labels", "", "process_labels metadata (e.g. 'CPU'); '' when none"),
)

THREADS = (
    Column("pid", "", "process id"),
    Column("tid", "", "thread id"),
    Column("global_tid", "", "the thread's id in the frames' global_tid columns"),
    Column("name", "", "thread_name metadata; '' when the trace names it not"),
    Column("ranges", "count", "user_annotation ranges on the thread"),
    Column("launches", "count", "CUDA runtime and driver calls on the thread"),
)

DEVICES = (
    Column("device_id", "", "device index (deviceProperties' id; GPU ops' device_id)"),
    Column("name", "", "device name, e.g. 'NVIDIA H100 80GB HBM3'"),
    Column("total_memory", "bytes", "totalGlobalMem"),
    Column("compute_major", "", "compute capability, major"),
    Column("compute_minor", "", "compute capability, minor"),
    Column("sms", "count", "streaming multiprocessors (numSms)"),
)

# What each accessor of `Trace` returns (the accessor's name → its columns).
TABLES: dict[str, tuple[Column, ...]] = {
    "nvtx_ranges": NVTX_RANGES,
    "cuda_api": CUDA_API,
    "kernels": KERNELS,
    "memops": MEMOPS,
    "graph_launches": GRAPH_LAUNCHES,
    "gpu_ops": GPU_OPS,
    "python_frames": NVTX_RANGES,
}
