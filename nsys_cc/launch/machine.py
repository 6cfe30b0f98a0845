"""The machine around an interleaved run: its load, CPUs and GPU clocks before and after each run (recorded in
`run-<k>/done.json`), the report's `machine` table of them, and the note on runs made on a busy machine."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Sequence
from typing import Protocol

import pandas as pd


class Run(Protocol):
    """What the machine notes read of an interleaved run (`interleaved_run.Run`; a protocol, so that this module
    imports nothing of the engines')."""

    index: int
    machine: dict

MACHINE_COLUMNS = ["run", "when", "load_1m", "load_5m", "load_15m", "cpus", "gpu_clocks"]


def machine_state(gpu: bool) -> dict:
    """Load average, CPU count and (on a GPU host) the GPU clocks now."""
    load = os.getloadavg()
    state: dict = {"when": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "load_1m": round(load[0], 2),
                   "load_5m": round(load[1], 2), "load_15m": round(load[2], 2), "cpus": os.cpu_count() or 0}
    try:
        state["cpus_usable"] = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        pass
    if gpu:
        state["gpu_clocks"] = gpu_clocks()
    return state


def gpu_clocks() -> str | None:
    """Each GPU's SM and memory clocks (MHz), their maximum, temperature and utilisation, from `nvidia-smi`; None
    when it does not answer."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    query = "index,clocks.sm,clocks.max.sm,clocks.mem,temperature.gpu,utilization.gpu"
    try:
        out = subprocess.run([smi, f"--query-gpu={query}", "--format=csv,noheader,nounits"], capture_output=True,
                             text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if out.returncode != 0:
        return None
    parts = []
    for line in out.stdout.strip().splitlines():
        f = [x.strip() for x in line.split(",")]
        if len(f) == 6:
            parts.append(f"GPU {f[0]}: SM {f[1]}/{f[2]} MHz, memory {f[3]} MHz, {f[4]} °C, {f[5]} % busy")
    return "; ".join(parts) or None


def busy(state: dict) -> bool:
    """Whether the machine was busier than it has CPUs (1-minute load above the CPU count)."""
    cpus = state.get("cpus") or 0
    return bool(cpus) and state.get("load_1m", 0) > cpus


def machine_table(runs: Sequence[Run]) -> pd.DataFrame:
    """One row per run and moment (before, after): the load averages, CPU count and GPU clocks."""
    rows = []
    for r in runs:
        for when in ("before", "after"):
            st = r.machine.get(when) or {}
            if st:
                rows.append({"run": r.index, "when": when, **{k: st.get(k) for k in MACHINE_COLUMNS[2:]}})
    return pd.DataFrame(rows, columns=MACHINE_COLUMNS)


def machine_notes(runs: Sequence[Run]) -> list[str]:
    """One note for the runs made on a busy machine (load above the CPU count before or after), with their loads."""
    busy_runs, loads, cpus = [], [], 0
    for r in runs:
        states = [s for s in (r.machine.get("before"), r.machine.get("after")) if s]
        if any(busy(s) for s in states):
            busy_runs.append(r.index)
            loads += [s["load_1m"] for s in states]
            cpus = states[0]["cpus"]
    if not busy_runs:
        return []
    which = f"run {busy_runs[0]}" if len(busy_runs) == 1 else f"runs {', '.join(map(str, busy_runs))}"
    span = f"{min(loads):.1f}" if min(loads) == max(loads) else f"{min(loads):.1f}–{max(loads):.1f}"
    return [f"{which} of {len(runs)} ran on a busy machine: load average {span} on {cpus} CPUs (other work "
            "competed for the CPUs; the interval across runs includes its effect)"]
