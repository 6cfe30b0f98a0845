"""Reports: text formats, the report directory, figures.

The names below load on first use, so that importing one small module of this package (`report.live_text`, which the
live stat logger imports inside vLLM's API server) does not import matplotlib and every figure at server start-up.
Importing the package binds a result's views (`res.render()`, `res.figures()`, …; `nsys_cc.result_views`) to the
functions here, each loaded when first called: the analysis returns data and imports nothing of this package.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from .. import result_views

if TYPE_CHECKING:
    from .figure_files import make_figures, make_plots
    from .render_formats import FORMATS
    from .report_files import write_report
    from .result_text import render, render_html, result_to_dict

_LAZY = {
    "make_figures": ".figure_files", "make_plots": ".figure_files",
    "FORMATS": ".render_formats", "render": ".result_text", "render_html": ".result_text",
    "result_to_dict": ".result_text",
    "write_report": ".report_files",
}

__all__ = ["FORMATS", "make_figures", "make_plots", "render", "render_html", "result_to_dict", "write_report"]


# A result's views (`nsys_cc.result_views`) → the module and function here that render it.
VIEWS = {"render": (".result_text", "render"), "render_html": (".result_text", "render_html"),
         "to_dict": (".result_text", "result_to_dict"), "figures": (".figure_files", "make_figures"),
         "write_report": (".report_files", "write_report")}


def _loading(module: str, name: str):
    """`module.name`, imported when first called."""
    def call(*args, **kwargs):
        return getattr(importlib.import_module(module, __name__), name)(*args, **kwargs)

    call.__name__ = call.__qualname__ = name
    return call


def _bind_views() -> None:
    for view, (module, name) in VIEWS.items():
        result_views.bind(view, _loading(module, name))


_bind_views()


def __getattr__(name: str):
    if name not in _LAZY:
        raise AttributeError(f"module 'nsys_cc.report' has no attribute {name!r}")
    return getattr(importlib.import_module(_LAZY[name], __name__), name)


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
