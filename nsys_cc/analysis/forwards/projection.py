"""NVTX ranges projected onto the GPU: which GPU work each range launched, and how long it took.

Rule (nsys's `nvtxgpuproj`, 2022.4 `reports/nvtxgpuproj.py`): a GPU operation belongs to a range when the
CUDA API call that launched it — joined on correlationId and process (`api.global_tid & PID_MASK ==
op.global_pid`) — lies entirely inside the range on the range's own thread: `range.start <= api.start`
and `api.end <= range.end`, same globalTid. The op's own GPU time may run past the range. It counts for
every enclosing range, not only the innermost. Ranges that ended on another thread are not projected
(as in nsys). GPU operations are kernels ∪ memcpy ∪ memset ∪ CUDA-graph launches (GRAPH_TRACE rows,
recorded with `--cuda-graph-trace=graph`); nsys 2022.4 leaves GRAPH_TRACE out, so for a graph launched
whole its projection finds nothing while ours does.

Columns added by `project` (Int64, <NA> when the range launched nothing, was not projected, or the trace
has no CUDA API table):

- `proj_start_ns`, `proj_end_ns`: first op start, last op end; `proj_duration_ns` = their difference —
  nsys's projected duration, a span that includes GPU idle gaps and counts overlap once.
- `gpu_ops`: number of distinct launching API calls whose GPU work was found (nsys's NumGPUOps,
  count(DISTINCT correlationId)); a graph launch counts once however many kernels it ran.
- `kernels`: kernel rows; `kernel_sum_ns`: the sum of their durations (overlapping kernels count twice). Both are
  <NA> for a range that launched a CUDA graph recorded whole (a GRAPH_TRACE row with no kernel rows for its launch,
  nsys's `--cuda-graph-trace=graph`): the graph's kernels are not in the trace, so the figures are unknown, not 0.
  A graph traced node by node (`--cuda-graph-trace=node`) has one kernel row per node, with the launch's
  correlationId, and counts like any kernel.
- `gpu_busy_ns`: length of the union of all the range's op intervals (kernels, memcpy, memset, graphs).
- `launch_api_ns`: sum of the durations of the API calls inside the range that launched GPU work.
- `api_calls`: number of CUDA API rows inside the range on its thread (0 when none; <NA> only when
  not projected or the trace has no CUDA API table).

The calls and their GPU work are joined once per trace (`launches`: when an export holds several API rows with one
correlationId in one process, the innermost stands for the launch).

Computation: per thread, API calls sorted by start, each call's GPU ops right after those of the call before
(`launches.Launches`); each range's window of calls comes from two `np.searchsorted`,
and its ops are one slice; sums over windows come from prefix sums, first/last op times from
`np.minimum/maximum.reduceat`. Ranges with a call that starts inside but ends after them (rare) are
recomputed exactly. The union length needs the (range, op) pairs, built vectorised in bounded chunks.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import numpy as np
import pandas as pd

from ...errors import InputError
from ...trace.cuda import OP_KINDS
from ...trace.frames import NVTX_RANGES, Column, lists_columns, names
from ...trace.pages import with_small_pages
from ...trace.source import Trace, handed_out
from ..metrics import GPU_BUSY_NS, KERNEL_SUM_NS, LAUNCH_API_NS
from .launches import Launches, launches

# The columns `project` adds (Int64, <NA> when the range launched nothing, was not projected, or the trace has no
# CUDA API table); definitions in the module docstring.
PROJECTION = (
    Column("proj_start_ns", "ns", "start of the first GPU op the range launched"),
    Column("proj_end_ns", "ns", "end of the last GPU op the range launched"),
    Column("proj_duration_ns", "ns", "proj_end_ns - proj_start_ns: nsys's projected duration (a span, GPU idle gaps "
                                     "included); `gpu_span_ns` in a CostCoefficientResult"),
    Column("gpu_ops", "count", "launching API calls whose GPU work was found (nsys's NumGPUOps)"),
    Column("kernels", "count", "kernel rows launched"),
    Column(KERNEL_SUM_NS, "ns", "sum of the kernels' durations (overlapping kernels count twice)"),
    Column(GPU_BUSY_NS, "ns", "length of the union of all the range's op intervals"),
    Column(LAUNCH_API_NS, "ns", "sum of the durations of the API calls in the range that launched GPU work"),
    Column("api_calls", "count", "CUDA API rows inside the range on its thread"),
)
PROJECTION_COLUMNS = names(PROJECTION)
# Unknown (<NA>) also for a range that launched a CUDA graph recorded whole (GRAPH_TRACE rows, no kernel rows).
KERNEL_COLUMNS = ("kernels", KERNEL_SUM_NS)
GRAPH_KIND = OP_KINDS.index("graph")
I64_MAX = np.iinfo(np.int64).max
I64_MIN = np.iinfo(np.int64).min
# Upper bound on (range, op) pairs held in memory at once (union lengths, op totals).
PAIR_CHUNK = 1_000_000


def _windows(lc: Launches, ranges: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """[lo, hi) call positions whose start lies in [range.start, range.end] on the range's thread; `ok` marks
    ranges that are projected at all (on a thread with calls, not ended on another thread)."""
    n = len(ranges)
    lo = np.zeros(n, dtype=np.int64)
    hi = np.zeros(n, dtype=np.int64)
    gtid = ranges["global_tid"].to_numpy(np.int64)
    rs = ranges["start_ns"].to_numpy(np.int64)
    re_ = ranges["end_ns"].to_numpy(np.int64)
    ok = ~ranges["ended_on_other_thread"].to_numpy(bool)
    for g in np.unique(gtid):
        sel = np.flatnonzero(gtid == g)
        b, s = lc.threads.get(int(g), (0, 0))
        starts = lc.start[b:s]
        lo[sel] = b + np.searchsorted(starts, rs[sel], side="left")
        hi[sel] = b + np.searchsorted(starts, re_[sel], side="right")
    return lo, hi, ok


def _window_reduce(ufunc, values: np.ndarray, lo: np.ndarray, hi: np.ndarray, empty) -> np.ndarray:
    """ufunc over values[lo:hi] for each window; `empty` for empty windows. Windows are visited in lo order,
    so the in-between segments reduceat also computes add up to one pass over `values`."""
    out = np.full(len(lo), empty, dtype=values.dtype)
    nonempty = np.flatnonzero(hi > lo)
    if len(nonempty) == 0:
        return out
    order = nonempty[np.argsort(lo[nonempty], kind="stable")]
    idx = np.empty(2 * len(order), dtype=np.int64)
    idx[0::2] = lo[order]
    idx[1::2] = hi[order]
    padded = np.append(values, empty)
    out[order] = ufunc.reduceat(padded, idx)[0::2]
    return out


def _pairs(op_lo: np.ndarray, op_hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(owner, op position) for every op position in each [op_lo, op_hi) span, without a Python loop."""
    sizes = op_hi - op_lo
    owner = np.repeat(np.arange(len(sizes)), sizes)
    offsets = np.cumsum(sizes) - sizes
    return owner, np.arange(sizes.sum()) - np.repeat(offsets - op_lo, sizes)


def _union_lengths(lc: Launches, op_lo: np.ndarray, op_hi: np.ndarray) -> np.ndarray:
    """Length of the union of the op intervals at positions [op_lo, op_hi) of each span, in chunks of
    at most PAIR_CHUNK pairs (a single bigger span is done alone)."""
    out = np.zeros(len(op_lo), dtype=np.int64)
    for k, stop, owner, pos in _chunked_pairs(op_lo, op_hi):
        out[k:stop] = _union_of_pairs(owner, lc.op_start[pos], lc.op_end[pos], stop - k)
    return out


def _chunked_pairs(op_lo: np.ndarray, op_hi: np.ndarray):
    """(k, stop, owner, pos) for consecutive spans k:stop holding at most PAIR_CHUNK (span, op) pairs together
    (a single bigger span comes alone); `owner` is relative to k. Chunks without pairs are skipped."""
    ends = np.cumsum(op_hi - op_lo)
    k = 0
    while k < len(op_lo):
        done = ends[k - 1] if k else 0
        stop = max(k + 1, int(np.searchsorted(ends, done + PAIR_CHUNK, side="right")))
        owner, pos = _pairs(op_lo[k:stop], op_hi[k:stop])
        if len(pos):
            yield k, stop, owner, pos
        k = stop


def _union_of_pairs(owner, start, end, n) -> np.ndarray:
    """Union length of the intervals of each owner (`owner` ascending): sweep in start order, each interval
    adding what reaches past the furthest end so far."""
    new_owner = np.r_[True, owner[1:] != owner[:-1]]
    if not (new_owner[1:] | (start[1:] >= start[:-1])).all():  # ops of one launch are sorted; of a range, usually
        order = np.lexsort((start, owner))
        owner, start, end = owner[order], start[order], end[order]
    reach = _running_max_per_owner(owner, end)
    prev = np.r_[I64_MIN, reach[:-1]]
    prev[new_owner] = I64_MIN
    gain = np.clip(end - np.maximum(start, prev), 0, None)
    return np.bincount(owner, weights=gain, minlength=n).astype(np.int64)


def _running_max_per_owner(owner: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Running maximum of `values` restarting at each owner (`owner` ascending): lift each owner's values above
    every earlier owner's, so one `np.maximum.accumulate` never carries a maximum across owners."""
    if len(values) == 0:
        return values
    base = int(values.min())
    width = int(values.max()) - base + 1
    if (int(owner[-1]) + 1) * width >= 2**62:
        return pd.Series(values).groupby(owner).cummax().to_numpy()
    lift = owner.astype(np.int64) * width
    return np.maximum.accumulate(values - base + lift) - lift + base


def _exact_ops(lc: Launches, calls: np.ndarray) -> np.ndarray:
    """Op positions launched by the listed calls."""
    _, pos = _pairs(lc.op_ptr[calls], lc.op_ptr[calls + 1])
    return pos


def _exact_calls(lc: Launches, ranges: pd.DataFrame, lo, hi, ok) -> dict[int, np.ndarray]:
    """Ranges whose window holds a call ending after the range: their calls, filtered one by one."""
    last_end = _window_reduce(np.maximum, lc.end, lo, hi, I64_MIN)
    re_ = ranges["end_ns"].to_numpy(np.int64)
    out = {}
    for i in np.flatnonzero(ok & (last_end > re_)):
        calls = np.arange(lo[i], hi[i])
        out[int(i)] = calls[lc.end[calls] <= re_[i]]
    return out


@lists_columns(("Columns of `ranges` kept as they are (by default those of `Trace.nvtx_ranges()`)", NVTX_RANGES),
               ("Then the columns added (Int64; <NA> where nothing was projected)", PROJECTION))
@with_small_pages
def project(trace: Trace | str | os.PathLike, ranges: pd.DataFrame | None = None) -> pd.DataFrame:
    """`ranges` (default: `trace.nvtx_ranges()`) with their GPU projection; same rows and index (`ranges` itself is
    left as it was). Definitions in the module docstring (`nsys_cc.analysis.forwards.projection`). `trace`: an open
    `Trace`, or a trace's path (opened and closed here).

    In a `CostCoefficientResult` these are per-forward metrics under the metric names (`analysis.metrics`):
    duration_ns → wall_ns, proj_duration_ns → gpu_span_ns; kernel_sum_ns, gpu_busy_ns, launch_api_ns keep their
    names, and gpu_idle_ns = gpu_span_ns − gpu_busy_ns is added.
    """
    if isinstance(trace, (str, os.PathLike)):
        from ...trace import open_trace

        with open_trace(trace) as opened:
            return project(opened, ranges)
    if not callable(getattr(trace, "nvtx_ranges", None)):
        raise InputError(f"trace: give an open Trace (open_trace) or a trace's path, not {type(trace).__name__}",
                         param="trace")
    if ranges is not None and not isinstance(ranges, pd.DataFrame):
        raise InputError(f"ranges: give NVTX ranges as a DataFrame (Trace.nvtx_ranges()), not {type(ranges).__name__}",
                         param="ranges")
    ranges = trace.nvtx_ranges() if ranges is None else ranges
    out = handed_out(ranges)
    n = len(ranges)
    if n == 0 or trace.count("cuda_api") == 0:
        return _with_columns(out, {col: pd.arrays.IntegerArray(np.zeros(n, np.int64), mask=np.ones(n, bool))
                                   for col in PROJECTION_COLUMNS})
    lc = launches(trace)
    lo, hi, ok = _windows(lc, ranges)
    lo = np.where(ok, lo, 0)
    hi = np.where(ok, hi, 0)
    exact = _exact_calls(lc, ranges, lo, hi, ok)

    def window_sum(values: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        prefix = np.zeros(len(values) + 1, dtype=np.int64)
        np.cumsum(values, out=prefix[1:])
        return prefix[b] - prefix[a]

    op_lo, op_hi = lc.op_ptr[lo], lc.op_ptr[hi]
    kern = lc.op_kind == 0
    launch_dur = np.where(lc.launch == 1, lc.end - lc.start, 0)
    first = _window_reduce(np.minimum, lc.op_start, op_lo, op_hi, I64_MAX)
    last = _window_reduce(np.maximum, lc.op_end, op_lo, op_hi, I64_MIN)
    gpu_ops = window_sum(lc.launch, lo, hi)
    kernels = window_sum(kern, op_lo, op_hi)
    kernel_sum = window_sum(np.where(kern, lc.op_end - lc.op_start, 0), op_lo, op_hi)
    launch_ns = window_sum(launch_dur, lo, hi)
    api_calls = hi - lo
    for i, calls in exact.items():
        launched = calls[lc.launch[calls] == 1]
        ops = _exact_ops(lc, calls)
        first[i] = lc.op_start[ops].min(initial=I64_MAX)
        last[i] = lc.op_end[ops].max(initial=I64_MIN)
        gpu_ops[i] = len(launched)
        kernels[i] = kern[ops].sum()
        kernel_sum[i] = (lc.op_end[ops] - lc.op_start[ops])[kern[ops]].sum()
        launch_ns[i] = launch_dur[launched].sum()
        api_calls[i] = len(calls)
    busy = _union_lengths(lc, op_lo, op_hi)
    for i, calls in exact.items():
        ops = _exact_ops(lc, calls)
        busy[i] = _union_of_pairs(np.zeros(len(ops), np.int64), lc.op_start[ops], lc.op_end[ops], 1)[0]

    launched_any = ok & (gpu_ops > 0)
    # A graph recorded whole (a GRAPH_TRACE row and no kernel rows for its launch: nsys's --cuda-graph-trace=graph)
    # ran kernels that the trace does not list, so the range's kernel figures are unknown, not 0.
    call_graphs = window_sum(lc.op_kind == GRAPH_KIND, lc.op_ptr[:-1], lc.op_ptr[1:])
    call_kernels = window_sum(kern, lc.op_ptr[:-1], lc.op_ptr[1:])
    whole = (call_graphs > 0) & (call_kernels == 0)
    whole_graphs = window_sum(whole, lo, hi)
    for i, calls in exact.items():
        whole_graphs[i] = whole[calls].sum()
    kernels_unknown = ~launched_any | (whole_graphs > 0)
    columns = {
        "proj_start_ns": first,
        "proj_end_ns": last,
        "proj_duration_ns": last - np.where(launched_any, first, 0),
        "gpu_ops": gpu_ops,
        "kernels": kernels,
        KERNEL_SUM_NS: kernel_sum,
        GPU_BUSY_NS: busy,
        LAUNCH_API_NS: launch_ns,
    }
    added = {col: pd.arrays.IntegerArray(values.astype(np.int64),
                                         mask=kernels_unknown if col in KERNEL_COLUMNS else ~launched_any)
             for col, values in columns.items()}
    added["api_calls"] = pd.arrays.IntegerArray(api_calls.astype(np.int64), mask=~ok)
    return _with_columns(out, added)


def _with_columns(frame: pd.DataFrame, columns: dict[str, pd.api.extensions.ExtensionArray]) -> pd.DataFrame:
    """`frame` with `columns` set, as `frame[col] = values` one by one would: new columns at the end in order, a
    column `frame` already has replaced in place. New ones are joined in one step (a column set at a time copies
    the frame's column index and block list each time: 1 ms a column on a small frame, which the many small
    projections of a short trace pay)."""
    if any(col in frame.columns for col in columns):
        for col, values in columns.items():
            frame[col] = values
        return frame
    out = pd.concat([frame, pd.DataFrame(columns, index=frame.index)], axis=1)
    out.attrs = frame.attrs
    return out


def _op_pairs(lc: Launches, ranges: pd.DataFrame) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """(range position, op position) for every op each range launched (rule above), in chunks of at most
    PAIR_CHUNK pairs (a single bigger range alone), ranges in order; ranges recomputed exactly come last."""
    lo, hi, ok = _windows(lc, ranges)
    lo = np.where(ok, lo, 0)
    hi = np.where(ok, hi, 0)
    exact = _exact_calls(lc, ranges, lo, hi, ok)
    op_lo, op_hi = lc.op_ptr[lo], lc.op_ptr[hi]
    if exact:
        listed = np.fromiter(exact, dtype=np.int64, count=len(exact))
        op_hi[listed] = op_lo[listed]
    for k, _stop, owner, pos in _chunked_pairs(op_lo, op_hi):
        yield owner + k, pos
    for i, calls in exact.items():
        pos = _exact_ops(lc, calls)
        yield np.full(len(pos), i, dtype=np.int64), pos


def range_ops(trace: Trace, ranges: pd.DataFrame) -> pd.DataFrame:
    """One row per (range, GPU op) the range launched (by the rule above): `range_id` and the columns of
    `trace.gpu_ops()`. Meant for a few thousand ranges (a kernel breakdown per forward; `op_totals` gives the
    totals for any number of ranges without one row each); reads every GPU op once per trace."""
    ops = trace.gpu_ops()
    if len(ranges) == 0 or trace.count("cuda_api") == 0 or len(ops) == 0:
        return pd.concat([pd.DataFrame({"range_id": pd.Series(dtype="int64")}), ops.iloc[:0]], axis=1)
    lc = launches(trace)
    pairs = list(_op_pairs(lc, ranges))
    owner = np.concatenate([o for o, _ in pairs]) if pairs else np.empty(0, np.int64)
    op_pos = np.concatenate([p for _, p in pairs]) if pairs else np.empty(0, np.int64)
    order = np.argsort(owner, kind="stable")
    owner, op_pos = owner[order], op_pos[order]
    rows = ops.iloc[lc.op_rows[op_pos]].reset_index(drop=True)
    rows.insert(0, "range_id", ranges["range_id"].to_numpy(np.int64)[owner])
    return rows


OP_TOTAL_COLUMNS = ["group", "kind", "name", "count", "duration_ns"]


def op_totals(trace: Trace, ranges: pd.DataFrame, groups) -> pd.DataFrame:
    """Per (group, kind, name): how many GPU ops the ranges launched (rule above; an op inside several of the
    ranges counts once for each) and the sum of their durations — what a kernel breakdown needs, at any number of
    ranges, without a row per (range, op).

    `groups` labels each row of `ranges` (its phase, say; None is a label too). Columns: group, kind (Categorical
    of "kernel" | "memcpy" | "memset" | "graph"), name (as `trace.gpu_ops()`), count, duration_ns; only
    combinations that occur, in no particular order.
    """
    labels = np.asarray(groups, dtype=object)
    if len(ranges) == 0 or trace.count("cuda_api") == 0:
        return pd.DataFrame({c: pd.Series(dtype="int64" if c in ("count", "duration_ns") else object)
                             for c in OP_TOTAL_COLUMNS})
    group_codes, group_names = pd.factorize(labels, use_na_sentinel=False)
    lc = launches(trace)
    n_kind, n_name = len(OP_KINDS), max(len(lc.op_names), 1)
    size = len(group_names) * n_kind * n_name
    count = np.zeros(size, dtype=np.int64)
    total = np.zeros(size, dtype=np.int64)
    for owner, pos in _op_pairs(lc, ranges):
        key = (group_codes[owner] * n_kind + lc.op_kind[pos]) * n_name + lc.op_name[pos]
        count += np.bincount(key, minlength=size)
        # Chunked sums stay far below 2**53, where float64 weights would round.
        total += np.bincount(key, weights=lc.op_end[pos] - lc.op_start[pos], minlength=size).astype(np.int64)
    key = np.flatnonzero(count)
    g, rest = np.divmod(key, n_kind * n_name)
    kind, name = np.divmod(rest, n_name)
    return pd.DataFrame({
        "group": np.asarray(group_names, dtype=object)[g],
        "kind": pd.Categorical.from_codes(kind, categories=OP_KINDS),
        "name": pd.Categorical.from_codes(name, categories=lc.op_names),
        "count": count[key],
        "duration_ns": total[key],
    })


def union_by_group(trace, ranges: pd.DataFrame, groups: np.ndarray, n_groups: int) -> np.ndarray:
    """Length of the union of the GPU op intervals that the ranges of each group launched (rule above), e.g. a
    step's ranges in several processes. `groups[i]` in 0…n_groups−1 labels row i of `ranges`; an op launched by
    several ranges of a group counts once. Holds the group's (range, op) pairs in memory at once."""
    out = np.zeros(n_groups, dtype=np.int64)
    if len(ranges) == 0 or trace.count("cuda_api") == 0:
        return out
    lc = launches(trace)
    pairs = list(_op_pairs(lc, ranges))
    if not pairs:
        return out
    owner = np.asarray(groups, dtype=np.int64)[np.concatenate([o for o, _ in pairs])]
    pos = np.concatenate([p for _, p in pairs])
    start, end = lc.op_start[pos], lc.op_end[pos]
    order = np.lexsort((start, owner))
    return _union_of_pairs(owner[order], start[order], end[order], n_groups)
