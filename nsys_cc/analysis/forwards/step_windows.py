"""The time a step takes on a GPU trace: from its start to the end of the GPU work launched in it.

An engine step's CPU range is the time the CPU spent in it (on a GPU trace, named launch time). Its GPU work can end
after it: vLLM launches asynchronously, and with asynchronous scheduling (or a proposer whose drafts stay on the GPU)
the next step's range starts while the GPU still runs this one's work. What the user waits for is the step up to the
end of its GPU work. Which GPU work is the step's is the projection's rule (`projection`), never time overlap: the
work of the CUDA calls made inside the step's window on the step's own thread, by correlation id — so the next step's
kernels, which run after this one's, are never counted in it.

`with_windows` adds to a trace's ranges one row per window a step can have (`STEP_WINDOW`; no trace spells the
name), each with `GPU_REACH`: ns from the window's start to the end of the GPU work launched in it (NaN where it
launched none):

- a step range (the plugin's `nsys_cc:step`), an engine step frame (vLLM's `…/engine/core.py(…): step`, SGLang's
  `run_batch`) and a group of vLLM's step scopes (`llm_engine step: get_output` and the scopes after it): the range
  itself, on its thread (payload `WINDOW_RANGE`);
- each target forward to the next one on its thread (payload `WINDOW_FORWARD`): a step "from one forward to the next"
  (`steps`), with the sampling and the proposing after the forward — only in a trace without windows of the kind above
  (the steps' rule takes those first).

`step_times` then gives each step its time to the end of its GPU work (`steps.STEP_GPU` column): from its start — or,
where the step before it still had GPU work running then (asynchronous scheduling), from the end of that work, so that
no time counts in two steps and the steps' times add up to the time the user waited — to the end of its GPU work, or
of its CPU range where that is later. Without GPU work (a CPU trace) there is no such column: the CPU time is the
step's time.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ...contract import SCOPES_STEP, SCOPES_STEP_PREFIX, STEP_RANGE, VLLM_ENGINE_STEP_RANGE
from ...trace.nvtx import matches
from .ranges import by_start, nested_same_name, select

# The rows `with_windows` adds (module docstring), their payload, and the column of their GPU work's end.
STEP_WINDOW = "(an engine step's window, projected onto the GPU)"
WINDOW_RANGE, WINDOW_FORWARD = 0.0, 1.0
GPU_REACH = "gpu_reach_ns"
# The columns of a window row (those of `ranges.MARKED_COLUMNS`, then GPU_REACH).
WINDOW_COLUMNS = ["range_id", "name", "qualified_name", "start_ns", "end_ns", "duration_ns", "global_tid", "pid", "tid",
                  "ended_on_other_thread", "payload", "open_at_end", GPU_REACH]


def closed(df: pd.DataFrame) -> pd.DataFrame:
    """The ranges of `df` that were closed, by start (stable), numbered from 0."""
    if "open_at_end" in df:
        still_open = df["open_at_end"].to_numpy(dtype=bool)
        if still_open.any():
            df = df[~still_open]
    return by_start(df).reset_index(drop=True)


def scope_steps(ranges: pd.DataFrame) -> pd.DataFrame:
    """Engine steps of a vLLM-scopes trace: each `llm_engine step: get_output` range together with the
    `llm_engine step: …` ranges after it (process_outputs, abort_requests, record_stats), up to the next
    get_output: start = get_output's start, end = the last of them's end (LLMEngine.step as vLLM scopes it); the
    thread (`global_tid`, `pid`, `tid`) the get_output's, where `ranges` has it."""
    eng = closed(ranges[matches(ranges, (), (SCOPES_STEP_PREFIX,))])
    opens = matches(eng, (SCOPES_STEP,))
    if eng.empty or not opens.any():
        return eng.iloc[0:0]
    group = np.cumsum(opens)
    eng = eng[group > 0].assign(group=group[group > 0])
    how = {"start_ns": ("start_ns", "min"), "end_ns": ("end_ns", "max"),
           **{c: (c, "first") for c in ("global_tid", "pid", "tid") if c in eng}}
    out = eng.groupby("group").agg(**how).reset_index(drop=True)
    out["duration_ns"] = out["end_ns"] - out["start_ns"]
    return out


def _rows(start: np.ndarray, end: np.ndarray, src: pd.DataFrame, kind: float) -> pd.DataFrame:
    n = len(start)
    return pd.DataFrame({
        "range_id": np.full(n, -1, dtype=np.int64), "name": [STEP_WINDOW] * n, "qualified_name": [STEP_WINDOW] * n,
        "start_ns": start.astype(np.int64), "end_ns": end.astype(np.int64),
        "duration_ns": (end - start).astype(np.int64),
        **{c: src[c].to_numpy(dtype=np.int64) for c in ("global_tid", "pid", "tid")},
        "ended_on_other_thread": np.zeros(n, dtype=bool), "payload": np.full(n, kind),
        "open_at_end": np.zeros(n, dtype=bool)})


def windows(ranges: pd.DataFrame, range_name: str) -> pd.DataFrame:
    """Every window a step of `ranges` (a trace's ranges as read, with their threads) can have (module docstring), in
    WINDOW_COLUMNS less GPU_REACH."""
    if not {"global_tid", "pid", "tid"} <= set(ranges.columns):
        return pd.DataFrame(columns=WINDOW_COLUMNS[:-1])
    parts = []
    for name in (STEP_RANGE, VLLM_ENGINE_STEP_RANGE):
        found = closed(select(ranges, name))
        if len(found):
            parts.append(_rows(found["start_ns"].to_numpy(), found["end_ns"].to_numpy(), found, WINDOW_RANGE))
    scopes = scope_steps(ranges)
    if len(scopes):
        parts.append(_rows(scopes["start_ns"].to_numpy(), scopes["end_ns"].to_numpy(), scopes, WINDOW_RANGE))
    forwards = closed(select(ranges, range_name)) if not parts else ranges.iloc[0:0]
    if len(forwards):  # a step from one forward to the next only where the trace has no step ranges (`steps`)
        forwards = forwards[~nested_same_name(forwards)]
        f = forwards.sort_values(["global_tid", "start_ns"], kind="stable")
        tid, start, end = (f[c].to_numpy(dtype=np.int64) for c in ("global_tid", "start_ns", "end_ns"))
        same = np.r_[tid[1:] == tid[:-1], False]
        nxt = np.where(same, np.r_[start[1:], 0], end)  # to the next forward of its thread (the last: its own end)
        parts.append(_rows(start, np.maximum(nxt, start), f, WINDOW_FORWARD))
    if not parts:
        return pd.DataFrame(columns=WINDOW_COLUMNS[:-1])
    return pd.concat(parts, ignore_index=True)


def with_windows(trace, ranges: pd.DataFrame, range_name: str, *, of: pd.DataFrame | None = None) -> pd.DataFrame:
    """`ranges` with the window rows of a GPU trace (module docstring), their GPU_REACH projected from the open
    `trace`; `ranges` as they are without CUDA data. `of`: the ranges the windows are found in (default `ranges`;
    the whole trace's, forwards included, where `ranges` are its markers)."""
    if not trace.has_cuda:
        return ranges
    from .projection import project

    found = windows(ranges if of is None else of, range_name)
    if found.empty:
        return ranges
    projected = project(trace, found)
    end = pd.to_numeric(projected["proj_end_ns"], errors="coerce")
    reach = (end - found["start_ns"]).to_numpy(dtype=float, na_value=np.nan)  # small: exact as a float
    found[GPU_REACH] = reach
    return pd.concat([ranges, found], ignore_index=True)


def step_times(ranges: pd.DataFrame, start: np.ndarray, duration: np.ndarray, kind: float) -> np.ndarray | None:
    """Each step's time to the end of its GPU work, ns (module docstring): steps at `start` (ascending) lasting
    `duration` on the CPU, whose windows are the rows of `ranges` of payload `kind` at the same start (`with_windows`);
    None where `ranges` holds no window rows (no GPU work)."""
    if GPU_REACH not in ranges or not len(start):
        return None
    rows = ranges[matches(ranges, (STEP_WINDOW,)) & (ranges["payload"].to_numpy(dtype=float) == kind)]
    if rows.empty:
        return None
    reach_of = pd.Series(rows[GPU_REACH].to_numpy(dtype=float)).groupby(rows["start_ns"].to_numpy()).max()
    gpu = reach_of.reindex(start).to_numpy(dtype=float)
    own = np.where(np.isfinite(gpu) & (gpu > duration), gpu, duration).astype(np.int64)
    reach = start + own  # where the step ends: its CPU range, or its GPU work where that ends later
    before = np.r_[np.iinfo(np.int64).min, np.maximum.accumulate(reach)[:-1]]
    begin = np.maximum(start, np.minimum(before, reach))  # after the GPU work of the steps before it
    return (reach - begin).astype(float)
