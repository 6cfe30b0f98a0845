"""`run-<k>/interleaved.json`: the benchmark driver's record of an interleaved run (`nsys_cc.vllm.interleave`), written
when the benchmark ends: `{"format": "nsys_cc.interleaved", "version": 1, "warmup_iterations", "iterations",
"engines": [{"label", "index", "error", "speculative", "latencies", "warmup_latencies"}, …]}` — per engine its label,
its index (0-based, in the order given), the latencies of its measured and warm-up iterations in seconds, and the
error when it could not be built. The launcher reads which engines were built (`read`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .. import inputs

NAME = "interleaved.json"
FORMAT = "nsys_cc.interleaved"
VERSION = 1
SHAPE = {"engines": inputs.ListOf({"label": str, "error": inputs.Optional(str)})}


def write(path: Path, *, warmup_iterations: int, iterations: int, engines: list[dict]) -> None:
    """The driver's record at `path` (inside the benchmark's process, in the attempt folder it was given)."""
    doc = {"format": FORMAT, "version": VERSION, "warmup_iterations": warmup_iterations, "iterations": iterations,
           "engines": engines}
    path.write_text(json.dumps(doc, indent=1) + "\n")


def read(path: Path) -> Any:
    """The record as the launcher reads it; an InputError naming it when it is not a record of this shape."""
    return inputs.load_json(path, "benchmark record", shape=SHAPE)
