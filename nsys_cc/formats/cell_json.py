"""`cell.json`: a sweep cell's outcome, written last in the cell's folder: `{"cell", "status", "reason", "attempts",
"seconds", "rows", "parameters": the cell's fingerprint, "trace_set": its profile directory (`{"profile", …}`) or, in
sweeps made before cells were profiles of their own, its traces (`{"target", "drafts", …}`)}`. A file of another
shape (or not a regular file) is unreadable state: the cell is run again, with a note (issue 32, D05/D06)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from .. import inputs
from ..files.folder import Folder

NAME = "cell.json"
WHAT = "cell's status file"
SHAPE = {"cell": str, "status": str, "reason": inputs.Optional(str), "attempts": inputs.Optional(int),
         "seconds": inputs.Optional(float),
         "trace_set": inputs.Optional(({"profile": str}, {"target": str, "drafts": list}))}


def load(cell_dir: Path, on_unreadable: Callable[[str], None] | None = None) -> dict | None:
    """The cell's outcome as written, None when there is none or it is unreadable (then `on_unreadable(why)`)."""
    return inputs.load_state(cell_dir / NAME, WHAT, shape=SHAPE, on_unreadable=on_unreadable)


def write(cell_dir: Path, doc: dict) -> None:
    """`cell_dir/cell.json` replaced by `doc`, through the one writer (no link followed)."""
    Folder(cell_dir).write_text(NAME, json.dumps(doc, indent=2) + "\n")
