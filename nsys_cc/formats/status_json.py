"""`status.json`: what a profile says of its runs and models, rewritten as it goes, in its output directory.

One layout for both ways `profile` runs engines (`launch.orchestrator`: interleaved runs, or one process per model):
`{"format": "nsys_cc.status", "version": 2, "strategy": "interleaved" | "separate", "request": the profile's request as
data (`nsys_cc.request.ProfileRequest.to_dict`), "recorder": {"name", "version"} (which recorder made the traces:
`launch.recorders`), "device": "cpu" | "gpu", "stopped_by": …, "runs": [{"run": k, "status", "reason", "seconds",
"trace", "log", …}, …], "models": [{"role", "model", "label", "status", "reason", "draft"?, "gamma"?, "batch_size"?,
"speculative_config"?, …}, …]}` (`document`). An interleaved run's entry adds its "dir", "machine", "engines" (per
label, "done" or why not) and "notes"; with one process per model a run is one model's, and each model's entry adds
its own "trace" (the trace the analysis reads), "range", "log", "bench_json", "metrics"?, "seconds".

Written before this layout (read by `analysis.profile_dir.outputs` all the same): interleaved runs as an object
`{"runs": […], "models": […], "stopped_by", "profiler"?}` without "strategy"; one process per model as a list, one
entry per model (its "trace", or in older files "sqlite").

The writer (`launch`) replaces only a file of a status file's shape (`is_ours`): a user's own `status.json` in `-o`
is refused, never written over. The reader (`analysis.profile_dir.outputs`) reads the entries.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from .. import inputs
from ..errors import InputError
from ..files.folder import Folder
from ..request import ProfileRequest
from . import done_json

NAME = "status.json"
WHAT = "profile status file"
FORMAT = "nsys_cc.status"
VERSION = 2
# The two ways `profile` runs engines (`launch.orchestrator`'s strategies), as the file names them.
INTERLEAVED = "interleaved"
SEPARATE = "separate"


def document(*, strategy: str, request: dict, recorder: dict, device: str, stopped_by: str | None,
             runs: list[dict], models: list[dict]) -> dict:
    """The status file's document (module docstring)."""
    return {"format": FORMAT, "version": VERSION, "strategy": strategy, "request": request, "recorder": recorder,
            "device": device, "stopped_by": stopped_by, "runs": runs, "models": models}


def is_separate(doc: Any) -> bool:
    """Whether a parsed status file is one process per model's: a list of models (written before one layout), or the
    document of the `SEPARATE` strategy."""
    return isinstance(doc, list) or (isinstance(doc, dict) and doc.get("strategy") == SEPARATE)


def models_of(doc: Any) -> Any:
    """The model entries of a parsed status file (either layout); what is there when it is not a list."""
    return doc if isinstance(doc, list) else doc.get("models", []) if isinstance(doc, dict) else None


def request_of(doc: Any) -> ProfileRequest | None:
    """The request a parsed status file stores (None: written before it was stored, or not as written), read as a
    run record's is (`done_json.request_of`)."""
    return done_json.request_of(doc) if isinstance(doc, dict) else None


def recorder_of(doc: Any) -> dict | None:
    """Which recorder made the profile's traces, `{"name", "version"}`, as a parsed status file says (a file written
    before the recorder was stored names its profiler alone, or nothing: None), read as a run record's is."""
    return done_json.recorder_of(doc) if isinstance(doc, dict) else None


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
