"""Summary statistics and the bootstrap interval used for every cost coefficient.

Definitions (used everywhere in nsys_cc and quoted in the README):
- median, mean, std (sample standard deviation, ddof=1; 0 for a single value), p10 and p90 (linear interpolation
  between order statistics, numpy's default) of per-forward times.
- c = median(draft) / median(target): a ratio of medians, robust to the odd slow forward.
- ci95 = the 2.5th and 97.5th percentiles of that ratio over `n_boot` bootstrap replicates, each resampling the
  draft's and the target's forwards independently with replacement (percentile bootstrap, seeded).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

STAT_NAMES = ("median", "mean", "p10", "p90", "std")
N_BOOT = 2000


def describe(values: np.ndarray | pd.Series) -> dict[str, float]:
    """median, mean, p10, p90, std of `values` (NaNs ignored); all NaN when nothing is left."""
    v = np.asarray(values, dtype=float)
    v = v[~np.isnan(v)]
    if v.size == 0:
        return dict.fromkeys(STAT_NAMES, float("nan"))
    p10, p50, p90 = np.percentile(v, [10, 50, 90])
    return {
        "median": float(p50),
        "mean": float(v.mean()),
        "p10": float(p10),
        "p90": float(p90),
        "std": float(v.std(ddof=1)) if v.size > 1 else 0.0,
    }


def median(values: Sequence[float] | np.ndarray | pd.Series) -> float:
    """Median of the finite values (NaN marks a forward without that metric); NaN, silently, when none is finite."""
    v = np.asarray(values, dtype=float)
    v = v[np.isfinite(v)]
    return float(np.median(v)) if v.size else float("nan")


def _boot_medians(v: np.ndarray, n_boot: int, rng: np.random.Generator) -> np.ndarray:
    """Medians of `n_boot` resamples of `v` (size n, with replacement), drawn without building the resamples.

    A resample is n i.i.d. uniform indices into sorted `v`; its k-th smallest index is floor(n·U₍ₖ₎), where U₍ₖ₎,
    the k-th order statistic of n uniforms, is Beta(k, n−k+1); given U₍ₖ₎ = u, U₍ₖ₊₁₎ = u + (1−u)·Beta(1, n−k).
    So the resample median (the middle value, or the mean of the two middle ones for even n) has exactly the
    distribution of the brute-force bootstrap's, at O(n log n + n_boot) cost instead of O(n·n_boot) time and
    memory (100 k forwards × 2000 replicates would be 1.6 GB per array).
    """
    s = np.sort(v)
    n = s.size
    k = (n + 1) // 2  # 1-based rank of the (lower) middle value
    u = rng.beta(k, n - k + 1, size=n_boot)
    lower = s[np.minimum((u * n).astype(np.int64), n - 1)]
    if n % 2:
        return lower
    u_next = u + (1 - u) * rng.beta(1, n - k, size=n_boot)
    return (lower + s[np.minimum((u_next * n).astype(np.int64), n - 1)]) / 2


def ratio_of_medians(
    numerator: np.ndarray, denominator: np.ndarray, *, n_boot: int = N_BOOT, seed: int = 0
) -> tuple[float, float, float]:
    """(c, ci_low, ci_high): median(numerator)/median(denominator) and its 95 % percentile-bootstrap interval.

    Reproducible: the same inputs and seed give the same interval. NaN when either side is empty.
    """
    num = np.asarray(numerator, dtype=float)
    den = np.asarray(denominator, dtype=float)
    num, den = num[~np.isnan(num)], den[~np.isnan(den)]
    if num.size == 0 or den.size == 0 or np.median(den) <= 0:
        return (float("nan"),) * 3
    c = float(np.median(num) / np.median(den))
    rng = np.random.default_rng(seed)
    with np.errstate(divide="ignore", invalid="ignore"):  # a replicate whose median is 0 is dropped below
        ratios = _boot_medians(num, n_boot, rng) / _boot_medians(den, n_boot, rng)
    ratios = ratios[np.isfinite(ratios)]
    low, high = np.percentile(ratios, [2.5, 97.5])
    return c, float(low), float(high)


def median_ci(values: np.ndarray, *, n_boot: int = N_BOOT, seed: int = 0) -> tuple[float, float, float]:
    """(median, ci_low, ci_high): the median of `values` (NaNs ignored) and its 95 % percentile-bootstrap interval,
    drawn as `ratio_of_medians` draws each side. NaN when nothing is left."""
    v = np.asarray(values, dtype=float)
    v = v[~np.isnan(v)]
    if v.size == 0:
        return (float("nan"),) * 3
    boots = _boot_medians(v, n_boot, np.random.default_rng(seed))
    low, high = np.percentile(boots, [2.5, 97.5])
    return float(np.median(v)), float(low), float(high)
