"""`nest` (vectorised parents and levels) against a brute-force reading of nvtxgpuproj's definition.

The inputs are plain arrays generated here (no trace file): intervals on a few threads with the awkward
cases real clocks produce — ties, zero-length ranges, touching ranges, identical ranges, partial overlaps.
"""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings, strategies as st

from nsys_cc.trace.nesting import NO_PARENT, nest


def brute_force(g, s, e, eligible):
    """Shortest eligible container on the same thread; ties → the one latest in (start, -end, index) order.
    An identical interval is the parent of an eligible range only when it comes first in that order
    (two identical ranges are not each other's parent)."""
    n = len(s)
    rank = {i: k for k, i in enumerate(sorted(range(n), key=lambda i: (s[i], -e[i], i)))}
    parent = [NO_PARENT] * n
    for c in range(n):
        best = None
        for p in range(n):
            if p == c or not eligible[p] or g[p] != g[c] or not (s[p] <= s[c] and e[c] <= e[p]):
                continue
            if eligible[c] and (s[p], e[p]) == (s[c], e[c]) and rank[p] > rank[c]:
                continue
            cand = (e[p] - s[p], -rank[p])
            if best is None or cand < best[0]:
                best = (cand, p)
        parent[c] = NO_PARENT if best is None else best[1]
    return parent


def _levels(parent, order):
    level = {}
    for c in order:
        level[c] = 0 if parent[c] == NO_PARENT else level[parent[c]] + 1
    return level


intervals = st.lists(
    st.tuples(st.integers(0, 2), st.integers(0, 30), st.integers(0, 12), st.booleans()),
    min_size=0,
    max_size=40,
)


def _check(rows):
    g = np.array([r[0] for r in rows], dtype=np.int64)
    s = np.array([r[1] for r in rows], dtype=np.int64)
    e = s + np.array([r[2] for r in rows], dtype=np.int64)
    eligible = np.array([r[3] or i % 5 for i, r in enumerate(rows)], dtype=bool)
    parent, level = nest(g, s, e, eligible)
    exp_parent = brute_force(g, s, e, eligible)
    assert parent.tolist() == exp_parent
    # Eligible parents come first in (start, -end, index) order; ineligible ranges are nobody's parent.
    order = sorted(range(len(rows)), key=lambda i: (not eligible[i], s[i], -e[i], i))
    assert level.tolist() == [_levels(exp_parent, order)[i] for i in range(len(rows))]


@settings(max_examples=400, deadline=None)
@given(intervals)
def test_nest_equals_brute_force_on_any_intervals(rows):
    _check(rows)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 1), st.integers(0, 3)), min_size=1, max_size=30))
def test_nest_on_push_pop_stacks(ops):
    """Real push/pop sequences (strictly nested per thread, many equal timestamps): the vectorised path."""
    clock, stacks, rows = 0, {0: [], 1: []}, []
    for thread, action in ops:
        clock += action % 2  # half the events share a timestamp with the previous one
        if action < 2 or not stacks[thread]:
            stacks[thread].append(len(rows))
            rows.append([thread, clock, None, True])
        else:
            rows[stacks[thread].pop()][2] = clock
    for row in rows:
        row[2] = clock if row[2] is None else row[2]
    _check([(t, st_, en - st_, el) for t, st_, en, el in rows])


def test_known_shapes():
    # outer ⊃ middle ⊃ inner on thread 1; a partial overlap and a cross-thread range on thread 2.
    g = np.array([1, 1, 1, 2, 2, 2])
    s = np.array([0, 10, 20, 0, 5, 6])
    e = np.array([100, 90, 30, 10, 20, 7])
    eligible = np.array([True, True, True, True, True, False])
    parent, level = nest(g, s, e, eligible)
    # [6, 7] lies in [0, 10] and in [5, 20]: the shorter one is its parent.
    assert parent.tolist() == [NO_PARENT, 0, 1, NO_PARENT, NO_PARENT, 3]
    assert level.tolist() == [0, 1, 2, 0, 0, 1]
