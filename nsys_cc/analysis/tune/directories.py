"""Tune and sweep directories read into cells: one interleaved design whose engines are `<key>.<draft>.spec-g<γ>`
(`bs<B>.…`), each round of a tune (`round-<k>/`), or the cell directories of an older tune or a sweep, each named
after its cell key (`bs<B>…`, `bs<B>-in<L>…`: `keys.CellKey.from_name`, the whole key kept); per cell the medians
measured in place against the plain target of the same runs (`speculative.pooled`, as `analyze` reads a profile),
vLLM's per-position acceptance counters, and the benchmark's output length its records give (`records`)."""

from __future__ import annotations

import dataclasses
import math
import warnings

from ...errors import InputError
from ..profile_dir import outputs
from ..profile_dir.acceptance import AcceptanceStats
from . import records
from .keys import CellKey
from .model import Cell


def _counters(directory, label: str) -> tuple[AcceptanceStats | None, int]:
    """The spec-decode counters of engine `label` over the runs of `directory`, replays counted once, and how many
    runs were replays."""
    from pathlib import Path

    from ..profile_dir import acceptance as acceptance_mod
    from ..speculative.pooled import pool_stats, replayed_runs

    d = Path(directory)
    paths = sorted(d.glob(f"{outputs.RUN_GLOB}/{label}.metrics.json")) or sorted(d.glob(f"{label}.metrics.json"))
    if not paths:
        return None, 0
    stats = [acceptance_mod.load(p) for p in paths]
    return pool_stats(stats), replayed_runs(stats)


def _ci(row, col: str) -> tuple[float, float]:
    lo, hi = row.get(f"{col}_ci_low", math.nan), row.get(f"{col}_ci_high", math.nan)
    return (float(lo) if lo is not None else math.nan, float(hi) if hi is not None else math.nan)


def _num(row, col: str) -> float:
    x = row.get(col, math.nan)
    return float(x) if x is not None else math.nan




def _cell(row, key: CellKey, sub, label: str, source: str) -> Cell:
    """A cell from a row of the speculative table (`SpeculativeAnalysis.table`) at `key`; its counters and the
    benchmark's output length from `sub`, the profile directory, under the engine `label`."""
    acceptance, replayed = _counters(sub, label)
    return Cell(
        key=key, gamma=int(row["gamma"]), draft_forward_ms=float(row["draft_forward_ms"]),
        verify_ms=float(row["verify_ms"]), other_ms=float(row["other_ms"]),
        decode_step_ms=float(row["decode_step_ms"]), measured_speedup=float(row["measured_speedup"]),
        measured_ci=_ci(row, "measured_speedup"), draft_forward_ci=_ci(row, "draft_forward_ms"),
        verify_ci=_ci(row, "verify_ms"), other_ci=_ci(row, "other_ms"),
        decode_step_ci=_ci(row, "decode_step_ms"), tokens_per_step=float(row["tokens_per_step"]),
        acceptance=acceptance, replayed_runs=replayed, label=label, source=source,
        measured_counters_speedup=float(row["tokens_per_step_metrics"]) * float(row["decode_step_ms"])
        / float(row["step_ms"]), output_len=records.output_len(sub),
        draft_catchup_ms=_num(row, "draft_catchup_ms"), draft_catchup_ci=_ci(row, "draft_catchup_ms"),
        draft_catchup_tokens=_num(row, "draft_catchup_tokens"), draft_later_ms=_num(row, "draft_later_ms"),
        draft_later_ci=_ci(row, "draft_later_ms"), context=_num(row, "context"), runs=_runs(sub))


def _runs(sub) -> int:
    """The interleaved runs (`run-<k>/`) of a profile directory."""
    from pathlib import Path

    return sum(1 for p in Path(sub).glob(outputs.RUN_GLOB) if p.is_dir())


def design_labels(directory) -> dict[CellKey, tuple[str, list[str]]] | None:
    """A tune design's profile directory (every cell in the same runs, `launch.interleaved.design_engines`): cell
    key → (its plain target's label, its speculative engines' labels), of the engines with forwards in every
    completed run; None when `directory` is not one (no engine labelled `bs<B>.…`)."""
    from ..profile_dir.spec_labels import DESIGN_LABEL_RE, LABEL_RE, design_role

    if not outputs.is_profile_output(directory):
        return None
    out = outputs.read_output(directory)
    if not out.interleaved:
        return None
    by_key: dict[CellKey, tuple[str, list[str]]] = {}
    found = False
    for m in out.models:
        match = DESIGN_LABEL_RE.match(m.label)
        key = CellKey.from_name(m.label[:match.start("model") - 1]) if match else None
        if match is None or key is None:
            continue
        found = True
        if design_role(m.label) == "k0":  # speculation proposing nothing: its price (`k0.overhead`), not a cell
            continue
        if not m.done:
            continue
        target, spec = by_key.get(key, ("", []))
        if LABEL_RE.match(match.group("model")):
            spec = [*spec, m.label]
        else:
            target = m.label
        by_key[key] = (target, spec)
    return {k: v for k, v in sorted(by_key.items()) if v[0] and v[1]} if found else None


def _read_design(directory, labels: dict[CellKey, tuple[str, list[str]]], seed: int) -> list[Cell]:
    """The cells of a design directory: at each cell key its speculative engines against its plain target of the
    same runs (`coefficient.over_runs.cost_coefficient_runs` with those engines, as `analyze` reads a profile)."""
    import os

    from ..coefficient.over_runs import cost_coefficient_runs
    from ..profile_dir.spec_labels import DESIGN_LABEL_RE, design_role

    cells: list[Cell] = []
    for key, (target, spec) in labels.items():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            result = cost_coefficient_runs(os.fspath(directory), names=[target, *spec], seed=seed)
        table = getattr(result.speculative, "table", None)
        if table is None or table.empty:
            continue
        for _, row in table.iterrows():
            label = str(row["name"])
            cell = _cell(row, key, directory, label, f"{os.fspath(directory)}:{label}")
            cells.append(dataclasses.replace(cell, label=DESIGN_LABEL_RE.sub(r"\g<model>", label),
                                             schedule_run=design_role(label) == "schedule"))
    return cells


ROUND_PREFIX = records.ROUND_PREFIX  # a tune's rounds: round-1/, round-2/, … (`nsys_cc.workflows.tune`)


def rounds(directory) -> list:
    """The `round-<k>/` directories of a tune directory, in order of k (none when it is not a directory)."""
    import re
    from pathlib import Path

    root = Path(directory)
    found = [(int(m.group(1)), p) for p in root.iterdir()
             if p.is_dir() and (m := re.fullmatch(ROUND_PREFIX + r"(\d+)", p.name))] if root.is_dir() else []
    return [p for _, p in sorted(found)]


def _latest_design(directory):
    """(the last `round-<k>/` of a tune directory with a design's cells in it, its `design_labels`), or None."""
    return next(((p, labels) for p in reversed(rounds(directory)) if (labels := design_labels(p))), None)


def latest_round(directory):
    """The last `round-<k>/` of a tune directory with a design's cells in it (every cell of a round is measured in
    the same runs; a later round holds the earlier's cells and more), None without one."""
    found = _latest_design(directory)
    return found[0] if found else None


def read_cells(directory, *, seed: int = 0, schedule_runs: bool = False) -> list[Cell]:
    """Every speculative cell of a tune (or sweep) directory. A tune's: its last round (`latest_round`), or a design
    directory itself, every cell measured in the same interleaved runs (`design_labels`); an older tune's or a
    sweep's: each sub-directory named `bs<B>…` is a profile directory analysed as `nsys_cc.analyze` does, one cell
    per speculative engine in it. The engines that ran vLLM's whole schedule (`Cell.schedule_run`) only with
    `schedule_runs` (they are no fixed-γ cell)."""
    import os
    from pathlib import Path

    root = Path(directory)
    if not root.is_dir():
        raise InputError(f"{os.fspath(directory)} is not a directory")
    labels = design_labels(root)
    found = (root, labels) if labels else _latest_design(root)
    if found is not None:
        design, labels = found
        cells = [c for c in _read_design(design, labels, seed) if schedule_runs or not c.schedule_run]
        if not cells:
            raise InputError(f"{os.fspath(design)}: no speculative cell with forwards in its runs")
        return cells
    return _read_cell_dirs(root, seed, os.fspath(directory))


def _read_cell_dirs(root, seed: int, shown: str) -> list[Cell]:
    """The cells of an older tune's or a sweep's directory (`shown`: its path as given): each sub-directory named
    after a cell key (`bs<B>…`) a profile directory analysed as `nsys_cc.analyze` does, one cell per speculative
    engine in it; by batch size, then name."""
    import os

    from ..coefficient.source_kinds import analyze_source as analyze  # what nsys_cc.analyze does with a directory

    cells = []
    subs = sorted(((key, p) for p in root.iterdir() if p.is_dir() and (key := CellKey.from_name(p.name)) is not None),
                  key=lambda kp: (kp[0].batch_size, kp[1].name))
    if not subs:
        raise InputError(f"{shown} has no cell directory (round-<k>/ or bs<B>/, as `nsys-cc tune` "
                         "or `nsys-cc sweep` write them)")
    for key, sub in subs:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                result = analyze(os.fspath(sub), seed=seed)
        except InputError as exc:  # a cell not profiled yet, or broken: the others still count
            from ... import progress

            progress.say(f"tune: {sub.name} skipped: {exc}")
            continue
        spec = getattr(result, "speculative", None)
        if spec is None or spec.table.empty:
            continue
        for _, row in spec.table.iterrows():
            label = str(row["name"])
            cells.append(_cell(row, key, sub, label, os.fspath(sub)))
    if not cells:
        raise InputError(f"{shown}: no speculative run in its cell directories")
    return cells
