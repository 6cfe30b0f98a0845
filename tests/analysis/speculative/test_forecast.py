"""The StepCostModel of `nsys_cc.analysis.speculative.forecast` (the contract's API) against hand-computed values."""

from __future__ import annotations

import math

import numpy as np
import pytest

from nsys_cc.analysis.speculative import forecast
from nsys_cc.errors import InputError

M = forecast.StepCostModel(decode_step_ms=10.0, draft_forward_ms=1.0, verify_intercept_ms=4.0, verify_slope_ms=1.0,
                           other_intercept_ms=3.0, other_slope_ms=0.5)


def test_step_and_speedup_by_hand():
    # γ = 2: 2·1 + (4 + 1·3) + (3 + 0.5·2) = 13 ms; E(0.5, 2) = 1.75
    assert M.step_ms(2) == pytest.approx(13.0)
    assert M.speedup(0.5, 2) == pytest.approx(1.75 * 10 / 13)
    assert np.allclose(M.step_ms(np.array([1, 3])), [1 + 6 + 3.5, 3 + 8 + 4.5])
    grid = M.speedup(np.array([[0.0], [1.0]]), np.array([1, 2]))
    assert grid.shape == (2, 2) and grid[1, 1] == pytest.approx(3 * 10 / 13) and grid[0, 0] == pytest.approx(10 / 10.5)


def test_expected_tokens_matches_the_closed_form():
    assert forecast.expected_tokens(0.5, 3) == pytest.approx(1 + 0.5 + 0.25 + 0.125)
    assert forecast.expected_tokens(1.0, 4) == 5


def test_best_gamma_searches_1_to_max():
    by_hand = max(range(1, 17), key=lambda g: (M.speedup(0.9, g), -g))
    assert M.best_gamma(0.9) == (by_hand, pytest.approx(M.speedup(0.9, by_hand)))
    assert M.best_gamma(0.0)[0] == 1
    with pytest.raises(InputError):
        M.best_gamma(0.5, max_gamma=0)


def test_fit_draws_lines_through_two_runs():
    m = forecast.fit(10.0, [1, 3], [1.0, 1.0], [6.0, 8.0], [3.5, 4.5])
    assert (m.verify_intercept_ms, m.verify_slope_ms) == (pytest.approx(4.0), pytest.approx(1.0))
    assert (m.other_intercept_ms, m.other_slope_ms) == (pytest.approx(3.0), pytest.approx(0.5))
    assert m.speedup(0.5, 2) == pytest.approx(M.speedup(0.5, 2))
    one = forecast.fit(10.0, [2], [1.0], [7.0], [4.0])
    assert one.verify_slope_ms == 0 and one.other_slope_ms == 0 and one.step_ms(5) == pytest.approx(5 + 7 + 4)


def test_a_step_of_no_time_has_no_forecast():
    falling = forecast.StepCostModel(10.0, 0.1, 20.0, -5.0, 1.0, 0.0)
    assert math.isnan(falling.speedup(0.5, 8)) and falling.speedup(0.5, 1) > 0


def test_fit_rejects_bad_input():
    with pytest.raises(InputError):
        forecast.fit(10.0, [], [], [], [])
    with pytest.raises(InputError):
        forecast.fit(10.0, [0], [1.0], [1.0], [1.0])


def test_a_falling_line_between_runs_is_fitted_as_a_constant():
    # Runs made under changing load can show a 4-token verify cheaper than a 2-token one. Time cannot fall with the
    # tokens verified, so the fit is the least-squares line under slope ≥ 0: the constant through the mean.
    m = forecast.fit(12.0, [1, 2, 3], [0.8, 0.7, 0.6], verify_ms=[10.0, 5.0, 4.5], other_ms=[9.0, 4.0, 5.0])
    assert m.verify_slope_ms == 0.0 and m.verify_intercept_ms == pytest.approx((10.0 + 5.0 + 4.5) / 3)
    assert m.other_slope_ms == 0.0 and m.other_intercept_ms == pytest.approx(6.0)
    # a rising line is kept as it is: through (2, 5) and (4, 9) → 1 + 2n
    r = forecast.fit(12.0, [1, 3], [0.8, 0.8], verify_ms=[5.0, 9.0], other_ms=[4.0, 4.0])
    assert (r.verify_intercept_ms, r.verify_slope_ms) == pytest.approx((1.0, 2.0))
