"""Summary statistics and the bootstrap interval used for every cost coefficient.

Definitions (used everywhere in nsys_cc and quoted in docs/definitions.md):
- median, mean, std (sample standard deviation, ddof=1; 0 for a single value), p10 and p90 (linear interpolation
  between order statistics, numpy's default) of per-forward times.
- c = median(draft) / median(target): a ratio of medians, robust to the odd slow forward.
- ci95 = the 2.5th and 97.5th percentiles of that ratio over `n_boot` bootstrap replicates, each resampling the
  draft's and the target's forwards independently with replacement (percentile bootstrap, seeded). It describes the
  forwards of one run (one process at one time) only.
- An interval needs at least two values on each side (`MIN_VALUES`): from fewer it is NaN, never a zero-width
  "95 %" interval around the one value (a single forward says nothing about how far the next one lands).
- Several runs of each model (`profile --repeat R`, `runs_ratio_of_medians`): c = the ratio of the medians of all the
  runs' forwards pooled; its interval covers the run-to-run variation (each process settles at its own speed and
  the machine's load drifts between runs): a two-level (hierarchical) bootstrap draws R runs with replacement, then
  the forwards of each drawn run with replacement, and takes the pooled ratio of medians; from the replicates'
  spread on the log scale, s, the interval is c · exp(± t · s · √(R / (R − 1))), t the 97.5 % point of Student's t
  with R − 1 degrees of freedom (the bootstrap of R values underestimates their variance by (R − 1)/R, and R − 1
  degrees of freedom is all that R runs tell about the spread between runs). NaN from fewer than two runs.
- `wilson`: the Wilson score interval of a proportion (the acceptance rate α from vLLM's counters).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pandas as pd

STAT_NAMES = ("median", "mean", "p10", "p90", "std")
N_BOOT = 2000
# Fewest values an interval is drawn from (per side): with one, every resample is that value.
MIN_VALUES = 2
# 97.5 % points of Student's t for 1…30 degrees of freedom (scipy.stats.t.ppf(0.975, df)); above, the normal's.
_T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131,
         2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042)
Z975 = 1.959964


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
    n = v.size
    k = (n + 1) // 2  # 1-based rank of the (lower) middle value
    u = rng.beta(k, n - k + 1, size=n_boot)
    at = np.minimum((u * n).astype(np.int64), n - 1)
    at_next = None
    if n % 2 == 0:
        u_next = u + (1 - u) * rng.beta(1, n - k, size=n_boot)
        at_next = np.minimum((u_next * n).astype(np.int64), n - 1)
    # Only the order statistics the replicates land on are needed, a narrow band around the median (±√n or so):
    # those of ranks lo…hi are the sorted values of that band of a partition (the same values a full sort puts
    # there, in O(n) rather than a sort of millions: 0.1 s per side at 2 M forwards).
    lo, hi = int(at.min()), int(at.max() if at_next is None else max(at.max(), at_next.max()))
    if hi - lo < n // 4:
        band = np.sort(np.partition(v, (lo, hi))[lo:hi + 1])
        at, at_next = at - lo, None if at_next is None else at_next - lo
    else:
        band = np.sort(v)
    lower = band[at]
    if at_next is None:
        return lower
    return (lower + band[at_next]) / 2


def ratio_of_medians(
    numerator: np.ndarray, denominator: np.ndarray, *, n_boot: int = N_BOOT, seed: int = 0
) -> tuple[float, float, float]:
    """(c, ci_low, ci_high): median(numerator)/median(denominator) and its 95 % percentile-bootstrap interval.

    Reproducible: the same inputs and seed give the same interval. NaN when either side is empty; the interval (not
    c) is NaN when either side has fewer than `MIN_VALUES` values.
    """
    num = np.asarray(numerator, dtype=float)
    den = np.asarray(denominator, dtype=float)
    num, den = num[~np.isnan(num)], den[~np.isnan(den)]
    if num.size == 0 or den.size == 0 or np.median(den) <= 0:
        return (float("nan"),) * 3
    c = float(np.median(num) / np.median(den))
    if num.size < MIN_VALUES or den.size < MIN_VALUES:
        return c, float("nan"), float("nan")
    rng = np.random.default_rng(seed)
    with np.errstate(divide="ignore", invalid="ignore"):  # a replicate whose median is 0 is dropped below
        ratios = _boot_medians(num, n_boot, rng) / _boot_medians(den, n_boot, rng)
    ratios = ratios[np.isfinite(ratios)]
    low, high = np.percentile(ratios, [2.5, 97.5])
    return c, float(low), float(high)


def median_ci(values: np.ndarray, *, n_boot: int = N_BOOT, seed: int = 0) -> tuple[float, float, float]:
    """(median, ci_low, ci_high): the median of `values` (NaNs ignored) and its 95 % percentile-bootstrap interval,
    drawn as `ratio_of_medians` draws each side. NaN when nothing is left; the interval is NaN from fewer than
    `MIN_VALUES` values."""
    v = np.asarray(values, dtype=float)
    v = v[~np.isnan(v)]
    if v.size == 0:
        return (float("nan"),) * 3
    if v.size < MIN_VALUES:
        return float(v[0]), float("nan"), float("nan")
    boots = _boot_medians(v, n_boot, np.random.default_rng(seed))
    low, high = np.percentile(boots, [2.5, 97.5])
    return float(np.median(v)), float(low), float(high)


def t975(df: int) -> float:
    """The 97.5 % point of Student's t with `df` ≥ 1 degrees of freedom (table to 30, the normal's above)."""
    if df < 1:
        raise ValueError(f"degrees of freedom must be ≥ 1, not {df}")
    return _T975[df - 1] if df <= len(_T975) else Z975


def _finite(values) -> np.ndarray:
    v = np.asarray(values, dtype=float)
    return v[np.isfinite(v)]


def _pooled_boot_medians(runs: Sequence[np.ndarray], picks: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Per replicate b, the median of the pooled resample: for each run index in picks[b], that run's values drawn
    with replacement (as many as it has). Vectorised over replicates, in chunks of bounded memory."""
    sizes = np.array([v.size for v in runs])
    width = int(sizes.max())
    padded = np.full((len(runs), width), np.nan)
    for j, v in enumerate(runs):
        padded[j, : v.size] = v
    n_boot, r = picks.shape
    out = np.empty(n_boot)
    step = max(1, 4_000_000 // (r * width))
    ragged = bool((sizes != width).any())
    cols = np.arange(width)
    for lo in range(0, n_boot, step):
        pk = picks[lo:lo + step]
        n = sizes[pk][..., None]  # (m, r, 1)
        idx = (rng.random((len(pk), r, width)) * n).astype(np.int64)
        vals = padded[pk[..., None], idx]
        if ragged:  # a run with fewer than `width` values: its draws past them are padding, sorted last
            vals = np.where(cols < n, vals, np.inf)
        # Each replicate's median: the middle one or two of its sorted values (np.median partitions each row and
        # np.nanmedian loops over the replicates: 4× and 10× slower at these sizes, for the same numbers).
        vals = np.sort(vals.reshape(len(pk), -1), axis=1)
        count = n[..., 0].sum(axis=1)
        rows = np.arange(len(pk))
        out[lo:lo + step] = (vals[rows, (count - 1) // 2] + vals[rows, count // 2]) / 2
    return out


def runs_ratio_of_medians(
    numerators: Sequence[np.ndarray | Sequence[float]], denominators: Sequence[np.ndarray | Sequence[float]], *,
    n_boot: int = N_BOOT, seed: int = 0,
) -> tuple[float, float, float]:
    """(c, ci_low, ci_high) over several runs: run i's draft values `numerators[i]` and target values
    `denominators[i]` (the same process); c = median of every run's numerators ÷ median of every run's denominators,
    and its interval from the two-level bootstrap of the module docstring (runs, then values within a run).

    Runs without a value on either side are left out. With fewer than two runs left the interval is NaN (one run's
    forwards say nothing about the next run's); `ratio_of_medians` is the one-run interval.
    """
    if len(numerators) != len(denominators):
        raise ValueError("numerators and denominators need one entry per run")
    pairs = [(_finite(n), _finite(d)) for n, d in zip(numerators, denominators)]
    pairs = [(n, d) for n, d in pairs if n.size and d.size]
    if not pairs:
        return (float("nan"),) * 3
    num = np.concatenate([n for n, _ in pairs])
    den = np.concatenate([d for _, d in pairs])
    if np.median(den) <= 0:
        return (float("nan"),) * 3
    c = float(np.median(num) / np.median(den))
    r = len(pairs)
    if r < 2 or c <= 0:
        return c, float("nan"), float("nan")
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, r, size=(n_boot, r))
    nums = _pooled_boot_medians([n for n, _ in pairs], picks, rng)
    dens = _pooled_boot_medians([d for _, d in pairs], picks, rng)
    with np.errstate(divide="ignore", invalid="ignore"):
        logs = np.log(nums / dens)
    logs = logs[np.isfinite(logs)]
    if logs.size < 2:
        return c, float("nan"), float("nan")
    half = t975(r - 1) * float(np.std(logs, ddof=1)) * math.sqrt(r / (r - 1))
    return c, c * math.exp(-half), c * math.exp(half)


def runs_median_ci(runs: Sequence[np.ndarray | Sequence[float]], *, n_boot: int = N_BOOT,
                   seed: int = 0) -> tuple[float, float, float]:
    """(median, ci_low, ci_high) of one quantity measured in several runs (e.g. a model's forward times): the median
    of the pooled values and the two-level bootstrap interval of `runs_ratio_of_medians` (NaN from fewer than two
    runs with values)."""
    ones = [np.ones(1)] * len(runs)
    return runs_ratio_of_medians(runs, ones, n_boot=n_boot, seed=seed)


def wilson(successes: int, trials: int, z: float = Z975) -> tuple[float, float]:
    """The Wilson score interval (95 % by default) of a proportion successes ÷ trials; NaN without trials."""
    if trials <= 0:
        return float("nan"), float("nan")
    if not 0 <= successes <= trials:
        raise ValueError(f"successes must lie in 0…{trials}, not {successes}")
    p = successes / trials
    z2 = z * z
    centre = (p + z2 / (2 * trials)) / (1 + z2 / trials)
    half = z * math.sqrt(p * (1 - p) / trials + z2 / (4 * trials * trials)) / (1 + z2 / trials)
    return max(0.0, centre - half), min(1.0, centre + half)
