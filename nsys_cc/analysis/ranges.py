"""Picking NVTX ranges by name from `Trace.nvtx_ranges()`.

A name matches a range when it equals the range's plain `name` or its `qualified_name` ("domain:name"),
exactly, after dropping one leading ":" from the query (newer nsys prints default-domain ranges as
":name"; a leading "::" is kept).
"""

from __future__ import annotations

import difflib

import pandas as pd


def _clean(name: str) -> str:
    return name[1:] if name.startswith(":") and not name.startswith("::") else name


def select(ranges: pd.DataFrame, name: str) -> pd.DataFrame:
    """The rows of `ranges` whose name or qualified name is `name` (same index, all columns)."""
    wanted = _clean(name)
    hit = (ranges["name"].astype(object) == wanted) | (ranges["qualified_name"].astype(object) == wanted)
    return ranges[hit.to_numpy(dtype=bool, na_value=False)]


def name_counts(ranges: pd.DataFrame) -> pd.Series:
    """Number of ranges per qualified name, most frequent first (ties by name)."""
    counts = ranges["qualified_name"].astype(object).value_counts(dropna=True)
    frame = counts.rename_axis("name").reset_index(name="count").sort_values(["count", "name"], ascending=[False, True])
    return pd.Series(frame["count"].to_numpy(), index=pd.Index(frame["name"], name="name"), name="count")


def closest_names(ranges: pd.DataFrame, name: str, n: int = 5) -> list[str]:
    """Up to `n` distinct range names (qualified) closest to `name` (difflib ratio), for "did you mean" hints."""
    names = [str(x) for x in pd.unique(ranges["qualified_name"].dropna().astype(object))]
    close = difflib.get_close_matches(_clean(name), names, n=n, cutoff=0.4)
    if len(close) < n:
        lowered = _clean(name).lower()
        close += [x for x in names if lowered in x.lower() and x not in close][: n - len(close)]
    return close
