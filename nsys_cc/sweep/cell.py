"""One cell of a sweep: a `profile` run in the cell's own sub-directory, its tidy table, and what a rerun keeps.

The cell is profiled as `nsys_cc.profile` profiles (`workflows.profile.profile`: interleaved runs by default, one
process per model with `separate` or where `profile` needs it), so its directory is a profile directory and its rows
are those of `nsys_cc.analyze(cell_dir)` (the same analysis, `workflows.profile.finish`, and its report).

Files in the cell directory, besides what `profile` writes there (run-<k>/ folders or one trace per model, logs,
status.json, the report):
- `cell.json`: the cell's outcome — status, reason, attempts, seconds, the parameters it ran with (its
  fingerprint) and its trace set (the profile directory the table came from; in sweeps made before cells were
  profiles of their own, the traces); written last;
- `cell.parquet`: the cell's rows of the sweep table;
- `attempts.json`: every start of the cell (host, process, time), kept across reruns;
- `.cell.lock`: held (flock) while an attempt runs, so a retry on the same host waits for a lost attempt to stop.

Status: "done" (every model profiled, the table complete), "resumed" (done by an earlier run with the same
parameters, kept as it was), "partial" (the target and some drafts done: their rows are in the table; a rerun
retries the rest), "failed" (no table), "interrupted" (Ctrl-C, or the worker running it was lost).

Run as `python -m nsys_cc.sweep.cell SPEC.json --parent PID` (what a Dask worker does), the cell stops when its
parent dies: the kernel sends SIGTERM (PR_SET_PDEATHSIG), which stops the profiled processes as Ctrl-C does, so a
cell retried elsewhere after a lost worker does not race with an orphaned nsys writing the same files.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import dataclasses
import fcntl
import io
import os
import signal
import socket
import stat
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from .. import inputs, progress
from ..errors import InputError, NsysCCError
from ..formats import attempts_json, cell_json
from . import table as table_mod
from .grid import CellSpec
from .manifest import TraceSet

TABLE_FILE = "cell.parquet"
LOCK_FILE = ".cell.lock"
COMPLETE = ("done", "resumed")


@dataclass
class CellOutcome:
    """What one cell did. `table` holds its rows of the sweep table (empty when it failed)."""

    name: str
    status: str
    reason: str = ""
    attempts: int = 0
    seconds: float = 0.0
    trace_set: TraceSet | None = None
    table: pd.DataFrame = field(default_factory=table_mod.empty, repr=False)

    @property
    def complete(self) -> bool:
        return self.status in COMPLETE

    def to_dict(self) -> dict:
        return {"cell": self.name, "status": self.status, "reason": self.reason, "attempts": self.attempts,
                "seconds": round(self.seconds, 1), "rows": len(self.table)}


@contextlib.contextmanager
def _locked(directory: Path) -> Iterator[None]:
    # no link followed, and a FIFO planted there is never waited on (O_NONBLOCK; refused as not a regular file)
    fd = os.open(directory / LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK, 0o644)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise NsysCCError(f"{directory / LOCK_FILE} is not a regular file: remove it")
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def _new_attempt(spec: CellSpec) -> tuple[int, bool]:
    """Record a start of the cell; (attempts so far, whether this sweep invocation started it before)."""
    doc = attempts_json.load(spec.dir, on_unreadable=_unreadable)
    starts = doc["starts"] if doc else []
    again = any(s.get("run_id") == spec.sweep.run_id for s in starts) if spec.sweep.run_id else False
    starts.append({"host": socket.gethostname(), "pid": os.getpid(), "run_id": spec.sweep.run_id,
                   "started": time.strftime("%Y-%m-%dT%H:%M:%S%z")})
    attempts_json.write(spec.dir, starts)
    return len(starts), again


def read_outcome(spec: CellSpec) -> CellOutcome | None:
    """The outcome an earlier attempt left in the cell directory (None when there is none)."""
    doc = cell_json.load(spec.dir, on_unreadable=_unreadable)
    if doc is None:
        return None
    rows = table_mod.empty()
    if (spec.dir / TABLE_FILE).is_file():
        try:
            data = inputs.read_bytes(spec.dir / TABLE_FILE, "cell's table", limit=None)
            rows = table_mod.normalise(pd.read_parquet(io.BytesIO(data)))
        except (InputError, ValueError, OSError) as exc:  # unreadable state: the cell is run again
            _unreadable(str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
            return None
    ts = doc.get("trace_set")
    try:
        trace_set = _trace_set_from(ts) if ts else None
    except (TypeError, KeyError, ValueError) as exc:  # a trace set of other fields than TraceSet's
        _unreadable(f"the cell's status file {spec.dir / cell_json.NAME} holds no trace set nsys-cc wrote ({exc})")
        return None
    return CellOutcome(doc["cell"], doc["status"], doc.get("reason") or "", doc.get("attempts") or 0,
                       doc.get("seconds") or 0.0, trace_set, rows)


def _unreadable(why: str) -> None:
    progress.say(f"{why}: unreadable state, the cell is run again")


def announce(index: int, total: int, outcome: CellOutcome) -> None:
    """One progress line for a finished cell."""
    where = f"[cell {index}/{total}] {outcome.name}"
    if outcome.status == "resumed":
        progress.say(f"{where}: already complete (kept; attempts {outcome.attempts})")
    elif outcome.complete:
        progress.say(f"{where}: done in {outcome.seconds:.1f} s (attempt {outcome.attempts})")
    else:
        progress.say(f"{where}: {outcome.status.upper()} after {outcome.seconds:.1f} s (attempt {outcome.attempts}): "
                     f"{outcome.reason}")


def _trace_set_from(doc: dict) -> TraceSet:
    """The trace set of a cell.json: the cell's profile directory, or (a cell of a sweep made before cells were
    profiles of their own, one process per model) its target's and drafts' traces."""
    if doc.get("profile") is not None:
        return TraceSet(**{"range_name": None, **doc})
    return TraceSet(**{**doc, "drafts": tuple(doc["drafts"]), "speculative": tuple(doc.get("speculative") or ()),
                       "names": tuple(doc["names"]) if doc.get("names") else None})


def kept_outcome(spec: CellSpec) -> CellOutcome | None:
    """The earlier outcome when it is complete and was made with the same parameters (then nothing is rerun)."""
    doc = cell_json.load(spec.dir)
    fingerprint = doc.get("parameters") if doc else None
    if fingerprint != spec.fingerprint():
        return None
    outcome = read_outcome(spec)
    if outcome is None or not outcome.complete or not (spec.dir / TABLE_FILE).is_file():
        return None
    outcome.status = "resumed"
    return outcome


def _write_outcome(spec: CellSpec, outcome: CellOutcome) -> None:
    outcome.table.to_parquet(spec.dir / TABLE_FILE, index=False)
    ts = outcome.trace_set
    doc = {**outcome.to_dict(), "parameters": spec.fingerprint(),
           "trace_set": None if ts is None else ts.to_dict() if ts.profile is not None else {
               **ts.to_dict(), "target": ts.target, "drafts": list(ts.drafts), "speculative": list(ts.speculative)}}
    cell_json.write(spec.dir, doc)


def _trace_set(spec: CellSpec, run) -> TraceSet | None:
    """The cell's trace set once `profile` analysed its directory: the directory itself (a profile directory, read
    as `nsys_cc.analyze(cell_dir)` reads it), with the cell's parameters."""
    if run.result is None:
        return None
    c = spec.cell
    return TraceSet(name=spec.name, profile=str(spec.dir), batch_size=c.batch_size, input_len=c.input_len,
                    target_tp=c.target_tp, output_len=spec.options.output_len, range_name=None)


def run_cell(spec: CellSpec, profile: Callable | None = None,
             starting: Callable[[], None] = lambda: None) -> CellOutcome:
    """Run one cell (or keep it, see `kept_outcome`) and return its outcome; never raises for the cell's own
    failures (they are its status and reason), re-raises Ctrl-C after recording it.

    `profile` is `workflows.profile.profile`, what `nsys_cc.profile` runs with the cell's request (`CellSpec.request`:
    interleaved runs unless the sweep asks for `separate` or the cell needs it, then the analysis
    `nsys_cc.analyze(cell_dir)` makes, and its report), unless given (the tests give a stand-in); `starting` is
    called when the cell is about to be profiled (not when it is kept).
    """
    if profile is None:
        from ..workflows import profile as workflow

        profile = workflow.profile
    spec.dir.mkdir(parents=True, exist_ok=True)
    with _locked(spec.dir):
        kept = None if spec.sweep.force else kept_outcome(spec)
        if kept is not None:
            return kept
        starting()
        attempts, again = _new_attempt(spec)
        if spec.sweep.force and again:
            spec = CellSpec(dataclasses.replace(spec.sweep, force=False), spec.cell)
        outcome = CellOutcome(spec.name, "failed", attempts=attempts)
        t0 = time.perf_counter()
        try:
            run = profile(spec.request())
            outcome.trace_set = _trace_set(spec, run)
            if run.result is None:
                outcome.reason = "; ".join(run.notes) or "no report"
            else:
                outcome.status = "partial" if run.failed else "done"
                outcome.reason = "; ".join(f"{r.role} {r.model.label}: {r.reason or r.status}" for r in run.failed)
                c = spec.cell
                outcome.table = table_mod.from_result(run.result, cell=spec.name, batch_size=c.batch_size,
                                                      input_len=c.input_len, target_tp=c.target_tp, attempts=attempts)
        except NsysCCError as exc:
            outcome.reason = str(exc)
        except KeyboardInterrupt:
            outcome.status, outcome.reason = "interrupted", "interrupted (Ctrl-C, or its worker was lost)"
            raise
        finally:
            outcome.seconds = time.perf_counter() - t0
            _write_outcome(spec, outcome)
    return outcome


_PR_SET_PDEATHSIG = 1


def _stop_with_parent(parent: int) -> None:
    """SIGTERM when the parent (the Dask worker) dies, turned into KeyboardInterrupt so the launcher stops nsys."""
    def interrupt(signum, frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupt)
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    if os.getppid() != parent:  # it died before the request took effect
        raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m nsys_cc.sweep.cell", description="Run one sweep cell.")
    parser.add_argument("spec", help="JSON file of the cell's CellSpec.to_dict()")
    parser.add_argument("--parent", type=int, default=None, help="stop when this process (the caller) dies")
    args = parser.parse_args(argv)
    try:
        if args.parent is not None:
            _stop_with_parent(args.parent)
        spec = CellSpec.from_dict(inputs.load_json(args.spec, "cell spec", shape={"sweep": dict, "cell": dict}))
        outcome = run_cell(spec)
    except KeyboardInterrupt:
        return 130
    progress.say(f"cell {outcome.name}: {outcome.status} (attempt {outcome.attempts}) {outcome.reason}".rstrip())
    return 0


if __name__ == "__main__":
    sys.exit(main())
