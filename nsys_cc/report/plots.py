"""Plots of a cost-coefficient result (owned by the presentation work; see issue 6)."""

from __future__ import annotations

from pathlib import Path


def make_plots(result, out_dir: Path) -> list[Path]:
    """Write the report's PNG plots into `out_dir` and return their paths."""
    return []
