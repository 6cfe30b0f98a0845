"""Reports: text formats, the report directory, figures."""

from .figures import make_figures, make_plots
from .formats import FORMATS, render, render_html, result_to_dict
from .writer import write_report

__all__ = ["FORMATS", "make_figures", "make_plots", "render", "render_html", "result_to_dict", "write_report"]
