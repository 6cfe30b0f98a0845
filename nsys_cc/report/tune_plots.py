"""The plot of `nsys-cc tune`: forecast speedup against batch size, one line per γ (band: its 95 % interval), the
chosen schedule drawn over them, and the measured cells (fitted: filled; held out: open) with their intervals, each
marked with its γ and its key's axes beside the batch size (`CellKey.beyond_batch`: `L=128` for a sweep's cell)."""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib
import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import FormatStrFormatter

from ..analysis.tune.schedule import TuneResult


def plot_tune(result: TuneResult, path: str | Path | None = None, gammas=(1, 2, 3, 4, 6, 8)) -> Path | Figure:
    """Build the figure; save it as PNG at `path` (returned) or return the Figure."""
    fig = Figure(figsize=(9, 5.5), layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    rows = [r for r in result.rows_at() if r["gamma"] >= 1 or math.isfinite(r["speedup"])]
    bs = sorted({r["batch_size"] for r in rows})
    cmap = matplotlib.colormaps["viridis"]
    shown = [g for g in gammas if g <= result.max_gamma]
    colours: dict = {}
    measured_g = {c.gamma for c in [*result.fitted, *result.held_out]}
    for i, g in enumerate(shown):
        colour = cmap(0.85 * i / max(len(shown) - 1, 1))
        colours[g] = colour
        sel = sorted((r for r in rows if r["gamma"] == g), key=lambda r: r["batch_size"])
        x = [r["batch_size"] for r in sel]
        ax.plot(x, [r["speedup"] for r in sel], color=colour, lw=1.4, label=f"γ = {g}")
        if g not in measured_g:  # bands only for the γ measured: the rest would hide the lines
            continue
        ax.fill_between(x, [r["speedup_ci_low"] for r in sel], [r["speedup_ci_high"] for r in sel], color=colour,
                        alpha=0.07, lw=0)
    by = {(r["batch_size"], r["gamma"]): r["speedup"] for r in rows}
    sched = []
    for b in bs:
        g = next(gg for s, e, gg in result.schedule if s <= b <= e)
        sched.append(by.get((b, g), 1.0) if g else 1.0)
    ax.plot(bs, sched, color="black", lw=2.6, alpha=0.55, drawstyle="steps-mid",
            label="schedule (best γ per B)" if result.trusted else "fitted schedule: NOT RECOMMENDED")
    for cells, filled, name in ((result.fitted, True, "measured, fitted"), (result.held_out, False,
                                                                              "measured, held out")):
        for j, c in enumerate(cells):
            colour = colours.get(c.gamma, "red")
            lo, hi = c.measured_ci
            err = None
            if math.isfinite(lo) and math.isfinite(hi):
                err = [[max(c.measured_speedup - lo, 0)], [max(hi - c.measured_speedup, 0)]]
            ax.errorbar([c.batch_size], [c.measured_speedup], yerr=err, fmt="o", ms=8, capsize=3,
                        color=colour, mfc=colour if filled else "white", mec=colour,
                        label=f"{name}" if j == 0 else None)
            ax.annotate(" ".join(x for x in (f"γ={c.gamma}", c.key.beyond_batch) if x),
                        (c.batch_size, c.measured_speedup), textcoords="offset points",
                        xytext=(6, 4), fontsize=8)
    ax.axhline(1.0, color="grey", lw=0.8, ls="--")
    ax.set_xscale("log", base=2)
    ax.set_xlim(0.9, max(bs) * 1.1)
    ax.xaxis.set_major_formatter(FormatStrFormatter("%g"))
    meas = [c.measured_speedup for c in [*result.fitted, *result.held_out] if math.isfinite(c.measured_speedup)]
    top = np.nanmax([*(r["speedup"] for r in rows if r["gamma"] in shown), *meas, 1.2])
    ax.set_ylim(0, min(float(top) * 1.15, 10))
    ax.set_xlabel("batch size B (sequences per step)")
    ax.set_ylabel("speedup over plain decoding (× per output token)")
    title = "γ per batch size: steady-state forecast per γ (bands for the γ measured), schedule, measured cells"
    if result.target or result.draft:
        title += f" — {result.target} with {result.draft}"
    title += ("\n(a measured cell is a static-batch benchmark: below the steady state where a batch waits for its "
              "slowest sequence)")
    if not result.trusted:  # the schedule its own check refutes is drawn, not handed out
        title += "\nNOT RECOMMENDED: " + ("a held-out cell missed by more than 10 %" if any(
            not c["within_10pct"] for c in result.checks) else "the forecast has no usable interval") + \
            " (report.md says why and what to measure next)"
    ax.set_title(title, fontsize=9, color="black" if result.trusted else "#a00000")
    ax.legend(loc="upper right", ncols=2)
    if path is None:
        return fig
    p = Path(path)
    fig.savefig(p, dpi=110)
    return p


def plot_context(result: TuneResult, path: str | Path | None = None) -> Path | Figure:
    """Heat maps over batch size × prompt length of the draft's best γ (γ*) and its forecast speedup (steady
    state; γ = 0 where none beats K = 0 or plain decoding)."""
    lens = [L for L in result.by_context if L is not None]
    bs = list(range(1, result.max_batch_size + 1))
    best = np.full((len(lens), len(bs)), np.nan)
    gain = np.full_like(best, np.nan)
    for i, L in enumerate(lens):
        rows = result.rows_at(L)
        for j, b in enumerate(bs):
            here = [r for r in rows if r["batch_size"] == b and math.isfinite(r["speedup"])]
            top = max(here, key=lambda r: r["speedup"], default=None)
            if top is not None:
                best[i, j], gain[i, j] = (top["gamma"], top["speedup"]) if top["speedup"] > 1 or top["gamma"] == 0 \
                    else (0, 1.0)
    fig = Figure(figsize=(10, 2.2 + 0.5 * len(lens)), layout="constrained")
    FigureCanvasAgg(fig)
    for k, (grid, name, cmap) in enumerate(((best, "best γ (γ*)", "viridis"), (gain, "forecast speedup ×", "RdBu"))):
        ax = fig.add_subplot(1, 2, k + 1)
        im = ax.imshow(grid, aspect="auto", origin="lower", cmap=cmap, vmin=0.5 if k else None,
                       vmax=1.5 if k else None)
        ax.set_yticks(range(len(lens)), [str(L) for L in lens])
        step = max(len(bs) // 8, 1)
        ax.set_xticks(range(0, len(bs), step), [str(b) for b in bs[::step]])
        ax.set_xlabel("batch size B")
        ax.set_ylabel("prompt length L")
        ax.set_title(f"{result.draft or 'draft'}: {name}", fontsize=9)
        fig.colorbar(im, ax=ax)
    if path is None:
        return fig
    p = Path(path)
    fig.savefig(p, dpi=110)
    return p
