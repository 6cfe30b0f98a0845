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

Algorithm (no per-range query, no per-range Python in the common case): per thread, in (start, -end, id)
order, when the ranges are properly nested (always so for push/pop ranges, which NVTX keeps on a per-thread
stack) the ranges still open at a range's start are its ancestors, so its level is a rank minus a count of
earlier ends (`searchsorted`) and its parent the last earlier range one level up (`_nested_parents`: sorts and
searches, O(n log n), no sort when the rows are already in order, as an export's are). Every parent is checked
to contain its child; threads where a check fails (start/end ranges that overlap partially, a zero-length
range where two touching ranges meet) fall back to an exact sweep over that thread only.
"""

from __future__ import annotations

import numpy as np

NO_PARENT = -1


def nest(
    global_tid: np.ndarray, start: np.ndarray, end: np.ndarray, eligible: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Parent (positional index into the inputs, NO_PARENT when none) and level of every range.

    Ranges are ordered by (start asc, end desc, position) for tie-breaking, so positions should follow
    range ids. `eligible` False marks ranges that can have a parent but never be one.
    """
    n = len(start)
    if n and eligible.all():  # the usual case: no range ended on another thread
        parent, level, bad = _nested_parents(global_tid, start, end)
        if bad.any():
            _redo_exactly(np.unique(global_tid[bad]), np.arange(n), global_tid, start, end, parent, level)
        return parent, level
    parent = np.full(n, NO_PARENT, dtype=np.int64)
    level = np.zeros(n, dtype=np.int64)
    idx = np.flatnonzero(eligible)
    if len(idx):
        p, lv, bad = _nested_parents(global_tid[idx], start[idx], end[idx])
        parent[idx] = np.where(p >= 0, idx[np.maximum(p, 0)], NO_PARENT)
        level[idx] = lv
        _redo_exactly(np.unique(global_tid[idx][bad]), idx, global_tid, start, end, parent, level)
    _attach_ineligible(global_tid, start, end, eligible, parent, level)
    return parent, level


def _redo_exactly(threads, idx, global_tid, start, end, parent, level) -> None:
    """The exact sweep for the ranges `idx` on `threads` (where the vectorised path found them not nested)."""
    for g in threads:
        sel = idx[global_tid[idx] == g]
        p, lv = _exact_parents(start[sel], end[sel])
        parent[sel] = np.where(p >= 0, sel[np.maximum(p, 0)], NO_PARENT)
        level[sel] = lv


def _thread_codes(g: np.ndarray) -> np.ndarray:
    """Small integer code per thread, in the order of the globalTid values (one thread: all zeros, no sort)."""
    if len(g) == 0 or (g == g[0]).all():
        return np.zeros(len(g), dtype=np.int64)
    return np.unique(g, return_inverse=True)[1].astype(np.int64).ravel()


def _order(t: np.ndarray, s: np.ndarray, e: np.ndarray) -> np.ndarray | None:
    """Positions in (thread, start, -end, position) order; None when the inputs already are in that order (NVTX
    rows of an export usually are, per thread: the sort is then skipped)."""
    n = len(s)
    if n < 2:
        return None
    by_thread = None if (t[1:] >= t[:-1]).all() else np.argsort(t, kind="stable")
    tt, ss, ee = (t, s, e) if by_thread is None else (t[by_thread], s[by_thread], e[by_thread])
    same = tt[1:] == tt[:-1]
    later = (ss[1:] > ss[:-1]) | ((ss[1:] == ss[:-1]) & (ee[1:] <= ee[:-1]))
    if (~same | later).all():
        return by_thread
    return np.lexsort((-e, s, t))


def _keyed(t: np.ndarray, x: np.ndarray, lo: int, width: int) -> np.ndarray:
    """One int64 key per (thread, time) that sorts as the pair does."""
    return t * width + (x - lo)


def _nested_parents(g: np.ndarray, s: np.ndarray, e: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Parents and levels for threads whose ranges are properly nested (laminar); the third array flags ranges on
    threads where they are not (the exact sweep redoes those threads).

    In (thread, start, -end, position) order, the ranges still open when range j starts are, on a nested thread,
    exactly j's ancestors: j's level is how many earlier ranges of its thread end after j starts (for a zero-length
    j, at or after: a zero-length range at the end of another lies inside it), i.e. j's rank in its thread minus
    a count of ends found by `searchsorted`. Its parent is then the last earlier range one level up. Every parent
    found is checked to contain its child; on a thread that is not nested some check fails (the innermost open
    range at j's start is the one found, and a partial overlap ends inside j), and the thread is flagged. Cost:
    a few sorts and searches, O(n log n); no sort at all when the rows already are in order."""
    n = len(s)
    t = _thread_codes(g)
    order = _order(t, s, e)
    if order is not None:
        t, s, e = t[order], s[order], e[order]
    k = np.arange(n, dtype=np.int64)
    lo = int(min(s.min(), e.min())) if n else 0
    width = (int(max(s.max(), e.max())) - lo + 2) if n else 1
    if n and (int(t[-1]) + 1) * width >= 2**62:
        # Times too far apart to key (thread, time) in one int64: every thread takes the exact sweep.
        bad = np.ones(n, dtype=bool)
        return np.full(n, NO_PARENT, np.int64), np.zeros(n, np.int64), _unordered(bad, order)
    one_thread = n == 0 or t[-1] == t[0]
    if one_thread:
        thread_first = np.zeros(n, dtype=np.int64)
        start_key, end_keys = s, np.sort(e)
    else:
        edges = np.flatnonzero(t[1:] != t[:-1]) + 1
        thread_first = np.repeat(np.r_[0, edges], np.diff(np.r_[0, edges, n]))
        start_key = _keyed(t, s, lo, width)
        end_keys = np.sort(_keyed(t, e, lo, width))
    zero = s == e
    # Ends strictly before / at each range's start, on its thread.
    ends_at_or_before = np.searchsorted(end_keys, start_key, side="right") - thread_first
    if zero.any():
        ends_before = np.searchsorted(end_keys, start_key, side="left") - thread_first
        # For a range of length > 0, the zero-length ranges at its start come after it in the order: their ends
        # (= its start) are not among the earlier ranges that ended.
        zero_keys = start_key[zero]  # sorted, as `start_key` is
        zeros_at_start = (np.searchsorted(zero_keys, start_key, side="right")
                          - np.searchsorted(zero_keys, start_key, side="left"))
        finished = np.where(zero, ends_before, ends_at_or_before - zeros_at_start)
    else:
        finished = ends_at_or_before
    level = (k - thread_first) - finished

    # The last earlier range of the same thread one level up: the positions of each level, in order (one stable
    # sort by level), searched for the positions one level down (sorted queries: each search starts where the
    # last one ended).
    cand = np.zeros(n, dtype=np.int64)
    seen = np.zeros(n, dtype=bool)
    if n and int(level.min()) >= 0:
        small = level.astype(np.int16) if int(level.max()) < 2**15 else level  # a radix sort for small levels
        by_level = np.argsort(small, kind="stable")
        bounds = np.r_[0, np.cumsum(np.bincount(level))]
        for lv in range(1, len(bounds) - 1):
            ups, kids = by_level[bounds[lv - 1]:bounds[lv]], by_level[bounds[lv]:bounds[lv + 1]]
            at = np.searchsorted(ups, kids) - 1
            cand[kids] = ups[np.maximum(at, 0)]
            seen[kids] = at >= 0
    has_parent = level > 0
    found = seen & (t[cand] == t)
    contains = (s[cand] <= s) & (e[cand] >= e) & (cand != k)
    ok = ~has_parent | (found & contains)
    parent = np.where(has_parent & ok, cand, NO_PARENT)
    bad = np.isin(t, np.unique(t[~ok])) if not ok.all() else np.zeros(n, dtype=bool)
    if order is None:
        return parent, level, bad
    out_parent = np.empty(n, np.int64)
    out_level = np.empty(n, np.int64)
    out_parent[order] = np.where(parent >= 0, order[np.maximum(parent, 0)], NO_PARENT)
    out_level[order] = level
    return out_parent, out_level, _unordered(bad, order)


def _unordered(values: np.ndarray, order: np.ndarray | None) -> np.ndarray:
    if order is None:
        return values
    out = np.empty_like(values)
    out[order] = values
    return out


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
