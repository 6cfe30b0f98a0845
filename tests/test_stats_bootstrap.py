"""The bootstrap of medians (`stats._boot_medians`) against brute-force resampling."""

import numpy as np
import pytest

from nsys_cc.analysis import stats


def _brute(v: np.ndarray, n_boot: int, rng: np.random.Generator) -> np.ndarray:
    return np.median(v[rng.integers(0, v.size, size=(n_boot, v.size))], axis=1)


@pytest.mark.parametrize("n", [1, 2, 3, 10, 51, 200])
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
