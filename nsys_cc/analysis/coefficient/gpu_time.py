"""GPU time against launch time (issue 42 item 3): on a trace with GPU work the answer is GPU time.

A range's CPU time (wall) is the time the CPU took to *launch* its work: the GPU runs on after the range ends
(asynchronous launches, CUDA graphs), or idles between launches the CPU was slow to make. On real vLLM GPU traces a
small draft's step takes a large share of the target's CPU time and a small fraction of its GPU time, so a c from CPU
times can be wrong several-fold. So on a GPU trace (every model's forwards measured on the GPU) the **headline** metric
(`headline`) is `metrics.GPU_HEADLINE`, gpu_span: the GPU's time from the first op of a token's work to the end of
its last — what the GPU took to produce the token as the launches fed it, which stretches when the launches are slow
(a launch-bound model's idle gaps are in it) and is not cut short when the CPU moves on early (graphs, async
launches). gpu_busy (the same without the idle gaps: what the work would take fed without delay) and kernel_sum stand
beside it; wall stays beside them as the launch time. On a CPU trace the headline is wall. docs/definitions.md ("GPU
time is the answer") says why, and the speculative analysis heads its figures with the same metric.

`table` says, per model and per draft, where the two disagree (`DISAGREE`) — from the medians of the tokens in the
phase c is judged on (decode, else all):

- per model: launch_ms (wall), gpu_ms (gpu_span), busy_ms (gpu_busy); launch_ratio = launch ÷ gpu, and `disagrees`
  when it lies outside [1/DISAGREE, DISAGREE]; busy_share = busy ÷ gpu (the share of its GPU span the GPU worked) and
  its class by `diagnosis.boundness` (launch-bound below 50 %: the GPU idles between launches most of its span;
  partly launch-bound below 80 %; else GPU-bound);
- per draft (its row; NaN on the target's): c_launch (c on wall), c_gpu (c on gpu_span), c_ratio = c_launch ÷ c_gpu,
  and `c_disagrees` when it lies outside [1/DISAGREE, DISAGREE]: a c read off CPU times would be that many times off.

The sentences that say it are `nsys_cc.report.gpu_time_text`'s.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pandas as pd

from ..metrics import GPU_BUSY, GPU_HEADLINE, LAUNCH_TIME, WALL, decision_phase
from .diagnosis import DISAGREE, apart, boundness

__all__ = ["COLUMNS", "DISAGREE", "LAUNCH_TIME", "apart", "boundness", "called", "headline", "table"]



def called(metric: str, headline: str) -> str:
    """`metric`'s key as a note names it: wall is the launch time in a result headlined on the GPU."""
    return LAUNCH_TIME if metric == WALL and headline != WALL else metric

COLUMNS = ["model", "role", "phase", "launch_ms", "gpu_ms", "busy_ms", "launch_ratio", "disagrees", "busy_share",
           "boundness", "c_launch", "c_gpu", "c_ratio", "c_disagrees"]


def headline(models: Sequence) -> str:
    """The metric c is headlined on: `metrics.GPU_HEADLINE` when every model's forwards were measured on the GPU
    (`ModelForwards.has_cuda`), else wall."""
    return GPU_HEADLINE if models and all(m.has_cuda for m in models) else WALL


def table(models: Sequence, tokens: pd.DataFrame, coefficients: pd.DataFrame) -> pd.DataFrame:
    """One row per model (COLUMNS; module docstring) when the result is headlined on the GPU, else empty. `tokens`:
    the result's token table (`token.token_table`: each model's token medians per phase and metric); `coefficients`:
    its coefficients (c per draft, phase and metric)."""
    if headline(models) == WALL or tokens.empty:
        return pd.DataFrame(columns=COLUMNS)
    medians = {(r.model, r.phase, r.metric): float(r.token_median_ms) for r in tokens.itertuples(index=False)}
    cs = {(r.draft, r.phase, r.metric): float(r.c) for r in coefficients.itertuples(index=False)}
    target = models[0]
    rows = []
    for m in models:
        common = [p for p in m.phases if p in target.phases]
        phase = decision_phase(common) or decision_phase(m.phases)
        if phase is None:
            continue
        launch, gpu, busy = (medians.get((m.name, phase, k), math.nan) for k in (WALL, GPU_HEADLINE, GPU_BUSY))
        ratio = launch / gpu if gpu > 0 else math.nan
        share = busy / gpu if gpu > 0 else math.nan
        c_launch, c_gpu = (cs.get((m.name, phase, k), math.nan) for k in (WALL, GPU_HEADLINE))
        c_ratio = c_launch / c_gpu if m is not target and c_gpu > 0 else math.nan
        rows.append({"model": m.name, "role": m.role, "phase": phase, "launch_ms": launch, "gpu_ms": gpu,
                     "busy_ms": busy, "launch_ratio": ratio, "disagrees": apart(ratio), "busy_share": share,
                     "boundness": boundness(share) if np.isfinite(share) else None,
                     "c_launch": c_launch if m is not target else math.nan,
                     "c_gpu": c_gpu if m is not target else math.nan, "c_ratio": c_ratio,
                     "c_disagrees": apart(c_ratio)})
    return pd.DataFrame(rows, columns=COLUMNS)
