"""Sweep cells and trace-set analyses as tasks on a Dask distributed cluster (`--scheduler ADDRESS`).

- A cell is one task that asks for the worker resource `GPU=1`, so a worker started with `--resources GPU=1` (one
  per accelerator) runs one profile at a time. The task runs the cell in a child process
  (`python -m nsys_cc.sweep.cell`) that stops, and stops nsys and vLLM, when the worker dies. The cell writes its
  traces into the sweep directory, which must be a path every worker sees (shared storage); only the cell's rows
  of the table (and its small outcome) come back.
- A worker lost mid-task: the scheduler runs the task again on another worker (Dask's `allowed-failures`, 3 by
  default, then `KilledWorker`); the cell keeps what the lost attempt completed (`profile` resumes the runs, or with
  separate processes the models, that are complete) and counts the attempt (the table's `attempts`).
- An analysis is one task without resources; it returns only the set's rows (never traces or per-forward frames).

`distributed` is imported here only, when a scheduler is given: nothing else in nsys_cc needs Dask.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Sequence
from typing import TYPE_CHECKING

import pandas as pd

from .. import progress
from ..errors import InputError
from . import table as table_mod
from .cell import CellOutcome, announce, read_outcome
from .grid import CellSpec
from .manifest import TraceSet
from .table import AnalysisResult, analyze_task

if TYPE_CHECKING:
    from distributed import Client

# One profile per accelerator: workers declare `--resources GPU=1` (or GPU=N for N accelerators).
PROFILE_RESOURCES = {"GPU": 1}
CONNECT_TIMEOUT_S = 30


def connect(address: str) -> Client:
    """A client of the scheduler at `address`; one clear line when Dask is missing or the scheduler unreachable."""
    try:
        from distributed import Client
    except ImportError:
        raise InputError("scheduler (a Dask cluster's address) needs Dask's distributed package: "
                         "pip install 'nsys_cc[dask]'", param="scheduler") from None
    client = Client.__new__(Client)
    try:
        client.__init__(address, timeout=CONNECT_TIMEOUT_S, set_as_default=False)  # type: ignore[misc]
        return client
    except (OSError, TimeoutError) as exc:
        _forget(client)
        raise InputError(f"cannot reach the Dask scheduler at {address}: {exc}", param="scheduler") from None
    except Exception as exc:  # noqa: BLE001 — whatever answered is no Dask scheduler (an HTTP server's reply read
        # as a frame length asked for 3 EiB)
        _forget(client)
        why = " ".join(f"{type(exc).__name__}: {exc}".split())[:160]
        raise InputError(f"{address} is no Dask cluster: it did not answer as one ({why}); give a Dask cluster's "
                         "address (tcp://host:8786)", param="scheduler") from None


def _forget(client) -> None:
    """A client whose connection failed half way, closed without a word (its `__del__` printed a traceback at exit)."""
    import contextlib

    with contextlib.suppress(Exception):
        client.close()
    with contextlib.suppress(Exception):
        client._Client__loop = None  # `Client.__del__` then has nothing to close


def profile_cell_task(spec_doc: dict) -> CellOutcome:
    """The task of one cell (runs on a worker): the cell in a child process that dies with this worker."""
    spec = CellSpec.from_dict(spec_doc)
    spec.dir.mkdir(parents=True, exist_ok=True)
    spec_file = spec.dir / f".cell-spec-{uuid.uuid4().hex}.json"
    spec_file.write_text(json.dumps(spec_doc))
    try:
        rc = subprocess.run([sys.executable, "-m", "nsys_cc.sweep.cell", str(spec_file), "--parent", str(os.getpid())],
                            stdin=subprocess.DEVNULL).returncode
    finally:
        spec_file.unlink(missing_ok=True)
    outcome = read_outcome(spec) if rc == 0 else None
    if outcome is None:
        return CellOutcome(spec.name, "failed", f"the cell's process exited with code {rc} (see the worker's log)")
    return outcome


def _lost_attempts(client: Client, keys: list[str]) -> dict[str, int]:
    """How many times each task was running on a worker that died (the scheduler's `suspicious` count)."""
    def count(dask_scheduler, keys):
        return {k: getattr(dask_scheduler.tasks.get(k), "suspicious", 0) for k in keys}

    return client.run_on_scheduler(count, keys=keys)


def profile_cells(address: str, specs: Sequence[CellSpec], total: int, outcomes: dict[str, CellOutcome]) -> None:
    """Run every cell as a task on the cluster; fills `outcomes` as cells finish (so Ctrl-C keeps what finished).
    `total`: the cells of the whole sweep, for the progress lines (those kept before are already counted)."""
    with connect(address) as client:
        from distributed import as_completed

        futures = {client.submit(profile_cell_task, s.to_dict(), key=f"nsys-cc-cell-{s.name}-{s.sweep.run_id}",
                                 resources=PROFILE_RESOURCES, pure=False): s for s in specs}
        progress.say(f"{len(specs)} cells sent to the Dask scheduler at {address} (one GPU={PROFILE_RESOURCES['GPU']} "
                     f"worker resource each)")
        try:
            for i, fut in enumerate(as_completed(list(futures), loop=client.loop), total - len(specs) + 1):
                spec = futures[fut]
                try:
                    outcome = fut.result()
                except Exception as exc:  # KilledWorker, or a worker that cannot run nsys_cc at all
                    outcome = read_outcome(spec) or CellOutcome(spec.name, "failed")
                    outcome.status, outcome.reason = "failed", f"{type(exc).__name__}: {exc}"
                    outcome.table = table_mod.empty()
                outcomes[spec.name] = outcome
                announce(i, total, outcome)
        except KeyboardInterrupt:
            client.cancel(list(futures))
            raise


def analyze_sets(address: str, sets: Sequence[TraceSet], seed: int):
    """Analyse every set as a task on the cluster; the table in the order of `sets`, attempts from the scheduler."""
    run_id = uuid.uuid4().hex
    with connect(address) as client:
        from distributed import as_completed

        futures = {client.submit(analyze_task, s, seed, key=f"nsys-cc-analyze-{s.name}-{run_id}", pure=False): s
                   for s in sets}
        results: dict[str, tuple[pd.DataFrame | None, str]] = {}
        for i, fut in enumerate(as_completed(list(futures), loop=client.loop), 1):
            s = futures[fut]
            try:
                results[s.name] = fut.result()
            except Exception as exc:
                results[s.name] = None, f"{type(exc).__name__}: {exc}"
            table, reason = results[s.name]
            progress.say(f"[set {i}/{len(sets)}] {s.name}: " + (f"{len(table)} rows" if table is not None
                                                                   else f"FAILED: {reason}"))
        lost = _lost_attempts(client, [f.key for f in futures])
    tables, failures = [], []
    for fut, s in futures.items():
        table, reason = results[s.name]
        if table is None:
            failures.append((s.name, reason))
        else:
            tables.append(table.assign(attempts=1 + lost.get(fut.key, 0)))
    table = table_mod.normalise(pd.concat(tables, ignore_index=True)) if tables else table_mod.empty()
    return AnalysisResult(table, failures)
