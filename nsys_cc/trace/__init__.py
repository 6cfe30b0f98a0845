"""Reading traces: `open_trace(path) -> Trace` (read-only), the registry's (`registry.py`: one module per format,
`format_nsys.py` and `format_kineto.py`), for Nsight Systems exports and reports (`reader.py`) and PyTorch-profiler
(Kineto) traces (`kineto.py`), and finding `nsys`.

The names below load on first use (PEP 562): importing a small module of this package (`trace.pages`, which the CLI
uses for every verb) does not import the reader, pandas and SQLAlchemy with it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .kineto import KinetoTrace
    from .nsys import find_nsys, nsys_version, require_nsys
    from .reader import ExportTrace
    from .registry import open_trace
    from .source import Trace, TraceInfo, TraceSource, sqlite_source

# name → the module of this package that defines it
_LAZY = {"find_nsys": ".nsys", "nsys_version": ".nsys", "require_nsys": ".nsys", "ExportTrace": ".reader",
         "open_trace": ".registry", "KinetoTrace": ".kineto", "Trace": ".source", "TraceInfo": ".source",
         "TraceSource": ".source", "sqlite_source": ".source"}

__all__ = ["ExportTrace", "KinetoTrace", "Trace", "TraceInfo", "TraceSource", "find_nsys", "nsys_version",
           "open_trace", "require_nsys", "sqlite_source"]


def __getattr__(name: str):
    if name not in _LAZY:
        raise AttributeError(f"module 'nsys_cc.trace' has no attribute {name!r}")
    value = getattr(importlib.import_module(_LAZY[name], __name__), name)
    globals()[name] = value  # later look-ups skip __getattr__
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
