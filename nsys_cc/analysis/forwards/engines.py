"""One model's part of a trace that holds several: the ranges that ran inside its engine's windows.

`nsys-cc profile` times the models of an interleaved run in ONE process (`nsys_cc.vllm.interleave`): every
`LLM.generate` call of the engine labelled L is wrapped in an NVTX range `nsys_cc:engine L`. The forwards, steps and
warm-up/iteration markers of model L are the ranges that start inside one of those windows (any thread: the engine
runs in-process, so its ranges are on the driver's thread). `engine=L` in the analysis keeps exactly those
(`in_engine`); the ranges of one read are split among the models of a trace by `split_by_engine`.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from ...contract import ENGINE_RANGE_PREFIX
from ...errors import InputError, RangeNotFoundError
from .phases import _containing
from .ranges import by_start

__all__ = ["ENGINE_RANGE_PREFIX", "InterleavedTraceError", "engine_labels", "engine_range", "engine_windows",
           "in_engine", "split_by_engine", "windows"]


class InterleavedTraceError(InputError):
    """A trace read whole that holds the engine windows of an interleaved run (several models in one process): read
    whole, their forwards would be pooled as one model's. `path`, `engines`: the trace and its engines' labels."""

    def __init__(self, path: str, engines: Sequence[str]):
        self.path, self.engines = path, list(engines)
        super().__init__(
            f"{path} holds every model of an interleaved run ({len(engines)} engines: {', '.join(engines)}): read "
            "whole, their forwards would be pooled as one model's. Analyse interleaved runs as runs — "
            "nsys_cc.analyze([run-1/trace.sqlite, run-2/trace.sqlite, …]) or nsys_cc.cost_coefficient_runs(…) with "
            "those traces (each run's engines are its models) — or pick one engine per trace with engines=[…]",
            param="engines")


def engine_range(label: str) -> str:
    """The NVTX range around each generate call of the engine labelled `label` in an interleaved trace."""
    return ENGINE_RANGE_PREFIX + label


def engine_windows(engines: Sequence[str | None]) -> list[str]:
    """The engine-window ranges to read for models given by their engine's label (None: a model read whole)."""
    return list(dict.fromkeys(engine_range(e) for e in engines if e is not None))


def windows(ranges: pd.DataFrame, engine: str) -> pd.DataFrame:
    """The `nsys_cc:engine <engine>` ranges of `ranges` (start_ns, end_ns), by start."""
    name = engine_range(engine)
    hit = ranges["name"].astype(str).to_numpy() == name
    return by_start(ranges.loc[hit, ["start_ns", "end_ns"]]).reset_index(drop=True)


def engine_labels(ranges: pd.DataFrame) -> list[str]:
    """Labels of the engines whose windows `ranges` holds, in order of first appearance."""
    names = ranges["name"].astype(str)
    hit = names.str.startswith(ENGINE_RANGE_PREFIX).to_numpy()
    first = by_start(ranges.loc[hit, ["start_ns", "name"]])
    return list(dict.fromkeys(n.removeprefix(ENGINE_RANGE_PREFIX) for n in first["name"].astype(str)))


def in_engine(ranges: pd.DataFrame, engine: str | None, *, path: str = "", trace=None) -> pd.DataFrame:
    """The rows of `ranges` that start inside an `nsys_cc:engine <engine>` window (the windows themselves and other
    engines' windows left out); `ranges` as they are when `engine` is None. RangeNotFoundError naming the engines
    the trace has (read from `trace` when given, else from `ranges`) when it has no window of `engine`."""
    if engine is None:
        return ranges
    win = windows(ranges, engine)
    if win.empty:
        every = ranges if trace is None else trace.nvtx_ranges(prefixes=[ENGINE_RANGE_PREFIX], nesting=False)
        known = engine_labels(every)
        where = f"{path}: " if path else ""
        has = f"its engines are {', '.join(map(repr, known))}" if known else "it holds no interleaved engines"
        raise RangeNotFoundError(f"{where}no {engine_range(engine)!r} ranges ({has})", param="engines")
    starts = ranges["start_ns"].to_numpy()
    inside = _containing(starts, win) >= 0
    inside &= ~ranges["name"].astype(str).str.startswith(ENGINE_RANGE_PREFIX).to_numpy(dtype=bool)
    return ranges[np.asarray(inside, dtype=bool)]


def split_by_engine(ranges: pd.DataFrame, engines: Sequence[str | None], *, path: str,
                    trace=None) -> list[pd.DataFrame]:
    """The ranges of one read of a trace (`ranges.marked_ranges`, with `engine_windows(engines)`, and every engine
    window when a model is read whole) split among its models: per engine label, the ranges inside that engine's
    windows (`in_engine`); for None, the whole trace's (without the engine windows). A trace read whole that holds
    the windows of two or more engines is an `InterleavedTraceError`: its models' forwards would mix."""
    is_engine = ranges["name"].astype(str).str.startswith(ENGINE_RANGE_PREFIX).to_numpy(dtype=bool)
    whole = ranges[~is_engine] if is_engine.any() else ranges
    if any(e is None for e in engines) and is_engine.any():
        found = engine_labels(ranges[is_engine])
        if len(found) >= 2:
            raise InterleavedTraceError(path, found)
    return [whole if e is None else in_engine(ranges, e, path=path, trace=trace) for e in engines]
