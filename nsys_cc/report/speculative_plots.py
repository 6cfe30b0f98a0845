"""Plots of the speculative analysis (`analysis.speculative`); they draw what the analysis computed, nothing more.

- waterfall: per speculative run, the measured speedup built up from the ideal one (tokens per step) by one factor
  per broken assumption (verify ≠ decode, draft forwards, outside time, medians do not add), on a log axis so that
  each factor is a bar of its own length; Thm 3.8's prediction and the held-out forecast are marked beside. Drawn on
  the analysis's headline metric (`SpeculativeAnalysis.metric`: the forwards' gpu_span on GPU traces, wall on CPU),
  which the title names, the steps' times on it too (on a GPU trace each step from its start to the end of its GPU
  work).
- forecast_heatmap: per draft, the cost model's forecast speedup over γ = 1…8 × α, the S = 1 contour, the best γ
  at each α and the measured runs.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import LogNorm
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter

from ..analysis.metrics import WALL
from .sentence_text import fmt_speedup

if TYPE_CHECKING:
    from ..analysis.speculative.tables import SpeculativeAnalysis

_UP, _DOWN, _ENDS = "#55a868", "#c44e52", "#4c72b0"
MAX_COLUMNS = 4  # waterfall panels per row
_TICKS = {"tokens per step": "ideal:\ntokens\nper step", "verify ≠ decode": "verify\n≠ decode",
          "draft forwards": "draft\nforwards", "outside time": "outside\ntime",
          "medians do not add": "medians\nnot additive", "measured": "measured"}


def _figure(width: float, height: float, n: int = 1, ncols: int | None = None) -> tuple[Figure, list]:
    """A figure of n panels, `ncols` to a row (default: all in one row); unused cells of the last row are hidden."""
    ncols = min(n, ncols or n)
    nrows = -(-n // ncols)
    fig = Figure(figsize=(width, height * nrows), layout="constrained")
    FigureCanvasAgg(fig)
    axes = list(fig.subplots(nrows, ncols, squeeze=False).ravel())
    for ax in axes[n:]:
        ax.set_visible(False)
    return fig, axes[:n]


def waterfall(spec: SpeculativeAnalysis) -> Figure | None:
    """One panel per speculative run: the multiplicative waterfall from the ideal to the measured speedup, the
    forwards measured on the headline metric."""
    dec = spec.decomposition
    dec = dec[dec["metric"] == spec.metric]
    if dec.empty:
        return None
    runs = list(dec.groupby("name", sort=False))
    fig, axes = _figure(max(4.2 * min(len(runs), MAX_COLUMNS), 7.0), 4.8, len(runs), MAX_COLUMNS)
    table = spec.table.set_index("name")
    lows = dec[["before", "after"]].to_numpy(dtype=float)
    marks = []
    for name, _ in runs:
        marks += [table.loc[name, "predicted_leviathan"], table.loc[name, "predicted_cost_model_held_out"]]
    values = np.r_[lows.ravel(), marks, 1.0]
    values = values[np.isfinite(values) & (values > 0)]
    ylim = (values.min() / 1.25, values.max() * 1.25)
    for ax, (name, rows) in zip(axes, runs):
        rows = rows.sort_values("order")
        labels = []
        for i, r in enumerate(rows.itertuples(index=False)):
            if r.part == "measured":
                ax.bar(i, r.after - ylim[0], bottom=ylim[0], color=_ENDS, width=0.6)
                ax.text(i, r.after * 1.03, f"{fmt_speedup(r.after)}×", ha="center", va="bottom", fontsize=9,
                        fontweight="bold")
            elif r.part == "tokens per step":
                ax.bar(i, r.after - ylim[0], bottom=ylim[0], color=_ENDS, alpha=0.55, width=0.6)
                ax.text(i, r.after * 1.03, f"{fmt_speedup(r.after)}×", ha="center", va="bottom", fontsize=9)
            else:
                lo, hi = sorted((r.before, r.after))
                ax.bar(i, hi - lo, bottom=lo, color=_UP if r.factor >= 1 else _DOWN, width=0.6)
                ax.text(i, hi * 1.03, f"×{r.factor:.3g}", ha="center", va="bottom", fontsize=9)
            if i + 1 < len(rows):
                ax.plot([i + 0.3, i + 0.7], [r.after, r.after], color="0.4", lw=0.8)
            labels.append(_TICKS.get(r.part, r.part))
        leviathan = float(table.loc[name, "predicted_leviathan"])
        end = len(rows) - 0.5
        if math.isfinite(leviathan):
            ax.axhline(leviathan, color="#8172b2", ls=":", lw=1.2,
                       label=f"Thm 3.8 (standalone c, {spec.metric}): {fmt_speedup(leviathan)}×")
        held = float(table.loc[name, "predicted_cost_model_held_out"])
        if math.isfinite(held):
            fit = table.loc[name, "held_out_fit_gammas"]
            ax.plot([end], [held], marker="D", color="#dd8452", ls="none",
                    label=f"forecast (fit γ {fit}): {fmt_speedup(held)}×")
        ax.axhline(1.0, color="0.2", lw=0.8, ls="--", label="no speedup (1×)")
        ax.set_yscale("log")
        ax.set_ylim(*ylim)
        ax.yaxis.set_major_formatter(FuncFormatter(lambda y, _: f"{y:g}×"))
        ax.yaxis.set_minor_formatter(FuncFormatter(lambda y, _: f"{y:g}" if str(f"{y:g}")[0] in "2357" else ""))
        ax.set_xticks(range(len(rows)), labels, fontsize=8)
        ax.set_title(f"{name}\n(draft {table.loc[name, 'draft']}, γ = {table.loc[name, 'gamma']})", fontsize=10)
        ax.legend(fontsize=8, loc="lower left", frameon=False)
    for ax in axes[::MAX_COLUMNS]:
        ax.set_ylabel("speedup over plain decoding (log scale)")
    on = ("forwards on wall (the forward ranges' time)" if spec.metric == WALL else
          f"forwards on {spec.metric} (their GPU time), each step from its start to the end of its GPU work")
    fig.suptitle("Measured speedup, from the ideal (a step costing one plain decode step) to the measured one;\n"
                 f"each bar multiplies by one factor, applied left to right (green: gain, red: loss);\n{on}",
                 fontsize=11)
    return fig


def forecast_heatmap(spec: SpeculativeAnalysis, draft: str) -> Figure | None:
    """The cost model's forecast speedup of `draft` over γ × α, with S = 1, the best γ per α and the measured runs."""
    grid = spec.grid[spec.grid["draft"] == draft]
    if grid.empty:
        return None
    table = grid.pivot(index="gamma", columns="alpha", values="speedup")
    gammas, alphas = table.index.to_numpy(), table.columns.to_numpy(dtype=float)
    z = table.to_numpy(dtype=float)
    fig, (ax,) = _figure(7.5, 4.8)
    finite = z[np.isfinite(z) & (z > 0)]
    span = max(float(np.max(np.abs(np.log(finite)))), 0.05) if finite.size else 1.0
    norm = LogNorm(vmin=math.exp(-span), vmax=math.exp(span))
    step = alphas[1] - alphas[0] if alphas.size > 1 else 1.0
    extent = (alphas[0] - step / 2, alphas[-1] + step / 2, gammas[0] - 0.5, gammas[-1] + 0.5)
    im = ax.imshow(z, origin="lower", aspect="auto", cmap="RdYlGn", norm=norm, extent=extent)
    bar = fig.colorbar(im, ax=ax, label="forecast speedup (log scale)")
    bar.ax.yaxis.set_major_formatter(FuncFormatter(lambda y, _: f"{y:g}×"))
    bar.ax.yaxis.set_minor_formatter(FuncFormatter(lambda y, _: f"{y:g}×" if f"{y:g}"[0] in "2357" else ""))
    if np.nanmin(z) < 1 < np.nanmax(z):
        ax.contour(alphas, gammas, z, levels=[1.0], colors="black", linewidths=1.2)
    best = grid[grid["best"]].sort_values("alpha")
    ax.plot(best["alpha"], best["gamma"], color="white", marker="o", ms=3, lw=1, label="best γ of 1…8 at each α")
    runs = spec.table[(spec.table["draft"] == draft) & np.isfinite(spec.table["alpha"].to_numpy(dtype=float))]
    at: dict[tuple[float, int], list[str]] = {}  # runs at the same point share one label
    for r in runs.itertuples(index=False):
        at.setdefault((round(r.alpha, 2), r.gamma), []).append(f"{fmt_speedup(r.measured_speedup)}×")
    for (alpha, gamma), texts in at.items():
        ax.plot(alpha, gamma, marker="*", color="black", ms=12, ls="none")
        ax.annotate("measured " + ", ".join(texts), (alpha, gamma), xytext=(6, 4), textcoords="offset points",
                    fontsize=8)
    ax.set_xlabel("acceptance rate α")
    ax.set_ylabel("speculative tokens γ")
    ax.set_yticks(gammas)
    ax.legend(fontsize=8, loc="upper left", frameon=True)
    m = spec.models[draft]
    ax.set_title(f"{draft}: forecast speedup from the step cost model (plain decode step {m.decode_step_ms:.3g} ms);\n"
                 f"fitted on step times split on {spec.metric}; black line: S = 1; stars: the measured runs",
                 fontsize=10)
    return fig


def figures(spec: SpeculativeAnalysis | None, stem=lambda s: s) -> dict[str, Figure]:
    """Every speculative plot that has data, by file stem."""
    if spec is None:
        return {}
    figs = {"speculative_waterfall": waterfall(spec)}
    for draft in spec.models:
        figs[f"speculative_forecast_{stem(draft)}"] = forecast_heatmap(spec, draft)
    return {k: v for k, v in figs.items() if v is not None}
