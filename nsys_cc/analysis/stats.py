"""Summary statistics, the intervals of every cost coefficient, and how runs are pooled.

Definitions (used everywhere in nsys_cc and quoted in docs/definitions.md):
- median, mean, std (sample standard deviation, ddof=1; 0 for a single value), p10 and p90 (linear interpolation
  between order statistics, numpy's default) of per-forward times.
- c = median(draft) / median(target): a ratio of medians, robust to the odd slow forward.
- One run (one process at one time): ci95 = the 2.5th and 97.5th percentiles of that ratio over `n_boot` bootstrap
  replicates, each resampling the draft's and the target's forwards independently with replacement (percentile
  bootstrap, seeded). It describes the forwards of that run only.
- An interval needs at least two values on each side (`MIN_VALUES`): from fewer it is NaN, never a zero-width
  "95 %" interval around the one value (a single forward says nothing about how far the next one lands). An
  interval is given only when a reader can use it (`usable`): finite, in (0, ∞) and containing its estimate; a
  bootstrap whose low end is 0 (resampled medians of 0) or that misses its estimate gives NaN ("no interval").
- Several runs (`profile --repeat R`; `runs_ratio_of_medians`, `runs_median_ci`, `pool`): each run's own value first
  (a ratio of medians within the run: the draft's and the target's forwards of one process, like with like), then
  the pooled value = the geometric mean of the runs' values. Runs differ in speed as a whole (a slow spell, a noisy
  machine), so the ratio is what they share, not the raw times: the median of every run's forwards pooled lands
  between runs at a point set by how many forwards each run had, and a ratio of two such medians can lie outside
  every run's c (two runs of c 0.146 and 0.231 pooled to 0.115). The geometric mean always lies within the runs'
  values; the geometric mean of ratios is the ratio of the geometric means, so a pooled c is the pooled draft time
  ÷ the pooled target time. Its interval:
  - R ≥ 3 (`MIN_RUNS`): the t-interval on the log scale of the runs' values, exp(mean(log) ± t · sd(log) / √R), t
    the 97.5 % point of Student's t with R − 1 degrees of freedom: it contains the estimate and lies in (0, ∞);
  - R = 2: none (NaN): t on one degree of freedom is 12.7, and two runs 58 % apart gave [0.000–1321]; the two runs'
    values (`Pooled.runs`) are shown instead, with a note to profile a third;
  - R = 1: the run's bootstrap above.
  A run's values at or below 0 (a time of 0: nothing to take the log of) pool by their arithmetic mean, without
  an interval.
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
# Fewest runs an interval across runs is drawn from: with two, Student's t on one degree of freedom multiplies their
# difference by 12.7 (two runs 58 % apart gave c 0.115 [0.000–1321]): two runs give their two values, no interval.
MIN_RUNS = 3
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
    if ratios.size == 0:
        return c, float("nan"), float("nan")
    low, high = np.percentile(ratios, [2.5, 97.5])
    return _guarded(c, float(low), float(high))


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
    return _guarded(float(np.median(v)), float(low), float(high))


def t975(df: int) -> float:
    """The 97.5 % point of Student's t with `df` ≥ 1 degrees of freedom (table to 30, the normal's above)."""
    if df < 1:
        raise ValueError(f"degrees of freedom must be ≥ 1, not {df}")
    return _T975[df - 1] if df <= len(_T975) else Z975


def _finite(values) -> np.ndarray:
    v = np.asarray(values, dtype=float)
    return v[np.isfinite(v)]


class Pooled(tuple):
    """(value, ci_low, ci_high) of a quantity pooled over runs, and what it was pooled from: `runs`, each run's own
    value (in the order the runs were given; the runs without a value left out). A plain 3-tuple otherwise (it
    unpacks as one); `n_runs` = len(runs)."""

    runs: tuple[float, ...]
    numbers: tuple[int, ...]

    def __new__(cls, values: tuple[float, float, float], runs: Sequence[float] = (),
                numbers: Sequence[int] | None = None) -> Pooled:
        self = super().__new__(cls, tuple(float(v) for v in values))
        self.runs = tuple(float(r) for r in runs)
        # the run number of each of `runs` (1, 2, … in order when not given)
        self.numbers = tuple(int(n) for n in numbers) if numbers is not None else tuple(range(1, len(self.runs) + 1))
        return self

    @property
    def n_runs(self) -> int:
        return len(self.runs)

    @property
    def spread(self) -> float:
        """The highest run's value ÷ the lowest's − 1 (how far apart the runs lie; NaN from fewer than two runs or a
        run at or below 0)."""
        if len(self.runs) < 2 or min(self.runs) <= 0:
            return float("nan")
        return max(self.runs) / min(self.runs) - 1


NAN3 = (float("nan"),) * 3


def usable(value: float, low: float, high: float) -> bool:
    """Whether (low, high) is an interval a reader can use for `value`: finite, in (0, ∞), containing the value."""
    return (math.isfinite(value) and math.isfinite(low) and math.isfinite(high) and 0 < low <= value <= high)


def _guarded(value: float, low: float, high: float) -> tuple[float, float, float]:
    """(value, low, high), the interval NaN unless `usable`: a percentile bootstrap whose low end is 0 (resamples
    whose median is 0) or that misses its own estimate says nothing a reader can take for a bound."""
    if usable(value, low, high):
        return value, low, high
    return value, float("nan"), float("nan")


def pool(values: Sequence[float], numbers: Sequence[int] | None = None) -> Pooled:
    """One value from the runs' own values (`values`, one per run; NaN left out), with its interval across runs
    (module docstring): the geometric mean, which lies within the runs' values; from three runs on, the t-interval
    on the log scale, exp(mean(log) ± t(R − 1) · sd(log) / √R). NaN interval from one or two runs. Runs at or below
    0 (a time that is 0, nothing to take the log of) are pooled by their arithmetic mean, without an interval."""
    raw = np.asarray(values, dtype=float)
    kept = np.isfinite(raw)
    v = raw[kept]
    numbers = None if numbers is None else [n for n, k in zip(numbers, kept) if k]
    if v.size == 0:
        return Pooled(NAN3)
    if v.size == 1:
        return Pooled((float(v[0]), float("nan"), float("nan")), v, numbers)
    if (v <= 0).any():
        return Pooled((float(np.mean(v)), float("nan"), float("nan")), v, numbers)
    logs = np.log(v)
    centre = float(np.mean(logs))
    value = min(max(math.exp(centre), float(v.min())), float(v.max()))  # within the runs to the last bit
    if v.size < MIN_RUNS:
        return Pooled((value, float("nan"), float("nan")), v, numbers)
    half = t975(v.size - 1) * float(np.std(logs, ddof=1)) / math.sqrt(v.size)
    return Pooled(_guarded(value, min(math.exp(centre - half), value), max(math.exp(centre + half), value)), v,
                  numbers)


def runs_ratio_of_medians(
    numerators: Sequence[np.ndarray | Sequence[float]], denominators: Sequence[np.ndarray | Sequence[float]], *,
    n_boot: int = N_BOOT, seed: int = 0, interval: bool = True, numbers: Sequence[int] | None = None,
) -> Pooled:
    """(c, ci_low, ci_high) over several runs, as a `Pooled`: run i's numerator values `numerators[i]` (a draft's)
    and denominator values `denominators[i]` (the target's of the same run); each run's own c = median ÷ median
    (like with like: the two sides timed in the same process), c = their geometric mean (`pool`; it lies within the
    runs' c) and the interval across runs from three runs on. One run: `ratio_of_medians`, its forwards' bootstrap
    interval (`interval=False`: the value alone, no bootstrap). Runs without a value on either side, or whose
    denominator's median is not above 0, are left out; NaN when none is left. `numbers`: the runs' numbers (for
    `Pooled.numbers`; default 1, 2, …)."""
    if len(numerators) != len(denominators):
        raise ValueError("numerators and denominators need one entry per run")
    numbers = list(range(1, len(numerators) + 1)) if numbers is None else list(numbers)
    pairs = [(k, _finite(n), _finite(d)) for k, n, d in zip(numbers, numerators, denominators)]
    pairs = [(k, n, d) for k, n, d in pairs if n.size and d.size and np.median(d) > 0]
    if not pairs:
        return Pooled(NAN3)
    if len(pairs) == 1:
        k, n, d = pairs[0]
        if not interval:
            c = float(np.median(n) / np.median(d))
            return Pooled((c, float("nan"), float("nan")), [c], [k])
        one = ratio_of_medians(n, d, n_boot=n_boot, seed=seed)
        return Pooled(one, [one[0]], [k])
    return pool([float(np.median(n) / np.median(d)) for _, n, d in pairs], [k for k, _, _ in pairs])


def runs_median_ci(runs: Sequence[np.ndarray | Sequence[float]], *, n_boot: int = N_BOOT, seed: int = 0,
                   interval: bool = True, numbers: Sequence[int] | None = None) -> Pooled:
    """(median, ci_low, ci_high) of one quantity measured in several runs (e.g. a model's forward times), as a
    `Pooled`: each run's median, pooled by `pool` (their geometric mean, within them; the interval across runs from
    three on). One run: `median_ci`, its values' bootstrap interval (`interval=False`: the median alone).
    `numbers`: the runs' numbers (default 1, 2, …)."""
    numbers = list(range(1, len(runs) + 1)) if numbers is None else list(numbers)
    per = [(k, v) for k, v in zip(numbers, (_finite(r) for r in runs)) if v.size]
    if not per:
        return Pooled(NAN3)
    if len(per) == 1:
        k, v = per[0]
        if not interval:
            m = float(np.median(v))
            return Pooled((m, float("nan"), float("nan")), [m], [k])
        one = median_ci(v, n_boot=n_boot, seed=seed)
        return Pooled(one, [one[0]], [k])
    return pool([float(np.median(v)) for _, v in per], [k for k, _ in per])


def by_run(values: np.ndarray, runs: np.ndarray) -> list[np.ndarray]:
    """`values` split by their run number (`runs`, side by side), in ascending run order."""
    values, runs = np.asarray(values), np.asarray(runs)
    return [values[runs == r] for r in np.unique(runs)]


def pooled_median(values: np.ndarray, runs: np.ndarray | None = None) -> float:
    """The median of `values` pooled over their runs (`runs`, the run number of each value; None: one run): each
    run's median (of its finite values), then their geometric mean (`pool`). NaN when no value is finite."""
    if runs is None or np.unique(np.asarray(runs)).size < 2:
        return median(values)
    return float(runs_median_ci(by_run(values, runs), interval=False)[0])


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
