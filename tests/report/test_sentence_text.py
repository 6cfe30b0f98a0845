"""`nsys_cc.report.sentence_text`: the number formats every text shares — three significant digits rounded, an
interval or the runs' own values in words, α and a speedup that never reads a gain or a loss as a flat 1."""

from __future__ import annotations

import math

import pytest

from nsys_cc.report.sentence_text import alpha_text, fixed3, fmt_speedup, interval_text, sig3


@pytest.mark.parametrize("x, text", [(0.6875, "0.688"), (0.5, "0.500"), (0.066, "0.0660"), (1.234, "1.23"),
                                     (123.0, "123"), (999.6, "1.00e+03")])
def test_three_significant_digits_rounded_with_trailing_zeros(x, text):
    assert sig3(x) == text


def test_an_interval_or_the_runs_in_words_never_a_bracketed_bound():
    assert interval_text(0.25, 0.2, 0.3) == "0.250 [0.200–0.300]"
    assert interval_text(0.188, math.nan, math.nan, runs=(0.231, 0.146)) == "0.188 (runs 0.146 and 0.231)"
    assert interval_text(0.2, math.nan, math.nan, runs=(0.3, 0.1, 0.2)) == "0.200 (runs 0.100 to 0.300)"
    assert interval_text(0.2, math.nan, math.nan) == "0.200 [no interval]"
    assert interval_text(math.nan, 0.1, 0.2) == "–"
    assert interval_text(0.5, 0.25, 1.0, digits=sig3) == "0.500 [0.250–1.00]"


def test_alpha_two_decimals_when_it_has_no_more():
    assert alpha_text(0.6) == "0.60" and alpha_text(0.625) == "0.625" and alpha_text(1.0) == "1.00"


def test_a_speedup_close_to_one_keeps_the_digits_that_say_which_side():
    assert fmt_speedup(1.5) == "1.5" and fmt_speedup(1.0) == "1"
    assert fmt_speedup(0.9996) == "0.9996" and fmt_speedup(1.0004) == "1.0004"
    assert fixed3(2.0) == "2.000"
