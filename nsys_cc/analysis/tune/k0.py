"""The price of speculation that proposes nothing: per cell of a tune design profiled with its K = 0
engine (`launch.interleaved.design_engines(..., k0=True)`), the decode step of an engine with speculation configured
and vLLM's schedule giving K = 0 at every batch size (`<cell>.<draft>.k0.spec-g<γ>`) against the plain target's
decode step (`<cell>.<target>`), both measured in the same interleaved runs.

`overhead(directory)`: one row per cell key (`COLUMNS`):
- plain_step_ms, k0_step_ms: the decode step of each engine (an engine step whose target forward decodes one token
  per sequence, `forwards.steps`): per run the median of its decode steps' time, then pooled over the runs as
  `stats.runs_median_ci` pools (their geometric mean; its interval across three runs or more, a run's bootstrap
  alone, none from two), each with `_lo_ms` / `_hi_ms`;
- overhead_rel = k0 ÷ plain − 1: per run the ratio of the two medians (like with like: one process, one time), pooled
  by `stats.runs_ratio_of_medians` (with its interval, `_lo` / `_hi`); overhead_ms = plain_step_ms × overhead_rel =
  k0_step_ms − plain_step_ms (geometric means multiply), its interval plain_step_ms × the ratio's;
- metric: what a step's time is — on a GPU trace its GPU span (`metrics.GPU_SPAN`: from its start to the end of its
  GPU work, `steps.STEP_GPU`), on a CPU-only trace its wall time (`metrics.WALL`; on a GPU trace a step's CPU time
  would be its launch time, `metrics.LAUNCH_TIME`, never the answer);
- the evidence that K = 0 ran, measured in the trace (vLLM's spec-decode counters count nothing for a step that
  drafts nothing, `scheduler.py` skips requests with 0 draft tokens — they cannot say it):
  draft_forwards_per_step (draft-forward ranges per K = 0 decode step, median: 1 expected, the catch-up),
  draft_tokens_per_sequence (that forward's tokens ÷ the batch: 2 on vLLM 0.32's V1 runner — the token just
  sampled and the one before it, the drafter's KV cache kept in step with the target's), tokens_per_sequence and
  plain_tokens_per_sequence (the target forward's tokens per sequence in a decode step of each engine, its payload ÷
  the batch: 1 each, nothing verified beyond the token sampled), and the steps and runs read.

What this measures, and what differs elsewhere. On vLLM 0.32's CPU build the engine runs the V1 model runner
(`CPUModelRunner(GPUModelRunner)`), which reads the schedule every step (`num_spec_tokens_to_schedule`) and hands K
to the proposer; at K = 0 the draft_model proposer runs ONE catch-up forward of 2 tokens per sequence to keep the
drafter's KV cache in sync and returns an empty draft (`llm_base_proposer.py`: "No draft tokens requested (e.g.
Dynamic SD decided K=0)"); the rest of the price is the runner's speculative bookkeeping and sampling path. vLLM 0.32's
V2 GPU runner (the GPU default) differs: its draft_model speculator (`StandaloneARSpeculator.propose`) takes K and
ignores it, running all γ draft steps and cutting only the verify to K — on a GPU with V2 and draft_model a K = 0
bucket pays the whole γ-step draft (vLLM PR #51575, open, makes MRV2's AutoRegressiveSpeculator respect K = 0;
EAGLE/MTP's `target_dependent_ar` speculator honours K). A measurement on another engine or runner must be made
there: this module prices what the trace holds.
"""

from __future__ import annotations

import math
import os
from typing import Any

import numpy as np
import pandas as pd

from ...errors import InputError
from .. import stats
from ..metrics import DECODE, GPU_SPAN, WALL
from .keys import CellKey

COLUMNS = ["batch_size", "input_len", "plain_label", "k0_label", "gamma", "metric", "plain_step_ms", "plain_lo_ms",
           "plain_hi_ms", "k0_step_ms", "k0_lo_ms", "k0_hi_ms", "overhead_ms", "overhead_lo_ms", "overhead_hi_ms",
           "overhead_rel", "overhead_rel_lo", "overhead_rel_hi", "draft_forwards_per_step", "draft_tokens_per_sequence",
           "tokens_per_sequence", "plain_tokens_per_sequence", "plain_steps", "k0_steps", "runs"]


def design_pairs(labels) -> dict[CellKey, tuple[str, str]]:
    """Cell key → (its plain target's label, its K = 0 engine's label), of the design engines among `labels` (cells
    without both are left out)."""
    from ..profile_dir.spec_labels import design_cell, design_role

    plain: dict[CellKey, str] = {}
    zero: dict[CellKey, str] = {}
    for label in labels:
        cell, role = design_cell(label), design_role(label)
        if cell is None:
            continue
        key = CellKey(*cell)
        if role == "target":
            plain[key] = label
        elif role == "k0":
            zero[key] = label
    return {k: (plain[k], zero[k]) for k in sorted(plain) if k in zero}


def _decode_steps(trace, ranges: pd.DataFrame, label: str) -> tuple[pd.DataFrame, pd.DataFrame, str, str]:
    """The decode steps of engine `label` in one run's trace (its step table's rows, `steps.step_table`), the draft
    forwards in them, the trace's metric and its step-time column."""
    from ..forwards.engines import in_engine
    from ..forwards.ranges import forward_range
    from ..forwards.steps import step_table, step_time_column, with_gpu_metrics

    mine = in_engine(ranges, label, trace=trace)
    range_name, _ = forward_range(mine, None, label=label)
    table = step_table(with_gpu_metrics(trace, mine, range_name), range_name)
    metric = GPU_SPAN if trace.has_cuda and GPU_SPAN in table.metrics else WALL
    steps = table.of_kind(DECODE)
    drafts = table.draft_forwards
    return steps, drafts[drafts["step"].isin(steps["step"])], metric, step_time_column(metric, steps)


def overhead(directory: str | os.PathLike) -> pd.DataFrame:
    """Per cell of the tune design profiled in `directory` (a profile directory of interleaved runs with K = 0
    engines, `design_engines(..., k0=True)`), what speculation proposing nothing costs per decode step against plain
    decoding (module docstring; `COLUMNS`). InputError when `directory` is no such directory."""
    from ...trace import open_trace
    from ..forwards.ranges import marked_ranges
    from ..profile_dir import outputs

    where = os.fspath(directory)
    if not outputs.is_profile_output(where):
        raise InputError(f"{where}: not a profile directory (no status.json)", param="directory")
    out = outputs.read_output(where)
    pairs = design_pairs(m.label for m in out.done)
    if not out.interleaved or not out.runs or not pairs:
        raise InputError(f"{where}: no interleaved run of a tune design with K = 0 engines (<cell>.<draft>.k0.spec-g"
                         "<γ> beside <cell>.<target>) in it", param="directory")
    per: dict[CellKey, dict[str, Any]] = {k: {"plain": [], "k0": [], "numbers": [], "drafts": [], "dtok": [],
                                               "tok": [], "ptok": [], "n_plain": 0, "n_k0": 0} for k in pairs}
    metrics: set[str] = set()
    for run in out.runs:
        with open_trace(os.fspath(run.trace)) as trace:
            ranges = marked_ranges(trace, None, engines=True)
            for key, (plain_label, k0_label) in pairs.items():
                p_steps, _, metric, p_col = _decode_steps(trace, ranges, plain_label)
                z_steps, z_drafts, _, z_col = _decode_steps(trace, ranges, k0_label)
                metrics.add(metric)
                row = per[key]
                row["plain"].append(p_steps[p_col].to_numpy(dtype=float))
                row["k0"].append(z_steps[z_col].to_numpy(dtype=float))
                row["numbers"].append(run.number)
                row["n_plain"] += len(p_steps)
                row["n_k0"] += len(z_steps)
                b = key.batch_size
                row["drafts"] += z_drafts.groupby("step").size().reindex(z_steps["step"], fill_value=0).tolist()
                row["dtok"] += (z_drafts.groupby("step")["payload"].first() / b).tolist()
                row["tok"] += z_steps["tokens"].to_numpy(dtype=float).tolist()  # per sequence already
                row["ptok"] += p_steps["tokens"].to_numpy(dtype=float).tolist()
    if len(metrics) > 1:
        raise InputError(f"{where}: its runs are measured on {sorted(metrics)}: some traces hold GPU work, some not",
                         param="directory")
    metric = metrics.pop()
    rows = [_row(key, pairs[key], per[key], metric, len(out.runs)) for key in pairs]
    return pd.DataFrame(rows, columns=COLUMNS)


def _median(values: list) -> float:
    v = np.asarray(values, dtype=float)
    v = v[np.isfinite(v)]
    return float(np.median(v)) if v.size else math.nan


def _row(key: CellKey, labels: tuple[str, str], got: dict, metric: str, runs: int) -> dict:
    plain = stats.runs_median_ci(got["plain"], numbers=got["numbers"])
    zero = stats.runs_median_ci(got["k0"], numbers=got["numbers"])
    ratio = stats.runs_ratio_of_medians(got["k0"], got["plain"], numbers=got["numbers"])
    base = plain[0]
    return {
        "batch_size": key.batch_size, "input_len": key.input_len, "plain_label": labels[0], "k0_label": labels[1],
        "gamma": int(labels[1].rsplit("-g", 1)[1]), "metric": metric,
        "plain_step_ms": plain[0], "plain_lo_ms": plain[1], "plain_hi_ms": plain[2],
        "k0_step_ms": zero[0], "k0_lo_ms": zero[1], "k0_hi_ms": zero[2],
        "overhead_ms": base * (ratio[0] - 1), "overhead_lo_ms": base * (ratio[1] - 1),
        "overhead_hi_ms": base * (ratio[2] - 1),
        "overhead_rel": ratio[0] - 1, "overhead_rel_lo": ratio[1] - 1, "overhead_rel_hi": ratio[2] - 1,
        "draft_forwards_per_step": _median(got["drafts"]), "draft_tokens_per_sequence": _median(got["dtok"]),
        "tokens_per_sequence": _median(got["tok"]), "plain_tokens_per_sequence": _median(got["ptok"]),
        "plain_steps": got["n_plain"], "k0_steps": got["n_k0"], "runs": runs,
    }
