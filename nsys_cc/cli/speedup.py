"""`nsys-cc speedup`: what a cost coefficient c means at given acceptance rates (Leviathan et al. 2023, Thm 3.8)."""

from __future__ import annotations

import math

import click

from ..errors import InputError
from .flags import in_flags
from .options import WholeNumber, acceptance_option, format_option, metrics_option

# analysis.theory.speedup.DEFAULT_MAX_GAMMA, which a test keeps equal (the verb's help loads no numpy)
DEFAULT_MAX_GAMMA = 99


def _interval(text: str | None, c: float) -> tuple[float, float]:
    if text is None:
        return math.nan, math.nan
    try:
        low, high = (float(part) for part in text.split(","))
    except ValueError:
        raise InputError(f"--ci must be LOW,HIGH (two numbers), not {text!r}") from None
    if not (0 <= low <= c <= high and math.isfinite(high) and (low > 0 or c == 0)):
        raise InputError(f"--ci {text} must satisfy 0 < LOW ≤ c = {c:g} ≤ HIGH (LOW = 0 only with c = 0)")
    return low, high


@click.command("speedup")
@click.option("--c", "c", type=float, required=True,
              help="Cost coefficient c: a draft token's cost ÷ the target's (forward + logits + sampling, decode "
                   "step: the c that `analyze` reports; its c_forward is the forwards' alone), ≥ 0 (0: a draft of "
                   "negligible cost; the best γ is then unbounded).")
@acceptance_option
@metrics_option
@click.option("--gamma", type=int, default=None, help="Speculative tokens γ at which to report S as well (≥ 1).")
@click.option("--max-gamma", type=WholeNumber(), default=DEFAULT_MAX_GAMMA, show_default=True,
              help="Largest γ searched for the best γ.")
@click.option("--ci", "ci", default=None, metavar="LOW,HIGH",
              help="An interval on c; it is carried to the speedup and the best γ.")
@format_option(("table", "json"))
def speedup(c, acceptance, metrics_dump, gamma, max_gamma, ci, fmt):
    """Expected speedup of speculative decoding (Leviathan et al. 2023, Thm 3.8) for a draft of cost coefficient c.

    S(α, γ, c) = (1 − α^(γ+1)) / ((1 − α)(γc + 1)); the best γ maximises S over 1…max-gamma; some γ gives
    S > 1 exactly when α > c (Cor. 3.9).
    """
    if not (math.isfinite(c) and c >= 0):
        raise InputError(f"--c must be a number ≥ 0, not {c:g}")
    if gamma is not None and gamma < 1:
        raise InputError(f"--gamma must be ≥ 1, not {gamma}")
    if max_gamma < 1:
        raise InputError(f"--max-gamma must be ≥ 1, not {max_gamma}")
    c_low, c_high = _interval(ci, c)
    from ..analysis.profile_dir.acceptance import alphas_with_source
    from ..analysis.theory.speedup import judge_all
    from ..report.speedup_text import render_judgements

    alphas, note = alphas_with_source(acceptance, metrics_dump)
    if not alphas:
        raise InputError("give at least one acceptance (or metrics_dump)", param="acceptance")
    judged = judge_all(c, alphas, gamma, c_low, c_high, max_gamma)
    click.echo(render_judgements(judged, fmt, note=in_flags(note) if note else None), nl=False)
