"""Picking NVTX ranges by name from `Trace.nvtx_ranges()`.

A name matches a range when it equals the range's plain `name` or its `qualified_name` ("domain:name"),
exactly, after dropping one leading ":" from the query (newer nsys prints default-domain ranges as
":name"; a leading "::" is kept).
"""

from __future__ import annotations

import difflib

import pandas as pd

from ..errors import RangeNotFoundError


def _clean(name: str) -> str:
    return name[1:] if name.startswith(":") and not name.startswith("::") else name


def select(ranges: pd.DataFrame, name: str) -> pd.DataFrame:
    """The rows of `ranges` whose name or qualified name is `name` (same index, all columns)."""
    wanted = _clean(name)
    hit = (ranges["name"].astype(object) == wanted) | (ranges["qualified_name"].astype(object) == wanted)
    return ranges[hit.to_numpy(dtype=bool, na_value=False)]


def name_counts(ranges: pd.DataFrame) -> pd.Series:
    """Number of ranges per qualified name, most frequent first (ties by name). Unnamed ranges (no text, no
    registered string: real, e.g. 1,998 of 21,462 in one public nvFuser trace) are counted under a missing name."""
    counts = ranges["qualified_name"].astype(object).value_counts(dropna=False)
    frame = counts.rename_axis("name").reset_index(name="count")
    frame = frame.sort_values(["count", "name"], ascending=[False, True], na_position="last", kind="stable")
    return pd.Series(frame["count"].to_numpy(), index=pd.Index(frame["name"], name="name"), name="count")


def closest_names(ranges: pd.DataFrame, name: str, n: int = 5) -> list[str]:
    """Up to `n` distinct range names (qualified) closest to `name` (difflib ratio), for "did you mean" hints."""
    names = [str(x) for x in pd.unique(ranges["qualified_name"].dropna().astype(object))]
    close = difflib.get_close_matches(_clean(name), names, n=n, cutoff=0.4)
    if len(close) < n:
        lowered = _clean(name).lower()
        close += [x for x in names if lowered in x.lower() and x not in close][: n - len(close)]
    return close


# Columns of `range_table`, in order: the range, then its projection onto the GPU.
TABLE_COLUMNS = [
    "range_id", "name", "style", "pid", "tid", "start_ns", "end_ns", "duration_ns", "level",
    "proj_start_ns", "proj_duration_ns", "gpu_ops", "kernel_sum_ns", "gpu_busy_ns",
]


def range_table(trace, name: str | None = None) -> pd.DataFrame:
    """One row per NVTX range (only those named `name` when given) with its GPU projection, columns
    TABLE_COLUMNS (`name` is the qualified name). GPU columns are <NA> where the range launched nothing
    or the trace has no CUDA data. Raises RangeNotFoundError for an unknown name."""
    from .projection import project

    ranges = trace.nvtx_ranges()
    if name is not None:
        picked = select(ranges, name)
        if picked.empty:
            near = closest_names(ranges, name)
            hint = f"; closest: {', '.join(repr(n) for n in near)}" if near else (
                "; the trace has no NVTX ranges" if ranges.empty else "")
            raise RangeNotFoundError(f"no NVTX range named {name!r} in {trace.path}{hint}")
        ranges = picked
    table = project(trace, ranges)
    table["name"] = table["qualified_name"]
    return table[TABLE_COLUMNS].reset_index(drop=True)
