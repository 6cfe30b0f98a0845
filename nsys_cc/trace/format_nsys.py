"""The Nsight Systems format (`FORMAT`, a line of the registry): a SQLite export (`nsys export --type sqlite`) or a
report (`.nsys-rep`, older `.qdrep`, exported once into a cache: `export.py`), read by `reader.py` (`ExportTrace`).

Recognised by its first bytes: SQLite's magic (`SQLITE_MAGIC`) or a report's (`REPORT_MAGIC`); a file named like a
report whose bytes are not one is still handed to nsys, which says what is wrong with it.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from .. import inputs
from .capabilities import Capabilities
from .format import Head, TraceFormat

if TYPE_CHECKING:
    from .source import TraceInfo

# The first 16 bytes of every SQLite 3 database file.
SQLITE_MAGIC = b"SQLite format 3\x00"
# The first bytes of every .nsys-rep / .qdrep written by Nsight Systems 2021–2026.
REPORT_MAGIC = b"NVIDIA Tegra Profiler Report"
EXPORT_SUFFIX = ".sqlite"
REPORT_SUFFIXES = (".nsys-rep", ".qdrep")

CAPABILITIES = Capabilities(range_word="NVTX range", ranges_are="NVTX", no_ranges="the trace has no NVTX ranges")


def is_sqlite(path: str | os.PathLike) -> bool:
    """True when the file starts with the SQLite magic bytes."""
    with inputs.open_file(path, "trace") as fh:  # a FIFO or a device is refused, never waited on
        return fh.read(len(SQLITE_MAGIC)) == SQLITE_MAGIC


def _recognise(head: Head) -> bool:
    return head.raw.startswith(SQLITE_MAGIC) or head.raw.startswith(REPORT_MAGIC)


def _claims(head: Head) -> bool:
    return head.suffix in REPORT_SUFFIXES


def info_lines(info: TraceInfo) -> list[str]:
    """`nsys-cc info`'s header for an export: the file (and the export read), where it ran, versions, data present."""
    yes = {True: "yes", False: "no"}
    return [
        f"file            {info.path}",
        *([f"exported to     {info.sqlite_path}"] if info.sqlite_path != info.path else []),
        f"ran on          {info.description}",
        f"nsys version    {info.nsys_version or 'unknown'}",
        f"schema version  {info.schema_version or 'unknown'}",
        f"CUDA data       {yes[info.has_cuda]}",
        f"NVTX data       {yes[info.has_nvtx]}",
    ]


FORMAT = TraceFormat(
    name="nsys", kinds=("an Nsight Systems SQLite export", "a .nsys-rep report"),
    suffixes=(EXPORT_SUFFIX, *REPORT_SUFFIXES), recognise=_recognise, claims=_claims, reader=".reader",
    capabilities=CAPABILITIES, info_lines=info_lines, info_table=("table", "rows", True))
