"""Partial CUDA loss, said instead of silent (issue 29 item 5c).

Two ways a GPU trace can lose part of its work without any error: a GPU op whose launching CUDA API call is not in
the trace (no runtime row with its process and correlationId: CUPTI dropped the launch record, or the op came from a
process that was not traced) belongs to no range and is in no forward's metrics; and a forward range that launched no
GPU work on its own thread (its kernels were launched from another thread, or their records were lost) has no GPU
metrics and is left out of the GPU metrics' medians, while wall counts it. Both shares are reported for every model
of a GPU trace (`GpuLoss`, the result's `models[].gpu_loss` in JSON) and a note warns when either is above
`WARN_SHARE`. A trace with no GPU metrics at all is `coefficient.model._gpu_state`'s case, said there.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..metrics import COLUMNS, GPU_SPAN
from .launches import shared_ids, unlaunched_ops
from .ranges import quoted

# Above this share (of the trace's GPU ops, or of a model's kept forwards) the loss is warned about in a note.
WARN_SHARE = 0.01


@dataclass(frozen=True)
class GpuLoss:
    """ops: the trace's GPU ops; unlaunched: those without a launching call; forwards: kept forwards; without_gpu:
    those that launched no GPU work (NaN shares where there is nothing to count)."""

    ops: int = 0
    unlaunched: int = 0
    forwards: int = 0
    without_gpu: int = 0

    @property
    def unlaunched_share(self) -> float:
        return self.unlaunched / self.ops if self.ops else math.nan

    @property
    def without_gpu_share(self) -> float:
        return self.without_gpu / self.forwards if self.forwards else math.nan

    def to_dict(self) -> dict:
        def share(x: float) -> float | None:
            return None if math.isnan(x) else x

        return {"gpu_ops": self.ops, "gpu_ops_without_launch": self.unlaunched,
                "gpu_ops_without_launch_share": share(self.unlaunched_share), "forwards": self.forwards,
                "forwards_without_gpu_work": self.without_gpu,
                "forwards_without_gpu_work_share": share(self.without_gpu_share)}


def measure(trace, kept: pd.DataFrame) -> GpuLoss:
    """The loss of one model's kept forwards (rows with `gpu_span_ns`) in `trace`."""
    unlaunched, ops = unlaunched_ops(trace)
    span = pd.to_numeric(kept[COLUMNS[GPU_SPAN]], errors="coerce").to_numpy(dtype=float)
    return GpuLoss(ops=ops, unlaunched=unlaunched, forwards=len(kept), without_gpu=int(np.isnan(span).sum()))


def warnings(loss: GpuLoss, range_name: str, threshold: float = WARN_SHARE) -> list[str]:
    """The notes for a loss above `threshold` (none below it)."""
    out = []
    if loss.unlaunched_share > threshold:
        out.append(f"warning: {loss.unlaunched_share:.1%} of the trace's GPU ops ({loss.unlaunched:,} of "
                   f"{loss.ops:,}) found no CUDA API call that launched them (no runtime row with their process and "
                   "correlationId): they are in no range's GPU metrics — CUPTI dropped launch records (a buffer "
                   "overflow, a capture cut short), or the work came from a process nsys did not trace")
    if loss.without_gpu_share > threshold:
        out.append(f"warning: {loss.without_gpu:,} of its {loss.forwards:,} kept {quoted(range_name)} ranges "
                   f"({loss.without_gpu_share:.1%}) launched no GPU work on their own thread: they have no GPU "
                   "metrics and are left out of the GPU metrics' medians (wall counts them) — kernels launched from "
                   "another thread, or their launch records lost")
    return out


def shared_id_warnings(trace) -> list[str]:
    """The notes on correlationIds shared in ways CUPTI never writes (`launches.Launches`, issue 45): wherever
    the model's GPU state ends up (ops counted for the wrong range, or for none of the model's), the cause is said."""
    shared_calls, shared_ops = shared_ids(trace)
    out = []
    if shared_ops:
        out.append(f"warning: {shared_ops:,} GPU ops share their process's correlationId with another op, and the "
                   "trace traced no CUDA graph node: CUPTI gives each launch its own id, so the export is damaged; "
                   "they are all counted for the one call with that id, and the ranges that launched them miss "
                   "their work")
    if shared_calls:
        out.append(f"warning: {shared_calls:,} CUDA API calls share their process's correlationId with a call that "
                   "neither wraps them nor is wrapped by them (CUPTI gives each launch its own id: the export is "
                   "damaged); each GPU op of theirs is counted for the latest of them that started before it")
    return out
