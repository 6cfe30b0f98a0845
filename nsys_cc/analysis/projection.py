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
- `kernels`: kernel rows; `kernel_sum_ns`: the sum of their durations (overlapping kernels count twice).
- `gpu_busy_ns`: length of the union of all the range's op intervals (kernels, memcpy, memset, graphs).
- `launch_api_ns`: sum of the durations of the API calls inside the range that launched GPU work.
- `api_calls`: number of CUDA API rows inside the range on its thread (0 when none; <NA> only when
  not projected or the trace has no CUDA API table).

When an export holds several API rows with one correlationId in one process (nsys 2022.2 writes a
wrapper row of eventClass 67 around the runtime call), the innermost (latest-starting) row stands for
the launch: its duration is the launch time, and a range holds the launch when it holds that row.

Computation: per thread, API calls sorted by start; each range's window of calls comes from two
`np.searchsorted`; sums over the window from prefix sums, first/last op times from
`np.minimum/maximum.reduceat`. Ranges with a call that starts inside but ends after them (rare) are
recomputed exactly. The union length needs the (range, op) pairs, built vectorised in bounded chunks.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..trace.columns import PID_MASK
from ..trace.cuda import api_times, op_times

PROJECTION_COLUMNS = [
    "proj_start_ns", "proj_end_ns", "proj_duration_ns", "gpu_ops", "kernels", "kernel_sum_ns", "gpu_busy_ns",
    "launch_api_ns", "api_calls",
]
I64_MAX = np.iinfo(np.int64).max
I64_MIN = np.iinfo(np.int64).min
# Upper bound on (range, op) pairs held in memory at once while computing union lengths.
PAIR_CHUNK = 4_000_000


@dataclass
class Launches:
    """CUDA API calls sorted by (thread, start), with the GPU work each launched, ready for window queries.

    Per call i (sorted order): start/end/dur, `launch` (1 when it stands for a launch with GPU work found),
    `first`/`last` (its ops' first start and last end; I64_MAX/I64_MIN when none), `kernels`,
    `kernel_sum`. `op_ptr[i]:op_ptr[i+1]` are its ops in `op_rows` (row positions in `trace.gpu_ops()`),
    whose intervals are `op_start`/`op_end`. `threads` maps globalTid → [first, last+1) call positions.
    """

    start: np.ndarray
    end: np.ndarray
    dur: np.ndarray
    launch: np.ndarray
    first: np.ndarray
    last: np.ndarray
    kernels: np.ndarray
    kernel_sum: np.ndarray
    op_ptr: np.ndarray
    op_rows: np.ndarray
    op_start: np.ndarray
    op_end: np.ndarray
    threads: dict[int, tuple[int, int]]


def launches(trace) -> Launches:
    """The trace's API calls joined to their GPU work (computed once per trace and cached on it)."""
    return trace.memo("projection.launches", _build_launches)


def _build_launches(trace) -> Launches:
    # The full frames when an analysis already read them, else only the four columns needed here.
    api = trace.cuda_api() if trace.is_memoized("cuda_api") else api_times(trace)
    ops = trace.gpu_ops() if trace.is_memoized("gpu_ops") else op_times(trace)
    gtid = api["global_tid"].to_numpy(np.int64)
    order = np.lexsort((np.arange(len(api)), api["start_ns"].to_numpy(), gtid))
    start = api["start_ns"].to_numpy(np.int64)[order]
    end = api["end_ns"].to_numpy(np.int64)[order]
    gtid = gtid[order]
    corr = api["correlation_id"].to_numpy(np.int64)[order]
    n = len(order)

    # One call stands for each (process, correlationId): the innermost, i.e. the latest start.
    calls = pd.DataFrame({"pos": np.arange(n), "gp": gtid & PID_MASK, "corr": corr, "start": start})
    rep = calls.sort_values(["gp", "corr", "start", "pos"]).drop_duplicates(["gp", "corr"], keep="last")
    op_frame = pd.DataFrame(
        {
            "row": np.arange(len(ops)),
            "gp": ops["global_pid"].to_numpy(np.int64),
            "corr": ops["correlation_id"].to_numpy(np.int64),
            "start": ops["start_ns"].to_numpy(np.int64),
            "end": ops["end_ns"].to_numpy(np.int64),
            "kernel": (ops["kind"] == "kernel").to_numpy(bool) if "kind" in ops else ops["kernel"].to_numpy(bool),
        }
    ).merge(rep[["gp", "corr", "pos"]], on=["gp", "corr"], how="inner")
    op_frame = op_frame.sort_values(["pos", "start", "row"], kind="stable")
    pos = op_frame["pos"].to_numpy(np.int64)
    op_start = op_frame["start"].to_numpy(np.int64)
    op_end = op_frame["end"].to_numpy(np.int64)
    kern = op_frame["kernel"].to_numpy()

    counts = np.bincount(pos, minlength=n)
    op_ptr = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    first = np.full(n, I64_MAX, dtype=np.int64)
    last = np.full(n, I64_MIN, dtype=np.int64)
    np.minimum.at(first, pos, op_start)
    np.maximum.at(last, pos, op_end)
    kernels = np.bincount(pos, weights=kern, minlength=n).astype(np.int64)
    kernel_sum = np.zeros(n, dtype=np.int64)
    np.add.at(kernel_sum, pos[kern], (op_end - op_start)[kern])

    bounds = np.flatnonzero(np.r_[True, gtid[1:] != gtid[:-1]]) if n else np.empty(0, np.int64)
    stops = np.r_[bounds[1:], n]
    threads = {int(gtid[b]): (int(b), int(s)) for b, s in zip(bounds, stops)}
    return Launches(
        start=start, end=end, dur=end - start, launch=(counts > 0).astype(np.int64), first=first, last=last,
        kernels=kernels, kernel_sum=kernel_sum, op_ptr=op_ptr, op_rows=op_frame["row"].to_numpy(np.int64),
        op_start=op_start, op_end=op_end, threads=threads,
    )


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
    ends = np.cumsum(op_hi - op_lo)
    k = 0
    while k < len(op_lo):
        done = ends[k - 1] if k else 0
        stop = max(k + 1, int(np.searchsorted(ends, done + PAIR_CHUNK, side="right")))
        owner, pos = _pairs(op_lo[k:stop], op_hi[k:stop])
        if len(pos):
            out[k:stop] = _union_of_pairs(owner, lc.op_start[pos], lc.op_end[pos], stop - k)
        k = stop
    return out


def _union_of_pairs(owner, start, end, n) -> np.ndarray:
    order = np.lexsort((start, owner))
    owner, start, end = owner[order], start[order], end[order]
    reach = pd.Series(end).groupby(owner).cummax().to_numpy()
    prev = np.r_[I64_MIN, reach[:-1]]
    prev[np.r_[True, owner[1:] != owner[:-1]]] = I64_MIN
    gain = np.clip(end - np.maximum(start, prev), 0, None)
    return np.bincount(owner, weights=gain, minlength=n).astype(np.int64)


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


def project(trace, ranges: pd.DataFrame | None = None) -> pd.DataFrame:
    """`ranges` (default: `trace.nvtx_ranges()`) with their GPU projection; same rows and index, all columns
    kept, plus the columns in the module docstring."""
    ranges = trace.nvtx_ranges() if ranges is None else ranges
    out = ranges.copy()
    n = len(ranges)
    if n == 0 or trace.rows("CUPTI_ACTIVITY_KIND_RUNTIME") == 0:
        for col in PROJECTION_COLUMNS:
            out[col] = pd.array([pd.NA] * n, dtype="Int64")
        return out
    lc = launches(trace)
    lo, hi, ok = _windows(lc, ranges)
    lo = np.where(ok, lo, 0)
    hi = np.where(ok, hi, 0)
    exact = _exact_calls(lc, ranges, lo, hi, ok)

    def window_sum(values: np.ndarray) -> np.ndarray:
        prefix = np.concatenate([[0], np.cumsum(values)])
        return prefix[hi] - prefix[lo]

    first = _window_reduce(np.minimum, lc.first, lo, hi, I64_MAX)
    last = _window_reduce(np.maximum, lc.last, lo, hi, I64_MIN)
    gpu_ops = window_sum(lc.launch)
    kernels = window_sum(lc.kernels)
    kernel_sum = window_sum(lc.kernel_sum)
    launch_ns = window_sum(lc.dur * lc.launch)
    api_calls = hi - lo
    for i, calls in exact.items():
        launched = calls[lc.launch[calls] == 1]
        first[i] = lc.first[launched].min(initial=I64_MAX)
        last[i] = lc.last[launched].max(initial=I64_MIN)
        gpu_ops[i] = len(launched)
        kernels[i] = lc.kernels[calls].sum()
        kernel_sum[i] = lc.kernel_sum[calls].sum()
        launch_ns[i] = lc.dur[launched].sum()
        api_calls[i] = len(calls)
    busy = _union_lengths(lc, lc.op_ptr[lo], lc.op_ptr[hi])
    for i, calls in exact.items():
        ops = _exact_ops(lc, calls)
        busy[i] = _union_of_pairs(np.zeros(len(ops), np.int64), lc.op_start[ops], lc.op_end[ops], 1)[0]

    launched_any = ok & (gpu_ops > 0)
    columns = {
        "proj_start_ns": first,
        "proj_end_ns": last,
        "proj_duration_ns": last - np.where(launched_any, first, 0),
        "gpu_ops": gpu_ops,
        "kernels": kernels,
        "kernel_sum_ns": kernel_sum,
        "gpu_busy_ns": busy,
        "launch_api_ns": launch_ns,
    }
    for col, values in columns.items():
        out[col] = pd.arrays.IntegerArray(values.astype(np.int64), mask=~launched_any)
    out["api_calls"] = pd.arrays.IntegerArray(api_calls.astype(np.int64), mask=~ok)
    return out


def range_ops(trace, ranges: pd.DataFrame) -> pd.DataFrame:
    """One row per (range, GPU op) the range launched (by the rule above): `range_id` and the columns of
    `trace.gpu_ops()`. Meant for a few thousand ranges (a kernel breakdown per forward); reads every GPU op
    once per trace."""
    ops = trace.gpu_ops()
    if len(ranges) == 0 or trace.rows("CUPTI_ACTIVITY_KIND_RUNTIME") == 0 or len(ops) == 0:
        return pd.concat([pd.DataFrame({"range_id": pd.Series(dtype="int64")}), ops.iloc[:0]], axis=1)
    lc = launches(trace)
    lo, hi, ok = _windows(lc, ranges)
    lo = np.where(ok, lo, 0)
    hi = np.where(ok, hi, 0)
    owner, op_pos = _pairs(lc.op_ptr[lo], lc.op_ptr[hi])
    exact = _exact_calls(lc, ranges, lo, hi, ok)
    if exact:
        keep = ~np.isin(owner, list(exact))
        extra = [(np.full(len(p), i), p) for i, p in ((i, _exact_ops(lc, c)) for i, c in exact.items())]
        owner = np.concatenate([owner[keep], *[e[0] for e in extra]])
        op_pos = np.concatenate([op_pos[keep], *[e[1] for e in extra]])
        order = np.argsort(owner, kind="stable")
        owner, op_pos = owner[order], op_pos[order]
    rows = ops.iloc[lc.op_rows[op_pos]].reset_index(drop=True)
    rows.insert(0, "range_id", ranges["range_id"].to_numpy(np.int64)[owner])
    return rows
