"""Words and serialisation of the speculative analysis (`analysis.speculative`): JSON entries, the text section.

JSON (`to_json`): `"speculative"`, one entry per run (draft, γ) with every column of `SPEC_COLUMNS` (times are medians
in ms on the entry's `metric`, `*_ci95` their 95 % intervals, `predicted_speedup` {leviathan, cost_model,
cost_model_held_out, leviathan_in_place, held_out_fit_gammas}) and `by_metric`: {METRIC: {each of `BY_METRIC_FIGURES`
and c_standalone, each with its `_ci95`}} for every metric the traces have (wall always; gpu_span, kernel_sum,
gpu_busy with CUDA data); `"speculative_metric"`: the headline metric, on which every entry's own figures are (its
`metric`: gpu_span on GPU traces, else wall; null without speculative runs) — c_in_place, c_standalone and the token's
parts included (one answer); `"forecast"`: {draft, gamma, alpha, alpha_source, speedup, best} for
γ = 1…8, and `"speculative_best"`: per draft and α the best γ in 1…16; `"speculative_runs"`: where runs were pooled,
each run's own value of each figure (`SpeculativeAnalysis.runs`: what the entries' figures are the geometric mean of;
empty for one run). NaN becomes null.

The printed sections say the metric they use: the runs table shows each run on the headline metric, then on wall —
named "launch time" on a GPU trace (`gpu_time_text.words`), "wall" on a CPU one.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import pandas as pd

from ..analysis.metrics import WALL
from ..analysis.speculative.tables import BY_METRIC_COLUMNS, PREDICTIONS, SPEC_COLUMNS
from .gpu_time_text import words
from .sentence_text import fmt_speedup, interval_text, sig3

if TYPE_CHECKING:
    from ..analysis.speculative.tables import SpeculativeAnalysis


def _clean(v):
    if isinstance(v, float):
        return None if math.isnan(v) else v
    if isinstance(v, dict):
        return {k: _clean(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_clean(x) for x in v]
    if hasattr(v, "item"):  # numpy scalars
        return _clean(v.item())
    return v


def _records(df: pd.DataFrame) -> list[dict]:
    return [_clean(dict(zip(df.columns, row))) for row in df.itertuples(index=False)]


def _gammas(text: str) -> list[int]:
    return [int(g) for g in str(text).split(",") if g.strip()]


def metric_entries(by_metric: pd.DataFrame, name: str) -> dict[str, dict]:
    """A run's `by_metric` JSON object: per metric, its figures with intervals as `*_ci95` [low, high]."""
    figures = [c for c in BY_METRIC_COLUMNS[4:] if not c.endswith(("_ci_low", "_ci_high"))]
    out: dict[str, dict] = {}
    for row in _records(by_metric[by_metric["name"] == name]):
        out[row["metric"]] = {k: v for f in figures
                              for k, v in ((f, row[f]), (f"{f}_ci95", [row[f"{f}_ci_low"], row[f"{f}_ci_high"]]))}
    return out


def run_entries(table: pd.DataFrame, by_metric: pd.DataFrame | None = None) -> list[dict]:
    """The JSON entries of the runs (`SPEC_COLUMNS`: intervals as `*_ci95` [low, high], the predictions as one
    `predicted_speedup` object) from the flat table (`TABLE_COLUMNS`), each with its `by_metric` object when
    `by_metric` (`SpeculativeAnalysis.by_metric`) is given."""
    out = []
    for row in _records(table):
        entry: dict = {}
        for col in SPEC_COLUMNS:
            if col.endswith("_ci95"):
                entry[col] = [row.get(f"{col[:-5]}_ci_low"), row.get(f"{col[:-5]}_ci_high")]
            elif col == "predicted_speedup":
                entry[col] = {**{k: row.get(f"predicted_{k}") for k in PREDICTIONS},
                              "held_out_fit_gammas": _gammas(row.get("held_out_fit_gammas") or "")}
            else:
                entry[col] = row.get(col)
        if by_metric is not None:
            entry["by_metric"] = metric_entries(by_metric, row["name"])
        out.append(entry)
    return out


def to_json(spec: SpeculativeAnalysis | None) -> dict:
    """The top-level `speculative`, `forecast` and `speculative_best` lists (empty without speculative runs)."""
    if spec is None:
        return {"speculative": [], "speculative_metric": None, "speculative_runs": [], "forecast": [],
                "speculative_best": []}
    return {"speculative": run_entries(spec.table, spec.by_metric), "speculative_metric": spec.metric,
            "speculative_runs": _records(spec.runs), "forecast": _records(spec.forecast),
            "speculative_best": _records(spec.best)}


def _ci(value: float, lo: float, hi: float, digits=sig3, runs=()) -> str:
    """A figure with its interval; without one, its runs' values where it pools two or more (`interval_text`)."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    if (lo is None or (isinstance(lo, float) and math.isnan(lo))) and len(runs) < 2:
        return digits(value)
    return interval_text(value, lo, hi, runs, digits)


def run_values(spec: SpeculativeAnalysis) -> dict[tuple[str, str, str], list[float]]:
    """(run name, metric, figure) → each pooled run's own value (`SpeculativeAnalysis.runs`), in run order."""
    out: dict[tuple[str, str, str], list[float]] = {}
    runs = getattr(spec, "runs", None)
    if runs is None or runs.empty:
        return out
    for r in runs.sort_values("run").itertuples(index=False):
        out.setdefault((r.name, r.metric, r.figure), []).append(float(r.value))
    return out


def _x(v: float) -> str:
    return "–" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{fmt_speedup(v)}×"


def shown_metrics(spec: SpeculativeAnalysis) -> list[str]:
    """The metrics the printed runs table shows: the headline metric, then wall beside it (wall alone on CPU)."""
    return [spec.metric] + ([WALL] if spec.metric != WALL else [])


def measured_table(spec: SpeculativeAnalysis) -> pd.DataFrame:
    """One row per run and shown metric (`shown_metrics`: the headline first): the in-place figures on that metric
    (medians, ms, with 95 % intervals; Outside = the step's time not covered by the forwards on that metric)."""
    by_metric = {(r["name"], r["metric"]): r for r in spec.by_metric.to_dict(orient="records")}
    per_run = run_values(spec)
    rows = []
    for t in spec.table.to_dict(orient="records"):
        for metric in shown_metrics(spec):
            r = by_metric.get((t["name"], metric))
            if r is None:
                continue

            def ci(col: str, r: dict = r, metric: str = metric) -> str:
                return _ci(r[col], r[f"{col}_ci_low"], r[f"{col}_ci_high"],
                           runs=per_run.get((r["name"], metric, col), ()))

            rows.append({
                "Run": t["name"], "γ": t["gamma"], "Metric": words(metric, spec.metric), "Steps": t["steps"],
                "Draft fwd (ms)": ci("draft_forward_ms"), "Verify (ms)": ci("verify_ms"),
                "Decode (ms)": ci("decode_ms"), "Verify factor": ci("verify_factor"), "c in place": ci("c_in_place"),
                "c standalone": ci("c_standalone"), "Outside (ms)": ci("other_ms"),
                "Tokens/step": sig3(t["tokens_per_step"]),
                "α": "–" if math.isnan(t["alpha"]) else f"{t['alpha']:.3g}",
            })
    return pd.DataFrame(rows)


def token_table(spec: SpeculativeAnalysis) -> pd.DataFrame:
    """One row per run and shown metric: what a drafted token and a verify token cost in place, the draft's
    catch-up forward (over the tokens just verified; its payload in brackets) apart from its later forwards, the
    draft's and the verify's logits and sampling on each row's metric (what its token sums hold: on a GPU trace the
    headline row's are their GPU span — a blocking copy of the sampled tokens waits for the GPU on the CPU, not on
    the GPU — the launch time row's their CPU time), the token sums, the c of a token in place against the verify
    and against a plain decode token (a head's c), the forwards' c beside it, and a model-free proposer's proposing
    per step."""
    by_metric = {(r["name"], r["metric"]): r for r in spec.by_metric.to_dict(orient="records")}
    per_run = run_values(spec)
    rows = []
    for t in spec.table.to_dict(orient="records"):
        for metric in shown_metrics(spec):
            r = by_metric.get((t["name"], metric))
            if r is None or "draft_token_ms" not in r:
                continue

            def ci(col: str, r: dict = r, metric: str = metric) -> str:
                return _ci(r[col], r[f"{col}_ci_low"], r[f"{col}_ci_high"],
                           runs=per_run.get((r["name"], metric, col), ()))

            catchup = ci("draft_catchup_ms")
            if catchup != "–" and not _missing(t["draft_catchup_tokens"]):
                catchup += f" ({t['draft_catchup_tokens']:.0f} tok)"
            rows.append({
                "Run": t["name"], "γ": t["gamma"], "Metric": words(metric, spec.metric), "Basis": t["basis"],
                "Catch-up fwd (ms)": catchup, "Later fwd (ms)": ci("draft_later_ms"),
                "Draft logits": part(r, "draft_logits_ms"), "Draft sample": part(r, "draft_sample_ms"),
                "Draft token (ms)": ci("draft_token_ms"), "Verify logits": part(r, "verify_logits_ms"),
                "Verify sample": part(r, "verify_sample_ms"), "Verify token (ms)": ci("verify_token_ms"),
                "Decode token (ms)": ci("decode_token_ms"), "c in place": ci("c_in_place"),
                "c vs decode token": ci("c_in_place_decode"), "c forwards": ci("c_in_place_forward"),
                "Propose (ms)": ci("propose_ms"),
            })
    return pd.DataFrame(rows)


def _missing(v) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v))


def part(row: dict, column: str) -> str:
    """A token part's median (ms) in a `by_metric` row, "–" where the traces have no range of it."""
    return "–" if _missing(row.get(column)) else sig3(row[column])


def speedup_table(spec: SpeculativeAnalysis) -> pd.DataFrame:
    """One row per run: measured speedup against the predictions, side by side."""
    rows = []
    per_run = run_values(spec)
    for r in spec.table.itertuples(index=False):
        held = r.predicted_cost_model_held_out
        measured = _x(r.measured_speedup)
        if measured != "–":
            measured = interval_text(r.measured_speedup, r.measured_speedup_ci_low, r.measured_speedup_ci_high,
                                     per_run.get((r.name, spec.metric, "measured_speedup"), ()), fmt_speedup)
            measured = measured.replace(" ", "× ", 1) if " " in measured else measured + "×"
        rows.append({
            "Run": r.name, "γ": r.gamma, "α": "–" if math.isnan(r.alpha) else f"{r.alpha:.3g}",
            "Measured": measured
                        + (" (impossible: a measurement problem, see the notes)" if r.measurement_problem else ""),
            "vLLM latency": _x(r.bench_speedup), "Thm 3.8": _x(r.predicted_leviathan),
            "Thm 3.8 in place": _x(r.predicted_leviathan_in_place),
            "Cost model (fit)": _x(r.predicted_cost_model),
            "Forecast (held out)": "–" if math.isnan(held) else f"{_x(held)} (fit γ {r.held_out_fit_gammas})",
        })
    return pd.DataFrame(rows)


def forecast_lines(spec: SpeculativeAnalysis) -> list[str]:
    """Per draft: the fitted model in words (on which metric), and the best γ at each α."""
    out = []
    on = "" if spec.metric == WALL else f" on {spec.metric}"
    for draft, m in spec.models.items():
        out.append(f"{draft}: step(γ) = γ × {m.draft_forward_ms:.3g} ms (draft{on}) + verify{on} "
                   f"{m.verify_intercept_ms:.3g} + {m.verify_slope_ms:.3g} × (γ+1) ms + outside "
                   f"{m.other_intercept_ms:.3g} + {m.other_slope_ms:.3g} × γ ms (step − forwards{on}), against "
                   f"a plain decode step of {m.decode_step_ms:.3g} ms ({step_words(spec)})")
        for b in spec.best[spec.best["draft"] == draft].itertuples(index=False):
            out.append(f"{draft} at α = {b.alpha:.3g} ({b.alpha_source}): best γ = {b.best_gamma} of 1…{b.max_gamma} "
                       f"gives {_x(b.speedup)}")
    return out


def check_lines(spec: SpeculativeAnalysis) -> list[str]:
    """Forecast against measurement for each run the held-out model did not see."""
    out = []
    for r in spec.table.itertuples(index=False):
        if r.forecast_error is None or math.isnan(r.forecast_error):
            continue
        tol = r.forecast_tolerance
        if tol is None or (isinstance(tol, float) and math.isnan(tol)):
            against = "the runs' own spread unknown"
        else:
            against = f"{'within' if abs(r.forecast_error) <= tol else 'outside'} the runs' own ±{tol:.1%}"
        out.append(f"{r.name}: forecast from γ {r.held_out_fit_gammas} "
                   f"{_x(r.predicted_cost_model_held_out)} vs measured {_x(r.measured_speedup)} "
                   f"({r.forecast_error:+.1%}; {against})")
    return out


HEADER = ("Speculative decoding measured in place (medians with 95 % intervals — runs pooled by the geometric mean of "
          "each run's figure, their values beside it where two runs give no interval; speedup = plain decode time per "
          "output token ÷ speculative time per output token, prefill excluded)")


def step_words(spec: SpeculativeAnalysis) -> str:
    """What a step's time is: on a GPU trace from the step's start to the end of the GPU work launched in it (the time
    the user waits for; its CPU time is its launch time, `steps.step_time_column`); on a CPU trace simply "wall"."""
    return WALL if spec.metric == WALL else "each step from its start to the end of its GPU work"


def titles(spec: SpeculativeAnalysis) -> dict[str, str]:
    """The sections' titles, each saying the metric it uses (`sections`)."""
    if spec.metric == WALL:
        runs = "Speculative runs (on wall: the forward ranges' time)"
        split = "wall step times, split on wall"
    else:
        others = sorted(set(spec.by_metric["metric"]) - {spec.metric, WALL})
        runs = (f"Speculative runs (on {spec.metric}: the forwards' GPU time, headline; then launch time: the "
                "forward ranges' CPU time, the time to launch their work"
                + (f"; {', '.join(others)} in the JSON's by_metric" if others else "") + ")")
        split = f"step times ({step_words(spec)}), split on {spec.metric}"
    tokens = (f"Tokens in place (per drafted token and per verify, on {spec.metric}"
              + (", then launch time" if spec.metric != WALL else "")
              + "; c in place = draft token ÷ verify token, c vs decode token = draft token ÷ the plain target's "
              "decode token: a head's c, what Thm 3.8 in place is "
              "priced with; c forwards = the forwards alone)")
    return {"runs": runs, "tokens": tokens,
            "speedup": "Speedup: measured vs predicted (measured on "
                       + ("wall step times" if spec.metric == WALL else f"the step times: {step_words(spec)}")
                       + f"; Thm 3.8 with c standalone on {spec.metric}, Thm 3.8 in place with c vs decode token and "
                       "the proposing in place)",
            "check": f"Forecast check (runs the model was not fitted on; {split})",
            "forecast": f"Forecast (cost model fitted on all runs of each draft: {split})"}


def sections(spec: SpeculativeAnalysis) -> list[tuple[str, pd.DataFrame | list[str]]]:
    """The speculative part of a report as (title, table or lines), in order; each title says its metric."""
    title = titles(spec)
    return [
        (title["runs"], measured_table(spec)),
        (title["tokens"], token_table(spec)),
        (title["speedup"], speedup_table(spec)),
        (title["check"], check_lines(spec)),
        (title["forecast"], forecast_lines(spec)),
        ("Notes on the speculative runs", list(dict.fromkeys(spec.notes))),
    ]
