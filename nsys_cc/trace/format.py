"""What a trace format is, as the registry (`registry.py`) holds it: `TraceFormat` (how its files are recognised, what
they are named, which reader opens them, what its traces give — `capabilities.Capabilities` —, how `nsys-cc info`
describes them).

One module per format fills a `TraceFormat` in (`format_nsys.py`, `format_kineto.py`); its reader module implements
the `Trace` protocol (`source.py`) and takes its name and capabilities from it. The format names its reader module
instead of importing it: the reader imports its format, so the format cannot import the reader back (no import circle,
`tests/test_layers.py`), and telling a file's format never loads a reader (nor pandas).
This module and the format modules import nothing heavy: the sweep and the launcher ask them about file names.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .capabilities import Capabilities

if TYPE_CHECKING:
    from .source import Trace, TraceInfo

# How much of a file is read to tell its format (Kineto's top-level keys come first: `Head.text`).
HEAD_BYTES = 1 << 16


@dataclass(frozen=True)
class Head:
    """A file's first bytes, as every format's `recognise` and `claims` read them (`registry.head_of` reads them
    once): `raw`, up to HEAD_BYTES as stored; `text`, the same uncompressed when the file is gzip-compressed (up to
    HEAD_BYTES of its text; `raw` otherwise); `start`, its first 256 bytes of text (`damaged`: the gzip stream broke
    within them); `suffix`, the file name's last suffix, lower case."""

    raw: bytes
    text: bytes
    start: bytes
    suffix: str
    gzip: bool = False
    damaged: bool = False


@dataclass(frozen=True)
class TraceFormat:
    """One trace format (module docstring), a line of the registry (`registry.FORMATS`).

    - `name`: "nsys", "kineto": `Trace.format`, a result's `trace_format`;
    - `kinds`: the files it reads, in words, for messages ("an Nsight Systems SQLite export", "a .nsys-rep report");
    - `suffixes`: the names its files are written under, longest first: what a trace's label is its file name
      without (`registry.trace_stem`);
    - `recognise(head)`: the file is of this format, for certain, by its first bytes (magic bytes, top-level keys);
    - `claims(head)`: a file no format recognises that this format's reader is handed anyway, so that it says what is
      wrong with it (a `.nsys-rep` whose magic is damaged; JSON without `traceEvents`);
    - `reader`: its reader module, relative to `nsys_cc.trace`, whose `open_file(path, **options)` opens it;
    - `capabilities`: what a trace of it gives (`Capabilities`);
    - `info_lines(info)`: `nsys-cc info`'s header for one of its traces (lines of text); `info_table`: the name of
      its counted parts and of their counts ("table", "rows") and whether they are listed by name (else as counted).
    """

    name: str
    kinds: tuple[str, ...]
    suffixes: tuple[str, ...]
    recognise: Callable[[Head], bool]
    claims: Callable[[Head], bool]
    reader: str
    capabilities: Capabilities
    info_lines: Callable[[TraceInfo], list[str]]
    info_table: tuple[str, str, bool]

    def open_file(self, path: Any, **options: Any) -> Trace:
        """A trace of this format opened read-only: its reader's `open_file(path, **options)` (options another format
        takes are ignored)."""
        return importlib.import_module(self.reader, __package__).open_file(path, **options)

    def table_rows(self, tables: Mapping[str, int]) -> tuple[list[str], list[dict[str, str]]]:
        """`nsys-cc info`'s table of a trace's counted parts (`TraceInfo.tables`): its columns and rows."""
        part, count = self.info_table[0], self.info_table[1]
        items: Sequence = sorted(tables.items()) if self.info_table[2] else list(tables.items())
        return [part, count], [{part: name, count: f"{n:,}"} for name, n in items]
