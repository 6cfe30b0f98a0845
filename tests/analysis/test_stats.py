"""The bootstrap of medians (`stats._boot_medians`) against brute-force resampling."""

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
