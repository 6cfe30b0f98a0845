"""The numbers behind the diagnosis of why a draft's forward costs what it does, against the target's — from the
evidence of the trace, not from its CPU times alone.

Per draft (decode phase when there is one, else `all`), from the medians of the per-forward metrics:
- busy share = gpu_busy ÷ gpu_span: how much of its GPU span the GPU worked. Below 50 % the forward is
  "launch-bound" (its GPU idles between launches the CPU is slow to make: kernel launches and Python set its pace),
  50–80 % "partly launch-bound", from 80 % "GPU-bound" (`boundness`; the same classes `gpu_time` gives per model).
  The span, not the range's CPU time, is the base: a forward replayed as a CUDA graph returns to the CPU long before
  its GPU work ends, so busy ÷ CPU time says nothing of idle gaps (it can exceed 100 %: `outlives_range`, the work runs
  past the range that launched it).
- graph replays counted: `replayed_share`, the share of its kernels that came from launches of several kernels (a
  CUDA-graph replay: K kernels from L launching calls per forward, at least K − L + 1 of them from such launches),
  and `graphs` (that share is half or more, or its forwards replay graphs recorded whole, one `[CUDA graph N]` op per
  launch). A graph-replayed forward is never told to use CUDA graphs.
- c on launch time (wall) and on the GPU span; when they are more than `gpu_time.DISAGREE`× apart, `launch_side` says
  whose launch time makes the gap: the side whose launch time lies farther from its own GPU span (its
  `launch_ratio` / `target_launch_ratio` = launch ÷ span: below 1 its GPU runs on after its launches, above 1 its CPU
  time holds work that launches nothing).
- kernels per forward, draft against target: a draft that launches about as many kernels as its target pays about
  the same launch cost, whatever its size.
- the kernel category whose time per forward differs most between target and draft, every category's time per
  forward for both (`category_comparison`), and the draft's top kernels by time per forward (`top_kernels`).
The sentences that say it are written by `nsys_cc.report.sentence_text.diagnosis_text`.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from ..metrics import GPU_BUSY_NS, GPU_SPAN_NS, LAUNCH_API_NS, WALL_NS, decision_phase
from .result import ModelForwards

DIAGNOSIS_COLUMNS = [
    "draft", "phase", "gpu", "cpu_only_models", "wall_ms", "target_wall_ms", "c_wall", "gpu_busy_ms",
    "target_gpu_busy_ms", "c_gpu_busy", "busy_share", "boundness", "outlives_range", "launch_dominated",
    "kernels_per_forward", "target_kernels_per_forward", "launch_api_ms", "gpu_idle_ms",
    # the GPU span as the base, graph replays, whose launch time makes the two c's disagree
    "gpu_span_ms", "target_gpu_span_ms", "c_gpu_span", "target_busy_share", "target_boundness",
    "launches_per_forward", "replayed_share", "graphs", "target_replayed_share", "target_graphs", "launch_ratio",
    "target_launch_ratio", "launch_side",
]
# Launch time and GPU time (or the c of each) disagree when one is more than this many times the other (as
# `gpu_time.DISAGREE`, which imports it from here).
DISAGREE = 1.5


def _median(m: ModelForwards, phase: str, col: str) -> float:
    return m.phase_median(phase, col)


def boundness(busy_share: float) -> str:
    """launch-bound (GPU busy < 50 % of the GPU span: the GPU idles between launches), partly launch-bound (< 80 %),
    else GPU-bound."""
    if busy_share < 0.5:
        return "launch-bound"
    if busy_share < 0.8:
        return "partly launch-bound"
    return "GPU-bound"


def apart(ratio: float) -> bool:
    """Whether a ratio of two times (or of two c) lies outside [1/DISAGREE, DISAGREE]."""
    return bool(math.isfinite(ratio) and ratio > 0 and max(ratio, 1 / ratio) > DISAGREE)


def _graph_ops(m: ModelForwards, phase: str) -> float:
    """Whole-graph ops (`[CUDA graph N]`, a graph recorded whole) per kept forward of `phase`."""
    totals = m.op_totals
    if totals.empty or not m.phase_count(phase):
        return 0.0
    if phase != "all":
        totals = totals[totals["group"].to_numpy(dtype=object) == phase]
    return float(totals.loc[totals["kind"].astype(str) == "graph", "count"].sum()) / m.phase_count(phase)


def replays(m: ModelForwards, phase: str) -> tuple[float, float, bool]:
    """(launching calls per forward, the share of its kernels from multi-kernel launches, whether it replays CUDA
    graphs) from the medians of its forwards' kernels (K) and launching calls (L): at least K − L + 1 of K kernels
    came from launches of several (exact for one graph launch per forward); graphs recorded whole count as replays."""
    k, launches = _median(m, phase, "kernels"), _median(m, phase, "gpu_ops")
    share = (k - launches + 1) / k if k > 0 and math.isfinite(launches) and k > launches else 0.0
    return launches, share, bool(share >= 0.5 or _graph_ops(m, phase) > 0)


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
    span, span_t = _median(d, phase, GPU_SPAN_NS), _median(t, phase, GPU_SPAN_NS)
    share = busy / span if span > 0 else float("nan")
    share_t = busy_t / span_t if span_t > 0 else float("nan")
    c_busy = busy / busy_t if busy_t > 0 else float("nan")
    c_span = span / span_t if span_t > 0 else float("nan")
    ratio = wall_d / span if span > 0 else float("nan")
    ratio_t = wall_t / span_t if span_t > 0 else float("nan")
    side = None
    if apart(c_wall / c_span if c_span > 0 else float("nan")) and math.isfinite(ratio) and math.isfinite(ratio_t):
        side = "draft" if abs(math.log(ratio)) >= abs(math.log(ratio_t)) else "target"
    launches, replayed, graphs = replays(d, phase)
    _, replayed_t, graphs_t = replays(t, phase)
    kind = boundness(share) if np.isfinite(share) else None
    return {**row, "gpu_busy_ms": busy / 1e6, "target_gpu_busy_ms": busy_t / 1e6, "c_gpu_busy": c_busy,
            "busy_share": share, "boundness": kind, "outlives_range": bool(busy > wall_d),
            "launch_dominated": kind == "launch-bound",
            "kernels_per_forward": _median(d, phase, "kernels"),
            "target_kernels_per_forward": _median(t, phase, "kernels"),
            "launch_api_ms": _median(d, phase, LAUNCH_API_NS) / 1e6, "gpu_idle_ms": max(span - busy, 0) / 1e6,
            "gpu_span_ms": span / 1e6, "target_gpu_span_ms": span_t / 1e6, "c_gpu_span": c_span,
            "target_busy_share": share_t, "target_boundness": boundness(share_t) if np.isfinite(share_t) else None,
            "launches_per_forward": launches, "replayed_share": replayed, "graphs": graphs,
            "target_replayed_share": replayed_t, "target_graphs": graphs_t, "launch_ratio": ratio,
            "target_launch_ratio": ratio_t, "launch_side": side}


def diagnose(target: ModelForwards, drafts: list[ModelForwards]) -> pd.DataFrame:
    """One row per draft, columns `DIAGNOSIS_COLUMNS`: the phase judged (decode when both measured it, else all),
    `gpu` (both have GPU numbers; else only the wall columns are filled, and `cpu_only_models` names the models
    whose traces have no CUDA tables), medians in ms, the c's on launch time (wall), GPU span and GPU busy time, the
    busy share of the GPU span and its class (the target's too), `outlives_range` (GPU busy longer than the range's
    launch time: the work runs past the range), the graph replays (`replayed_share`, `graphs`; the target's too),
    `launch_side` (whose launch time makes c on launch time and c on the GPU span disagree, None when they agree) and
    `launch_dominated` (the draft is launch-bound: its GPU idles between launches most of its span)."""
    rows = []
    for d in drafts:
        phase = decision_phase(set(d.phases) & set(target.phases)) or "all"
        rows.append(_numbers(target, d, phase))
    return pd.DataFrame(rows, columns=DIAGNOSIS_COLUMNS)
