"""Engine steps of a vLLM run, from its NVTX ranges: which forwards ran in which step, and how long each step took.

A step is one engine step (vLLM's `EngineCore.step`: schedule, run the target model, sample, and in a speculative run
reject and propose the next drafts); nothing else in nsys_cc is called a step (a tensor-parallel forward, one range
per rank, is a forward: `ranks`). Steps, in order of precedence (`StepTable.rule` says which was used):
1. "step ranges": the `nsys_cc:step` ranges the plugin writes around each engine step; a forward belongs to the
   step its start lies in.
2. "engine step frames": in a torch trace, the engine's own step frames (vLLM's `…/engine/core.py(…): step`, where
   the engine core ran in the profiled process; SGLang's scheduler `run_batch`).
3. "vLLM step scopes": in a trace made with vLLM's own scopes, from each `llm_engine step: get_output` range to the
   end of the `llm_engine step: …` ranges after it (process_outputs, abort_requests, record_stats): LLMEngine.step.
4. "forward to forward": without either, a step runs from the start of one target forward to the start of the
   next one of the same iteration (`nsys_cc:iteration` ranges; without them, up to the next forward unless it is a
   prefill); the draft forwards in between are its drafts. The last forward of each iteration closes no step, so
   its step is not counted.

Target forwards are the ranges named `range_name` (in a trace of vLLM's own scopes, `gpu_model_runner: forward` when
the default range was asked for); draft forwards are `draft_model_executable()` or vLLM's `gpu_model_runner: draft`.
Warm-up and phases follow the rules of the plain analysis (`phases`): forwards and steps that start inside warm-up
are dropped (`phases.warmup_mask`); a target forward's kind is its phase from its token payload (tokens per sequence,
`phases.tokens_per_sequence`; prefill, decode, or in a speculative run verify: `phases.payload_phases`, with γ + 1 at
least the run's γ + 1 when the metrics dump says it). Target forwards without a token payload (vLLM's scopes):
prefill is the first forward of each iteration, else a forward whose engine step has no `schedule: allocate_slots`
scope (vLLM scopes slot allocation for running requests only), else the slow group of the forward times
(`phases.slow_group`); the others are verify forwards in a speculative run, decode forwards otherwise. A step's kind is
the phase of its target forward; a step without one is "empty", with several "mixed" (both left out, with a note).

Per step: step_ms; target_ms (its target forward); draft_ms (its draft forwards, summed) and draft_forwards (how many;
NaN with vLLM's draft scope, one range around all of a step's drafts); other_ms = step − target − drafts (scheduling,
sampling, rejection, bookkeeping: everything outside a forward).

The same on the GPU metrics (`STEP_METRICS`: gpu_span, kernel_sum, gpu_busy) when the forward ranges carry them (their
`<metric>_ns` columns: `with_gpu_metrics` projects a trace's forward and draft ranges onto the GPU, `with_forwards`
hands on a model's): target_<metric>_ms, draft_<metric>_ms (the step's forwards' values of that metric, summed) and
other_<metric>_ms = step − target − drafts on that metric (on gpu_busy: the time in the step the forwards' GPU work
does not cover, the GPU's idle time), and per draft forward `<metric>_ms`. A forward whose value is unknown (it
launched nothing the trace recorded, or a CUDA graph recorded whole for kernel_sum) makes its step's values of that
metric NaN: unknown, not 0. `metric_columns` names the columns of a metric, wall included.

A step's time: step_ms is its CPU time (its launch time on a GPU trace); on a GPU trace (the windows `with_gpu_metrics`
projects) STEP_GPU is its time from its start to the end of the GPU work launched in it — after the GPU work of the
steps before it where that still ran then (asynchronous scheduling) — what the user waits for (`step_windows`), and
other_<metric>_ms is that less the forwards on the metric. `step_time_column` names a metric's step time.

The functions that find the steps are `step_rules`'; `step_table` puts them together (each piece ≤ 100 lines).
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ...contract import (
    DRAFT_LOGITS_RANGE,
    DRAFT_SAMPLE_RANGE,
    DRAFT_STEP_RANGES,
    LOGITS_RANGE,
    PROPOSE_RANGE,
    SAMPLE_RANGE,
    SCOPES_POSTPROCESS,
    SCOPES_SAMPLE,
    STEP_CONTEXT_RANGE,
    VLLM_SAMPLE_RANGE,
    VLLM_STEP_RANGE,
)
from ...trace.nvtx import matches
from ...trace.source import handed_out
from ..metrics import BY_NAME, EMPTY, METRICS, MIXED, PREFILL, VERIFY, WALL
from ..profile_dir.latencies import latencies_beside
from . import step_rules, step_windows
from .engine_marks import ENGINE_COLUMN, engine_of, label as marker_label
from .ranges import draft_range_of, forward_range, marked_ranges, select
from .step_rules import Forwards, Found
from .step_windows import closed

STEP_COLUMNS = ["step", "iteration", "kind", "start_ns", "step_ms", "target_ms", "tokens", "draft_ms", "draft_forwards",
                "other_ms"]
# Beside them on every table: each step's total context (Σ over its requests of the tokens computed before it and
# scheduled in it — the K/V its attention reads, docs/definitions.md): from the plugin's `nsys_cc:step_context` range
# inside the step, or from the engine's detailed step annotation (`sk`); NaN where the trace does not say.
CONTEXT = "context"
# On a GPU trace, beside them: each step's time from its start to the end of its GPU work (`step_windows`), ms.
STEP_GPU = "step_gpu_ms"
# The metrics a step is measured on besides wall (`metrics.METRICS`: the GPU ones that get a c).
STEP_METRICS: tuple[str, ...] = tuple(m.name for m in METRICS if m.gpu and m.coefficient)


# The rest of a token's work in a step (issue 29), each part's ranges summed per step: the target's logits and
# sampling (the plugin's ranges, else vLLM's postprocess and sample scopes), the draft's logits and sampling, and a
# model-free proposer's proposing. A part's range belongs to the step its start lies in (as a draft forward does).
TARGET_PARTS: dict[str, tuple[str, str]] = {  # part → (the plugin's range, vLLM's own scope)
    "target_logits": (LOGITS_RANGE, SCOPES_POSTPROCESS), "target_sample": (SAMPLE_RANGE, SCOPES_SAMPLE)}
DRAFT_PARTS: dict[str, str] = {"draft_logits": DRAFT_LOGITS_RANGE, "draft_sample": DRAFT_SAMPLE_RANGE,
                               "propose": PROPOSE_RANGE}
STEP_PARTS: tuple[str, ...] = (*TARGET_PARTS, *DRAFT_PARTS)
# The target's parts of vLLM's step annotations in a torch trace (`vllm_steps`): the sampling frame after each step.
VLLM_TARGET_PARTS: dict[str, str] = {"target_sample": VLLM_SAMPLE_RANGE}
# Every range name a part can have (what `with_gpu_metrics` projects beside the forwards).
PART_RANGES: tuple[str, ...] = (*(n for pair in TARGET_PARTS.values() for n in pair), *DRAFT_PARTS.values(),
                                *VLLM_TARGET_PARTS.values())
# Per step beside STEP_COLUMNS: the parts' times (NaN when the trace has no range of that part at all: unknown), the
# step's first draft range (the catch-up forward over the tokens just verified) and its payload, the later draft
# ranges summed, the draft ranges counted, and the time outside every forward and part (`other_token_ms`).
PART_STEP_COLUMNS = [*(f"{p}_ms" for p in STEP_PARTS), "draft_catchup_ms", "draft_catchup_tokens", "draft_later_ms",
                     "draft_ranges", "other_token_ms"]


def part_columns(metric: str) -> dict[str, str]:
    """The step columns of `metric` (wall or one of STEP_METRICS) for each of STEP_PARTS, the catch-up and later draft
    forwards ("draft_catchup", "draft_later") and the time outside forwards and parts ("other_token")."""
    suffix = "_ms" if metric == WALL else f"_{metric}_ms"
    if metric != WALL and metric not in STEP_METRICS:
        raise ValueError(f"steps are not measured on {metric!r} (wall, {', '.join(STEP_METRICS)})")
    return {p: p + suffix for p in (*STEP_PARTS, "draft_catchup", "draft_later", "other_token")}


def forwards_held(kind: np.ndarray, d_step: np.ndarray, payload: np.ndarray, gamma: int | None) -> np.ndarray:
    """How many draft forwards each draft range holds (issue 29 item 5(b)). A verify step drafts γ tokens with γ
    forwards: the first over the tokens just verified (the catch-up), then γ − 1 of one token per request. A range
    per forward (eager, piecewise or one graph per forward) holds one; a fused multi-step draft graph (V2's EAGLE/MTP
    `_fused_multi_step_decode`) replays the γ − 1 later ones as one range after the catch-up's, and those later ranges
    then hold γ − 1 between them, in proportion to their payloads (tokens × forwards when captured; equal shares
    without payloads); a single range for the whole step (a multi-module MTP graph) holds γ. Ranges outside verify
    steps, or with γ unknown, or more than γ in a step, hold one each. `kind`: each step's kind; `d_step`: each draft
    range's step (−1: none), in start order."""
    held = np.ones(len(d_step))
    if gamma is None or gamma < 2 or not len(d_step):
        return held
    for step in np.unique(d_step[d_step >= 0]):
        if kind[step] != VERIFY:
            continue
        mine = np.flatnonzero(d_step == step)
        n = mine.size
        if n >= gamma:
            continue
        if n == 1:
            held[mine] = gamma
            continue
        later = mine[1:]
        p = payload[later].astype(float)
        share = p / p.sum() if np.isfinite(p).all() and p.sum() > 0 else np.full(later.size, 1 / later.size)
        held[later] = (gamma - 1) * share
    return held


def metric_columns(metric: str) -> tuple[str, str, str, str]:
    """The columns of `metric` (wall or one of STEP_METRICS): (target, drafts, other) in `StepTable.steps`, and one
    draft forward's in `StepTable.draft_forwards`."""
    if metric == WALL:
        return "target_ms", "draft_ms", "other_ms", "wall_ms"
    if metric not in STEP_METRICS:
        raise ValueError(f"steps are not measured on {metric!r} (wall, {', '.join(STEP_METRICS)})")
    return f"target_{metric}_ms", f"draft_{metric}_ms", f"other_{metric}_ms", f"{metric}_ms"


def step_time_column(metric: str, steps: pd.DataFrame) -> str:
    """The column of a step's time on `metric` in `steps` (`StepTable.steps`): on a GPU metric the step's time to the
    end of its GPU work (STEP_GPU) where the trace has it, else — and on wall — its CPU time (step_ms; on a GPU trace,
    its launch time)."""
    return STEP_GPU if metric != WALL and STEP_GPU in steps else "step_ms"


@dataclass(frozen=True, eq=False)
class StepTable:
    """The engine steps of one trace (`steps`: STEP_COLUMNS then PART_STEP_COLUMNS, kept steps only), the draft
    forwards inside them (`draft_forwards`: step, wall_ms, payload, position in its step (0: the catch-up), forwards
    it holds (`forwards_held`)) and how the steps were found."""

    steps: pd.DataFrame
    draft_forwards: pd.DataFrame
    rule: str
    rule_detail: str
    iterations: int
    forwards_per_iteration: float
    gamma_from_payload: int | None
    notes: tuple[str, ...] = ()
    latencies_s: np.ndarray | None = None  # vLLM's per-iteration latencies (X.bench.json), when known
    parts: tuple[str, ...] = ()  # the STEP_PARTS the trace has ranges of (their step columns are NaN otherwise)
    part_source: str | None = None  # where the target's parts come from: "plugin", "vLLM scopes" (None: none)
    engine: str | None = None  # the engine whose own markers gave the steps ("vLLM", "SGLang"; None: the plugin's)
    # Every target forward outside warm-up, in start order (start_ns, kind, batch where its step annotation names
    # it), those that close no step included: the requests' lives (`speculative.runs.request_lives`) need each one.
    forwards: pd.DataFrame | None = None

    # Each kind's steps, selected once (the speculative figures ask for a table's decode or verify steps per metric
    # and interval); handed out as the caller's own frame.
    _kinds: dict[str, pd.DataFrame] = dataclasses.field(default_factory=dict, init=False, repr=False, compare=False)

    def of_kind(self, kind: str) -> pd.DataFrame:
        if kind not in self._kinds:
            self._kinds[kind] = self.steps[self.steps["kind"] == kind]
        return handed_out(self._kinds[kind])

    @property
    def metrics(self) -> tuple[str, ...]:
        """The metrics the steps are measured on: wall, then each of STEP_METRICS whose columns the steps have."""
        return (WALL, *(m for m in STEP_METRICS if metric_columns(m)[0] in self.steps))


def _gpu_metrics_of(forwards: pd.DataFrame) -> list[str]:
    """The STEP_METRICS the target forwards carry a value of (their `<metric>_ns` column, not all unknown)."""
    return [m for m in STEP_METRICS if BY_NAME[m].column in forwards and forwards[BY_NAME[m].column].notna().any()]


def with_gpu_metrics(trace, ranges: pd.DataFrame, range_name: str, *, windows: bool = True) -> pd.DataFrame:
    """`ranges` (a trace's ranges as read, `ranges.marked_ranges`, of the open `trace`) with the GPU metrics of its
    target and draft forward ranges and the token's parts (`projection.project`, columns `<metric>_ns` of
    STEP_METRICS; NaN where unknown and on every other range) and — `windows` — the windows each step can have,
    projected (`step_windows.with_windows`: a step's time to the end of its GPU work), for `step_table`; `ranges` as
    they are when the trace has no CUDA data. Reads the trace's CUDA tables, not its NVTX ranges again. `range_name`:
    the forward range as decided for this trace (`ranges.forward_range`), not decided again here."""
    if not trace.has_cuda:
        return ranges
    from .projection import project

    draft = draft_range_of(ranges)
    hit = matches(ranges, (range_name, *([draft] if draft else []), *PART_RANGES))
    out = ranges
    if hit.any():
        projected = project(trace, ranges[hit])
        # A part (logits, sampling, proposing) that launched nothing adds no GPU time (0, where a forward that
        # launched nothing is unknown): vLLM's CPU-side sampling work, say.
        idle_part = (matches(ranges[hit], PART_RANGES)
                     & (pd.to_numeric(projected["gpu_ops"], errors="coerce").fillna(0).to_numpy() == 0))
        out = ranges.copy(deep=False)
        for metric in STEP_METRICS:
            m = BY_NAME[metric]
            values = np.full(len(ranges), np.nan)
            got = pd.to_numeric(projected[m.source], errors="coerce").to_numpy(dtype=float, na_value=np.nan)
            values[hit] = np.where(idle_part, 0.0, got)
            out[m.column] = values
    return step_windows.with_windows(trace, out, range_name) if windows else out


def step_table(ranges: pd.DataFrame, range_name: str, *, gamma: int | None = None,
               speculative: bool = False) -> StepTable:
    """The engine steps of a trace (plain or speculative) from its NVTX ranges (`ranges.marked_ranges`, or all of
    `Trace.nvtx_ranges()`; on a GPU trace with the rows `with_gpu_metrics` adds); `gamma`: the run's γ when known (its
    metrics dump). `speculative`: the trace is a speculative run even without draft-forward ranges (a proposer
    without a draft model, such as vLLM's ngram): its target forwards of 2…γ + 1 tokens per sequence are verify
    forwards. `range_name`: the forward range as decided for this trace (`ranges.forward_range`, by whoever read
    it), not decided again here."""
    notes: list[str] = []
    engine = engine_of(ranges)  # the engine whose markers gave the rows (the words of the notes), None: the plugin's
    # Only the columns read below: every selection of rows then copies a third of a trace's columns (a step table
    # selects a dozen times).
    wanted = [c for c in (*STEP_INPUT_COLUMNS, *STEP_NAME_COLUMNS, *(BY_NAME[m].column for m in STEP_METRICS),
                          step_windows.GPU_REACH) if c in ranges]
    if len(wanted) < len(ranges.columns):
        ranges = ranges[wanted]
    fw = step_rules.read_forwards(ranges, range_name, gamma, speculative, notes)
    found = step_rules.find_steps(fw, notes, engine)
    gamma_known = gamma if gamma is not None else fw.gamma_payload
    steps, draft_fw, counts = _step_rows(fw, found, gamma_known)
    parts = _step_parts(ranges, range_name, fw.measured, found.step_at)
    _add_parts(steps, draft_fw, fw, found, parts, counts, gamma_known)
    for col in STEP_NAME_COLUMNS[1:]:  # the step's batch, tokens and context, as its annotation names them
        if col in fw.target:
            inside = found.t_step >= 0
            per = np.full(len(steps), np.nan)
            per[found.t_step[inside]] = fw.target[col].to_numpy(dtype=float)[inside]
            steps[col] = per
    if CONTEXT not in steps:  # the plugin's: its context range inside each step; else unknown
        steps[CONTEXT] = _plugin_context(ranges, found, len(steps))
    steps = _drop_odd(steps, counts["target"] > 1, notes)
    per_iter, iterations = _iterations(fw, notes)
    whole = fw.draft_name in DRAFT_STEP_RANGES
    if whole:
        notes.append(f"draft time per step is the {marker_label(fw.draft_name or '', engine)!r} range (the proposer, "
                     "its draft forwards and its own overhead); one draft forward is taken as that ÷ γ")
    source = next((f.attrs["source"] for f in parts.values() if f is not None and "source" in f.attrs), None)
    return StepTable(steps.reset_index(drop=True), draft_fw, found.rule, found.detail, iterations, per_iter,
                     fw.gamma_payload, tuple(notes), parts=tuple(p for p, f in parts.items() if f is not None),
                     part_source=source, engine=engine, forwards=_forward_rows(fw))


def _plugin_context(ranges: pd.DataFrame, found: Found, n_steps: int) -> np.ndarray:
    """Each step's total context from the plugin's `STEP_CONTEXT_RANGE` inside it (its payload; the first one where a
    step holds several), NaN for a step without one (a trace made before the plugin wrote them, or by another tool)."""
    per = np.full(n_steps, np.nan)
    marks = select(ranges, STEP_CONTEXT_RANGE)
    if marks.empty or not n_steps:
        return per
    step = found.step_at(marks["start_ns"].to_numpy())
    payload = pd.to_numeric(marks["payload"], errors="coerce").to_numpy(dtype=float, na_value=np.nan)
    keep = (step >= 0) & np.isfinite(payload)
    first = pd.Series(payload[keep]).groupby(step[keep]).first()
    per[first.index.to_numpy(dtype=int)] = first.to_numpy(dtype=float)
    return per


def _step_rows(fw: Forwards, found: Found, gamma: int | None) -> tuple[pd.DataFrame, pd.DataFrame, dict]:
    """STEP_COLUMNS of every step found (each step's kind its target forward's; "mixed" with several, "empty" with
    none), the draft forwards in them (`StepTable.draft_forwards`) and per step the counts `_add_parts` and the rest
    read: target and draft forwards, the forwards the drafts hold."""
    n_steps, t_step, d_step = len(found.s_start), found.t_step, found.d_step
    inside = t_step >= 0
    count_t = np.bincount(t_step[inside], minlength=n_steps)
    sum_t = np.bincount(t_step[inside], weights=fw.wall[inside], minlength=n_steps)
    tok = np.full(n_steps, np.nan)
    knd = np.full(n_steps, EMPTY, dtype=object)
    tok[t_step[inside]] = fw.tokens[inside]
    knd[t_step[inside]] = fw.kind[inside]
    knd[count_t > 1] = MIXED  # the plugin's steps of several target forwards: left out (`_drop_odd`)
    dmask = d_step >= 0
    count_d = np.bincount(d_step[dmask], minlength=n_steps)
    sum_d = np.bincount(d_step[dmask], weights=fw.d_wall[dmask], minlength=n_steps)
    whole = fw.draft_name in DRAFT_STEP_RANGES  # one draft range per step around all its drafts (the proposer)
    held = forwards_held(knd, d_step, fw.d_payload, gamma) if not whole else np.ones(len(d_step))
    position = (pd.Series(d_step).groupby(d_step).cumcount().to_numpy() if len(d_step)
                else np.array([], dtype=int))
    held_d = np.bincount(d_step[dmask], weights=held[dmask], minlength=n_steps)
    steps = pd.DataFrame({
        "step": np.arange(n_steps), "iteration": found.s_iter, "kind": knd, "start_ns": found.s_start,
        "step_ms": found.s_ms, "target_ms": sum_t, "tokens": tok,
        "draft_ms": sum_d, "draft_forwards": held_d if not whole else np.full(n_steps, np.nan),
        "other_ms": found.s_ms - sum_t - sum_d,
    })[STEP_COLUMNS]
    if found.s_gpu_ms is not None:
        steps[STEP_GPU] = found.s_gpu_ms
    draft_fw = pd.DataFrame({"step": d_step, "wall_ms": fw.d_wall, "payload": fw.d_payload, "position": position,
                             "forwards": held})
    return steps, draft_fw, {"target": count_t, "draft": count_d, "position": position, "whole": whole}


def _add_parts(steps: pd.DataFrame, draft_fw: pd.DataFrame, fw: Forwards, found: Found,
               parts: dict[str, pd.DataFrame | None], counts: dict, gamma: int | None) -> None:
    """The parts' columns (`part_columns`) on wall and each GPU metric the forwards carry, with the GPU metrics'
    target, draft and outside columns (`metric_columns`) and one draft forward's value in `draft_fw` — in `steps`
    (and `StepTable.draft_forwards`). Outside time on a GPU metric is the step's time to the end of its GPU work
    (STEP_GPU) less the forwards' (and parts') on that metric, where the trace has it; else its CPU time's."""
    n_steps, t_step, d_step = len(steps), found.t_step, found.d_step
    inside, dmask = t_step >= 0, d_step >= 0
    position, count_d = counts["position"], counts["draft"]
    # The catch-up forward is the step's first draft range when the later forwards have ranges of their own (or γ
    # is 1); a single range for all the step's drafts (a multi-module MTP graph) leaves it unknown.
    separable = (count_d >= 2) | ((count_d == 1) & (gamma == 1))
    first, later = dmask & (position == 0), dmask & (position > 0)

    def per_step(values: np.ndarray, mask: np.ndarray) -> np.ndarray:
        if not len(d_step) or counts["whole"]:
            return np.full(n_steps, np.nan)
        return np.where(separable, np.bincount(d_step[mask], weights=values[mask], minlength=n_steps), np.nan)

    def add(metric: str, step_ms: np.ndarray, target_m: np.ndarray, drafts_m: np.ndarray, d_val: np.ndarray) -> None:
        cols = part_columns(metric)
        sums = {p: (np.full(n_steps, np.nan) if frame is None else
                    np.bincount(frame["step"], weights=frame[metric], minlength=n_steps))
                for p, frame in parts.items()}
        for p in STEP_PARTS:
            steps[cols[p]] = sums[p]
        steps[cols["draft_catchup"]] = per_step(d_val, first)
        steps[cols["draft_later"]] = per_step(d_val, later)
        known = np.nansum(np.vstack([sums[p] for p in STEP_PARTS]), axis=0)
        steps[cols["other_token"]] = step_ms - target_m - drafts_m - known

    add(WALL, found.s_ms, steps["target_ms"].to_numpy(), steps["draft_ms"].to_numpy(), fw.d_wall)
    steps["draft_catchup_tokens"] = per_step(fw.d_payload, first)
    steps["draft_ranges"] = count_d if not counts["whole"] else np.full(n_steps, np.nan)
    waited = found.s_gpu_ms if found.s_gpu_ms is not None else found.s_ms
    for metric in _gpu_metrics_of(fw.target):
        t_col, d_col, o_col, f_col = metric_columns(metric)
        column = BY_NAME[metric].column
        t_val = fw.target[column].to_numpy(dtype=float) / 1e6
        d_val = (fw.drafts[column].to_numpy(dtype=float) / 1e6 if column in fw.drafts
                 else np.full(len(fw.drafts), np.nan))
        m_t = np.bincount(t_step[inside], weights=t_val[inside], minlength=n_steps)  # NaN stays NaN: unknown
        m_d = np.bincount(d_step[dmask], weights=d_val[dmask], minlength=n_steps)
        steps[t_col], steps[d_col], steps[o_col] = m_t, m_d, waited - m_t - m_d
        add(metric, waited, m_t, m_d, d_val)
        draft_fw[f_col] = d_val


def _forward_rows(fw: Forwards) -> pd.DataFrame:
    """`StepTable.forwards`: each target forward's start, kind and batch (NaN where its name says none)."""
    batch = (fw.target["batch"].to_numpy(dtype=float) if "batch" in fw.target
             else np.full(len(fw.target), np.nan))
    return pd.DataFrame({"start_ns": fw.t_start, "kind": fw.kind, "batch": batch})


def _drop_odd(steps: pd.DataFrame, several: np.ndarray, notes: list[str]) -> pd.DataFrame:
    """`steps` without the empty steps (no target forward) and those of several target forwards, said in a note."""
    knd = steps["kind"].to_numpy(dtype=object)
    odd = {k: int(m.sum()) for k, m in ((EMPTY, knd == EMPTY), (MIXED, several)) if m.any()}
    if not odd:
        return steps
    notes.append("steps left out: " + ", ".join(f"{n} {k} (" + ("no target forward" if k == EMPTY else
                                                                 "several target forwards") + ")"
                                                  for k, n in odd.items()))
    return steps[(knd != EMPTY) & ~several]


def _iterations(fw: Forwards, notes: list[str]) -> tuple[float, int]:
    """(target forwards per measured iteration, measured iterations): by the iteration ranges, else each iteration
    counted by its prefill forward."""
    t_iter = fw.t_iter
    measured_iters = np.unique(t_iter[t_iter >= 0])
    n_prefill = int((fw.kind == PREFILL).sum())
    if measured_iters.size:
        return float(pd.Series(t_iter[t_iter >= 0]).value_counts().median()), int(measured_iters.size)
    if n_prefill:
        notes.append(f"no iteration ranges: {n_prefill} iterations counted by their prefill forwards")
        return len(fw.target) / n_prefill, n_prefill
    return math.nan, 0


def _step_parts(ranges: pd.DataFrame, range_name: str, measured: Callable[[pd.DataFrame], pd.DataFrame],
                step_at: Callable[[np.ndarray], np.ndarray]) -> dict[str, pd.DataFrame | None]:
    """Per part of STEP_PARTS, its ranges outside warm-up that lie in a step: step, wall and each GPU metric (ms;
    `attrs["source"]`: "plugin" or "vLLM scopes"), or None when the trace has no range of that part. The target's
    parts are read for the plugin's forwards or vLLM's forward scope only (the plugin's ranges win), never for a
    range of the user's own."""
    from ...contract import FORWARD_RANGES

    out: dict[str, pd.DataFrame | None] = {}
    for part in STEP_PARTS:
        if part in TARGET_PARTS:
            if range_name not in FORWARD_RANGES:
                out[part] = None
                continue
            plugin, scope = TARGET_PARTS[part]
            name, source = (plugin, "plugin") if matches(ranges, (plugin,)).any() else (scope, "vLLM scopes")
            if range_name == VLLM_STEP_RANGE:  # vLLM's step annotations: the frames after them (`vllm_steps`)
                if part not in VLLM_TARGET_PARTS:
                    out[part] = None
                    continue
                name, source = VLLM_TARGET_PARTS[part], "vLLM frames"
        else:
            name, source = DRAFT_PARTS[part], "plugin"
        found = closed(select(ranges, name))
        if found.empty:
            out[part] = None
            continue
        found = measured(found)
        step = step_at(found["start_ns"].to_numpy())
        frame = pd.DataFrame({"step": step, WALL: found["duration_ns"].to_numpy(dtype=float) / 1e6})
        for metric in STEP_METRICS:
            col = BY_NAME[metric].column
            frame[metric] = (found[col].to_numpy(dtype=float) / 1e6 if col in found
                             else np.full(len(found), np.nan))
        frame = frame[frame["step"] >= 0].reset_index(drop=True)
        frame.attrs["source"] = source
        out[part] = frame
    return out


def with_latencies(table: StepTable, path: str | os.PathLike) -> StepTable:
    """`table` with vLLM's latencies from `X.bench.json` beside the trace `path` (a note when that file is broken)."""
    latencies, note = latencies_beside(path)
    return dataclasses.replace(table, latencies_s=latencies, notes=table.notes + ((note,) if note else ()))


def read_step_table(path: str | os.PathLike, range_name: str | None = None, *, gamma: int | None = None,
                    speculative: bool = False) -> StepTable:
    """`step_table` of the trace at `path`, with vLLM's latencies beside it (`with_latencies`); opens the trace.
    (`cost_coefficient` reads each trace once and builds its step table from what it read.)"""
    from ...trace import open_trace

    with open_trace(os.fspath(path)) as trace:
        ranges = marked_ranges(trace, range_name)
        range_name, _ = forward_range(ranges, range_name, label="")  # decided once: vLLM's scope in a scopes trace
        ranges = with_gpu_metrics(trace, ranges, range_name)
        table = step_table(ranges, range_name, gamma=gamma, speculative=speculative)
    return with_latencies(table, path)


def is_speculative(path: str | os.PathLike) -> bool:
    """Whether the trace at `path` holds draft-model forward ranges (a speculative-decoding run); opens the trace."""
    from ...contract import DRAFT_RANGES
    from ...trace import open_trace

    with open_trace(os.fspath(path)) as trace:
        return draft_range_of(trace.nvtx_ranges(names=DRAFT_RANGES, nesting=False, warn=False)) is not None


# The columns of a trace's ranges that `step_table` reads; and, where the forwards are the engine's step annotations of
# a torch trace, what each step's name says (`vllm_steps.STEP_ROW_COLUMNS`): its kind, batch, tokens, context.
STEP_INPUT_COLUMNS = ["name", "qualified_name", "start_ns", "end_ns", "duration_ns", "payload", "open_at_end"]
STEP_NAME_COLUMNS = ["step_kind", "batch", "step_tokens", CONTEXT]


def markers_of(ranges: pd.DataFrame, range_name: str, trace=None) -> pd.DataFrame:
    """Of a trace's ranges as read (`ranges.marked_ranges`), what `step_table` needs besides the forwards named
    `range_name`: the markers, in STEP_INPUT_COLUMNS — with, when the open `trace` is given, the GPU metrics of the
    token's parts (`with_gpu_metrics`: a plain decode token on a GPU metric holds its logits' and sampling's GPU
    work) and the steps' windows projected (`step_windows`, found among all of `ranges`, the forwards included: a step
    from one forward to the next). With `with_forwards` it makes the step table of a trace whose forwards were kept
    by its model, without keeping (or reading again) its forward ranges."""
    markers = ranges.loc[~matches(ranges, (range_name,))]
    if trace is not None:
        markers = step_windows.with_windows(trace, with_gpu_metrics(trace, markers, range_name, windows=False),
                                            range_name, of=ranges)
    extra = [c for c in (*(BY_NAME[m].column for m in STEP_METRICS), step_windows.GPU_REACH, ENGINE_COLUMN)
             if c in markers]
    return markers[[*STEP_INPUT_COLUMNS, *extra]]


def with_forwards(markers: pd.DataFrame, model) -> pd.DataFrame:
    """`markers` (`markers_of`) and the forwards of `model` (a `ModelForwards` of the same trace: one row per forward,
    across ranks on several) as ranges named its `range_name`, with their GPU metrics when the model has them: the
    input of `step_table`."""
    fwd = model.forwards
    forwards = pd.DataFrame({"name": model.range_name, "qualified_name": model.range_name,
                             "start_ns": fwd["start_ns"], "end_ns": fwd["end_ns"],
                             "duration_ns": fwd["end_ns"] - fwd["start_ns"], "payload": fwd["payload"],
                             "open_at_end": fwd["open_at_end"]})
    for col in STEP_NAME_COLUMNS:  # what the engine's step annotations name (a torch trace's `vllm_steps`)
        if col in fwd:
            forwards[col] = fwd[col]
    if model.has_cuda:
        for metric in STEP_METRICS:
            column = BY_NAME[metric].column
            if column in fwd:
                forwards[column] = pd.to_numeric(fwd[column], errors="coerce").astype(float)
    both = [markers.astype({"name": object, "qualified_name": object}), forwards]
    return pd.concat([b for b in both if len(b)], ignore_index=True) if len(markers) else forwards
