"""What a measured cost coefficient c means for speculative decoding (Leviathan, Kalman, Matias, ICML 2023).

Symbols (docs/SPECDEC.md in the repository):

- α ∈ [0, 1], the acceptance rate: the expected probability that one draft token is accepted (i.i.d. model).
- γ ≥ 0, the number of draft tokens proposed per iteration (vLLM's `num_speculative_tokens`).
- c ≥ 0, the cost coefficient (Def. 3.7): the time a draft takes to produce one token ÷ the target's, decode step —
  nsys_cc's c of a token (forward + logits + sampling, `analysis.coefficient.token`; a result's `c` column, with
  `c_forward`, the forwards' alone, beside it).
- ĉ ≥ 0, the same ratio for arithmetic operations (Thm 3.11).

Numbers defined here:
- expected tokens per iteration (Eq. 1): E(α, γ) = (1 − α^(γ+1)) / (1 − α) = 1 + α + … + α^γ; γ + 1 at α = 1.
- walltime factor, the expected speedup over plain decoding (Thm 3.8): S(α, γ, c) = E(α, γ) / (γc + 1).
- operations factor (Thm 3.11): (γĉ + γ + 1) / E(α, γ), the growth in arithmetic operations.
- best γ: the integer in 1…max_gamma maximising S, the first maximum kept (as Online Speculative Decoding,
  Liu et al. 2023, did). Cor. 3.9: some γ gives S > 1 exactly when α > c, and S(γ = 1) = (1 + α)/(1 + c);
  so the break-even acceptance rate of a draft is α = c, and α ≤ c makes every γ a slowdown (best S ≤ 1).
- an interval [c_low, c_high] on c becomes one on the speedup and on the best γ: S falls as c grows, for every γ,
  so the best S at c_high and at c_low bound it; −log(1 + γc) has decreasing differences in (γ, c), so the best γ
  never grows with c (Topkis) and the best γ at c_high and at c_low bound it.
- an interval [α_low, α_high] on α (measured: the Wilson interval of vLLM's counts) joins it: S rises with α for every
  γ, and log E(α, γ) has increasing differences in (γ, α) (each added term α^k weighs more as α grows), so the best γ
  never falls as α grows; the low ends are taken at (α_low, c_high), the high ends at (α_high, c_low).

Every function broadcasts over numpy arrays of α, γ and c; NaN in an array propagates (a draft without a measurement);
a lone NaN or ±inf (a scalar) is refused with an InputError naming the parameter (`param`: alpha, gamma, c, c_hat).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ...arguments import many
from ...errors import InputError
from ..metrics import DECODE, WALL, decision_phase

if TYPE_CHECKING:  # the model itself needs no pandas (`nsys-cc speedup` runs without it); the tables below do
    import pandas as pd

__all__ = [
    "DEFAULT_MAX_GAMMA", "VERDICT_COLUMNS", "Judgement", "best_gamma", "expected_tokens", "judge", "judge_all",
    "unbounded",
    "operations_factor",
    "outcome", "speedup_marks", "verdicts", "walltime_factor",
]


def __dir__() -> list[str]:  # tab completion lists the model, not the imports
    return list(__all__)


# Online Speculative Decoding searched γ = 1…99; S has a single maximum in γ, so a wider search only costs time.
DEFAULT_MAX_GAMMA = 99

VERDICT_COLUMNS = [
    "draft", "metric", "alpha", "alpha_low", "alpha_high", "phase", "c", "c_low", "c_high", "best_gamma",
    "best_gamma_low", "best_gamma_high", "speedup", "speedup_low", "speedup_high", "break_even_alpha", "max_gamma",
    "outcome",
]


# The parameter each symbol of the messages names.
_PARAMS = {"α": "alpha", "γ": "gamma", "c": "c", "ĉ": "c_hat"}


def _array(x, name: str, low: float = 0.0, high: float = math.inf, *, lone_nan: bool = False) -> np.ndarray:
    # numpy reads None as NaN, the "not measured" value: a None passed by mistake would be a silent (0, nan)
    if x is None or (isinstance(x, (list, tuple)) and any(v is None for v in x)):
        raise InputError(f"{name} must be a number or an array of numbers, not {x!r} (NaN marks a value not measured)")
    try:
        arr = np.asarray(x, dtype=float)
    except (TypeError, ValueError):
        raise InputError(f"{name} must be a number or an array of numbers, not {x!r}") from None
    if arr.ndim == 0 and not math.isfinite(float(arr)) and not (lone_nan and math.isnan(float(arr))):
        # A lone NaN or inf is no measurement and no limit: refused, where an array may mark a draft not measured
        # with NaN (it then propagates). Without this, best_gamma(alpha=nan) gave (0, nan) while α = 2 raised.
        raise InputError(f"{name} must be a finite number, not {float(arr)!r} (NaN marks a value not measured only "
                         "in an array)", param=_PARAMS.get(name, name))
    bad = (arr < low) | (arr > high)  # NaN compares False: it passes and propagates
    if np.any(bad):
        value = arr[bad].flat[0]
        if math.isfinite(high):
            raise InputError(f"{name} = {value:g} is outside [{low:g}, {high:g}]")
        raise InputError(f"{name} = {value:g} must be ≥ {low:g}")
    return arr


def _scalar_or_array(arr: np.ndarray):
    return arr[()] if arr.ndim == 0 else arr


def _gamma(gamma) -> np.ndarray:
    """γ as an array of whole numbers ≥ 0 (NaN marks one not measured): the draft proposes whole tokens, and E(α, γ)
    at γ = 2.5 is no speedup of any run (InputError naming γ)."""
    g = _array(gamma, "γ")
    frac = np.isfinite(g) & (g != np.floor(g))
    if np.any(frac):
        raise InputError(f"γ must be a whole number of draft tokens, not {g[frac].flat[0]:g}", param="gamma")
    return g


def expected_tokens(alpha, gamma):
    """E(α, γ) = (1 − α^(γ+1)) / (1 − α): tokens produced per iteration (Leviathan et al. Eq. 1); γ + 1 at α = 1.
    γ: whole numbers ≥ 0 (InputError otherwise)."""
    a = _array(alpha, "α", 0.0, 1.0)
    g = _gamma(gamma)
    with np.errstate(divide="ignore", invalid="ignore"):
        # expm1/log keep 1 − α^(γ+1) accurate when α is close to 1; log(0) = −inf gives E = 1 at α = 0.
        closed = -np.expm1((g + 1.0) * np.log(a)) / (1.0 - a)
    return _scalar_or_array(np.where(a == 1.0, g + 1.0, closed))


def walltime_factor(alpha, gamma, c):
    """S(α, γ, c) = E(α, γ) / (γc + 1): expected walltime improvement over plain decoding (Thm 3.8); γ a whole
    number (InputError otherwise)."""
    g = _gamma(gamma)
    cc = _array(c, "c")
    with np.errstate(over="ignore"):  # γc beyond float range: S is 0 to the last digit, no warning
        return _scalar_or_array(np.asarray(expected_tokens(alpha, g)) / (g * cc + 1.0))


def operations_factor(alpha, gamma, c_hat):
    """(γĉ + γ + 1) / E(α, γ): expected factor of arithmetic operations (Thm 3.11), ĉ the operations ratio."""
    g = _gamma(gamma)
    ch = _array(c_hat, "ĉ")
    with np.errstate(over="ignore"):
        return _scalar_or_array((g * ch + g + 1.0) / np.asarray(expected_tokens(alpha, g)))


def best_gamma(alpha, c, max_gamma: int = DEFAULT_MAX_GAMMA):
    """The integer γ in 1…max_gamma that maximises S(α, γ, c) (first maximum kept), and that S.

    Returns `(gamma, S)`, broadcast over α and c: `gamma` is an int array (0 where α or c is NaN: no γ was
    chosen) and `S` a float array (NaN there). Scalars in, numpy scalars out. Where S grows with every γ — α = 1
    with c < 1 (S → 1/c), or c = 0 with α > 0 (S → 1/(1 − α)) — no γ is best and this returns the search bound
    `max_gamma` and S there: `judge` flags it (`Judgement.best_gamma_unbounded`, best_gamma None, best_speedup
    the limit), and `unbounded(alpha, c)` says where.
    """
    try:
        whole = int(max_gamma) == max_gamma and max_gamma >= 1
    except (TypeError, ValueError, OverflowError):
        whole = False
    if not whole:
        raise InputError(f"max_gamma must be a whole number ≥ 1, not {max_gamma!r}")
    a, cc = np.broadcast_arrays(_array(alpha, "α", 0.0, 1.0), _array(c, "c"))
    if int(max_gamma) > SCAN_CHUNK:  # never an array of max_gamma values: a search bounded in memory and time
        g, best_s = np.zeros(a.shape, int), np.full(a.shape, np.nan)
        for i in np.ndindex(a.shape):
            if not (np.isnan(a[i]) or np.isnan(cc[i])):
                g[i], best_s[i] = _scan_best_gamma(float(a[i]), float(cc[i]), int(max_gamma))
        return _scalar_or_array(g), _scalar_or_array(best_s)
    gammas = np.arange(1, int(max_gamma) + 1, dtype=float)
    s = np.asarray(walltime_factor(a[..., None], gammas, cc[..., None]))
    missing = np.isnan(a) | np.isnan(cc)
    idx = np.argmax(np.where(np.isnan(s), -np.inf, s), axis=-1)
    best_s = np.take_along_axis(s, idx[..., None], axis=-1)[..., 0]
    g = np.where(missing, 0, idx + 1).astype(int)
    return _scalar_or_array(g), _scalar_or_array(np.where(missing, np.nan, best_s))


def unbounded(alpha, c):
    """Where S(α, γ, c) grows with every γ, so that `best_gamma`'s answer is only its search bound: α = 1 with
    0 ≤ c < 1, or c = 0 with α > 0 (broadcast; a bool array, or a numpy bool for scalars)."""
    a, cc = np.broadcast_arrays(_array(alpha, "α", 0.0, 1.0), _array(c, "c"))
    return _scalar_or_array(((a == 1.0) & (cc < 1.0)) | ((cc == 0.0) & (a > 0.0)))


# Above this max_gamma, `best_gamma` scans γ in blocks of this many instead of one array of all of them.
SCAN_CHUNK = 1 << 16
# −expm1(x) is 1.0 in float64 once x < −SATURATED: beyond γ + 1 = SATURATED / −ln α, E(α, γ) no longer changes.
SATURATED = 50.0


def _scan_best_gamma(alpha: float, c: float, max_gamma: int) -> tuple[int, float]:
    """`best_gamma` for one α and c over 1…max_gamma without an array of max_gamma values: the first maximum of S,
    scanned block by block while a later γ can still do better. S is log-concave in γ, and bounded above by
    E(α, ∞)/(γc + 1) = 1/((1 − α)(γc + 1)); past γ + 1 = SATURATED / −ln α, E is the same float for every γ, so S
    can only fall. At α = 1, S = (γ + 1)/(γc + 1) rises with γ when c < 1 and never does otherwise."""
    if alpha == 1.0:
        if c < 1.0:
            return max_gamma, (max_gamma + 1.0) / (max_gamma * c + 1.0)
        return 1, 2.0 / (c + 1.0)
    limit = max_gamma
    if alpha > 0.0:
        limit = min(limit, int(SATURATED / -math.log(alpha)) + 2)
    else:
        limit = 1  # S = 1/(γc + 1): never above γ = 1
    best_g, best_s, start = 0, -math.inf, 1
    while start <= limit:
        gammas = np.arange(start, min(start + SCAN_CHUNK, limit + 1), dtype=float)
        s = np.asarray(walltime_factor(alpha, gammas, c), dtype=float)
        i = int(np.argmax(s))
        if s[i] > best_s:
            best_g, best_s = start + i, float(s[i])
        start += len(gammas)
        with np.errstate(over="ignore", divide="ignore"):
            ceiling = 1.0 / ((1.0 - alpha) * (start * c + 1.0))
        if ceiling * (1.0 + 1e-12) < best_s:  # no later γ can reach the best: stop
            break
    return best_g, best_s


@dataclass(frozen=True)
class Judgement:
    """One draft at one α: the speedup at a given γ, the best γ and its speedup, each with the interval from c's.

    `*_low`/`*_high` come from c_high/c_low: without an interval the speedup bounds are NaN and the best-γ bounds
    None (no γ is chosen where there is no speedup; `best_gamma` too when c is NaN); `gamma`/`speedup*` are None
    without a given γ. `break_even_alpha` is c (Cor. 3.9), NaN when c > 1 (no α in [0, 1] breaks even).
    """

    c: float
    c_low: float
    c_high: float
    alpha: float
    gamma: int | None
    speedup: float | None
    speedup_low: float | None
    speedup_high: float | None
    best_gamma: int | None
    best_gamma_low: int | None
    best_gamma_high: int | None
    best_speedup: float
    best_speedup_low: float
    best_speedup_high: float
    break_even_alpha: float
    max_gamma: int
    outcome: str
    # c = 0 and α > 0: S grows with every γ, so no γ is best; best_gamma is then None and best_speedup the limit
    # of S as γ grows, 1/(1 − α) (inf at α = 1).
    best_gamma_unbounded: bool = False


def judge(c: float, alpha: float, gamma: int | None = None, c_low: float = math.nan, c_high: float = math.nan,
          max_gamma: int = DEFAULT_MAX_GAMMA, alpha_low: float | None = None,
          alpha_high: float | None = None) -> Judgement:
    """Judge one draft of cost coefficient c (interval [c_low, c_high], NaN for none) at acceptance rate α (interval
    [alpha_low, alpha_high] when α was measured; None: α is exact)."""
    # judge's own NaNs (an unmeasured c or bound) are its documented input: checked below, not refused here
    c, alpha = float(_array(c, "c", lone_nan=True)), float(_array(alpha, "α", 0.0, 1.0, lone_nan=True))
    c_low, c_high = float(_array(c_low, "c_low", lone_nan=True)), float(_array(c_high, "c_high", lone_nan=True))
    a_low = alpha if alpha_low is None else float(_array(alpha_low, "alpha_low", 0.0, 1.0, lone_nan=True))
    a_high = alpha if alpha_high is None else float(_array(alpha_high, "alpha_high", 0.0, 1.0, lone_nan=True))
    if math.isnan(alpha):
        raise InputError("α must be a number in [0, 1], not NaN")
    if not (math.isnan(c_low) or math.isnan(c_high) or math.isnan(c)) and not c_low <= c <= c_high:
        raise InputError(f"the interval on c ({c_low:g}, {c_high:g}) must contain c = {c:g}")
    if not a_low <= alpha <= a_high:
        raise InputError(f"the interval on α ({a_low:g}, {a_high:g}) must contain α = {alpha:g}")
    if gamma is not None and (int(gamma) != gamma or gamma < 1):
        raise InputError(f"γ must be a whole number ≥ 1, not {gamma!r}")
    cs = np.array([c, c_high, c_low])  # S falls as c grows: c_high gives the low ends
    alphas = np.array([alpha, a_low, a_high])  # S rises with α: α_low gives the low ends
    g_best, s_best = best_gamma(alphas, cs, max_gamma)
    # No γ where there is no S (no interval given, or no c): None, as the verdicts table's <NA>, never 0.
    g_or_none = [int(g) if math.isfinite(s) else None for g, s in zip(g_best, s_best)]
    s_at = [None, None, None] if gamma is None else [float(v) for v in walltime_factor(alphas, gamma, cs)]
    j: dict[str, Any] = dict(
        c=c, c_low=c_low, c_high=c_high, alpha=alpha, gamma=None if gamma is None else int(gamma),
        speedup=s_at[0], speedup_low=s_at[1], speedup_high=s_at[2],
        best_gamma=g_or_none[0], best_gamma_low=g_or_none[1], best_gamma_high=g_or_none[2],
        best_speedup=float(s_best[0]), best_speedup_low=float(s_best[1]), best_speedup_high=float(s_best[2]),
        break_even_alpha=c if c <= 1 else math.nan, max_gamma=int(max_gamma),
    )
    if c == 0 and alpha > 0:
        # S = E(α, γ) rises with every γ: the searched maximum is only the search bound.
        j.update(best_gamma=None, best_speedup=1.0 / (1.0 - alpha) if alpha < 1 else math.inf,
                 best_gamma_unbounded=True)
    elif alpha == 1 and 0 < c < 1:
        # every draft accepted: S = (γ + 1)/(γc + 1) rises with every γ towards 1/c; `best_gamma` gives its cap
        j.update(best_gamma=None, best_speedup=1.0 / c, best_gamma_unbounded=True)
    return Judgement(**j, outcome=outcome(c, alpha))


def judge_all(c: float, alphas: Sequence[float], gamma: int | None = None, c_low: float = math.nan,
              c_high: float = math.nan, max_gamma: int = DEFAULT_MAX_GAMMA) -> list[Judgement]:
    """`judge` at each acceptance rate of `alphas`, in order: what `nsys-cc speedup` reports."""
    return [judge(c, a, gamma, c_low, c_high, max_gamma) for a in many(alphas, "alphas")]


def outcome(c: float, alpha: float) -> str:
    """What c means at α, as a category (Cor. 3.9): "speeds-up" (α > c: some γ gives S > 1), "slows-down"
    (α < c < 1), "break-even" (α = c < 1), "never" (c ≥ 1: no α or γ wins), "no-measurement" (c is NaN), and for
    a free draft (c = 0, S = E(α, γ)): "unbounded" (α > 0: S grows with every γ, no γ is best) or "no-gain"
    (α = 0: S = 1 at every γ)."""
    if math.isnan(c):
        return "no-measurement"
    if c == 0:
        return "unbounded" if alpha > 0 else "no-gain"
    if alpha > c:
        return "speeds-up"
    if c >= 1:
        return "never"
    return "break-even" if alpha == c else "slows-down"


def _by_draft_and_metric(coefficients: pd.DataFrame) -> dict[tuple, list[tuple]]:
    """The rows (phase, c, ci_low, ci_high) of `coefficients` per (draft, metric), both in the order they first
    appear (as `groupby(sort=False)` groups them; a row without a draft or metric in none): grouped in one pass, not
    a frame per group."""
    import pandas as pd

    groups: dict[tuple, list[tuple]] = {}
    for draft, metric, *row in coefficients[["draft", "metric", "phase", "c", "ci_low", "ci_high"]].itertuples(
            index=False):
        if pd.isna(draft) or pd.isna(metric):
            continue
        groups.setdefault((draft, metric), []).append(tuple(row))
    return groups


def _decision_row(rows: list[tuple]) -> tuple[str, tuple | None]:
    """(the phase a draft is judged on, its first row (phase, c, ci_low, ci_high)), or (decode, None) without one."""
    phase = decision_phase([r[0] for r in rows])
    if phase is None:
        return DECODE, None
    return phase, next(r for r in rows if r[0] == phase)


def speedup_marks(coefficients: pd.DataFrame, metric: str = WALL) -> pd.DataFrame:
    """One row per draft with a finite c of `metric` in its decision phase (decode, else all): draft, phase, c,
    ci_low, ci_high (c of a token: forward + logits + sampling, where the traces have them). Wall-clock by default:
    the speedup model compares whole tokens as the decoding loop waits for them."""
    import pandas as pd

    coef = coefficients[(coefficients["metric"] == metric) & np.isfinite(coefficients["c"].to_numpy(dtype=float))]
    rows = []
    for (draft, _), group in _by_draft_and_metric(coef).items():
        phase, row = _decision_row(group)
        if row is not None:
            rows.append({"draft": draft, "phase": phase, "c": float(row[1]), "ci_low": float(row[2]),
                         "ci_high": float(row[3])})
    return pd.DataFrame(rows, columns=["draft", "phase", "c", "ci_low", "ci_high"])


def _intervals(alpha_intervals, n: int) -> list[tuple[float, float] | None]:
    """Per α, its interval: `alpha_intervals` as a list (`many`'s rule, with one (low, high) pair alone being one
    interval, not two entries), one entry (or None) per α."""
    if alpha_intervals is None:
        return [None] * n
    pair = (isinstance(alpha_intervals, (tuple, list)) and len(alpha_intervals) == 2
            and all(isinstance(v, (int, float, np.floating)) for v in alpha_intervals))
    out = [tuple(alpha_intervals)] if pair else many(alpha_intervals, "alpha_intervals")
    if len(out) != n:
        raise InputError(f"alpha_intervals has {len(out)} entries for {n} α: give one (low, high) or None per α",
                         param="alpha_intervals")
    return [None if v is None else (float(v[0]), float(v[1])) for v in out]


def verdicts(coefficients: pd.DataFrame, alphas: Sequence[float], max_gamma: int = DEFAULT_MAX_GAMMA,
             alpha_intervals: Sequence[tuple[float, float] | None] | None = None) -> pd.DataFrame:
    """Per draft, metric and α: best γ, the speedup there, the break-even α and the outcome (`outcome`); the
    sentence that says it is `nsys_cc.report.sentence_text.verdict_of`. `alpha_intervals`: per α, its interval when
    it was measured (None: exact, as an α the user gives); the speedup and best-γ intervals then carry it.

    Args:
        coefficients: columns `draft, phase, metric, c, ci_low, ci_high` (the cost-coefficient analysis). The
            decode-phase row is used — c is defined on the per-token step (Def. 3.7) — or `all` when a draft has
            no decode row; the `phase` column says which. A draft with neither gets NaN numbers and says so.
        alphas: acceptance rates in [0, 1].
        max_gamma: the largest γ searched.

    Returns:
        A DataFrame with `VERDICT_COLUMNS`: `c, c_low, c_high` (the interval, NaN if none), `best_gamma*`
        (nullable Int64; `_low` from c_high, `_high` from c_low), `speedup*` (the best S and its interval),
        `break_even_alpha` (= c, Cor. 3.9), `max_gamma` and `outcome` (`outcome()`, or "no-phase" when the draft has
        neither a decode nor an all row). Empty (these columns) when no α is given.
    """
    import pandas as pd

    missing = [col for col in ("draft", "phase", "metric", "c", "ci_low", "ci_high") if col not in coefficients]
    if missing:
        raise InputError(f"coefficients lack the column(s) {', '.join(missing)}")
    alphas = [float(a) for a in np.atleast_1d(_array(many(alphas, "alphas"), "α", 0.0, 1.0))]
    if any(math.isnan(a) for a in alphas):
        raise InputError("α must be a number in [0, 1], not NaN")
    intervals = _intervals(alpha_intervals, len(alphas))
    out = []
    for (draft, metric), rows in _by_draft_and_metric(coefficients).items():
        phase, row = _decision_row(rows)
        c, lo, hi = (math.nan,) * 3 if row is None else (float(row[1]), float(row[2]), float(row[3]))
        for a, a_ci in zip(alphas, intervals):
            a_lo, a_hi = a_ci if a_ci is not None else (math.nan, math.nan)
            if math.isnan(c):
                out.append({"draft": draft, "metric": metric, "alpha": a, "alpha_low": a_lo, "alpha_high": a_hi,
                            "phase": phase, "c": c, "c_low": lo, "c_high": hi, "max_gamma": int(max_gamma),
                            "outcome": "no-phase" if row is None else "no-measurement"})
                continue
            exact_c = math.isnan(lo) or math.isnan(hi)
            j = judge(c, a, c_low=c if exact_c else lo, c_high=c if exact_c else hi, max_gamma=max_gamma,
                      alpha_low=None if a_ci is None else a_lo, alpha_high=None if a_ci is None else a_hi)
            has_ci = not exact_c or a_ci is not None
            out.append({
                "draft": draft, "metric": metric, "alpha": a, "alpha_low": a_lo, "alpha_high": a_hi, "phase": phase,
                "c": c, "c_low": lo, "c_high": hi,
                "best_gamma": j.best_gamma,
                "best_gamma_low": j.best_gamma_low if has_ci else None,
                "best_gamma_high": j.best_gamma_high if has_ci else None,
                "speedup": j.best_speedup,
                "speedup_low": j.best_speedup_low if has_ci else math.nan,
                "speedup_high": j.best_speedup_high if has_ci else math.nan,
                "break_even_alpha": j.break_even_alpha, "max_gamma": j.max_gamma, "outcome": j.outcome,
            })
    frame = pd.DataFrame(out, columns=VERDICT_COLUMNS)
    for col in ("best_gamma", "best_gamma_low", "best_gamma_high", "max_gamma"):
        frame[col] = frame[col].astype("Int64")
    for col in ("alpha", "alpha_low", "alpha_high", "c", "c_low", "c_high", "speedup", "speedup_low", "speedup_high",
                "break_even_alpha"):
        frame[col] = frame[col].astype(float)
    return frame
