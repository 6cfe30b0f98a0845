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
from ..analysis.speculative import MODEL_FREE_METHODS
from ..errors import InputError
from ..trace import open_trace
from ..trace.bulk import PID_MASK
from .vllm_plugin import DRAFT_FORWARD_RANGE, FORWARD_RANGE, ITERATION_RANGE, VLLM_SCOPES_RANGE

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


# A user's own proposer class: whether it runs a model is unknown, so its runs are not required to hold draft ranges.
UNKNOWN_METHODS = ("custom_class",)
DRAFT_RANGES = (DRAFT_FORWARD_RANGE, "gpu_model_runner: draft")


def draft_problem(sqlite: str | Path, method: str | None) -> str | None:
    """Why a speculative run's trace cannot be measured in place (None when it can, or when its proposer `method`
    runs no draft model): it holds no draft-forward range."""
    if method in MODEL_FREE_METHODS or method in UNKNOWN_METHODS:
        return None
    names = push_pop_ranges(sqlite)["name"]
    if names.isin(DRAFT_RANGES).any():
        return None
    return (f"the speculative run (method {method or 'draft_model'}) recorded no {DRAFT_FORWARD_RANGE} ranges: the "
            "plugin did not wrap this vLLM's proposer (see the nsys-cc warnings in the log) or vLLM ran no draft "
            "forward; without draft ranges the run cannot be measured in place, and measured as a plain draft its c "
            "would be wrong")


def gpu_problem(sqlite: str | Path, range_name: str, trace_option: str | None) -> str | None:
    """Why a GPU run's forward ranges (`range_name`) have no GPU work projected onto them, naming the likely causes
    (None when at least one has): `trace_option` is the run's nsys `-t` value."""
    from ..analysis.projection import project
    from ..trace.nvtx import matches

    traced = (trace_option or "").split(",")
    forwards = 0
    with open_trace(sqlite) as trace:
        calls = trace.rows("CUPTI_ACTIVITY_KIND_RUNTIME")
        gpu_activity = bool(trace.has_cuda)
        if calls and gpu_activity:
            ranges = trace.nvtx_ranges()
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
