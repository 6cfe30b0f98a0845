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
from pathlib import Path

import numpy as np
import pandas as pd

from ..analysis.latencies import read_latencies
from ..analysis.result import ModelForwards
from ..contract import FORWARD_RANGE, FORWARD_RANGES
from ..trace import open_trace
from ..trace.nvtx import matches

COLUMNS = ["model", "iterations", "forwards_per_iteration", "forward_ms", "latency_ms", "nvtx_iteration_ms",
           "forward_share", "share_min", "share_max"]

def forward_range(sqlite: str | Path) -> tuple[str, int]:
    """Which forward range the export holds and how many: the plugin's `model_executable()`, else vLLM's own
    `gpu_model_runner: forward` (the plugin's fallback on vLLM layouts it does not know), else
    (`model_executable()`, 0). `profile` asks right after each export; only ranges of these two names are read."""
    with open_trace(sqlite) as trace:
        ranges = trace.nvtx_ranges(names=FORWARD_RANGES, nesting=False)
    for name in FORWARD_RANGES:
        count = int(matches(ranges, (name,)).sum())
        if count:
            return name, count
    return FORWARD_RANGE, 0


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
