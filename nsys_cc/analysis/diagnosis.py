"""Plain-language diagnosis of why a draft's forward costs what it does, against the target's.

Per draft (decode phase when there is one, else `all`), from the medians of the per-forward metrics:
- busy share = gpu_busy / wall. Below 50 % the forward is "launch-bound" (the GPU waits on the CPU for most of the
  forward: kernel launches and Python dominate), 50–80 % "partly launch-bound", from 80 % "GPU-bound". Above 100 %
  the GPU work runs past the range that launched it (asynchronous launches): said so, not given as a share.
- kernels per forward, draft against target: a draft that launches about as many kernels as its target pays about
  the same launch cost, whatever its size.
- the kernel category whose time per forward differs most between target and draft, every category's time per
  forward for both, and the draft's top kernels by time per forward.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from .metrics import decision_phase
from .result import ModelForwards
from .stats import median


def _median(m: ModelForwards, phase: str, col: str) -> float:
    return median(m.phase_rows(phase)[col])


def _boundness(busy_share: float) -> str:
    if busy_share < 0.5:
        return "launch-bound"
    if busy_share < 0.8:
        return "partly launch-bound"
    return "GPU-bound"


def _category_delta(categories: pd.DataFrame, target: str, draft: str, phase: str) -> str | None:
    cats = categories
    if cats.empty:
        return None
    sub = cats[cats["phase"] == phase]
    t = sub[sub["model"] == target].set_index("category")["time_per_forward_ms"]
    d = sub[sub["model"] == draft].set_index("category")["time_per_forward_ms"]
    both = pd.concat([t.rename("target"), d.rename("draft")], axis=1).fillna(0.0)
    if both.empty:
        return None
    both["saved"] = both["target"] - both["draft"]
    top = both["draft"].idxmax()
    most = both["saved"].idxmax()
    per_cat = ", ".join(f"{cat} {row.draft:.3f} vs {row.target:.3f}"
                        for cat, row in both.sort_values("target", ascending=False).iterrows())
    return (
        f"its largest category is {top} ({both.at[top, 'draft']:.3f} ms per forward vs {both.at[top, 'target']:.3f} ms "
        f"for the target); the draft saves most in {most} ({both.at[most, 'saved']:.3f} ms per forward); "
        f"per category, draft vs target ms per forward: {per_cat}"
    )


def _top_kernels(kernel_summary: pd.DataFrame, draft: str, phase: str, n: int = 3) -> str | None:
    k = kernel_summary
    if k.empty:
        return None
    sub = k[(k["model"] == draft) & (k["phase"] == phase)].nlargest(n, "time_per_forward_ms")
    if sub.empty:
        return None
    return "Top kernels: " + "; ".join(
        f"{r.name[:60]} ({r.category}, {r.calls_per_forward:.3g}× {r.mean_duration_ms * 1e3:.1f} µs = "
        f"{r.time_per_forward_ms:.3f} ms per forward)" for r in sub.itertuples()
    ) + "."


def _sentence(t: ModelForwards, d: ModelForwards, phase: str, kernel_summary: pd.DataFrame,
              categories: pd.DataFrame) -> str:
    wall_d, wall_t = _median(d, phase, "wall_ns"), _median(t, phase, "wall_ns")
    busy, span = _median(d, phase, "gpu_busy_ns"), _median(d, phase, "gpu_span_ns")
    if not (d.has_cuda and t.has_cuda) or np.isnan(busy) or np.isnan(_median(t, phase, "gpu_busy_ns")):
        cpu_only = [m.name for m in (t, d) if not m.has_cuda and "no CUDA tables" in m.gpu_note]
        why = (f"CPU-only trace ({', '.join(cpu_only)})" if cpu_only
               else "no GPU work launched inside the forward ranges on their own threads")
        return (
            f"{phase}: {why}, wall-clock time only: median forward {wall_d / 1e6:.3f} ms vs "
            f"{wall_t / 1e6:.3f} ms for the target (c = {wall_d / wall_t:.3g})."
        )
    launch = _median(d, phase, "launch_api_ns")
    k_d, k_t = _median(d, phase, "kernels"), _median(t, phase, "kernels")
    share = busy / wall_d if wall_d > 0 else float("nan")
    if share > 1:  # the work outlives the range: it is no share of the range's time
        busy_text = (f"GPU busy {busy / 1e6:.3f} ms, longer than the range's {wall_d / 1e6:.3f} ms wall: its GPU work "
                     "runs past the range that launched it")
    else:
        busy_text = f"GPU busy {busy / 1e6:.3f} ms of {wall_d / 1e6:.3f} ms wall ({share:.0%})"
    parts = [
        f"{phase}: {_boundness(share)}: {busy_text}; "
        f"{k_d:.0f} kernels per forward vs {k_t:.0f} for the target; launch API calls {launch / 1e6:.3f} ms; "
        f"GPU idle inside its span {max(span - busy, 0) / 1e6:.3f} ms."
    ]
    busy_t = _median(t, phase, "gpu_busy_ns")
    c_wall, c_busy = wall_d / wall_t, busy / busy_t if busy_t > 0 else float("nan")
    if np.isfinite(c_busy) and c_wall > 1.5 * c_busy:
        parts.append(
            f"c is {c_wall:.3g} on wall time but {c_busy:.3g} on GPU busy time: the draft's GPU work is cheap, its "
            "forward is dominated by CPU-side launch overhead (CUDA graphs or fewer, fused kernels would lower c)."
        )
    delta = _category_delta(categories, t.name, d.name, phase)
    if delta:
        parts.append(delta[0].upper() + delta[1:] + ".")
    top = _top_kernels(kernel_summary, d.name, phase)
    if top:
        parts.append(top)
    return " ".join(parts)


def diagnose(target: ModelForwards, drafts: list[ModelForwards], kernel_summary: pd.DataFrame,
             categories: pd.DataFrame) -> pd.DataFrame:
    """One row per draft: `draft`, `phase` (decode when both measured it, else all), `diagnosis` (sentences)."""
    rows = []
    for d in drafts:
        phase = decision_phase(set(d.phases) & set(target.phases)) or "all"
        rows.append({"draft": d.name, "phase": phase,
                     "diagnosis": _sentence(target, d, phase, kernel_summary, categories)})
    return pd.DataFrame(rows, columns=["draft", "phase", "diagnosis"])
