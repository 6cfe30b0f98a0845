"""Every figure of a result: the numbers are computed first (`analysis`), then drawn (`plots`, `speedup_plots`)."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Iterator
from pathlib import Path

from matplotlib.figure import Figure

from ..analysis.coefficient.result import CostCoefficientResult
from ..analysis.metrics import WALL
from ..analysis.theory.dsi import report_heatmaps
from . import speculative_plots
from .gpu_time_text import words
from .result_plots import DPI, PLOTS, _file_stem, speedup_figures

# With more drafts than this, the plots show the target and this many drafts, those of lowest c (the tables keep all):
# 300 drafts used to give 305 PNGs, some 100 000 pixels wide, in minutes.
MAX_PLOTTED_DRAFTS = 8


def plotted(result: CostCoefficientResult, top: int = MAX_PLOTTED_DRAFTS) -> tuple[CostCoefficientResult, str | None]:
    """The result as the plots show it, and a sentence saying what was left out (None when nothing was): every
    draft when there are at most `top`, else the `top` drafts of lowest c (the decision c of `speedup_marks`,
    on the headline metric, decode else all; drafts without one last), in their order of the analysis."""
    drafts = [m.name for m in result.drafts]
    if len(drafts) <= top:
        return result, None
    marks = result.speedup_marks.set_index("draft")["c"] if not result.speedup_marks.empty else {}
    ranked = sorted(drafts, key=lambda d: (d not in marks, float(marks[d]) if d in marks else 0.0, drafts.index(d)))
    keep = set(ranked[:top])
    models = {result.target.name} | keep

    def rows(frame, column: str, names: set[str]):
        return frame[frame[column].isin(names)] if column in frame else frame

    view = dataclasses.replace(
        result, models=(result.target, *(m for m in result.drafts if m.name in keep)),
        summary=rows(result.summary, "model", models), coefficients=rows(result.coefficients, "draft", keep),
        kernel_summary=rows(result.kernel_summary, "model", models),
        categories=rows(result.categories, "model", models),
        diagnosis=rows(result.diagnosis, "draft", keep), verdicts=rows(result.verdicts, "draft", keep),
        speedup_marks=rows(result.speedup_marks, "draft", keep), ranks=rows(result.ranks, "model", models),
        tokens=rows(result.tokens, "model", models), gpu_time=rows(result.gpu_time, "model", models))
    on = "wall-clock" if result.headline == WALL else f"on {words(result.headline, result.headline)}"
    return view, (f"the plots show {top} of the {len(drafts)} drafts, those of lowest c ({on}, decode else all); "
                  "the tables hold every draft")


def _makers(result: CostCoefficientResult) -> Iterator[tuple[str, Callable[[], Figure | None]]]:
    view, _ = plotted(result)
    for name, fn in PLOTS.items():
        yield name, functools.partial(fn, view)
    if not view.speedup_marks.empty:
        yield from _deferred(lambda: speedup_figures(view, report_heatmaps(view.seed)))
    # the speculative runs measured in place: the waterfall and each draft's forecast heatmap
    yield from _deferred(lambda: speculative_plots.figures(view.speculative, _file_stem))


def _deferred(build: Callable[[], dict[str, Figure]]) -> Iterator[tuple[str, Callable[[], Figure | None]]]:
    for name, fig in build().items():
        yield name, functools.partial(lambda f: f, fig)


def make_figures(result: CostCoefficientResult) -> dict[str, Figure]:
    """Every plot that has data, by file stem: `plots.PLOTS`, then the speedup model's (with the DSI simulation at
    the result's seed), then the speculative runs' (`speculative_plots`). With many drafts, those `plotted` keeps."""
    return dict(iter_figures(result))


def iter_figures(result: CostCoefficientResult) -> Iterator[tuple[str, Figure]]:
    """`make_figures` one at a time (file stem, figure), so a caller that saves each can let it go before the next is
    drawn; a stem met again (two drafts whose names differ only in characters a file name cannot hold) gets `-2`, …"""
    seen: set[str] = set()
    for name, make in _makers(result):
        fig = make()
        if fig is None:
            continue
        stem, n = name, 1
        while stem in seen:
            n += 1
            stem = f"{name}-{n}"
        seen.add(stem)
        yield stem, fig


def make_plots(result: CostCoefficientResult, out_dir: str | Path) -> list[Path]:
    """Write the report's PNG plots into `out_dir` (created if missing) and return their paths."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, fig in iter_figures(result):
        path = out / f"{name}.png"
        fig.savefig(path, dpi=DPI)
        paths.append(path)
    return paths
