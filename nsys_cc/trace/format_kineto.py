"""The PyTorch-profiler (Kineto) format (`FORMAT`, a line of the registry): Chrome-trace JSON, plain or gzip-compressed,
as torch's profiler, vLLM, SGLang and `profile --profiler torch` write it (`<label>.pt.trace.json.gz`), read by
`kineto.py` (`KinetoTrace`).

Recognised by its text (uncompressed when the file is gzip): one of the top-level keys Kineto writes first
(`"traceEvents"`, `"schemaVersion"`) within the first 64 KiB — a sweep's JSON manifest holds neither. Other JSON text
(an object or a list), and a gzip stream damaged in its first bytes, is still handed to the Kineto reader, which says
what it lacks ("a JSON object without 'traceEvents'").
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..contract import TORCH_TRACE_SUFFIX
from .capabilities import Capabilities
from .format import Head, TraceFormat

if TYPE_CHECKING:
    from .source import TraceInfo

# What opens a Kineto trace's text: its top-level keys, the first of which come before the events.
_KEYS = (b'"traceEvents"', b'"schemaVersion"')
# Blanks (and a UTF-8 byte-order mark) before a JSON document's first character.
_BLANKS = b" \t\r\n\xef\xbb\xbf"
# Names of the trace files, longest first (vLLM writes `rank0.<id>.pt.trace.json.gz`, SGLang `<id>.trace.json.gz`).
SUFFIXES = (TORCH_TRACE_SUFFIX, TORCH_TRACE_SUFFIX.removesuffix(".gz"), ".json.gz", ".json")

CAPABILITIES = Capabilities(
    range_word="range", ranges_are="user_annotation",
    no_ranges="the PyTorch-profiler trace has no user_annotation ranges (torch.profiler.record_function)",
    engine_steps=True)

# Range names listed by `nsys-cc info` (the most frequent first; the JSON lists all).
LISTED_RANGES = 8


def _recognise(head: Head) -> bool:
    return any(key in head.text for key in _KEYS)


def _claims(head: Head) -> bool:
    return head.damaged or head.start.lstrip(_BLANKS)[:1] in (b"{", b"[")


def info_lines(info: TraceInfo) -> list[str]:
    """`nsys-cc info`'s header for a PyTorch-profiler trace: what the file states, where it ran, what it holds."""
    d = info.details
    versions = ", ".join(f"{k.removesuffix('_version').removesuffix('Version')} {v}" for k, v in d["versions"].items())
    devices = d["devices"]
    names = sorted({str(x.get("name")) for x in devices})
    device = (f"{', '.join(names)} × {len(devices)}" if devices else "none listed (a CPU-only profile)")
    ranges = sorted(d["ranges"].items(), key=lambda kv: (-kv[1], kv[0]))
    shown = [f"{n} × {name}" for name, n in ranges[:LISTED_RANGES]]
    if len(ranges) > LISTED_RANGES:
        shown.append(f"… {len(ranges) - LISTED_RANGES} more names (--format json lists them)")
    rank = (f"{d['rank']} of {d['world_size']}" + (f" ({d['backend']})" if d.get("backend") else "")
            if d.get("rank") is not None else "unknown")
    frames = {None: "not stated", True: "recorded (with_stack)", False: "not recorded"}[d.get("with_stack")]
    return [
        f"file            {info.path}",
        f"format          PyTorch profiler (Kineto) trace, schema {info.schema_version or 'unknown'}",
        f"ran on          {info.description}",
        f"versions        {versions or 'none stated'}",
        f"devices         {device}",
        f"rank            {rank}",
        f"CUDA data       {'yes' if info.has_cuda else 'no'}",
        f"Python frames   {frames}: {d['python_frames']:,}",
        f"ranges          {sum(d['ranges'].values()):,} user_annotation ranges"
        + (":" if ranges else " (torch.profiler.record_function writes them)"),
        *(f"                {line}" for line in shown),
    ]


FORMAT = TraceFormat(
    name="kineto", kinds=("a PyTorch-profiler trace (.json or .json.gz)",), suffixes=SUFFIXES,
    recognise=_recognise, claims=_claims, reader=".kineto", capabilities=CAPABILITIES, info_lines=info_lines,
    info_table=("category", "events", False))
