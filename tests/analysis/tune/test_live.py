"""The live estimate (c, the verify line, the forecast's best γ), its words, and the contract's step model."""

from __future__ import annotations

import math

import numpy as np
import pytest

from nsys_cc.analysis.speculative.forecast import StepCostModel, expected_tokens
from nsys_cc.analysis.tune.live import estimate, verify_line
from nsys_cc.live.timing import DECODE, MIXED, VERIFY, StepRecord
from nsys_cc.report.live_text import live_line


def test_step_model_reduces_to_thm_3_8():
    # Leviathan et al. Table 1 (c = 0): α = 0.8, γ = 5 → 3.69; α = 0.9, γ = 10 → 6.86.
    free = StepCostModel(1.0, 0.0, 1.0, 0.0, 0.0, 0.0)
    assert free.speedup(0.8, 5) == pytest.approx(3.69, abs=0.005)
    assert free.speedup(0.9, 10) == pytest.approx(6.86, abs=0.005)
    assert expected_tokens(1.0, 3) == 4.0
    # Online Speculative Decoding: α = 0.6, c = 0.05 → best γ 4; c = 0.1 → 3.
    for c, best in ((0.05, 4), (0.1, 3)):
        assert StepCostModel(1.0, c, 1.0, 0.0, 0.0, 0.0).best_gamma(0.6)[0] == best
    assert np.allclose(StepCostModel(2.0, 0.5, 1.0, 1.0, 0.25, 0.125).step_ms(np.array([1, 2])), [3.875, 5.5])


def verify(target_ms, drafts_ms, step_ms=math.nan, n=4.0):
    return StepRecord(VERIFY, n, step_ms / 1e3, target_ms / 1e3, [d / 1e3 for d in drafts_ms])


def test_c_is_median_draft_over_median_verify_of_verify_steps_only():
    records = [verify(10.0, [1.0, 1.0, 3.0], 20.0), verify(12.0, [1.2, 1.2], 22.0), verify(11.0, [0.9], 21.0),
               StepRecord(MIXED, 64.0, 0.1, 0.08, [0.05])]
    est = estimate(records, alpha=math.nan)
    assert est.steps == 3
    assert est.draft_forward_ms == pytest.approx(1.1) and est.verify_forward_ms == pytest.approx(11.0)
    assert est.c == pytest.approx(0.1)
    assert est.outside_ms == pytest.approx(np.median([20 - 15, 22 - 14.4, 21 - 11.9]))
    assert est.num_speculative_tokens is None and "no forecast yet" in live_line(est)
    assert estimate([StepRecord(MIXED, 64.0, 0.1, 0.08, [])], alpha=0.5) is None


def test_verify_line_linear_when_two_sizes_are_seen_else_flat():
    records = [verify(5.0 + 1.5 * n, [], n=n) for n in (2.0, 4.0) for _ in range(3)]
    records.append(StepRecord(DECODE, 1.0, math.nan, 6.5e-3, []))
    intercept, slope, fit = verify_line(records)
    assert fit == "linear" and intercept == pytest.approx(5.0) and slope == pytest.approx(1.5)
    assert verify_line([verify(9.0, []), verify(11.0, [])]) == (pytest.approx(10.0), 0.0, "flat")


def test_best_gamma_at_alpha_matches_thm_3_8_when_the_engine_is_ideal():
    # Flat verify = decode step, nothing outside the forwards, draft = c · verify: the forecast is Thm 3.8's, so the
    # best γ at α = 0.6 is Online Speculative Decoding's 4 for c = 0.05.
    records = [verify(10.0, [0.5] * 4, step_ms=12.0) for _ in range(5)]
    est = estimate(records, alpha=0.6)
    assert est.verify_fit == "flat" and est.decode_source == "estimated"
    assert est.outside_ms == pytest.approx(0.0) and est.decode_step_ms == pytest.approx(10.0)
    assert (est.best_gamma, est.num_speculative_tokens) == (4, 4)
    assert est.best_speedup == pytest.approx(expected_tokens(0.6, 4) / 1.2)
    assert "best num_speculative_tokens = 4" in live_line(est)


def test_no_gamma_pays_at_zero_acceptance_and_observed_decode_steps_are_used():
    records = [verify(10.0, [1.0] * 3, step_ms=20.0) for _ in range(4)]
    records += [StepRecord(DECODE, 1.0, 9.0e-3, 6.0e-3, []) for _ in range(3)]
    est = estimate(records, alpha=0.0)
    assert est.decode_source == "observed" and est.decode_step_ms == pytest.approx(9.0)
    # One step of 20 ms against 9 ms for the one token a plain step gives: no γ pays, so the advice is 0.
    assert est.num_speculative_tokens == 0 and est.best_speedup < 1
    assert "no num_speculative_tokens beats plain decoding" in live_line(est)


def test_live_c_is_of_tokens_with_the_forwards_c_beside_it():
    """A verify token = its forward + logits + rejection sampling, a draft token its forward + its parts;
    c is their medians' ratio, the outside time what no token holds, and c_forward the forwards' alone."""
    def step(target, parts, drafts, draft_parts, period):
        return StepRecord(VERIFY, 4.0, period / 1e3, target / 1e3, [d / 1e3 for d in drafts], parts / 1e3,
                          [p / 1e3 for p in draft_parts])

    records = [step(10.0, 2.0, [1.0, 1.0], [0.5, 0.5], 20.0), step(12.0, 2.0, [1.2, 1.2], [0.4, 0.4], 22.0),
               step(11.0, 3.0, [0.9], [0.7], 21.0)]
    est = estimate(records, alpha=0.3)
    assert est.verify_token_ms == pytest.approx(np.median([12.0, 14.0, 14.0]))
    assert est.draft_token_ms == pytest.approx(np.median([1.5, 1.5, 1.6, 1.6, 1.6]))
    assert est.c == pytest.approx(1.6 / 14.0) and est.c_forward == pytest.approx(1.0 / 11.0)
    assert est.outside_ms == pytest.approx(np.median([20 - 15.0, 22 - 17.2, 21 - 15.6]))
    line = live_line(est)
    assert "draft token 1.6 ms ÷ verify token 14 ms" in line and f"forwards alone {1.0 / 11.0:.3g}" in line
