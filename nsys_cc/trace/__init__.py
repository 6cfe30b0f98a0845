"""Reading Nsight Systems exports: `open_trace(path) -> Trace` (read-only), and finding `nsys`."""

from .nsys import find_nsys, nsys_version, require_nsys
from .reader import Trace, open_trace

__all__ = ["Trace", "find_nsys", "nsys_version", "open_trace", "require_nsys"]
