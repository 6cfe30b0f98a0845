"""Measurement check: how much of each benchmark iteration the forward ranges cover.

For measured iteration i of a model (the i-th `nsys_cc:iteration` range in time order):
- forward_ms_i = the sum of the durations of the forward ranges (`model_executable()`, or vLLM's own
  `gpu_model_runner: forward` when the plugin fell back to it) that start inside iteration
  range i (any thread or process: the rule the analysis uses for warm-up); for a model on several tensor-parallel
  ranks each step counts once, from its first rank's start to its last rank's end (`analysis.ranks`); a forward
  (step) still open when the capture ended (its end is the trace's) is left out, as the analysis drops it;
- latency_ms_i = vLLM's own latency of iteration i, `latencies[i]` in the benchmark's `--output-json`
  (perf_counter around one `LLM.generate` call);
- share_i = forward_ms_i ÷ latency_ms_i: the part of the iteration spent in forwards (the rest is scheduling,
  sampling, input preparation, Python). A share far below 1 means c from forward ranges says little about
  end-to-end speed; a share above 1 means the trace and vLLM disagree about the iteration.
The table reports per model the medians over iterations of forward_ms, latency_ms and share, the share's
min and max, the median number of forwards per iteration, and the median of the iteration range's own NVTX
duration (`nvtx_iteration_ms`), which should match vLLM's latency closely. Iterations are paired in order;
when the trace and the JSON hold different numbers of iterations, the first min(both) are used.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from ..analysis.ranks import step_bounds
from ..errors import InputError
from ..trace import open_trace
from ..trace.bulk import PID_MASK
from .vllm_plugin import FORWARD_RANGE, ITERATION_RANGE, VLLM_SCOPES_RANGE

COLUMNS = ["model", "iterations", "forwards_per_iteration", "forward_ms", "latency_ms", "nvtx_iteration_ms",
           "forward_share", "share_min", "share_max"]

def push_pop_ranges(sqlite: str | Path) -> pd.DataFrame:
    """NVTX ranges of an export (through the trace reader): start_ns, end_ns, name, global_pid (the process),
    open_at_end."""
    with open_trace(sqlite) as trace:
        ranges = trace.nvtx_ranges()
    return pd.DataFrame({"start_ns": ranges["start_ns"], "end_ns": ranges["end_ns"],
                         "name": ranges["name"].astype(str), "global_pid": ranges["global_tid"] & PID_MASK,
                         "open_at_end": ranges["open_at_end"]})


def forward_range(sqlite: str | Path) -> tuple[str, int]:
    """Which forward range the export holds and how many: the plugin's `model_executable()`, else vLLM's own
    `gpu_model_runner: forward` (the plugin's fallback on vLLM layouts it does not know), else
    (`model_executable()`, 0)."""
    counts = push_pop_ranges(sqlite)["name"].value_counts()
    for name in (FORWARD_RANGE, VLLM_SCOPES_RANGE):
        if counts.get(name, 0):
            return name, int(counts[name])
    return FORWARD_RANGE, 0


def bench_latencies(bench_json: str | Path) -> list[float]:
    """vLLM's per-iteration latencies in seconds, from `--output-json`."""
    try:
        doc = json.loads(Path(bench_json).read_text())
        return [float(x) for x in doc["latencies"]]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise InputError(f"{bench_json} is not a vLLM latency --output-json: {exc}") from None


def model_share(label: str, sqlite: str | Path, bench_json: str | Path, range_name: str = FORWARD_RANGE,
                scope: str | None = None) -> dict:
    """One row of the forward-share table (see the module docstring), forwards being the ranges `range_name`;
    `scope`: the model's engine label in a trace that holds several (`analysis.scope`)."""
    from ..analysis.scope import in_scope

    ranges = in_scope(push_pop_ranges(sqlite), scope, path=str(sqlite))
    iters = ranges[ranges["name"] == ITERATION_RANGE].sort_values("start_ns")
    fwd = ranges[ranges["name"] == range_name]
    latencies = np.asarray(bench_latencies(bench_json)) * 1e3
    n = min(len(iters), len(latencies))
    starts, ends = step_bounds(fwd["global_pid"].to_numpy(np.int64), fwd["start_ns"].to_numpy(np.int64),
                               fwd["end_ns"].to_numpy(np.int64), fwd["open_at_end"].to_numpy(bool))
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
        "model": label,
        "iterations": n,
        "forwards_per_iteration": float(np.median(counts)) if n else nan,
        "forward_ms": float(np.median(sums)) if n else nan,
        "latency_ms": float(np.median(lat)) if n else nan,
        "nvtx_iteration_ms": float(np.median((iters["end_ns"] - iters["start_ns"]).head(n) / 1e6)) if n else nan,
        "forward_share": float(np.median(share)),
        "share_min": float(np.min(share)),
        "share_max": float(np.max(share)),
    }


def forward_share(models: Sequence[tuple[str, str | Path, str | Path]],
                  range_name: str = FORWARD_RANGE, scopes: Sequence[str | None] | None = None) -> pd.DataFrame:
    """The forward-share table for (label, sqlite, bench_json) of each completed model (ms and shares to 3 decimals);
    `scopes`: each model's engine label when the traces hold several models."""
    sc = list(scopes) if scopes is not None else [None] * len(models)
    return pd.DataFrame([model_share(*m, range_name, s) for m, s in zip(models, sc)], columns=COLUMNS).round(3)


def share_note(row: dict | pd.Series) -> str:
    """One line for the report about one model's row."""
    if not row["iterations"]:
        return f"{row['model']}: no measured iteration ranges in the trace, so no forward share"
    return (
        f"{row['model']}: forward ranges cover {row['forward_share']:.0%} of each measured iteration "
        f"(median of {row['iterations']}; {row['forward_ms']:.2f} ms of forwards in vLLM's "
        f"{row['latency_ms']:.2f} ms iteration; range {row['share_min']:.0%}–{row['share_max']:.0%})"
    )
