"""Kernels per forward range: where does a model's GPU time go, kernel by kernel (`nsys_cc.kernels`,
`nsys-cc kernels`), and the reading of a trace's forward ranges that `compare.kernel_diff` shares.

The ranges are read as `cost_coefficient` reads a model's forwards (`coefficient.model.model_of`): the ranges named
`range_name` (the default `model_executable()`, or vLLM's own `gpu_model_runner: forward` when a trace has only that,
with a note), warm-up dropped (the trace's `nsys_cc:warmup` marks, or `skip_ranges`), ranges never closed dropped,
each kept one given its phase; on several tensor-parallel ranks a "range" is one forward (a range per rank, their GPU
ops added). A kernel belongs to a range when the CUDA call that launched it lies inside the range on its thread
(nsys's projection rule, `projection`); the table has one row per GPU-op name (`kernel_tables.KERNEL_COLUMNS`) over
the kept ranges of one phase — by default the phase c is judged on (decode when it was told apart, else all;
`metrics.decision_phase`). A CUDA graph recorded whole (`--cuda-graph-trace=graph`) is one '[CUDA graph N]' row: its
kernels are not in the trace (a note says so, and kernel metrics are n/a, not 0, elsewhere).

The table is a DataFrame of the caller's; `.attrs` holds what it is about: the trace, the range name read, the phase,
the number of kept ranges and the notes (what was dropped, how phases were told apart, what the trace lacks). The
tables themselves (categories, per-range sums, diffs) are `kernel_tables`; `compare` imports from here, never the
other way.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Sequence
from dataclasses import dataclass

import pandas as pd

from ...arguments import path_of
from ...errors import InputError, NsysCCWarning
from ...trace import open_trace
from ...trace.nvtx import matches
from ...trace.source import Trace
from ..coefficient.arguments import check_range_arguments, model_names
from ..coefficient.model import model_of
from ..coefficient.result import ModelForwards
from ..forwards import kernel_tables as kernel_mod
from ..forwards.ranges import forward_range, marked_ranges, not_found
from ..metrics import ALL, PHASES, decision_phase

TraceLike = str | os.PathLike | Trace


@dataclass(frozen=True)
class Side:
    """One set of ranges read: the model made of them, the range read, and the notes about it."""

    model: ModelForwards
    notes: tuple[str, ...]


def read_sides(trace_like: TraceLike, param: str, wants: Sequence[tuple[str, str | None, str]], skip_ranges: int | None,
            output_len: int | None) -> list[Side]:
    """Read the ranges `wants` ((label, range name, the parameter naming it), one per set) of one trace, given as a
    path (opened and closed here) or as an open `Trace` (left open)."""
    if isinstance(trace_like, Trace):
        return read_side(trace_like, trace_like.path, wants, skip_ranges, output_len)
    path = path_of(trace_like, param)
    with open_trace(path) as trace:
        return read_side(trace, path, wants, skip_ranges, output_len)


def read_side(trace: Trace, path: str, wants: Sequence[tuple[str, str | None, str]], skip_ranges: int | None,
          output_len: int | None) -> list[Side]:
    ranges = marked_ranges(trace, *dict.fromkeys(asked for _, asked, _ in wants))
    out = []
    for label, asked, param in wants:
        range_name, note = forward_range(ranges, asked, label=label)
        if not matches(ranges, (range_name,)).any():
            raise not_found(trace, trace.nvtx_ranges(nesting=False), range_name, path=path,
                            hint=f" (choose one with {param})", param=param)
        model = model_of(trace, ranges, path=path, name=label, role="model", range_name=range_name,
                         skip_ranges=skip_ranges, output_len=output_len)
        rule = model.phase_rule
        confidence = "" if rule.confidence == "exact" else f" (confidence: {rule.confidence})"
        notes = [note, f"{label}: {model.warmup_note}", f"{label}: phases by {rule.rule}: {rule.detail}{confidence}",
                 f"{label}: {model.gpu_note}" if model.gpu_note else None]
        out.append(Side(model, tuple(n for n in notes if n)))
    return out


def choose_phase(phase: str | None, sides: Sequence[Side], param: str = "phase") -> str:
    """The phase to compare: `phase` when every side has kept ranges of it; by default the phase c is judged on among
    the phases every side has (decode, else all). `param`: the parameter that gave `phase` (named in errors)."""
    common = [p for p in PHASES if all(p in s.model.phases for s in sides)]
    if phase is None:
        return decision_phase(common) or ALL
    if phase not in PHASES:
        raise InputError(f"{param} must be one of {', '.join(PHASES)}, not {phase!r}", param=param)
    for s in sides:
        if phase not in s.model.phases:
            raise InputError(f"{s.model.path}: none of the kept {s.model.range_name!r} ranges is a {phase!r} forward "
                             f"(its phases: {', '.join(s.model.phases)}); choose one of them with {param}", param=param)
    return phase


def said(table: pd.DataFrame, notes: Sequence[str]) -> pd.DataFrame:
    """`table` with `notes` added to its `.attrs` notes, each also raised as an NsysCCWarning: what the caller did
    not choose and may not expect (a phase chosen by inference, an empty table) must not hide in `.attrs`."""
    for note in notes:
        warnings.warn(note, NsysCCWarning, stacklevel=3)
    table.attrs["notes"] = (*table.attrs.get("notes", ()), *notes)
    return table


def default_phase_notes(phase: str | None, chosen: str, sides: Sequence[Side]) -> list[str]:
    """Why the default phase may surprise: the phases were told apart by inference (not from the trace's payloads
    or output_len), or a side's own default (what `kernels` of it alone compares) is another phase."""
    if phase is not None:
        return []
    notes = []
    for s in sides:
        m = s.model
        own = decision_phase(m.phases) or ALL
        if own != chosen:
            notes.append(f"{m.name}: compared on phase {chosen!r} ({m.phase_count(chosen)} ranges), the phase "
                         f"both sides have; on its own its phase would be {own!r} ({m.phase_count(own)} ranges): "
                         "pass phase to choose")
        elif chosen != ALL and m.phase_rule.confidence != "exact":
            how = "inference" if m.phase_rule.rule == "inferred" else f"the {m.phase_rule.rule} rule"
            notes.append(f"{m.name}: phase {chosen!r} ({m.phase_count(chosen)} of {m.phase_count(ALL)} kept ranges) "
                         f"was told apart by {how} ({m.phase_rule.detail}): pass phase='all' for every range, or "
                         "output_len to state the phases")
    return notes


def empty_notes(table: pd.DataFrame, sides: Sequence[Side]) -> list[str]:
    """Why a table of GPU ops is empty (each side's GPU note, or that its ranges launched nothing)."""
    if len(table):
        return []
    why = "; ".join(f"{s.model.name}: {s.model.gpu_note or 'its ranges launched no GPU operation'}" for s in sides)
    return [f"no GPU operation in these ranges, so nothing to list ({why})"]


def kernels(trace: TraceLike, *, range_name: str | None = None, phase: str | None = None,
            skip_ranges: int | None = None, output_len: int | None = None) -> pd.DataFrame:
    """The GPU operations launched inside the kept forward ranges of one phase of a trace, one row per name.

    Args:
        trace: a `.sqlite` or `.nsys-rep` path, or a `Trace` already open (`open_trace`; left open).
        range_name: the NVTX range around each forward (as `cost_coefficient`'s; vLLM's own forward scope is used,
            with a note, when the trace has only that; None: the default).
        phase: all | prefill | decode | verify; default: the phase c is judged on (decode when told apart, else all).
        skip_ranges: as for `cost_coefficient` (warm-up).
        output_len: as for `cost_coefficient` (telling prefill from decode).
    Returns:
        A DataFrame with `kernel_tables.KERNEL_COLUMNS` — kernel, kind (kernel | memcpy | memset | graph), category,
        count, count_per_range, ms_per_range, mean_ms, share — most time per range first; `.attrs`: trace,
        range_name, phase, ranges (kept ranges of that phase), notes. Empty for a trace without GPU work (the notes
        say why).
    """
    check_range_arguments(skip_ranges, output_len)
    label = model_names([trace_path(trace, "trace")], None)[0]
    (side,) = read_sides(trace, "trace", [(label, range_name_of(range_name, "range_name"), "range_name")], skip_ranges,
                      output_len)
    chosen = choose_phase(phase, [side])
    table = kernel_mod.of_model(side.model, chosen)
    table.attrs = {"trace": side.model.path, "range_name": side.model.range_name, "phase": chosen,
                   "ranges": side.model.phase_count(chosen), "notes": side.notes}
    return said(table, [*default_phase_notes(phase, chosen, [side]), *empty_notes(table, [side])])


def trace_path(trace_like: TraceLike, param: str) -> str:
    return trace_like.path if isinstance(trace_like, Trace) else path_of(trace_like, param)


def range_name_of(value, param: str) -> str | None:
    """`value` as a forward range name (None: the default, settled per trace by `forward_range`)."""
    if value is None:
        return None
    if not isinstance(value, str) or not value:
        raise InputError(f"{param} must be one NVTX range name (a non-empty string), not {value!r}", param=param)
    return value
