"""Plots of a sweep's tidy table: c against batch size and against input length, per phase, with intervals.

Each figure has one panel per phase (prefill, decode; `all` only when neither was told apart) and one row of
panels per metric present (wall-clock; on GPU traces the GPU span, then wall as the launch time); one line per
draft (and γ, and target ranks) and per value of the other axis; the vertical bars are the 95 % bootstrap
intervals. The table is drawn as it is: nothing is computed here.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import matplotlib
import pandas as pd
from matplotlib.figure import Figure

from ..analysis.metrics import ALL, GPU_SPAN, WALL, in_order
from .gpu_time_text import plot_label
from .result_plots import DPI, STYLE, _legend_below, _suptitle

AXES = {"batch_size": ("batch size", "input_len", "input"), "input_len": ("input length (prompt tokens)",
                                                                           "batch_size", "batch")}
PLOTTED_METRICS = (GPU_SPAN, WALL)  # the GPU span heads where the traces have it
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")


def _phases(table: pd.DataFrame) -> list[str]:
    present = in_order(table["phase"])
    split = [p for p in present if p != ALL]
    return split or present


def _label(key: tuple, other_name: str) -> str:
    draft, gamma, other, tp = key
    parts = [str(draft)]
    if pd.notna(gamma):
        parts.append(f"γ={gamma:g}")
    if other is not None:
        parts.append(f"{other_name} {other}")
    if pd.notna(tp):
        parts.append(f"tp {tp}")
    return ", ".join(parts)


def plot_c_against(table: pd.DataFrame, x: str) -> Figure | None:
    """c against `x` ("batch_size" or "input_len"); None when the table has no finite c. A line keeps its colour in
    every panel; in-place c (rows with a gamma) is dashed."""
    xlabel, other, other_name = AXES[x]
    rows = table[table["c"].notna() & table[x].notna()].sort_values(["draft", "gamma", other, "target_tp", x],
                                                                     na_position="first")
    phases = _phases(rows)
    metrics = [m for m in PLOTTED_METRICS if m in set(rows["metric"])]
    headline = GPU_SPAN if GPU_SPAN in metrics else WALL  # wall is the launch time beside GPU time
    if rows.empty or not phases or not metrics:
        return None
    keys = ["draft", "gamma", other, "target_tp"]
    labels = list(dict.fromkeys(_label(k, other_name) for k in rows[keys].itertuples(index=False, name=None)))
    # Colour: the draft (and γ); marker: the value of the other axis; dashed: in-place c.
    series = list(dict.fromkeys(_label((d, g, None, tp), "") for d, g, tp in
                                rows[["draft", "gamma", "target_tp"]].itertuples(index=False, name=None)))
    palette = [matplotlib.colormaps["tab10" if len(series) <= 10 else "tab20"](i) for i in range(20)]
    colors = {name: palette[i % len(palette)] for i, name in enumerate(series)}
    others = sorted(set(rows[other].dropna().astype(int)))
    markers = {v: MARKERS[i % len(MARKERS)] for i, v in enumerate(others)}
    with matplotlib.rc_context(STYLE):
        fig = Figure(figsize=(max(4.8 * len(phases), 7.0), 3.6 * len(metrics) + 0.4 * len(labels) + 1.0),
                     layout="constrained")
        grid = fig.subplots(len(metrics), len(phases), squeeze=False)
        for r, metric in enumerate(metrics):
            for col, phase in enumerate(phases):
                ax = grid[r][col]
                sub = rows[(rows["metric"] == metric) & (rows["phase"] == phase)]
                for key, line in sub.groupby(keys, dropna=False, sort=False):
                    color = colors[_label((key[0], key[1], None, key[3]), "")]
                    xs = line[x].to_numpy(dtype=float)
                    ax.vlines(xs, line["ci_low"], line["ci_high"], color=color, linewidth=2, alpha=0.5)
                    ax.plot(xs, line["c"], marker=markers.get(key[2], "o"), linestyle="--" if pd.notna(key[1]) else "-",
                            color=color, label=_label(key, other_name))
                values = sorted(set(sub[x].dropna().astype(int)))
                if len(values) > 1:
                    ax.set_xscale("log", base=2)
                ax.set_xticks(values, [str(v) for v in values])
                ax.minorticks_off()
                ax.set_ylim(bottom=0)
                ax.set_xlabel(xlabel)
                ax.set_ylabel(f"c ({plot_label(metric, headline)})")
                ax.set_title(f"{phase} forwards, {plot_label(metric, headline)}")
                ax.grid(alpha=0.3)
        _legend_below(fig, [ax for axes in grid for ax in axes])
        _suptitle(fig, f"Cost coefficient c against {xlabel} (bars: 95 % bootstrap intervals; dashed: in-place c of "
                       "speculative runs)" if rows["gamma"].notna().any() else
                  f"Cost coefficient c against {xlabel} (bars: 95 % bootstrap intervals)")
    return fig


def sweep_figures(table: pd.DataFrame) -> Iterator[tuple[str, Figure]]:
    """(file stem, figure) of c_vs_batch_size and c_vs_input_len, those that have data."""
    for x in AXES:
        fig = plot_c_against(table, x)
        if fig is not None:
            yield f"c_vs_{x}", fig


def make_sweep_plots(table: pd.DataFrame, out_dir: Path) -> list[Path]:
    """Write c_vs_batch_size.png and c_vs_input_len.png into `out_dir`; return the paths written."""
    paths = []
    for stem, fig in sweep_figures(table):
        out_dir.mkdir(parents=True, exist_ok=True)
        path = out_dir / f"{stem}.png"
        fig.savefig(path, dpi=DPI)
        paths.append(path)
    return paths
