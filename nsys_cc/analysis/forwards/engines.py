"""One model's part of a trace that holds several: the ranges that ran inside its engine's windows.

`nsys-cc profile` times the models of an interleaved run in ONE process (`nsys_cc.vllm.interleave`): every
`LLM.generate` call of the engine labelled L is wrapped in an NVTX range `nsys_cc:engine L`. The forwards, steps and
warm-up/iteration markers of model L are the ranges that start inside one of those windows (any thread: the engine
runs in-process, so its ranges are on the driver's thread). `scope=L` in the analysis keeps exactly those.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ...contract import ENGINE_RANGE_PREFIX
from ...errors import RangeNotFoundError
from .phases import _containing
from .ranges import by_start

__all__ = ["ENGINE_RANGE_PREFIX", "engine_range", "engines", "in_scope", "windows"]


def engine_range(label: str) -> str:
    """The NVTX range around each generate call of the engine labelled `label` in an interleaved trace."""
    return ENGINE_RANGE_PREFIX + label


def windows(ranges: pd.DataFrame, scope: str) -> pd.DataFrame:
    """The `nsys_cc:engine <scope>` ranges of `ranges` (start_ns, end_ns), by start."""
    name = engine_range(scope)
    hit = ranges["name"].astype(str).to_numpy() == name
    return by_start(ranges.loc[hit, ["start_ns", "end_ns"]]).reset_index(drop=True)


def engines(ranges: pd.DataFrame) -> list[str]:
    """Labels of the engines whose windows `ranges` holds, in order of first appearance."""
    names = ranges["name"].astype(str)
    hit = names.str.startswith(ENGINE_RANGE_PREFIX).to_numpy()
    first = by_start(ranges.loc[hit, ["start_ns", "name"]])
    return list(dict.fromkeys(n.removeprefix(ENGINE_RANGE_PREFIX) for n in first["name"].astype(str)))


def in_scope(ranges: pd.DataFrame, scope: str | None, *, path: str = "", trace=None) -> pd.DataFrame:
    """The rows of `ranges` that start inside an `nsys_cc:engine <scope>` window (the windows themselves and other
    engines' windows left out); `ranges` as they are when `scope` is None. RangeNotFoundError naming the engines
    the trace has (read from `trace` when given, else from `ranges`) when it has no window of `scope`."""
    if scope is None:
        return ranges
    win = windows(ranges, scope)
    if win.empty:
        every = ranges if trace is None else trace.nvtx_ranges(prefixes=[ENGINE_RANGE_PREFIX], nesting=False)
        known = engines(every)
        where = f"{path}: " if path else ""
        has = f"its engines are {', '.join(map(repr, known))}" if known else "it holds no interleaved engines"
        raise RangeNotFoundError(f"{where}no {engine_range(scope)!r} ranges ({has})", param="engines")
    starts = ranges["start_ns"].to_numpy()
    inside = _containing(starts, win) >= 0
    inside &= ~ranges["name"].astype(str).str.startswith(ENGINE_RANGE_PREFIX).to_numpy(dtype=bool)
    return ranges[np.asarray(inside, dtype=bool)]
