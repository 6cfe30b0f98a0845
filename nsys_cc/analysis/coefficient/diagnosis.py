"""The numbers behind the diagnosis of why a draft's forward costs what it does, against the target's.

Per draft (decode phase when there is one, else `all`), from the medians of the per-forward metrics:
- busy share = gpu_busy / wall. Below 50 % the forward is "launch-bound" (the GPU waits on the CPU for most of the
  forward: kernel launches and Python dominate), 50–80 % "partly launch-bound", from 80 % "GPU-bound". Above 100 %
  the GPU work runs past the range that launched it (asynchronous launches): said so, not given as a share.
- kernels per forward, draft against target: a draft that launches about as many kernels as its target pays about
  the same launch cost, whatever its size.
- the kernel category whose time per forward differs most between target and draft, every category's time per
  forward for both (`category_comparison`), and the draft's top kernels by time per forward (`top_kernels`).
The sentences that say it are written by `nsys_cc.report.sentence_text.diagnosis_text`.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..metrics import GPU_BUSY_NS, GPU_SPAN_NS, LAUNCH_API_NS, WALL_NS, decision_phase
from .result import ModelForwards

DIAGNOSIS_COLUMNS = [
    "draft", "phase", "gpu", "cpu_only_models", "wall_ms", "target_wall_ms", "c_wall", "gpu_busy_ms",
    "target_gpu_busy_ms", "c_gpu_busy", "busy_share", "boundness", "outlives_range", "launch_dominated",
    "kernels_per_forward", "target_kernels_per_forward", "launch_api_ms", "gpu_idle_ms",
]


def _median(m: ModelForwards, phase: str, col: str) -> float:
    return m.phase_median(phase, col)


def boundness(busy_share: float) -> str:
    """launch-bound (GPU busy < 50 % of wall), partly launch-bound (< 80 %), else GPU-bound."""
    if busy_share < 0.5:
        return "launch-bound"
    if busy_share < 0.8:
        return "partly launch-bound"
    return "GPU-bound"


def category_comparison(categories: pd.DataFrame, target: str, draft: str, phase: str) -> pd.DataFrame:
    """Per kernel category (index), time per forward in ms of the `target` and the `draft` (0 where one has none)
    and `saved` = target − draft, ordered by the target's time, largest first; empty without categories."""
    if categories.empty:
        return pd.DataFrame(columns=["target", "draft", "saved"])
    sub = categories[categories["phase"] == phase]
    t = sub[sub["model"] == target].set_index("category")["time_per_forward_ms"]
    d = sub[sub["model"] == draft].set_index("category")["time_per_forward_ms"]
    both = pd.concat([t.rename("target"), d.rename("draft")], axis=1).fillna(0.0)
    both["saved"] = both["target"] - both["draft"]
    return both.sort_values("target", ascending=False)


def top_kernels(kernel_summary: pd.DataFrame, draft: str, phase: str, n: int = 3) -> pd.DataFrame:
    """The draft's `n` GPU ops with the most time per forward in `phase` (rows of the kernel summary)."""
    if kernel_summary.empty:
        return kernel_summary
    k = kernel_summary
    return k[(k["model"] == draft) & (k["phase"] == phase)].nlargest(n, "time_per_forward_ms")


def _numbers(t: ModelForwards, d: ModelForwards, phase: str) -> dict:
    wall_d, wall_t = _median(d, phase, WALL_NS), _median(t, phase, WALL_NS)
    c_wall = wall_d / wall_t if wall_t > 0 and wall_d > 0 else float("nan")  # zero-length forwards: no ratio
    busy, busy_t = _median(d, phase, GPU_BUSY_NS), _median(t, phase, GPU_BUSY_NS)
    gpu = d.has_cuda and t.has_cuda and not (np.isnan(busy) or np.isnan(busy_t))
    row: dict[str, object] = {"draft": d.name, "phase": phase, "gpu": gpu,
           "cpu_only_models": ", ".join(m.name for m in (t, d) if not m.has_cuda and "no CUDA tables" in m.gpu_note),
           "wall_ms": wall_d / 1e6, "target_wall_ms": wall_t / 1e6, "c_wall": c_wall}
    if not gpu:
        return row
    share = busy / wall_d if wall_d > 0 else float("nan")
    c_busy = busy / busy_t if busy_t > 0 else float("nan")
    span = _median(d, phase, GPU_SPAN_NS)
    return {**row, "gpu_busy_ms": busy / 1e6, "target_gpu_busy_ms": busy_t / 1e6, "c_gpu_busy": c_busy,
            "busy_share": share, "boundness": boundness(share), "outlives_range": bool(share > 1),
            "launch_dominated": bool(np.isfinite(c_busy) and c_wall > 1.5 * c_busy),
            "kernels_per_forward": _median(d, phase, "kernels"),
            "target_kernels_per_forward": _median(t, phase, "kernels"),
            "launch_api_ms": _median(d, phase, LAUNCH_API_NS) / 1e6, "gpu_idle_ms": max(span - busy, 0) / 1e6}


def diagnose(target: ModelForwards, drafts: list[ModelForwards]) -> pd.DataFrame:
    """One row per draft, columns `DIAGNOSIS_COLUMNS`: the phase judged (decode when both measured it, else all),
    `gpu` (both have GPU numbers; else only the wall columns are filled, and `cpu_only_models` names the models
    whose traces have no CUDA tables), medians in ms, the cs on wall and GPU busy time, the busy share and its
    class, `outlives_range` (GPU busy longer than the range's wall: the work runs past the range), and
    `launch_dominated` (c on wall > 1.5 × c on GPU busy)."""
    rows = []
    for d in drafts:
        phase = decision_phase(set(d.phases) & set(target.phases)) or "all"
        rows.append(_numbers(target, d, phase))
    return pd.DataFrame(rows, columns=DIAGNOSIS_COLUMNS)
