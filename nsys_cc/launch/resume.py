"""What a rerun keeps: a model's `<label>.done.json` marker says its trace set is complete and with which commands
(`is_complete`); a new attempt writes its trace set under `ATTEMPTS_DIR` (`staged`) and publishes it over the earlier
one only once it completed (`commit`), so a failed or interrupted attempt leaves the earlier results as they were.
"""

from __future__ import annotations

import dataclasses

from ..contract import FORWARD_RANGE
from ..files.folder import Folder
from ..files.signals import signals_deferred
from ..formats import done_json
from .commands import ModelCommands, ModelFiles
from .plan import ModelLaunch


def is_complete(run: ModelLaunch) -> bool:
    """Whether an earlier run left this model's trace complete, made with the same commands (then `run.range_name`
    is the forward range it recorded)."""
    f = run.files
    marker = done_json.load_model(f.done)
    if marker is None:  # none, or not a regular file (a FIFO is never waited on) or not shaped as written: rerun
        return False
    if marker.get("commands") != run.commands.shell() or not (f.trace.is_file() and f.bench_json.is_file()):
        return False
    if run.speculative and not f.metrics.is_file():
        return False
    run.range_name = marker.get("range", FORWARD_RANGE)
    return True


# A new attempt writes its trace set here (under the same names) and moves it into the output directory only once
# the model completed, so a failing rerun never removes or changes the results of an earlier one.
ATTEMPTS_DIR = ".nsys-cc-attempts"
# The files of a model's trace set, replaced together when an attempt completes (the log is the latest attempt's).
TRACE_SET = ("report", "sqlite", "trace", "bench_json", "metrics")  # `trace`: the torch route's (nsys: the sqlite)


def staged(run: ModelLaunch) -> ModelCommands:
    """The run's commands with every file of its trace set under `<out_dir>/ATTEMPTS_DIR` (same names): what an
    attempt executes. Each argument and environment value that is one of those paths is replaced, nothing else."""
    final, attempt = run.files, ModelFiles(run.files.out_dir / ATTEMPTS_DIR, run.files.label, run.files.profiler)
    moved = {str(getattr(final, k)): str(getattr(attempt, k)) for k in ("base", *TRACE_SET)}
    cmds = run.commands
    return dataclasses.replace(cmds, env={k: moved.get(v, v) for k, v in cmds.env.items()},
                               profile=[moved.get(a, a) for a in cmds.profile],
                               export=[moved.get(a, a) for a in cmds.export], files=attempt)


def discard(files: ModelFiles, *, rmdir: bool = True) -> None:
    """Remove an attempt's files, and its directory when nothing else is left in it."""
    folder = Folder(files.out_dir.parent)  # no link followed (a linked attempts folder is refused)
    folder.mkdir(files.out_dir.name)
    for key in TRACE_SET:
        folder.remove(getattr(files, key))
    if rmdir:
        folder.rmdir(files.out_dir.name)


def commit(run: ModelLaunch, attempt: ModelFiles, marker: dict) -> None:
    """Move a completed attempt's trace set over the earlier one, then write the marker. The earlier marker goes
    first, so a process killed in between leaves the model incomplete (profiled again), never a mix called
    complete; Ctrl-C waits for the renames (`signals_deferred`)."""
    final = run.files
    folder = Folder(final.out_dir)
    with signals_deferred():
        folder.remove(final.done)
        for key in TRACE_SET:
            src = getattr(attempt, key)
            if src.is_file():
                folder.replace(src, getattr(final, key))
        folder.write_text(final.done, done_json.text(marker))
