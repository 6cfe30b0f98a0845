"""Intervals that mean what they say: the NaN rule, c over several runs with its interval across them,
Student's t, and the Wilson interval of α — each checked against values worked out independently here."""

from __future__ import annotations

import math

import numpy as np
import pytest

from nsys_cc.analysis import stats

# ---- the NaN rule: no interval from fewer than two values ------------------------------------------------------

@pytest.mark.parametrize("draft, target", [([0.5], [2.0, 2.2, 2.1]), ([0.5, 0.6], [2.0]), ([0.5], [2.0])])
def test_one_value_on_a_side_gives_c_but_no_interval(draft, target):
    c, lo, hi = stats.ratio_of_medians(draft, target)
    assert c == pytest.approx(np.median(draft) / np.median(target))
    assert math.isnan(lo) and math.isnan(hi)  # never the zero-width [c–c] of a single forward


def test_two_values_on_each_side_give_an_interval():
    c, lo, hi = stats.ratio_of_medians([0.5, 0.7], [2.0, 2.4])
    assert lo < c < hi


def test_median_ci_of_one_value_has_no_interval():
    m, lo, hi = stats.median_ci(np.array([3.0, np.nan]))
    assert m == 3.0 and math.isnan(lo) and math.isnan(hi)


def test_constant_samples_still_have_their_zero_width_interval():
    # two or more values that agree exactly: the bootstrap says so (this is data, not a lone value)
    assert stats.ratio_of_medians([1.0] * 5, [4.0] * 7) == (0.25, 0.25, 0.25)


# ---- Student's t -------------------------------------------------------------------------------------------------

def _t975_by_integration(df: int) -> float:
    """The 97.5 % point of Student's t, from its density integrated numerically (an oracle independent of the
    table in stats)."""
    logc = math.lgamma((df + 1) / 2) - math.lgamma(df / 2) - 0.5 * math.log(df * math.pi)

    def cdf(x: float) -> float:
        grid = np.linspace(0.0, x, 20001)
        pdf = np.exp(logc - (df + 1) / 2 * np.log1p(grid ** 2 / df))
        return 0.5 + float(np.sum((pdf[1:] + pdf[:-1]) / 2 * np.diff(grid)))

    lo, hi = 0.0, 20.0
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if cdf(mid) < 0.975 else (lo, mid)
    return (lo + hi) / 2


@pytest.mark.parametrize("df", [1, 2, 3, 5, 10, 30])
def test_t_quantiles_match_the_distribution(df):
    assert stats.t975(df) == pytest.approx(_t975_by_integration(df), abs=2e-3)


def test_t_beyond_the_table_is_the_normal_and_zero_df_is_refused():
    assert stats.t975(500) == pytest.approx(1.96, abs=1e-3)
    with pytest.raises(ValueError):
        stats.t975(0)


# ---- c over several runs (each run's c, then their geometric mean) -------------------------------------------------

def _by_hand(drafts, targets):
    """The oracle: each run's median ÷ median with numpy, then the geometric mean and the log-scale t-interval
    (the 97.5 % point of t by numerical integration, not the module's table)."""
    cs = np.array([np.median(d) / np.median(t) for d, t in zip(drafts, targets)])
    logs = np.log(cs)
    half = _t975_by_integration(len(cs) - 1) * logs.std(ddof=1) / math.sqrt(len(cs))
    return cs, math.exp(logs.mean()), math.exp(logs.mean() - half), math.exp(logs.mean() + half)


def test_c_over_runs_is_the_geometric_mean_of_the_runs_c_with_the_t_interval_of_their_logs():
    rng = np.random.default_rng(0)
    drafts = [rng.normal(0.5, 0.02, n) for n in (150, 120, 90)]
    targets = [rng.normal(f, 0.1, n) for f, n in ((3.0, 150), (3.3, 110), (2.8, 130))]
    pooled = stats.runs_ratio_of_medians(drafts, targets)
    cs, c, lo, hi = _by_hand(drafts, targets)
    assert tuple(pooled) == pytest.approx((c, lo, hi), rel=1e-3)
    assert pooled.runs == pytest.approx(tuple(cs)) and pooled.numbers == (1, 2, 3)
    assert cs.min() <= pooled[0] <= cs.max() and 0 < pooled[1] <= pooled[0] <= pooled[2]


def test_runs_five_times_apart_pool_within_them_where_raw_medians_did_not():
    # one run 5× slower as a whole, and with more forwards; the median of every forward pooled
    # (the old definition) lands in the slow run on both sides and the ratio of those medians lies outside both runs
    rng = np.random.default_rng(3)
    fast_t, slow_t = rng.normal(7.0, 0.3, 20), rng.normal(38.0, 2.0, 60)
    fast_d, slow_d = rng.normal(1.6, 0.05, 60), rng.normal(5.5, 0.2, 20)
    drafts, targets = [slow_d, fast_d], [slow_t, fast_t]
    old = np.median(np.concatenate(drafts)) / np.median(np.concatenate(targets))
    cs = [np.median(d) / np.median(t) for d, t in zip(drafts, targets)]
    assert not min(cs) <= old <= max(cs)  # what the raw pooling gave
    c, lo, hi = stats.runs_ratio_of_medians(drafts, targets)
    assert c == pytest.approx(math.sqrt(cs[0] * cs[1])) and min(cs) <= c <= max(cs)
    assert math.isnan(lo) and math.isnan(hi)  # two runs: their values, no interval


def test_two_runs_have_their_values_and_no_interval():
    two = stats.runs_ratio_of_medians([[1.0, 1.2, 1.1], [2.0, 2.1, 2.2]], [[10.0, 10.0], [8.0, 9.0]])
    assert two[0] == pytest.approx(math.sqrt(0.11 * (2.1 / 8.5)))
    assert math.isnan(two[1]) and math.isnan(two[2])
    assert two.runs == pytest.approx((0.11, 2.1 / 8.5)) and two.spread == pytest.approx((2.1 / 8.5) / 0.11 - 1)


def test_one_run_left_is_its_forwards_bootstrap():
    one = stats.runs_ratio_of_medians([[0.5, 0.6, 0.55]], [[3.0, 3.1, 2.9]], seed=4)
    assert tuple(one) == stats.ratio_of_medians([0.5, 0.6, 0.55], [3.0, 3.1, 2.9], seed=4)
    # a run without draft values is left out: one run left, its bootstrap
    left = stats.runs_ratio_of_medians([[0.5, 0.6, 0.55], []], [[3.0, 3.1, 2.9], [2.0, 2.0]], seed=4)
    assert tuple(left) == tuple(one) and left.numbers == (1,)


def test_the_interval_of_three_runs_by_hand():
    # each run's c known exactly (constant forwards): the interval is exp(mean ± 4.303 · sd / √3) of their logs
    cs = [0.10, 0.12, 0.15]
    pooled = stats.runs_ratio_of_medians([[c] * 40 for c in cs], [[1.0] * 40 for _ in cs])
    logs = np.log(cs)
    half = 4.303 * logs.std(ddof=1) / math.sqrt(3)
    assert pooled[0] == pytest.approx((0.10 * 0.12 * 0.15) ** (1 / 3))
    assert pooled[1] == pytest.approx(math.exp(logs.mean() - half), rel=1e-4)
    assert pooled[2] == pytest.approx(math.exp(logs.mean() + half), rel=1e-4)


def test_runs_at_zero_pool_by_their_mean_without_an_interval():
    p = stats.pool([0.0, 2.0, 4.0])
    assert p[0] == 2.0 and math.isnan(p[1]) and math.isnan(p[2])


def _simulated_runs(rng, c_true: float, spread: float, runs: int, n: int = 100):
    """Runs of a known spread: each run's draft and target forwards scatter 3 % around medians whose ratio is
    c_true × exp(N(0, spread)) — every process settles at its own speed."""
    drafts, targets = [], []
    for _ in range(runs):
        t = 3.0 * math.exp(rng.normal(0, 0.1))
        c_run = c_true * math.exp(rng.normal(0, spread))
        targets.append(t * np.exp(rng.normal(0, 0.03, n)))
        drafts.append(c_run * t * np.exp(rng.normal(0, 0.03, n)))
    return drafts, targets


# 150 trials each: three runs (the demo's least) in `make check`, five in `make test`
@pytest.mark.parametrize("runs", [3, pytest.param(5, marks=pytest.mark.slow)])
def test_the_interval_across_runs_covers_c_as_often_as_it_says(runs):
    rng = np.random.default_rng(runs)
    trials, covered, one_run_covered = 150, 0, 0
    for seed in range(trials):
        drafts, targets = _simulated_runs(rng, 0.13, 0.08, runs)
        _, lo, hi = stats.runs_ratio_of_medians(drafts, targets, n_boot=400, seed=seed)
        covered += lo <= 0.13 <= hi
        _, lo1, hi1 = stats.ratio_of_medians(drafts[0], targets[0], n_boot=400, seed=seed)
        one_run_covered += lo1 <= 0.13 <= hi1
    # nominal 95 %: the t-interval of the runs' log c (the within-run noise is part of each run's c)
    assert covered / trials >= 0.90
    # one run's interval, over its forwards only, misses the run-to-run spread most of the time
    assert one_run_covered / trials < 0.5


def test_the_interval_across_runs_widens_with_their_spread():
    rng = np.random.default_rng(7)
    tight = stats.runs_ratio_of_medians(*_simulated_runs(rng, 0.13, 0.01, 4))
    wide = stats.runs_ratio_of_medians(*_simulated_runs(rng, 0.13, 0.15, 4))
    assert (wide[2] / wide[1]) > 2 * (tight[2] / tight[1]) - 1


def test_runs_median_ci_pools_the_runs_medians():
    m, lo, hi = stats.runs_median_ci([[1.0, 1.2, 1.1], [1.4, 1.3], [1.0]])
    assert m == pytest.approx((1.1 * 1.35 * 1.0) ** (1 / 3))
    assert lo < m < hi


# ---- a single run's bootstrap: usable or none ---------------------------------------------------------------------

def test_a_bootstrap_reaching_zero_is_no_interval():
    # most draft values are 0 (a part that launched no GPU work): resampled medians of 0 give a low end of 0
    c, lo, hi = stats.ratio_of_medians([0.0, 0.0, 0.0, 1.0, 2.0], [1.0, 1.1, 0.9])
    assert c == 0.0 and math.isnan(lo) and math.isnan(hi)
    m, lo, hi = stats.median_ci([0.0, 0.0, 3.0, 4.0])
    assert m == 1.5 and math.isnan(lo) and math.isnan(hi)


# ---- Wilson -----------------------------------------------------------------------------------------------------

def test_wilson_matches_hand_computed_values():
    # 10 of 20: centre 0.5, half-width z·sqrt(0.25/20 + z²/1600)/(1 + z²/20)
    z = 1.959964
    half = z * math.sqrt(0.25 / 20 + z * z / 1600) / (1 + z * z / 20)
    assert stats.wilson(10, 20) == pytest.approx((0.5 - half, 0.5 + half))
    # none of 45 accepted (dummy weights): [0, z²/(n + z²)], never [0, 0]
    lo, hi = stats.wilson(0, 45)
    assert lo == 0.0 and hi == pytest.approx(z * z / (45 + z * z))
    assert stats.wilson(45, 45)[1] == pytest.approx(1.0)


def test_wilson_without_trials_is_nan_and_impossible_counts_are_refused():
    assert all(math.isnan(x) for x in stats.wilson(0, 0))
    with pytest.raises(ValueError):
        stats.wilson(5, 4)


# ---- α's interval carried into the speedup ------------------------------------------------------------------------

def test_alpha_from_the_counters_has_a_wilson_interval():
    from nsys_cc.analysis.profile_dir.acceptance import AcceptanceStats

    # 40 drafts of 3 tokens, 30 tokens accepted, 10 drafts accepted in full: 30 drafts met a rejection
    s = AcceptanceStats(alpha=30 / 120, per_position=(), num_drafts=40, num_draft_tokens=120, num_accepted=30,
                        accepted_per_position=(15, 5, 10))
    assert s.judged_tokens == 30 + 30
    assert s.alpha_iid_ci95 == pytest.approx(stats.wilson(30, 60))
    assert s.alpha_iid_ci95[0] < s.alpha_iid < s.alpha_iid_ci95[1]


def test_the_speedup_interval_carries_alphas():
    import pandas as pd

    from nsys_cc.analysis.theory import speedup

    coef = pd.DataFrame([{"draft": "d", "phase": "decode", "metric": "wall", "c": 0.13, "ci_low": 0.12,
                          "ci_high": 0.14}])
    exact = speedup.verdicts(coef, [0.6]).iloc[0]
    measured = speedup.verdicts(coef, [0.6], alpha_intervals=[(0.5, 0.7)]).iloc[0]
    assert measured["speedup"] == exact["speedup"]
    # by hand: the best S over γ at the interval's corners
    gammas = np.arange(1, 100)

    def best(a, c):
        return max((1 - a ** (g + 1)) / (1 - a) / (g * c + 1) for g in gammas)

    assert measured["speedup_low"] == pytest.approx(best(0.5, 0.14))
    assert measured["speedup_high"] == pytest.approx(best(0.7, 0.12))
    assert measured["speedup_low"] < exact["speedup_low"] and measured["speedup_high"] > exact["speedup_high"]
    assert (measured["alpha_low"], measured["alpha_high"]) == (0.5, 0.7)
    assert math.isnan(exact["alpha_low"])


def test_the_best_gamma_never_falls_as_alpha_grows():
    from nsys_cc.analysis.theory import speedup

    alphas = np.linspace(0.0, 0.99, 100)
    for c in (0.01, 0.05, 0.13, 0.3, 0.6):
        g, _ = speedup.best_gamma(alphas, c)
        assert (np.diff(np.asarray(g)) >= 0).all()


# ---- impossible speedups ------------------------------------------------------------------------------------------

def test_a_speedup_above_one_at_alpha_zero_is_a_measurement_problem():
    from nsys_cc.analysis.speculative.plausibility import problems

    (note,) = problems(name="d.spec-g1", measured=1.084, alpha=0.0, tokens_per_step=1.0, interval=(1.05, 1.12))
    assert note.startswith("d.spec-g1: MEASUREMENT PROBLEM: a measured speedup of 1.08× [1.05–1.12] at α = 0")
    assert problems(name="d", measured=0.95, alpha=0.0, tokens_per_step=1.0) == []
    assert problems(name="d", measured=float("nan"), alpha=0.0, tokens_per_step=1.0) == []


def test_a_speedup_above_the_tokens_per_step_is_a_measurement_problem():
    from nsys_cc.analysis.speculative.plausibility import problems

    (note,) = problems(name="d", measured=1.9, alpha=0.5, tokens_per_step=1.75)
    assert "above the 1.75 tokens per step" in note
    assert problems(name="d", measured=1.6, alpha=0.5, tokens_per_step=1.75) == []
