"""The values of a PyTorch-profiler (Kineto) trace's events as columns, for `kineto_collect` and `kineto.KinetoTrace`:
every time an exact integer count of nanoseconds (`ns_of`, `ns_column`: from the text of the JSON number, no float
is ever made of it), integers checked to be integers, and the first damaged event named in the error (`Damaged`).
The events are `kineto_json.Event`s (a batch of them with their positions in `traceEvents`). Definitions: `kineto`.
"""

from __future__ import annotations

import contextlib
import decimal
import gc
import json
import operator
import re
from collections.abc import Iterator
from typing import Any

import msgspec
import numpy as np
import pandas as pd

from .bulk import NULL_INT
from .kineto_json import ARG_KEYS, UNSET

# Timestamps and durations beyond this many ns (146 years) are no times of a trace: refused, so that no end overflows.
MAX_NS = 1 << 62


# -- exact times ------------------------------------------------------------------------------------------------------
# A number as JSON writes one (Decimal alone would take "1_0", "+1", other scripts' digits, "NaN").
_JSON_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?", re.ASCII)


def _ns_general(text: str) -> int:
    if not _JSON_NUMBER.fullmatch(text):
        raise ValueError(f"{text!r:.40} is no number")
    value = decimal.Decimal(text)
    if not value.is_finite():
        raise ValueError(f"{text} is not a time")
    ctx = decimal.Context(prec=len(text) + 8, rounding=decimal.ROUND_HALF_EVEN)
    return int(ctx.multiply(value, 1000).to_integral_value(rounding=decimal.ROUND_HALF_EVEN))


def ns_of(value: Any) -> int:
    """Integer nanoseconds of a Kineto time in microseconds: the decimal text of a JSON number (what the parser hands
    over) converted exactly — "1733456789012.345" → 1733456789012345 — or an integer (whole µs). More than three
    decimals are rounded half to even. TypeError/ValueError for anything else (a float object, a bool, None, a string
    that is no number)."""
    if type(value) is str:
        digits = value[:-4] + value[-3:]
        if value[-4:-3] == "." and digits.lstrip("-").isdigit() and digits.isascii() and digits.count("-") <= 1:
            return int(digits)  # Kineto's form: the ns are the three decimals
        return _ns_general(value)
    if type(value) is int:
        return value * 1000
    raise TypeError(f"{value!r} is not a number of microseconds")


def _refuse_constant(word: str):
    raise ValueError(f"{word} is not a JSON number")


def value_of(value: Any) -> Any:
    """A field's value as the exact parser gives it (`parse_float=str`): the JSON text of a `msgspec.Raw` parsed
    (None for an empty one: the field is missing), anything else as it is."""
    if type(value) is msgspec.Raw:
        return json.loads(bytes(value), parse_float=str, parse_constant=_refuse_constant) if len(value) else None
    return value


@contextlib.contextmanager
def no_collection() -> Iterator[None]:
    """Python's cyclic garbage collector off inside the block (as it was after). Reading makes millions of objects,
    none of them in a cycle, and every few thousand new objects the collector would walk all the young ones
    (docs/PERFORMANCE.md). Nothing of the reader's makes a cycle, so nothing is left for the collector afterwards."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


# -- naming the damaged event -----------------------------------------------------------------------------------------
class Damaged(Exception):
    """An event the reader cannot take (message without the file's name; `KinetoTrace` adds it)."""


def describe(i: int, cat: Any, name: Any) -> str:
    label = f"{cat} " if isinstance(cat, str) else ""
    if isinstance(name, str):
        label += repr(name if len(name) <= 60 else name[:59] + "…") + " "
    return f"traceEvents[{i}] ({label.strip() or 'an event'})"


def describe_event(i: int, e: Any) -> str:
    return describe(i, getattr(e, "cat", None), getattr(e, "name", None))


# -- columns ----------------------------------------------------------------------------------------------------------
def ints(at: list[int], sel: list, values: list, what: str) -> np.ndarray:
    """`values` as int64; Damaged naming the first event whose value is no integer (a number with decimals
    included: the fast parser gives those as floats, which NumPy would truncate)."""
    try:
        out = np.array(values)
        if out.dtype == np.int64 and out.ndim == 1:
            return out
    except (TypeError, ValueError, OverflowError):
        pass
    for i, e, v in zip(at, sel, values):
        if v is UNSET:
            raise Damaged(f"{describe_event(i, e)} has no '{what}'")
        try:
            ok = type(v) is not float and np.array([v], dtype=np.int64).ndim == 1
        except (TypeError, ValueError, OverflowError):
            ok = False
        if not ok:
            raise Damaged(f"{describe_event(i, e)} has a {what} that is not an integer ({v!r:.40})")
    return np.array(values, dtype=np.int64).reshape(len(values))


def arg_ints(at: list[int], sel: list, args: list, field: str, default: int | None, what: str) -> np.ndarray:
    """`args.<field>` of each event as int64 (`default` when missing or null; NULL_INT without one)."""
    fill = NULL_INT if default is None else default
    values = [fill if v is None else v for v in map(operator.attrgetter(field), args)]
    return ints(at, sel, values, f"args.{ARG_KEYS[field]} ({what})")


_DIGITS = np.zeros(256, dtype=bool)
_DIGITS[ord("0"):ord("9") + 1] = True


def _ns_fast(raw: bytes, n: int) -> np.ndarray | None:
    """The ns of `n` comma-joined times at C speed when all are in Kineto's form — decimal text with exactly three
    decimals, or all whole numbers of µs, with at most 15 integer digits (below 2**62 ns) — else None (the caller
    converts value by value). The text is checked character by character with NumPy and parsed as integers once the
    points are dropped."""
    if not n:
        return np.empty(0, dtype=np.int64)
    b = np.frombuffer(raw, dtype=np.uint8)
    if not len(b):
        return None
    commas = np.flatnonzero(b == 44)
    if len(commas) != n - 1:
        return None
    ends = np.append(commas, len(b))
    starts = np.concatenate(([0], commas + 1))
    dots = np.flatnonzero(b == 46)
    whole = len(dots) == 0
    if not whole and (len(dots) != n or not (dots == ends - 4).all()):
        return None
    minus = np.flatnonzero(b == 45)
    signed = b[np.minimum(starts, len(b) - 1)] == 45
    if len(minus) != int(signed.sum()) or not (_DIGITS[b] | (b == 44) | (b == 46) | (b == 45)).all():
        return None
    digits = (ends if whole else dots) - starts - signed
    if not ((digits >= 1) & (digits <= 15)).all():
        return None
    out = np.fromstring((raw if whole else raw.replace(b".", b"")).decode("ascii"), dtype=np.int64, sep=",")
    if len(out) != n:
        return None
    return out * 1000 if whole else out


def ns_column(at: list[int], sel: list, values: list | tuple, key: str) -> np.ndarray:
    """Nanoseconds of the `key` ("ts"/"dur") values of the events `sel` (at `at`): `_ns_fast`, else `ns_of` one by
    one; Damaged naming the first value that is missing, no number, or no time (|ns| ≥ 2**62)."""
    try:
        raw = b",".join(values)
    except TypeError:  # values the exact parser gave (text, integers), or not times at all
        out = None
    else:
        out = _ns_fast(raw, len(values))
    if out is None:
        try:
            out = np.fromiter((ns_of(value_of(v)) for v in values), dtype=np.int64, count=len(values))
        except (TypeError, ValueError, OverflowError, ArithmeticError):
            out = None
    if out is None or (len(out) and np.abs(out).max() >= MAX_NS):
        for i, e, v in zip(at, sel, values):
            try:
                v = value_of(v)
                ok = abs(ns_of(v)) < MAX_NS
            except (TypeError, ValueError, OverflowError, ArithmeticError):
                ok = False
            if not ok:
                if v is None:
                    raise Damaged(f"{describe_event(i, e)} has no '{key}'")
                raise Damaged(f"{describe_event(i, e)} has a {key} ({v!r:.40}) that is no time in microseconds")
    assert out is not None
    return out


def refuse_negative(at: list[int], sel: list, dur: np.ndarray) -> None:
    negative = np.flatnonzero(dur < 0)
    if len(negative):
        k = int(negative[0])
        raise Damaged(f"{describe_event(at[k], sel[k])} has a negative duration (dur {value_of(sel[k].dur)} µs): "
                      "Kineto writes none, the file is damaged")


def check_names(at: list[int], sel: list, names: tuple | list) -> None:
    if set(map(type, names)) - {str}:
        for i, e, n in zip(at, sel, names):
            if n is UNSET:
                raise Damaged(f"{describe_event(i, e)} has no 'name'")
            if type(n) is not str:
                raise Damaged(f"{describe_event(i, e)} has a name that is not text ({n!r:.40})")


def small_int(value: Any) -> bool:
    """An integer an int64 column holds with room (|value| < 2**62; not a bool)."""
    return type(value) is int and -MAX_NS < value < MAX_NS


def categorical(values: list | np.ndarray) -> pd.Categorical:
    codes, cats = pd.factorize(np.asarray(values, dtype=object), use_na_sentinel=True)
    return pd.Categorical.from_codes(codes, categories=pd.Index(cats, dtype=object))


_GETTERS = tuple(map(operator.attrgetter, ("name", "pid", "tid", "ts", "dur")))
_PH = operator.attrgetter("ph")


def complete(at: list[int], sel: list) -> tuple[list[int], list, tuple]:
    """The complete ("X") events among `sel` (at `at`): their positions, events and columns (name, pid, tid, ts,
    dur), each read in one C-level pass. A missing name, pid or tid is UNSET: `check_names` and `ints` say so."""
    ph = list(map(_PH, sel))
    if ph.count("X") != len(ph):
        keep = [k for k, p in enumerate(ph) if p == "X"]
        at, sel = [at[k] for k in keep], [sel[k] for k in keep]
    return at, sel, tuple(list(map(get, sel)) for get in _GETTERS)


class Spans:
    """Complete events of one category as columns: event positions, names (a list of texts, or a Categorical),
    process and thread ids, times."""

    def __init__(self, index: np.ndarray, names: list[str] | pd.Categorical, pid: np.ndarray, tid: np.ndarray,
                 start: np.ndarray, dur: np.ndarray):
        self.index, self.pid, self.tid, self.start, self.dur = index, pid, tid, start, dur
        self._names: list[str] | None = None if isinstance(names, pd.Categorical) else names
        self._name: pd.Categorical | None = names if isinstance(names, pd.Categorical) else None
        self.gtid = np.empty(0, dtype=np.int64)
        self.payload: np.ndarray | None = None  # the plugin's payloads in the names (`payload_names`), if any

    @property
    def name(self) -> pd.Categorical:
        if self._name is None:
            self._name = categorical(self._names or [])
            self._names = None
        return self._name

    @property
    def names(self) -> list[str]:
        """The names as a list of texts."""
        return list(self._names) if self._names is not None else [str(n) for n in self.name]

    def __len__(self) -> int:
        return len(self.index)


def refuse_duplicates(columns: dict[str, Any], index: np.ndarray, what: str, describe_at) -> None:
    """Damaged when two events of `what` agree in every one of `columns` (the same event twice: two traces merged,
    or a damaged file; a kernel counted twice would double every GPU figure); `describe_at(k)` names row k."""
    if len(index) < 2:
        return
    frame = pd.DataFrame(columns, copy=False)
    dup = frame.duplicated(keep="first").to_numpy()
    if dup.any():
        raise Damaged(f"{int(dup.sum())} {what} event(s) appear twice (first repeat: "
                      f"{describe_at(int(np.flatnonzero(dup)[0]))}): two traces merged into one file, or a damaged "
                      "file")


class Ids:
    """globalTid/globalPid values for Kineto's (pid, tid) pairs: nsys's layout (pid << 24 | tid) when every pid and
    tid fits its 24-bit field (as Linux ids do), else dense codes in the same layout (the frames' `pid` and `tid`
    columns always hold the file's own ids)."""

    FIELD = 1 << 24

    def __init__(self, pids: np.ndarray, tids: np.ndarray):
        self.exact = bool(len(pids) == 0 or (pids.min() >= 0 and pids.max() < self.FIELD
                                             and tids.min() >= 0 and tids.max() < self.FIELD))
        self.pid_codes = pd.Index(np.unique(pids))
        self.tid_codes = pd.Index(np.unique(tids))

    def gtid(self, pid: np.ndarray, tid: np.ndarray) -> np.ndarray:
        pid = np.asarray(pid, dtype=np.int64)
        tid = np.asarray(tid, dtype=np.int64)
        if self.exact:
            return (pid << 24) | tid
        return (self.pid_codes.get_indexer(pid).astype(np.int64) << 24) | self.tid_codes.get_indexer(tid)

    def gpid(self, pid: np.ndarray) -> np.ndarray:
        return self.gtid(pid, np.zeros(len(pid), dtype=np.int64))


def version_text(key: str, value: Any) -> str:
    """A version the file states, as text: CUDA's integers (12090) as major.minor ("12.9")."""
    if key.startswith("cuda") and type(value) is int and value >= 1000:
        return f"{value // 1000}.{value % 1000 // 10}"
    if isinstance(value, list):
        return ".".join(str(v) for v in value)
    return str(value)
