"""A trace's CUDA API calls joined to the GPU work each launched, ready for window queries (`launches`: computed once
per open trace and kept while it lives); the projection (`projection`) reads every range's figures from it.

The join is on correlationId and process (`api.global_tid & PID_MASK == op.global_pid`). When an export holds several
API rows with one correlationId in one process (nsys 2022.2 writes a wrapper row of eventClass 67 around the runtime
call), each GPU op goes to the latest-starting of them that started at or before the op (a launch precedes its work;
the earliest of them when none did): for a wrapper and its runtime call the innermost row, which stands for the launch
(its duration is the launch time, and a range holds the launch when it holds that row); for two calls that share an id
without one wrapping the other (a damaged export, said by `gpu_loss`), each call keeps the work that followed it — they
were all counted for the latest call, moving kernels from one forward to another.

Per thread, API calls sorted by start, each call's GPU ops right after those of the
call before (a lookup table on (process, correlationId)), so a window of calls is one slice of ops. GPU ops that found
no launching call, and ids shared where CUPTI never shares them, are counted here and said by `gpu_loss`."""

from __future__ import annotations

import weakref
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ...trace.bulk import PID_MASK
from ...trace.cuda import OP_KINDS
from ...trace.source import Trace


@dataclass
class Launches:
    """CUDA API calls sorted by (thread, start), with the GPU work each launched, ready for window queries.

    Per call i (sorted order): start/end, `launch` (1 when it stands for a launch with GPU work found);
    `op_ptr[i]:op_ptr[i+1]` are its ops, ordered by start: `op_rows` (row positions in `trace.gpu_ops()`),
    `op_start`/`op_end`, `op_kind` (codes into `OP_KINDS`), `op_name` (codes into `op_names`). A window of calls
    [lo, hi) launched the ops [op_ptr[lo], op_ptr[hi]), so every per-range figure is a reduction over one slice.
    `threads` maps globalTid → [first, last+1) call positions.
    """

    start: np.ndarray
    end: np.ndarray
    launch: np.ndarray
    op_ptr: np.ndarray
    op_rows: np.ndarray
    op_start: np.ndarray
    op_end: np.ndarray
    op_kind: np.ndarray
    op_name: np.ndarray
    op_names: pd.Index
    threads: dict[int, tuple[int, int]]
    # GPU ops of the trace, and those that found no launching call (no API row with their process and
    # correlationId): they are in no range's projection (`gpu_loss`).
    ops: int = 0
    unlaunched: int = 0
    # Damage CUPTI never writes (issue 45), each said in a note (`gpu_loss`): API calls sharing their process's
    # correlationId with a call they neither wrap nor are wrapped by (each op is counted for the latest of them that
    # started at or before it), and
    # GPU ops sharing one with another op of their process in a trace that traced no CUDA graph node (each launch
    # has its own id; all are counted for the one call that has it, so other ranges miss that work).
    shared_calls: int = 0
    shared_ops: int = 0


# The joined calls and ops of each open trace, kept while the trace object lives (owned here, not by the reader).
_LAUNCHES: weakref.WeakKeyDictionary[Trace, Launches] = weakref.WeakKeyDictionary()


# The name of a GPU op whose name the export does not hold (its StringIds row is missing).
UNNAMED_OP = "(name not in the export)"


def launches(trace: Trace) -> Launches:
    """The trace's API calls joined to their GPU work (computed once per trace object and kept while it lives)."""
    found = _LAUNCHES.get(trace)
    if found is None:
        found = _LAUNCHES[trace] = _build_launches(trace)
    return found


def _columns(trace: Trace) -> tuple[dict, dict]:
    """API calls and GPU ops as arrays (`Trace.api_times`, `Trace.op_times`: the frames when an analysis already read
    them, else only the columns needed here; reading is the cost on big exports)."""
    return trace.api_times(), trace.op_times()


def _thread_order(gtid: np.ndarray, start: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Positions sorted by (globalTid, start, position) — two stable sorts instead of a 3-key lexsort: by start
    (nearly sorted already in an export), then by a small thread code (a radix sort) — and the distinct globalTids
    with each sorted position's index into them."""
    codes, uniq = pd.factorize(gtid)
    rank = np.argsort(np.argsort(uniq, kind="stable"), kind="stable")
    thread = rank.astype(np.int16 if len(uniq) < 2**15 else np.int64)[codes]
    del codes
    by_start = np.argsort(start, kind="stable")
    order = by_start[np.argsort(thread[by_start], kind="stable")]
    return order, np.sort(uniq), np.sort(thread)


def _join_keys(call_tid: np.ndarray, tids: np.ndarray, call_corr, op_gp, op_corr) -> tuple[np.ndarray, np.ndarray]:
    """Non-negative int64 keys for (process, correlationId) on both sides; ops of a process without calls get -1.
    Calls give their process as an index into `tids` (globalTids), whose PID bits are the process."""
    gp_codes_of_tid, gp_uniq = pd.factorize(tids & PID_MASK)
    op_codes = pd.Index(gp_uniq).get_indexer(op_gp)
    cmin = min(int(call_corr.min(initial=0)), int(op_corr.min(initial=0)))
    span = max(int(call_corr.max(initial=0)), int(op_corr.max(initial=0))) - cmin + 1
    if span * max(len(gp_uniq), 1) >= 2**62:  # huge ids: number them densely first
        corr_codes, _ = pd.factorize(np.concatenate([call_corr, op_corr]))
        call_corr, op_corr = corr_codes[: len(call_corr)], corr_codes[len(call_corr):]
        cmin, span = 0, int(corr_codes.max(initial=0)) + 1
    # In place: these arrays have one value per call or op.
    call_key = gp_codes_of_tid.astype(np.int64)[call_tid]
    call_key *= span
    call_key += call_corr
    call_key -= cmin
    op_key = op_codes.astype(np.int64, copy=False)
    missing = op_key < 0
    op_key *= span
    op_key += op_corr
    op_key -= cmin
    op_key[missing] = -1
    return call_key, op_key


def _call_of_ops(call_key: np.ndarray, call_start: np.ndarray, op_key: np.ndarray,
                 op_start: np.ndarray | None = None) -> np.ndarray:
    """Position of the call that launched each op, or -1: the one call with its key; of several with its key, the
    latest-starting one that started at or before the op (the later position among equal starts; the earliest of
    them when none did: `_among_shared`) — without `op_start`, the latest-starting one. A direct lookup table when
    keys are dense (correlationIds count up from 1 in each process), a sorted search otherwise."""
    found = _latest_of_key(call_key, call_start, op_key)
    if op_start is None or len(call_key) < 2:
        return found
    span = int(max(call_key.max(initial=-1), op_key.max(initial=-1))) + 1
    if span <= 4 * (len(call_key) + len(op_key)) + (1 << 20):  # dense keys: counted, as `_latest_of_key` does
        counts = np.bincount(call_key, minlength=span)
        if counts.max(initial=0) <= 1:
            return found
        at = np.flatnonzero((op_key >= 0) & (counts[np.maximum(op_key, 0)] > 1))
    else:
        keys, many = np.unique(call_key, return_counts=True)
        at = np.flatnonzero(np.isin(op_key, keys[many > 1]))
    if len(at):
        found[at] = _among_shared(call_key, call_start, op_key[at], op_start[at])
    return found


def _among_shared(call_key: np.ndarray, call_start: np.ndarray, op_key: np.ndarray, op_start: np.ndarray) -> np.ndarray:
    """For ops whose key several calls have: the position of the latest-starting such call that started at or
    before the op (the later position among equal starts), else the earliest such call. One sort of calls and ops
    together by (key, start, calls before ops): each op's call is the last call before it in that order, when it
    has the op's key."""
    pos = np.arange(len(call_key))
    n, m = len(call_key), len(op_key)
    keys = np.concatenate([call_key, op_key])
    starts = np.concatenate([call_start, op_start])
    is_op = np.r_[np.zeros(n, np.int8), np.ones(m, np.int8)]
    tiebreak = np.concatenate([pos, np.arange(m)])
    order = np.lexsort((tiebreak, is_op, starts, keys))
    sorted_is_call = is_op[order] == 0
    last_call = np.where(sorted_is_call, np.arange(n + m), -1)
    np.maximum.accumulate(last_call, out=last_call)
    where_op = np.empty(m, dtype=np.int64)
    where_op[order[~sorted_is_call] - n] = np.flatnonzero(~sorted_is_call)
    before = last_call[where_op]
    cand = np.where(before >= 0, order[np.maximum(before, 0)], -1)
    ok = (cand >= 0) & (cand < n)
    ok[ok] = call_key[cand[ok]] == op_key[ok]
    # none started before the op (a kernel before its launch: impossible, said elsewhere): the earliest call of its key
    first = np.lexsort((pos, call_start, call_key))
    first_keys = call_key[first]
    i = np.searchsorted(first_keys, op_key, side="left")
    earliest = first[np.minimum(i, n - 1)]
    return np.where(ok, cand, earliest)


def _latest_of_key(call_key: np.ndarray, call_start: np.ndarray, op_key: np.ndarray) -> np.ndarray:
    """Position of the latest-starting call with each op's key (the later position among equal starts), or -1."""
    n = len(call_key)
    pos = np.arange(n)
    span = int(max(call_key.max(initial=-1), op_key.max(initial=-1))) + 1
    if span <= 4 * (n + len(op_key)) + (1 << 20):
        table = np.full(span + 1, -1, dtype=np.int64)  # table[-1] stays -1: the slot of ops without a key
        counts = np.bincount(call_key, minlength=span)
        if counts.max(initial=0) <= 1:
            table[call_key] = pos
        else:  # rare (wrapper rows): the latest start wins, then the later position
            dup = counts[call_key] > 1
            table[call_key[~dup]] = pos[~dup]
            d = pos[dup][np.lexsort((pos[dup], call_start[dup], call_key[dup]))]
            last = np.r_[call_key[d][1:] != call_key[d][:-1], True]
            table[call_key[d][last]] = d[last]
        del counts
        return table[op_key]
    order = np.lexsort((pos, call_start, call_key))
    keys = call_key[order]
    last = np.r_[keys[1:] != keys[:-1], True] if n else np.zeros(0, bool)
    keys, reps = keys[last], order[last]
    if len(keys) == 0:
        return np.full(len(op_key), -1, dtype=np.int64)
    i = np.minimum(np.searchsorted(keys, op_key), len(keys) - 1)
    return np.where((keys[i] == op_key) & (op_key >= 0), reps[i], -1)


def _build_launches(trace: Trace) -> Launches:
    api, ops = _columns(trace)
    order, tids, call_tid = _thread_order(api["global_tid"], api["start_ns"])
    # Each column is reordered and its original dropped at once: big exports hold millions of calls.
    start = api.pop("start_ns")[order]
    end = api.pop("end_ns")[order]
    corr = api.pop("correlation_id")[order]
    del api, order
    n = len(start)

    call_key, op_key = _join_keys(call_tid, tids, corr, ops.pop("global_pid"), ops.pop("correlation_id"))
    del corr
    op_call = _call_of_ops(call_key, start, op_key, ops["start_ns"])
    shared_calls = _calls_sharing_a_key(call_key, start, end)
    shared_ops = _ops_sharing_a_key(trace, op_key, op_call, ops["kind"])
    del call_key, op_key
    unlaunched, n_ops = int((op_call < 0).sum()), len(op_call)
    # Ops grouped by their call, each call's ops by start then row (two stable sorts).
    rows = np.flatnonzero(op_call >= 0)
    rows = rows[np.argsort(ops["start_ns"][rows], kind="stable")]
    rows = rows[np.argsort(op_call[rows], kind="stable")]
    pos = op_call[rows]
    del op_call
    op_start = ops.pop("start_ns")[rows]
    op_end = ops.pop("end_ns")[rows]
    op_kind = ops.pop("kind")[rows]
    names = pd.Categorical(ops.pop("name"))
    if (names.codes < 0).any():  # an op whose name the export lacks (no StringIds row): a label, never code −1
        names = names.add_categories([UNNAMED_OP]).fillna(UNNAMED_OP)
    op_name = names.codes[rows]
    del ops

    counts = np.bincount(pos, minlength=n)
    del pos
    op_ptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(counts, out=op_ptr[1:])
    return Launches(
        start=start,
        end=end,
        launch=(counts > 0).astype(np.int8),
        op_ptr=op_ptr,
        op_rows=rows.astype(np.int32 if len(rows) < 2**31 else np.int64),
        op_start=op_start,
        op_end=op_end,
        op_kind=op_kind,
        op_name=op_name,
        op_names=names.categories,
        threads=_threads(tids, call_tid),
        ops=n_ops,
        unlaunched=unlaunched,
        shared_calls=shared_calls,
        shared_ops=shared_ops,
    )


def _calls_sharing_a_key(call_key: np.ndarray, start: np.ndarray, end: np.ndarray) -> int:
    """Calls whose (process, correlationId) another call has too, without one wrapping the other: each of a key's
    calls must lie inside its earliest-starting (longest) one, as nsys 2022.2's wrapper rows do."""
    if len(call_key) < 2:
        return 0
    order = np.lexsort((-end, start, call_key))
    k, s, e = call_key[order], start[order], end[order]
    first = np.r_[True, k[1:] != k[:-1]]
    dup = ~first | np.r_[k[1:] == k[:-1], False]
    if not dup.any():
        return 0
    head = np.maximum.accumulate(np.where(first, np.arange(len(k)), 0))  # each call's key's outermost call
    outside = ~first & ((s < s[head]) | (e > e[head]))
    groups = np.unique(k[outside])
    return int(np.isin(k, groups).sum()) if len(groups) else 0


def _ops_sharing_a_key(trace: Trace, op_key: np.ndarray, op_call: np.ndarray, kind: np.ndarray) -> int:
    """Kernels, copies and memsets sharing their (process, correlationId) with another of their launch, in a trace
    that traced no CUDA graph node (whose kernels legitimately share their launch's id); 0 otherwise."""
    keys = op_key[(op_call >= 0) & (kind != OP_KINDS.index("graph"))]
    if len(keys) < 2:
        return 0
    _, counts = np.unique(keys, return_counts=True)
    shared = int(counts[counts > 1].sum())
    if not shared:
        return 0
    return 0 if trace.has_graph_nodes() else shared  # node-traced graphs: their kernels share their launch's id


def unlaunched_ops(trace: Trace) -> tuple[int, int]:
    """(GPU ops that found no launching CUDA API call, GPU ops) of the trace: the former are in no range's
    projection (all of them without a CUDA API table)."""
    if trace.count("cuda_api") == 0:
        ops = trace.count("gpu_ops")
        return ops, ops
    lc = launches(trace)
    return lc.unlaunched, lc.ops


def shared_ids(trace: Trace) -> tuple[int, int]:
    """(API calls, GPU ops) sharing their process's correlationId in ways CUPTI never writes (`Launches`)."""
    if trace.count("cuda_api") == 0:
        return 0, 0
    lc = launches(trace)
    return lc.shared_calls, lc.shared_ops


def _threads(tids: np.ndarray, call_tid: np.ndarray) -> dict[int, tuple[int, int]]:
    """globalTid → [first, last+1) positions, from the sorted thread index of every call."""
    bounds = np.searchsorted(call_tid, np.arange(len(tids) + 1))
    return {int(t): (int(bounds[i]), int(bounds[i + 1])) for i, t in enumerate(tids) if bounds[i + 1] > bounds[i]}
