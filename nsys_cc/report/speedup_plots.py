"""Plots of the speedup model (Leviathan et al. 2023 Thm 3.8) and of the DSI simulation (Timor et al. 2024).

Each function builds a matplotlib Figure on the Agg canvas (no display needed), saves it as PNG when given a path,
and returns it. Drafts are marked from a frame with columns `draft, c` and the interval as `c_low, c_high` (the
`speedup.verdicts` frame) or `ci_low, ci_high` (the cost-coefficient frame); with several metrics, each is labelled.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import matplotlib
import numpy as np
import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import LogNorm
from matplotlib.figure import Figure

from ..analysis.theory import speedup
from ..analysis.theory.dsi import Heatmaps
from ..arguments import many
from ..errors import InputError
from .sentence_text import sig3

if TYPE_CHECKING:
    from matplotlib.typing import RcKeyType

C_LABEL = "cost coefficient c (draft ÷ target time per token)"
ALPHA_LABEL = "acceptance rate α"
GAMMA_LABEL = "speculative tokens γ per iteration"
STYLE: dict[RcKeyType, Any] = {"font.size": 11, "axes.titlesize": 12, "axes.labelsize": 11, "legend.fontsize": 9}
_WIN, _LOSE = "#d8ecd3", "#f6d5d0"


def _figure(width: float, height: float) -> Figure:
    fig = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def _save(fig: Figure, path: str | os.PathLike | None) -> Figure:
    if path is not None:
        fig.savefig(path, dpi=150)
    return fig


def _speedup_colours(fig: Figure, ax, x, y, values: np.ndarray, label: str):
    """A speedup mesh on a log scale symmetric about 1 (white): red loses, blue wins, 2× and ½× equally strong."""
    finite = values[np.isfinite(values) & (values > 0)]
    r = max(float(finite.max()), 1.0 / float(finite.min()), 1.25) if finite.size else 2.0
    mesh = ax.pcolormesh(x, y, values, cmap="RdBu", norm=LogNorm(vmin=1.0 / r, vmax=r), shading="nearest")
    exponents = np.arange(np.floor(-np.log2(r)), np.ceil(np.log2(r)) + 1)
    ticks = [t for t in 2.0**exponents if 1.0 / r <= t <= r]
    bar = fig.colorbar(mesh, ax=ax, label=label, ticks=ticks)
    bar.ax.set_yticklabels([f"{t:g}×" if t >= 0.5 else f"1/{round(1 / t)}×" for t in ticks])
    bar.ax.minorticks_off()
    if finite.size and finite.min() < 1 < finite.max():
        ax.contour(x, y, values, levels=[1.0], colors="black", linewidths=1.2)


def draft_points(frame: pd.DataFrame) -> pd.DataFrame:
    """One row per measured draft (and metric): `label, c, c_low, c_high`, NaN c dropped."""
    if frame is None or len(frame) == 0:
        return pd.DataFrame(columns=["label", "c", "c_low", "c_high"])
    if "draft" not in frame or "c" not in frame:
        raise InputError("the drafts to mark need the columns draft and c")
    low, high = ("c_low", "c_high") if "c_low" in frame else ("ci_low", "ci_high")
    out = pd.DataFrame({
        "draft": frame["draft"].astype(str), "c": frame["c"].astype(float),
        "c_low": frame[low].astype(float) if low in frame else np.nan,
        "c_high": frame[high].astype(float) if high in frame else np.nan,
    })
    several = "metric" in frame and frame["metric"].nunique() > 1
    out["label"] = out["draft"] + (" (" + frame["metric"].astype(str) + ")" if several else "")
    return out.dropna(subset=["c"]).drop_duplicates(["label", "c"])[["label", "c", "c_low", "c_high"]]


def speedup_heatmap(c: float, alphas: Sequence[float] | None = None, gammas: Sequence[int] = range(1, 21),
                    path: str | os.PathLike | None = None, title: str | None = None) -> Figure:
    """S(α, γ, c) of Thm 3.8 over α (x) and γ (y) at one c, with S = 1, the best γ per α and break-even α = c."""
    a = np.linspace(0.0, 0.99, 100) if alphas is None else np.asarray(many(alphas, "alphas"), dtype=float)
    g = np.asarray(many(gammas, "gammas"), dtype=int)
    for param, values in (("alphas", a), ("gammas", g)):
        if values.ndim != 1 or len(values) < 2:
            raise InputError(f"{param}: a heatmap needs at least two values, not {values.tolist()!r}", param=param)
    s = np.asarray(speedup.walltime_factor(a[None, :], g[:, None], c))
    best_g, _ = speedup.best_gamma(a, c, max_gamma=int(g.max()))
    with matplotlib.rc_context(STYLE):
        fig = _figure(7.5, 5.0)
        ax = fig.add_subplot()
        _speedup_colours(fig, ax, a, g, s, "expected speedup S over plain decoding (×)")
        ax.plot(a, best_g, color="black", linestyle="--", linewidth=1.2, label="best γ at each α")
        if c < 1:
            ax.axvline(c, color="dimgray", linestyle=":", linewidth=1.5, label=f"break-even α = c = {sig3(c)}")
        ax.set_xlabel(ALPHA_LABEL)
        ax.set_ylabel(GAMMA_LABEL)
        ax.set_title(title or f"Expected speedup (Leviathan et al. Thm 3.8) at c = {sig3(c)}; "
                              "black line: S = 1")
        ax.legend(loc="upper left", framealpha=0.9)
    return _save(fig, path)


def break_even_chart(drafts: pd.DataFrame, alphas: Sequence[float] = (), path: str | os.PathLike | None = None,
                     title: str | None = None) -> Figure:
    """The (c, α) plane split by α = c (Cor. 3.9): above, some γ speeds decoding up; below, every γ loses.

    Each draft sits on the line at its c with its interval as an error bar; each α given is a dotted line.
    """
    points = draft_points(drafts)
    c_max = max(1.0, float(np.nanmax(points[["c", "c_high"]].to_numpy())) * 1.1) if len(points) else 1.0
    with matplotlib.rc_context(STYLE):
        fig = _figure(7.5, 5.5)
        ax = fig.add_subplot()
        x = np.array([0.0, c_max])
        ax.fill_between(x, np.minimum(x, 1.0), 1.0, color=_WIN, zorder=0)
        ax.fill_between(x, 0.0, np.minimum(x, 1.0), color=_LOSE, zorder=0)
        ax.plot(x, x, color="black", linewidth=1.5, label="break-even α = c")
        ax.text(0.02 * c_max, 0.97, "speculation can win (α > c)", fontsize=12, color="#2e6b26", va="top")
        ax.text(0.97 * c_max, 0.05, "always loses (α ≤ c)", fontsize=12, color="#9c2f22", ha="right")
        for a in many(alphas, "alphas"):
            ax.axhline(a, color="dimgray", linestyle=":", linewidth=1.2)
            ax.text(c_max * 0.99, a + 0.01, f"α = {a:g}", ha="right", va="bottom", fontsize=9, color="dimgray")
        for i, p in enumerate(points.itertuples()):
            xerr = None
            if not (np.isnan(p.c_low) or np.isnan(p.c_high)):
                xerr = [[p.c - p.c_low], [p.c_high - p.c]]
            y = min(p.c, 1.0)
            ax.errorbar([p.c], [y], xerr=xerr, fmt="o", color=f"C{i % 10}", capsize=4, markersize=6,
                        label=f"{p.label}: c = {sig3(p.c)}, needs α > {sig3(p.c)}")
        ax.set_xlim(0.0, c_max)
        ax.set_ylim(0.0, 1.0)
        ax.set_xlabel(C_LABEL)
        ax.set_ylabel(ALPHA_LABEL)
        ax.set_title(title or "Break-even acceptance rate per draft (Leviathan et al. Cor. 3.9)")
        ax.legend(loc="upper left", bbox_to_anchor=(0.0, 0.88), framealpha=0.9)
    return _save(fig, path)


_PANELS = (
    ("si_vs_nonsi", "SI vs non-SI"),
    ("dsi_vs_si", "DSI vs SI"),
    ("dsi_vs_nonsi", "DSI vs non-SI"),
)


def dsi_heatmaps(maps: Heatmaps, drafts: pd.DataFrame | None = None, path: str | os.PathLike | None = None,
                 title: str | None = None) -> Figure:
    """Simulated speedups over (c, α) at each cell's best lookahead: SI/non-SI, DSI/SI and DSI/non-SI.

    Speedup X vs Y = cost_Y / cost_X (Timor et al.); the black contour is 1; drafts are dashed lines at their c.
    """
    points = draft_points(drafts)
    servers = "unlimited" if maps.servers is None else str(maps.servers)
    with matplotlib.rc_context(STYLE):
        fig = _figure(16.0, 5.0)
        axes = fig.subplots(1, 3, sharey=True)
        for ax, (attr, name) in zip(axes, _PANELS):
            values = getattr(maps, attr)
            _speedup_colours(fig, ax, maps.c, maps.alpha, values, f"speedup {name} (×)")
            for i, p in enumerate(points.itertuples()):
                if not (np.isnan(p.c_low) or np.isnan(p.c_high)):
                    ax.axvspan(p.c_low, p.c_high, color=f"C{i % 10}", alpha=0.15)
                ax.axvline(p.c, color=f"C{i % 10}", linestyle="--", linewidth=1.5)
                ax.text(p.c, 1.0, f" {p.label}", rotation=90, va="top", ha="right", fontsize=9,
                        color=f"C{i % 10}", transform=ax.get_xaxis_transform())
            ax.set_title(name)
            ax.set_xlabel(C_LABEL)
        axes[0].set_ylabel(ALPHA_LABEL)
        fig.suptitle(title or f"Simulated speedups at the best lookahead k ≤ {maps.ks.max()} "
                              f"({maps.n_tokens} tokens, {servers} target servers; Timor et al. 2024)")
    return _save(fig, path)
