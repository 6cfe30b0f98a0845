"""A cost model of one speculative-decoding engine step, fitted on in-place runs, and the speedup it forecasts.

For one (target, draft) pair, measured in speculative runs of that draft at several γ (`speculative`):

    step_ms(γ) = γ · draft_forward_ms + verify(γ + 1) + other(γ)
    verify(n)  = verify_intercept_ms + verify_slope_ms · n        (n = tokens verified per sequence = γ + 1)
    other(γ)   = other_intercept_ms + other_slope_ms · γ          (time in the step outside any forward)
    speedup(α, γ) = E(α, γ) · decode_step_ms / step_ms(γ),        E(α, γ) = (1 − α^(γ+1)) / (1 − α)

where decode_step_ms is one plain decode engine step of the target (its forward and the time around it), so the
speedup is plain time per output token ÷ speculative time per output token, as measured. Each input is a median
over the steps of a run; `fit` draws the verify and outside lines through the runs' medians by least squares (two
runs: the line through both; one run: slope 0; never a falling line, see `_line`). Unlike Thm 3.8 it prices the
verify forward of γ + 1 tokens at what it costs, the draft forward as measured inside the speculative step, and the
time outside forwards.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ...arguments import many
from ...errors import InputError
from ..theory.speedup import expected_tokens as _expected_tokens

# γ searched for the best γ; the forecast table lists 1…FORECAST_GAMMAS.
DEFAULT_MAX_GAMMA = 16
FORECAST_GAMMAS = 8


def expected_tokens(alpha, gamma):
    """(1 − α^(γ+1)) / (1 − α): tokens per step under the i.i.d. acceptance model; γ + 1 at α = 1."""
    return _expected_tokens(alpha, gamma)


@dataclass(frozen=True)
class StepCostModel:
    """Cost of one engine step of speculative decoding for one (target, draft) pair; times in ms (medians)."""

    decode_step_ms: float       # one plain (non-speculative) decode engine step of the target, outside time included
    draft_forward_ms: float     # one draft forward
    verify_intercept_ms: float  # verify forward(n) = verify_intercept_ms + verify_slope_ms * n,
    verify_slope_ms: float      #   n = tokens verified per sequence = γ + 1
    other_intercept_ms: float   # time outside forwards per speculative step = other_intercept_ms + other_slope_ms * γ
    other_slope_ms: float

    def verify_ms(self, gamma):
        """Verify forward of γ + 1 tokens per sequence (ms)."""
        g = np.asarray(gamma, dtype=float)
        return self.verify_intercept_ms + self.verify_slope_ms * (g + 1.0)

    def other_ms(self, gamma):
        """Time outside forwards in one speculative step (ms)."""
        return self.other_intercept_ms + self.other_slope_ms * np.asarray(gamma, dtype=float)

    def step_ms(self, gamma):
        """γ·draft + verify(γ+1) + other(γ), in ms; numpy-vectorised over γ."""
        g = np.asarray(gamma, dtype=float)
        out = g * self.draft_forward_ms + self.verify_ms(g) + self.other_ms(g)
        return out[()] if out.ndim == 0 else out

    def speedup(self, alpha, gamma):
        """E[tokens/step] at (α, γ) × decode_step_ms / step_ms(γ): plain ÷ speculative time per output token (NaN where
        the fitted step time is not positive)."""
        g = np.asarray(gamma, dtype=float)
        step = np.asarray(self.step_ms(g), dtype=float)
        with np.errstate(divide="ignore", invalid="ignore"):
            out = np.asarray(expected_tokens(alpha, g)) * self.decode_step_ms / step
        # A line extrapolated far from the runs it was fitted on can reach a step of no time: no forecast there.
        out = np.where(step > 0, out, np.nan)
        return out[()] if out.ndim == 0 else out

    def best_gamma(self, alpha, max_gamma: int = DEFAULT_MAX_GAMMA) -> tuple[int, float]:
        """The γ in 1…max_gamma with the highest forecast speedup at α (first maximum), and that speedup."""
        if int(max_gamma) != max_gamma or max_gamma < 1:
            raise InputError(f"max_gamma must be a whole number ≥ 1, not {max_gamma!r}")
        try:
            a = float(alpha)
        except (TypeError, ValueError):
            raise InputError(f"alpha must be a number in [0, 1], not {alpha!r}", param="alpha") from None
        if not 0.0 <= a <= 1.0:  # NaN included: no γ is best at no α
            raise InputError(f"alpha must be a number in [0, 1], not {alpha!r}", param="alpha")
        gammas = np.arange(1, int(max_gamma) + 1)
        s = np.asarray(self.speedup(a, gammas), dtype=float)
        if np.isnan(s).all():
            return 0, math.nan
        i = int(np.nanargmax(s))
        return int(gammas[i]), float(s[i])


def _line(x: Sequence[float] | np.ndarray, y: Sequence[float] | np.ndarray) -> tuple[float, float]:
    """(intercept, slope) of the least-squares line through (x, y) with slope ≥ 0; slope 0 through one point or one
    distinct x. Verifying more tokens or drafting more cannot take less time: a falling line can only come from noise
    between runs (machine load), and extrapolated it forecasts steps that cost nothing at large γ. Under slope ≥ 0 the
    least-squares solution is then the constant line through the mean."""
    xs, ys = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    keep = np.isfinite(xs) & np.isfinite(ys)
    xs, ys = xs[keep], ys[keep]
    if xs.size == 0:
        return math.nan, math.nan
    if np.unique(xs).size < 2:
        return float(ys.mean()), 0.0
    slope, intercept = np.polyfit(xs, ys, 1)
    if slope < 0:
        return float(ys.mean()), 0.0
    return float(intercept), float(slope)


def fit(decode_step_ms: float, gammas: Sequence[int], draft_forward_ms: Sequence[float],
        verify_ms: Sequence[float], other_ms: Sequence[float], draft_weights: Sequence[float] | None = None
        ) -> StepCostModel:
    """A `StepCostModel` from per-run medians of the speculative runs of one draft.

    Args:
        decode_step_ms: median plain decode engine step of the target.
        gammas: γ of each run; draft_forward_ms, verify_ms, other_ms: that run's medians (one per run).
        draft_weights: weight of each run's draft median in the pooled draft cost (e.g. its number of draft
            forwards); default equal weights.
    One run may be given as numbers alone (a list of one each).
    """
    gammas, draft_forward_ms = many(gammas, "gammas"), many(draft_forward_ms, "draft_forward_ms")
    verify_ms, other_ms = many(verify_ms, "verify_ms"), many(other_ms, "other_ms")
    draft_weights = None if draft_weights is None else many(draft_weights, "draft_weights")
    n = len(gammas)
    if n == 0:
        raise InputError("gammas must list at least one speculative run")
    if not (len(draft_forward_ms) == len(verify_ms) == len(other_ms) == n):
        raise InputError("gammas, draft_forward_ms, verify_ms and other_ms must have one value per run")
    if any(int(g) != g or g < 1 for g in gammas):
        raise InputError(f"gammas must be whole numbers ≥ 1, not {list(gammas)!r}")
    d = np.asarray(draft_forward_ms, dtype=float)
    w = np.ones(n) if draft_weights is None else np.asarray(draft_weights, dtype=float)
    ok = np.isfinite(d) & (w > 0)
    draft = float(np.average(d[ok], weights=w[ok])) if ok.any() else math.nan
    v0, v1 = _line(np.asarray(gammas, dtype=float) + 1.0, verify_ms)
    o0, o1 = _line(gammas, other_ms)
    return StepCostModel(float(decode_step_ms), draft, v0, v1, o0, o1)
