"""Plot of tensor-parallel ranks: how far behind the forward's first finisher each rank ended, forward by forward.

One panel per model that ran on several ranks (`analysis.forwards.ranks`), over its kept forwards in time order: each
rank's lag (its forward range's end − the forward's earliest end, ms) as a line, so a rank that is always last, or a
forward where one rank stalled, is seen at once. None when no model has ranks.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import matplotlib
import numpy as np
from matplotlib.figure import Figure

if TYPE_CHECKING:
    from ..analysis.coefficient.result import CostCoefficientResult


def plot_rank_lag(result: "CostCoefficientResult", style: dict) -> Figure | None:
    models = [(m, m.ranks) for m in result.models if m.ranks is not None]
    if not models:
        return None
    palette = matplotlib.color_sequences["tab10"]
    with matplotlib.rc_context(style):
        fig = Figure(figsize=(max(5.5 * len(models), 7.0), 3.8), layout="constrained")
        axes = fig.subplots(1, len(models), squeeze=False)[0]
        for ax, (m, ranks) in zip(axes, models):
            kept = m.phase_rows("all").sort_values("start_ns")
            position = {s: i for i, s in enumerate(kept["forward"])}
            ranges = ranks.ranges
            for proc in ranks.processes.itertuples():
                mine = ranges[(ranges["rank"] == proc.rank) & ranges["forward"].isin(position)]
                x = np.array([position[s] for s in mine["forward"]])
                order = np.argsort(x)
                lag = mine["lag_ns"].to_numpy(dtype=float)[order] / 1e6
                device = f", GPU {proc.device}" if proc.device else ""
                ax.plot(x[order], lag, marker="o", ms=3, lw=1, color=palette[proc.rank % len(palette)],
                        label=f"rank {proc.rank} (pid {proc.pid}{device})")
            ax.set_xlabel("kept forward (time order)")
            ax.set_ylabel("lag behind the first rank to finish (ms)")
            ax.set_title(m.name)
            ax.grid(alpha=0.3)
            ax.legend(frameon=False)
        fig.suptitle("Tensor-parallel skew: each rank's end − the forward's earliest end")
    return fig
