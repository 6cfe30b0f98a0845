"""Attempt folders, for both ways of `profile` (an interleaved run's `run-<k>.attempt.<id>/`, one model's
`.nsys-cc-attempts/<label>.<id>/`): where an attempt writes until it completed, made fresh by each attempt, and what
the next call may remove of one a killed call left.

- `make(parent, name, names)`: the folder `parent/name`, made now (a leftover of that name is cleaned first, and
  refused when it cannot be: `clean`), marked (`MARK`) with its owner — this process's id and start time — and the
  names the attempt writes there (its trace, log, records; `temporaries` of them too). `fresh(stem)` gives a name no
  earlier call used, so a rerun never writes into a folder that an orphan of a killed call (its benchmark, vLLM) may
  still write into.
- `clean(folder, legacy)`: a leftover attempt folder: left alone while its owner runs; else each file its mark names
  (or, for an older folder without a mark, `legacy` accepts) is removed, and the folder when nothing else is left. A
  file nsys-cc did not write there (a user's `thesis.tex`) stays, and so does the folder: a note says so.
"""

from __future__ import annotations

import json
import os
import secrets
from collections.abc import Callable, Iterable
from pathlib import Path

from .. import inputs
from ..errors import InputError
from ..files import proof
from ..files.folder import Folder

MARK = ".nsys_cc_attempt.json"
MARK_FORMAT = "nsys_cc.attempt"
MARK_SHAPE = {"format": str, "pid": int, "start": int, "names": inputs.ListOf(str)}


def fresh(stem: str) -> str:
    """A folder name for a new attempt: `stem.<pid>-<random>`, never one an earlier call made."""
    return f"{stem}.{os.getpid()}-{secrets.token_hex(3)}"


def process_start(pid: int) -> int | None:
    """When process `pid` started (clock ticks since boot, /proc/<pid>/stat field 22); None when there is no such
    process (or it is a zombie). A pid and its start time name one process, even after the pid is reused."""
    try:
        text = inputs.read_text(f"/proc/{pid}/stat", "process record", errors="replace")
    except (InputError, OSError):
        return None
    fields = text.rsplit(")", 1)[-1].split()
    if len(fields) < 20 or fields[0] in ("Z", "X"):
        return None
    try:
        return int(fields[19])
    except ValueError:
        return None


def temporaries(name: str) -> Callable[[str], bool]:
    """Whether a file name is a hidden temporary of `name` that a writer of it leaves when killed (`files.atomic`'s
    `.<name>.XXXX.tmp`, the torch profiler's `.<name>.raw.json` and `.<name>.tmp`)."""
    prefix = f".{name[:80]}."
    return lambda other: other.startswith(prefix)


def _accepting(names: Iterable[str]) -> Callable[[str, Path], bool]:
    known = set(names) | {MARK}
    temps = [temporaries(n) for n in known]
    return lambda rel, path: rel in known or ("/" not in rel and any(t(rel) for t in temps))


def make(parent: Path, name: str, names: Iterable[str]) -> Path:
    """`parent/name`, a new attempt folder marked with this process and `names` (module docstring). A leftover of
    that name (a link included) is cleaned first (`clean`); InputError when what it holds is not nsys-cc's, or its
    owner still runs — nothing is reused."""
    folder = Folder(parent)
    where = parent / name
    if os.path.lexists(where):
        if where.is_symlink() or not where.is_dir():
            folder.remove(name)  # a link is removed itself, never followed
        else:
            why = clean(where)
            if why:
                raise InputError(f"cannot use {where} for this attempt: {why}")
    path = folder.mkdir(name)
    record = {"format": MARK_FORMAT, "pid": os.getpid(), "start": process_start(os.getpid()) or 0,
              "names": sorted(set(names))}
    Folder(path).write_text(MARK, json.dumps(record) + "\n")
    return path


def _mark(folder: Path) -> dict | None:
    doc = inputs.load_state(folder / MARK, "attempt record", shape=MARK_SHAPE)
    return doc if doc is not None and doc.get("format") == MARK_FORMAT else None


def clean(folder: Path, legacy: Callable[[str, Path], bool] = lambda rel, path: False) -> str:
    """Clean a leftover attempt folder (module docstring); "" when it is gone, else why it stays (for a note)."""
    mark = _mark(folder)
    if mark is not None:
        if mark["pid"] != os.getpid() and process_start(mark["pid"]) == mark["start"]:
            return f"its attempt's process {mark['pid']} is still running (it may still write there)"
        accept = _accepting(mark["names"])
    else:
        accept = _accepting(())  # an older folder (no mark) or a stray one: what `legacy` names, and no mark
        older = accept

        def accept(rel: str, path: Path) -> bool:
            return older(rel, path) or legacy(rel, path)
    left = proof.remove_proven(folder, accept)
    if not left:
        return ""
    return f"it holds files nsys-cc did not write ({proof.shown(left)}): left as it is"


def clean_all(parent: Path, pattern: Callable[[str], bool], legacy: Callable[[str, Path], bool]) -> list[str]:
    """`clean` every folder in `parent` whose name `pattern` accepts (a link of such a name is removed itself);
    returns a note for each that stays."""
    notes: list[str] = []
    try:
        names = sorted(os.listdir(parent))
    except FileNotFoundError:
        return notes
    for name in names:
        if not pattern(name):
            continue
        path = parent / name
        if path.is_symlink() or not path.is_dir():
            if path.is_symlink():
                Folder(parent).remove(name)
            continue
        why = clean(path, legacy)
        if why:
            notes.append(f"{path}: {why}")
    return notes
