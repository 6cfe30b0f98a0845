"""Speculative decoding measured where it happens: per engine step of a spec-decode run, and the speedup it gave.

A trace is speculative when it holds draft-model forward ranges: `draft_model_executable()` (nsys_cc's vLLM plugin)
or `gpu_model_runner: draft` (vLLM's own scopes, `VLLM_NVTX_SCOPES_FOR_PROFILING=1`, one range around all of a
step's draft forwards). Its target forwards (`model_executable()` or `gpu_model_runner: forward`) are prefill,
verify (1 < tokens ≤ γ + 1 per sequence, `phases.verify_tokens`) or plain decode (one token).

Steps, in order of precedence (`StepTable.rule` says which was used):
1. "step ranges": the `nsys_cc:step` ranges the plugin writes around each engine step; a forward belongs to the
   step its start lies in.
2. "vLLM step scopes": in a trace made with vLLM's own scopes, from each `llm_engine step: get_output` range to the
   end of the `llm_engine step: …` ranges after it (process_outputs, abort_requests, record_stats): LLMEngine.step.
3. "forward to forward": without either, a step runs from the start of one target forward to the start of the
   next one of the same iteration (`nsys_cc:iteration` ranges; without them, up to the next forward unless it is a
   prefill); the draft forwards in between are its drafts. The last forward of each iteration closes no step, so
   its step is not counted.
Target forwards without a token payload (vLLM's scopes): prefill is the first forward of each iteration, else a
forward whose engine step has no `schedule: allocate_slots` scope (vLLM scopes slot allocation for running requests
only), else the slow group of a two-group split of the forward times (`phases.best_split`, gap ≥ 1.5×).
Warm-up forwards and steps (inside `nsys_cc:warmup`) are dropped. A step's kind is the kind of its target forward.

Per verify step: verify = the target forward's wall time; draft = the sum of its draft forwards; other = step −
verify − draft (scheduling, sampling, rejection, bookkeeping: everything outside a forward). In the plain target
run a decode step is its 1-token forward plus its own outside time.

Numbers of one speculative run (draft D, γ), each a median with a 95 % bootstrap interval (`stats`):
- draft_forward_ms: one draft forward inside the verify steps; verify_ms; decode_ms: the plain run's 1-token decode
  forward; verify_factor = verify ÷ decode; c_in_place = draft forward ÷ verify forward; c_standalone: the c of
  the plain runs (decode phase, wall) for comparison; other_ms: time outside forwards per verify step;
  step_ms: a verify step; decode_step_ms: a plain decode step.
- tokens_per_step: output tokens per sequence per verify step, (output_len − 1) ÷ verify steps per iteration
  (the prefill step gives the first token), from the trace; the metrics dump's 1 + accepted ÷ drafts beside it.
- alpha: the i.i.d. estimate (`acceptance.AcceptanceStats.alpha_iid`) from the run's vLLM metrics dump; without a
  dump, the α whose E(α, γ) equals the measured tokens per step (`alpha_source` says which).
- measured_speedup = plain decode time per output token ÷ speculative time per output token
  = tokens_per_step × median(plain decode step) ÷ median(verify step); prefill steps excluded. Cross-checked with
  vLLM's latencies (`X.bench.json`): (L_plain − P_plain) ÷ (L_spec − P_spec), L the median iteration latency, P the
  median prefill step of that trace (decode time only; both runs produce the same tokens).
- measurement_problem: why the measured speedup cannot be (above 1 at α = 0, above the tokens per step:
  `plausibility`), also in the notes; empty when it can.
- predicted_speedup: `leviathan` = Thm 3.8, E(α, γ) ÷ (γ c_standalone + 1); `cost_model` = the `StepCostModel`
  fitted on every speculative run of this draft (in-sample); `cost_model_held_out` = the same fitted on the other
  runs of this draft only (needs two or more other γ), a real forecast of this run.

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
speedup exactly.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ..errors import InputError
from ..trace import open_trace
from ..trace.nvtx import matches
from ..trace.source import Trace
from . import acceptance as acceptance_mod, forecast as forecast_mod, plausibility
from .phases import (
    DRAFT_RANGE,
    ITERATION_RANGE,
    WARMUP_RANGE,
    _containing,
    best_split,
    markers,
    verify_tokens,
)
from .ranges import select
from .ranks import ALL_REDUCE_RANGE
from .speedup import expected_tokens, walltime_factor
from .stats import median_ci, ratio_of_medians

STEP_RANGE = "nsys_cc:step"
SCOPES_TARGET = "gpu_model_runner: forward"
SCOPES_DRAFT = "gpu_model_runner: draft"
SCOPES_STEP_PREFIX = "llm_engine step: "
SCOPES_STEP = "llm_engine step: get_output"
# vLLM's scheduler scopes slot allocation for running requests only: a step without it schedules a new request.
SCOPES_ALLOCATE = "schedule: allocate_slots"
LABEL_RE = re.compile(r"^(?P<draft>.+)\.spec-g(?P<gamma>\d+)$")
# The forecast heatmap's α grid.
ALPHA_GRID = np.round(np.linspace(0.0, 1.0, 21), 2)

STEP_COLUMNS = ["step", "iteration", "kind", "start_ns", "step_ms", "target_ms", "tokens", "draft_ms", "draft_forwards",
                "other_ms"]
SPEC_COLUMNS = [
    "name", "draft", "gamma", "path", "step_rule", "steps", "iterations", "draft_forward_ms", "draft_forward_ms_ci95",
    "draft_forwards_per_step", "verify_ms", "verify_ms_ci95", "decode_ms", "decode_ms_ci95", "verify_factor",
    "verify_factor_ci95", "c_in_place", "c_in_place_ci95", "c_standalone", "c_standalone_ci95", "other_ms",
    "other_ms_ci95", "decode_other_ms", "step_ms", "step_ms_ci95", "decode_step_ms", "decode_step_ms_ci95",
    "draft_step_ms", "tokens_per_step", "tokens_per_step_metrics", "alpha", "alpha_source", "alpha_vllm",
    "measured_speedup", "measured_speedup_ci95", "bench_speedup", "bench_difference", "predicted_speedup",
    "forecast_error", "forecast_tolerance", "measurement_problem",
]
DECOMPOSITION_COLUMNS = ["name", "draft", "gamma", "order", "part", "factor", "before", "after"]
FORECAST_COLUMNS = ["draft", "gamma", "alpha", "alpha_source", "speedup", "best"]


@dataclass(frozen=True, eq=False)
class StepTable:
    """The engine steps of one trace (`steps`: STEP_COLUMNS, kept steps only), the draft forwards inside them
    (`draft_forwards`: step, wall_ms, payload) and how the steps were found."""

    steps: pd.DataFrame
    draft_forwards: pd.DataFrame
    rule: str
    rule_detail: str
    iterations: int
    forwards_per_iteration: float
    gamma_from_payload: int | None
    notes: tuple[str, ...] = ()
    latencies_s: np.ndarray | None = None  # vLLM's per-iteration latencies (X.bench.json), when known

    def of_kind(self, kind: str) -> pd.DataFrame:
        return self.steps[self.steps["kind"] == kind]


# The draft-forward range of a speculative run: the plugin's, else vLLM's own scope.
DRAFT_NAMES = (DRAFT_RANGE, SCOPES_DRAFT)


def draft_range_of(ranges: pd.DataFrame) -> str | None:
    """The draft-forward range name of a speculative trace (plugin or vLLM scopes), None for a plain trace."""
    for name in DRAFT_NAMES:
        if matches(ranges, (name,)).any():
            return name
    return None


# Every range the analysis looks at besides the forwards: warm-up and iteration markers, speculative steps and
# drafts (plugin and vLLM scopes), the tensor-parallel all-reduce. `marked_ranges` reads only these.
MARKERS = (WARMUP_RANGE, ITERATION_RANGE, DRAFT_RANGE, STEP_RANGE, SCOPES_TARGET, SCOPES_DRAFT, SCOPES_ALLOCATE,
           ALL_REDUCE_RANGE)
MARKER_PREFIXES = (SCOPES_STEP_PREFIX,)


# The columns of `Trace.nvtx_ranges()` the analysis uses (the nullable nesting, domain and category columns cost
# a copy of their values and masks on every selection of millions of rows).
MARKED_COLUMNS = ["range_id", "name", "qualified_name", "start_ns", "end_ns", "duration_ns", "global_tid", "pid", "tid",
                  "ended_on_other_thread", "payload", "open_at_end"]


def marked_ranges(trace: Trace, *range_names: str) -> pd.DataFrame:
    """The ranges named `range_names` (the forwards) and the `MARKERS`, without nesting, in `MARKED_COLUMNS`: what
    the analysis of a trace reads of it. On an NVTX-heavy trace SQLite leaves every other range out of the read."""
    ranges = trace.nvtx_ranges(names=[*range_names, *MARKERS], prefixes=MARKER_PREFIXES, nesting=False)
    return ranges[MARKED_COLUMNS]


def is_speculative(path: str | os.PathLike) -> bool:
    """Whether the trace at `path` holds draft-model forward ranges (a speculative-decoding run)."""
    with open_trace(str(path)) as trace:
        return draft_range_of(trace.nvtx_ranges(names=DRAFT_NAMES, nesting=False)) is not None


def _closed(df: pd.DataFrame) -> pd.DataFrame:
    if "open_at_end" in df:
        df = df[~df["open_at_end"].to_numpy(dtype=bool)]
    return df.sort_values("start_ns", kind="stable").reset_index(drop=True)


def _scope_steps(ranges: pd.DataFrame) -> pd.DataFrame:
    """Engine steps of a vLLM-scopes trace: each `llm_engine step: get_output` range together with the
    `llm_engine step: …` ranges after it (process_outputs, abort_requests, record_stats), up to the next
    get_output: start = get_output's start, end = the last of them's end (LLMEngine.step as vLLM scopes it)."""
    eng = ranges[matches(ranges, (), (SCOPES_STEP_PREFIX,))]
    eng = _closed(eng)
    if eng.empty or not (eng["name"] == SCOPES_STEP).any():
        return eng.iloc[0:0]
    group = (eng["name"] == SCOPES_STEP).cumsum().to_numpy()
    eng = eng[group > 0].assign(group=group[group > 0])
    out = eng.groupby("group").agg(start_ns=("start_ns", "min"), end_ns=("end_ns", "max")).reset_index(drop=True)
    out["duration_ns"] = out["end_ns"] - out["start_ns"]
    return out


def step_table(ranges: pd.DataFrame, target_range: str, *, gamma: int | None = None,
               speculative: bool = False) -> StepTable:
    """The engine steps of a trace (plain or speculative) from its NVTX ranges (`Trace.nvtx_ranges()`).
    `speculative`: the trace is a speculative run even without draft-forward ranges (a proposer without a draft
    model, such as vLLM's ngram): its target forwards of 2…γ + 1 tokens per sequence are verify forwards."""
    notes: list[str] = []
    draft_name = draft_range_of(ranges)
    if draft_name == SCOPES_DRAFT and target_range == "model_executable()":
        target_range = SCOPES_TARGET
    target = _closed(select(ranges, target_range))
    if target.empty:
        raise InputError(f"no {target_range!r} ranges (target forwards) in the trace")
    drafts = _closed(select(ranges, draft_name)) if draft_name else target.iloc[0:0]
    warm = markers(ranges, (WARMUP_RANGE,))
    iters = markers(ranges, (WARMUP_RANGE, ITERATION_RANGE))

    def measured(df: pd.DataFrame) -> pd.DataFrame:
        if warm.empty or df.empty:
            return df
        return df[_containing(df["start_ns"].to_numpy(), warm) < 0].reset_index(drop=True)

    target, drafts = measured(target), measured(drafts)
    if warm.empty:
        notes.append(f"no '{WARMUP_RANGE}' ranges: every step kept (the first iterations may be warm-up)")
    if target.empty:
        raise InputError(f"every {target_range!r} range ran inside a warm-up iteration")
    t_start = target["start_ns"].to_numpy()
    t_iter = _containing(t_start, iters)
    batch = np.ones(len(target))
    if not iters.empty:
        payload = iters["payload"].to_numpy(dtype=float)
        batch = np.where(t_iter >= 0, np.nan_to_num(payload[np.clip(t_iter, 0, None)], nan=1.0), 1.0)
    tokens = target["payload"].to_numpy(dtype=float) / np.maximum(batch, 1)
    wall = target["duration_ns"].to_numpy(dtype=float) / 1e6
    kind = np.full(len(target), "decode", dtype=object)
    gamma_payload = None
    speculating = bool(draft_name) or speculative
    if np.isfinite(tokens).all():
        if speculating:
            v = verify_tokens(tokens)
            if v is not None:
                gamma_payload = round(v) - 1
                # without draft forwards a step verifies 1 + what the proposer found (0…γ): γ + 1 is the limit
                limit = (v if gamma is None else max(v, gamma + 1)) if draft_name else \
                    (gamma + 1 if gamma is not None else v)
                kind[(tokens > 1) & (tokens <= limit)] = "verify"
                kind[tokens > limit] = "prefill"
        else:
            kind[tokens > 1] = "prefill"
    else:
        tokens = np.full(len(target), np.nan)
        scope_steps = measured(_scope_steps(ranges))
        allocate = select(ranges, SCOPES_ALLOCATE)
        if (t_iter >= 0).all():
            first = np.r_[True, t_iter[1:] != t_iter[:-1]]
            how = "the first target forward of each iteration"
        elif len(scope_steps) and len(allocate):
            step_of = _containing(t_start, scope_steps)
            has_alloc = np.zeros(len(scope_steps), dtype=bool)
            a_step = _containing(allocate["start_ns"].to_numpy(), scope_steps)
            has_alloc[a_step[a_step >= 0]] = True
            first = (step_of >= 0) & ~has_alloc[np.clip(step_of, 0, None)]
            how = (f"a forward whose engine step has no '{SCOPES_ALLOCATE}' scope (vLLM scopes that for running "
                   "requests only, so such a step schedules a new request)")
        else:
            ratio, n_low = best_split(wall)
            first = wall > np.sort(wall)[n_low - 1] if ratio >= 1.5 else np.zeros(len(wall), dtype=bool)
            how = f"the slow group of target forwards ({ratio:.1f}× gap)" if ratio >= 1.5 else "none (no gap)"
        kind[first] = "prefill"
        if speculating:
            kind[~first] = "verify"
            if gamma is not None:
                tokens[~first] = gamma + 1
        else:
            tokens[~first] = 1
        notes.append(f"the target forwards carry no token payload: prefill taken as {how}")

    d_start = drafts["start_ns"].to_numpy() if len(drafts) else np.array([], dtype=np.int64)
    d_wall = drafts["duration_ns"].to_numpy(dtype=float) / 1e6 if len(drafts) else np.array([])
    d_payload = drafts["payload"].to_numpy(dtype=float) if len(drafts) else np.array([])
    steps_r = measured(_closed(select(ranges, STEP_RANGE)))
    rule, detail = "step ranges", f"the trace's '{STEP_RANGE}' ranges around each engine step"
    if steps_r.empty:
        steps_r = measured(_scope_steps(ranges))
        rule = "vLLM step scopes"
        detail = (f"vLLM's own scopes: from each '{SCOPES_STEP}' to the end of the '{SCOPES_STEP_PREFIX}…' ranges "
                  "after it (LLMEngine.step)")
    if len(steps_r):
        s_start = steps_r["start_ns"].to_numpy()
        s_end = steps_r["end_ns"].to_numpy()
        s_ms = steps_r["duration_ns"].to_numpy(dtype=float) / 1e6
        t_step = _containing(t_start, steps_r)
        d_step = _containing(d_start, steps_r) if len(d_start) else np.array([], dtype=int)
        s_iter = _containing(s_start, iters)
        del s_end
    else:
        rule = "forward to forward"
        detail = (f"no '{STEP_RANGE}' ranges: a step runs from one target forward's start to the next one's "
                  "in the same iteration; the last forward of each iteration closes no step and is not counted")
        nxt_same = np.r_[t_iter[1:] == t_iter[:-1], False]
        if (t_iter < 0).all():
            nxt_same = np.r_[kind[1:] != "prefill", False]
        keep = np.flatnonzero(nxt_same)
        s_start = t_start[keep]
        s_ms = (t_start[keep + 1] - t_start[keep]) / 1e6
        s_iter = t_iter[keep]
        t_step = np.full(len(target), -1)
        t_step[keep] = np.arange(keep.size)
        pos = np.searchsorted(t_start, d_start, side="right") - 1
        d_step = np.where(pos >= 0, t_step[np.clip(pos, 0, None)], -1) if len(d_start) else np.array([], dtype=int)
        dropped = int(len(target) - keep.size)
        if dropped:
            notes.append(f"{dropped} target forward(s) close no step (last of their iteration): not counted")
    n_steps = len(s_start)
    count_t = np.bincount(t_step[t_step >= 0], minlength=n_steps)
    sum_t = np.bincount(t_step[t_step >= 0], weights=wall[t_step >= 0], minlength=n_steps)
    tok = np.full(n_steps, np.nan)
    knd = np.full(n_steps, "empty", dtype=object)
    inside = t_step >= 0
    tok[t_step[inside]] = tokens[inside]
    knd[t_step[inside]] = kind[inside]
    knd[count_t > 1] = "mixed"
    dmask = d_step >= 0 if len(d_start) else np.array([], dtype=bool)
    count_d = np.bincount(d_step[dmask], minlength=n_steps) if len(d_start) else np.zeros(n_steps, dtype=int)
    sum_d = np.bincount(d_step[dmask], weights=d_wall[dmask], minlength=n_steps) if len(d_start) else np.zeros(n_steps)
    steps = pd.DataFrame({
        "step": np.arange(n_steps), "iteration": s_iter, "kind": knd, "start_ns": s_start, "step_ms": s_ms,
        "target_ms": sum_t, "tokens": tok,
        "draft_ms": sum_d, "draft_forwards": count_d if draft_name != SCOPES_DRAFT else np.full(n_steps, np.nan),
        "other_ms": s_ms - sum_t - sum_d,
    })[STEP_COLUMNS]
    odd = {k: int((knd == k).sum()) for k in ("empty", "mixed") if (knd == k).any()}
    if odd:
        notes.append("steps left out: " + ", ".join(f"{n} {k} (" + ("no target forward" if k == "empty" else
                                                                     "several target forwards") + ")"
                                                      for k, n in odd.items()))
        steps = steps[~steps["kind"].isin(("empty", "mixed"))]
    draft_fw = pd.DataFrame({"step": d_step, "wall_ms": d_wall, "payload": d_payload})
    measured_iters = np.unique(t_iter[t_iter >= 0])
    n_prefill = int((kind == "prefill").sum())
    if measured_iters.size:
        per_iter = float(pd.Series(t_iter[t_iter >= 0]).value_counts().median())
    elif n_prefill:  # no iteration ranges: each iteration starts with its prefill
        per_iter = len(target) / n_prefill
        notes.append(f"no iteration ranges: {n_prefill} iterations counted by their prefill forwards")
    else:
        per_iter = math.nan
    if draft_name == SCOPES_DRAFT:
        notes.append(f"draft time per step is vLLM's '{SCOPES_DRAFT}' range (the proposer, its draft forwards and "
                     "its own overhead); one draft forward is taken as that ÷ γ")
    return StepTable(steps.reset_index(drop=True), draft_fw, rule, detail, int(measured_iters.size or n_prefill),
                     float(per_iter), gamma_payload, tuple(notes))


def read_step_table(path: str | os.PathLike, target_range: str, *, gamma: int | None = None,
                    speculative: bool = False) -> StepTable:
    """`step_table` of the trace at `path`."""
    with open_trace(str(path)) as trace:
        table = step_table(marked_ranges(trace, target_range), target_range, gamma=gamma, speculative=speculative)
    return dataclasses.replace(table, latencies_s=bench_latencies(path))


def trace_stem(path: str | os.PathLike) -> str:
    """The path without `.sqlite` / `.nsys-rep`: where `X.metrics.json` and `X.bench.json` sit beside `X.sqlite`."""
    return os.fspath(path).removesuffix(".sqlite").removesuffix(".nsys-rep")


def bench_latencies(path: str | os.PathLike) -> np.ndarray | None:
    """vLLM's per-iteration latencies (s) from `X.bench.json` beside the trace, None when there is none."""
    bench = trace_stem(path) + ".bench.json"
    try:
        with open(bench, encoding="utf-8") as fh:
            lat = json.load(fh).get("latencies")
    except (OSError, ValueError, AttributeError):
        return None
    arr = np.asarray(lat if isinstance(lat, list) else [], dtype=float)
    return arr if arr.size else None


def alpha_from_tokens(tokens_per_step: float, gamma: int) -> float:
    """The α whose expected tokens per step E(α, γ) equals `tokens_per_step` (bisection; E rises with α)."""
    if not (math.isfinite(tokens_per_step) and gamma >= 1):
        return math.nan
    if tokens_per_step <= 1:
        return 0.0
    if tokens_per_step >= gamma + 1:
        return 1.0
    lo, hi = 0.0, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        if float(expected_tokens(mid, gamma)) < tokens_per_step:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


@dataclass
class SpecRun:
    """One speculative run as read: its label, draft, γ, steps and vLLM's counters and latencies."""

    name: str
    draft: str
    gamma: int
    path: str
    steps: StepTable
    acceptance: acceptance_mod.AcceptanceStats | None
    metrics_path: str | None
    latencies_s: np.ndarray | None
    notes: list[str] = field(default_factory=list)


def draft_of(name: str, drafts: Sequence[str], model: bool = True) -> str:
    """The draft a speculative run belongs to: the label before `.spec-g<γ>` when it is one of `drafts` (or, for a
    proposer without a draft model, `model=False`, whatever it is: `ngram`), else the only draft, else that label (a
    draft without a plain run: no standalone c)."""
    m = LABEL_RE.match(name)
    if m and (m.group("draft") in drafts or not model):
        return m.group("draft")
    if len(drafts) == 1:
        return drafts[0]
    if m:
        return m.group("draft")
    raise InputError(f"speculative trace {name!r}: cannot tell its draft; label it '<draft>.spec-g<γ>' (names=)")


def beside_metrics(path: str | os.PathLike, metrics_path: str | os.PathLike | None = None) -> str | None:
    """The metrics dump of a trace: `metrics_path` when given, else `X.metrics.json` beside `X.sqlite` when present."""
    if metrics_path is not None:
        return os.fspath(metrics_path)
    beside = trace_stem(path) + ".metrics.json"
    return beside if os.path.exists(beside) else None


# vLLM's proposers that run no draft model: their runs hold no draft-forward ranges (nothing to range).
MODEL_FREE_METHODS = ("ngram", "ngram_gpu", "suffix")


def model_free_label(label: str) -> bool:
    """Whether a run's label names a proposer without a draft model (`ngram.spec-g3`, as `profile` labels it)."""
    m = LABEL_RE.match(label)
    return m is not None and m.group("draft") in MODEL_FREE_METHODS


def proposes_without_model(path: str | os.PathLike, metrics_path: str | os.PathLike | None = None) -> bool:
    """Whether a trace without draft-forward ranges is a speculative run all the same: its metrics dump (beside it,
    or `metrics_path`) holds vLLM's spec-decode counters, as a run of a proposer without a draft model (vLLM's
    ngram) leaves them. A plain run dumps no metrics; a dump that cannot be read says nothing."""
    dump = beside_metrics(path, metrics_path)
    if dump is None:
        return False
    try:
        return acceptance_mod.load(dump).num_speculative_tokens > 0
    except InputError:
        return False


def load_run(path: str, name: str, draft: str, target_range: str, metrics_path: str | None = None, *,
             ranges: pd.DataFrame | None = None) -> SpecRun:
    """Read one speculative run: its steps, the metrics dump (`metrics_path`, else `X.metrics.json` beside the
    trace when present) and vLLM's latencies (`X.bench.json`). `ranges`: the trace's ranges as already read
    (`marked_ranges`, e.g. one engine's part of an interleaved trace); without them the trace at `path` is read."""
    notes: list[str] = []
    beside = trace_stem(path) + ".metrics.json"
    if metrics_path is None and os.path.exists(beside):
        metrics_path = beside
    stats = acceptance_mod.load(metrics_path) if metrics_path else None
    gamma_label = LABEL_RE.match(name)
    gamma = stats.num_speculative_tokens if stats is not None else None
    if ranges is None:
        table = read_step_table(path, target_range, gamma=gamma, speculative=True)
    else:
        table = dataclasses.replace(step_table(ranges, target_range, gamma=gamma, speculative=True),
                                    latencies_s=bench_latencies(path))
    if table.draft_forwards.empty:
        notes.append(f"{name}: no draft-model forwards (a proposer without a draft model, such as ngram): a draft "
                     "forward costs nothing here, the proposer's work is in the time outside the forwards")
    if gamma is None:
        gamma = table.gamma_from_payload
        if gamma is None and gamma_label:
            gamma = int(gamma_label.group("gamma"))
            notes.append(f"{name}: γ = {gamma} from its label (no metrics dump, no verify payload)")
    if gamma is None:
        raise InputError(f"{path}: cannot tell γ (no metrics dump, no verify payload, no '.spec-g<γ>' label)")
    if gamma_label and int(gamma_label.group("gamma")) != gamma:
        notes.append(f"{name}: its label says γ = {gamma_label.group('gamma')}, the run used γ = {gamma}")
    if stats is None:
        notes.append(f"{name}: no metrics dump ({os.path.basename(beside)}): α inferred from the tokens per step")
    notes += [f"{name}: {n}" for n in table.notes]
    return SpecRun(name, draft, int(gamma), str(path), table, stats, metrics_path, table.latencies_s, notes)


def _ci(lo: float, hi: float) -> list[float]:
    return [lo, hi]


@dataclass
class SpeculativeAnalysis:
    """Everything measured and predicted about the speculative runs (each table is a DataFrame).

    - `table`: one row per run (SPEC_COLUMNS; `*_ci95` are [low, high]; `predicted_speedup` a dict).
    - `decomposition`: the waterfall factors per run (DECOMPOSITION_COLUMNS; see the module docstring).
    - `models`: the `StepCostModel` of each draft, fitted on all its runs.
    - `forecast`: speedup at γ = 1…8 at each draft's measured α and each given α (FORECAST_COLUMNS).
    - `grid`: the forecast over γ = 1…8 × α in ALPHA_GRID for the heatmap (draft, gamma, alpha, speedup, best:
      whether that γ is the best of 1…8 at that α).
    - `best`: per draft and α, the best γ in 1…16 and its forecast speedup.
    - `steps`: every kept step of every run, plain target included (`run` column).
    - `notes`: how steps were found, what was left out, where α came from.
    """

    table: pd.DataFrame
    decomposition: pd.DataFrame
    models: dict[str, forecast_mod.StepCostModel]
    forecast: pd.DataFrame
    grid: pd.DataFrame
    best: pd.DataFrame
    steps: pd.DataFrame
    notes: list[str]


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
    after_prefill = run.steps.steps[run.steps.steps["kind"].isin(("verify", "decode"))]
    counted = after_prefill[after_prefill["iteration"] >= 0]
    if math.isfinite(output_len) and len(counted) and run.steps.rule != "forward to forward":
        per_iter = counted.groupby("iteration").size().median()
        return (output_len - 1) / per_iter, metrics
    if math.isfinite(output_len) and math.isfinite(run.steps.forwards_per_iteration):
        # every forward but the prefill is a step, counted or not (the last one closes none)
        return (output_len - 1) / (run.steps.forwards_per_iteration - 1), metrics
    return metrics, metrics


def _fit(decode_step: float, runs: Sequence[SpecRun]) -> forecast_mod.StepCostModel | None:
    parts = []
    for r in runs:
        v = r.steps.of_kind("verify")
        if v.empty:
            continue
        parts.append((r.gamma, float(np.median(v["draft_ms"])) / r.gamma, float(np.median(v["target_ms"])),
                      float(np.median(v["other_ms"]))))
    if not parts:
        return None
    g, d, vv, o = zip(*parts)
    return forecast_mod.fit(decode_step, g, d, vv, o, draft_weights=g)


def analyze_speculative(
    plain: StepTable,
    runs: Sequence[SpecRun],
    *,
    c_standalone: Mapping[str, tuple[float, float, float]] | None = None,
    output_len: int | None = None,
    acceptance: Sequence[float] = (),
    seed: int = 0,
) -> SpeculativeAnalysis:
    """Measured figures, the decomposition and the forecast for speculative runs against the plain target run.

    Args:
        plain: the plain target run's steps (`step_table`): its decode steps are the baseline.
        runs: the speculative runs (`load_run`).
        c_standalone: per draft label, (c, low, high) of the plain runs (decode, wall); NaN when absent.
        output_len: output tokens per sequence per iteration (default: the plain run's forwards per iteration).
        acceptance: extra α values for the forecast.
        seed: bootstrap seed.
    """
    notes: list[str] = []
    c_standalone = dict(c_standalone or {})
    decode = plain.of_kind("decode")
    if decode.empty:
        raise InputError("the plain target run has no decode step: profile it with an output length ≥ 2")
    out_len = float(output_len) if output_len else plain.forwards_per_iteration
    if not output_len and not math.isfinite(out_len):
        notes.append("output length unknown (no iteration ranges, no output_len): tokens per step from the metrics")
    d_fwd, d_lo, d_hi = median_ci(decode["target_ms"].to_numpy(), seed=seed)
    d_step, ds_lo, ds_hi = median_ci(decode["step_ms"].to_numpy(), seed=seed)
    decode_other = float(np.median(decode["other_ms"]))
    notes.append(f"plain target: steps from {plain.rule} ({plain.rule_detail})")
    by_draft: dict[str, list[SpecRun]] = {}
    for r in runs:
        by_draft.setdefault(r.draft, []).append(r)
        notes += r.notes
    models = {dr: m for dr, rs in by_draft.items() if (m := _fit(d_step, rs)) is not None}
    for dr, rs in by_draft.items():
        if dr in models and len({r.gamma for r in rs}) < 2:
            notes.append(f"{dr}: the cost model is fitted on one γ only: verify and outside time are taken as "
                         "constant in γ (profile two or more γ for a forecast at other γ)")
    rows, decomposition, step_frames = [], [], [plain.steps.assign(run="(plain target)")]
    for r in runs:
        v = r.steps.of_kind("verify")
        step_frames.append(r.steps.steps.assign(run=r.name))
        notes.append(f"{r.name}: steps from {r.steps.rule}")
        if v.empty:
            notes.append(f"{r.name}: no verify step was measured: left out")
            continue
        in_verify = r.steps.draft_forwards
        in_verify = in_verify[in_verify["step"].isin(v["step"].to_numpy())]
        if r.steps.steps["draft_forwards"].isna().all():  # vLLM scopes: one draft range per step
            draft_fw = v["draft_ms"].to_numpy() / r.gamma
        else:
            draft_fw = in_verify["wall_ms"].to_numpy()
        draft_ms, dr_lo, dr_hi = median_ci(draft_fw, seed=seed)
        verify_ms, v_lo, v_hi = median_ci(v["target_ms"].to_numpy(), seed=seed)
        other_ms, o_lo, o_hi = median_ci(v["other_ms"].to_numpy(), seed=seed)
        step_ms, s_lo, s_hi = median_ci(v["step_ms"].to_numpy(), seed=seed)
        vf = ratio_of_medians(v["target_ms"].to_numpy(), decode["target_ms"].to_numpy(), seed=seed)
        cin = ratio_of_medians(draft_fw, v["target_ms"].to_numpy(), seed=seed)
        cst = c_standalone.get(r.draft, (math.nan,) * 3)
        tps, tps_metrics = _tokens_per_step(r, out_len)
        if r.acceptance is not None and math.isfinite(r.acceptance.alpha_iid):
            alpha, source, alpha_vllm = r.acceptance.alpha_iid, "metrics", r.acceptance.alpha
        else:
            alpha, source, alpha_vllm = alpha_from_tokens(tps, r.gamma), "tokens per step", math.nan
        sp = ratio_of_medians(decode["step_ms"].to_numpy(), v["step_ms"].to_numpy(), seed=seed)
        measured = (tps * sp[0], tps * sp[1], tps * sp[2])
        bench = _bench_speedup(plain, r, out_len)
        leviathan = float(walltime_factor(alpha, r.gamma, cst[0])) if math.isfinite(cst[0]) else math.nan
        model = models.get(r.draft)
        predicted: dict = {"leviathan": leviathan,
                     "cost_model": float(model.speedup(alpha, r.gamma)) if model else math.nan}
        others = [o for o in by_draft[r.draft] if o is not r and o.gamma != r.gamma]
        held = _fit(d_step, others) if len({o.gamma for o in others}) >= 2 else None
        predicted["cost_model_held_out"] = float(held.speedup(alpha, r.gamma)) if held else math.nan
        predicted["held_out_fit_gammas"] = sorted({o.gamma for o in others}) if held else []
        error = tolerance = math.nan
        if held:
            error = predicted["cost_model_held_out"] / measured[0] - 1
            tolerance = _tolerance(_uncertainty(r, seed), [_uncertainty(o, seed) for o in others])
        draft_step = float(np.median(v["draft_ms"]))
        impossible = plausibility.problems(name=r.name, measured=measured[0], alpha=alpha, tokens_per_step=tps,
                                           interval=(measured[1], measured[2]))
        rows.append({
            "name": r.name, "draft": r.draft, "gamma": r.gamma, "path": r.path, "step_rule": r.steps.rule,
            "steps": len(v), "iterations": r.steps.iterations,
            "draft_forward_ms": draft_ms, "draft_forward_ms_ci95": _ci(dr_lo, dr_hi),
            "draft_forwards_per_step": float(np.median(v["draft_forwards"])) if v["draft_forwards"].notna().any()
            else math.nan,
            "verify_ms": verify_ms, "verify_ms_ci95": _ci(v_lo, v_hi), "decode_ms": d_fwd,
            "decode_ms_ci95": _ci(d_lo, d_hi), "verify_factor": vf[0], "verify_factor_ci95": _ci(vf[1], vf[2]),
            "c_in_place": cin[0], "c_in_place_ci95": _ci(cin[1], cin[2]), "c_standalone": cst[0],
            "c_standalone_ci95": _ci(cst[1], cst[2]), "other_ms": other_ms, "other_ms_ci95": _ci(o_lo, o_hi),
            "decode_other_ms": decode_other, "step_ms": step_ms, "step_ms_ci95": _ci(s_lo, s_hi),
            "decode_step_ms": d_step, "decode_step_ms_ci95": _ci(ds_lo, ds_hi), "draft_step_ms": draft_step,
            "tokens_per_step": tps, "tokens_per_step_metrics": tps_metrics, "alpha": alpha, "alpha_source": source,
            "alpha_vllm": alpha_vllm, "measured_speedup": measured[0],
            "measured_speedup_ci95": _ci(measured[1], measured[2]), "bench_speedup": bench,
            "bench_difference": bench / measured[0] - 1 if math.isfinite(bench) else math.nan,
            "predicted_speedup": predicted, "forecast_error": error, "forecast_tolerance": tolerance,
            "measurement_problem": "; ".join(impossible),
        })
        notes += impossible
        decomposition += _decompose(r.name, r.draft, r.gamma, tps, d_step, d_fwd, verify_ms, draft_step, other_ms,
                                    step_ms)
    table = pd.DataFrame(rows, columns=SPEC_COLUMNS)
    forecast, grid, best = _forecasts(models, by_draft, acceptance, out_len)
    steps = pd.concat(step_frames, ignore_index=True)
    return SpeculativeAnalysis(table, pd.DataFrame(decomposition, columns=DECOMPOSITION_COLUMNS), models, forecast,
                               grid, best, steps, notes)


def _uncertainty(run: SpecRun, seed: int) -> float:
    """How well a run's median verify step is known, relative to it: the larger of the half-width of its 95 %
    bootstrap interval (steps resampled) and half the range of its iterations' own medians (steps of one iteration
    share that moment's machine load, so they are not independent draws: on a loaded machine the iterations
    disagree by more than the step bootstrap says)."""
    v = run.steps.of_kind("verify")
    med, lo, hi = median_ci(v["step_ms"].to_numpy(), seed=seed)
    if not med > 0:
        return math.nan
    half = max(med - lo, hi - med) / med
    per_iter = v[v["iteration"] >= 0].groupby("iteration")["step_ms"].median()
    if len(per_iter) >= 2:
        half = max(half, float(per_iter.max() - per_iter.min()) / 2 / med)
    return half


def _tolerance(held_out: float, fitted: Sequence[float]) -> float:
    """How far a forecast may miss a run it was not fitted on, from the runs' own uncertainty (`_uncertainty`) of
    their median verify step (the plain decode step divides forecast and measurement alike and cancels): the root sum
    of squares of the held-out run's and the largest among the fitted runs' (the forecast rests on medians known only
    that well)."""
    return float(math.hypot(held_out, max(fitted, default=0.0)))


def _bench_speedup(plain: StepTable, run: SpecRun, out_len: float) -> float:
    """(L_plain − P_plain) ÷ (L_spec − P_spec) from vLLM's latencies, NaN without both bench files."""
    plain_lat = plain.latencies_s
    if plain_lat is None or run.latencies_s is None:
        return math.nan
    pp = plain.of_kind("prefill")["step_ms"]
    ps = run.steps.of_kind("prefill")["step_ms"]
    if pp.empty or ps.empty:
        return math.nan
    num = float(np.median(plain_lat)) * 1e3 - float(np.median(pp))
    den = float(np.median(run.latencies_s)) * 1e3 - float(np.median(ps))
    return num / den if den > 0 else math.nan


def _decompose(name: str, draft: str, gamma: int, tps: float, d: float, f: float, v: float, r: float, o: float,
               t: float) -> list[dict]:
    """The waterfall factors of one run (see the module docstring), in order, then the measured end."""
    factors = [("tokens per step", tps), ("verify ≠ decode", d / (d + v - f)),
               ("draft forwards", (d + v - f) / (d + v - f + r)), ("outside time", (d + v - f + r) / (v + r + o)),
               ("medians do not add", (v + r + o) / t), ("measured", math.nan)]
    out, level = [], 1.0
    for i, (part, factor) in enumerate(factors):
        after = level if math.isnan(factor) else level * factor
        out.append({"name": name, "draft": draft, "gamma": gamma, "order": i, "part": part, "factor": factor,
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
            g_best, s_best = model.best_gamma(a)
            best.append({"draft": draft, "alpha": a, "alpha_source": src, "best_gamma": g_best,
                         "speedup": s_best, "max_gamma": forecast_mod.DEFAULT_MAX_GAMMA})
        s = np.asarray(model.speedup(ALPHA_GRID[None, :], gammas[:, None]), dtype=float)
        top = np.nanargmax(np.where(np.isfinite(s), s, -np.inf), axis=0)
        grid += [{"draft": draft, "gamma": int(g), "alpha": float(a), "speedup": float(s[i, j]), "best": i == top[j]}
                 for i, g in enumerate(gammas) for j, a in enumerate(ALPHA_GRID)]
    return (pd.DataFrame(rows, columns=FORECAST_COLUMNS),
            pd.DataFrame(grid, columns=["draft", "gamma", "alpha", "speedup", "best"]),
            pd.DataFrame(best, columns=["draft", "alpha", "alpha_source", "best_gamma", "speedup", "max_gamma"]))
