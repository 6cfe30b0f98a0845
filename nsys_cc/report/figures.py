"""Every figure of a result: the numbers are computed first (`analysis`), then drawn (`plots`, `speedup_plots`)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from matplotlib.figure import Figure

from ..analysis.dsi import report_heatmaps
from ..analysis.result import CostCoefficientResult
from . import speculative_plots
from .plots import DPI, PLOTS, _file_stem, speedup_figures


def make_figures(result: CostCoefficientResult) -> dict[str, Figure]:
    """Every plot that has data, by file stem: `plots.PLOTS`, then the speedup model's (with the DSI simulation at
    the result's seed), then the speculative runs' (`speculative_plots`)."""
    figs = {name: fig for name, fn in PLOTS.items() if (fig := fn(result)) is not None}
    if not result.speedup_marks.empty:
        figs.update(speedup_figures(result, report_heatmaps(result.seed)))
    # the speculative runs measured in place: the waterfall and each draft's forecast heatmap
    return {**figs, **speculative_plots.figures(result.speculative, _file_stem)}


def iter_figures(result: CostCoefficientResult) -> Iterator[tuple[str, Figure]]:
    """`make_figures` one at a time (file stem, figure), so a caller that saves each can let it go before the next is
    drawn; a stem met again (two drafts whose names differ only in characters a file name cannot hold) gets `-2`, …"""
    seen: set[str] = set()
    for name, fig in make_figures(result).items():
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
