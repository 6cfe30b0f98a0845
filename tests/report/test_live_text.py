"""`nsys_cc.report.live_text.live_line`: the one line a live server logs — c of a token and what it comes from, the
verify line, the plain decode step, and the advice on γ in each of its three cases."""

from __future__ import annotations

import dataclasses
import math

from nsys_cc.analysis.tune.live import LiveEstimate
from nsys_cc.report.live_text import live_line

EST = LiveEstimate(steps=12, draft_forward_ms=1.1, verify_forward_ms=11.0, outside_ms=5.5, c=0.125,
                   draft_token_ms=1.5, verify_token_ms=12.0, c_forward=0.1, tokens_per_seq=4.0,
                   verify_intercept_ms=5.0, verify_slope_ms=1.5, verify_fit="linear", decode_step_ms=10.0,
                   decode_source="observed", alpha=0.6, best_gamma=4, best_speedup=1.8, num_speculative_tokens=4)


def test_the_line_says_c_its_medians_the_verify_line_and_the_best_gamma():
    assert live_line(EST) == (
        "nsys_cc live: c = 0.125 (draft token 1.5 ms ÷ verify token 12 ms at 4 tokens/seq, a token = forward + "
        "logits + sampling; forwards alone 0.1: 1.1 ms ÷ 11 ms; medians of the last 12 verify steps), outside tokens "
        "5.5 ms/step; verify 5 + 1.5·n ms, plain decode step 10 ms (observed); at α = 0.6 best "
        "num_speculative_tokens = 4 (forecast speedup 1.8).")


def test_no_gamma_that_pays_and_no_forecast_yet_are_said_so():
    none_pays = dataclasses.replace(EST, num_speculative_tokens=0, best_gamma=1, best_speedup=0.7, alpha=0.0)
    assert live_line(none_pays).endswith(
        "at α = 0 no num_speculative_tokens beats plain decoding (best γ = 1: speedup 0.7).")
    unknown = dataclasses.replace(EST, num_speculative_tokens=None, verify_fit="flat", decode_step_ms=math.nan)
    line = live_line(unknown)
    assert "verify assumed flat in n, plain decode step n/a (observed)" in line
    assert line.endswith("no forecast yet (no acceptance counts).")
