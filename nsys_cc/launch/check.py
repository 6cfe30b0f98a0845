"""Measurement check: how much of each benchmark iteration the forward ranges cover.

For measured iteration i of a model (the i-th `nsys_cc:iteration` range in time order), from the model as `profile`'s
analysis read it (its forwards and iteration ranges: the trace is not read again):
- forward_ms_i = the sum of the durations of the forward ranges (`model_executable()`, or vLLM's own
  `gpu_model_runner: forward` when the plugin fell back to it) that start inside iteration
  range i (any thread or process: the rule the analysis uses for warm-up); for a model on several tensor-parallel
  ranks each forward counts once, from its first rank's start to its last rank's end (`analysis.ranks`); a forward
  still open when the capture ended (its end is the trace's) is left out, as the analysis drops it;
- latency_ms_i = vLLM's own latency of iteration i, `latencies[i]` in the benchmark's `--output-json`
  (perf_counter around one `LLM.generate` call; read by `nsys_cc.analysis.latencies`);
- share_i = forward_ms_i ÷ latency_ms_i: the part of the iteration spent in forwards (the rest is scheduling,
  sampling, input preparation, Python). A share far below 1 means c from forward ranges says little about
  end-to-end speed; a share above 1 means the trace and vLLM disagree about the iteration.
The table reports per model the medians over iterations of forward_ms, latency_ms and share, the share's
min and max, the median number of forwards per iteration, and the median of the iteration range's own NVTX
duration (`nvtx_iteration_ms`), which should match vLLM's latency closely. Iterations are paired in order;
when the trace and the JSON hold different numbers of iterations, the first min(both) are used.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from ..analysis.latencies import read_latencies
from ..analysis.result import ModelForwards
from ..analysis.speculative import MODEL_FREE_METHODS
from ..contract import DRAFT_FORWARD_RANGE, DRAFT_RANGES, FORWARD_RANGE, FORWARD_RANGES
from ..trace import open_trace
from ..trace.nvtx import matches

COLUMNS = ["model", "iterations", "forwards_per_iteration", "forward_ms", "latency_ms", "nvtx_iteration_ms",
           "forward_share", "share_min", "share_max"]

@dataclass(frozen=True)
class RunCheck:
    """What `profile` checks of a trace right after its export: its forward range and how many there are (0: none;
    the run failed), and why the run cannot be measured (None when it can)."""

    range_name: str
    forwards: int
    problem: str | None = None


def after_export(sqlite: str | Path, *, gpu: bool = False, trace_option: str | None = None, speculative: bool = False,
                 method: str | None = None) -> RunCheck:
    """`profile`'s check of a fresh export, with one open and one read of the ranges it needs (the forward and draft
    forward names only): which forward range it holds (`forward_range`), and for a GPU run whose forwards have no GPU
    work, or a speculative run (`method`: its proposer) without draft ranges, the problem (`gpu_problem`,
    `draft_problem`)."""
    with open_trace(sqlite) as trace:
        ranges = trace.nvtx_ranges(names=[*FORWARD_RANGES, *DRAFT_RANGES], nesting=False)
        name, count = _forward_range_of(ranges)
        problem = None
        if count and gpu:
            problem = _gpu_problem(trace, ranges, name, trace_option)
        if count and speculative and not problem:
            problem = _draft_problem(ranges, method)
    return RunCheck(name, count, problem)


def _forward_range_of(ranges: pd.DataFrame) -> tuple[str, int]:
    for name in FORWARD_RANGES:
        count = int(matches(ranges, (name,)).sum())
        if count:
            return name, count
    return FORWARD_RANGE, 0


def forward_range(sqlite: str | Path) -> tuple[str, int]:
    """Which forward range the export holds and how many: the plugin's `model_executable()`, else vLLM's own
    `gpu_model_runner: forward` (the plugin's fallback on vLLM layouts it does not know), else
    (`model_executable()`, 0). Only ranges of these two names are read (`after_export` does it all at once)."""
    with open_trace(sqlite) as trace:
        return _forward_range_of(trace.nvtx_ranges(names=FORWARD_RANGES, nesting=False))


# A user's own proposer class: whether it runs a model is unknown, so its runs are not required to hold draft ranges.
UNKNOWN_METHODS = ("custom_class",)


def draft_problem(sqlite: str | Path, method: str | None) -> str | None:
    """Why a speculative run's trace cannot be measured in place (None when it can, or when its proposer `method`
    runs no draft model): it holds no draft-forward range."""
    with open_trace(sqlite) as trace:
        return _draft_problem(trace.nvtx_ranges(names=DRAFT_RANGES, nesting=False), method)


def _draft_problem(ranges: pd.DataFrame, method: str | None) -> str | None:
    if method in MODEL_FREE_METHODS or method in UNKNOWN_METHODS:
        return None
    if matches(ranges, DRAFT_RANGES).any():
        return None
    return (f"the speculative run (method {method or 'draft_model'}) recorded no {DRAFT_FORWARD_RANGE} ranges: the "
            "plugin did not wrap this vLLM's proposer (see the nsys-cc warnings in the log) or vLLM ran no draft "
            "forward; without draft ranges the run cannot be measured in place, and measured as a plain draft its c "
            "would be wrong")


def gpu_problem(sqlite: str | Path, range_name: str, trace_option: str | None) -> str | None:
    """Why a GPU run's forward ranges (`range_name`) have no GPU work projected onto them, naming the likely causes
    (None when at least one has): `trace_option` is the run's nsys `-t` value."""
    with open_trace(sqlite) as trace:
        return _gpu_problem(trace, trace.nvtx_ranges(names=[range_name], nesting=False), range_name, trace_option)


def _gpu_problem(trace, ranges: pd.DataFrame, range_name: str, trace_option: str | None) -> str | None:
    from ..analysis.projection import project

    traced = (trace_option or "").split(",")
    forwards = 0
    calls = trace.rows("CUPTI_ACTIVITY_KIND_RUNTIME")
    gpu_activity = bool(trace.has_cuda)
    if calls and gpu_activity:
        matched = ranges[matches(ranges, (range_name,))]
        forwards = len(matched)
        if (project(trace, matched)["gpu_ops"].fillna(0) > 0).any():
            return None
    if "cuda" not in traced:
        return (f"no GPU work was recorded: the nsys trace option -t {trace_option} leaves out cuda (CUDA tracing); "
                "profile with the default, or add cuda to it")
    if not calls:
        return ("no CUDA API call was recorded, so no forward has GPU work: likely causes: nsys's CUPTI could not "
                "attach to this CUDA driver (an nsys older than the driver: use the nsys of the installed CUDA toolkit "
                "or a newer one; see nsys's warnings in the log), or the model ran on the CPU")
    if not gpu_activity:
        return (f"CUDA API calls were recorded ({calls}) but no GPU activity (no kernel, copy or graph rows): CUPTI "
                "recorded none of the GPU work — likely a CUPTI/driver mismatch (an nsys older than the driver: use "
                "the nsys of the installed CUDA toolkit or a newer one), or the capture stopped before CUPTI flushed")
    return (f"none of the {forwards} {range_name} ranges has GPU work projected onto it although the trace holds "
            "GPU activity: as in nsys, only CUDA calls made inside a range on its own thread count; likely causes: "
            "kernels launched from another thread or process (vLLM's engine/worker processes traced without "
            "--trace-fork-before-exec=true, a worker thread), or forward ranges recorded where CUDA was not traced")




def model_share(model: ModelForwards, bench_json: str | Path) -> dict:
    """One row of the forward-share table (see the module docstring) for a model as the analysis read it: its forwards
    (`ModelForwards.forwards`, one row per forward, across ranks on several) and its iteration ranges
    (`ModelForwards.iterations`); nothing of the trace is read again."""
    iters = model.iterations if len(model.iterations) else pd.DataFrame({"start_ns": [], "end_ns": []})
    fwd = model.forwards[~model.forwards["open_at_end"].to_numpy(dtype=bool)]
    latencies = read_latencies(bench_json) * 1e3
    n = min(len(iters), len(latencies))
    starts, ends = fwd["start_ns"].to_numpy(np.int64), fwd["end_ns"].to_numpy(np.int64)
    durations = ends - starts
    sums, counts = [], []
    for it in iters.head(n).itertuples():
        inside = (starts >= it.start_ns) & (starts <= it.end_ns)
        sums.append(durations[inside].sum() / 1e6)
        counts.append(int(inside.sum()))
    lat = latencies[:n]
    share = np.asarray(sums) / lat if n else np.array([np.nan])
    nan = float("nan")
    return {
        "model": model.name,
        "iterations": n,
        "forwards_per_iteration": float(np.median(counts)) if n else nan,
        "forward_ms": float(np.median(sums)) if n else nan,
        "latency_ms": float(np.median(lat)) if n else nan,
        "nvtx_iteration_ms": float(np.median((iters["end_ns"] - iters["start_ns"]).head(n) / 1e6)) if n else nan,
        "forward_share": float(np.median(share)),
        "share_min": float(np.min(share)),
        "share_max": float(np.max(share)),
    }


def forward_share(models: Sequence[tuple[ModelForwards, str | Path]]) -> pd.DataFrame:
    """The forward-share table for (model, bench_json) of each completed model, the models as the analysis read them
    (`CostCoefficientResult.models`); ms and shares to 3 decimals."""
    return pd.DataFrame([model_share(m, bench) for m, bench in models], columns=COLUMNS).round(3)


def share_note(row: dict | pd.Series) -> str:
    """One line for the report about one model's row."""
    if not row["iterations"]:
        return f"{row['model']}: no measured iteration ranges in the trace, so no forward share"
    return (
        f"{row['model']}: forward ranges cover {row['forward_share']:.0%} of each measured iteration "
        f"(median of {row['iterations']}; {row['forward_ms']:.2f} ms of forwards in vLLM's "
        f"{row['latency_ms']:.2f} ms iteration; range {row['share_min']:.0%}–{row['share_max']:.0%})"
    )
