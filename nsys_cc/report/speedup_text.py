"""What a cost coefficient c means at given acceptance rates (`analysis.theory.speedup.judge_all`), as `nsys-cc speedup`
prints it: a table with a verdict per α, or JSON. Plain rows only: no pandas is loaded for this verb.

JSON: one object per α (a single object when there is one α) with `JSON_KEYS`; `acceptance` is α; a number that is
not finite is null, and so are the ends of the intervals when c was given without one.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence

from ..analysis.theory.speedup import Judgement
from .render_formats import format_of
from .sentence_text import fmt_speedup, sig3, verdict_of
from .table_text import text_rows

FORMATS = ("table", "json")
JSON_KEYS = (
    "c", "c_low", "c_high", "acceptance", "gamma", "speedup", "speedup_low", "speedup_high", "best_gamma",
    "best_gamma_low", "best_gamma_high", "best_speedup", "best_speedup_low", "best_speedup_high",
    "break_even_alpha", "max_gamma", "best_gamma_unbounded", "verdict",
)


def _json_value(v):
    return None if isinstance(v, float) and not math.isfinite(v) else v


def judgement_record(j: Judgement) -> dict:
    """One judgement as its JSON object (`JSON_KEYS`, in that order)."""
    rec = {"acceptance" if k == "alpha" else k: _json_value(v) for k, v in vars(j).items()}
    rec["verdict"] = verdict_of(j)
    if math.isnan(j.c_low):  # no interval: the ends computed at NaN c are not numbers
        rec.update({k: None for k in rec if k.endswith(("_low", "_high")) and k != "c_low"})
    return {k: rec[k] for k in JSON_KEYS}


def _times(value: float, low: float | None, high: float | None) -> str:
    return f"{fmt_speedup(value)}×" + ("" if low is None or high is None else
                                       f" ({fmt_speedup(low)}–{fmt_speedup(high)}×)")


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
    return text_rows(rows, right=set(rows[0]))


def render_judgements(judged: Sequence[Judgement], fmt: str = "table", *, note: str | None = None) -> str:
    """`judged` (one c at several α: `judge_all`) as `fmt` (FORMATS), ending with a newline; `note`: where α came
    from, printed under the table's head line (not in JSON)."""
    fmt = format_of(fmt, FORMATS)
    records = [judgement_record(j) for j in judged]
    if fmt == "json":
        return json.dumps(records[0] if len(records) == 1 else records, indent=2, ensure_ascii=False) + "\n"
    first = judged[0]
    interval = "" if math.isnan(first.c_low) else f" (interval {sig3(first.c_low)}–{sig3(first.c_high)})"
    lines = [f"c = {sig3(first.c) if first.c else '0'}{interval}; best γ searched over 1…{first.max_gamma}"]
    if note:
        lines.append(note)
    lines.append(_table(records, first.gamma))
    lines += [f"α = {j.alpha:.3g}: {verdict_of(j)}" for j in judged]
    return "\n".join(lines) + "\n"
