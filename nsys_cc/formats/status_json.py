"""`status.json`: what a profile says of its models and runs, rewritten as it goes, in its output directory.

Two layouts:

- interleaved runs (the default `profile`): an object `{"runs": [{"run": k, "dir", "status", "reason", "seconds",
  "machine", "engines", "notes", "profiler", "trace"}, …], "profiler": "nsys" | "torch", "stopped_by": …,
  "models": [{"role", "model", "label", "status", "reason", "draft"?, "gamma"?, "batch_size"?}, …]}`;
- one process per model (`profile --separate-processes`, tensor-parallel models, a speculative config alone): a list,
  one entry per model `{"role", "model", "label", "status", "reason", "seconds", "range", "log", "bench_json",
  "profiler", "trace", "sqlite"?, "nsys_rep"?, "draft"?, "gamma"?, "metrics"?}` (`trace`: the trace the analysis reads,
  the SQLite export or the torch route's `<label>.pt.trace.json.gz`; `sqlite` and `nsys_rep` under nsys only).

The writer (`launch`) replaces only a file of either shape (`is_ours`): a user's own `status.json` in `-o` is refused,
never written over. The reader (`analysis.profile_dir.outputs`) reads the entries.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from .. import inputs
from ..errors import InputError
from ..files.folder import Folder

NAME = "status.json"
WHAT = "profile status file"


def has_its_shape(doc: Any) -> bool:
    """Whether a parsed document is laid out as a status file: an object with its runs, or a list of model entries
    (each an object with a label)."""
    if isinstance(doc, dict):
        return isinstance(doc.get("runs"), list)
    return isinstance(doc, list) and all(isinstance(e, dict) and "label" in e for e in doc)


def is_ours(data: bytes) -> bool:
    """Whether `data` is a profile's status.json (either layout): only such a file is ever replaced (issue 32, P12)."""
    try:
        doc = inputs.parse_json(data, WHAT)
    except InputError:
        return False
    return has_its_shape(doc)


def check_writable(out_dir: Path) -> None:
    """Before the first run: InputError when `out_dir/status.json` is a file a profile did not write."""
    Folder(out_dir).check_own(NAME, is_ours, "profile's status")


def write(out_dir: Path, doc: Any) -> Path:
    """`out_dir/status.json` replaced by `doc` (indented JSON), through the one writer, only over a profile's own
    status file."""
    return Folder(out_dir).write_own(NAME, json.dumps(doc, indent=2) + "\n", is_ours, "profile's status")


def read(out_dir: Path) -> Any:
    """The parsed status.json of `out_dir`, None when there is none (a missing file, not a broken one: that is an
    InputError naming it)."""
    status = out_dir / NAME
    if not os.path.lexists(status):
        return None
    return inputs.load_json(status, WHAT)  # a regular file only, nested at most inputs.MAX_DEPTH deep
