"""The analysis's results as values: every table handed out is the caller's own, and two results compare by value.

One rule for every table of a result (`CostCoefficientResult`, `ModelForwards`, `SpeculativeAnalysis`, `Ranks`, and
what `kernels`/`kernel_diff` return): a DataFrame read from a result is a new frame of the caller's
(`nsys_cc.trace.source.handed_out`, as the trace's tables are; with pandas ≥ 3 copy-on-write this costs nothing per
row), so `res.coefficients["c"] = 99` changes that frame only, never what `repr(res)`, `render()` or a later
`res.coefficients` say. Tables computed on access (`res.forwards`) are new frames anyway.

Mappings and lists a result holds (`speculative.models`) are handed out as copies too.

`==` compares by value (`same`): the same fields, tables equal cell by cell (NaN equal to NaN, dtypes included),
so `cost_coefficient(t, d) == cost_coefficient(t, d)` is True (the bootstrap is seeded) and a result differs from one
of another seed. Results hold DataFrames, so they are not hashable.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from ..trace.source import handed_out


class Value:
    """Mixin of a result dataclass (declare it with `eq=False`, so that this `__eq__` is the one used): its public
    DataFrame attributes are handed out as the caller's own, and `==` compares by value (module docstring)."""

    __slots__ = ()

    def __getattribute__(self, name: str) -> Any:
        value = object.__getattribute__(self, name)
        if name[:1] != "_":
            if isinstance(value, pd.DataFrame):
                return handed_out(value)
            if isinstance(value, (dict, list)):  # e.g. `speculative.models`: the caller's copy, not the result's
                return value.copy()
        return value

    def __eq__(self, other: object) -> bool:
        # anything but a result of the same class is unequal (not NotImplemented: a DataFrame's reflected == would
        # then raise, as `res == res.coefficients` did)
        return other.__class__ is self.__class__ and same(self, other)

    __hash__ = None  # type: ignore[assignment]  # tables inside: not hashable


def same(a: Any, b: Any) -> bool:
    """Whether `a` and `b` hold the same values: DataFrames and Series cell by cell with their dtypes (`equals`, NaN
    equal to NaN), arrays element by element, floats with NaN equal to NaN, dataclasses field by field (those
    compared), mappings and sequences item by item; anything else by `==`."""
    if a is b:
        return True
    if isinstance(a, (pd.DataFrame, pd.Series)) or isinstance(b, (pd.DataFrame, pd.Series)):
        return type(a) is type(b) and a.shape == b.shape and list(_axis(a)) == list(_axis(b)) and a.equals(b)
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        a, b = np.asarray(a), np.asarray(b)
        if a.shape != b.shape:
            return False
        try:
            return bool(np.array_equal(a, b, equal_nan=True))
        except TypeError:  # object arrays: NaN cannot be told apart there
            return bool(np.array_equal(a, b))
    if dataclasses.is_dataclass(a) and not isinstance(a, type):
        if type(a) is not type(b):
            return False
        return all(same(object.__getattribute__(a, f.name), object.__getattribute__(b, f.name))
                   for f in dataclasses.fields(a) if f.compare)
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    try:
        return bool(a == b)
    except (TypeError, ValueError):
        return False


def _axis(frame: pd.DataFrame | pd.Series) -> pd.Index:
    return frame.columns if isinstance(frame, pd.DataFrame) else pd.Index([frame.name])
