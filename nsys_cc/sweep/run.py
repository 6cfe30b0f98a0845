"""A whole sweep, and the analysis of many trace sets — on this machine, or on a Dask cluster (`cluster`).

Locally, cells run one after the other (one machine, one accelerator: profiles must not share it), and trace sets
are analysed in a process pool (`jobs` workers; each hands back only its rows of the table, so memory stays that
of a few traces, not of all of them). With `scheduler`, both go to a Dask distributed cluster instead.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
import signal
import threading
import uuid
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field
from multiprocessing import get_context
from pathlib import Path

import pandas as pd

from .. import progress
from ..analysis.coefficient.arguments import check_seed
from ..errors import InputError
from ..files.folder import check_out_dir
from . import table as table_mod
from .cell import CellOutcome, announce, kept_outcome, read_outcome, run_cell
from .grid import Cell, CellSpec, SweepSpec
from .manifest import MANIFEST_NAME, TraceSet, write_manifest
from .table import AnalysisResult, analyze_task


@dataclass
class SweepResult:
    """What a sweep did: every cell's outcome (grid order), the tidy table, notes, and the files written."""

    out_dir: Path
    cells: list[CellOutcome]
    table: pd.DataFrame
    notes: list[str] = field(default_factory=list)
    files: dict[str, Path] = field(default_factory=dict)

    @property
    def failed(self) -> list[CellOutcome]:
        return [c for c in self.cells if not c.complete]


def _run_here(pending: list[tuple[int, CellSpec]], total: int, outcomes: dict[str, CellOutcome]) -> None:
    for i, spec in pending:
        where = f"[cell {i}/{total}] {spec.name}"
        try:
            outcomes[spec.name] = run_cell(spec, starting=functools.partial(progress.say, f"{where}: profiling …"))
        except KeyboardInterrupt:
            outcomes[spec.name] = read_outcome(spec) or CellOutcome(spec.name, "interrupted")
            raise
        announce(i, total, outcomes[spec.name])


def check_cells(spec: SweepSpec, cells: Sequence[Cell]) -> None:
    """Refuse what no cell could profile, before any runs: speculation with the target on several ranks
    (`plan.check_speculate_ranks`), and runs' arguments a cell cannot take (`workflows.profile.choose`: `repeat`,
    `precision`, `max_repeat`, `replicas` out of range, or given to a cell in separate processes)."""
    from ..launch.plan import check_speculate_ranks
    from ..workflows.profile import check_profiler

    check_profiler(spec.profiler, trace=spec.trace, nsys_args=spec.nsys_args)
    for tp in sorted({c.target_tp for c in cells if c.target_tp and c.target_tp > 1})[:1]:
        check_speculate_ranks(bool(spec.speculate), tp, "target_tps", "sweep")
    from ..launch.models import resolve
    from ..launch.plan import check_context

    models = []  # each model whose context can be known (a name no model has is each cell's own failure, said there)
    for name in (spec.target, *spec.drafts):
        with contextlib.suppress(InputError):
            models.append(resolve(name))
    for c in cells:
        spec.cell(c).interleaves()
        check_context(models, spec.cell(c).options)  # a cell's input length beyond the models' context


def sweep(spec: SweepSpec, cells: Sequence[Cell], *, scheduler: str | None = None) -> SweepResult:
    """Profile every cell (`run_cell`; kept when an earlier run completed it), then write the sweep's table, plots,
    cells.json and manifest.json into `spec.out_dir` (also after Ctrl-C, for the cells completed).

    Args:
        spec: the models and `profile` options of every cell. cells: the grid (`grid.cells`).
        scheduler: address of a Dask scheduler: each cell runs there as a task that asks for the worker resource
            GPU=1; `spec.out_dir` must then be a path the workers share. None: cells run here, one after another.
    """
    check_cells(spec, cells)
    check_seed(spec.seed)
    out = check_out_dir(spec.out_dir, "the sweep")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError(f"cannot create the output directory {out}: {exc.strerror}") from None
    names = [c.name for c in cells]
    if len(set(names)) != len(names):
        raise InputError("cells given twice: " + ", ".join(sorted({n for n in names if names.count(n) > 1})))
    spec = dataclasses.replace(spec, run_id=uuid.uuid4().hex)
    specs = [spec.cell(c) for c in cells]
    outcomes: dict[str, CellOutcome] = {}
    pending = []
    for i, s in enumerate(specs, 1):  # kept cells need no worker (`run_cell` checks again, under the cell's lock)
        kept = None if spec.force else kept_outcome(s)
        if kept is None:
            pending.append((i, s))
        else:
            outcomes[s.name] = kept
            announce(i, len(specs), kept)
    try:
        if scheduler and pending:
            from .cluster import profile_cells

            profile_cells(scheduler, [s for _, s in pending], len(specs), outcomes)
        else:
            _run_here(pending, len(specs), outcomes)
    except KeyboardInterrupt:
        finished = finish(spec, specs, outcomes)
        progress.say(f"interrupted: table of the {len(finished.table)} rows completed so far: "
                     f"{finished.files.get('csv')}")
        raise
    return finish(spec, specs, outcomes)


def sweep_notes(cells: Sequence[CellOutcome], out_dir: Path, *, speculate: Sequence[int] = (),
                gamma_rows: bool = False) -> list[str]:
    """Sentences on what the table lacks and why: cells not complete, cells that needed more than one attempt,
    γ values profiled without rows in the table."""
    notes = []
    for c in cells:
        if not c.complete:
            what = "its rows for the models that completed are in the table" if c.status == "partial" else "no rows"
            notes.append(f"cell {c.name}: {c.status.upper()}: {c.reason or 'not run'} ({what}; files: "
                         f"{out_dir / c.name}; a rerun retries it)")
        elif c.attempts > 1:
            notes.append(f"cell {c.name}: complete on attempt {c.attempts} (an earlier attempt was lost with its "
                         "worker, failed or was interrupted; what it finished was kept)")
    if speculate and not gamma_rows:
        gammas = ", ".join(map(str, speculate))
        notes.append(f"γ = {gammas}: no rows with a gamma: no speculative run completed (see each cell's status.json)")
    return notes


def finish(spec: SweepSpec, specs: list[CellSpec], outcomes: dict[str, CellOutcome]) -> SweepResult:
    """Assemble the table from the cells' outcomes (grid order) and write the sweep's files."""
    from ..report.sweep_files import write_sweep

    cells = [outcomes.get(s.name) or CellOutcome(s.name, "not run") for s in specs]
    tables = [c.table for c in cells if not c.table.empty]
    table = table_mod.normalise(pd.concat(tables, ignore_index=True)) if tables else table_mod.empty()
    out = Path(spec.out_dir)
    notes = sweep_notes(cells, out, speculate=spec.speculate, gamma_rows=bool(table["gamma"].notna().any()))
    files = write_sweep(table, out, cells=[c.to_dict() for c in cells], notes=notes)
    sets = [c.trace_set for c in cells if c.trace_set is not None]
    if sets:
        files["manifest"] = write_manifest(sets, out / MANIFEST_NAME)
    return SweepResult(out, cells, table, notes, files)


def _collect(sets: Sequence[TraceSet], results: dict[str, tuple[pd.DataFrame | None, str]]) -> AnalysisResult:
    tables = [results[s.name][0] for s in sets if results[s.name][0] is not None]
    failures = [(s.name, results[s.name][1]) for s in sets if results[s.name][0] is None]
    table = table_mod.normalise(pd.concat(tables, ignore_index=True)) if tables else table_mod.empty()
    return AnalysisResult(table, failures)


def analyze_many(sets: Sequence[TraceSet], *, seed: int = 0, jobs: int | None = None,
                 scheduler: str | None = None) -> AnalysisResult:
    """The tidy table of many trace sets, analysed in parallel.

    Args:
        sets: trace sets (`manifest.trace_sets`). seed: seed of the bootstrap intervals (the same for every set).
        jobs: local worker processes (default: one per CPU, at most one per set; 1 analyses here, in turn).
        scheduler: address of a Dask scheduler to analyse on instead (the traces must be at the same paths there).
    """
    if not sets:
        raise InputError("no trace sets to analyse")
    names = [s.name for s in sets]
    if len(set(names)) != len(names):
        raise InputError("trace set names must be distinct: " + ", ".join(sorted({n for n in names
                                                                                   if names.count(n) > 1})))
    if jobs is not None and jobs < 1:
        raise InputError(f"jobs must be ≥ 1, not {jobs}", param="jobs")
    check_seed(seed)
    if scheduler:
        from .cluster import analyze_sets

        return analyze_sets(scheduler, sets, seed)
    results: dict[str, tuple[pd.DataFrame | None, str]] = {}
    jobs = min(jobs or os.cpu_count() or 1, len(sets))

    def done(i: int, name: str) -> None:
        table, reason = results[name]
        state = f"{len(table)} rows" if table is not None else f"FAILED: {reason}"
        progress.say(f"[set {i}/{len(sets)}] {name}: {state}")

    if jobs == 1:
        for i, s in enumerate(sets, 1):
            results[s.name] = analyze_task(s, seed)
            done(i, s.name)
        return _collect(sets, results)
    # spawn: the readers use threads, which fork does not copy safely; a fresh process per worker, reused.
    pool = ProcessPoolExecutor(max_workers=jobs, mp_context=get_context("spawn"), initializer=_leave_ctrl_c_to_parent)
    try:
        with _workers_start_deaf_to_ctrl_c():
            futures = {pool.submit(analyze_task, s, seed): s.name for s in sets}
        for i, fut in enumerate(as_completed(futures), 1):
            results[futures[fut]] = fut.result()
            done(i, futures[fut])
    except BaseException:  # Ctrl-C (or a bug): the workers stop now, without a word each
        for proc in list((getattr(pool, "_processes", None) or {}).values()):
            with contextlib.suppress(OSError):
                proc.terminate()
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    pool.shutdown()
    return _collect(sets, results)


@contextlib.contextmanager
def _workers_start_deaf_to_ctrl_c():
    """SIGINT ignored while the pool starts its workers (they start on `submit`): a process started so keeps ignoring
    it from its first instruction (Python installs its KeyboardInterrupt handler only over the default), so a Ctrl-C
    while a worker is still importing prints nothing there either. The parent's handler is back right after."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def _leave_ctrl_c_to_parent() -> None:
    """A worker ignores SIGINT: Ctrl-C in a terminal reaches every process of the group, and the parent alone
    answers it (one line, then it stops the workers) instead of each worker printing a traceback."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)

