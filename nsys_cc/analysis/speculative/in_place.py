"""Speculative decoding measured where it happens: the speculative runs against the plain target run, the speedup
they gave, where it went, and a forecast at other γ and α.

A trace is speculative when it holds draft-model forward ranges: `draft_model_executable()` (nsys_cc's vLLM plugin)
or `gpu_model_runner: draft` (vLLM's own scopes, `VLLM_NVTX_SCOPES_FOR_PROFILING=1`, one range around all of a
step's draft forwards). Each run's engine steps, and the plain target run's, come from `steps` (step rules, warm-up
and phases there); its target forwards are prefill, verify (1 < tokens ≤ γ + 1 per sequence) or decode (one token),
and the steps take the kind of their target forward.

Per verify step: verify = the target forward's wall time; draft = the sum of its draft forwards; other = step −
verify − draft (scheduling, sampling, rejection, bookkeeping: everything outside a forward). In the plain target
run a decode step is its 1-token forward plus its own outside time.

Numbers of one speculative run (draft D, γ), each a median with a 95 % bootstrap interval (`stats`):
- draft_forward_ms: one draft forward inside the verify steps; verify_ms; decode_ms: the plain run's 1-token decode
  forward; verify_factor = verify ÷ decode; c_in_place = draft forward ÷ verify forward; c_standalone: the c of
  the plain runs (decode phase, wall) for comparison; other_ms: time outside forwards per verify step;
  step_ms: a verify step; decode_step_ms: a plain decode step.
- tokens_per_step: output tokens per sequence per verify step, (output_len − 1) ÷ the mean number of verify steps
  per measured iteration (the prefill step gives the first token; the mean, as the benchmark's time is the sum of
  its iterations' steps), from the trace; the metrics dump's 1 + accepted ÷ drafts beside it.
- alpha: the i.i.d. estimate (`acceptance.AcceptanceStats.alpha_iid`) from the run's vLLM metrics dump; without a
  dump, the α whose E(α, γ) equals the measured tokens per step (`alpha_source` says which).
- measured_speedup = plain decode time per output token ÷ speculative time per output token
  = tokens_per_step × median(plain decode step) ÷ median(verify step); prefill steps excluded. Cross-checked with
  vLLM's latencies (`X.bench.json`, `latencies`): (L_plain − P_plain) ÷ (L_spec − P_spec), L the mean iteration
  latency (vLLM's "Avg latency"), P the median prefill step of that trace (decode time only; both runs produce the
  same tokens).
- measurement_problem: why the measured speedup cannot be (above 1 at α = 0, above the tokens per step:
  `plausibility`), also in the notes; empty when it can.
- predicted_speedup: `leviathan` = Thm 3.8, E(α, γ) ÷ (γ c_standalone + 1); `cost_model` = the `StepCostModel`
  fitted on every speculative run of this draft (in-sample); `cost_model_held_out` = the same fitted on the other
  runs of this draft only (needs two or more other γ), a real forecast of this run.

On every metric (`by_metric`): the same figures for each metric the traces have (`metrics`: wall always; gpu_span,
kernel_sum and gpu_busy with CUDA data, `steps.STEP_METRICS`). A forward's time on metric M is its value of M (as in
the standalone table, `coefficient`); per verify step, verify = the target forward's M, draft = the sum of its draft
forwards' M, other = step − verify − draft with the step's time on M: on wall its CPU time, on a GPU metric from its
start to the end of the GPU work launched in it (`forwards.step_windows`: what the user waits for; on gpu_busy, other
is the time of the step the forwards' GPU work leaves idle: the CPU overhead the GPU does not hide). Then, as above:
draft_forward_ms (one draft forward's M inside the verify steps), verify_ms, decode_ms (the plain run's 1-token
forward's M), verify_factor = verify ÷ decode, c_in_place = draft forward ÷ verify forward, other_ms; each a median
with its 95 % interval. On wall these are the figures above, other_ms included. On a GPU a forward range times the CPU
work of queuing its launches, so its wall figures say little of the GPU's: the GPU metrics say what the forwards cost
there. The headline metric (`SpeculativeAnalysis.metric`) is the plain c's GPU headline, gpu_span, when every run
has it (`gpu_time`: the GPU's time from the first op of a forward's work to the end of its last, idle gaps between
slow launches included: what the step waits for on the GPU; issue 42 — gpu_busy until then), else wall; the
decomposition, the step cost model and its forecast split each step on it, and the steps themselves (verify step,
plain decode step, the measured speedup) are the steps' times on it: on a GPU trace each from its start to the end of
its GPU work, the CPU time (launch time) beside in `by_metric`'s wall rows (step_ms, decode_step_ms).

Tokens in place (issue 29): c prices what a model does to produce a token — its forward, its logits, its sampling
(`steps.STEP_PARTS`: the plugin's `nsys_cc:logits`/`nsys_cc:sample` and `nsys_cc:draft_logits`/`nsys_cc:draft_sample`,
vLLM's postprocess/sample scopes for the target in a scopes trace). Per verify step, on each metric:
- draft token = (the step's draft forwards + their logits + their sampling) ÷ γ: what one drafted token costs, the
  catch-up forward included; verify token = the verify forward + its logits (over its γ + 1 positions) + the
  rejection sampling; a plain decode token = the plain run's decode forward + its logits + its sampling;
- c_in_place = median(draft token) ÷ median(verify token), c_in_place_forward the forwards' ratio as before (per draft
  forward ÷ verify forward); c_in_place_decode = median(draft token) ÷ median(plain decode token): the c of a head
  (EAGLE, EAGLE-3, MTP: a drafter with no standalone run, measured against the target's decode token), and the c of
  any draft as it costs inside the speculative steps;
- draft_catchup_ms: the step's first draft forward, over the tokens just verified (payload `draft_catchup_tokens`),
  where the later forwards have ranges of their own; draft_later_ms: one of the γ − 1 later forwards; a range that
  holds several forwards (a fused multi-step graph: γ − 1; one range for the whole step: γ) is divided by the forwards
  it holds (`steps.forwards_held`); draft_logits_ms, draft_sample_ms per drafted token; verify_/decode_logits_ms and
  _sample_ms per step;
- propose_ms: a model-free proposer's proposing per step (`nsys_cc:propose`: CPU time outside any forward);
  c_propose = propose_ms ÷ the plain decode token;
- `basis` "token" when the plain and the speculative run both have the target's logits or sampling ranges, else
  "forward" (an older trace, a range of the user's own): every token figure is then the forwards' alone, and a note
  says so.
Which c prices what: `leviathan` is Thm 3.8 with c standalone (the draft's own run: on a GPU, CUDA graphs);
`leviathan_in_place` = E(α, γ) ÷ (γ c_in_place_decode + 1 + c_propose), Thm 3.8 with what the draft (or proposer) costs
inside the speculative steps (on a GPU, vLLM's V2 runs a standalone draft's speculator eagerly: a note says when its
in-place cost exceeds the standalone c by IN_PLACE_GAP, on the standalone c's basis: `StandaloneC`). A proposer without
a model has c = 0, priced with its proposing. The cost model and the decomposition split steps into forwards and outside
time as before.

Decomposition (`decomposition`), multiplicative, from the ideal to the measured speedup. With D the plain decode
step, F its forward, V the verify forward, R the step's draft time, O the step's outside time (medians), τ tokens
per step and T the median verify step:
  ideal (tokens per step)   τ                               (a speculative step costing one plain decode step)
  × verify ≠ decode         D ÷ (D + V − F)                 (the verify forward costs V, not F)
  × draft forwards          (D + V − F) ÷ (D + V − F + R)   (the drafts cost R)
  × outside time            (D + V − F + R) ÷ (V + R + O)   (the step's outside time is O, not the plain step's D − F)
  × medians do not add      (V + R + O) ÷ T                 (medians of the parts against the median of the whole)
  = measured                τ × D ÷ T
Each factor is evaluated after the ones above it (the order is the one listed); their product is the measured
speedup exactly. It is given on every metric (`metric` column: F, V, R and O on that metric, D and T the steps' times
on the headline metric, the measured speedup's).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ...errors import InputError
from ..forwards.steps import CONTEXT, StepTable, metric_columns, part_columns, step_time_column
from ..metrics import DECODE, LAUNCH_TIME, PREFILL, VERIFY, WALL
from ..stats import Pooled
from ..theory.speedup import expected_tokens, walltime_factor
from . import cost_models, forecast as forecast_mod, plausibility
from .runs import (
    SpecRun,
    alpha_from_tokens,
    median_by_run,
    metric_figures,
    named_steps,
    nan_median,
    pooled_by_run,
    pooled_ratio_by_run,
    run_metrics,
    runs_column,
    step_times_by_run,
    token_arrays,
    token_basis,
    tokens_in_place,
    tokens_per_step,
)
from .tables import (
    BY_METRIC_COLUMNS,
    BY_METRIC_FIGURES,
    GPU_HEADLINE,
    RUN_COLUMNS,
    SpeculativeAnalysis,
    ci_pair,
    decomposition_table,
    flat_table,
)


def analyze_speculative(
    plain: StepTable,
    runs: Sequence[SpecRun],
    *,
    c_standalone: Mapping[str | tuple[str, str], tuple[float, float, float]] | None = None,
    output_len: int | None = None,
    acceptance: Sequence[float] = (),
    seed: int = 0,
) -> SpeculativeAnalysis:
    """Measured figures, the decomposition and the forecast for speculative runs against the plain target run.

    Args:
        plain: the plain target run's steps (`step_table`): its decode steps are the baseline.
        runs: the speculative runs (`load_run`).
        c_standalone: (c, low, high) of the plain runs (decode phase) per draft label (wall) or per (draft label,
            metric) (`standalone_c` of a coefficients table); NaN when absent. Thm 3.8 is priced with the headline
            metric's c (wall's when the plain runs lack it).
        output_len: output tokens per sequence per iteration (default: the plain run's forwards per iteration).
        acceptance: extra α values for the forecast.
        seed: bootstrap seed.
    """
    notes: list[str] = []
    base = _baseline(plain, runs, c_standalone, output_len, seed, notes)
    rows, decomposition, by_metric, run_rows = [], [], [], []  # run_rows: each run's own figures where runs pooled
    step_frames = [plain.steps.assign(run="(plain target)")]
    for r in runs:
        v = r.steps.of_kind(VERIFY)
        step_frames.append(r.steps.steps.assign(run=r.name))
        notes.append(f"{r.name}: steps from {r.steps.rule}")
        if v.empty:
            notes.append(f"{r.name}: no verify step was measured: left out")
            continue
        row, row_notes, measured_runs = _run_row(base, r, v)
        rows.append(row)
        notes += row_notes
        run_rows += measured_runs
        for metric, f in base.figures[r.name].items():
            by_metric.append(_by_metric_row(base, r, metric, f))
            run_rows += _each_run(base, r, metric, f)
            decomposition += _decompose(r.name, r.draft, r.gamma, metric, row["tokens_per_step"], base.decode_step[0],
                                        f["decode_ms"][0], f["verify_ms"][0],
                                        median_by_run(v[metric_columns(metric)[1]], runs_column(v)),
                                        f["other_ms"][0], row["step_ms"])
    table = flat_table(rows)
    forecast, grid, best = cost_models.forecasts(base.models, base.by_draft, acceptance, base.out_len)
    steps = pd.concat(step_frames, ignore_index=True)
    return SpeculativeAnalysis(table, decomposition_table(decomposition), base.models, forecast, grid, best, steps,
                               tuple(notes), pd.DataFrame(by_metric, columns=BY_METRIC_COLUMNS), base.headline,
                               pd.DataFrame(run_rows, columns=RUN_COLUMNS))


@dataclass(frozen=True)
class _Baseline:
    """What every speculative run is measured against: the plain target's decode steps, the runs' figures on every
    metric and the headline metric among them, each draft's runs and its step cost model."""

    plain: StepTable
    decode: pd.DataFrame  # the plain target's decode steps
    decode_steps: dict[int, np.ndarray]  # their times on the headline metric, by run
    decode_step: Pooled  # their median, pooled over runs
    standalone: dict[tuple[str, str], tuple[float, float, float]]  # (draft, metric) → c standalone
    out_len: float
    by_draft: dict[str, list[SpecRun]]
    figures: dict[str, dict[str, dict[str, Pooled]]]  # run → metric → figure
    headline: str
    models: dict[str, forecast_mod.StepCostModel]
    seed: int


def _baseline(plain: StepTable, runs: Sequence[SpecRun],
              c_standalone: Mapping[str | tuple[str, str], tuple[float, float, float]] | None,
              output_len: int | None, seed: int, notes: list[str]) -> _Baseline:
    """`analyze_speculative`'s baseline, the notes it needs added to `notes`."""
    standalone = {(k, WALL) if isinstance(k, str) else (str(k[0]), str(k[1])): v
                  for k, v in (c_standalone or {}).items()}
    decode = plain.of_kind(DECODE)
    if decode.empty:
        raise InputError("the plain target run has no decode step: profile it with an output length ≥ 2")
    out_len = float(output_len) if output_len else plain.forwards_per_iteration
    if not output_len and not math.isfinite(out_len):
        notes.append("output length unknown (no iteration ranges, no output_len): tokens per step from the metrics")
    notes.append(f"plain target: steps from {plain.rule} ({plain.rule_detail})")
    by_draft: dict[str, list[SpecRun]] = {}
    for r in runs:
        by_draft.setdefault(r.draft, []).append(r)
        notes += r.notes
    figures = _figures(plain, runs, decode, seed)
    headline = _headline(figures, notes)
    # The steps' times on the headline: on a GPU trace each step's start to the end of its GPU work (`steps`); runs
    # pooled (`speculative.pooled`): each figure per run, then pooled (module docstring).
    decode_steps = step_times_by_run(decode, headline)
    decode_step = pooled_by_run(decode_steps, seed)
    models = _cost_models(decode_step[0], by_draft, headline, notes)
    return _Baseline(plain, decode, decode_steps, decode_step, standalone, out_len, by_draft, figures, headline,
                     models, seed)


def _figures(plain: StepTable, runs: Sequence[SpecRun], decode: pd.DataFrame,
             seed: int) -> dict[str, dict[str, dict[str, Pooled]]]:
    """Each run's figures (`runs.metric_figures`) on every metric it has (wall always; a GPU metric where its verify
    and decode forwards have a time on it), by run name; a run without a verify step left out."""
    figures: dict[str, dict[str, dict[str, Pooled]]] = {}
    for r in runs:
        v = r.steps.of_kind(VERIFY)
        if v.empty:
            continue
        figures[r.name] = {}
        for metric in run_metrics(plain, r):
            f = metric_figures(r, v, decode, metric, seed, token_basis(plain, r))
            if metric == WALL or (math.isfinite(f["verify_ms"][0]) and math.isfinite(f["decode_ms"][0])):
                figures[r.name][metric] = f
    return figures


def _headline(figures: Mapping[str, Mapping[str, Mapping[str, Pooled]]], notes: list[str]) -> str:
    """The headline metric: the GPU headline when every run has it, else wall; a note says which and why."""
    headline = GPU_HEADLINE if figures and all(GPU_HEADLINE in f for f in figures.values()) else WALL
    partly = [n for n, f in figures.items() if GPU_HEADLINE in f]
    if headline == WALL and partly:
        notes.append(f"only {', '.join(partly)} of the speculative runs (and the plain target) have GPU metrics: the "
                     "headline, the decomposition and the forecast stay on wall time (each run's GPU figures are in "
                     "by_metric)")
    elif headline != WALL:
        notes.append(f"the speculative figures are headlined on {headline} (the forwards' GPU time; the table's and "
                     f"the JSON entries' figures, c in place and c standalone included, and Thm 3.8's prices), their "
                     f"{LAUNCH_TIME} (wall) beside; each step's time (and the measured speedup, the decomposition and "
                     "the step cost model) runs from the step's start to the end of the GPU work launched in it — "
                     f"its CPU time is its {LAUNCH_TIME} (by_metric's wall rows)")
    return headline


def _cost_models(decode_step: float, by_draft: Mapping[str, list[SpecRun]], headline: str,
                 notes: list[str]) -> dict[str, forecast_mod.StepCostModel]:
    """Each draft's step cost model on the headline metric, fitted on all its runs (`cost_models.fit`); a note for a
    model fitted on one γ."""
    models = {dr: m for dr, rs in by_draft.items() if (m := cost_models.fit(decode_step, rs, headline)) is not None}
    for dr, rs in by_draft.items():
        if dr in models and len({r.gamma for r in rs}) < 2:
            notes.append(f"{dr}: the cost model is fitted on one γ only: verify and outside time are taken as "
                         "constant in γ (profile two or more γ for a forecast at other γ)")
    return models


def _run_row(base: _Baseline, r: SpecRun, v: pd.DataFrame) -> tuple[dict, list[str], list[dict]]:
    """One speculative run's row of the table, on the headline metric (its step in parts, its speedup measured and
    forecast, its tokens in place), the notes it needs, and each run's measured speedup where runs were pooled."""
    notes: list[str] = []
    wall = base.figures[r.name][base.headline]  # the table's figures: on the headline metric (one answer)
    on_headline = base.figures[r.name].get(base.headline, wall)
    v_step = step_times_by_run(v, base.headline)
    basis = token_basis(base.plain, r)
    priced = _priced_c(base, r, notes)
    tps, tps_metrics = tokens_per_step(r, base.out_len)
    if named_steps(r):
        notes.append(tokens_in_place(r, base.out_len)[2])
    alpha, source, alpha_vllm = _alpha(r, tps)
    sp = pooled_ratio_by_run(base.decode_steps, v_step, base.seed)
    measured = (tps * sp[0], tps * sp[1], tps * sp[2])
    run_rows = [{"name": r.name, "draft": r.draft, "gamma": r.gamma, "metric": base.headline,
                 "figure": "measured_speedup", "run": k, "value": tps * x}
                for k, x in zip(sp.numbers, sp.runs)] if sp.n_runs > 1 else []  # each at the pooled tokens per step
    bench = _bench_speedup(base.plain, r, base.headline)
    c_propose = _c_propose(r, on_headline)
    predicted, error, tolerance = _predicted(base, r, alpha, priced, c_propose, on_headline, measured[0], sp)
    impossible = plausibility.problems(name=r.name, measured=measured[0], alpha=alpha, tokens_per_step=tps,
                                       interval=(measured[1], measured[2]))
    row = {**_step_in_parts(base, r, v, wall, priced, v_step),
           "tokens_per_step": tps, "tokens_per_step_metrics": tps_metrics, "alpha": alpha, "alpha_source": source,
           "alpha_vllm": alpha_vllm, **_with_ci("measured_speedup", measured), "bench_speedup": bench,
           "bench_difference": bench / measured[0] - 1 if math.isfinite(bench) else math.nan,
           "predicted_speedup": predicted, "forecast_error": error, "forecast_tolerance": tolerance,
           "measurement_problem": "; ".join(impossible),
           **_tokens_figures(base, r, v, wall, basis, c_propose)}
    notes += impossible
    notes += _token_notes(r, basis, base.headline, on_headline, priced, c_propose)
    notes += _proposing_notes(r, v, base.figures[r.name], base.headline)
    return row, notes, run_rows


def _priced_c(base: _Baseline, r: SpecRun, notes: list[str]) -> tuple[float, float, float]:
    """The c standalone Thm 3.8 is priced with: the draft's on the headline metric, its wall c where the plain runs
    give none on a GPU headline (said in `notes`)."""
    priced = base.standalone.get((r.draft, base.headline), (math.nan,) * 3)
    if base.headline != WALL and not math.isfinite(priced[0]):
        priced = base.standalone.get((r.draft, WALL), (math.nan,) * 3)
        if math.isfinite(priced[0]):
            notes.append(f"{r.name}: the plain runs give no c on {base.headline} for {r.draft}: Thm 3.8 is priced "
                         "with its wall c")
    return priced


def _alpha(r: SpecRun, tokens_per_step: float) -> tuple[float, str, float]:
    """(α, where it came from, vLLM's own α): the i.i.d. estimate from the run's metrics dump, else the α whose
    E(α, γ) is the measured tokens per step."""
    if r.acceptance is not None and math.isfinite(r.acceptance.alpha_iid):
        return r.acceptance.alpha_iid, "metrics", r.acceptance.alpha
    return alpha_from_tokens(tokens_per_step, r.gamma), "tokens per step", math.nan


def _c_propose(r: SpecRun, on_headline: Mapping[str, Pooled]) -> float:
    """A proposer's proposing per step ÷ the plain decode token; 0 for a proposer with a draft model (it proposes
    through its forwards), NaN for one without and with no proposing ranges (unknown)."""
    d_token = on_headline["decode_token_ms"][0]
    propose = on_headline["propose_ms"][0]
    return propose / d_token if math.isfinite(propose) and d_token > 0 else (
        0.0 if not r.steps.draft_forwards.empty else math.nan)


def _predicted(base: _Baseline, r: SpecRun, alpha: float, priced: tuple[float, float, float], c_propose: float,
               on_headline: Mapping[str, Pooled], measured: float, speedup: Pooled) -> tuple[dict, float, float]:
    """The run's `predicted_speedup` (Thm 3.8 priced standalone, the cost model in-sample and held out, Thm 3.8
    priced in place), the held-out forecast's error against the `measured` speedup and how far it may miss."""
    leviathan = (float(walltime_factor(alpha, r.gamma, priced[0]))
                 if math.isfinite(priced[0]) and math.isfinite(alpha) else math.nan)
    c_decode = on_headline["c_in_place_decode"][0]
    in_place = (float(expected_tokens(alpha, r.gamma)) / (r.gamma * c_decode + 1 + c_propose)
                if math.isfinite(c_decode) and math.isfinite(c_propose) and math.isfinite(alpha) else math.nan)
    model = base.models.get(r.draft)
    held, fit_gammas, error, tolerance = cost_models.held_out(
        r, base.by_draft[r.draft], base.decode_step[0], base.decode_steps, alpha, measured, speedup, base.headline,
        base.seed)
    return ({"leviathan": leviathan, "cost_model": float(model.speedup(alpha, r.gamma)) if model else math.nan,
             "cost_model_held_out": held, "held_out_fit_gammas": fit_gammas, "leviathan_in_place": in_place},
            error, tolerance)


def _with_ci(name: str, figure: Sequence[float]) -> dict:
    """A figure (value, low, high) as the table's two columns: `name` and its 95 % interval `name_ci95`."""
    return {name: figure[0], f"{name}_ci95": ci_pair(figure[1], figure[2])}


def _step_in_parts(base: _Baseline, r: SpecRun, v: pd.DataFrame, wall: Mapping[str, Pooled],
                   priced: tuple[float, float, float], v_step: Mapping[int, np.ndarray]) -> dict:
    """The row's first columns: the run, and its verify step in parts on the headline metric (the draft forward, the
    verify, the time outside them, the step) beside the plain decode step."""
    step = pooled_by_run(v_step, base.seed)
    return {
        "name": r.name, "draft": r.draft, "gamma": r.gamma, "metric": base.headline, "path": r.path,
        "step_rule": r.steps.rule, "steps": len(v), "iterations": r.steps.iterations,
        **_with_ci("draft_forward_ms", wall["draft_forward_ms"]),
        "draft_forwards_per_step": float(np.median(v["draft_forwards"])) if v["draft_forwards"].notna().any()
        else math.nan,
        # Σ context (KV tokens summed over the step's sequences) of its verify steps, mean; NaN where unmeasured
        "context": float(v[CONTEXT].mean()) if CONTEXT in v and v[CONTEXT].notna().any() else math.nan,
        **_with_ci("verify_ms", wall["verify_ms"]), **_with_ci("decode_ms", wall["decode_ms"]),
        **_with_ci("verify_factor", wall["verify_factor"]), **_with_ci("c_in_place", wall["c_in_place"]),
        **_with_ci("c_standalone", priced), **_with_ci("other_ms", wall["other_ms"]), "step_ms": step[0],
        "decode_other_ms": median_by_run(base.decode[metric_columns(base.headline)[2]], runs_column(base.decode)),
        "step_ms_ci95": ci_pair(step[1], step[2]), **_with_ci("decode_step_ms", base.decode_step),
        "draft_step_ms": median_by_run(v[metric_columns(base.headline)[1]], runs_column(v)),
    }


def _tokens_figures(base: _Baseline, r: SpecRun, v: pd.DataFrame, wall: Mapping[str, Pooled], basis: str,
                    c_propose: float) -> dict:
    """The row's last columns: its tokens in place on the headline metric (the module docstring's "Tokens in place")."""
    at = runs_column(v)
    tok = token_arrays(r, v, base.headline, basis)
    decode, parts = base.decode, part_columns(base.headline)
    return {
        "basis": basis, **_with_ci("c_in_place_forward", wall["c_in_place_forward"]),
        **_with_ci("c_in_place_decode", wall["c_in_place_decode"]),
        **_with_ci("draft_catchup_ms", wall["draft_catchup_ms"]),
        "draft_catchup_tokens": nan_median(v["draft_catchup_tokens"]) if "draft_catchup_tokens" in v else math.nan,
        **_with_ci("draft_later_ms", wall["draft_later_ms"]),
        "draft_logits_ms": median_by_run(tok["draft_logits"], at),
        "draft_sample_ms": median_by_run(tok["draft_sample"], at),
        **_with_ci("draft_token_ms", wall["draft_token_ms"]),
        "verify_logits_ms": median_by_run(tok["verify_logits"], at),
        "verify_sample_ms": median_by_run(tok["verify_sample"], at),
        **_with_ci("verify_token_ms", wall["verify_token_ms"]),
        **{f"decode_{part}_ms": (median_by_run(decode[col], runs_column(decode)) if col in decode else math.nan)
           for part, col in (("logits", parts["target_logits"]), ("sample", parts["target_sample"]))},
        **_with_ci("decode_token_ms", wall["decode_token_ms"]), **_with_ci("propose_ms", wall["propose_ms"]),
        "c_propose": c_propose,
    }


def _by_metric_row(base: _Baseline, r: SpecRun, metric: str, f: Mapping[str, Pooled]) -> dict:
    """The run's `by_metric` row on `metric`: every figure with its interval, and the draft's c standalone."""
    return {"name": r.name, "draft": r.draft, "gamma": r.gamma, "metric": metric,
            **{c: x for fig in BY_METRIC_FIGURES for c, x in zip((fig, f"{fig}_ci_low", f"{fig}_ci_high"), f[fig])},
            **dict(zip(("c_standalone", "c_standalone_ci_low", "c_standalone_ci_high"),
                       base.standalone.get((r.draft, metric), (math.nan,) * 3)))}


def _each_run(base: _Baseline, r: SpecRun, metric: str, f: Mapping[str, Pooled]) -> list[dict]:
    """Each pooled run's own figures on `metric` (`SpeculativeAnalysis.runs`), its draft's c standalone's too."""
    return ([{"name": r.name, "draft": r.draft, "gamma": r.gamma, "metric": metric, "figure": fig, "run": k,
              "value": x}
             for fig in BY_METRIC_FIGURES if f[fig].n_runs > 1 for k, x in zip(f[fig].numbers, f[fig].runs)]
            + [{"name": r.name, "draft": r.draft, "gamma": r.gamma, "metric": metric, "figure": "c_standalone",
                "run": k, "value": x}
               for k, x in sorted(getattr(base.standalone.get((r.draft, metric)), "runs", {}).items())])


# A draft's in-place cost this many times its standalone c is worth a note: Thm 3.8 priced alone is then optimistic.
IN_PLACE_GAP = 1.2


def _proposing_notes(run: SpecRun, verify: pd.DataFrame, figures: Mapping[str, Mapping[str, Pooled]],
                     headline: str) -> list[str]:
    """Where the draft range is the proposer, one range per step (vLLM's draft scope, the proposer's frame of a torch
    trace): a verify step in words on the headline metric and wall — the verify, the proposing per step and per
    drafted token, the time outside both (medians)."""
    if run.steps.draft_forwards.empty or not run.steps.steps["draft_forwards"].isna().all():
        return []
    parts = []
    for metric in dict.fromkeys((headline, WALL)):
        f = figures.get(metric)
        if f is None:
            continue
        per_step = median_by_run(verify[metric_columns(metric)[1]], runs_column(verify))
        on = f"{LAUNCH_TIME} (wall)" if metric == WALL and headline != WALL else metric  # the CPU on a GPU trace
        parts.append(f"on {on}: verify {f['verify_ms'][0]:.3g} ms, the proposing {per_step:.3g} ms "
                     f"({f['draft_forward_ms'][0]:.3g} ms per drafted token, γ = {run.gamma}), outside both "
                     f"{f['other_ms'][0]:.3g} ms")
    return [f"{run.name}: a verify step (medians) {'; '.join(parts)}"] if parts else []


def _token_notes(run: SpecRun, basis: str, metric: str, figures: Mapping[str, tuple[float, float, float]],
                 standalone: tuple[float, float, float], c_propose: float) -> list[str]:
    """What a reader of a run's in-place token figures must know (issue 29 items 2–5)."""
    out = []
    if basis != "token":
        out.append(f"{run.name}: no logits or sampling ranges of the target in its trace or the plain target's (an "
                   "older trace, or a range of the user's own): c in place is the forwards' alone (profile with this "
                   "nsys_cc's plugin for a token's cost)")
    elif (not {"draft_logits", "draft_sample"} & set(run.steps.parts) and not run.steps.draft_forwards.empty
          and not run.steps.steps["draft_forwards"].isna().all()):  # a proposer's range holds its logits, sampling
        out.append(f"{run.name}: no draft logits or sampling ranges: the draft's token is its forward ranges (a CUDA "
                   "graph replayed whole holds its logits and argmax; an older plugin wrote none)")
    held = run.steps.draft_forwards.get("forwards")
    if held is not None and len(held) and (held.to_numpy() != 1).any():
        out.append(f"{run.name}: some draft ranges hold several forwards (a fused multi-step draft graph replays γ − 1 "
                   "in one range, a multi-module MTP graph γ): each is divided by the forwards it holds")
    if math.isnan(figures["draft_catchup_ms"][0]) and not run.steps.draft_forwards.empty:
        out.append(f"{run.name}: one draft range per step holds all its forwards: the catch-up forward (over the "
                   "tokens just verified) cannot be told from the later ones")
    # Like with like: the draft's token in place against a token's c standalone; its forwards in place (÷ the plain
    # decode forward) against a c standalone of the forwards alone (a coefficients table without token figures).
    if basis == "token" and getattr(standalone, "basis", "forward") == "token":
        c_decode, what = figures["c_in_place_decode"][0], "token"
    else:
        d_fwd, decode_fwd = figures["draft_forward_ms"][0], figures["decode_ms"][0]
        c_decode = d_fwd / decode_fwd if decode_fwd > 0 else math.nan
        what = "forwards"
    if math.isfinite(standalone[0]) and math.isfinite(c_decode) and c_decode > IN_PLACE_GAP * standalone[0]:
        out.append(f"{run.name}: its draft costs {c_decode / standalone[0]:.2g}× its standalone c in place "
                   f"({c_decode:.3g} against {standalone[0]:.3g} on {metric}, {what}): Thm 3.8 priced with c "
                   "standalone (leviathan) is optimistic for these steps; leviathan_in_place prices them with what "
                   "they cost here (on a GPU, vLLM's V2 runs a standalone draft's speculator eagerly while its "
                   "standalone run uses CUDA graphs)")
    if math.isnan(c_propose):
        out.append(f"{run.name}: a proposer without a draft model and no proposing ranges (an older trace): its "
                   "proposing cost is unknown, leviathan_in_place left out")
    return out


class StandaloneC(tuple):
    """(c, low, high) of a plain draft run's decode phase, and `basis`: "token" when that c prices a token (its
    coefficients row says so), "forward" when it is the forwards' alone. A plain tuple reads as "forward". `runs`:
    each run's own c where c pools several (run number → c), else empty."""

    basis: str
    runs: dict[int, float]

    def __new__(cls, values: tuple[float, float, float], basis: str = "forward",
                runs: Mapping[int, float] | None = None) -> StandaloneC:
        self = super().__new__(cls, values)
        self.basis = basis
        self.runs = dict(runs or {})
        return self


def standalone_c(coefficients: pd.DataFrame,
                 per_run: pd.DataFrame | None = None) -> dict[str | tuple[str, str], tuple[float, float, float]]:
    """(c, low, high) per (draft, metric) of a coefficients table's decode phase (`StandaloneC`, with the row's
    `basis` where the table has one, and each run's c from `per_run`, the result's `runs`): `analyze_speculative`'s
    c_standalone."""
    decode = coefficients[coefficients["phase"] == DECODE]
    has_basis = "basis" in decode
    runs: dict[tuple[str, str], dict[int, float]] = {}
    if per_run is not None and not per_run.empty:
        for r in per_run[per_run["phase"] == DECODE].itertuples():
            runs.setdefault((str(r.draft), str(r.metric)), {})[int(r.run)] = float(r.c)
    return {(str(r.draft), str(r.metric)): StandaloneC(
                (float(r.c), float(r.ci_low), float(r.ci_high)),
                "token" if has_basis and r.basis == "token" else "forward", runs.get((str(r.draft), str(r.metric))))
            for r in decode.itertuples()}



def _bench_speedup(plain: StepTable, run: SpecRun, metric: str) -> float:
    """(L_plain − P_plain) ÷ (L_spec − P_spec) from vLLM's latencies, NaN without both bench files: L the mean
    iteration latency (vLLM's "Avg latency", and the mean as the trace's tokens per step takes it), P the median
    prefill step (its time on `metric`: on a GPU trace to the end of its GPU work, which the latency holds)."""
    plain_lat = plain.latencies_s
    if plain_lat is None or run.latencies_s is None:
        return math.nan
    pp, ps = plain.of_kind(PREFILL), run.steps.of_kind(PREFILL)
    pp, ps = pp[step_time_column(metric, pp)], ps[step_time_column(metric, ps)]
    if pp.empty or ps.empty:
        return math.nan
    num = float(np.mean(plain_lat)) * 1e3 - float(np.median(pp))
    den = float(np.mean(run.latencies_s)) * 1e3 - float(np.median(ps))
    return num / den if den > 0 else math.nan


def _decompose(name: str, draft: str, gamma: int, metric: str, tps: float, d: float, f: float, v: float, r: float,
               o: float, t: float) -> list[dict]:
    """The waterfall factors of one run on `metric` (see the module docstring), in order, then the measured end."""
    factors = [("tokens per step", tps), ("verify ≠ decode", d / (d + v - f)),  # DECOMPOSITION_PARTS' order
               ("draft forwards", (d + v - f) / (d + v - f + r)), ("outside time", (d + v - f + r) / (v + r + o)),
               ("medians do not add", (v + r + o) / t), ("measured", math.nan)]
    out, level = [], 1.0
    for i, (part, factor) in enumerate(factors):
        after = level if math.isnan(factor) else level * factor
        out.append({"name": name, "draft": draft, "gamma": gamma, "metric": metric, "order": i, "part": part,
                    "factor": factor,
                    "before": level, "after": after})
        level = after
    return out
