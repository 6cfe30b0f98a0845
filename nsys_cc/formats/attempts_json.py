"""`attempts.json`: every start of a sweep cell, kept across reruns: `{"starts": [{"host", "pid", "run_id",
"started"}, …]}`. A file of another shape is unreadable state (its starts are forgotten, with a note)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from .. import inputs
from ..files.folder import Folder

NAME = "attempts.json"
WHAT = "cell's attempts record"
SHAPE = {"starts": inputs.ListOf(dict)}


def load(cell_dir: Path, on_unreadable: Callable[[str], None] | None = None) -> dict | None:
    """The starts recorded so far, None when there is none or it is unreadable (then `on_unreadable(why)`)."""
    return inputs.load_state(cell_dir / NAME, WHAT, shape=SHAPE, on_unreadable=on_unreadable)


def write(cell_dir: Path, starts: list[dict]) -> None:
    """`cell_dir/attempts.json` replaced by `starts`, through the one writer."""
    Folder(cell_dir).write_text(NAME, json.dumps({"starts": starts}, indent=2) + "\n")
