"""How a tune's (or a sweep's) cells were profiled, read from the records beside them as data, through
`nsys_cc.formats`: the benchmark's output length, the device, and the table of vLLM's whole schedule a round ran.

Where each answer comes from, the first record that holds it:

- the tune record (`tune.json`'s design, `formats.tune_json`): what `nsys-cc tune` was asked when it profiled — its
  `device`, `input_len`, `output_len` — and the table each schedule round ran (`schedule_runs`, by round);
- a sweep cell's record (`cell.json`'s parameters, `formats.cell_json`): the cell's benchmark options;
- the runs' own records (`run-<k>/done.json`, `formats.done_json`): each run's machine state, which holds the GPU's
  clocks exactly when the run was made on the GPU (`launch.machine.machine_state`) — every interleaved run's record
  has it.

Last, the runs' records themselves (`run-<k>/done.json`, `<label>.done.json`) through `formats.done_json`: the
request each stores as data, or for a record made before the request was kept (the committed tune fixtures, tunes
and profiles made before) its command line's words as a shell splits them — never a pattern over the text.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from ...formats import cell_json, done_json, tune_json
from ..profile_dir.outputs import RUN_GLOB

ROUND_PREFIX = "round-"  # a tune's rounds: round-1/, round-2/, … (`nsys_cc.workflows.tune`)
DEVICES = ("cpu", "gpu")


def tune_record(directory: str | os.PathLike) -> dict:
    """The design of the tune `directory` belongs to: its own `tune.json`'s, or its tune's when it is one of its
    rounds (`round-<k>/`); {} when there is none."""
    d = Path(directory)
    design = tune_json.read_design(d)
    if not design and d.name.startswith(ROUND_PREFIX):
        design = tune_json.read_design(d.parent)
    return design


def output_len(directory: str | os.PathLike) -> int:
    """The tokens each sequence generated in the benchmark of a cell directory's runs (a tune's round or a sweep's
    or an older tune's `bs<B>…/`): the tune record's, the sweep cell's, else the runs' recorded commands (0 when no
    record says)."""
    d = Path(directory)
    recorded = tune_record(d).get("output_len")
    if isinstance(recorded, int) and _whole(recorded):
        return recorded
    recorded = _field(cell_json.load(d), "parameters", "options", "output_len")
    if isinstance(recorded, int) and _whole(recorded):
        return recorded
    for record in _run_records(d):
        if n := done_json.output_len(record):
            return n
    return 0


def device(root: str | os.PathLike) -> str:
    """"cpu" or "gpu": where a tune directory's cells ran — the tune record's device, else the first run record's
    machine state (a GPU run's holds its GPU clocks); "cpu" without either."""
    recorded = tune_record(root).get("device")
    if recorded in DEVICES:
        return recorded
    r = Path(root)
    runs = f"{RUN_GLOB}/{done_json.NAME}"  # a round's runs; an earlier tune's bs<B>/ or a sweep's bs<B>-in<L>/
    for done in [*r.glob(f"{ROUND_PREFIX}*/{runs}"), *r.glob(f"bs*/{runs}"), *r.glob(runs)]:  # or a round itself
        machine = (done_json.load_run(done.parent) or {}).get("machine")
        if isinstance(machine, dict):
            gpu = any(isinstance(state, dict) and "gpu_clocks" in state for state in machine.values())
            return "gpu" if gpu else "cpu"
    return "cpu"


def schedule_table(round_dir: str | os.PathLike) -> list:
    """vLLM's `num_speculative_tokens_per_batch_size` that a round's schedule engines ran ([] when the round ran
    none): the tune record's (`schedule_runs`), else the --speculative-config its runs' recorded commands give."""
    d = Path(round_dir)
    runs = tune_record(d).get("schedule_runs")
    if isinstance(runs, dict) and isinstance(runs.get(d.name), list):
        return runs[d.name]
    for record in _run_records(d, per_model=False):
        for config in done_json.speculative_configs(record):
            if "num_speculative_tokens_per_batch_size" not in config:
                continue
            try:
                table = json.loads(config).get("num_speculative_tokens_per_batch_size", [])
            except (ValueError, AttributeError):
                continue
            return table if isinstance(table, list) else []
    return []


def _field(doc: Any, *path: str) -> Any:
    """`doc[path[0]][path[1]]…`, None where a step is missing or not an object."""
    for name in path:
        doc = doc.get(name) if isinstance(doc, dict) else None
    return doc


def _whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def _run_records(directory: Path, *, per_model: bool = True) -> list[dict]:
    """The run records of a profile directory, in order: its interleaved runs' (`run-<k>/done.json`), then (with
    `per_model`) each model's of one process per model (`<label>.done.json`); the unreadable ones left out."""
    out = [r for done in sorted(directory.glob(f"{RUN_GLOB}/{done_json.NAME}"))
           if (r := done_json.load_run(done.parent)) is not None]
    if per_model:
        out += [r for done in sorted(directory.glob(f"*.{done_json.NAME}")) if (r := done_json.load_model(done))]
    return out
