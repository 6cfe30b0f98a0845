"""`nsys-cc speedup`: what a cost coefficient c means at given acceptance rates (Leviathan et al. 2023, Thm 3.8)."""

from __future__ import annotations

import json
import math

import click
import pandas as pd

from ..analysis import speedup as speedup_mod
from ..analysis.acceptance import alphas_with_source
from ..errors import InputError
from ..report.tables import text_table
from ..report.words import fmt_speedup, sig3, verdict_of
from . import cli, in_flags
from .options import WholeNumber, acceptance_option, format_option, metrics_option

_JSON_KEYS = (
    "c", "c_low", "c_high", "acceptance", "gamma", "speedup", "speedup_low", "speedup_high", "best_gamma",
    "best_gamma_low", "best_gamma_high", "best_speedup", "best_speedup_low", "best_speedup_high",
    "break_even_alpha", "max_gamma", "best_gamma_unbounded", "verdict",
)


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


def _json_value(v):
    return None if isinstance(v, float) and not math.isfinite(v) else v


def _record(j: speedup_mod.Judgement) -> dict:
    rec = {"acceptance" if k == "alpha" else k: _json_value(v) for k, v in vars(j).items()}
    rec["verdict"] = verdict_of(j)
    if math.isnan(j.c_low):  # no interval: the ends computed at NaN c are not numbers
        rec.update({k: None for k in rec if k.endswith(("_low", "_high")) and k != "c_low"})
    return {k: rec[k] for k in _JSON_KEYS}


def _times(value: float, low: float | None, high: float | None) -> str:
    fmt = fmt_speedup
    return f"{fmt(value)}×" + ("" if low is None or high is None else f" ({fmt(low)}–{fmt(high)}×)")


def _table(records: list[dict], gamma: int | None) -> str:
    rows = []
    for r in records:
        row = {"α": f"{r['acceptance']:.3g}"}
        if gamma is not None:
            row[f"S at γ = {gamma}"] = _times(r["speedup"], r["speedup_low"], r["speedup_high"])
        lo, hi = r["best_gamma_low"], r["best_gamma_high"]
        if r["best_gamma_unbounded"]:
            row["best γ"] = "unbounded"
            limit = r["best_speedup"]
            row["best S"] = "unbounded" if limit is None else f"→ {fmt_speedup(limit)}× (γ → ∞)"
        else:
            row["best γ"] = str(r["best_gamma"]) + ("" if lo is None or lo == hi else f" ({lo}–{hi})")
            row["best S"] = _times(r["best_speedup"], r["best_speedup_low"], r["best_speedup_high"])
        rows.append(row)
    return text_table(pd.DataFrame(rows), right=set(rows[0]))


@cli.command("speedup")
@click.option("--c", "c", type=float, required=True,
              help="Cost coefficient c: draft forward time ÷ target forward time (decode step), ≥ 0 (0: a draft of "
                   "negligible cost; the best γ is then unbounded).")
@acceptance_option
@metrics_option
@click.option("--gamma", type=int, default=None, help="Speculative tokens γ at which to report S as well (≥ 1).")
@click.option("--max-gamma", type=WholeNumber(), default=speedup_mod.DEFAULT_MAX_GAMMA, show_default=True,
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
    alphas, note = alphas_with_source(acceptance, metrics_dump)
    if not alphas:
        raise InputError("give at least one acceptance (or metrics_dump)", param="acceptance")
    judged = [speedup_mod.judge(c, a, gamma, c_low, c_high, max_gamma) for a in alphas]
    records = [_record(j) for j in judged]
    if fmt == "json":
        click.echo(json.dumps(records[0] if len(records) == 1 else records, indent=2, ensure_ascii=False))
        return
    interval = f" (interval {sig3(c_low)}–{sig3(c_high)})" if ci else ""
    head = f"c = {sig3(c) if c else '0'}{interval}; best γ searched over 1…{max_gamma}"
    click.echo(head)
    if note:
        click.echo(in_flags(note))
    click.echo(_table(records, gamma))
    for j in judged:
        click.echo(f"α = {j.alpha:.3g}: {verdict_of(j)}")
