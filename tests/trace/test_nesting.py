"""`nest` (vectorised parents and levels) against a brute-force reading of nvtxgpuproj's definition.

The inputs are plain arrays generated here (no trace file): intervals on a few threads with the awkward
cases real clocks produce — ties, zero-length ranges, touching ranges, identical ranges, partial overlaps.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import example, given, settings, strategies as st

from nsys_cc.trace.nesting import NO_PARENT, _nested_parents, nest


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


@pytest.mark.slow
@settings(max_examples=400, deadline=None)
@given(intervals)
@example(rows=[(0, 0, 0, False), (0, 0, 0, False), (0, 1, 0, False), (0, 21, 0, False), (0, 21, 1, False),
               (0, 0, 0, False), (0, 9, 12, False)])  # a level with no range one level up (found by Hypothesis)
def test_nest_equals_brute_force_on_any_intervals(rows):
    _check(rows)


@pytest.mark.slow
@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 1), st.integers(0, 3)), min_size=1, max_size=30))
@example(ops=[(0, 0), (0, 3), (0, 0), (0, 0), (0, 2), (0, 3)])  # found by Hypothesis
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


def _stacks(rng, n_threads: int, pushes: int, zero_length: bool):
    """Random push/pop sequences on a few threads (strictly nested per thread, many equal timestamps)."""
    clock, stacks, rows = 0, {t: [] for t in range(n_threads)}, []
    while len(rows) < pushes or any(stacks.values()):
        t = int(rng.integers(n_threads))
        clock += int(rng.integers(0, 2))
        if len(rows) < pushes and (not stacks[t] or rng.random() < 0.55):
            stacks[t].append(len(rows))
            rows.append([t, clock, None])
        elif stacks[t]:
            i = stacks[t].pop()
            if not zero_length and clock == rows[i][1]:
                clock += 1
            rows[i][2] = clock
    return (np.array([r[0] for r in rows]), np.array([r[1] for r in rows]), np.array([r[2] for r in rows]))


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(6))
def test_vectorised_path_alone_on_nested_threads(seed):
    """Push/pop stacks without zero-length ranges never need the exact sweep, and the vectorised path alone
    gives the brute-force parents; rows given in any order (an export's order, or shuffled)."""
    rng = np.random.default_rng(seed)
    g, s, e = _stacks(rng, 3, 600, zero_length=False)
    if seed % 2:
        perm = rng.permutation(len(s))
        g, s, e = g[perm], s[perm], e[perm]
    parent, level, bad = _nested_parents(g, s, e)
    assert not bad.any()
    expected = brute_force(g, s, e, np.ones(len(s), bool))
    assert parent.tolist() == expected
    order = sorted(range(len(s)), key=lambda i: (s[i], -e[i], i))
    assert level.tolist() == [_levels(expected, order)[i] for i in range(len(s))]


@pytest.mark.parametrize("seed", range(4))
def test_nest_on_big_stacks_with_zero_length_and_cross_thread_ranges(seed):
    """Bigger inputs with every awkward case at once: zero-length ranges (some where two ranges touch), equal
    timestamps, ranges that end on another thread (ineligible), partial overlaps added on one thread."""
    rng = np.random.default_rng(100 + seed)
    g, s, e = _stacks(rng, 3, 500, zero_length=True)
    extra = 40
    g = np.r_[g, np.full(extra, 1)]
    s2 = rng.integers(0, s.max() + 1, extra)
    s = np.r_[s, s2]
    e = np.r_[e, s2 + rng.integers(0, 40, extra)]
    eligible = rng.random(len(s)) > 0.05
    parent, level = nest(g, s, e, eligible)
    assert parent.tolist() == brute_force(g, s, e, eligible)
    order = sorted(range(len(s)), key=lambda i: (not eligible[i], s[i], -e[i], i))
    assert level.tolist() == [_levels(parent.tolist(), order)[i] for i in range(len(s))]


def test_nest_on_the_real_fixture_equals_brute_force(nvtx_fixture):
    """A real export (the fixture's C program under nsys: push/pop and start/end ranges, ranges ending on other
    threads, equal timestamps, unnamed-style registered ranges) through the reader's arrays."""
    from nsys_cc.trace import open_trace

    with open_trace(nvtx_fixture) as t:
        r = t.nvtx_ranges()
    g, s, e = (r[c].to_numpy() for c in ("global_tid", "start_ns", "end_ns"))
    eligible = ~r["ended_on_other_thread"].to_numpy()
    parent, level = nest(g, s, e, eligible)
    assert (~eligible).any() and (level > 1).any()
    assert parent.tolist() == brute_force(g, s, e, eligible)
    ids = r["range_id"].to_numpy()
    assert [None if p < 0 else int(ids[p]) for p in parent] == [None if pd.isna(x) else int(x) for x in r["parent_id"]]
    assert level.tolist() == r["level"].tolist()
