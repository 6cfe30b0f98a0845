"""A PyTorch-profiler (Kineto) trace's JSON document read into columns, for `kineto.KinetoTrace`: the document read once
(`read_document`: gzip or plain, its size bounded, NaN, Infinity and deep nesting refused), every time an exact
integer count of nanoseconds (`ns_of`: the parser hands each number's text over, no float is ever made of it), and
the kept events' fields as arrays, the first damaged event named in the error (`Damaged`). Definitions: `kineto`."""

from __future__ import annotations

import contextlib
import decimal
import gc
import gzip
import json
import operator
import os
import re
import zlib
from collections.abc import Iterator
from typing import Any

import numpy as np
import pandas as pd

from .. import inputs
from ..errors import InputError
from .bulk import NULL_INT

GZIP_MAGIC = b"\x1f\x8b"


# Uncompressed bytes read at most ($NSYS_CC_MAX_TRACE_BYTES): a gzip bomb, or a trace too big for memory, is refused
# before it is parsed (parsing holds the text and its events: about 4× the file's size).
ENV_MAX_BYTES = "NSYS_CC_MAX_TRACE_BYTES"


DEFAULT_MAX_BYTES = 16 << 30


# Timestamps and durations beyond this many ns (146 years) are no times of a trace: refused, so that no end overflows.
MAX_NS = 1 << 62


def max_bytes() -> int:
    """Uncompressed bytes a trace may hold: `$NSYS_CC_MAX_TRACE_BYTES`, else DEFAULT_MAX_BYTES."""
    text = os.environ.get(ENV_MAX_BYTES, "").strip()
    if not text:
        return DEFAULT_MAX_BYTES
    try:
        value = int(text)
    except ValueError:
        raise InputError(f"{ENV_MAX_BYTES} must be a whole number of bytes, not {text!r}") from None
    if value <= 0:
        raise InputError(f"{ENV_MAX_BYTES} must be a number of bytes > 0, not {text!r}")
    return value


def looks_like_json(path: str | os.PathLike) -> bool:
    """True when the file is gzip-compressed or its first non-blank character opens a JSON object or array: what
    `open_trace` hands to this reader (by content, whatever the file's name)."""
    with inputs.open_file(path, "trace") as fh:
        head = fh.read(256)
        if head.startswith(GZIP_MAGIC):
            fh.seek(0)
            try:
                with gzip.GzipFile(fileobj=fh, mode="rb") as gz:
                    head = gz.read(256)
            except (EOFError, OSError, zlib.error):
                return True  # damaged or cut short: the reader says so
    return head.lstrip(b" \t\r\n\xef\xbb\xbf")[:1] in (b"{", b"[")


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
    over, `parse_float=str`) converted exactly — "1733456789012.345" → 1733456789012345 — or an integer (whole µs).
    More than three decimals are rounded half to even. TypeError/ValueError for anything else (a float object, a bool,
    None, a string that is no number)."""
    if type(value) is str:
        digits = value[:-4] + value[-3:]
        if value[-4:-3] == "." and digits.lstrip("-").isdigit() and digits.isascii() and digits.count("-") <= 1:
            return int(digits)  # Kineto's form: the ns are the three decimals
        return _ns_general(value)
    if type(value) is int:
        return value * 1000
    raise TypeError(f"{value!r} is not a number of microseconds")


def _ns_array(values: list) -> np.ndarray:
    """`ns_of` of each value, as int64 (OverflowError beyond int64)."""
    return np.fromiter(map(ns_of, values), dtype=np.int64, count=len(values))


@contextlib.contextmanager
def no_collection() -> Iterator[None]:
    """Python's cyclic garbage collector off inside the block (as it was after). Parsing makes millions of dicts and
    lists, none of them in a cycle, and every few thousand new objects the collector would walk all the young ones and,
    now and then, the whole document: measured on a 100 MB trace, 40 % of the parse and 80 % of the reading after it
    (docs/PERFORMANCE.md). Nothing of the reader's makes a cycle, so nothing is left for the collector afterwards."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


# -- reading the file -------------------------------------------------------------------------------------------------
def _quote(exc: BaseException, limit: int = 160) -> str:
    text = " ".join(str(exc).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _refuse_constant(word: str):
    raise ValueError(f"{word} is not a JSON number (Kineto never writes one)")


_JSON_KINDS = {list: "array", str: "string", int: "number", float: "number", bool: "true/false", type(None): "null"}


def read_document(path: str | os.PathLike) -> dict:
    """The trace's JSON document (numbers with decimals kept as their text), or InputError with one line."""
    name = os.fsdecode(os.fspath(path))
    limit = max_bytes()
    with inputs.open_file(path, "trace") as fh:
        compressed = fh.read(2) == GZIP_MAGIC
        fh.seek(0)
        try:
            if compressed:
                with gzip.GzipFile(fileobj=fh, mode="rb") as gz:
                    raw = gz.read(limit + 1)
            else:
                raw = fh.read(limit + 1)
        except EOFError:
            raise InputError(f"{name} is a truncated gzip file (it ends before its compressed data does): copy it "
                             "again, or let the profiler finish writing it") from None
        except (gzip.BadGzipFile, zlib.error) as exc:
            raise InputError(f"{name} is a damaged gzip file ({_quote(exc)})") from None
        except OSError as exc:
            raise InputError(f"cannot read the trace {name}: {exc.strerror or _quote(exc)}") from None
    if len(raw) > limit:
        raise InputError(f"{name} holds more than {limit:,} bytes of JSON{' uncompressed' if compressed else ''}: "
                         f"more than nsys-cc reads (parsing needs ~4× that in memory); set {ENV_MAX_BYTES}=BYTES to "
                         "read it anyway")
    if not raw or raw.isspace():
        raise InputError(f"{name} is empty: not a PyTorch-profiler trace")
    text = raw.decode("utf-8", errors="replace")
    del raw
    if text.startswith("\ufeff"):
        text = text[1:]
    try:
        doc = json.loads(text, parse_float=str, parse_constant=_refuse_constant)
    except RecursionError:
        raise InputError(f"{name} is nested too deep to be a PyTorch-profiler trace") from None
    except ValueError as exc:
        what = "gzip-compressed text that is not JSON" if compressed else "not JSON"
        raise InputError(f"{name} is {what} (truncated, or not a PyTorch-profiler trace): {_quote(exc)}") from None
    del text
    if not isinstance(doc, dict) or "traceEvents" not in doc:
        shape = ("a JSON object without 'traceEvents'" if isinstance(doc, dict) else
                 f"a JSON {_JSON_KINDS.get(type(doc), type(doc).__name__)}, not an object with 'traceEvents'")
        raise InputError(f"{name} is {shape}: neither a PyTorch-profiler (Kineto) trace nor an Nsight Systems export")
    if not isinstance(doc["traceEvents"], list):
        raise InputError(f"{name}: 'traceEvents' is not a list of events: not a PyTorch-profiler trace")
    return doc


# -- building the tables ----------------------------------------------------------------------------------------------
class Damaged(Exception):
    """An event the reader cannot take (message without the file's name; `KinetoTrace` adds it)."""


def describe_event(events: list, i: int) -> str:
    e = events[i]
    cat = e.get("cat") if isinstance(e, dict) else None
    name = e.get("name") if isinstance(e, dict) else None
    label = f"{cat} " if isinstance(cat, str) else ""
    if isinstance(name, str):
        label += repr(name if len(name) <= 60 else name[:59] + "…") + " "
    return f"traceEvents[{i}] ({label.strip() or 'an event'})"


def _values(events: list, idx: list[int], sel: list, key: str) -> list:
    """`event[key]` of each event of `sel` (the events at `idx`), in one C-level pass; Damaged naming the first event
    without it."""
    try:
        return list(map(operator.itemgetter(key), sel))
    except KeyError:
        for i, e in zip(idx, sel):
            if key not in e:
                raise Damaged(f"{describe_event(events, i)} has no '{key}'") from None
        raise


def _ints(events: list, idx: list[int], values: list, what: str) -> np.ndarray:
    """`values` as int64; Damaged naming the first event whose value is no integer."""
    try:
        out = np.array(values, dtype=np.int64)
        if out.ndim == 1:
            return out
    except (TypeError, ValueError, OverflowError):
        pass
    for i, v in zip(idx, values):
        try:
            ok = np.array([v], dtype=np.int64).ndim == 1
        except (TypeError, ValueError, OverflowError):
            ok = False
        if not ok:
            raise Damaged(f"{describe_event(events, i)} has a {what} that is not an integer ({v!r:.40})")
    raise Damaged(f"a {what} of these events is not an integer")


def args_of(sel: list) -> list[dict]:
    """Each event's `args` object ({} when it has none or it is not an object)."""
    return [a if isinstance(a, dict) else {} for a in map(operator.methodcaller("get", "args"), sel)]


def arg_ints(events: list, idx: list[int], args: list[dict], key: str, default: int | None,
             what: str) -> np.ndarray:
    """`args[key]` of each event as int64 (`default` when missing; NULL_INT when missing or null without one)."""
    fill = NULL_INT if default is None else default
    values = [fill if v is None else v for v in map(operator.methodcaller("get", key), args)]
    return _ints(events, idx, values, f"args.{key} ({what})")


_DIGITS = np.zeros(256, dtype=bool)
_DIGITS[ord("0"):ord("9") + 1] = True


def _ns_fast(values: list) -> np.ndarray | None:
    """`ns_of` of every value at C speed when all are Kineto's form — decimal text with exactly three decimals and
    at most 15 integer digits (below 2**62 ns) — else None (the caller converts value by value). The values are
    joined, checked character by character with NumPy, and parsed as integers once their points are dropped."""
    if not values:
        return np.empty(0, dtype=np.int64)
    try:
        raw = ",".join(values).encode("ascii")
    except (TypeError, UnicodeEncodeError):
        return None
    b = np.frombuffer(raw, dtype=np.uint8)
    commas = np.flatnonzero(b == 44)
    if len(commas) != len(values) - 1:
        return None
    ends = np.append(commas, len(b))
    starts = np.concatenate(([0], commas + 1))
    dots = np.flatnonzero(b == 46)
    if len(dots) != len(values) or not (dots == ends - 4).all():
        return None
    minus = np.flatnonzero(b == 45)
    signed = b[np.minimum(starts, len(b) - 1)] == 45
    if len(minus) != int(signed.sum()) or not (_DIGITS[b] | (b == 44) | (b == 46) | (b == 45)).all():
        return None
    digits = dots - starts - signed
    if not ((digits >= 1) & (digits <= 15)).all():
        return None
    out = np.fromstring(raw.replace(b".", b"").decode("ascii"), dtype=np.int64, sep=",")
    return out if len(out) == len(values) else None


def ns_column(events: list, idx: list[int], values: list, key: str) -> np.ndarray:
    """Nanoseconds of the `key` ("ts"/"dur") values of the events at `idx`: `_ns_fast`, else `ns_of` one by one;
    Damaged naming the first value that is missing, no number, or no time (|ns| ≥ 2**62)."""
    out = _ns_fast(values)
    if out is None:
        try:
            out = _ns_array(values)
        except (TypeError, ValueError, OverflowError, ArithmeticError):
            out = None
    if out is None or (len(out) and np.abs(out).max() >= MAX_NS):
        for i, v in zip(idx, values):
            try:
                ok = abs(ns_of(v)) < MAX_NS
            except (TypeError, ValueError, OverflowError, ArithmeticError):
                ok = False
            if not ok:
                if v is None:
                    raise Damaged(f"{describe_event(events, i)} has no '{key}'")
                raise Damaged(f"{describe_event(events, i)} has a {key} ({v!r:.40}) that is no time in microseconds")
    assert out is not None
    return out


def refuse_negative(events: list, idx: list[int], dur: np.ndarray) -> None:
    negative = np.flatnonzero(dur < 0)
    if len(negative):
        i = idx[int(negative[0])]
        raise Damaged(f"{len(negative)} event(s) have a negative duration (first: {describe_event(events, i)}, dur "
                      f"{events[i].get('dur')} µs): Kineto writes none, the file is damaged")


def names_of(events: list, idx: list[int], sel: list) -> list[str]:
    names = _values(events, idx, sel, "name")
    for i, n in zip(idx, names):
        if type(n) is not str:
            raise Damaged(f"{describe_event(events, i)} has a name that is not text ({n!r:.40})")
    return names


def small_int(value: Any) -> bool:
    """An integer an int64 column holds with room (|value| < 2**62; not a bool)."""
    return type(value) is int and -MAX_NS < value < MAX_NS


def categorical(values: list | np.ndarray) -> pd.Categorical:
    codes, cats = pd.factorize(np.asarray(values, dtype=object), use_na_sentinel=True)
    return pd.Categorical.from_codes(codes, categories=pd.Index(cats, dtype=object))


class Spans:
    """Complete events of one category as columns: event positions, names (a list of texts until `name` is first
    asked for: Python frames are many, and most analyses never look at them), process and thread ids, times."""

    def __init__(self, index: np.ndarray, names: list[str], pid: np.ndarray, tid: np.ndarray, start: np.ndarray,
                 dur: np.ndarray):
        self.index, self.pid, self.tid, self.start, self.dur = index, pid, tid, start, dur
        self._names: list[str] | None = names
        self._name: pd.Categorical | None = None
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


_SPAN_KEYS = operator.itemgetter("ph", "name", "pid", "tid", "ts", "dur")


def complete_events(events: list, at: list[int]) -> tuple[list[int], tuple]:
    """The complete ("X") events among those at `at` (positions into `events`): their positions and their columns
    (name, pid, tid, ts, dur), read in one pass over the events (each event's memory is touched once: on big traces
    the passes, not the work per value, are the cost)."""
    sel = [events[i] for i in at]
    try:
        rows = list(map(_SPAN_KEYS, sel))
    except KeyError:  # some event lacks a key: keep the complete ones, then say which of those lacks what
        phases = list(map(operator.methodcaller("get", "ph"), sel))
        at = [i for i, ph in zip(at, phases) if ph == "X"]
        sel = [events[i] for i in at]
        for key in ("name", "pid", "tid", "ts", "dur"):
            _values(events, at, sel, key)
        rows = list(map(_SPAN_KEYS, sel))
    if not rows:
        return at, ((),) * 5
    ph, *columns = zip(*rows)
    if ph.count("X") != len(ph):
        keep = [k for k, p in enumerate(ph) if p == "X"]
        at = [at[k] for k in keep]
        columns = [tuple(c[k] for k in keep) for c in columns]
    return at, tuple(columns)


def spans_of(events: list, at: list[int]) -> Spans:
    idx, (names, pid, tid, ts, dur) = complete_events(events, at)
    if set(map(type, names)) - {str}:
        names_of(events, idx, [events[i] for i in idx])
    start = ns_column(events, idx, list(ts), "ts")
    duration = ns_column(events, idx, list(dur), "dur")
    refuse_negative(events, idx, duration)
    return Spans(np.asarray(idx, dtype=np.int64), list(names), _ints(events, idx, list(pid), "pid"),
                 _ints(events, idx, list(tid), "tid"), start, duration)


def refuse_duplicates(columns: dict[str, Any], events: list, index: np.ndarray, what: str) -> None:
    """Damaged when two events of `what` agree in every one of `columns` (the same event twice: two traces merged,
    or a damaged file; a kernel counted twice would double every GPU figure)."""
    if len(index) < 2:
        return
    frame = pd.DataFrame(columns, copy=False)
    dup = frame.duplicated(keep="first").to_numpy()
    if dup.any():
        first = int(index[int(np.flatnonzero(dup)[0])])
        raise Damaged(f"{int(dup.sum())} {what} event(s) appear twice (first repeat: {describe_event(events, first)}): "
                      "two traces merged into one file, or a damaged file")


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


def categories_of(events: list) -> tuple[np.ndarray, list, dict[str, int]]:
    """Per event a code into the distinct categories (-1: none), the categories, and events per category (events
    without one counted by phase, "(M events)")."""
    try:
        cats = list(map(operator.methodcaller("get", "cat"), events))
    except AttributeError:
        i = next(k for k, e in enumerate(events) if not isinstance(e, dict))
        raise Damaged(f"traceEvents[{i}] is not an event (a JSON object): {events[i]!r:.60}") from None
    try:
        codes, uniq = pd.factorize(np.fromiter(cats, dtype=object, count=len(cats)), use_na_sentinel=True)
    except TypeError:  # an unhashable `cat` (a list, an object)
        i = next(k for k, c in enumerate(cats) if isinstance(c, (list, dict)))
        raise Damaged(f"traceEvents[{i}] has a 'cat' that is not a name: {cats[i]!r:.60}") from None
    counts = {str(c): int(n) for c, n in zip(uniq, np.bincount(codes[codes >= 0], minlength=len(uniq)))}
    for i in np.flatnonzero(codes < 0).tolist():
        key = f"({events[i].get('ph')!s:.8} events)"
        counts[key] = counts.get(key, 0) + 1
    return codes, list(uniq), counts


def version_text(key: str, value: Any) -> str:
    """A version the file states, as text: CUDA's integers (12090) as major.minor ("12.9")."""
    if key.startswith("cuda") and type(value) is int and value >= 1000:
        return f"{value // 1000}.{value % 1000 // 10}"
    if isinstance(value, list):
        return ".".join(str(v) for v in value)
    return str(value)
