"""`done.json`: the record a completed run leaves, written last: its presence, made with the same commands, means the
run is complete (a rerun keeps it).

- an interleaved run: `run-<k>/done.json`, `{"commands", "machine", "engines": {label: "done" or why not},
  "forward_ranges": {label: n}, "notes", "speculative": [labels with a metrics dump], "files": {name: sha256}}`;
- one process per model: `<label>.done.json` beside its trace, `{"commands", "range", "forward_ranges", "files":
  {name: sha256}}` (while a completed attempt replaces the earlier trace set, `"commands": ""` — not complete — and
  `"earlier"`: the replaced files' sha256).

`files` (round 5) is the sha256 of every file the run left: what proves them nsys-cc's, so that a later call may
replace or remove them (`files.proof`); a record without it (round 4) proves its run's files by their names.

A file of another shape is a record nsys-cc did not write (`load_*` give None: the run is made again).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from .. import inputs
from ..files import atomic

NAME = "done.json"
WHAT = "run record"
RUN_SHAPE = {"commands": str, "machine": inputs.Optional(dict), "engines": inputs.Optional(inputs.MapOf(str)),
             "notes": inputs.Optional(inputs.ListOf(str)), "speculative": inputs.Optional(inputs.ListOf(str)),
             "files": inputs.Optional(inputs.MapOf(str))}
MODEL_SHAPE = {"commands": str, "range": inputs.Optional(str), "files": inputs.Optional(inputs.MapOf(str)),
               "earlier": inputs.Optional(inputs.MapOf(str))}


def text(record: dict) -> str:
    """The file's text: `record` as indented JSON."""
    return json.dumps(record, indent=2) + "\n"


def write_run(run_dir: Path, record: dict) -> Path:
    """`run_dir/done.json`, written whole (the last file of a run)."""
    return atomic.write_text(run_dir / NAME, text(record))


def load_run(run_dir: Path) -> dict | None:
    """An interleaved run's record, None when there is none or it is not as written (not a regular file, another
    shape)."""
    return inputs.load_state(run_dir / NAME, WHAT, shape=RUN_SHAPE)


def read_run(run_dir: str | os.PathLike) -> Any:
    """An interleaved run's record as parsed, whatever its shape; an InputError naming it when it cannot be read."""
    return inputs.load_json(Path(run_dir) / NAME, WHAT)


def load_model(path: Path) -> dict | None:
    """One model's `<label>.done.json`, None when there is none or it is not as written."""
    return inputs.load_state(path, WHAT, shape=MODEL_SHAPE)
