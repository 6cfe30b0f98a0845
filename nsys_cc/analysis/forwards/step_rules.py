"""How `steps.step_table` finds a trace's engine steps: its target and draft forwards outside warm-up with each
target forward's kind and tokens (`read_forwards`, `target_kinds`), then the steps by the first rule the trace allows
(`find_steps`: step ranges, engine step frames, vLLM's step scopes; else `forward_steps`, from one target forward to
the next) with each step's time to the end of its GPU work on a GPU trace (`step_windows`). The rules are
`steps`'s module docstring's."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ...contract import (
    SCOPES_ALLOCATE,
    SCOPES_STEP,
    SCOPES_STEP_PREFIX,
    STEP_RANGE,
    VLLM_ENGINE_STEP_RANGE,
    WARMUP_RANGE,
)
from ...errors import InputError
from ..metrics import DECODE, PREFILL, VERIFY
from . import step_windows
from .engine_marks import label as marker_label
from .phases import containing, marker_sets, payload_phases, slow_group, tokens_per_sequence, verify_tokens, warmup_mask
from .ranges import draft_range_of, select
from .step_windows import closed, scope_steps


@dataclass
class Forwards:
    """A trace's target and draft forwards as `step_table` reads them: outside warm-up, each target forward's kind,
    tokens per sequence, iteration and wall time (ms), the draft forwards' starts, wall times and payloads."""

    ranges: pd.DataFrame
    measured: Callable[[pd.DataFrame], pd.DataFrame]
    iters: pd.DataFrame
    target: pd.DataFrame
    drafts: pd.DataFrame
    draft_name: str | None
    kind: np.ndarray
    tokens: np.ndarray
    t_start: np.ndarray
    t_iter: np.ndarray
    wall: np.ndarray
    gamma_payload: int | None

    @property
    def d_start(self) -> np.ndarray:
        return self.drafts["start_ns"].to_numpy() if len(self.drafts) else np.array([], dtype=np.int64)

    @property
    def d_wall(self) -> np.ndarray:
        return self.drafts["duration_ns"].to_numpy(dtype=float) / 1e6 if len(self.drafts) else np.array([])

    @property
    def d_payload(self) -> np.ndarray:
        return self.drafts["payload"].to_numpy(dtype=float) if len(self.drafts) else np.array([])


@dataclass
class Found:
    """The steps found (`find_steps`): the rule and its detail, each step's start, CPU time (ms), time to the end of
    its GPU work (ms; None without GPU work: `step_windows.step_times`) and iteration, the step of each target and
    draft forward (−1: none), and `step_at`: the step each of some starts lies in."""

    rule: str
    detail: str
    s_start: np.ndarray
    s_ms: np.ndarray
    s_gpu_ms: np.ndarray | None
    s_iter: np.ndarray
    t_step: np.ndarray
    d_step: np.ndarray
    step_at: Callable[[np.ndarray], np.ndarray]


def read_forwards(ranges: pd.DataFrame, range_name: str, gamma: int | None, speculative: bool,
                   notes: list[str]) -> Forwards:
    """The target and draft forwards of `ranges` outside warm-up, with each target forward's kind and tokens
    (`target_kinds`)."""
    draft_name = draft_range_of(ranges)
    target = closed(select(ranges, range_name))
    if target.empty:
        raise InputError(f"no {range_name!r} ranges (target forwards) in the trace")
    drafts = closed(select(ranges, draft_name)) if draft_name else target.iloc[0:0]
    # The trace's markers, selected once for every kind of range measured below (forwards, steps, parts).
    marks = marker_sets(ranges)

    def measured(df: pd.DataFrame) -> pd.DataFrame:
        if df.empty:
            return df
        return df[~warmup_mask(df, ranges, None, marks=marks)[0]].reset_index(drop=True)

    target, drafts = measured(target), measured(drafts)
    if marks.warm.empty:
        notes.append(f"no '{WARMUP_RANGE}' ranges: every step kept (the first iterations may be warm-up)")
    if target.empty:
        raise InputError(f"every {range_name!r} range ran inside a warm-up iteration")
    t_start = target["start_ns"].to_numpy()
    t_iter = containing(t_start, marks.windows)
    wall = target["duration_ns"].to_numpy(dtype=float) / 1e6
    fw = Forwards(ranges, measured, marks.windows, target, drafts, draft_name, np.array([]), np.array([]), t_start,
                   t_iter, wall, None)
    fw.kind, fw.tokens, fw.gamma_payload = target_kinds(fw, draft_name is not None or speculative, gamma, notes)
    return fw


def target_kinds(fw: Forwards, speculating: bool, gamma: int | None,
                  notes: list[str]) -> tuple[np.ndarray, np.ndarray, int | None]:
    """Each target forward's kind and tokens per sequence, and γ from the verify forwards' payloads (module
    docstring): by their token payloads, else by the engine's step annotations' names, else inferred (vLLM's
    scopes: the first forward of each iteration, a step without slot allocation, or the slow group)."""
    target, ranges = fw.target, fw.ranges
    if target["payload"].notna().all():
        tokens, _ = tokens_per_sequence(target, ranges, speculating, windows=fw.iters)
        kind, _ = payload_phases(tokens, speculating, gamma, draft_model=fw.draft_name is not None)
        common = verify_tokens(tokens) if speculating else None
        return kind, tokens, None if common is None else round(common) - 1
    if "step_kind" in target and target["step_kind"].notna().all():  # the engine's step annotations name the kind
        # NaN tokens where the name counts none (SGLang's MIXED); a mixed step is no prefill
        return target["step_kind"].to_numpy(dtype=object), target["payload"].to_numpy(dtype=float), None
    tokens = np.full(len(target), np.nan)
    kind = np.full(len(target), DECODE, dtype=object)
    scope = fw.measured(scope_steps(ranges))
    allocate = select(ranges, SCOPES_ALLOCATE)
    if (fw.t_iter >= 0).all():
        first = np.r_[True, fw.t_iter[1:] != fw.t_iter[:-1]]
        how = "the first target forward of each iteration"
    elif len(scope) and len(allocate):
        step_of = containing(fw.t_start, scope)
        has_alloc = np.zeros(len(scope), dtype=bool)
        a_step = containing(allocate["start_ns"].to_numpy(), scope)
        has_alloc[a_step[a_step >= 0]] = True
        first = (step_of >= 0) & ~has_alloc[np.clip(step_of, 0, None)]
        how = (f"a forward whose engine step has no '{SCOPES_ALLOCATE}' scope (vLLM scopes that for running "
               "requests only, so such a step schedules a new request)")
    else:
        slow, ratio = slow_group(fw.wall)
        first = slow if slow is not None else np.zeros(len(fw.wall), dtype=bool)
        how = f"the slow group of target forwards ({ratio:.1f}× gap)" if slow is not None else "none (no gap)"
    kind[first] = PREFILL
    if speculating:
        kind[~first] = VERIFY
        if gamma is not None:
            tokens[~first] = gamma + 1
    else:
        tokens[~first] = 1
    notes.append(f"the target forwards carry no token payload: prefill taken as {how}")
    return kind, tokens, None


def find_steps(fw: Forwards, notes: list[str], engine: str | None = None) -> Found:
    """The steps by the first rule the trace allows (module docstring: step ranges, engine step frames, vLLM's step
    scopes), else from one target forward to the next (`forward_steps`); `engine`: the engine whose markers gave the
    rows (the words of the rule's detail)."""
    ranges = fw.ranges
    steps_r = fw.measured(closed(select(ranges, STEP_RANGE)))
    rule, detail = "step ranges", f"the trace's '{STEP_RANGE}' ranges around each engine step"
    if steps_r.empty:
        steps_r = fw.measured(closed(select(ranges, VLLM_ENGINE_STEP_RANGE)))
        frame = marker_label(VLLM_ENGINE_STEP_RANGE, engine)
        rule, detail = "engine step frames", (
            f"the engine's Python frames {frame!r} ("
            + ("EngineCore.step" if frame == VLLM_ENGINE_STEP_RANGE else f"{engine}'s scheduler step")
            + ") around each engine step, in a torch trace")
    if steps_r.empty:
        steps_r = fw.measured(scope_steps(ranges))
        rule = "vLLM step scopes"
        detail = (f"vLLM's own scopes: from each '{SCOPES_STEP}' to the end of the '{SCOPES_STEP_PREFIX}…' ranges "
                  "after it (LLMEngine.step)")
    if not len(steps_r):
        return forward_steps(fw, notes)
    s_start = steps_r["start_ns"].to_numpy()
    s_ns = steps_r["duration_ns"].to_numpy()

    def step_at(starts: np.ndarray) -> np.ndarray:
        return containing(starts, steps_r) if len(starts) else np.array([], dtype=int)

    gpu = step_windows.step_times(ranges, s_start, s_ns, step_windows.WINDOW_RANGE)
    return Found(rule, detail, s_start, s_ns / 1e6, None if gpu is None else gpu / 1e6,
                  containing(s_start, fw.iters), step_at(fw.t_start), step_at(fw.d_start), step_at)


def forward_steps(fw: Forwards, notes: list[str]) -> Found:
    """Steps from one target forward's start to the next one's in the same iteration (the last forward of each
    iteration closes no step; without iteration ranges, up to the next forward unless it is a prefill)."""
    t_start, t_iter = fw.t_start, fw.t_iter
    nxt_same = np.r_[t_iter[1:] == t_iter[:-1], False]
    if (t_iter < 0).all():
        nxt_same = np.r_[fw.kind[1:] != PREFILL, False]
    keep = np.flatnonzero(nxt_same)
    s_start = t_start[keep]
    s_ns = t_start[keep + 1] - t_start[keep]
    t_step = np.full(len(fw.target), -1)
    t_step[keep] = np.arange(keep.size)

    def step_at(starts: np.ndarray) -> np.ndarray:  # the step of the target forward before
        if not len(starts):
            return np.array([], dtype=int)
        pos = np.searchsorted(t_start, starts, side="right") - 1
        return np.where(pos >= 0, t_step[np.clip(pos, 0, None)], -1)

    dropped = int(len(fw.target) - keep.size)
    if dropped:
        notes.append(f"{dropped} target forward(s) close no step (last of their iteration): not counted")
    gpu = step_windows.step_times(fw.ranges, s_start, s_ns, step_windows.WINDOW_FORWARD)
    return Found("forward to forward",
                  f"no '{STEP_RANGE}' ranges: a step runs from one target forward's start to the next one's in the "
                  "same iteration; the last forward of each iteration closes no step and is not counted",
                  s_start, s_ns / 1e6, None if gpu is None else gpu / 1e6, t_iter[keep], t_step,
                  step_at(fw.d_start), step_at)
