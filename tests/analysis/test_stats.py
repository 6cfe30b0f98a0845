"""`analysis.stats`: the summary of a sample and the ratio of medians against values worked out by hand, the bootstrap
of medians (`stats._boot_medians`) against brute-force resampling."""

import numpy as np
import pytest

from nsys_cc.analysis import stats


def _brute(v: np.ndarray, n_boot: int, rng: np.random.Generator) -> np.ndarray:
    return np.median(v[rng.integers(0, v.size, size=(n_boot, v.size))], axis=1)


# n = 200 (8 M brute-force draws, 1 s) in `make test`; n ≤ 51 keeps the comparison in `make check`.
@pytest.mark.parametrize("n", [1, 2, 3, 10, 51, pytest.param(200, marks=pytest.mark.slow)])
def test_bootstrap_medians_have_the_brute_force_distribution(n):
    rng = np.random.default_rng(n)
    v = rng.lognormal(0.0, 0.5, n)
    fast = stats._boot_medians(v, 40_000, np.random.default_rng(1))
    brute = _brute(v, 40_000, np.random.default_rng(2))
    # Every bootstrap median is a sample value (or the mean of two): compare the two empirical distributions
    # on the values they take (Kolmogorov–Smirnov distance; 40 k draws each → ~0.01 at 99 %).
    grid = np.union1d(fast, brute)
    cdf_fast = np.searchsorted(np.sort(fast), grid, side="right") / fast.size
    cdf_brute = np.searchsorted(np.sort(brute), grid, side="right") / brute.size
    assert np.abs(cdf_fast - cdf_brute).max() < 0.015
    assert np.isin(fast, grid).all() and fast.min() >= v.min() and fast.max() <= v.max()


def test_bootstrap_is_cheap_for_many_forwards():
    v = np.random.default_rng(0).normal(1.0, 0.1, 200_000)
    out = stats._boot_medians(v, stats.N_BOOT, np.random.default_rng(0))
    assert out.shape == (stats.N_BOOT,)
    assert abs(np.median(out) - np.median(v)) < 0.01


@pytest.mark.parametrize("n", [20_000, 20_001, 300_000])
def test_bootstrap_medians_of_many_forwards_are_the_order_statistics_a_full_sort_gives(n):
    # Many forwards take the partition path (only a band of ranks around the median is sorted): each replicate must
    # be exactly the order statistic (or mean of two) that the same uniform draws pick from the fully sorted values.
    v = np.random.default_rng(n).integers(1_000, 1_300, n).astype(float)  # ties, as integer nanoseconds have
    got = stats._boot_medians(v, stats.N_BOOT, np.random.default_rng(7))
    rng, s, k = np.random.default_rng(7), np.sort(v), (n + 1) // 2
    u = rng.beta(k, n - k + 1, size=stats.N_BOOT)
    want = s[np.minimum((u * n).astype(np.int64), n - 1)]
    if n % 2 == 0:
        u2 = u + (1 - u) * rng.beta(1, n - k, size=stats.N_BOOT)
        want = (want + s[np.minimum((u2 * n).astype(np.int64), n - 1)]) / 2
    assert np.array_equal(got, want)


def test_describe_matches_hand_computed_values():
    d = stats.describe([1.0, 2.0, 3.0, 4.0, 100.0])
    assert d["median"] == 3.0
    assert d["mean"] == 22.0
    # numpy linear interpolation: p10 at rank 0.4 → 1 + 0.4·(2−1); p90 at rank 3.6 → 4 + 0.6·(100−4)
    assert d["p10"] == pytest.approx(1.4)
    assert d["p90"] == pytest.approx(61.6)
    assert d["std"] == pytest.approx(np.sqrt(((np.array([1, 2, 3, 4, 100]) - 22.0) ** 2).sum() / 4))


def test_describe_single_and_empty():
    assert stats.describe([5.0])["std"] == 0.0
    assert np.isnan(stats.describe([])["median"])


def test_ratio_of_medians_is_ratio_and_interval_brackets_it():
    rng = np.random.default_rng(1)
    draft = rng.normal(2.0, 0.1, 200)
    target = rng.normal(4.0, 0.2, 200)
    c, lo, hi = stats.ratio_of_medians(draft, target, seed=3)
    assert c == pytest.approx(np.median(draft) / np.median(target))
    assert lo < c < hi
    assert hi - lo < 0.05  # 200 samples with 5 % spread: a tight interval
    assert (c, lo, hi) == stats.ratio_of_medians(draft, target, seed=3)  # seeded → reproducible
    assert (lo, hi) != stats.ratio_of_medians(draft, target, seed=4)[1:]


def test_ratio_of_medians_constant_samples_have_zero_width():
    assert stats.ratio_of_medians([1.0] * 5, [4.0] * 7) == (0.25, 0.25, 0.25)
