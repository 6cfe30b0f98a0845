"""Reports: text formats, the report directory, plots."""

from .formats import FORMATS, render, result_to_dict
from .writer import write_report

__all__ = ["FORMATS", "render", "result_to_dict", "write_report"]
