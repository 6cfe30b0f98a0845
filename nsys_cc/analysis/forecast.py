"""The step model of speculative decoding in a real engine: what one engine step costs, and what γ is worth.

The minimal version fixed by the contract shared by the speculation, sweep and live helpers (the spec-analysis
branch owns this module; at merge time its version wins).

One speculative engine step of γ draft tokens costs (SPECDEC.md, "Where Thm 3.8 stops describing a real engine"):
    step(γ) = γ · draft_forward + verify(γ + 1) + other(γ)
    verify(n) = verify_intercept + verify_slope · n      n = tokens verified per sequence
    other(γ) = other_intercept + other_slope · γ         time outside forwards (sampling, rejection, proposer, …)
and yields E(α, γ) = (1 − α^(γ+1)) / (1 − α) tokens per sequence (i.i.d. acceptance), where a plain decode step
(decode_step_ms) yields one. The speedup over plain decoding is E(α, γ) · decode_step_ms / step(γ).
It is Thm 3.8 when verify(n) = decode_step_ms for every n, other = 0 and draft_forward = c · decode_step_ms.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


def expected_tokens(alpha, gamma):
    """E(α, γ) = (1 − α^(γ+1)) / (1 − α) = 1 + α + … + α^γ tokens per step; γ + 1 at α = 1 (numpy-vectorised)."""
    alpha = np.asarray(alpha, dtype=float)
    gamma = np.asarray(gamma, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = (1.0 - alpha ** (gamma + 1.0)) / (1.0 - alpha)
    out = np.where(alpha == 1.0, gamma + 1.0, out)
    return out[()] if out.ndim == 0 else out


@dataclass(frozen=True)
class StepCostModel:
    """Cost of one engine step of speculative decoding for one (target, draft) pair; times in ms (medians)."""

    decode_step_ms: float  # one plain (non-speculative) decode engine step of the target, outside time included
    draft_forward_ms: float  # one draft forward
    verify_intercept_ms: float  # verify forward(n) = verify_intercept_ms + verify_slope_ms * n,
    verify_slope_ms: float  # n = tokens verified per sequence = γ + 1
    other_intercept_ms: float  # time outside forwards per speculative step = other_intercept_ms + other_slope_ms * γ
    other_slope_ms: float

    def step_ms(self, gamma):
        """γ·draft + verify(γ+1) + other(γ), in ms (numpy-vectorised over γ)."""
        gamma = np.asarray(gamma, dtype=float)
        verify = self.verify_intercept_ms + self.verify_slope_ms * (gamma + 1.0)
        other = self.other_intercept_ms + self.other_slope_ms * gamma
        out = gamma * self.draft_forward_ms + verify + other
        return out[()] if out.ndim == 0 else out

    def speedup(self, alpha, gamma):
        """E[tokens/step](α, γ) × decode_step_ms / step_ms(γ): time per token of plain over speculative decoding."""
        return expected_tokens(alpha, gamma) * self.decode_step_ms / self.step_ms(gamma)

    def best_gamma(self, alpha, max_gamma: int = 16) -> tuple[int, float]:
        """The γ in 1…max_gamma with the highest speedup at α (the first maximum kept), and that speedup."""
        if max_gamma < 1:
            raise ValueError(f"max_gamma must be ≥ 1, got {max_gamma}")
        gammas = np.arange(1, max_gamma + 1)
        speedups = np.asarray(self.speedup(float(alpha), gammas), dtype=float)
        if np.isnan(speedups).all():
            return 1, float("nan")
        i = int(np.nanargmax(speedups))
        return int(gammas[i]), float(speedups[i])
