"""Nesting of NVTX ranges on a thread: parent and level, as nsys's `nvtxgpuproj` report defines them.

Definition (nsys 2022.4 `reports/nvtxgpuproj.py`, table NVTX_PARENT): the parent of range C is the
range P ≠ C on the same globalTid that contains it (`P.start <= C.start and C.end <= P.end`) with the
smallest tightness `(C.start - P.start) + (P.end - C.end)`, i.e. the shortest container. The level is
the depth of C in that parent tree (0 for a range without parent). Both push/pop and start/end ranges
take part; nsys leaves out ranges that ended on another thread, and so does `nest` (callers pass
them as `eligible=False`: they get a parent among the eligible ranges but are nobody's parent).

One difference, on purpose: two ranges with identical start, end and thread would be each other's
parent in nsys (a cycle that its level query never reaches); here the one later in
(start, -end, range id) order is the child of the earlier one.

Algorithm (no per-range query, no per-range Python in the common case): per thread, ranges sorted by
(start, -end, id) and their open/close events sorted by time make a parenthesis sequence; when that
sequence is properly nested (always so for push/pop ranges, which NVTX keeps on a per-thread stack),
the stack parent is the shortest container and everything is computed with NumPy (cumulative sums and
`searchsorted`). Threads where it is not (start/end ranges that overlap partially, or a zero-length
range touching the end of another) fall back to an exact sweep over that thread only.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

NO_PARENT = -1


def nest(
    global_tid: np.ndarray, start: np.ndarray, end: np.ndarray, eligible: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Parent (positional index into the inputs, NO_PARENT when none) and level of every range.

    Ranges are ordered by (start asc, end desc, position) for tie-breaking, so positions should follow
    range ids. `eligible` False marks ranges that can have a parent but never be one.
    """
    n = len(start)
    parent = np.full(n, NO_PARENT, dtype=np.int64)
    level = np.zeros(n, dtype=np.int64)
    idx = np.flatnonzero(eligible)
    if len(idx):
        p, lv, bad = _nested_parents(global_tid[idx], start[idx], end[idx])
        parent[idx] = np.where(p >= 0, idx[np.maximum(p, 0)], NO_PARENT)
        level[idx] = lv
        for g in np.unique(global_tid[idx][bad]):
            sel = idx[global_tid[idx] == g]
            p, lv = _exact_parents(start[sel], end[sel])
            parent[sel] = np.where(p >= 0, sel[np.maximum(p, 0)], NO_PARENT)
            level[sel] = lv
    _attach_ineligible(global_tid, start, end, eligible, parent, level)
    return parent, level


def _nested_parents(g: np.ndarray, s: np.ndarray, e: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Stack parents via the event sequence; the third array flags ranges on threads where it is not nested."""
    n = len(s)
    pos_order = np.lexsort((np.arange(n), -e, s, g))
    pos = np.empty(n, dtype=np.int64)
    pos[pos_order] = np.arange(n)
    zero = s == e
    # Events: opens (class 1) in pos order; at the same time, closes of ranges with length > 0 come
    # first (class 0: touching ranges are not nested) and closes of zero-length ranges last (class 2),
    # each in reverse pos order so the inner of two equal ends closes first.
    ev_range = np.concatenate([np.arange(n), np.arange(n)])
    ev_open = np.concatenate([np.ones(n, bool), np.zeros(n, bool)])
    ev_time = np.concatenate([s, e])
    ev_class = np.concatenate([np.ones(n, np.int64), np.where(zero, 2, 0)])
    ev_tie = np.concatenate([pos, -pos])
    ev_g = np.concatenate([g, g])
    order = np.lexsort((ev_tie, ev_class, ev_time, ev_g))
    ev_range, ev_open, ev_g = ev_range[order], ev_open[order], ev_g[order]
    depth = np.cumsum(np.where(ev_open, 1, -1))
    first_of_thread = np.r_[True, ev_g[1:] != ev_g[:-1]]
    before_thread = (depth - np.where(ev_open, 1, -1))[first_of_thread]
    depth = depth - np.repeat(before_thread, np.diff(np.r_[np.flatnonzero(first_of_thread), len(depth)]))

    m = len(depth)
    open_at = np.empty(n, dtype=np.int64)
    close_at = np.empty(n, dtype=np.int64)
    open_at[ev_range[ev_open]] = np.flatnonzero(ev_open)
    close_at[ev_range[~ev_open]] = np.flatnonzero(~ev_open)
    level = depth[open_at] - 1

    # Open events keyed by (level, event index): "the last open at level L before event x" is one searchsorted.
    open_ev = np.flatnonzero(ev_open)
    open_lvl = depth[open_ev] - 1
    key_order = np.lexsort((open_ev, open_lvl))
    keys = open_lvl[key_order] * (m + 1) + open_ev[key_order]

    def last_open(lvl: np.ndarray, before: np.ndarray) -> np.ndarray:
        k = np.searchsorted(keys, lvl * (m + 1) + before, side="left") - 1
        found = open_ev[key_order[np.maximum(k, 0)]]
        ok = (k >= 0) & (depth[found] - 1 == lvl) & (ev_g[found] == ev_g[before])
        return np.where(ok, ev_range[found], -1)

    parent = np.where(level > 0, last_open(level - 1, open_at), NO_PARENT)
    matched = (depth[close_at] == level) & (last_open(level, close_at) == np.arange(n)) & (level >= 0)
    bad = ~matched
    bad |= zero & _touches_an_end(g, s, e, zero)
    # One bad range makes its whole thread suspect: the exact sweep redoes that thread.
    bad_threads = np.unique(g[bad])
    return parent, level, np.isin(g, bad_threads)


def _touches_an_end(g: np.ndarray, s: np.ndarray, e: np.ndarray, zero: np.ndarray) -> np.ndarray:
    """For zero-length ranges: does a longer range on the same thread end exactly where it sits?"""
    ends = pd.MultiIndex.from_arrays([g[~zero], e[~zero]])
    return pd.MultiIndex.from_arrays([g, s]).isin(ends)


def _exact_parents(s: np.ndarray, e: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Shortest container by a sweep over one thread's ranges (any overlaps); parents precede children."""
    n = len(s)
    order = np.lexsort((np.arange(n), -e, s)).tolist()
    starts, ends, durs = s.tolist(), e.tolist(), (e - s).tolist()
    parent = [NO_PARENT] * n
    level = [0] * n
    active: list[int] = []
    for i in order:
        si, ei = starts[i], ends[i]
        active = [a for a in active if ends[a] >= si]
        best = NO_PARENT
        for a in active:  # later entries are later in sort order: `<=` keeps the innermost of equal lengths
            if ends[a] >= ei and (best == NO_PARENT or durs[a] <= durs[best]):
                best = a
        parent[i] = best
        level[i] = 0 if best == NO_PARENT else level[best] + 1
        active.append(i)
    return np.array(parent, dtype=np.int64), np.array(level, dtype=np.int64)


def _attach_ineligible(g, s, e, eligible, parent, level) -> None:
    """Ranges that cannot be parents (ended on another thread; few in practice) get their shortest eligible
    container: per thread, only eligible ranges starting no later than the range are scanned."""
    for thread in np.unique(g[~eligible]):
        pool = np.flatnonzero(eligible & (g == thread))
        pool = pool[np.argsort(s[pool], kind="stable")]
        for i in np.flatnonzero(~eligible & (g == thread)):
            cand = pool[: np.searchsorted(s[pool], s[i], side="right")]
            cand = cand[e[cand] >= e[i]]
            if len(cand):
                # Shortest; among equal lengths the one latest in (start, -end, id) order, as `_exact_parents`.
                best = cand[np.lexsort((-cand, -s[cand], e[cand] - s[cand]))[0]]
                parent[i] = best
                level[i] = level[best] + 1
