"""Reading Nsight Systems exports: `open_trace(path) -> Trace` (read-only), and finding `nsys`."""

from .nsys import find_nsys, nsys_version, require_nsys
from .reader import ExportTrace, open_trace
from .source import Trace, TraceInfo, TraceSource

__all__ = ["ExportTrace", "Trace", "TraceInfo", "TraceSource", "find_nsys", "nsys_version", "open_trace",
           "require_nsys"]
