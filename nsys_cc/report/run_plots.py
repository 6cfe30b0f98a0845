"""c per run beside the pooled c and its interval across runs (`profile --repeat R`), and the runs' table.

One panel per draft, in the phase c is judged on (decode, else all; on the result's headline metric: wall-clock on a
CPU trace, the GPU span on a GPU trace): each run's c as a point with that
run's own interval (its forwards only) as a bar, the pooled c (the geometric mean of the runs' c, `stats`) as a line
and its interval across runs as a band (three runs or more; two runs give none, and the title says so). A run outside
the band, or bars that do not overlap, show the run-to-run drift that one run's interval cannot. c is the token's
(forward + logits + sampling) where the pair has them, the forwards' otherwise: the axis says which. None when the
result has one run.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from ..analysis.metrics import WALL, decision_phase
from .gpu_time_text import plot_label

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from ..analysis.coefficient.result import CostCoefficientResult


def decision_rows(frame: pd.DataFrame, metric: str = WALL) -> pd.DataFrame:
    """The rows of `frame` (coefficients or runs) in each draft's decision phase (decode, else all) for `metric`."""
    rows = frame[frame["metric"] == metric]
    keep = []
    for _draft, sub in rows.groupby("draft", sort=False):
        phase = decision_phase(sub["phase"])
        if phase is not None:
            keep.append(sub[sub["phase"] == phase])
    return pd.concat(keep) if keep else rows.iloc[0:0]


def run_table(result: CostCoefficientResult) -> pd.DataFrame:
    """For people: per draft and run, c in the decision phase on the headline metric with that run's interval, the
    medians and counts."""
    rows = decision_rows(result.runs, getattr(result, "headline", WALL))

    def c_text(c: float, lo: float, hi: float) -> str:
        if not math.isfinite(c):
            return "–"
        return f"{c:.3f} [{lo:.3f}–{hi:.3f}]" if math.isfinite(lo) and math.isfinite(hi) else f"{c:.3f} [no interval]"

    return pd.DataFrame([{"Draft": r.draft, "Phase": r.phase, "Run": r.run, "c (this run)": c_text(r.c, r.ci_low,
                                                                                                      r.ci_high),
                          "Draft (ms)": f"{r.draft_median_ms:.3f}", "Target (ms)": f"{r.target_median_ms:.3f}",
                          "N": f"{r.n_draft}/{r.n_target}"} for r in rows.itertuples()])


def plot_runs(result: CostCoefficientResult, style: dict) -> Figure | None:
    import matplotlib  # here, not at import: the runs' table is text, and `analyze` loads no matplotlib for text
    from matplotlib.figure import Figure

    if result.runs.empty:
        return None
    headline = getattr(result, "headline", WALL)
    runs = decision_rows(result.runs, headline)
    pooled = decision_rows(result.coefficients, headline)
    drafts = list(dict.fromkeys(runs["draft"]))
    if not drafts:
        return None
    with matplotlib.rc_context(style):
        fig = Figure(figsize=(max(4.2 * len(drafts), 6.0), 3.8), layout="constrained")
        axes = fig.subplots(1, len(drafts), squeeze=False, sharey=False)[0]
        for ax, draft in zip(axes, drafts):
            sub = runs[runs["draft"] == draft].sort_values("run")
            x = sub["run"].to_numpy()
            c = sub["c"].to_numpy(dtype=float)
            lo = np.clip(c - sub["ci_low"].to_numpy(dtype=float), 0, None)
            hi = np.clip(sub["ci_high"].to_numpy(dtype=float) - c, 0, None)
            ax.errorbar(x, c, yerr=np.nan_to_num(np.vstack([lo, hi])), fmt="o", capsize=3, color="#4c72b0",
                        label="c of one run (its forwards' 95 % interval)")
            row = pooled[pooled["draft"] == draft]
            no_band = ""
            if not row.empty:
                r = row.iloc[0]
                ax.axhline(r["c"], color="#c44e52", linewidth=1.5,
                           label=f"pooled c = {r['c']:.3g} (geometric mean of the runs' c)")
                if math.isfinite(r["ci_low"]) and math.isfinite(r["ci_high"]):
                    ax.axhspan(r["ci_low"], r["ci_high"], color="#c44e52", alpha=0.15,
                               label=f"95 % interval across runs [{r['ci_low']:.3g}–{r['ci_high']:.3g}]")
                elif len(sub) == 2:
                    no_band = "; 2 runs: no interval across runs"
            ax.set_xticks(x)
            ax.set_xlim(x.min() - 0.6, x.max() + 0.6)
            ax.set_xlabel("run")
            ax.set_title(f"{draft} ({sub['phase'].iloc[0]}, {plot_label(headline, headline)}{no_band})")
            ax.grid(axis="y", alpha=0.3)
            ax.legend(loc="best", fontsize=7)
        of_token = "basis" in runs and bool((runs["basis"] == "token").all())
        axes[0].set_ylabel(f"c = median draft ÷ median target {'token' if of_token else 'forward'}")
        fig.suptitle(f"c of each run against {result.target.name}, and pooled")
    return fig
