"""What a rerun keeps: a model's `<label>.done.json` marker says its trace set is complete and with which commands
(`is_complete`); a new attempt writes its trace set in a fresh folder under `ATTEMPTS_DIR` (`staged`, `attempts`) and
publishes it over the earlier one only once it completed (`commit`), so a failed or interrupted attempt leaves the
earlier results as they were.

What a rerun may replace: only files nsys-cc can prove it wrote (`files.proof`) — a trace set whose sha256 the
model's marker records (`files`; a marker of round 4 without them: its trace set's names), a log that starts with the
header nsys-cc writes (`LOG_HEADER`), a marker of nsys-cc's shape. `in_the_way` names any other file at one of those
names (a user's own `<label>.pt.trace.json.gz` or `<label>.log`): the profile refuses it before its first run.
"""

from __future__ import annotations

import dataclasses
import os
import stat
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from .. import inputs
from ..contract import FORWARD_RANGE
from ..errors import InputError
from ..files import proof
from ..files.folder import Folder
from ..files.signals import signals_deferred
from ..formats import done_json
from . import attempts, recorders
from .commands import ModelCommands, ModelFiles
from .plan import ModelLaunch

# The first line of every log `profile` writes (`process.profile_and_export`): what proves a log nsys-cc's.
LOG_HEADER = "# nsys-cc profile: "


def recorded(marker: dict, commands: ModelCommands, files: Iterable[Path]) -> bool:
    """The one rule by which a rerun keeps a run, whichever strategy made it (`orchestrator`): its record (`marker`,
    as nsys-cc writes it: `done_json.load_*`, which gives none for a file that is not a regular file — a FIFO is never
    waited on — or of another shape) names the same commands, and every file the run leaves (`files`) is in place."""
    return done_json.commands_of(marker) == commands.shell() and all(path.is_file() for path in files)


def is_complete(run: ModelLaunch) -> bool:
    """Whether an earlier run left this model's trace complete, made with the same commands (`recorded`; then
    `run.range_name` is the forward range it recorded)."""
    f = run.files
    marker = done_json.load_model(f.done)
    if marker is None or not recorded(marker, run.commands,
                                      [f.trace, f.bench_json, *([f.metrics] if run.speculative else [])]):
        return False
    run.range_name = marker.get("range", FORWARD_RANGE)
    return True


# A new attempt writes its trace set here (under the same names) and moves it into the output directory only once
# the model completed, so a failing rerun never removes or changes the results of an earlier one.
ATTEMPTS_DIR = ".nsys-cc-attempts"


def staged(run: ModelLaunch, where: Path | None = None) -> ModelCommands:
    """The run's commands with every file of its trace set in `where` (default `<out_dir>/ATTEMPTS_DIR`; an attempt
    gets a fresh folder there, `new_attempt`), under the same names: what an attempt executes. Each argument and
    environment value that is one of those paths is replaced, nothing else."""
    final = run.files
    attempt = ModelFiles(where or final.out_dir / ATTEMPTS_DIR, final.label, final.recorder)
    moved = {str(a): str(b) for a, b in zip((final.base, *final.trace_set), (attempt.base, *attempt.trace_set))}
    cmds = run.commands
    return dataclasses.replace(cmds, env={k: moved.get(v, v) for k, v in cmds.env.items()},
                               profile=[moved.get(a, a) for a in cmds.profile],
                               export=[moved.get(a, a) for a in cmds.export], files=attempt)


def attempt_names(files: ModelFiles) -> list[str]:
    """The names an attempt of one model writes in its folder (its trace set; `attempts.make` marks them)."""
    return [path.name for path in files.trace_set]


def new_attempt(run: ModelLaunch) -> Path:
    """A fresh folder for one attempt of `run`: `<out_dir>/ATTEMPTS_DIR/<label>.<id>/` (`attempts.make`; a link at
    ATTEMPTS_DIR is refused, InputError)."""
    parent = Folder(run.files.out_dir).mkdir(ATTEMPTS_DIR)
    return attempts.make(parent, attempts.fresh(run.files.label), attempt_names(run.files))


def discard(files: ModelFiles) -> None:
    """Remove an attempt's folder (what it wrote there: `attempts.clean`), and ATTEMPTS_DIR once empty."""
    if files.out_dir.is_dir() and not files.out_dir.is_symlink():
        attempts.clean(files.out_dir)
    Folder(files.out_dir.parent.parent).rmdir(files.out_dir.parent.name)


def _legacy_attempt_file(rel: str, path: Path) -> bool:
    """A file round 4 left directly in ATTEMPTS_DIR (a killed attempt's trace set, by its names)."""
    suffixes = tuple(s for r in recorders.RECORDERS for s in r.suffixes)
    return "/" not in rel and rel.endswith((*suffixes, ".bench.json", ".metrics.json"))


def clean_attempts(out: Path) -> list[str]:
    """What killed calls left in `out/ATTEMPTS_DIR` (before the first run, under the lock): each attempt folder
    cleaned (`attempts.clean`: one whose process still runs, or holding a file nsys-cc did not write, stays), round
    4's files there by their names; a link there removed itself. Returns a note for each folder that stays."""
    where = out / ATTEMPTS_DIR
    if where.is_symlink():
        Folder(out).remove(ATTEMPTS_DIR)
        return []
    if not where.is_dir():
        return []
    notes = attempts.clean_all(where, lambda name: True, lambda rel, path: False)
    left = proof.remove_proven(where, lambda rel, path: _legacy_attempt_file(rel, path))
    strays = [n for n in left if "/" not in n]
    if strays:
        notes.append(f"{where}: it holds files nsys-cc did not write ({proof.shown(strays)}): left as it is")
    return notes


def _accept(run: ModelLaunch) -> Callable[[str, Path], bool] | None:
    """What proves the trace set in place (`files.proof`, names relative to the output directory): the sha256 its
    marker records, or for round 4's marker the trace set's names; None when there is no marker."""
    marker = done_json.load_model(run.files.done)
    if marker is None:
        return None
    if marker.get("files") is None and marker.get("earlier") is None:
        names = set(attempt_names(run.files))
        return lambda rel, path: rel in names
    return proof.by_digest(marker.get("files"), marker.get("earlier"))


def _is_our_log(path: Path) -> bool:
    try:
        with inputs.open_file(path, "log", limit=None) as fh:
            head = fh.read(len(LOG_HEADER))
    except (InputError, OSError):
        return False
    return head.startswith(LOG_HEADER.encode())


def in_the_way(runs: Sequence[ModelLaunch]) -> list[Path]:
    """The files at names the runs would write (their trace set, log and marker) that nsys-cc cannot prove it wrote
    (module docstring): a profile refuses them before its first run, nothing changed. A link there is never in the
    way (it is replaced, its target untouched)."""
    found = []
    for run in runs:
        f = run.files
        accept = _accept(run)
        for path in dict.fromkeys((f.done, f.log, *f.trace_set)):
            try:
                mode = os.lstat(path).st_mode
            except FileNotFoundError:
                continue
            if stat.S_ISLNK(mode):
                continue
            if path == f.log:
                mine = _is_our_log(path)
            else:
                mine = accept is not None and (path == f.done or accept(path.name, path))
            if not (stat.S_ISREG(mode) and mine):
                found.append(path)
    return found


def refuse_in_the_way(runs: Sequence[ModelLaunch]) -> None:
    """InputError naming the files `in_the_way` finds (nothing is changed)."""
    found = in_the_way(runs)
    if found:
        names = proof.shown([str(p) for p in found])
        raise InputError(f"{names} {'is' if len(found) == 1 else 'are'} in the way: nsys-cc did not write "
                         f"{'it' if len(found) == 1 else 'them'} (or {'it was' if len(found) == 1 else 'they were'} "
                         "changed since), and a profile there would replace "
                         f"{'it' if len(found) == 1 else 'them'}; move {'it' if len(found) == 1 else 'them'} away or "
                         "choose another out_dir; nothing was changed", param="out_dir")


def commit(run: ModelLaunch, attempt: ModelFiles, marker: dict) -> None:
    """Move a completed attempt's trace set over the earlier one, then write the marker with the sha256 of every file
    of the set (what proves them later). First a marker that is not complete (`"commands": ""`, so a process killed
    in between leaves the model profiled again, never a mix called complete) and that records the earlier files'
    sha256 beside the new ones, so that every file at every name stays proven; Ctrl-C waits for the renames
    (`signals_deferred`)."""
    final = run.files
    folder = Folder(final.out_dir)
    pairs = list(zip(attempt.trace_set, final.trace_set))
    new = {dst.name: proof.sha256(src) for src, dst in pairs if src.is_file()}
    earlier = {}
    for path in final.trace_set:
        if path.is_file() and not path.is_symlink():
            earlier[path.name] = proof.sha256(path)
    with signals_deferred():
        folder.write_text(final.done, done_json.text(done_json.record("", files=new, earlier=earlier)))
        for src, dst in pairs:
            if src.is_file():
                folder.replace(src, dst)
        kept = {name: earlier[name] for name in earlier if name not in new}  # an earlier file no attempt replaced
        folder.write_text(final.done, done_json.text({**marker, "files": {**kept, **new}}))
