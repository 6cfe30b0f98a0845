"""`tune.json` and `schedule.json`: the two files of a tune directory that `tune` (`nsys_cc.workflows.tune`) writes as
JSON and reads back.

- `tune.json` (`NAME`), the tune record: before the first round the design alone, `{"design": {"batch_sizes": [B, …],
  "speculate": [γ, …], "check": [[B, γ], …], "target", "draft", "device", "input_len", "output_len",
  "schedule_runs": {round: table}}}` (`design_text`: what `tune` was asked, and the table each round that ran vLLM's
  whole schedule ran, added when it is profiled); after the fit the report (`record`: the result's `to_dict()`, the
  schedule and its --speculative-config, the forecast, the checks, the notes) with the design kept under "design"
  (`text`). JSON has no NaN: every non-finite number is null (`finite`); `nsys-cc tune --format json` prints the same
  document (`dumps`).
- `schedule.json` (`SCHEDULE_NAME`): the schedule to use and its --speculative-config (`TuneResult.schedule_doc()`),
  both null when it is not recommended (the fitted tables then under `fitted_num_speculative_tokens_per_batch_size`).

Both are written into the tune report's stage (`files.publishing`: the report replaced as a whole, by
`report.tune_files`); the writers here give the text. A tune reads back its design (`read_design`: {} without a tune
record, or from a tune.json of another shape, which is no tune record; `checked_design`: the same with its batch
sizes, γ values and models checked as `tune` checks its arguments) and a person or a script the schedule
(`read_schedule`).
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

from .. import inputs
from ..arguments import whole_numbers
from ..errors import InputError

NAME = "tune.json"
SCHEDULE_NAME = "schedule.json"
WHAT = "tune record"
SCHEDULE_WHAT = "tune schedule"
SHAPE = {"design": dict}
SCHEDULE_SHAPE = {"trusted": bool, "num_speculative_tokens_per_batch_size": inputs.Optional(list),
                  "speculative_config": inputs.Optional(str), "schedules": inputs.Optional(dict)}


def finite(obj: Any) -> Any:
    """`obj` with every non-finite float (NaN, ±inf) as None: JSON has no NaN."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [finite(v) for v in obj]
    return obj


def dumps(doc: dict) -> str:
    """The tune record `doc` as JSON (indented, every non-finite number null), without the file's last newline: what
    `--format json` prints."""
    return json.dumps(finite(doc), indent=1)


def text(doc: dict) -> str:
    """tune.json's text for the record `doc` (the report, with its design under "design")."""
    return dumps(doc) + "\n"


def design_text(design: dict) -> str:
    """tune.json's text before the first round: the design alone."""
    return text({"design": design})


def schedule_text(doc: dict) -> str:
    """schedule.json's text for `doc` (`TuneResult.schedule_doc()`)."""
    return json.dumps(doc, indent=1) + "\n"


def read_design(root: str | os.PathLike) -> dict:
    """The design recorded in `root/tune.json`: {} when there is none, or when the file is no tune record (not a
    regular file, not JSON, no "design" object). The values are as written (the workflow checks them)."""
    record = inputs.load_state(Path(root) / NAME, WHAT, shape=SHAPE) or {}
    return dict(record.get("design", {}))


def checked_design(root: str | os.PathLike) -> dict:
    """The design `tune` recorded in `root/tune.json` ({} without one, or when it is not a tune record), its batch
    sizes and γ values as sorted whole numbers; a design whose batch sizes, γ values or models are of the wrong kind
    (a hand edit) is one InputError naming the file."""
    found = read_design(root)
    where = f"{os.fspath(Path(root) / NAME)}: its design's"
    for key, name in (("batch_sizes", "batch sizes"), ("speculate", "γ values")):
        if key in found:
            try:
                found[key] = whole_numbers(found[key], key)
            except InputError as exc:
                raise InputError(f"{where} {name} {found[key]!r} are not whole numbers ≥ 1 ({exc}); fix the file "
                                 "or give --batch-size and --speculate") from None
    for key in ("target", "draft"):
        if key in found and not isinstance(found[key], str):
            raise InputError(f"{where} {key} {found[key]!r} is not a model name; fix the file or give --{key}")
    return found


def record(result: Any, notes: list[str]) -> dict:
    """The tune record of `result` (an `analysis.tune.schedule.TuneResult`): its `to_dict()`, with `notes` after its
    own notes."""
    doc = result.to_dict()
    doc["notes"] = [*doc["notes"], *notes]
    return doc


def read_schedule(root: str | os.PathLike) -> dict | None:
    """The parsed `root/schedule.json`, None when there is none; an InputError naming it when it is not one a tune
    wrote (not JSON, not of its shape)."""
    path = Path(root) / SCHEDULE_NAME
    if not os.path.lexists(path):
        return None
    return inputs.load_json(path, SCHEDULE_WHAT, shape=SCHEDULE_SHAPE)
