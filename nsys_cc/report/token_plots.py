"""The token's split as a figure: per model, its forward, logits and sampling stacked (medians per token, in the phase
c is judged on), the token's own median marked, and each draft's c of the token against c of the forward alone.

One column per metric (wall-clock on a CPU trace; on a GPU trace the headline GPU span, then the launch time): the
medians in ms above, each part's share of the stack below. None when no model has logits or sampling
ranges (the plot would only repeat the forward times), or when the target has none (a tensor-parallel target: its token
is its forward, and a draft's stacked token beside it would not be like with like).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from ..analysis.coefficient.token import SPLIT, TOKEN, decision_split
from ..analysis.metrics import PART_LABELS, WALL
from .gpu_time_text import plot_label

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from ..analysis.coefficient.result import CostCoefficientResult

COLORS = {"forward": "#4c72b0", "logits": "#dd8452", "sample": "#55a868"}


def plot_token_split(result: CostCoefficientResult, style: dict) -> Figure | None:
    import matplotlib  # here, not at import: text renderings load no matplotlib
    import matplotlib.ticker
    from matplotlib.figure import Figure

    tokens = result.tokens
    if tokens.empty or not (tokens["basis"] == TOKEN).any():
        return None
    target = tokens[tokens["model"] == result.target.name]
    if target.empty or not (target["basis"] == TOKEN).all():
        # the target's token is its forward alone (tensor-parallel forwards, an older trace): a draft's stacked token
        # beside it would not be like with like (the bars would imply a c the coefficients do not give)
        return None
    rows = decision_split(tokens)
    headline = getattr(result, "headline", WALL)  # on a GPU trace: the headline (GPU span), then the launch time
    metrics = [m for m in dict.fromkeys((headline, WALL)) if m in set(rows["metric"])]
    models = list(dict.fromkeys(rows["model"]))
    coef = result.coefficients
    with matplotlib.rc_context(style):
        fig = Figure(figsize=(max(3.2 * len(metrics) + 0.9 * len(models), 7.0), 7.2), layout="constrained")
        grid = fig.subplots(2, len(metrics), squeeze=False)
        for col, metric in enumerate(metrics):
            ax, share_ax = grid[0][col], grid[1][col]
            sub = rows[rows["metric"] == metric].set_index("model").reindex(models)
            x = np.arange(len(models))
            values = {part: np.nan_to_num(sub[f"{part}_median_ms"].to_numpy(dtype=float)) for part in SPLIT}
            total = sum(values.values())
            bottom = np.zeros(len(models))
            share_bottom = np.zeros(len(models))
            for part in SPLIT:
                ax.bar(x, values[part], 0.6, bottom=bottom, color=COLORS[part], label=PART_LABELS[part])
                share = np.divide(values[part], total, out=np.zeros(len(models)), where=total > 0)
                share_ax.bar(x, share, 0.6, bottom=share_bottom, color=COLORS[part])
                for xi, b, sh in zip(x, share_bottom, share):
                    if sh >= 0.06:
                        share_ax.text(xi, b + sh / 2, f"{sh:.0%}", ha="center", va="center", fontsize=8, color="white")
                bottom += values[part]
                share_bottom += share
            token = sub["token_median_ms"].to_numpy(dtype=float)
            ax.scatter(x, token, marker="_", s=400, color="black", zorder=3, label="token (median of the sums)")
            for i, name in enumerate(models):
                c = coef[(coef["draft"] == name) & (coef["metric"] == metric)
                         & (coef["phase"] == sub.loc[name, "phase"])] if len(coef) else coef
                if len(c) and c.iloc[0]["basis"] == TOKEN and math.isfinite(c.iloc[0]["c"]):
                    text = f"c {c.iloc[0]['c']:.3g}\n(forward {c.iloc[0]['c_forward']:.3g})"
                elif name == result.target.name:
                    text = "target"
                elif sub.loc[name, "basis"] != TOKEN:
                    text = "forward only\n(no logits/sampling\nranges)"
                else:
                    text = ""
                top = max(float(np.nan_to_num(token[i])), bottom[i])
                ax.annotate(text, (x[i], top), textcoords="offset points", xytext=(0, 4), ha="center", fontsize=8)
            ax.margins(y=0.22)
            labels = [f"{m}\n{sub.loc[m, 'phase']}" for m in models]
            ax.set_xticks(x, labels)
            ax.set_ylabel(f"{plot_label(metric, headline)} per token (ms)")
            ax.set_title(f"{plot_label(metric, headline)}")
            ax.grid(axis="y", alpha=0.3)
            share_ax.set_xticks(x, labels)
            share_ax.set_ylim(0, 1)
            share_ax.yaxis.set_major_formatter(matplotlib.ticker.PercentFormatter(1.0))
            share_ax.set_ylabel("share of the token")
        handles, labels = grid[0][0].get_legend_handles_labels()
        fig.legend(handles, labels, loc="outside lower center", ncols=len(labels), frameon=False)
        fig.suptitle(f"A token's cost against {result.target.name}:\nforward + logits + sampling, medians per token")
    return fig
