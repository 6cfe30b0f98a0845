"""`done.json`: the record a completed run leaves, written last: its presence, made with the same commands, means the
run is complete (a rerun keeps it). One shape for both ways `profile` runs engines:

- an interleaved run: `run-<k>/done.json`; one process per model: `<label>.done.json` beside its trace;
- `{"commands": the exact commands (what a rerun compares), "recorder": {"name", "version"} (which recorder made the
  trace: `launch.recorders`), "trace": the trace's file name in the run's folder, "device": "cpu" | "gpu", "request":
  the profile's request as data (`nsys_cc.request.ProfileRequest.to_dict`), "models": [{"label", "role", "draft"?,
  "gamma"?, "batch_size"?, "speculative_config"?}, …] (the models the run holds), "forward_ranges": {label: n},
  "files": {name: sha256}}`, and an interleaved run's `"machine"`, `"engines": {label: "done" or why not}`,
  `"notes"`, `"speculative"` (labels with a metrics dump), one model's `"range"` (its forward range; while a completed
  attempt replaces the earlier trace set, `"commands": ""` — not complete — and `"earlier"`: the replaced files'
  sha256).

`files` is the sha256 of every file the run left: what proves them nsys-cc's, so that a later call may replace or
remove them (`files.proof`); a record without it (round 4) proves its run's files by their names.

What the readers take from a record — its request, output length, device, speculative configs, trace — is read
here (`request_of`, `output_len`, `device`, `speculative_configs`, `trace_name`), from the record's data. A record
written before the request was stored (no "request", no "device", no "models") is read from its commands as the
words a shell splits them into (`_words`: the benchmark's own options and the environment the launcher set), never
by a pattern over the text. A file of another shape is a record nsys-cc did not write (`load_*` give None: the run
is made again).
"""

from __future__ import annotations

import json
import os
import shlex
from pathlib import Path
from typing import Any

from .. import inputs
from ..errors import InputError
from ..files import atomic
from ..request import ProfileRequest

NAME = "done.json"
WHAT = "run record"
SHAPE = {"commands": str, "recorder": inputs.Optional({"name": str}), "trace": inputs.Optional(str),
         "device": inputs.Optional(str), "request": inputs.Optional(dict),
         "models": inputs.Optional(inputs.ListOf({"label": str})), "machine": inputs.Optional(dict),
         "engines": inputs.Optional(inputs.MapOf(str)), "notes": inputs.Optional(inputs.ListOf(str)),
         "speculative": inputs.Optional(inputs.ListOf(str)), "range": inputs.Optional(str),
         "files": inputs.Optional(inputs.MapOf(str)), "earlier": inputs.Optional(inputs.MapOf(str))}
RUN_SHAPE = MODEL_SHAPE = SHAPE  # one shape for both ways of running engines
# The launcher's option that sizes each engine's KV cache in a shared CPU process, and the prefix of vLLM's CPU
# variables it sets: what says an older record's run was a CPU run.
_CPU_WORDS = ("--kv-cache-memory-bytes",)
_CPU_VARIABLES = "VLLM_CPU_"


def record(commands: str, **fields: Any) -> dict:
    """A run's record: its exact `commands` and the other fields of the module docstring."""
    return {"commands": commands, **fields}


def commands_of(marker: dict | None) -> str | None:
    """The commands a record says its run was made with (None without a record); "" for an unfinished one."""
    return None if marker is None else marker.get("commands")


def text(marker: dict) -> str:
    """The file's text: `marker` as indented JSON."""
    return json.dumps(marker, indent=2) + "\n"


def write_run(run_dir: Path, marker: dict) -> Path:
    """`run_dir/done.json`, written whole (the last file of a run)."""
    return atomic.write_text(run_dir / NAME, text(marker))


def load_run(run_dir: Path) -> dict | None:
    """An interleaved run's record, None when there is none or it is not as written (not a regular file, another
    shape)."""
    return inputs.load_state(Path(run_dir) / NAME, WHAT, shape=SHAPE)


def read_run(run_dir: str | os.PathLike) -> Any:
    """An interleaved run's record as parsed, whatever its shape; an InputError naming it when it cannot be read."""
    return inputs.load_json(Path(run_dir) / NAME, WHAT)


def load_model(path: Path) -> dict | None:
    """One model's `<label>.done.json`, None when there is none or it is not as written."""
    return inputs.load_state(path, WHAT, shape=SHAPE)


def request_of(marker: dict) -> ProfileRequest | None:
    """The request the record's run was made for; None for a record written before it was stored, or one whose
    request is not as written."""
    stored = marker.get("request")
    if not isinstance(stored, dict):
        return None
    try:
        return ProfileRequest.from_dict(stored, WHAT)
    except (InputError, TypeError, ValueError):
        return None


def recorder_of(marker: dict) -> dict | None:
    """Which recorder made the run's trace, `{"name", "version"}` (an older record names its profiler alone, or
    nothing: None)."""
    recorder = marker.get("recorder")
    if isinstance(recorder, dict) and isinstance(recorder.get("name"), str):
        return {"name": recorder["name"], "version": recorder.get("version")}
    named = marker.get("profiler")
    return {"name": named, "version": None} if isinstance(named, str) else None


def trace_name(marker: dict) -> str | None:
    """The name of the run's trace in its folder, as the record (or a status file's run entry) gives it: a name in
    the folder, whatever path was recorded (None: an older record, which names none)."""
    name = marker.get("trace")
    base = Path(name).name if isinstance(name, str) else ""
    return base if base not in ("", ".", "..") else None


def _words(marker: dict) -> tuple[dict[str, str], list[str]]:
    """An older record's first command (the benchmark under its recorder), as a shell splits it: the variables set
    before it, and its words."""
    first = (marker.get("commands") or "").split("\n", 1)[0]
    try:
        words = shlex.split(first)
    except ValueError:
        return {}, []
    env: dict[str, str] = {}
    while words and "=" in words[0] and not words[0].startswith("-"):
        key, value = words.pop(0).split("=", 1)
        env[key] = value
    return env, words


def _option_values(words: list[str], option: str) -> list[str]:
    """Every value of `option` in `words` (`--option VALUE` or `--option=VALUE`)."""
    out = []
    for i, word in enumerate(words):
        if word == option and i + 1 < len(words):
            out.append(words[i + 1])
        elif word.startswith(option + "="):
            out.append(word.split("=", 1)[1])
    return out


def output_len(marker: dict) -> int | None:
    """The benchmark's generated tokens per sequence (`--output-len`) the record's run was made with; None when the
    record does not say."""
    request = request_of(marker)
    if request is not None:
        return request.output_len
    for value in _option_values(_words(marker)[1], "--output-len"):
        if value.isascii() and value.isdigit():
            return int(value)
    return None


def device(marker: dict) -> str | None:
    """"cpu" or "gpu": where the record's run ran (an older record: a CPU run is one the launcher gave vLLM's CPU
    variables or each engine's KV cache bytes; a variable the user's environment set is not in the record)."""
    stored = marker.get("device")
    if isinstance(stored, str) and stored:
        return stored
    env, words = _words(marker)
    if not words:
        return None
    cpu = any(k.startswith(_CPU_VARIABLES) for k in env) or any(w in _CPU_WORDS for w in words)
    return "cpu" if cpu else "gpu"


def speculative_configs(marker: dict) -> list[str]:
    """The `--speculative-config` of each speculative model the record's run holds, in its order (JSON text)."""
    models = marker.get("models")
    if isinstance(models, list):
        return [m["speculative_config"] for m in models
                if isinstance(m, dict) and isinstance(m.get("speculative_config"), str)]
    return _option_values(_words(marker)[1], "--speculative-config")
