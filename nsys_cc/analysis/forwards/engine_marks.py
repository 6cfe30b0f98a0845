"""The engines' own markers in a PyTorch-profiler trace, the part both engines share (`vllm_steps`, `sglang_steps`):
which frames are the sampling, the proposing and the engine's step (`EngineMarks`, one per engine), and the frame
arithmetic both read them with — the outermost of nested frames of one function, the frame that holds another on its
thread, the sampling less the proposing inside it, and the rows `ranges.marked_ranges` adds under the contract's
VLLM_*_RANGE names (the engine's steps as the analysis reads them, whichever engine wrote them).

Every frame pattern is matched against the frame's module path (`trace.frame_paths`: the one rule)."""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ...contract import ENGINE_RANGE_LABELS, VLLM_SAMPLE_RANGE
from ...trace import frame_paths

# The columns of the rows `marked` adds (`ranges.MARKED_COLUMNS`).
ROW_COLUMNS = ["range_id", "name", "qualified_name", "start_ns", "end_ns", "duration_ns", "global_tid", "pid", "tid",
               "ended_on_other_thread", "payload", "open_at_end"]
# Beside them on every row `marked` adds: the engine that wrote the trace ("vLLM", "SGLang"), for the words (`label`).
ENGINE_COLUMN = "engine"


def label(name: str, engine: str | None) -> str:
    """How a note names the row `name` (the contract's VLLM_*_RANGE: the rows are named after vLLM's markers whichever
    engine wrote the trace) for the engine that wrote it: SGLang's own marker (`ENGINE_RANGE_LABELS`); other names,
    and every name of a vLLM trace, as they are."""
    return ENGINE_RANGE_LABELS.get(engine or "", {}).get(name, name)


def engine_of(ranges: pd.DataFrame) -> str | None:
    """The engine that wrote the rows of `ranges` the engine's markers gave (their ENGINE_COLUMN), None without
    them."""
    if ENGINE_COLUMN not in ranges:
        return None
    found = ranges[ENGINE_COLUMN].dropna()
    return str(found.iloc[0]) if len(found) else None


@dataclass(frozen=True)
class EngineMarks:
    """One engine's markers: its name as said, the prefixes its step annotations and frames start with, and the
    patterns of its sampling, proposing and step frames (compiled contract patterns, on module paths)."""

    engine: str
    step_prefixes: tuple[str, ...]
    frame_prefixes: tuple[str, ...]
    sample: re.Pattern
    propose: re.Pattern
    step: re.Pattern


def hits(frames: pd.DataFrame, pattern: re.Pattern) -> np.ndarray:
    """Rows of `frames` whose module name (`frame_paths.module_name`: the file from its package's root, whatever the
    install prefix) matches `pattern`, worked out per distinct name."""
    return frame_paths.hits(frames["name"], pattern)


def row_frame(src: pd.DataFrame, name: str, start: np.ndarray | None = None, end: np.ndarray | None = None,
              payload: np.ndarray | None = None) -> pd.DataFrame:
    """Rows named `name` (ROW_COLUMNS) at the threads and ids of `src`, with its times or the ones given."""
    start = src["start_ns"].to_numpy(dtype=np.int64) if start is None else start
    end = src["end_ns"].to_numpy(dtype=np.int64) if end is None else end
    n = len(start)
    return pd.DataFrame({
        "range_id": src["range_id"].to_numpy(dtype=np.int64), "name": [name] * n, "qualified_name": [name] * n,
        "start_ns": start, "end_ns": end, "duration_ns": end - start,
        "global_tid": src["global_tid"].to_numpy(dtype=np.int64), "pid": src["pid"].to_numpy(dtype=np.int64),
        "tid": src["tid"].to_numpy(dtype=np.int64), "ended_on_other_thread": np.zeros(n, dtype=bool),
        "payload": np.full(n, np.nan) if payload is None else np.asarray(payload, dtype=float),
        "open_at_end": np.zeros(n, dtype=bool)}, columns=ROW_COLUMNS)


def outermost(frames: pd.DataFrame) -> pd.DataFrame:
    """The frames of `frames` (one function) that lie inside no other of them on their thread: a recursive call, or a
    wrapper of the same name, is part of the outer one."""
    if len(frames) < 2:
        return frames
    f = frames.sort_values(["global_tid", "start_ns", "end_ns"], ascending=[True, True, False], kind="stable")
    gtid = f["global_tid"].to_numpy()
    end = f["end_ns"].to_numpy()
    first = np.r_[True, gtid[1:] != gtid[:-1]]
    reach = pd.Series(end).groupby(np.cumsum(first)).cummax().to_numpy()
    before = np.r_[np.iinfo(np.int64).min, reach[:-1]]
    before[first] = np.iinfo(np.int64).min
    return f[end > before]


def inside(outer: pd.DataFrame, inner: pd.DataFrame) -> np.ndarray:
    """For each row of `inner`, the position in `outer` (by start; one thread's rows do not overlap) of the row that
    holds it on its thread, or −1."""
    out = np.full(len(inner), -1, dtype=np.int64)
    if outer.empty or inner.empty:
        return out
    o_tid, o_start, o_end = (outer[c].to_numpy(dtype=np.int64) for c in ("global_tid", "start_ns", "end_ns"))
    i_tid, i_start, i_end = (inner[c].to_numpy(dtype=np.int64) for c in ("global_tid", "start_ns", "end_ns"))
    for tid in np.unique(i_tid):
        mine = np.flatnonzero(o_tid == tid)
        if not mine.size:
            continue
        mine = mine[np.argsort(o_start[mine], kind="stable")]
        sel = np.flatnonzero(i_tid == tid)
        k = np.searchsorted(o_start[mine], i_start[sel], side="right") - 1
        cand = mine[np.maximum(k, 0)]
        ok = (k >= 0) & (i_end[sel] <= o_end[cand])
        out[sel[ok]] = cand[ok]
    return out


def sampling(frames: pd.DataFrame, samples: pd.DataFrame, proposers: pd.DataFrame) -> pd.DataFrame:
    """The sampling rows (`VLLM_SAMPLE_RANGE`): each sampling frame (vLLM's `sample_tokens`) less the outermost frame
    inside it that holds a proposer frame (vLLM proposes the next drafts inside `sample_tokens`), as the pieces before
    and after that frame; `frames`: every frame read of the engine."""
    if proposers.empty:
        return row_frame(samples, VLLM_SAMPLE_RANGE)
    owner = inside(samples, proposers)
    cut: dict[int, list[tuple[int, int]]] = {}
    order = np.lexsort((frames["start_ns"].to_numpy(), frames["global_tid"].to_numpy()))
    f_tid, f_start, f_end = (frames[c].to_numpy(dtype=np.int64)[order] for c in ("global_tid", "start_ns", "end_ns"))
    s_start, s_end = samples["start_ns"].to_numpy(dtype=np.int64), samples["end_ns"].to_numpy(dtype=np.int64)
    s_tid = samples["global_tid"].to_numpy(dtype=np.int64)
    p_start, p_end = proposers["start_ns"].to_numpy(dtype=np.int64), proposers["end_ns"].to_numpy(dtype=np.int64)
    # per proposer, the frames of its thread that start inside its sampling frame and no later than it (a window of
    # the frames sorted by thread and start): those that also end after it hold it
    tids, first = np.unique(f_tid, return_index=True)
    block = dict(zip(tids.tolist(), zip(first.tolist(), [*first[1:].tolist(), len(f_tid)])))
    for k, s in enumerate(owner):
        if s < 0:
            continue
        a0, b0 = block.get(int(s_tid[s]), (0, 0))
        lo = a0 + int(np.searchsorted(f_start[a0:b0], s_start[s], side="left"))
        hi = a0 + int(np.searchsorted(f_start[a0:b0], p_start[k], side="right"))
        w = np.arange(lo, hi)
        w = w[(f_end[w] >= p_end[k]) & (f_end[w] <= s_end[s]) & ~((f_start[w] == s_start[s]) & (f_end[w] == s_end[s]))]
        a, b = (int(f_start[w].min()), int(f_end[w].max())) if w.size else (int(p_start[k]), int(p_end[k]))
        cut.setdefault(int(s), []).append((a, b))
    pieces: list[tuple[int, int, int]] = []  # (sample frame, start, end)
    for i in range(len(samples)):
        t = int(s_start[i])
        for lo, hi in sorted(cut.get(i, [])):
            if lo > t:
                pieces.append((i, t, lo))
            t = max(t, hi)
        if t < s_end[i] or not cut.get(i):
            pieces.append((i, t, int(s_end[i])))
    idx = [p[0] for p in pieces]
    starts, ends = [p[1] for p in pieces], [p[2] for p in pieces]
    return row_frame(samples.iloc[idx], VLLM_SAMPLE_RANGE, np.array(starts, dtype=np.int64),
                      np.array(ends, dtype=np.int64))
