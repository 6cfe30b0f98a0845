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

import numpy as np
import pandas as pd

from ...errors import InputError
from ..forwards.steps import StepTable, metric_columns, part_columns, step_time_column
from ..metrics import DECODE, LAUNCH_TIME, PREFILL, VERIFY, WALL
from ..stats import Pooled, median_ci
from ..theory.speedup import expected_tokens, walltime_factor
from . import forecast as forecast_mod, plausibility
from .runs import (
    SpecRun,
    alpha_from_tokens,
    by_run,
    median_by_run,
    metric_figures,
    nan_median,
    pooled_by_run,
    pooled_ratio_by_run,
    run_metrics,
    runs_column,
    token_arrays,
    token_basis,
    tokens_in_place,
)
from .tables import (
    ALPHA_GRID,
    BY_METRIC_COLUMNS,
    BY_METRIC_FIGURES,
    FORECAST_COLUMNS,
    GPU_HEADLINE,
    RUN_COLUMNS,
    SpeculativeAnalysis,
    ci_pair,
    decomposition_table,
    flat_table,
)


def _pooled_alpha(runs: Sequence[SpecRun], output_len: float) -> tuple[float, str]:
    """α of a draft over all its runs: the i.i.d. estimate from the summed counters when every run has them, else the
    median of the runs' α from their tokens per step (`output_len` as for `_tokens_per_step`)."""
    stats = [r.acceptance for r in runs if r.acceptance is not None and r.acceptance.accepted_per_position]
    if stats and len(stats) == len(runs):
        accepted = sum(s.num_accepted for s in stats)
        rejected = sum(s.num_drafts - s.accepted_per_position[-1] for s in stats)
        return (accepted / (accepted + rejected) if accepted + rejected else 1.0), "metrics"
    alphas = [a for r in runs if math.isfinite(a := alpha_from_tokens(_tokens_per_step(r, output_len)[0], r.gamma))]
    return float(np.median(alphas)) if alphas else math.nan, "tokens per step"


def _tokens_per_step(run: SpecRun, output_len: float) -> tuple[float, float]:
    """(tokens per verify step from the trace, the metrics' 1 + accepted ÷ drafts)."""
    metrics = run.acceptance.mean_acceptance_length if run.acceptance is not None else math.nan
    if _named_steps(run):  # the engine's step annotations: the requests' lives, each last step censored (`runs`)
        return tokens_in_place(run, output_len)[0], metrics
    after_prefill = run.steps.steps[run.steps.steps["kind"].isin((VERIFY, DECODE))]
    counted = after_prefill[after_prefill["iteration"] >= 0]
    if math.isfinite(output_len) and len(counted) and run.steps.rule != "forward to forward":
        # the mean, not the median: an iteration's time is the sum of its steps, so the benchmark's expected
        # iteration is the mean step count; a median of whole steps jumps by one (6.6 → 7 at B = 8, γ = 5 when 3
        # of 5 iterations wait for a straggler) and biases the measured speedup low
        per_iter = counted.groupby("iteration").size().mean()
        return (output_len - 1) / per_iter, metrics
    if math.isfinite(output_len) and math.isfinite(run.steps.forwards_per_iteration):
        # every forward but the prefill is a step, counted or not (the last one closes none)
        return (output_len - 1) / (run.steps.forwards_per_iteration - 1), metrics
    return metrics, metrics


def _named_steps(run: SpecRun) -> bool:
    """Whether the run's steps are an engine's step annotations (they name each step's batch: `runs.request_lives`)."""
    steps = run.steps.steps
    return "batch" in steps.columns and bool(steps["batch"].notna().any())


def _fit(decode_step: float, runs: Sequence[SpecRun], metric: str = WALL) -> forecast_mod.StepCostModel | None:
    target, drafts, other, _ = metric_columns(metric)
    parts = []
    for r in runs:
        v = r.steps.of_kind(VERIFY)
        if v.empty or metric not in r.steps.metrics:
            continue
        at = runs_column(v)
        parts.append((r.gamma, median_by_run(v[drafts], at) / r.gamma, median_by_run(v[target], at),
                      median_by_run(v[other], at)))
    if not parts:
        return None
    g, d, vv, o = zip(*parts)
    return forecast_mod.fit(decode_step, g, d, vv, o, draft_weights=g)


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
    figures: dict[str, dict[str, dict[str, Pooled]]] = {}  # run → metric → figure
    for r in runs:
        v = r.steps.of_kind(VERIFY)
        if v.empty:
            continue
        figures[r.name] = {}
        for metric in run_metrics(plain, r):
            f = metric_figures(r, v, decode, metric, seed, token_basis(plain, r))
            if metric == WALL or (math.isfinite(f["verify_ms"][0]) and math.isfinite(f["decode_ms"][0])):
                figures[r.name][metric] = f
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
    # The steps' times on the headline: on a GPU trace each step's start to the end of its GPU work (`steps`).
    d_runs = by_run(decode)  # runs pooled (`speculative.pooled`): each figure per run, then pooled (module docstring)
    dec_step = {k: d[step_time_column(headline, d)].to_numpy(dtype=float) for k, d in d_runs.items()}
    d_step, ds_lo, ds_hi = pooled_by_run(dec_step, seed)
    models = {dr: m for dr, rs in by_draft.items() if (m := _fit(d_step, rs, headline)) is not None}
    for dr, rs in by_draft.items():
        if dr in models and len({r.gamma for r in rs}) < 2:
            notes.append(f"{dr}: the cost model is fitted on one γ only: verify and outside time are taken as "
                         "constant in γ (profile two or more γ for a forecast at other γ)")
    rows, decomposition, by_metric, step_frames = [], [], [], [plain.steps.assign(run="(plain target)")]
    run_rows: list[dict] = []  # each run's own figures, where runs were pooled (`SpeculativeAnalysis.runs`)
    for r in runs:
        v = r.steps.of_kind(VERIFY)
        step_frames.append(r.steps.steps.assign(run=r.name))
        notes.append(f"{r.name}: steps from {r.steps.rule}")
        if v.empty:
            notes.append(f"{r.name}: no verify step was measured: left out")
            continue
        wall = figures[r.name][headline]  # the table's figures: on the headline metric (one answer)
        draft_ms, dr_lo, dr_hi = wall["draft_forward_ms"]
        verify_ms, v_lo, v_hi = wall["verify_ms"]
        other_ms, o_lo, o_hi = wall["other_ms"]
        v_step = {k: x[step_time_column(headline, x)].to_numpy(dtype=float) for k, x in by_run(v).items()}
        step_ms, s_lo, s_hi = pooled_by_run(v_step, seed)
        vf = wall["verify_factor"]
        cin = wall["c_in_place"]
        basis = token_basis(plain, r)
        tok = token_arrays(r, v, headline, basis)
        on_headline = figures[r.name].get(headline, wall)
        cst = standalone.get((r.draft, WALL), (math.nan,) * 3)
        priced = standalone.get((r.draft, headline), (math.nan,) * 3)
        if headline != WALL and not math.isfinite(priced[0]):
            priced = cst
            if math.isfinite(cst[0]):
                notes.append(f"{r.name}: the plain runs give no c on {headline} for {r.draft}: Thm 3.8 is priced with "
                             "its wall c")
        tps, tps_metrics = _tokens_per_step(r, out_len)
        if _named_steps(r):
            notes.append(tokens_in_place(r, out_len)[2])
        if r.acceptance is not None and math.isfinite(r.acceptance.alpha_iid):
            alpha, source, alpha_vllm = r.acceptance.alpha_iid, "metrics", r.acceptance.alpha
        else:
            alpha, source, alpha_vllm = alpha_from_tokens(tps, r.gamma), "tokens per step", math.nan
        sp = pooled_ratio_by_run(dec_step, v_step, seed)
        measured = (tps * sp[0], tps * sp[1], tps * sp[2])
        if sp.n_runs > 1:  # each run's measured speedup at the pooled tokens per step (shown where no interval)
            run_rows += [{"name": r.name, "draft": r.draft, "gamma": r.gamma, "metric": headline,
                          "figure": "measured_speedup", "run": k, "value": tps * x}
                         for k, x in zip(sp.numbers, sp.runs)]
        bench = _bench_speedup(plain, r, headline)
        leviathan = (float(walltime_factor(alpha, r.gamma, priced[0]))
                     if math.isfinite(priced[0]) and math.isfinite(alpha) else math.nan)
        d_token = on_headline["decode_token_ms"][0]
        propose = on_headline["propose_ms"][0]
        # a proposer with a draft model proposes through its forwards; one without and with no proposing ranges: unknown
        c_propose = propose / d_token if math.isfinite(propose) and d_token > 0 else (
            0.0 if not r.steps.draft_forwards.empty else math.nan)
        c_decode = on_headline["c_in_place_decode"][0]
        in_place = (float(expected_tokens(alpha, r.gamma)) / (r.gamma * c_decode + 1 + c_propose)
                    if math.isfinite(c_decode) and math.isfinite(c_propose) and math.isfinite(alpha) else math.nan)
        model = models.get(r.draft)
        predicted: dict = {"leviathan": leviathan,
                     "cost_model": float(model.speedup(alpha, r.gamma)) if model else math.nan}
        others = [o for o in by_draft[r.draft] if o is not r and o.gamma != r.gamma]
        held = _fit(d_step, others, headline) if len({o.gamma for o in others}) >= 2 else None
        predicted["cost_model_held_out"] = float(held.speedup(alpha, r.gamma)) if held else math.nan
        predicted["held_out_fit_gammas"] = sorted({o.gamma for o in others}) if held else []
        predicted["leviathan_in_place"] = in_place
        error = tolerance = math.nan
        if held:
            error = predicted["cost_model_held_out"] / measured[0] - 1
            tolerance = _tolerance(_uncertainty(r, seed, headline), [_uncertainty(o, seed, headline) for o in others])
            if sp.n_runs > 1:  # runs pooled: how far the forecast may miss from the runs' own spread
                tolerance = _tolerance(_runs_uncertainty(sp), [_runs_uncertainty(
                    pooled_ratio_by_run(dec_step, {k: x[step_time_column(headline, x)].to_numpy(dtype=float)
                                             for k, x in by_run(o.steps.of_kind(VERIFY)).items()}, seed))
                    for o in others])
        at = runs_column(v)
        draft_step = median_by_run(v[metric_columns(headline)[1]], at)
        impossible = plausibility.problems(name=r.name, measured=measured[0], alpha=alpha, tokens_per_step=tps,
                                           interval=(measured[1], measured[2]))
        rows.append({
            "name": r.name, "draft": r.draft, "gamma": r.gamma, "metric": headline, "path": r.path,
            "step_rule": r.steps.rule,
            "steps": len(v), "iterations": r.steps.iterations,
            "draft_forward_ms": draft_ms, "draft_forward_ms_ci95": ci_pair(dr_lo, dr_hi),
            "draft_forwards_per_step": float(np.median(v["draft_forwards"])) if v["draft_forwards"].notna().any()
            else math.nan,
            "verify_ms": verify_ms, "verify_ms_ci95": ci_pair(v_lo, v_hi), "decode_ms": wall["decode_ms"][0],
            "decode_ms_ci95": ci_pair(*wall["decode_ms"][1:]), "verify_factor": vf[0],
            "verify_factor_ci95": ci_pair(vf[1], vf[2]), "c_in_place": cin[0],
            "c_in_place_ci95": ci_pair(cin[1], cin[2]), "c_standalone": priced[0],
            "c_standalone_ci95": ci_pair(priced[1], priced[2]), "other_ms": other_ms,
            "other_ms_ci95": ci_pair(o_lo, o_hi), "step_ms": step_ms,
            "decode_other_ms": median_by_run(decode[metric_columns(headline)[2]], runs_column(decode)),
            "step_ms_ci95": ci_pair(s_lo, s_hi),
            "decode_step_ms": d_step, "decode_step_ms_ci95": ci_pair(ds_lo, ds_hi), "draft_step_ms": draft_step,
            "tokens_per_step": tps, "tokens_per_step_metrics": tps_metrics, "alpha": alpha, "alpha_source": source,
            "alpha_vllm": alpha_vllm, "measured_speedup": measured[0],
            "measured_speedup_ci95": ci_pair(measured[1], measured[2]), "bench_speedup": bench,
            "bench_difference": bench / measured[0] - 1 if math.isfinite(bench) else math.nan,
            "predicted_speedup": predicted, "forecast_error": error, "forecast_tolerance": tolerance,
            "measurement_problem": "; ".join(impossible),
            "basis": basis, "c_in_place_forward": wall["c_in_place_forward"][0],
            "c_in_place_forward_ci95": ci_pair(*wall["c_in_place_forward"][1:]),
            "c_in_place_decode": wall["c_in_place_decode"][0],
            "c_in_place_decode_ci95": ci_pair(*wall["c_in_place_decode"][1:]),
            "draft_catchup_ms": wall["draft_catchup_ms"][0],
            "draft_catchup_ms_ci95": ci_pair(*wall["draft_catchup_ms"][1:]),
            "draft_catchup_tokens": nan_median(v["draft_catchup_tokens"]) if "draft_catchup_tokens" in v else math.nan,
            "draft_later_ms": wall["draft_later_ms"][0], "draft_later_ms_ci95": ci_pair(*wall["draft_later_ms"][1:]),
            "draft_logits_ms": median_by_run(tok["draft_logits"], at),
            "draft_sample_ms": median_by_run(tok["draft_sample"], at),
            "draft_token_ms": wall["draft_token_ms"][0], "draft_token_ms_ci95": ci_pair(*wall["draft_token_ms"][1:]),
            "verify_logits_ms": median_by_run(tok["verify_logits"], at),
            "verify_sample_ms": median_by_run(tok["verify_sample"], at),
            "verify_token_ms": wall["verify_token_ms"][0],
            "verify_token_ms_ci95": ci_pair(*wall["verify_token_ms"][1:]),
            **{f"decode_{part}_ms": (median_by_run(decode[col], runs_column(decode)) if col in decode else math.nan)
               for part, col in (("logits", part_columns(headline)["target_logits"]),
                                 ("sample", part_columns(headline)["target_sample"]))},
            "decode_token_ms": wall["decode_token_ms"][0],
            "decode_token_ms_ci95": ci_pair(*wall["decode_token_ms"][1:]),
            "propose_ms": wall["propose_ms"][0], "propose_ms_ci95": ci_pair(*wall["propose_ms"][1:]),
            "c_propose": c_propose,
        })
        notes += impossible
        notes += _token_notes(r, basis, headline, on_headline, cst if headline == WALL else priced, c_propose)
        notes += _proposing_notes(r, v, figures[r.name], headline)
        for metric, f in figures[r.name].items():
            by_metric.append({"name": r.name, "draft": r.draft, "gamma": r.gamma, "metric": metric,
                              **{c: x for fig in BY_METRIC_FIGURES
                                 for c, x in zip((fig, f"{fig}_ci_low", f"{fig}_ci_high"), f[fig])},
                              **dict(zip(("c_standalone", "c_standalone_ci_low", "c_standalone_ci_high"),
                                         standalone.get((r.draft, metric), (math.nan,) * 3)))})
            run_rows += [{"name": r.name, "draft": r.draft, "gamma": r.gamma, "metric": metric, "figure": fig,
                          "run": k, "value": x}
                         for fig in BY_METRIC_FIGURES if f[fig].n_runs > 1 for k, x in zip(f[fig].numbers, f[fig].runs)]
            run_rows += [{"name": r.name, "draft": r.draft, "gamma": r.gamma, "metric": metric,
                          "figure": "c_standalone", "run": k, "value": x}
                         for k, x in sorted(getattr(standalone.get((r.draft, metric)), "runs", {}).items())]
            decomposition += _decompose(r.name, r.draft, r.gamma, metric, tps, d_step, f["decode_ms"][0],
                                        f["verify_ms"][0], median_by_run(v[metric_columns(metric)[1]], at),
                                        f["other_ms"][0],
                                        step_ms)
    table = flat_table(rows)
    forecast, grid, best = _forecasts(models, by_draft, acceptance, out_len)
    steps = pd.concat(step_frames, ignore_index=True)
    return SpeculativeAnalysis(table, decomposition_table(decomposition), models, forecast, grid, best, steps,
                               tuple(notes), pd.DataFrame(by_metric, columns=BY_METRIC_COLUMNS), headline,
                               pd.DataFrame(run_rows, columns=RUN_COLUMNS))


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


def _uncertainty(run: SpecRun, seed: int, metric: str = WALL) -> float:
    """How well a run's median verify step is known, relative to it: the larger of the half-width of its 95 %
    bootstrap interval (steps resampled) and half the range of its iterations' own medians (steps of one iteration
    share that moment's machine load, so they are not independent draws: on a loaded machine the iterations
    disagree by more than the step bootstrap says). The steps' times on `metric` (`steps.step_time_column`)."""
    v = run.steps.of_kind(VERIFY)
    column = step_time_column(metric, v)
    med, lo, hi = median_ci(v[column].to_numpy(), seed=seed)
    if not med > 0:
        return math.nan
    half = max(med - lo, hi - med) / med
    per_iter = v[v["iteration"] >= 0].groupby("iteration")[column].median()
    if len(per_iter) >= 2:
        half = max(half, float(per_iter.max() - per_iter.min()) / 2 / med)
    return half


def _runs_uncertainty(measured: Pooled) -> float:
    """How well a figure pooled over runs is known, relative to it: the relative half-width of its interval across
    runs (three runs or more), else how far its farthest run lies from it (two runs: no interval)."""
    value, lo, hi = measured
    if not value > 0:
        return math.nan
    if math.isfinite(lo) and math.isfinite(hi):
        return max(value - lo, hi - value) / value
    return max((abs(x / value - 1) for x in measured.runs), default=math.nan)


def _tolerance(held_out: float, fitted: Sequence[float]) -> float:
    """How far a forecast may miss a run it was not fitted on, from the runs' own uncertainty (`_uncertainty`) of
    their median verify step (the plain decode step divides forecast and measurement alike and cancels): the root sum
    of squares of the held-out run's and the largest among the fitted runs' (the forecast rests on medians known only
    that well)."""
    return float(math.hypot(held_out, max(fitted, default=0.0)))


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


def _forecasts(models: Mapping[str, forecast_mod.StepCostModel], by_draft: Mapping[str, list[SpecRun]],
               acceptance: Sequence[float], output_len: float) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    rows, grid, best = [], [], []
    gammas = np.arange(1, forecast_mod.FORECAST_GAMMAS + 1)
    for draft, model in models.items():
        alpha, source = _pooled_alpha(by_draft[draft], output_len)
        alphas = ([(alpha, f"measured ({source})")] if math.isfinite(alpha) else []) + \
            [(float(a), "acceptance") for a in acceptance]
        for a, src in alphas:
            s = np.asarray(model.speedup(a, gammas), dtype=float)
            top = int(np.nanargmax(s)) if np.isfinite(s).any() else -1
            rows += [{"draft": draft, "gamma": int(g), "alpha": a, "alpha_source": src, "speedup": float(x),
                      "best": i == top} for i, (g, x) in enumerate(zip(gammas, s))]
            g_best, s_best = model.best_gamma(a) if math.isfinite(a) else (0, math.nan)
            best.append({"draft": draft, "alpha": a, "alpha_source": src, "best_gamma": g_best,
                         "speedup": s_best, "max_gamma": forecast_mod.DEFAULT_MAX_GAMMA})
        s = np.asarray(model.speedup(ALPHA_GRID[None, :], gammas[:, None]), dtype=float)
        top = np.nanargmax(np.where(np.isfinite(s), s, -np.inf), axis=0)
        grid += [{"draft": draft, "gamma": int(g), "alpha": float(a), "speedup": float(s[i, j]), "best": i == top[j]}
                 for i, g in enumerate(gammas) for j, a in enumerate(ALPHA_GRID)]
    return (pd.DataFrame(rows, columns=FORECAST_COLUMNS),
            pd.DataFrame(grid, columns=["draft", "gamma", "alpha", "speedup", "best"]),
            pd.DataFrame(best, columns=["draft", "alpha", "alpha_source", "best_gamma", "speedup", "max_gamma"]))
