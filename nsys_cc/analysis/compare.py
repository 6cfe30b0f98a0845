"""Kernels per forward range, and two sets of forward ranges compared: where does the draft's GPU time go, and where
does it save time against the target (`nsys_cc.kernels`, `nsys_cc.kernel_diff`, `nsys-cc kernels`).

The ranges are read as `cost_coefficient` reads a model's forwards (`coefficient.model_of`): the ranges named
`range_name` (the default `model_executable()`, or vLLM's own `gpu_model_runner: forward` when a trace has only that,
with a note), warm-up dropped (the trace's `nsys_cc:warmup` marks, or `skip_ranges`), ranges never closed dropped,
each kept one given its phase; on several tensor-parallel ranks a "range" is one forward (a range per rank, their GPU
ops added). A kernel belongs to a range when the CUDA call that launched it lies inside the range on its thread
(nsys's projection rule, `projection`); the table has one row per GPU-op name (`kernels.KERNEL_COLUMNS`) over the
kept ranges of one phase — by default the phase c is judged on (decode when it was told apart, else all;
`metrics.decision_phase`). A CUDA graph recorded whole (`--cuda-graph-trace=graph`) is one '[CUDA graph N]' row: its
kernels are not in the trace (a note says so, and kernel metrics are n/a, not 0, elsewhere).

Both functions return a DataFrame of the caller's; `.attrs` holds what it is about: the trace(s), the range name(s)
read, the phase, the number of kept ranges and the notes (what was dropped, how phases were told apart, what the
trace lacks).
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Sequence
from dataclasses import dataclass

import pandas as pd

from ..arguments import file_identity, path_of
from ..contract import DEFAULT_RANGE
from ..errors import InputError, NsysCCWarning
from ..trace import open_trace
from ..trace.nvtx import matches
from ..trace.source import Trace
from . import kernels as kernel_mod
from .coefficient import check_range_arguments, model_names, model_of
from .metrics import ALL, PHASES, decision_phase
from .ranges import forward_range, marked_ranges, not_found
from .result import ModelForwards

TraceLike = str | os.PathLike | Trace


@dataclass(frozen=True)
class _Side:
    """One set of ranges read: the model made of them, the range read, and the notes about it."""

    model: ModelForwards
    notes: tuple[str, ...]


def _models(trace_like: TraceLike, param: str, wants: Sequence[tuple[str, str, str]], skip_ranges: int | None,
            output_len: int | None) -> list[_Side]:
    """Read the ranges `wants` ((label, range name, the parameter naming it), one per set) of one trace, given as a
    path (opened and closed here) or as an open `Trace` (left open)."""
    if isinstance(trace_like, Trace):
        return _read(trace_like, trace_like.path, wants, skip_ranges, output_len)
    path = path_of(trace_like, param)
    with open_trace(path) as trace:
        return _read(trace, path, wants, skip_ranges, output_len)


def _read(trace: Trace, path: str, wants: Sequence[tuple[str, str, str]], skip_ranges: int | None,
          output_len: int | None) -> list[_Side]:
    ranges = marked_ranges(trace, *dict.fromkeys(name for _, name, _ in wants))
    out = []
    for label, name, param in wants:
        name, note = forward_range(ranges, name, label=label)
        if not matches(ranges, (name,)).any():
            raise not_found(trace, trace.nvtx_ranges(nesting=False), name, path=path,
                            hint=f" (choose one with {param})", param=param)
        model = model_of(trace, ranges, path=path, name=label, role="model", range_name=name,
                         skip_ranges=skip_ranges, output_len=output_len)
        rule = model.phase_rule
        confidence = "" if rule.confidence == "exact" else f" (confidence: {rule.confidence})"
        notes = [note, f"{label}: {model.warmup_note}", f"{label}: phases by {rule.rule}: {rule.detail}{confidence}",
                 f"{label}: {model.gpu_note}" if model.gpu_note else None]
        out.append(_Side(model, tuple(n for n in notes if n)))
    return out


def _phase(phase: str | None, sides: Sequence[_Side]) -> str:
    """The phase to compare: `phase` when every side has kept ranges of it; by default the phase c is judged on among
    the phases every side has (decode, else all)."""
    common = [p for p in PHASES if all(p in s.model.phases for s in sides)]
    if phase is None:
        return decision_phase(common) or ALL
    if phase not in PHASES:
        raise InputError(f"phase must be one of {', '.join(PHASES)}, not {phase!r}", param="phase")
    for s in sides:
        if phase not in s.model.phases:
            raise InputError(f"{s.model.path}: none of the kept {s.model.range_name!r} ranges is a {phase!r} forward "
                             f"(its phases: {', '.join(s.model.phases)}); choose one of them with phase", param="phase")
    return phase


def _said(table: pd.DataFrame, notes: Sequence[str]) -> pd.DataFrame:
    """`table` with `notes` added to its `.attrs` notes, each also raised as an NsysCCWarning: what the caller did
    not choose and may not expect (a phase chosen by inference, an empty table) must not hide in `.attrs`."""
    for note in notes:
        warnings.warn(note, NsysCCWarning, stacklevel=3)
    table.attrs["notes"] = (*table.attrs.get("notes", ()), *notes)
    return table


def _default_phase_notes(phase: str | None, chosen: str, sides: Sequence[_Side]) -> list[str]:
    """Why the default phase may surprise: the phases were told apart by inference (not from the trace's payloads
    or output_len), or a side's own default (what `kernels` of it alone compares) is another phase."""
    if phase is not None:
        return []
    notes = []
    for s in sides:
        m = s.model
        own = decision_phase(m.phases) or ALL
        if own != chosen:
            notes.append(f"{m.name}: compared on phase {chosen!r} ({len(m.phase_rows(chosen))} ranges), the phase "
                         f"both sides have; on its own its phase would be {own!r} ({len(m.phase_rows(own))} ranges): "
                         "pass phase to choose")
        elif chosen != ALL and m.phase_rule.confidence != "exact":
            how = "inference" if m.phase_rule.rule == "inferred" else f"the {m.phase_rule.rule} rule"
            notes.append(f"{m.name}: phase {chosen!r} ({len(m.phase_rows(chosen))} of {len(m.kept)} kept ranges) was "
                         f"told apart by {how} ({m.phase_rule.detail}): pass phase='all' for every range, or "
                         "output_len to state the phases")
    return notes


def _empty_notes(table: pd.DataFrame, sides: Sequence[_Side]) -> list[str]:
    """Why a table of GPU ops is empty (each side's GPU note, or that its ranges launched nothing)."""
    if len(table):
        return []
    why = "; ".join(f"{s.model.name}: {s.model.gpu_note or 'its ranges launched no GPU operation'}" for s in sides)
    return [f"no GPU operation in these ranges, so nothing to list ({why})"]


def kernels(trace: TraceLike, *, range_name: str | None = DEFAULT_RANGE, phase: str | None = None,
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
        A DataFrame with `kernels.KERNEL_COLUMNS` — kernel, kind (kernel | memcpy | memset | graph), category,
        count, count_per_range, ms_per_range, mean_ms, share — most time per range first; `.attrs`: trace,
        range_name, phase, ranges (kept ranges of that phase), notes. Empty for a trace without GPU work (the notes
        say why).
    """
    check_range_arguments(skip_ranges, output_len)
    label = model_names([_path(trace, "trace")], None)[0]
    (side,) = _models(trace, "trace", [(label, _name(range_name, "range_name"), "range_name")], skip_ranges,
                      output_len)
    chosen = _phase(phase, [side])
    table = kernel_mod.of_model(side.model, chosen)
    table.attrs = {"trace": side.model.path, "range_name": side.model.range_name, "phase": chosen,
                   "ranges": len(side.model.phase_rows(chosen)), "notes": side.notes}
    return _said(table, [*_default_phase_notes(phase, chosen, [side]), *_empty_notes(table, [side])])


def kernel_diff(a: TraceLike, b: TraceLike | None = None, *, range_name: str | None = DEFAULT_RANGE,
                range_name_b: str | None = None, phase: str | None = None, skip_ranges: int | None = None,
                output_len: int | None = None) -> pd.DataFrame:
    """Two sets of forward ranges compared kernel by kernel: two traces (a target and a draft), or two ranges of one
    trace (`b` left out, or the same trace, with `range_name_b`).

    Args:
        a: a `.sqlite` / `.nsys-rep` path or an open `Trace`.
        b: the same for the other side; defaults to a (then give `range_name_b`).
        range_name: the forward range of a.
        range_name_b: that of b (default: range_name).
        phase: the phase compared on both sides; default: the phase c is judged on among those both have (decode,
            else all).
        skip_ranges: as for `cost_coefficient`, on both sides.
        output_len: as for `cost_coefficient`, on both sides.
    Returns:
        A DataFrame with `kernels.DIFF_COLUMNS`: kernel, kind, category, then per side (a_, b_) count,
        count_per_range, ms_per_range, share (0 where that side never ran the kernel), and delta_count_per_range,
        delta_ms_per_range = b − a (with a the target and b the draft: < 0 where the draft saves time), the largest
        |delta_ms_per_range| first. `.attrs`: a, b (labels), a_trace, b_trace, a_range_name, b_range_name, phase,
        a_ranges, b_ranges (kept ranges of that phase), notes. `kernels.category_diff(table)` sums it by category.
    """
    check_range_arguments(skip_ranges, output_len)
    name_a = _name(range_name, "range_name")
    name_b = name_a if range_name_b is None else _name(range_name_b, "range_name_b")
    one_trace = b is None or b is a or (not isinstance(b, Trace) and not isinstance(a, Trace)
                                        and file_identity(_path(a, "a")) == file_identity(_path(b, "b")))
    if one_trace:
        if name_a == name_b:
            raise InputError("a and b are the same trace and the same range: give b (another trace) or range_name_b "
                             "(another range of a)", param="range_name_b")
        side_a, side_b = _models(a, "a", [(name_a, name_a, "range_name"), (name_b, name_b, "range_name_b")],
                                 skip_ranges, output_len)
    else:
        assert b is not None
        label_a, label_b = model_names([_path(a, "a"), _path(b, "b")], None)
        (side_a,) = _models(a, "a", [(label_a, name_a, "range_name")], skip_ranges, output_len)
        (side_b,) = _models(b, "b", [(label_b, name_b, "range_name_b")], skip_ranges, output_len)
    chosen = _phase(phase, [side_a, side_b])
    table = kernel_mod.diff(kernel_mod.of_model(side_a.model, chosen), kernel_mod.of_model(side_b.model, chosen))
    table.attrs = {"a": side_a.model.name, "b": side_b.model.name, "a_trace": side_a.model.path,
                   "b_trace": side_b.model.path, "a_range_name": side_a.model.range_name,
                   "b_range_name": side_b.model.range_name, "phase": chosen,
                   "a_ranges": len(side_a.model.phase_rows(chosen)), "b_ranges": len(side_b.model.phase_rows(chosen)),
                   "notes": tuple(dict.fromkeys([*side_a.notes, *side_b.notes]))}
    sides = [side_a, side_b]
    return _said(table, [*_default_phase_notes(phase, chosen, sides), *_empty_notes(table, sides)])


def _path(trace_like: TraceLike, param: str) -> str:
    return trace_like.path if isinstance(trace_like, Trace) else path_of(trace_like, param)


def _name(value, param: str) -> str:
    if value is None:  # the default range (the plugin's, else vLLM's own forward scope)
        return DEFAULT_RANGE
    if not isinstance(value, str) or not value:
        raise InputError(f"{param} must be one NVTX range name (a non-empty string), not {value!r}", param=param)
    return value
