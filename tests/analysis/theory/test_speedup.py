"""The speedup model against the published numbers in docs/SPECDEC.md and closed-form properties."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from hypothesis import assume, given, settings, strategies as st

from nsys_cc.analysis.theory import speedup
from nsys_cc.errors import InputError
from nsys_cc.report import sentence_text

# Leviathan et al. 2023, Table 1 (c = ĉ = 0), as printed: (α, γ, operations factor, speed factor).
TABLE_1 = [
    (0.6, 2, 1.53, 1.96),
    (0.7, 3, 1.58, 2.53),
    (0.8, 2, 1.23, 2.44),
    (0.8, 5, 1.63, 3.69),
    (0.9, 2, 1.11, 2.71),
    (0.9, 10, 1.60, 6.86),
]
# Forward times in ms, measured by hand in https://github.com/vllm-project/vllm/issues/6468.
SEED_MS = {"7B": 16.607, "1.1B": 11.427, "160M": 5.635, "68M": 1.099}

alphas = st.floats(0.0, 1.0)
cs = st.floats(0.0, 2.0)
gammas = st.integers(1, 40)


@pytest.mark.parametrize("alpha, gamma, ops, speed", TABLE_1)
def test_table_1_within_rounding(alpha, gamma, ops, speed):
    assert abs(speedup.walltime_factor(alpha, gamma, 0.0) - speed) <= 0.005 + 1e-12
    assert abs(speedup.operations_factor(alpha, gamma, 0.0) - ops) <= 0.005 + 1e-12


def test_table_1_vectorised_over_the_grid():
    a, g, ops, speed = (np.array(col) for col in zip(*TABLE_1))
    np.testing.assert_allclose(speedup.walltime_factor(a, g, 0.0), speed, atol=0.005)
    np.testing.assert_allclose(speedup.operations_factor(a, g, np.zeros_like(a)), ops, atol=0.005)


def test_online_speculative_decoding_best_gamma():
    gamma, s = speedup.best_gamma(0.6, [0.01, 0.02, 0.05, 0.1], max_gamma=99)
    assert gamma.tolist() == [7, 6, 4, 3]
    # at c = 0.01, S(7) = (1 − 0.6^8)/(0.4 · 1.07) by hand
    assert s[0] == pytest.approx((1 - 0.6**8) / (0.4 * 1.07), rel=1e-12)


def test_seed_ratios_are_rounded_not_truncated():
    target = SEED_MS["7B"]
    assert [sentence_text.sig3(SEED_MS[d] / target) for d in ("1.1B", "160M", "68M")] == ["0.688", "0.339", "0.0662"]
    assert sentence_text.sig3(0.6889) == "0.689"
    assert sentence_text.sig3(0.5) == "0.500"


def test_seed_draft_loses_at_half_acceptance_and_says_so():
    c = SEED_MS["1.1B"] / SEED_MS["7B"]
    _, best = speedup.best_gamma(0.5, c)
    assert best < 1
    assert best == pytest.approx(1.5 / (1 + c))  # the best is γ = 1 (Cor. 3.9)
    j = speedup.judge(c, 0.5)
    assert sentence_text.verdict_of(j) == "slows decoding down at α = 0.50: c = 0.688 > α; needs α > 0.688"


def test_alpha_one_and_zero_limits():
    assert speedup.expected_tokens(1.0, 4) == 5.0
    assert speedup.expected_tokens(0.0, 4) == 1.0
    assert speedup.walltime_factor(1.0, 4, 0.25) == pytest.approx(5 / 2)
    gamma, s = speedup.best_gamma(1.0, 0.5, max_gamma=10)
    assert (gamma, s) == (10, pytest.approx(11 / 6))
    gamma, s = speedup.best_gamma(0.0, 0.1)
    assert (gamma, s) == (1, pytest.approx(1 / 1.1))


def test_close_to_one_is_accurate():
    a, g = 1 - 1e-12, 3
    assert speedup.expected_tokens(a, g) == pytest.approx(4.0, rel=1e-9)


def test_nan_propagates_and_bad_values_raise():
    gamma, s = speedup.best_gamma([0.5, np.nan], [np.nan, 0.1])
    assert gamma.tolist() == [0, 0] and np.isnan(s).all()
    with pytest.raises(InputError, match="α = 1.5 is outside"):
        speedup.walltime_factor(1.5, 2, 0.1)
    with pytest.raises(InputError, match="c = -0.1"):
        speedup.best_gamma(0.5, -0.1)
    with pytest.raises(InputError, match="max_gamma"):
        speedup.best_gamma(0.5, 0.1, max_gamma=0)
    with pytest.raises(InputError, match="must contain c"):
        speedup.judge(0.5, 0.7, c_low=0.6, c_high=0.7)


@given(alphas, cs)
def test_gamma_one_is_cor_3_9(alpha, c):
    assert speedup.walltime_factor(alpha, 1, c) == pytest.approx((1 + alpha) / (1 + c), rel=1e-12)


@given(alphas, cs)
def test_some_gamma_wins_exactly_when_alpha_exceeds_c(alpha, c):
    assume(abs(alpha - c) > 1e-9)
    _, best = speedup.best_gamma(alpha, c, max_gamma=30)
    assert (best > 1) == (alpha > c)


@given(st.floats(0.0, 0.999), gammas)
def test_c_to_zero_limit_is_the_geometric_sum(alpha, gamma):
    geometric = sum(alpha**i for i in range(gamma + 1))
    assert speedup.walltime_factor(alpha, gamma, 0.0) == pytest.approx(geometric, rel=1e-9)
    assert speedup.walltime_factor(alpha, gamma, 1e-12) == pytest.approx(geometric, rel=1e-9)
    assert speedup.walltime_factor(alpha, gamma, 0.0) <= 1 / (1 - alpha) + 1e-9


@given(alphas, gammas, cs)
def test_operations_factor_is_thm_3_11(alpha, gamma, c_hat):
    geometric = sum(alpha**i for i in range(gamma + 1))
    assert speedup.operations_factor(alpha, gamma, c_hat) == pytest.approx(
        (gamma * c_hat + gamma + 1) / geometric, rel=1e-9)


@settings(max_examples=60)
@given(alphas, st.floats(0.001, 1.5), st.floats(0.001, 1.5))
def test_best_gamma_is_the_brute_force_argmax_and_monotone_in_c(alpha, c1, c2):
    lo, hi = sorted((c1, c2))
    for c in (lo, hi):
        brute = [sum(alpha**i for i in range(g + 1)) / (g * c + 1) for g in range(1, 41)]
        gamma, s = speedup.best_gamma(alpha, c, max_gamma=40)
        assert s == pytest.approx(max(brute), rel=1e-9)
        assert brute[gamma - 1] == pytest.approx(max(brute), rel=1e-9)
    g_lo, s_lo = speedup.best_gamma(alpha, lo, max_gamma=40)
    g_hi, s_hi = speedup.best_gamma(alpha, hi, max_gamma=40)
    assert g_hi <= g_lo and s_hi <= s_lo + 1e-12


def test_interval_on_c_becomes_interval_on_speedup_and_gamma():
    j = speedup.judge(0.05, 0.8, gamma=3, c_low=0.03, c_high=0.08)
    s = lambda g, c: (1 - 0.8 ** (g + 1)) / (0.2 * (g * c + 1))  # noqa: E731  Thm 3.8 by hand
    assert (j.speedup_low, j.speedup, j.speedup_high) == pytest.approx((s(3, 0.08), s(3, 0.05), s(3, 0.03)))
    best = {c: max(range(1, 100), key=lambda g: s(g, c)) for c in (0.03, 0.05, 0.08)}
    assert (j.best_gamma_low, j.best_gamma, j.best_gamma_high) == (best[0.08], best[0.05], best[0.03])
    assert j.best_speedup_low == pytest.approx(s(best[0.08], 0.08))
    assert j.best_speedup_high == pytest.approx(s(best[0.03], 0.03))
    assert sentence_text.verdict_of(j).startswith(f"best γ = {best[0.05]} ({best[0.08]}–{best[0.03]}) gives ")


def _coefficients(rows):
    return pd.DataFrame(rows, columns=["draft", "phase", "metric", "c", "ci_low", "ci_high"])


def test_verdicts_prefer_decode_then_all_and_report_each_case():
    coef = _coefficients([
        ("a", "prefill", "wall", 0.2, 0.19, 0.21),
        ("a", "decode", "wall", 0.1, 0.09, 0.12),
        ("a", "all", "wall", 0.15, 0.14, 0.16),
        ("b", "all", "wall", 0.688, 0.68, 0.70),
        ("c", "decode", "wall", 1.3, 1.2, 1.4),
        ("d", "decode", "wall", float("nan"), float("nan"), float("nan")),
        ("e", "prefill", "wall", 0.2, 0.19, 0.21),
    ])
    v = speedup.verdicts(coef, [0.5, 0.8])
    assert list(v.columns) == speedup.VERDICT_COLUMNS
    v = sentence_text.with_verdicts(v)
    assert len(v) == 10
    a = v[v.draft == "a"].set_index("alpha")
    assert (a.phase == "decode").all() and (a.c == 0.1).all()
    assert a.loc[0.8, "best_gamma"] == speedup.best_gamma(0.8, 0.1)[0]
    assert a.loc[0.8, "speedup_low"] == pytest.approx(speedup.best_gamma(0.8, 0.12)[1])
    b = v[v.draft == "b"].set_index("alpha")
    assert (b.phase == "all").all()
    assert b.loc[0.5, "verdict"] == "slows decoding down at α = 0.50: c = 0.688 > α; needs α > 0.688"
    assert b.loc[0.8, "break_even_alpha"] == 0.688 and b.loc[0.8, "speedup"] > 1
    c = v[v.draft == "c"]
    assert (c.speedup < 1).all() and c.break_even_alpha.isna().all()
    assert c.verdict.str.startswith("never speeds decoding up at c = 1.30").all()
    d = v[v.draft == "d"]
    assert d.best_gamma.isna().all() and d.verdict.str.contains("no measurement of c").all()
    e = v[v.draft == "e"]
    assert e.c.isna().all() and e.verdict.str.contains("no decode or all-phase measurement").all()
    # the outcome is data: what the sentences say, as a category
    assert (a.outcome == "speeds-up").all() and b.loc[0.5, "outcome"] == "slows-down"
    assert (c.outcome == "never").all() and (d.outcome == "no-measurement").all() and (e.outcome == "no-phase").all()


def test_verdict_flags_an_interval_straddling_break_even():
    v = sentence_text.with_verdicts(
        speedup.verdicts(_coefficients([("x", "decode", "gpu_span", 0.45, 0.40, 0.55)]), [0.5]))
    text = v.verdict.iloc[0]
    assert text.startswith("best γ = 1 gives")
    assert "c's interval reaches 0.550 ≥ α" in text
    assert v.speedup_low.iloc[0] < 1 < v.speedup.iloc[0]


def test_verdicts_reject_missing_columns_and_bad_alpha():
    with pytest.raises(InputError, match="ci_high"):
        speedup.verdicts(pd.DataFrame({"draft": [], "phase": [], "metric": [], "c": [], "ci_low": []}), [0.5])
    with pytest.raises(InputError, match="outside"):
        speedup.verdicts(_coefficients([("x", "decode", "wall", 0.1, 0.1, 0.1)]), [1.2])
    assert math.isnan(speedup.judge(0.2, 0.5).c_low)


def test_judge_at_c_zero_says_the_best_gamma_is_unbounded():
    from nsys_cc.analysis.theory.speedup import judge
    from nsys_cc.report.sentence_text import verdict_of

    j = judge(0.0, 0.8, gamma=2)
    assert j.best_gamma is None and j.best_gamma_unbounded
    assert j.best_speedup == pytest.approx(5.0)  # 1/(1 − 0.8)
    assert j.speedup == pytest.approx(1 + 0.8 + 0.64)
    assert j.outcome == "unbounded" and "unbounded" in verdict_of(j)
    at_zero = judge(0.0, 0.0)
    assert not at_zero.best_gamma_unbounded and at_zero.best_gamma == 1 and at_zero.best_speedup == 1.0
    assert at_zero.outcome == "no-gain" and "S = 1 at every γ" in verdict_of(at_zero)
    at_one = judge(0.0, 1.0)
    assert at_one.best_gamma_unbounded and at_one.best_speedup == float("inf")
