"""Reports: text formats, the report directory, figures.

The names below load on first use, so that importing one small module of this package (`report.live`, which the
live stat logger imports inside vLLM's API server) does not import matplotlib and every figure at server start-up.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .figures import make_figures, make_plots
    from .formats import FORMATS, render, render_html, result_to_dict
    from .writer import write_report

_LAZY = {
    "make_figures": ".figures", "make_plots": ".figures",
    "FORMATS": ".formats", "render": ".formats", "render_html": ".formats", "result_to_dict": ".formats",
    "write_report": ".writer",
}

__all__ = ["FORMATS", "make_figures", "make_plots", "render", "render_html", "result_to_dict", "write_report"]


def __getattr__(name: str):
    if name not in _LAZY:
        raise AttributeError(f"module 'nsys_cc.report' has no attribute {name!r}")
    return getattr(importlib.import_module(_LAZY[name], __name__), name)


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
