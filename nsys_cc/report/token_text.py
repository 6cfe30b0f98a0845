"""The cost of a token in the text renderings and the JSON: the split table and the records
(`analysis.coefficient.token`).

The split table shows, per model in the phase c is judged on (decode, else all) and per metric, the medians of the
forward, its logits and its sampling, the token's median (the median of the per-token sums, not the sum of the three
medians), and for a draft c of the token beside c of the forward alone.
"""

from __future__ import annotations

import math

import pandas as pd

from ..analysis.coefficient.result import CostCoefficientResult
from ..analysis.coefficient.token import SPLIT, TOKEN, decision_split
from ..analysis.metrics import METRIC_NAMES, WALL
from .gpu_time_text import label
from .sentence_text import interval_text

SPLIT_TITLE = ("The token's split: forward + logits + sampling, medians per token (ms), in the phase c is judged on; "
               "Token = the median of the per-token sums")


def _num(x) -> float | None:
    return None if x is None or (isinstance(x, float) and math.isnan(x)) else float(x)


def _ms(x) -> str:
    return "–" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.3f}"


def run_values(result: CostCoefficientResult, column: str = "c") -> dict[tuple, list[float]]:
    """Per (draft, phase, metric), each run's own `column` (c, or c_forward) from `result.runs`, in run order; empty
    for one run. What a cell shows beside a pooled c that has no interval (two runs: `interval_text`)."""
    runs = result.runs
    out: dict[tuple, list[float]] = {}
    if runs.empty or column not in runs:
        return out
    for r in runs.sort_values("run")[["draft", "phase", "metric", column]].itertuples(index=False):
        out.setdefault((r[0], r[1], r[2]), []).append(float(r[3]))
    return out


def any_token(result: CostCoefficientResult) -> bool:
    """Whether some c is a token's (basis "token")."""
    coef = result.coefficients
    return "basis" in coef and bool((coef["basis"] == TOKEN).any())


def split_table(result: CostCoefficientResult) -> pd.DataFrame:
    """For people: per model (decision phase) and metric, Forward, Logits, Sampling and Token medians (ms), and for a
    draft its c of the token and c of the forward alone. Empty when no model has logits or sampling ranges."""
    tokens = result.tokens
    if tokens.empty or not (tokens["basis"] == TOKEN).any():
        return pd.DataFrame()
    coef = result.coefficients.set_index(["draft", "phase", "metric"]) if len(result.coefficients) else None
    runs_c, runs_forward = run_values(result), run_values(result, "c_forward")
    rows = []
    split = decision_split(tokens)
    if result.headline != WALL:  # on the GPU the headline first, the launch time after the GPU metrics
        order = {m: i for i, m in enumerate((result.headline, *(m for m in METRIC_NAMES if m not in (
            result.headline, WALL)), WALL))}
        models = {m: i for i, m in enumerate(dict.fromkeys(split["model"]))}
        split = split.assign(_model=split["model"].map(models), _order=split["metric"].map(order)).sort_values(
            ["_model", "_order"], kind="stable")
    for r in split.itertuples():
        row = {"Model": r.model, "Phase": r.phase, "Metric": label(r.metric, result.headline),
               **{part.capitalize() if part != "sample" else "Sampling": _ms(getattr(r, f"{part}_median_ms"))
                  for part in SPLIT},
               "Token": _ms(r.token_median_ms)}
        if r.role == "target":
            row["c token"], row["c forward"] = "1 (target)", "1 (target)"
        elif coef is not None and (r.model, r.phase, r.metric) in coef.index:
            key = (r.model, r.phase, r.metric)
            c = coef.loc[key]
            row["c token"] = (interval_text(c["c"], c["ci_low"], c["ci_high"], runs_c.get(key, ()))
                              if c["basis"] == TOKEN else "– (no parts)")
            row["c forward"] = interval_text(c["c_forward"], c["c_forward_ci_low"], c["c_forward_ci_high"],
                                             runs_forward.get(key, ()))
        else:
            row["c token"] = row["c forward"] = "–"
        rows.append(row)
    return pd.DataFrame(rows)


def coefficient_record(r) -> dict:
    """The token fields of one `coefficients` row in the JSON (beside c, its interval and the token medians)."""
    if not hasattr(r, "basis"):
        return {}
    return {"basis": r.basis, "c_forward": _num(r.c_forward),
            "c_forward_ci95": [_num(r.c_forward_ci_low), _num(r.c_forward_ci_high)],
            **{f"{side}_{part}_median_ms": _num(getattr(r, f"{side}_{part}_median_ms"))
               for side in ("draft", "target") for part in SPLIT}}


def phase_records(result: CostCoefficientResult) -> dict[tuple[str, str], dict]:
    """`models[].phases[phase].token` in the JSON, per (model, phase) with tokens: per metric the token's median and
    its split (ms). One pass over the token table (a filter of it per phase cost more than the rest of the JSON)."""
    out: dict[tuple[str, str], dict] = {}
    for r in result.tokens.itertuples():
        out.setdefault((r.model, r.phase), {})[r.metric] = {
            "token_median_ms": _num(r.token_median_ms),
            **{f"{part}_median_ms": _num(getattr(r, f"{part}_median_ms")) for part in SPLIT},
            "count": int(r.count)}
    return out
