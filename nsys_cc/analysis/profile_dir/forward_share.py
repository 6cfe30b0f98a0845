"""The forward-share check: how much of each benchmark iteration the forward ranges cover.

For measured iteration i of a model (the i-th `nsys_cc:iteration` range in time order, inside the model's engine
windows in an interleaved run), from what the analysis read of the trace (nothing is read again):
- forward_ms_i = the sum of the durations of the forward ranges (the range measured: `model_executable()`, or vLLM's
  own `gpu_model_runner: forward`) that start inside iteration range i (any thread or process: the rule the analysis
  uses for warm-up); for a model on several tensor-parallel ranks each forward counts once, from its first rank's
  start to its last rank's end (`analysis.forwards.ranks`); a forward still open when the capture ended (its end is the
  trace's) is left out, as the analysis drops it;
- latency_ms_i = vLLM's own latency of iteration i, `latencies[i]` in the benchmark's `--output-json` beside the
  trace (`X.bench.json`; `<label>.bench.json` in an interleaved run's folder: `latencies.model_stem`), perf_counter
  around one `LLM.generate` call;
- share_i = forward_ms_i ÷ latency_ms_i: the part of the iteration spent in forwards (the rest is scheduling,
  sampling, input preparation, Python). A share far below 1 means c from forward ranges says little about
  end-to-end speed; a share above 1 means the trace and vLLM disagree about the iteration.
The table (`CostCoefficientResult.forward_share`) has per run and model the medians over iterations of forward_ms,
latency_ms and share, the share's min and max, the median number of forwards per iteration, and the median of the
iteration range's own NVTX duration (`nvtx_iteration_ms`), which should match vLLM's latency closely. Iterations are
paired in order; when the trace and the JSON hold different numbers of iterations, the first min(both) are used. A
model without vLLM's latencies beside its trace has no row.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import numpy as np
import pandas as pd

from ...formats.bench_json import read_latencies

COLUMNS = ["run", "model", "iterations", "forwards_per_iteration", "forward_ms", "latency_ms", "nvtx_iteration_ms",
           "forward_share", "share_min", "share_max"]

__all__ = ["COLUMNS", "share_notes", "share_row", "share_table"]


def share_row(name: str, forwards: pd.DataFrame, iterations: pd.DataFrame, bench_json: str | os.PathLike,
              run: int) -> dict:
    """One row of the table (module docstring) for model `name` of run `run`: its forwards (start_ns, end_ns,
    open_at_end; one row per forward, across ranks on several) and its measured iteration ranges (start_ns, end_ns)
    as the analysis read them, against vLLM's latencies in `bench_json`."""
    iters = iterations if len(iterations) else pd.DataFrame({"start_ns": [], "end_ns": []})
    fwd = forwards[~forwards["open_at_end"].to_numpy(dtype=bool)] if "open_at_end" in forwards else forwards
    latencies = read_latencies(bench_json) * 1e3
    n = min(len(iters), len(latencies))
    starts, ends = fwd["start_ns"].to_numpy(np.int64), fwd["end_ns"].to_numpy(np.int64)
    order = np.argsort(starts, kind="stable")
    starts, durations = starts[order], (ends - starts)[order]
    # the forwards starting inside each iteration [start, end]: a run of the sorted starts, summed by a running
    # total (exact: integer nanoseconds)
    lo = np.searchsorted(starts, iters["start_ns"].to_numpy(np.int64)[:n], side="left")
    hi = np.searchsorted(starts, iters["end_ns"].to_numpy(np.int64)[:n], side="right")
    total = np.concatenate([[0], np.cumsum(durations)])
    counts = np.maximum(hi - lo, 0)
    sums = np.where(hi > lo, total[np.maximum(hi, lo)] - total[lo], 0) / 1e6
    lat = latencies[:n]
    share = np.asarray(sums) / lat if n else np.array([np.nan])
    nan = float("nan")
    return {
        "run": int(run),
        "model": name,
        "iterations": n,
        "forwards_per_iteration": float(np.median(counts)) if n else nan,
        "forward_ms": float(np.median(sums)) if n else nan,
        "latency_ms": float(np.median(lat)) if n else nan,
        "nvtx_iteration_ms": float(np.median((iters["end_ns"] - iters["start_ns"]).head(n) / 1e6)) if n else nan,
        "forward_share": float(np.median(share)),
        "share_min": float(np.min(share)),
        "share_max": float(np.max(share)),
    }


def share_table(rows: Sequence[dict]) -> pd.DataFrame:
    """The table from its rows (`share_row`), run by run in the order the models were given; ms and shares to 3
    decimals."""
    table = pd.DataFrame(list(rows), columns=COLUMNS).round(3)
    return table.sort_values("run", kind="stable").reset_index(drop=True)


def share_notes(table: pd.DataFrame) -> list[str]:
    """One line per model of the table: its forward share (with several runs, the median of the per-run medians and
    their range)."""
    notes = []
    for model in dict.fromkeys(table["model"]):
        rows = table[table["model"] == model]
        if not rows["iterations"].any():
            notes.append(f"{model}: no measured iteration ranges in the trace, so no forward share")
        elif len(rows) == 1:
            r = rows.iloc[0]
            notes.append(f"{model}: forward ranges cover {r['forward_share']:.0%} of each measured iteration (median "
                         f"of {r['iterations']}; {r['forward_ms']:.2f} ms of forwards in vLLM's {r['latency_ms']:.2f} "
                         f"ms iteration; range {r['share_min']:.0%}–{r['share_max']:.0%})")
        else:
            med = rows["forward_share"]
            notes.append(f"{model}: forward ranges cover {med.median():.0%} of each measured iteration (median over "
                         f"{len(rows)} runs; per run {med.min():.0%}–{med.max():.0%}; "
                         f"{rows['forward_ms'].median():.2f} ms of forwards in vLLM's "
                         f"{rows['latency_ms'].median():.2f} ms iteration)")
    return notes
