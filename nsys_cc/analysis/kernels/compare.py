"""Two sets of forward ranges compared kernel by kernel: where does the draft save time against the target
(`nsys_cc.kernel_diff`, `nsys-cc kernels` with two traces or two ranges).

Each side's ranges are read as `kernels.kernels` reads them (`kernels.read_sides`: the forward range, warm-up
dropped, phases told apart); the table is `kernel_tables.diff` of the two sides' kernel tables on one phase — by
default the phase c is judged on among the phases both sides have; `phase_b` gives the second side a phase of its own
(a target's decode against a speculative run's verify). A DataFrame of the caller's; `.attrs` holds the
traces, the range names read, the phase, the kept ranges per side and the notes.
"""

from __future__ import annotations

import pandas as pd

from ...arguments import file_identity
from ...errors import InputError
from ...trace.source import Trace
from ..coefficient.arguments import check_range_arguments, model_names
from ..forwards import kernel_tables as kernel_mod
from ..forwards.ranges import forward_names
from .per_kernel import (
    TraceLike,
    choose_phase,
    default_phase_notes,
    empty_notes,
    range_name_of,
    read_sides,
    said,
    trace_path,
)


def kernel_diff(a: TraceLike, b: TraceLike | None = None, *, range_name: str | None = None,
                range_name_b: str | None = None, phase: str | None = None, phase_b: str | None = None,
                skip_ranges: int | None = None, output_len: int | None = None) -> pd.DataFrame:
    """Two sets of forward ranges compared kernel by kernel: two traces (a target and a draft), or two ranges of one
    trace (`b` left out, or the same trace, with `range_name_b`).

    Args:
        a: a `.sqlite` / `.nsys-rep` path or an open `Trace`.
        b: the same for the other side; defaults to a (then give `range_name_b`).
        range_name: the forward range of a.
        range_name_b: that of b (default: range_name).
        phase: the phase compared on both sides (on a alone when `phase_b` is given); default: the phase c is judged
            on among those both have (decode, else all).
        phase_b: the phase of b's ranges, when it differs from a's (e.g. a plain target's decode against a
            speculative run's verify: phase="decode", phase_b="verify"); default: `phase`.
        skip_ranges: as for `cost_coefficient`, on both sides.
        output_len: as for `cost_coefficient`, on both sides.
    Returns:
        A DataFrame with `kernel_tables.DIFF_COLUMNS`: kernel, kind, category, then per side (a_, b_) count,
        count_per_range, ms_per_range, share (0 where that side never ran the kernel), and delta_count_per_range,
        delta_ms_per_range = b − a (with a the target and b the draft: < 0 where the draft saves time), the largest
        |delta_ms_per_range| first. `.attrs`: a, b (labels), a_trace, b_trace, a_range_name, b_range_name, phase,
        a_ranges, b_ranges (kept ranges of that phase), notes. `kernel_tables.category_diff(table)` sums it by category.
    """
    check_range_arguments(skip_ranges, output_len)
    name_a = range_name_of(range_name, "range_name")
    name_b = name_a if range_name_b is None else range_name_of(range_name_b, "range_name_b")
    one_trace = b is None or b is a or (not isinstance(b, Trace) and not isinstance(a, Trace)
                                        and file_identity(trace_path(a, "a")) == file_identity(trace_path(b, "b")))
    if one_trace:
        if forward_names(name_a) == forward_names(name_b):
            raise InputError("a and b are the same trace and the same range: give b (another trace) or range_name_b "
                             "(another range of a)", param="range_name_b")
        label_a, label_b = forward_names(name_a)[0], forward_names(name_b)[0]  # each side called by its range
        side_a, side_b = read_sides(a, "a", [(label_a, name_a, "range_name"), (label_b, name_b, "range_name_b")],
                                    skip_ranges, output_len)
    else:
        assert b is not None
        label_a, label_b = model_names([trace_path(a, "a"), trace_path(b, "b")], None)
        (side_a,) = read_sides(a, "a", [(label_a, name_a, "range_name")], skip_ranges, output_len)
        (side_b,) = read_sides(b, "b", [(label_b, name_b, "range_name_b")], skip_ranges, output_len)
    if phase_b is None or phase_b == phase:
        chosen = chosen_b = choose_phase(phase, [side_a, side_b])
    else:
        if phase is None:
            raise InputError("phase_b is the phase of b's ranges beside phase, a's: give phase too (e.g. "
                             "phase='decode', phase_b='verify')", param="phase")
        chosen, chosen_b = choose_phase(phase, [side_a]), choose_phase(phase_b, [side_b], param="phase_b")
    table = kernel_mod.diff(kernel_mod.of_model(side_a.model, chosen), kernel_mod.of_model(side_b.model, chosen_b))
    table.attrs = {"a": side_a.model.name, "b": side_b.model.name, "a_trace": side_a.model.path,
                   "b_trace": side_b.model.path, "a_range_name": side_a.model.range_name,
                   "b_range_name": side_b.model.range_name, "phase": chosen, "phase_b": chosen_b,
                   "a_ranges": side_a.model.phase_count(chosen), "b_ranges": side_b.model.phase_count(chosen_b),
                   "notes": tuple(dict.fromkeys([*side_a.notes, *side_b.notes]))}
    sides = [side_a, side_b]
    return said(table, [*default_phase_notes(phase, chosen, sides), *empty_notes(table, sides)])
