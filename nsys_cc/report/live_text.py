"""The live estimate in words: the line a server logs every few seconds beside vLLM's speculative-decoding line."""

from __future__ import annotations

import math

from ..analysis.tune.live import LiveEstimate


def _ms(value: float) -> str:
    return f"{value:.3g} ms" if math.isfinite(value) else "n/a"


def live_line(est: LiveEstimate) -> str:
    """One line: c of a token with the medians it comes from, c of the forwards alone, the step's other parts, and the
    forecast's advice on γ."""
    head = (
        f"nsys_cc live: c = {est.c:.3g} (draft token {_ms(est.draft_token_ms)} ÷ verify token "
        f"{_ms(est.verify_token_ms)} at {est.tokens_per_seq:.3g} tokens/seq, a token = forward + logits + sampling; "
        f"forwards alone {est.c_forward:.3g}: {_ms(est.draft_forward_ms)} ÷ {_ms(est.verify_forward_ms)}; medians of "
        f"the last {est.steps} verify steps), outside tokens {_ms(est.outside_ms)}/step"
    )
    verify = (
        f"verify {est.verify_intercept_ms:.3g} + {est.verify_slope_ms:.3g}·n ms"
        if est.verify_fit == "linear"
        else "verify assumed flat in n"
    )
    decode = f"plain decode step {_ms(est.decode_step_ms)} ({est.decode_source})"
    if est.num_speculative_tokens is None:
        advice = "no forecast yet (no acceptance counts)"
    elif est.num_speculative_tokens == 0:
        advice = (
            f"at α = {est.alpha:.3g} no num_speculative_tokens beats plain decoding "
            f"(best γ = {est.best_gamma}: speedup {est.best_speedup:.3g})"
        )
    else:
        advice = (
            f"at α = {est.alpha:.3g} best num_speculative_tokens = {est.num_speculative_tokens} "
            f"(forecast speedup {est.best_speedup:.3g})"
        )
    return f"{head}; {verify}, {decode}; {advice}."
