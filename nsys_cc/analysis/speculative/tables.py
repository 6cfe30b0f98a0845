"""The speculative analysis as tables: the columns of its per-run table (`SPEC_COLUMNS`, flattened into
`TABLE_COLUMNS` by `flat_table`), of its figures on every metric, its decomposition, its forecast and its values per
run, the result that holds them (`SpeculativeAnalysis`, a value: tables handed out as copies), and the verdicts
table resting on the runs (`verdicts_in_place`)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ..metrics import GPU_HEADLINE as METRICS_GPU_HEADLINE, WALL
from ..result_values import Value
from . import forecast as forecast_mod

# The forecast heatmap's α grid.
ALPHA_GRID = np.round(np.linspace(0.0, 1.0, 21), 2)


# The keys of a run's row as `analyze_speculative` builds it, and of its JSON entry (`*_ci95` [low, high],
# `predicted_speedup` a dict); the table flattens them (`TABLE_COLUMNS`).
SPEC_COLUMNS = [
    "name", "draft", "gamma", "metric", "path", "step_rule", "steps", "iterations", "draft_forward_ms",
    "draft_forward_ms_ci95", "draft_forwards_per_step", "verify_ms", "verify_ms_ci95", "decode_ms", "decode_ms_ci95",
    "verify_factor",
    "verify_factor_ci95", "c_in_place", "c_in_place_ci95", "c_standalone", "c_standalone_ci95", "other_ms",
    "other_ms_ci95", "decode_other_ms", "step_ms", "step_ms_ci95", "decode_step_ms", "decode_step_ms_ci95",
    "draft_step_ms", "tokens_per_step", "tokens_per_step_metrics", "alpha", "alpha_source", "alpha_vllm",
    "measured_speedup", "measured_speedup_ci95", "bench_speedup", "bench_difference", "predicted_speedup",
    "forecast_error", "forecast_tolerance", "measurement_problem",
    # issue 29: a token's cost in place (module docstring, "Tokens in place")
    "basis", "c_in_place_forward", "c_in_place_forward_ci95", "c_in_place_decode", "c_in_place_decode_ci95",
    "draft_catchup_ms", "draft_catchup_ms_ci95", "draft_catchup_tokens", "draft_later_ms", "draft_later_ms_ci95",
    "draft_logits_ms", "draft_sample_ms", "draft_token_ms", "draft_token_ms_ci95", "verify_logits_ms",
    "verify_sample_ms", "verify_token_ms", "verify_token_ms_ci95", "decode_logits_ms", "decode_sample_ms",
    "decode_token_ms", "decode_token_ms_ci95", "propose_ms", "propose_ms_ci95", "c_propose",
]


# The predictions of a run (`predicted_speedup` of a row as built), each a column `predicted_<key>` of the table.
PREDICTIONS = ("leviathan", "cost_model", "cost_model_held_out", "leviathan_in_place")


def _flat_columns(columns: Sequence[str]) -> list[str]:
    """The table's columns from a row's keys (`SPEC_COLUMNS`): each `X_ci95` [low, high] becomes `X_ci_low`,
    `X_ci_high` (as `coefficients` has ci_low, ci_high), `predicted_speedup` one column per prediction and
    `held_out_fit_gammas` (the γ the held-out model was fitted on, comma-separated; "" when none)."""
    out: list[str] = []
    for col in columns:
        if col.endswith("_ci95"):
            out += [f"{col[:-5]}_ci_low", f"{col[:-5]}_ci_high"]
        elif col == "predicted_speedup":
            out += [f"predicted_{k}" for k in PREDICTIONS] + ["held_out_fit_gammas"]
        else:
            out.append(col)
    return out


# Columns of `SpeculativeAnalysis.table`, in order: one value per cell (numbers, text).
TABLE_COLUMNS = _flat_columns(SPEC_COLUMNS)


def flat_table(rows: Sequence[Mapping]) -> pd.DataFrame:
    """The per-run table (`TABLE_COLUMNS`) from rows keyed by `SPEC_COLUMNS` (intervals as [low, high], predictions as
    a dict), every cell a single value."""
    flat = []
    for row in rows:
        out: dict = {}
        for col, value in row.items():
            if col.endswith("_ci95"):
                lo, hi = value if value is not None and len(value) == 2 else (math.nan, math.nan)
                out[f"{col[:-5]}_ci_low"], out[f"{col[:-5]}_ci_high"] = lo, hi
            elif col == "predicted_speedup":
                out.update({f"predicted_{k}": value.get(k, math.nan) for k in PREDICTIONS})
                out["held_out_fit_gammas"] = ",".join(str(g) for g in value.get("held_out_fit_gammas", []))
            else:
                out[col] = value
        flat.append(out)
    return pd.DataFrame(flat, columns=TABLE_COLUMNS)


# The figures of a run on each metric (`SpeculativeAnalysis.by_metric`, JSON `by_metric`), each with its interval.
BY_METRIC_FIGURES = ("draft_forward_ms", "verify_ms", "decode_ms", "verify_factor", "c_in_place", "other_ms",
                     # issue 29: the token's cost in place on that metric (`token_arrays`)
                     "c_in_place_forward", "c_in_place_decode", "draft_catchup_ms", "draft_later_ms",
                     "draft_token_ms", "verify_token_ms", "decode_token_ms", "propose_ms",
                     # the token's parts (the table's on the headline only before) and the steps' times on it: on
                     # wall a step's CPU time (its launch time on a GPU trace), on a GPU metric from its start to the
                     # end of its GPU work
                     "draft_logits_ms", "draft_sample_ms", "verify_logits_ms", "verify_sample_ms", "step_ms",
                     "decode_step_ms")


# Beside them, c_standalone: the plain runs' c on that metric (decode phase), the in-place c's counterpart.
BY_METRIC_COLUMNS = ["name", "draft", "gamma", "metric",
                     *[c for f in (*BY_METRIC_FIGURES, "c_standalone") for c in (f, f"{f}_ci_low", f"{f}_ci_high")]]


# The metric whose figures head the speculative output when every run has it: the plain c's GPU headline
# (`gpu_time`: the GPU span; the module docstring says why).
GPU_HEADLINE = METRICS_GPU_HEADLINE


DECOMPOSITION_COLUMNS = ["name", "draft", "gamma", "metric", "order", "part", "factor", "before", "after"]


# The decomposition's parts in their order (`_decompose`): `part` is an ordered categorical of these, so sorting,
# grouping and pivoting keep the waterfall's order.
DECOMPOSITION_PARTS = ("tokens per step", "verify ≠ decode", "draft forwards", "outside time", "medians do not add",
                       "measured")


FORECAST_COLUMNS = ["draft", "gamma", "alpha", "alpha_source", "speedup", "best"]


# `SpeculativeAnalysis.runs`: where runs were pooled, each run's own value of each figure (BY_METRIC_FIGURES on every
# metric, measured_speedup on wall), what the pooled figure is the geometric mean of.
RUN_COLUMNS = ["name", "draft", "gamma", "metric", "figure", "run", "value"]


def ci_pair(lo: float, hi: float) -> list[float]:
    return [lo, hi]


@dataclass(frozen=True, eq=False)
class SpeculativeAnalysis(Value):
    """Everything measured and predicted about the speculative runs (each table is a DataFrame of one value per cell,
    handed out as the caller's own, `result_values.Value`).

    - `table`: one row per run (TABLE_COLUMNS: each interval as `X_ci_low`, `X_ci_high` after X; the predictions as
      `predicted_leviathan`, `predicted_cost_model`, `predicted_cost_model_held_out` and `held_out_fit_gammas`). Its
      figures — the forwards', the token's, c in place, c standalone and the prices of Thm 3.8 — are on `metric` (its
      `metric` column: the headline, gpu_span on GPU traces), and so are the steps (step_ms, decode_step_ms,
      draft_step_ms) and the measured speedup: on a GPU trace each step from its start to the end of the GPU work
      launched in it (`forwards.step_windows`; its CPU time, launch time, in `by_metric`'s wall rows). `by_metric`
      has every metric's figures.
    - `decomposition`: the waterfall factors per run and metric, in order (DECOMPOSITION_COLUMNS; `part` an ordered
      categorical of DECOMPOSITION_PARTS; see the module docstring); the waterfall draws `metric`'s.
    - `models`: the `StepCostModel` of each draft, fitted on all its runs (each step split on `metric`).
    - `forecast`: speedup at γ = 1…8 at each draft's measured α and each given α (FORECAST_COLUMNS).
    - `grid`: the forecast over γ = 1…8 × α in ALPHA_GRID for the heatmap (draft, gamma, alpha, speedup, best:
      whether that γ is the best of 1…8 at that α).
    - `best`: per draft and α, the best γ in 1…16 and its forecast speedup.
    - `steps`: every kept step of every run, plain target included (`run` column).
    - `notes`: how steps were found, what was left out, where α came from.
    - `by_metric`: one row per run and metric the traces have (BY_METRIC_COLUMNS: wall always, then gpu_span,
      kernel_sum, gpu_busy with CUDA data): draft_forward_ms, verify_ms, decode_ms, verify_factor, c_in_place,
      other_ms on that metric, each with `_ci_low`, `_ci_high`; its rows of `metric` are the table's figures.
    - `metric`: the headline metric (gpu_span when every run has it, else wall; module docstring).
    - `runs`: where the runs of a profile were pooled (`speculative.pooled`), each run's own value of every figure
      (RUN_COLUMNS: name, draft, gamma, metric, figure, run, value): each table figure is their geometric mean;
      empty for one run.
    """

    table: pd.DataFrame
    decomposition: pd.DataFrame
    models: dict[str, forecast_mod.StepCostModel]
    forecast: pd.DataFrame
    grid: pd.DataFrame
    best: pd.DataFrame
    steps: pd.DataFrame
    notes: tuple[str, ...]
    by_metric: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=BY_METRIC_COLUMNS))
    metric: str = WALL
    runs: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=RUN_COLUMNS))

    def __repr__(self) -> str:
        table = object.__getattribute__(self, "table")
        runs = ", ".join(f"{r.name} (γ {r.gamma}): {r.measured_speedup:.3g}×" for r in table.itertuples())
        return (f"<SpeculativeAnalysis of {len(table)} run(s) of {len(set(table['draft']))} draft(s), measured speedup "
                f"{runs or 'none'}; headline metric {self.metric}; tables: table, by_metric, decomposition, forecast, "
                f"grid, best, steps; models: {', '.join(self.models) or 'none'}; {len(self.notes)} note(s)>")


# The columns `verdicts_in_place` adds to the verdicts table (`speedup.VERDICT_COLUMNS`), after `outcome`.
IN_PLACE_VERDICT_COLUMNS = ["outcome_c_alone", "in_place_gammas", "measured_low", "measured_high",
                            "in_place_best_gamma", "in_place_speedup"]


def decomposition_table(rows: Sequence[Mapping]) -> pd.DataFrame:
    """The decomposition (DECOMPOSITION_COLUMNS) from `_decompose`'s rows, `part` ordered as the waterfall."""
    frame = pd.DataFrame(list(rows), columns=DECOMPOSITION_COLUMNS)
    frame["part"] = pd.Categorical(frame["part"], categories=DECOMPOSITION_PARTS, ordered=True)
    return frame


def verdicts_in_place(verdicts: pd.DataFrame, spec: SpeculativeAnalysis | None) -> pd.DataFrame:
    """The verdicts table (`speedup.verdicts`: Thm 3.8 priced with c alone) resting on the speculative runs where a
    draft has them (issue 43: one result, one answer): per row of such a draft, the γ measured in place
    (`in_place_gammas`), the lowest and highest measured speedup (`measured_low`, `measured_high`), the best γ and
    speedup at the row's α of the cost model fitted on those runs (`in_place_best_gamma`, `in_place_speedup`: what
    `speculative.best` gives), and `outcome` from that forecast ("speeds-up" above 1, else "slows-down"); the Thm 3.8
    category stays as `outcome_c_alone`. Drafts without runs keep their row (these columns NaN, `outcome_c_alone`
    = `outcome`)."""
    out = verdicts.copy()
    out["outcome_c_alone"] = out["outcome"]
    for col in IN_PLACE_VERDICT_COLUMNS[1:]:
        out[col] = pd.Series([None] * len(out), dtype=object) if col == "in_place_gammas" else math.nan
    if spec is None or spec.table.empty or out.empty:
        out["in_place_best_gamma"] = out["in_place_best_gamma"].astype("Int64")
        return out
    for i, row in out.iterrows():
        runs = spec.table[spec.table["draft"] == row["draft"]]
        model = spec.models.get(row["draft"])
        if runs.empty:
            continue
        measured = runs["measured_speedup"].to_numpy(dtype=float)
        out.at[i, "in_place_gammas"] = ",".join(str(int(g)) for g in sorted(runs["gamma"]))
        if np.isfinite(measured).any():
            out.at[i, "measured_low"], out.at[i, "measured_high"] = np.nanmin(measured), np.nanmax(measured)
        if model is not None and math.isfinite(row["alpha"]):
            g, speedup = model.best_gamma(float(row["alpha"]))
            out.at[i, "in_place_best_gamma"], out.at[i, "in_place_speedup"] = g, speedup
            if math.isfinite(speedup):
                out.at[i, "outcome"] = "speeds-up" if speedup > 1 else "slows-down"
    out["in_place_best_gamma"] = out["in_place_best_gamma"].astype("Int64")
    return out
