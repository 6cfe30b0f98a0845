"""Plots of a cost-coefficient result: drawing only (the numbers come from the result and from `analysis`).

Each `plot_*` function takes a `CostCoefficientResult` and returns a matplotlib `Figure`, or None when the result
has nothing to show (e.g. no GPU metrics in a CPU-only trace). `figures.make_figures` collects them all.

- forward_times: the distribution of per-forward times per model and phase (wall-clock; on a GPU trace the GPU span
  first, then the launch time: the range's CPU time, `gpu_time_text.plot_label`).
- coefficients: c per draft and metric with its 95 % interval, one panel per phase (c of a token; hollow diamonds:
  c of the forward alone where the two differ).
- time_breakdown: where a model's forward time goes (median per forward): GPU busy, GPU idle inside the span,
  CPU time outside the span.
- kernel_categories: GPU time per forward by kernel category, target against each draft.
- kernel_diff: where each draft saves GPU time against the target (draft − target per forward) by category and for
  the kernels that differ most (`result.kernel_diff`).
- rank_lag: per model on several tensor-parallel ranks, each rank's lag behind the forward's first finisher
  (`rank_plots`).
- runs: c of each run beside the pooled c and its interval across runs, when the result pools several (`run_plots`).
- token_split: each model's token as forward + logits + sampling (medians per token), c of the token against c of the
  forward alone, when the traces have logits or sampling ranges (`token_plots`).
- speedup_<draft>, break_even, dsi_heatmaps: what each draft's c means for speculative decoding (`speedup_plots`),
  at the result's `speedup_marks` (decode-phase c on the headline metric — GPU span on a GPU trace, else wall-clock —,
  `all` when no decode forward was told apart), with the
  DSI simulation's numbers handed in (`analysis.theory.dsi.report_heatmaps`).
Figures are built without pyplot (no global figure registry, nothing to close) and drawn by Agg when saved.
"""

from __future__ import annotations

import re
import textwrap
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import matplotlib
import numpy as np
from matplotlib.figure import Figure

from ..analysis.coefficient.result import CostCoefficientResult, ModelForwards
from ..analysis.forwards import kernel_tables as kernel_mod
from ..analysis.metrics import (
    BY_NAME,
    C_METRICS,
    GPU_BUSY_NS,
    GPU_IDLE_NS,
    GPU_SPAN,
    GPU_SPAN_NS,
    WALL,
    WALL_NS,
    in_order,
)
from ..analysis.stats import median
from ..analysis.theory.dsi import Heatmaps
from . import rank_plots, run_plots, speedup_plots, token_plots
from .gpu_time_text import plot_label, words
from .sentence_text import sig3

if TYPE_CHECKING:
    from matplotlib.typing import RcKeyType

DPI = 150
STYLE: dict[RcKeyType, Any] = {
    "font.size": 10,
    "axes.titlesize": 11,
    "axes.labelsize": 10,
    "xtick.labelsize": 9,
    "ytick.labelsize": 9,
    "legend.fontsize": 9,
    "figure.titlesize": 12,
    "axes.spines.top": False,
    "axes.spines.right": False,
}
# Strip points drawn per box; the boxes use every forward, the dots only show the spread.
MAX_STRIP_POINTS = 300
# Medians further apart than this factor go on a log axis, else the small model is a flat line at zero.
LOG_SPREAD = 10.0


def _figure(n_panels: int, width_per_panel: float, height: float, sharey: bool = False) -> tuple[Figure, list]:
    fig = Figure(figsize=(max(width_per_panel * n_panels, 7.0), height), layout="constrained")
    axes = fig.subplots(1, n_panels, squeeze=False, sharey=sharey)[0]
    return fig, list(axes)


def _chars_across(fig: Figure, fontsize: float) -> int:
    """About how many characters of text at `fontsize` fit across the figure (average glyph ≈ 0.55 em)."""
    return max(int(fig.get_figwidth() * 72 / (0.55 * fontsize)), 20)


def _suptitle(fig: Figure, text: str) -> None:
    """A figure title wrapped to the figure's width: one-panel figures are narrow."""
    size = STYLE["figure.titlesize"]
    lines = [textwrap.fill(line, _chars_across(fig, size)) for line in text.split("\n")]
    fig.suptitle("\n".join(lines))


def _legend_below(fig: Figure, axes: list) -> None:
    """One legend under the panels, label → handle over all panels (they repeat the same series), in as many
    columns as fit across the figure."""
    entries: dict = {}
    for ax in axes:
        handles, labels = ax.get_legend_handles_labels()
        for h, lab in zip(handles, labels):
            entries.setdefault(lab, h)
    if not entries:
        return
    per_entry = max(len(lab) for lab in entries) + 6  # marker, padding
    ncols = max(1, min(len(entries), _chars_across(fig, STYLE["legend.fontsize"]) // per_entry))
    fig.legend(entries.values(), entries.keys(), loc="outside lower center", ncols=ncols, frameon=False)


def _model_colors(result: CostCoefficientResult) -> dict[str, str]:
    palette = matplotlib.color_sequences["tab10"]
    return {m.name: matplotlib.colors.to_hex(palette[i % len(palette)]) for i, m in enumerate(result.models)}


def _split_phases(m: ModelForwards) -> list[str]:
    """The phases to show for one model: prefill and decode when it has them, else `all` (the mix of both)."""
    split = [p for p in m.phases if p != "all"]
    return split or ["all"]


def _ms(m: ModelForwards, phase: str, col: str) -> np.ndarray:
    v = m.phase_rows(phase)[col].to_numpy(dtype=float) / 1e6
    return v[np.isfinite(v)]


def _wants_log(medians: list[float]) -> bool:
    pos = [x for x in medians if np.isfinite(x) and x > 0]
    return len(pos) > 1 and max(pos) / min(pos) > LOG_SPREAD


def plot_forward_times(result: CostCoefficientResult) -> Figure | None:
    """Box plots (with the forwards as dots) of the per-forward time of each model and phase, one panel per metric:
    wall-clock on a CPU trace; with CUDA the GPU span first, then the launch time (the ranges' CPU time). None when no
    model has a kept forward."""
    panels = [GPU_SPAN, WALL] if any(m.has_cuda for m in result.models) else [WALL]
    headline = getattr(result, "headline", WALL)
    metrics = [(BY_NAME[name].column, plot_label(name, headline if len(panels) > 1 else WALL)) for name in panels]
    colors = _model_colors(result)
    groups = [(m, p) for m in result.models for p in _split_phases(m)]
    if not groups:
        return None
    rng = np.random.default_rng(0)
    with matplotlib.rc_context(STYLE):
        fig, axes = _figure(len(metrics), max(1.1 * len(groups), 5.5), 4.6)
        for ax, (col, label) in zip(axes, metrics):
            data = [_ms(m, p, col) if (m.has_cuda or col == WALL_NS) else np.array([]) for m, p in groups]
            pos = [i for i, d in enumerate(data) if d.size]
            if not pos:
                ax.text(0.5, 0.5, f"no {label} data", ha="center", va="center", transform=ax.transAxes)
            else:
                box = ax.boxplot([data[i] for i in pos], positions=pos, widths=0.55, showfliers=False,
                                 patch_artist=True, medianprops={"color": "black"})
                for patch, i in zip(box["boxes"], pos):
                    patch.set(facecolor=colors[groups[i][0].name], alpha=0.35)
                for i in pos:
                    d = data[i]
                    dots = rng.choice(d, MAX_STRIP_POINTS, replace=False) if d.size > MAX_STRIP_POINTS else d
                    ax.scatter(i + rng.uniform(-0.18, 0.18, dots.size), dots, s=6, alpha=0.5,
                               color=colors[groups[i][0].name], linewidths=0)
                if _wants_log([float(np.median(data[i])) for i in pos]):
                    ax.set_yscale("log")
            ax.set_xticks(range(len(groups)), [f"{m.name}\n{p} (n={len(m.phase_rows(p))})" for m, p in groups],
                          rotation=30 if len(groups) > 4 else 0, ha="right" if len(groups) > 4 else "center")
            ax.set_xlim(-0.6, len(groups) - 0.4)
            ax.set_ylabel(f"{label}{'' if label.endswith('time') else ' time'} per forward (ms)")
            ax.set_title(f"{label} per forward")
            ax.grid(axis="y", alpha=0.3)
        _suptitle(fig, f"Forward time per model and phase\n({result.range_name!r} ranges, {_dropped_words(result)})")
    return fig


def _dropped_words(result: CostCoefficientResult) -> str:
    """What the plotted forwards are, as the notes say it: warm-up dropped, or nothing dropped (then the first
    forward's time against the median, when it stands out: a warm-up nothing marked)."""
    dropped = [m for m in result.models if not m.forwards["kept"].all()]
    if dropped:
        return "warm-up dropped" if len(dropped) == len(result.models) else \
            f"warm-up dropped for {', '.join(m.name for m in dropped)}"
    slow = []
    for m in result.models:
        wall = m.forwards[WALL_NS].to_numpy(dtype=float) / 1e6
        if wall.size > 2 and np.isfinite(wall[0]) and wall[0] > 5 * np.nanmedian(wall):
            slow.append(f"{m.name}'s first {wall[0]:.3g} ms against a {np.nanmedian(wall):.3g} ms median")
    return "nothing dropped as warm-up" + (f" ({'; '.join(slow)}: skip_ranges drops it)" if slow else "")


def _coef_phases(result: CostCoefficientResult) -> list[str]:
    """Prefill and decode when the coefficients have them, else `all`. The `all` c mixes both kinds of step: it is
    right for neither, and its interval (often many times wider) would flatten theirs on a shared axis."""
    present = in_order(result.coefficients["phase"])
    split = [p for p in present if p != "all"]
    return split or present


def plot_coefficients(result: CostCoefficientResult) -> Figure | None:
    """c per draft and metric, with the 95 % bootstrap interval as error bars, one panel per phase; reference lines
    at c = 1 and at each acceptance rate α the user gave (speculative decoding can only win when c < α).
    None when there are no coefficients."""
    coef = result.coefficients
    phases = _coef_phases(result)
    if coef.empty or not phases:
        return None
    drafts = list(dict.fromkeys(coef["draft"]))
    present = [m for m in C_METRICS if m in set(coef["metric"])]
    headline = getattr(result, "headline", WALL)  # on the GPU its metric first, the launch time last
    metrics = present if headline not in present or headline == WALL else [
        headline, *(m for m in present if m not in (headline, WALL)), *([WALL] if WALL in present else [])]
    width = 0.8 / len(metrics)
    per_run = _run_values(result)
    top = _coef_top(coef, per_run, result.acceptance)
    clipped = False
    with matplotlib.rc_context(STYLE):
        fig, axes = _figure(len(phases), max(0.4 * len(drafts) * len(metrics) + 1.2, 4.0), 4.8, sharey=True)
        for ax, phase in zip(axes, phases):
            sub = coef[coef["phase"] == phase]
            finite = False
            for j, metric in enumerate(metrics):
                rows = sub[sub["metric"] == metric].set_index("draft").reindex(drafts)
                c = rows["c"].to_numpy(dtype=float)
                ok = np.isfinite(c)
                if not ok.any():
                    continue
                finite = True
                x = np.arange(len(drafts)) + (j - (len(metrics) - 1) / 2) * width
                lo = np.clip(c - rows["ci_low"].to_numpy(dtype=float), 0, None)
                high = rows["ci_high"].to_numpy(dtype=float)
                over = np.isfinite(high) & (high > top)  # an interval past the axis: drawn to its edge, marked
                clipped = clipped or bool(over[ok].any())
                hi = np.clip(np.minimum(high, top) - c, 0, None)
                ax.errorbar(x[ok], c[ok], yerr=np.nan_to_num(np.vstack([lo[ok], hi[ok]])), fmt="o", capsize=3,
                            color=BY_NAME[metric].color, label=plot_label(metric, headline))
                if (over & ok).any():
                    ax.scatter(x[over & ok], np.full(int((over & ok).sum()), top), marker="^", s=30,
                               color=BY_NAME[metric].color, clip_on=False, zorder=4)
                for xi, draft in zip(x, drafts):  # no interval: the runs' own c, small, not a bar
                    values = per_run.get((draft, phase, metric), [])
                    if len(values) >= 2 and not np.isfinite(rows.loc[draft, "ci_low"]):
                        ax.scatter([xi] * len(values), values, marker="x", s=18, color=BY_NAME[metric].color,
                                   alpha=0.7, label=f"{plot_label(metric, headline)}: each run's c (no interval)")
                if "c_forward" in rows and (rows["basis"] == "token").any():  # the forward alone, beside the token
                    cf = np.where(rows["basis"].to_numpy() == "token", rows["c_forward"].to_numpy(dtype=float), np.nan)
                    okf = np.isfinite(cf)
                    ax.scatter(x[okf], cf[okf], marker="D", s=22, facecolors="none", edgecolors=BY_NAME[metric].color,
                               label=f"{plot_label(metric, headline)}, forward only")
                for xi, ci in zip(x[ok], c[ok]):  # beside the point: never past the axis, clear of the bars
                    ax.annotate(f"{ci:.2g}", (xi, ci), textcoords="offset points", xytext=(7, 0), ha="left",
                                va="center", fontsize=7, color=BY_NAME[metric].color)
            ax.axhline(1.0, color="black", linewidth=1)
            ax.annotate("c = 1", (1.0, 1.0), xycoords=("axes fraction", "data"), xytext=(2, 0),
                        textcoords="offset points", va="center", fontsize=8)
            for alpha in result.acceptance:
                ax.axhline(alpha, color="gray", linestyle="--", linewidth=1)
                ax.annotate(f"α = {alpha:g}", (1.0, alpha), xycoords=("axes fraction", "data"), xytext=(2, 0),
                            textcoords="offset points", va="center", fontsize=8, color="dimgray")
            if not finite:
                ax.text(0.5, 0.5, "c not finite (no forwards to compare)", ha="center", va="center",
                        transform=ax.transAxes)
            ax.set_xticks(range(len(drafts)), drafts)
            ax.set_xlim(-0.6, len(drafts) - 0.4)
            ax.set_ylim(0, top)
            ax.set_xlabel("draft model")
            ax.set_title(f"{phase} forwards")
            ax.grid(axis="y", alpha=0.3)
        of_token = "basis" in coef and bool((coef["basis"] == "token").any())
        axes[0].set_ylabel(f"c = median draft ÷ median target {'token' if of_token else 'forward'}")
        _legend_below(fig, axes)
        alphas = "; a speedup needs c < α (dashed: the acceptance rates given)" if result.acceptance else ""
        cut = "; ▲: an interval past the axis (its end in the report's table)" if clipped else ""
        _suptitle(fig, f"Cost coefficient c of each draft against {result.target.name} (95 % intervals{cut})"
                       f"{alphas}")
    return fig


def _run_values(result: CostCoefficientResult) -> dict[tuple, list[float]]:
    """(draft, phase, metric) → each run's c (`result.runs`), for the runs' marks where c has no interval."""
    out: dict[tuple, list[float]] = {}
    if result.runs.empty:
        return out
    for r in result.runs[["draft", "phase", "metric", "c"]].itertuples(index=False):
        if np.isfinite(r.c):
            out.setdefault((r.draft, r.phase, r.metric), []).append(float(r.c))
    return out


def _coef_top(coef, per_run: dict, alphas) -> float:
    """The coefficients axis' top: room above every c, the forwards' c, each run's c, the α lines and c = 1, and
    above the intervals that stay within three times the largest of those — never scaled to an interval that runs
    off to hundreds (two runs on Student's t once reached 1321 for c = 0.115): those are cut at the top, marked."""
    values = [1.0, *map(float, alphas)]
    for col in ("c", "c_forward"):
        if col in coef:
            values += [float(v) for v in coef[col].to_numpy(dtype=float) if np.isfinite(v)]
    values += [v for vs in per_run.values() for v in vs]
    base = max(values)
    highs = [float(v) for v in coef["ci_high"].to_numpy(dtype=float) if np.isfinite(v) and v <= 3 * base]
    return 1.12 * max([base, *highs])


def _breakdown_phases(result: CostCoefficientResult) -> list[str]:
    return in_order(p for m in result.models for p in _split_phases(m))


def _components(m: ModelForwards, phase: str) -> dict[str, float]:
    """Median per forward (ms) of: wall, GPU busy, GPU idle inside the span, CPU time outside the span."""
    rows = m.phase_rows(phase)
    wall = rows[WALL_NS].to_numpy(dtype=float) / 1e6
    out = {WALL: median(wall)}
    if m.has_cuda:
        span = rows[GPU_SPAN_NS].to_numpy(dtype=float) / 1e6
        out["busy"] = median(rows[GPU_BUSY_NS].to_numpy(dtype=float) / 1e6)
        out["idle"] = median(rows[GPU_IDLE_NS].to_numpy(dtype=float) / 1e6)
        out["outside"] = median(np.clip(wall - span, 0, None))
    return out


BREAKDOWN = (
    ("busy", "GPU busy", "#c44e52"),
    ("idle", "GPU idle inside the span", "#f2b6b8"),
    ("outside", "CPU outside the GPU span (launch time − span)", "#8c8c8c"),
)


def plot_time_breakdown(result: CostCoefficientResult) -> Figure | None:
    """Stacked bars per model and phase of the median forward's parts: GPU busy, GPU idle inside the GPU span, CPU time
    outside the span (wall − span, clipped at 0); a black tick marks the median wall time. The parts are medians of
    each part, so their sum need not equal the median wall time (and the span may outlast the range: asynchronous
    work). Models without CUDA show their wall time only. None when no model has a kept forward."""
    phases = _breakdown_phases(result)
    if not phases:
        return None
    any_cuda = any(m.has_cuda for m in result.models)
    names = [m.name for m in result.models]
    colors = _model_colors(result)
    with matplotlib.rc_context(STYLE):
        fig, axes = _figure(len(phases), max(1.6 * len(names), 4.5), 4.6)
        for ax, phase in zip(axes, phases):
            for i, m in enumerate(result.models):
                if phase not in _split_phases(m):
                    continue
                comp = _components(m, phase)
                bottom = 0.0
                if m.has_cuda:
                    for key, label, color in BREAKDOWN:
                        h = comp[key] if np.isfinite(comp[key]) else 0.0
                        ax.bar(i, h, 0.6, bottom=bottom, color=color, label=label)
                        bottom += h
                else:
                    ax.bar(i, comp[WALL], 0.6, color=colors[m.name], alpha=0.7,
                           label="wall-clock (no CUDA in trace)" if any_cuda else None)
                wall = words(WALL, GPU_SPAN if any_cuda else WALL)
                ax.plot([i - 0.35, i + 0.35], [comp[WALL]] * 2, color="black", linewidth=2,
                        label=f"median {wall}")
                ax.annotate(f"{wall} {comp[WALL]:.3g} ms", (i, max(bottom, comp[WALL])), textcoords="offset points",
                            xytext=(0, 4), ha="center", fontsize=8)
            ax.set_xticks(range(len(names)), names)
            ax.set_xlim(-0.6, len(names) - 0.4)
            ax.margins(y=0.12)
            ax.set_xlabel("model")
            ax.set_ylabel("median time per forward (ms)")
            ax.set_title(f"{phase} forwards")
            ax.grid(axis="y", alpha=0.3)
        _legend_below(fig, axes)
        outlasts = any(m.has_cuda and median(m.kept[GPU_SPAN_NS].to_numpy(dtype=float))
                       > median(m.kept[WALL_NS].to_numpy(dtype=float)) for m in result.models)
        title = "Median forward time — CPU-only traces: wall-clock only, no GPU breakdown"
        if any_cuda:
            title = "Where the forward time goes, median per forward" + (
                " (the GPU work outlasts the ranges that launched it: span > launch time)" if outlasts else "")
        _suptitle(fig, title)
    return fig


def plot_kernel_categories(result: CostCoefficientResult) -> Figure | None:
    """Grouped horizontal bars of GPU time per forward by kernel category, target and each draft side by side, one
    panel per phase. None when the result has no kernel categories (no CUDA in the traces)."""
    cats = result.categories
    if cats is None or cats.empty:
        return None
    phases = in_order(cats["phase"])
    if set(phases) - {"all"}:
        phases = [p for p in phases if p != "all"]
    models = [m.name for m in result.models if m.name in set(cats["model"])]
    colors = _model_colors(result)
    order = list(dict.fromkeys(cats["category"]))
    height = 0.8 / len(models)
    with matplotlib.rc_context(STYLE):
        fig, axes = _figure(len(phases), 5.0, max(2.2 + 0.45 * len(order) * max(len(models) / 2, 1), 3.5))
        for ax, phase in zip(axes, phases):
            sub = cats[cats["phase"] == phase]
            for j, name in enumerate(models):
                t = sub[sub["model"] == name].set_index("category")["time_per_forward_ms"].reindex(order).fillna(0.0)
                y = np.arange(len(order)) + (j - (len(models) - 1) / 2) * height
                ax.barh(y, t.to_numpy(dtype=float), height, color=colors[name], label=name)
            ax.set_yticks(range(len(order)), order)
            ax.invert_yaxis()
            ax.set_xlabel("GPU time per forward (ms)")
            ax.set_ylabel("kernel category")
            ax.set_title(f"{phase} forwards")
            ax.grid(axis="x", alpha=0.3)
        _legend_below(fig, axes)
        _suptitle(fig, f"GPU time per forward by kernel category: {models[0]} against {', '.join(models[1:])}")
    return fig


# Kernels shown per draft in the kernel_diff plot: those of largest |difference| (the table has them all).
DIFF_KERNELS = 12
SAVES, COSTS = "#55a868", "#c44e52"


def _diff_bars(ax, labels: list[str], target: np.ndarray, draft: np.ndarray, title: str) -> None:
    delta = draft - target
    y = np.arange(len(labels))
    ax.barh(y, delta, color=[SAVES if d < 0 else COSTS for d in delta], height=0.7)
    ax.set_yticks(y, labels)
    ax.invert_yaxis()
    ax.axvline(0.0, color="0.2", lw=0.8)
    reach = float(np.max(np.abs(delta))) if len(delta) else 0.0
    reach = reach if reach > 0 else 1.0
    ax.set_xlim(-1.15 * reach, 1.15 * reach)
    for yi, d, t, dr in zip(y, delta, target, draft):  # target → draft, on the other side of 0 than the bar
        ax.text(0.0, yi, f" {t:.3g} → {dr:.3g} ms ", va="center", ha="right" if d >= 0 else "left", fontsize=7,
                color="0.25")
    ax.set_xlabel("draft − target, GPU ms per forward (< 0: the draft saves time)")
    ax.set_title(title)
    ax.grid(axis="x", alpha=0.3)


def plot_kernel_diff(result: CostCoefficientResult) -> Figure | None:
    """Where each draft saves GPU time against the target, per forward of the phase c is judged on: the difference
    (draft − target) by kernel category, and for the kernels of largest difference (`result.kernel_diff`); each bar
    labelled target → draft ms. None without GPU work in the traces."""
    table = result.kernel_diff
    if table.empty:
        return None
    drafts = list(dict.fromkeys(table["draft"]))
    n_kernels = min(DIFF_KERNELS, int(table.groupby("draft").size().max()))
    with matplotlib.rc_context(STYLE):
        fig = Figure(figsize=(13.0, max(2.6, 0.3 * n_kernels + 1.4) * len(drafts) + 0.6), layout="constrained")
        axes = fig.subplots(len(drafts), 2, squeeze=False, width_ratios=[1, 1.6])
        for row, draft in zip(axes, drafts):
            rows = table[table["draft"] == draft]
            phase = rows["phase"].iloc[0]
            cats = kernel_mod.category_diff(rows)
            _diff_bars(row[0], list(cats["category"]), cats["a_ms_per_range"].to_numpy(dtype=float),
                       cats["b_ms_per_range"].to_numpy(dtype=float), f"{draft}: by category ({phase})")
            top = rows.head(DIFF_KERNELS)
            names = [k if len(k) <= 48 else k[:47] + "…" for k in top["kernel"]]
            _diff_bars(row[1], names, top["a_ms_per_range"].to_numpy(dtype=float),
                       top["b_ms_per_range"].to_numpy(dtype=float), f"{draft}: kernels, the largest difference first")
        _suptitle(fig, f"Where the draft saves GPU time against {result.target.name} (green) and where it does not "
                       "(red), per forward")
    return fig


PLOTS: dict[str, Callable[[CostCoefficientResult], Figure | None]] = {
    "forward_times": plot_forward_times,
    "coefficients": plot_coefficients,
    "time_breakdown": plot_time_breakdown,
    "kernel_categories": plot_kernel_categories,
    "kernel_diff": plot_kernel_diff,
    "rank_lag": lambda result: rank_plots.plot_rank_lag(result, dict(STYLE)),
    "runs": lambda result: run_plots.plot_runs(result, dict(STYLE)),
    "token_split": lambda result: token_plots.plot_token_split(result, dict(STYLE)),
}


def _file_stem(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("_") or "draft"


def speedup_figures(result: CostCoefficientResult, dsi_maps: Heatmaps) -> dict[str, Figure]:
    """The speedup model's plots for the measured drafts (see the module docstring), by file stem; empty when no draft
    has a finite c. `dsi_maps`: the simulated DSI speedups to draw (`analysis.theory.dsi.report_heatmaps`)."""
    marks = result.speedup_marks
    if marks.empty:
        return {}
    headline = getattr(result, "headline", WALL)  # the metric c is headlined on (`analysis.coefficient.gpu_time`)
    on = plot_label(headline, headline)
    figs = {}
    for row in marks.itertuples():
        figs[f"speedup_{_file_stem(row.draft)}"] = speedup_plots.speedup_heatmap(
            row.c, title=f"{row.draft} ({row.phase} {on} c = {sig3(row.c)}):\n"
                         "expected speedup (Leviathan et al. Thm 3.8); black line: S = 1")
    figs["break_even"] = speedup_plots.break_even_chart(marks, alphas=result.acceptance)
    figs["dsi_heatmaps"] = speedup_plots.dsi_heatmaps(dsi_maps, marks)
    return figs
