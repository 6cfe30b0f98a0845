"""The non-SI / SI / DSI simulation: closed forms at α ∈ {0, 1}, Thm 3.8, DSI ≤ SI, servers, seeding, speed."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from nsys_cc.analysis.theory import dsi
from nsys_cc.errors import InputError


@settings(max_examples=40, deadline=None)
@given(st.floats(0.01, 1.0), st.integers(1, 12), st.integers(1, 200))
def test_alpha_one_matches_the_closed_form(c, k, n):
    sim = dsi.simulate(c, 1.0, k, n_tokens=n, repeats=2, servers=None)
    # every draft accepted: each SI iteration gains min(k + 1, left) tokens and drafts one fewer than it gains
    iterations = math.ceil(n / (k + 1))
    assert sim.si_runs == pytest.approx(iterations + c * (n - iterations))
    # DSI: one round drafting all n − 1 tokens, one target forward, never more than n
    assert sim.dsi_runs == pytest.approx(min((n - 1) * c + 1, n))


@pytest.mark.slow
@settings(max_examples=40, deadline=None)
@given(st.floats(0.01, 1.0), st.integers(1, 12), st.integers(1, 200))
def test_alpha_zero_matches_the_closed_form(c, k, n):
    sim = dsi.simulate(c, 0.0, k, n_tokens=n, repeats=2, servers=None)
    # nothing accepted: one token per iteration, min(k, left − 1) drafts wasted each time
    assert sim.si_runs == pytest.approx(n + c * sum(min(k, left - 1) for left in range(1, n + 1)))
    assert sim.dsi_runs == pytest.approx(float(n))


@pytest.mark.parametrize("alpha, c, gamma", [(0.8, 0.05, 8), (0.6, 0.1, 3), (0.5, 0.3, 1), (0.9, 0.2, 7)])
def test_simulated_si_is_within_one_percent_of_thm_3_8_at_the_best_gamma(alpha, c, gamma):
    # best γ and S of Thm 3.8 by hand, independent of nsys_cc.speedup
    s = {g: (1 - alpha ** (g + 1)) / ((1 - alpha) * (g * c + 1)) for g in range(1, 100)}
    assert max(s, key=s.get) == gamma
    sim = dsi.simulate(c, alpha, gamma, n_tokens=2000, repeats=100, servers=None, seed=3)
    assert sim.nonsi / sim.si == pytest.approx(s[gamma], rel=0.01)


@pytest.mark.slow
def test_dsi_is_never_slower_than_si_or_non_si():
    c = np.linspace(0.01, 1.0, 10)[None, :, None]
    a = np.linspace(0.0, 1.0, 11)[:, None, None]
    k = np.arange(1, 9)[None, None, :]
    for seed in (0, 1):
        sim = dsi.simulate(c, a, k, n_tokens=300, repeats=20, servers=None, seed=seed)
        assert np.all(sim.dsi <= sim.si)
        assert np.all(sim.dsi_runs <= sim.nonsi)  # the round cap makes this hold run by run


def test_servers_limit_invalidates_dsi():
    assert dsi.servers_needed(0.01, 5) == 20 and dsi.servers_needed(0.2, 5) == 1 and dsi.servers_needed(0.1, 3) == 4
    sim = dsi.simulate([0.01, 0.2], 0.7, 5, n_tokens=50, repeats=3, servers=7)
    assert sim.servers_needed.tolist() == [20, 1]
    assert sim.valid.tolist() == [False, True]
    assert np.isnan(sim.dsi[0]) and not np.isnan(sim.dsi[1])
    assert dsi.simulate(0.01, 0.7, 5, n_tokens=50, repeats=3, servers=20).valid.all()


def test_seeded_reproducibility():
    args = dict(c=[0.05, 0.3], alpha=[[0.6], [0.9]], k=4, n_tokens=200, repeats=5, servers=None)
    one, two, other = dsi.simulate(**args, seed=11), dsi.simulate(**args, seed=11), dsi.simulate(**args, seed=12)
    np.testing.assert_array_equal(one.si_runs, two.si_runs)
    np.testing.assert_array_equal(one.dsi_runs, two.dsi_runs)
    assert not np.array_equal(one.si_runs, other.si_runs)
    assert one.si_runs.shape == (2, 2, 5)


@pytest.mark.slow
def test_heatmaps_pick_the_best_valid_k():
    # A coarse grid: the properties hold cell by cell, the report's finer grid only draws them smoother.
    h = dsi.heatmaps(np.linspace(0.0, 1.0, 12), np.linspace(0.0, 1.0, 12), ks=range(1, 21), seed=0)
    assert h.c.min() == dsi.C_MIN and h.alpha.min() == dsi.ALPHA_MIN and h.alpha.max() == dsi.ALPHA_MAX
    assert h.si.shape == h.dsi.shape == (12, 12)
    # DSI only uses lookaheads its 7 servers allow: k ≥ ceil(1 / (7c))
    needed = np.ceil(1 / (7 * h.c) - 1e-12)
    assert np.all(h.dsi_k >= needed[None, :])
    assert np.all(h.dsi_vs_nonsi >= 1) and np.all(h.dsi_vs_baseline > 0)
    # where SI wins clearly (α = 0.99, c = 0.01) both speed decoding up several times
    assert h.si_vs_nonsi[-1, 0] > 5 and h.dsi_vs_nonsi[-1, 0] > h.si_vs_nonsi[-1, 0]


def test_bad_inputs_raise_one_line_errors():
    with pytest.raises(InputError, match="c must be > 0"):
        dsi.simulate(0.0, 0.5, 3)
    with pytest.raises(InputError, match="α must lie"):
        dsi.simulate(0.1, 1.5, 3)
    with pytest.raises(InputError, match="lookahead"):
        dsi.simulate(0.1, 0.5, 2.5)
    with pytest.raises(InputError, match="repeats"):
        dsi.simulate(0.1, 0.5, 2, repeats=0)
    with pytest.raises(InputError, match="non-empty"):
        dsi.heatmaps([], [0.5])


@pytest.mark.slow
def test_the_reports_maps_are_each_seeds_simulation_and_the_callers_own():
    dsi.report_heatmaps(0)  # another seed simulated first: the maps of seed 3 must still be seed 3's
    fresh = dsi.heatmaps(dsi.REPORT_GRID, dsi.REPORT_GRID, n_tokens=dsi.REPORT_TOKENS,
                         repeats=dsi.REPORT_REPEATS, seed=3)
    first = dsi.report_heatmaps(3)
    np.testing.assert_array_equal(first.dsi, fresh.dsi)
    np.testing.assert_array_equal(first.si_k, fresh.si_k)
    first.dsi[:] = -1  # the caller's copy: the next report draws the simulation, not this
    np.testing.assert_array_equal(dsi.report_heatmaps(3).dsi, fresh.dsi)
