"""Text renderings of a `CostCoefficientResult`: table (terminal), markdown, csv, json.

The table mirrors the seed's hand-made one (Model | Phase | Time (ms) | Cost Coefficient) and adds the GPU metrics,
each with its 95 % interval. Times are medians over the kept forwards of that phase.
"""

from __future__ import annotations

import io
import json
import math
from typing import TYPE_CHECKING

import pandas as pd

from ..analysis.stats import STAT_NAMES

if TYPE_CHECKING:
    from ..analysis.coefficient import CostCoefficientResult

FORMATS = ("table", "markdown", "csv", "json")
_JSON_METRICS = {"wall": "wall_ms", "gpu_span": "gpu_span_ms", "kernel_sum": "kernel_sum_ms", "gpu_busy": "gpu_busy_ms"}
_LABELS = {"wall": "Wall", "gpu_span": "GPU span", "kernel_sum": "Kernel sum", "gpu_busy": "GPU busy"}


def _num(x: float) -> float | None:
    return None if x is None or (isinstance(x, float) and math.isnan(x)) else float(x)


def result_to_dict(result: "CostCoefficientResult") -> dict:
    """The documented JSON shape: models (with per-phase statistics) and coefficients, plus notes and diagnosis."""
    models = []
    for m in result.models:
        phases = {}
        for phase in m.phases:
            sub = result.summary[(result.summary["model"] == m.name) & (result.summary["phase"] == phase)]
            entry: dict = {"count": int(len(m.phase_rows(phase)))}
            for metric, key in _JSON_METRICS.items():
                row = sub[sub["metric"] == metric]
                entry[key] = None if row.empty else {s: _num(row.iloc[0][f"{s}_ms"]) for s in STAT_NAMES}
            for metric in ("launch_api", "gpu_idle"):
                row = sub[sub["metric"] == metric]
                entry[f"{metric}_ms"] = None if row.empty else {s: _num(row.iloc[0][f"{s}_ms"]) for s in STAT_NAMES}
            phases[phase] = entry
        models.append({
            "name": m.name, "role": m.role, "path": m.path, "nsys_version": m.nsys_version, "has_cuda": m.has_cuda,
            "ranges_matched": int(len(m.forwards)), "ranges_kept": int(m.forwards["kept"].sum()),
            "warmup": m.warmup_note, "phase_rule": m.phase_rule.rule, "phase_rule_detail": m.phase_rule.detail,
            "phase_confidence": m.phase_rule.confidence, "phases": phases,
        })
    coefficients = [
        {"draft": r.draft, "phase": r.phase, "metric": r.metric, "c": _num(r.c),
         "ci95": [_num(r.ci_low), _num(r.ci_high)], "draft_median_ms": _num(r.draft_median_ms),
         "target_median_ms": _num(r.target_median_ms)}
        for r in result.coefficients.itertuples()
    ]
    out = {
        "range": result.range_name, "seed": result.seed, "models": models, "coefficients": coefficients,
        "diagnosis": result.diagnosis.to_dict(orient="records"), "notes": list(result.notes),
    }
    if result.verdicts is not None:
        out["speedup"] = json.loads(result.verdicts.to_json(orient="records"))
    return out


def _fmt_c(c: float, lo: float, hi: float) -> str:
    if c is None or math.isnan(c):
        return "–"
    return f"{c:.3f} [{lo:.3f}–{hi:.3f}]"


def display_table(result: "CostCoefficientResult") -> pd.DataFrame:
    """One row per model and phase: count, median time per metric (ms) and c with its interval per metric."""
    metrics = [m for m in _JSON_METRICS if m in set(result.summary["metric"])]
    rows = []
    for m in result.models:
        for phase in m.phases:
            row = {"Model": m.name, "Role": m.role, "Phase": phase, "N": len(m.phase_rows(phase))}
            for metric in metrics:
                s = result.summary[(result.summary["model"] == m.name) & (result.summary["phase"] == phase)
                                   & (result.summary["metric"] == metric)]
                row[f"{_LABELS[metric]} (ms)"] = "–" if s.empty else f"{s.iloc[0]['median_ms']:.3f}"
                if m.role == "target":
                    row[f"c {_LABELS[metric]}"] = "1 (target)"
                else:
                    c = result.coefficients[(result.coefficients["draft"] == m.name)
                                            & (result.coefficients["phase"] == phase)
                                            & (result.coefficients["metric"] == metric)]
                    row[f"c {_LABELS[metric]}"] = "–" if c.empty else _fmt_c(*c.iloc[0][["c", "ci_low", "ci_high"]])
            rows.append(row)
    return pd.DataFrame(rows)


def _text_table(df: pd.DataFrame) -> str:
    cols = list(df.columns)
    cells = [[str(v) for v in row] for row in df.itertuples(index=False)]
    widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(cols)]
    line = "  ".join(c.ljust(w) for c, w in zip(cols, widths)).rstrip()
    rule = "  ".join("-" * w for w in widths)
    body = ["  ".join(v.ljust(w) for v, w in zip(r, widths)).rstrip() for r in cells]
    return "\n".join([line, rule, *body])


def _markdown_table(df: pd.DataFrame) -> str:
    cols = list(df.columns)
    lines = ["| " + " | ".join(cols) + " |", "|" + "|".join("---" for _ in cols) + "|"]
    lines += ["| " + " | ".join(str(v) for v in row) + " |" for row in df.itertuples(index=False)]
    return "\n".join(lines)


def _long_csv(result: "CostCoefficientResult") -> str:
    coef = result.coefficients.rename(columns={"draft": "model"})
    coef = coef[["model", "phase", "metric", "c", "ci_low", "ci_high"]]
    table = result.summary.merge(coef, on=["model", "phase", "metric"], how="left")
    buf = io.StringIO()
    table.to_csv(buf, index=False)
    return buf.getvalue()


def _verdict_lines(result: "CostCoefficientResult") -> list[str]:
    """Speedup verdicts on wall time and, for GPU traces, GPU span (all metrics are in the JSON and CSV)."""
    v = result.verdicts
    if v is None:
        return []
    v = v[v["metric"].isin(("wall", "gpu_span"))]
    return [f"{r.draft} ({r.metric} c, {r.phase}): {r.verdict}" for r in v.itertuples()]


def render(result: "CostCoefficientResult", fmt: str = "table") -> str:
    """The result as text in `fmt` (table | markdown | csv | json)."""
    if fmt == "json":
        return json.dumps(result_to_dict(result), indent=2, ensure_ascii=False)
    if fmt == "csv":
        return _long_csv(result)
    table = display_table(result)
    if fmt == "markdown":
        parts = [_markdown_table(table)]
        parts += ["", "**Diagnosis**", ""]
        parts += [f"- {r.draft} ({r.phase}): {r.diagnosis}" for r in result.diagnosis.itertuples()]
        if result.verdicts is not None:
            parts += ["", "**Speedup**", ""] + [f"- {line}" for line in _verdict_lines(result)]
        parts += ["", "**Notes**", ""] + [f"- {n}" for n in result.notes]
        return "\n".join(parts) + "\n"
    parts = [f"Forward range: {result.range_name!r}; c = median(draft) / median(target), 95 % bootstrap interval", "",
             _text_table(table), ""]
    parts += [f"* {r.draft} ({r.phase}): {r.diagnosis}" for r in result.diagnosis.itertuples()]
    if result.verdicts is not None:
        parts += [""] + [f"* {line}" for line in _verdict_lines(result)]
    parts += [""] + [f"note: {n}" for n in result.notes]
    return "\n".join(parts) + "\n"
