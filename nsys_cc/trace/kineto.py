"""Reading PyTorch-profiler (Kineto) traces: `KinetoTrace`, the `Trace` of a Chrome-trace JSON file.

vLLM's torch profiler, `torch.profiler.profile(...).export_chrome_trace`, SGLang and TensorRT-LLM's PyTorch backend
write one such file per process (`*.pt.trace.json.gz`; `.json` too): an object whose `traceEvents` list holds every
event. `KinetoTrace` reads it once, read-only, and gives the tables of an Nsight Systems export with the same columns,
dtypes and units (int64 ns; `frames.py`), so that the projection (`nsys_cc.analysis.forwards.projection`), its
CUDA-graph
attribution and the analyses built on it need no second code path:

- ranges (`nvtx_ranges`): `user_annotation` events (`torch.profiler.record_function`, Kineto's NVTX; vLLM's
  `execute_context_…_generation_…` steps), domain "". `python_function` frames (with_stack traces: most of the events)
  only when asked for by name or prefix (`nvtx_ranges(names=…, prefixes=…)`, e.g. `prefixes=["vllm/v1/spec_decode/"]`),
  in the domain "python_function"; or all of them with `python_frames()`. Nesting (`level`, `parent_id`) is among
  the ranges of the same category on the same thread. `range_id` is the event's position in `traceEvents`.
- launches (`cuda_api`): `cuda_runtime` (api "runtime") and `cuda_driver` ("driver") events, `args.correlation`.
- GPU ops (`kernels`, `memops`, `gpu_ops`): `kernel`, `gpu_memcpy`, `gpu_memset` events with `args.device`,
  `args.stream`, `args.correlation`; the process of an op is that of the launch with its correlation id (Kineto puts
  GPU ops in a pseudo-process named by the device), so the projection's join on (process, correlation id) is nsys's.
  A `cudaGraphLaunch` shares its correlation id with every kernel of the graph, as in nsys's node-level traces.
  Memcpy directions are named as nsys names them (`HtoD` → "Host-to-Device").
- processes, threads (`process_name`, `thread_name` metadata), devices (`deviceProperties`), the rank
  (`distributedInfo`), and `info()`: the versions the file states, event counts per category, CUDA and ranges present.

Ignored: `cpu_op` (aten ops), `gpu_user_annotation` (Kineto's own projection of a range onto a stream: approximate, so
the projection is computed as nsys computes it instead), flow events (`ac2g`: the correlation ids say the same),
`overhead`, `Trace`, instant and counter events, and events of the kept categories that are not complete ("X") events.

Times: `ts` and `dur` are microseconds written with the nanoseconds as three decimals, on a clock whose values have
~16 significant digits, so a float64 loses the last nanoseconds. The reader never makes a float of them: the JSON
parser hands each number's text over (`parse_float=str`) and `ns_of` turns it into integer nanoseconds exactly
(more than three decimals: rounded half to even; an integer: whole microseconds). Times are the file's own clock
(`ts` × 1000); `baseTimeNanoseconds` is reported by `info()`, not added.

Bad input: a file that is not gzip or JSON, truncated, without `traceEvents`, nested too deep, with NaN or Infinity,
numbers no nanosecond count can hold, a negative `dur`, a kept event without its times, or the same event twice (two
traces merged) raises `InputError` with one line naming the file; the file is only read. Text that is not UTF-8 is
read with U+FFFD in place of the bad bytes (as the SQLite reader does).
"""

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
from collections.abc import Collection, Iterator, Mapping
from types import MappingProxyType
from typing import Any

import numpy as np
import pandas as pd

from .. import inputs, progress
from ..arguments import many
from ..errors import InputError, TraceClosedError
from . import frames, nvtx
from .bulk import NULL_INT, PID_MASK, nullable
from .frames import lists_columns
from .nesting import NO_PARENT, nest
from .pages import small_pages
from .source import TraceInfo, handed_out

FORMAT = "kineto"
GZIP_MAGIC = b"\x1f\x8b"
# Uncompressed bytes read at most ($NSYS_CC_MAX_TRACE_BYTES): a gzip bomb, or a trace too big for memory, is refused
# before it is parsed (parsing holds the text and its events: about 4× the file's size).
ENV_MAX_BYTES = "NSYS_CC_MAX_TRACE_BYTES"
DEFAULT_MAX_BYTES = 16 << 30
# Timestamps and durations beyond this many ns (146 years) are no times of a trace: refused, so that no end overflows.
MAX_NS = 1 << 62

RANGE_DOMAIN = ""
FRAME_DOMAIN = "python_function"
# Kineto's categories (lower case: older Kineto wrote "Kernel", "Runtime", "Memcpy", …) → what the reader makes of them.
RANGE, FRAME, API_RUNTIME, API_DRIVER, KERNEL, MEMCPY, MEMSET = range(7)
ROLES = {
    "user_annotation": RANGE, "python_function": FRAME,
    "cuda_runtime": API_RUNTIME, "runtime": API_RUNTIME, "cuda_driver": API_DRIVER, "driver": API_DRIVER,
    "kernel": KERNEL, "gpu_memcpy": MEMCPY, "memcpy": MEMCPY, "gpu_memset": MEMSET, "memset": MEMSET,
}
# Kineto's memcpy kinds (`Memcpy HtoD (Pinned -> Device)`) as nsys's ENUM_CUDA_MEMCPY_OPER labels them.
COPY_KINDS = {"HtoD": "Host-to-Device", "DtoH": "Device-to-Host", "HtoA": "Host-to-Array", "AtoH": "Array-to-Host",
              "AtoA": "Array-to-Array", "AtoD": "Array-to-Device", "DtoA": "Device-to-Array",
              "DtoD": "Device-to-Device", "HtoH": "Host-to-Host", "PtoP": "Peer-to-Peer"}
_COPY_NAME = re.compile(r"Memcpy\s+(\S+)")
# Accessor → its columns, as the SQLite reader gives them.
TABLES = frames.TABLES


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
def _no_collection() -> Iterator[None]:
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
class _Damaged(Exception):
    """An event the reader cannot take (message without the file's name; `KinetoTrace` adds it)."""


def _describe(events: list, i: int) -> str:
    e = events[i]
    cat = e.get("cat") if isinstance(e, dict) else None
    name = e.get("name") if isinstance(e, dict) else None
    label = f"{cat} " if isinstance(cat, str) else ""
    if isinstance(name, str):
        label += repr(name if len(name) <= 60 else name[:59] + "…") + " "
    return f"traceEvents[{i}] ({label.strip() or 'an event'})"


def _values(events: list, idx: list[int], sel: list, key: str) -> list:
    """`event[key]` of each event of `sel` (the events at `idx`), in one C-level pass; _Damaged naming the first event
    without it."""
    try:
        return list(map(operator.itemgetter(key), sel))
    except KeyError:
        for i, e in zip(idx, sel):
            if key not in e:
                raise _Damaged(f"{_describe(events, i)} has no '{key}'") from None
        raise


def _ints(events: list, idx: list[int], values: list, what: str) -> np.ndarray:
    """`values` as int64; _Damaged naming the first event whose value is no integer."""
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
            raise _Damaged(f"{_describe(events, i)} has a {what} that is not an integer ({v!r:.40})")
    raise _Damaged(f"a {what} of these events is not an integer")


def _args(sel: list) -> list[dict]:
    """Each event's `args` object ({} when it has none or it is not an object)."""
    return [a if isinstance(a, dict) else {} for a in map(operator.methodcaller("get", "args"), sel)]


def _arg_ints(events: list, idx: list[int], args: list[dict], key: str, default: int | None,
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


def _ns_column(events: list, idx: list[int], values: list, key: str) -> np.ndarray:
    """Nanoseconds of the `key` ("ts"/"dur") values of the events at `idx`: `_ns_fast`, else `ns_of` one by one;
    _Damaged naming the first value that is missing, no number, or no time (|ns| ≥ 2**62)."""
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
                    raise _Damaged(f"{_describe(events, i)} has no '{key}'")
                raise _Damaged(f"{_describe(events, i)} has a {key} ({v!r:.40}) that is no time in microseconds")
    assert out is not None
    return out


def _nonnegative(events: list, idx: list[int], dur: np.ndarray) -> None:
    negative = np.flatnonzero(dur < 0)
    if len(negative):
        i = idx[int(negative[0])]
        raise _Damaged(f"{len(negative)} event(s) have a negative duration (first: {_describe(events, i)}, dur "
                       f"{events[i].get('dur')} µs): Kineto writes none, the file is damaged")


def _names(events: list, idx: list[int], sel: list) -> list[str]:
    names = _values(events, idx, sel, "name")
    for i, n in zip(idx, names):
        if type(n) is not str:
            raise _Damaged(f"{_describe(events, i)} has a name that is not text ({n!r:.40})")
    return names


def _small_int(value: Any) -> bool:
    """An integer an int64 column holds with room (|value| < 2**62; not a bool)."""
    return type(value) is int and -MAX_NS < value < MAX_NS


def _categorical(values: list | np.ndarray) -> pd.Categorical:
    codes, cats = pd.factorize(np.asarray(values, dtype=object), use_na_sentinel=True)
    return pd.Categorical.from_codes(codes, categories=pd.Index(cats, dtype=object))


class _Spans:
    """Complete events of one category as columns: event positions, names (a list of texts until `name` is first
    asked for: Python frames are many, and most analyses never look at them), process and thread ids, times."""

    def __init__(self, index: np.ndarray, names: list[str], pid: np.ndarray, tid: np.ndarray, start: np.ndarray,
                 dur: np.ndarray):
        self.index, self.pid, self.tid, self.start, self.dur = index, pid, tid, start, dur
        self._names: list[str] | None = names
        self._name: pd.Categorical | None = None
        self.gtid = np.empty(0, dtype=np.int64)

    @property
    def name(self) -> pd.Categorical:
        if self._name is None:
            self._name = _categorical(self._names or [])
            self._names = None
        return self._name

    @property
    def names(self) -> list[str]:
        """The names as a list of texts."""
        return list(self._names) if self._names is not None else [str(n) for n in self.name]

    def __len__(self) -> int:
        return len(self.index)


_SPAN_KEYS = operator.itemgetter("ph", "name", "pid", "tid", "ts", "dur")


def _complete(events: list, at: list[int]) -> tuple[list[int], tuple]:
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


def _spans(events: list, at: list[int]) -> _Spans:
    idx, (names, pid, tid, ts, dur) = _complete(events, at)
    if set(map(type, names)) - {str}:
        _names(events, idx, [events[i] for i in idx])
    start = _ns_column(events, idx, list(ts), "ts")
    duration = _ns_column(events, idx, list(dur), "dur")
    _nonnegative(events, idx, duration)
    return _Spans(np.asarray(idx, dtype=np.int64), list(names), _ints(events, idx, list(pid), "pid"),
                  _ints(events, idx, list(tid), "tid"), start, duration)


def _duplicates(columns: dict[str, Any], events: list, index: np.ndarray, what: str) -> None:
    """_Damaged when two events of `what` agree in every one of `columns` (the same event twice: two traces merged,
    or a damaged file; a kernel counted twice would double every GPU figure)."""
    if len(index) < 2:
        return
    frame = pd.DataFrame(columns, copy=False)
    dup = frame.duplicated(keep="first").to_numpy()
    if dup.any():
        first = int(index[int(np.flatnonzero(dup)[0])])
        raise _Damaged(f"{int(dup.sum())} {what} event(s) appear twice (first repeat: {_describe(events, first)}): "
                       "two traces merged into one file, or a damaged file")


class _Ids:
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


def _categories(events: list) -> tuple[np.ndarray, list, dict[str, int]]:
    """Per event a code into the distinct categories (-1: none), the categories, and events per category (events
    without one counted by phase, "(M events)")."""
    try:
        cats = list(map(operator.methodcaller("get", "cat"), events))
    except AttributeError:
        i = next(k for k, e in enumerate(events) if not isinstance(e, dict))
        raise _Damaged(f"traceEvents[{i}] is not an event (a JSON object): {events[i]!r:.60}") from None
    try:
        codes, uniq = pd.factorize(np.fromiter(cats, dtype=object, count=len(cats)), use_na_sentinel=True)
    except TypeError:  # an unhashable `cat` (a list, an object)
        i = next(k for k, c in enumerate(cats) if isinstance(c, (list, dict)))
        raise _Damaged(f"traceEvents[{i}] has a 'cat' that is not a name: {cats[i]!r:.60}") from None
    counts = {str(c): int(n) for c, n in zip(uniq, np.bincount(codes[codes >= 0], minlength=len(uniq)))}
    for i in np.flatnonzero(codes < 0).tolist():
        key = f"({events[i].get('ph')!s:.8} events)"
        counts[key] = counts.get(key, 0) + 1
    return codes, list(uniq), counts


class KinetoTrace:
    """One PyTorch-profiler (Kineto) trace, read whole once and kept in memory (implements `nsys_cc.trace.Trace`;
    module docstring for what is mapped). Open it with `nsys_cc.open_trace(path)`.

    Attributes:
        path: the file given.
        format: "kineto".
        nsys_version: None (no nsys wrote it).
        schema_version: the file's `schemaVersion` as text, or None.
        metadata: the file's top-level entries other than `traceEvents`, read-only (versions, `deviceProperties`,
            `distributedInfo`, `with_stack`, `baseTimeNanoseconds`, …; numbers with decimals as their text).
        event_counts: events per category (events without one by phase: "(M events)"), most first.
        rank, world_size: from `distributedInfo` (None when the trace has none).
    """

    format = FORMAT
    nsys_version: str | None = None

    def __init__(self, path: str | os.PathLike):
        self.path = os.fsdecode(os.fspath(path))
        self._closed = False
        self._tables: dict[str, pd.DataFrame] = {}
        try:
            size = os.stat(path).st_size
        except OSError as exc:
            raise InputError(f"{self.path}: cannot read: {exc.strerror}") from None
        with progress.step(f"reading {os.path.basename(self.path)} ({size / 1e6:.0f} MB)", always=size >= 50e6), \
                small_pages(), _no_collection():
            doc = read_document(path)
            try:
                self._build(doc)
            except _Damaged as exc:
                raise InputError(f"{self.path}: {exc}") from None
            del doc

    # -- reading ----------------------------------------------------------------------------------------------------
    def _build(self, doc: dict) -> None:
        events = doc.pop("traceEvents")
        self.metadata: Mapping[str, Any] = MappingProxyType(doc)
        codes, cats, counts = _categories(events)
        self.event_counts: Mapping[str, int] = MappingProxyType(dict(sorted(counts.items(), key=lambda kv: -kv[1])))
        kept: list[list[int]] = [[] for _ in range(7)]
        spellings = [0] * 7
        for code, cat in enumerate(cats):
            role = ROLES.get(cat.lower()) if isinstance(cat, str) else None
            if role is not None:
                kept[role] += np.flatnonzero(codes == code).tolist()
                spellings[role] += 1
        for role in range(7):
            if spellings[role] > 1:  # two spellings of one category (older Kineto's "Kernel" beside "kernel")
                kept[role].sort()
        no_cat = np.flatnonzero(codes < 0).tolist()
        self._metadata_events(events, [i for i in no_cat if events[i].get("ph") == "M"])

        ranges = _spans(events, kept[RANGE])
        frames_ = _spans(events, kept[FRAME])
        runtime = _spans(events, kept[API_RUNTIME])
        driver = _spans(events, kept[API_DRIVER])
        api = _Spans(np.concatenate([runtime.index, driver.index]), runtime.names + driver.names,
                     np.concatenate([runtime.pid, driver.pid]), np.concatenate([runtime.tid, driver.tid]),
                     np.concatenate([runtime.start, driver.start]), np.concatenate([runtime.dur, driver.dur]))
        api_idx = api.index.tolist()
        api_kind = np.repeat(np.array([0, 1], dtype=np.int8), [len(runtime), len(driver)])
        api_corr = _arg_ints(events, api_idx, _args([events[i] for i in api_idx]), "correlation", 0, "correlation id")
        ops = self._ops(events, kept)

        pids = np.concatenate([ranges.pid, frames_.pid, api.pid, ops["device_id"],
                               np.array(list(self._process_names), dtype=np.int64),
                               np.array([p for p, _ in self._thread_names], dtype=np.int64)])
        tids = np.concatenate([ranges.tid, frames_.tid, api.tid, np.zeros(1, np.int64),
                               np.array([t for _, t in self._thread_names], dtype=np.int64)])
        ids = self._ids = _Ids(pids, tids)
        for spans in (ranges, frames_, api):
            spans.gtid = ids.gtid(spans.pid, spans.tid)

        # A GPU op's process is its launch's (Kineto files it under the device): correlation id → launching process.
        known = np.flatnonzero(api_corr != 0)
        corr = pd.Index(api_corr[known])
        first = known[~corr.duplicated(keep="first")]
        at = pd.Index(api_corr[first]).get_indexer(ops["correlation_id"])
        at[ops["correlation_id"] == 0] = -1
        launch = first[np.maximum(at, 0)]
        found = at >= 0
        ops["global_pid"] = np.where(found, (api.gtid & PID_MASK)[launch] if len(first) else 0,
                                     ids.gpid(ops["device_id"]))
        ops["pid"] = np.where(found, api.pid[launch] if len(first) else 0, ops["device_id"])

        _duplicates({"name": ranges.name.codes, "g": ranges.gtid, "s": ranges.start, "d": ranges.dur}, events,
                    ranges.index, "user_annotation")
        _duplicates({"k": api_kind, "name": api.name.codes, "g": api.gtid, "s": api.start, "d": api.dur,
                     "c": api_corr}, events, api.index, "CUDA API")
        _duplicates({c: ops[c] for c in ("kind", "device_id", "stream_id", "start_ns", "duration_ns", "correlation_id",
                                         "name_code")}, events, ops["index"], "GPU")
        self._ranges, self._frames, self._api, self._api_kind, self._api_corr = ranges, frames_, api, api_kind, api_corr
        self._ops_columns = ops
        self.schema_version: str | None = None if doc.get("schemaVersion") is None else str(doc.get("schemaVersion"))
        dist = doc.get("distributedInfo")
        dist = dist if isinstance(dist, dict) else {}
        self.rank: int | None = dist.get("rank") if type(dist.get("rank")) is int else None
        self.world_size: int | None = dist.get("world_size") if type(dist.get("world_size")) is int else None

    def _metadata_events(self, events: list, meta: list[int]) -> None:
        """process_name / process_labels / thread_name metadata of integer processes and threads."""
        procs: dict[int, dict[str, str]] = {}
        threads: dict[tuple[int, int], str] = {}
        for i in meta:
            e = events[i]
            pid, tid, args = e.get("pid"), e.get("tid"), e.get("args")
            if not _small_int(pid) or not isinstance(args, dict):
                continue
            kind = e.get("name")
            if kind == "process_name" and isinstance(args.get("name"), str):
                procs.setdefault(pid, {})["name"] = args["name"]
            elif kind == "process_labels" and isinstance(args.get("labels"), str):
                procs.setdefault(pid, {})["labels"] = args["labels"]
            elif kind == "thread_name" and _small_int(tid) and isinstance(args.get("name"), str):
                threads[(pid, tid)] = args["name"]
        self._process_names = procs
        self._thread_names = threads

    def _ops(self, events: list, kept: list[list[int]]) -> dict[str, np.ndarray]:
        """The GPU ops' columns (kernels, then memcpy, then memset; each in file order), launch shapes and bytes."""
        parts = [_complete(events, kept[role]) for role in (KERNEL, MEMCPY, MEMSET)]
        idx = [i for at, _ in parts for i in at]
        names = [n for _, columns in parts for n in columns[0]]
        if set(map(type, names)) - {str}:
            _names(events, idx, [events[i] for i in idx])
        start = _ns_column(events, idx, [t for _, columns in parts for t in columns[3]], "ts")
        dur = _ns_column(events, idx, [d for _, columns in parts for d in columns[4]], "dur")
        _nonnegative(events, idx, dur)
        sel = [events[i] for i in idx]
        args = _args(sel)
        device = _arg_ints(events, idx, args, "device", -1, "device")
        stream = _arg_ints(events, idx, args, "stream", -1, "stream")
        for k in np.flatnonzero((device == -1) | (stream == -1)).tolist():  # older Kineto: no args.device/stream
            e = events[idx[k]]
            pid, tid = e.get("pid"), e.get("tid")
            named = re.fullmatch(r"(?:stream\s*)?(\d{1,18})", tid.strip()) if isinstance(tid, str) else None
            if device[k] == -1:
                if not _small_int(pid):
                    raise _Damaged(f"{_describe(events, idx[k])} names no device (args.device, or an integer pid)")
                device[k] = pid
            if stream[k] == -1:
                if not _small_int(tid) and not named:
                    raise _Damaged(f"{_describe(events, idx[k])} names no stream (args.stream, or an integer tid)")
                stream[k] = tid if _small_int(tid) else int(named.group(1)) if named else -1
        n_kernel = len(parts[0][0])
        kind = np.repeat(np.array([0, 1, 2], dtype=np.int8), [len(at) for at, _ in parts])
        name_codes, _ = pd.factorize(np.asarray(names, dtype=object))
        grid = np.zeros((n_kernel, 3), dtype=np.int64)
        block = np.zeros((n_kernel, 3), dtype=np.int64)
        for k in range(n_kernel):
            for key, out in (("grid", grid), ("block", block)):
                dims = args[k].get(key)
                if isinstance(dims, list) and len(dims) == 3 and all(_small_int(d) for d in dims):
                    out[k] = dims
                elif dims is not None:
                    raise _Damaged(f"{_describe(events, idx[k])} has an args.{key} that is not three integers "
                                   f"({dims!r:.40})")
        k_idx, m_idx = idx[:n_kernel], idx[n_kernel:]
        return {
            "index": np.asarray(idx, dtype=np.int64), "kind": kind, "names": np.asarray(names, dtype=object),
            "name_code": name_codes, "start_ns": start, "duration_ns": dur, "end_ns": start + dur,
            "device_id": device, "context_id": _arg_ints(events, idx, args, "context", 0, "context"),
            "stream_id": stream, "correlation_id": _arg_ints(events, idx, args, "correlation", 0, "correlation id"),
            "grid": grid, "block": block,
            "registers": _arg_ints(events, k_idx, args[:n_kernel], "registers per thread", 0, "registers per thread"),
            "shared": _arg_ints(events, k_idx, args[:n_kernel], "shared memory", 0, "shared memory"),
            "graph_node": _arg_ints(events, k_idx, args[:n_kernel], "graph node id", None, "graph node id"),
            "mem_graph_node": _arg_ints(events, m_idx, args[n_kernel:], "graph node id", None, "graph node id"),
            "bytes": _arg_ints(events, m_idx, args[n_kernel:], "bytes", 0, "bytes"),
        }

    # -- the Trace protocol -------------------------------------------------------------------------------------------
    def __enter__(self) -> KinetoTrace:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        """Forget the tables (a closed trace answers no more queries: TraceClosedError; `info()` and `path` stay)."""
        self._closed = True
        self._tables.clear()

    @property
    def closed(self) -> bool:
        return self._closed

    def _check_open(self) -> None:
        if self._closed:
            raise TraceClosedError(f"{self.path}: the trace is closed (its `with` block ended, or close() was called): "
                                   "open it again with nsys_cc.open_trace(path), or query it inside the block")

    def __repr__(self) -> str:
        return (f"Trace({self.path!r}, PyTorch profiler (Kineto), {sum(self.event_counts.values()):,} events"
                f"{', closed' if self._closed else ''})")

    @property
    def has_cuda(self) -> bool:
        """CUDA runtime/driver calls and GPU ops (kernels, copies or sets) present."""
        return len(self._api) > 0 and len(self._ops_columns["index"]) > 0

    @property
    def has_nvtx(self) -> bool:
        """`user_annotation` ranges present (Kineto's counterpart of NVTX ranges)."""
        return len(self._ranges) > 0

    def count(self, table: str) -> int:
        """Rows the accessor named `table` returns whole ("nvtx_ranges": the user_annotation ranges; "cuda_api",
        "kernels", "memops", "graph_launches" — always 0: Kineto records no graph-level activity —, "gpu_ops")."""
        kinds = self._ops_columns["kind"]
        return {"nvtx_ranges": len(self._ranges), "cuda_api": len(self._api), "kernels": int((kinds == 0).sum()),
                "memops": int((kinds > 0).sum()), "graph_launches": 0, "gpu_ops": len(kinds)}.get(table, 0)

    def has_loaded(self, table: str) -> bool:
        """True for every table: the whole file was read when the trace was opened."""
        return table in TABLES

    def info(self) -> TraceInfo:
        """What the trace holds (`nsys-cc info`): format, the versions the file states, schemaVersion, events per
        category, CUDA data and ranges present, devices, rank (`TraceInfo.details`)."""
        meta = self.metadata
        versions = {k: _version(k, v) for k, v in meta.items() if "version" in k.lower() and k != "schemaVersion"
                    and isinstance(v, (int, str, list))}
        names = self._ranges.name
        counts = pd.Series(names.codes).value_counts()
        ranges = {str(names.categories[c]): int(n) for c, n in counts.items() if c >= 0}
        details = {
            "versions": versions,
            "devices": [{k: d.get(k) for k in ("id", "name", "totalGlobalMem", "computeMajor", "computeMinor",
                                               "numSms")} for d in self._device_properties()],
            "rank": self.rank, "world_size": self.world_size,
            "backend": (meta.get("distributedInfo") or {}).get("backend") if isinstance(meta.get("distributedInfo"),
                                                                                   dict) else None,
            "with_stack": bool(meta.get("with_stack")) if meta.get("with_stack") is not None else None,
            "python_frames": len(self._frames),
            "base_time_ns": meta.get("baseTimeNanoseconds") if type(meta.get("baseTimeNanoseconds")) is int else None,
            "processes": {str(p): v.get("name", "") for p, v in sorted(self._process_names.items())},
            "ranges": ranges,
        }
        return TraceInfo(path=self.path, sqlite_path=None, nsys_version=None, schema_version=self.schema_version,
                         has_cuda=self.has_cuda, has_nvtx=self.has_nvtx, tables=self.event_counts, format=FORMAT,
                         details=MappingProxyType(details))

    def _device_properties(self) -> list[dict]:
        props = self.metadata.get("deviceProperties")
        return [d for d in props if isinstance(d, dict)] if isinstance(props, list) else []

    def _kept(self, key: str, build) -> pd.DataFrame:
        self._check_open()
        if key not in self._tables:
            with small_pages():
                self._tables[key] = build()
        return handed_out(self._tables[key])

    # -- ranges ---------------------------------------------------------------------------------------------------
    def _range_frame(self, spans: _Spans, domain: str, rows: np.ndarray | None, nesting: bool) -> pd.DataFrame:
        """Ranges in the columns of `nvtx_ranges` (rows: positions to keep, None for all), nested among `spans`."""
        n_all = len(spans)
        if nesting:
            parent, level = nest(spans.gtid, spans.start, spans.start + spans.dur, np.ones(n_all, dtype=bool))
            parent_id = np.where(parent == NO_PARENT, NULL_INT, spans.index[np.maximum(parent, 0)])
        if rows is None:
            rows = np.arange(n_all)
        n = len(rows)
        name = spans.name.take(rows) if n != n_all else spans.name
        name = nvtx.names_of_rows(pd.DataFrame({"name": name}))["name"].array
        start = spans.start[rows]
        end = start + spans.dur[rows]
        qualified = name if not domain else pd.Categorical.from_codes(
            name.codes, categories=pd.Index([f"{domain}:{c}" for c in name.categories], dtype=object))
        missing = np.full(n, NULL_INT, dtype=np.int64)
        return pd.DataFrame({
            "range_id": spans.index[rows],
            "name": name,
            "domain": pd.Categorical.from_codes(np.zeros(n, dtype=np.int8),
                                                categories=pd.Index([domain], dtype=object)),
            "qualified_name": qualified,
            "range_style": pd.Categorical.from_codes(np.zeros(n, dtype=np.int8), categories=["push/pop", "start/end"]),
            "start_ns": start,
            "end_ns": end,
            "duration_ns": end - start,
            "global_tid": spans.gtid[rows],
            "pid": spans.pid[rows],
            "tid": spans.tid[rows],
            "end_global_tid": nullable(missing),
            "ended_on_other_thread": np.zeros(n, dtype=bool),
            "level": level[rows].astype(np.int64) if nesting else nullable(missing),
            "parent_id": nullable(parent_id[rows] if nesting else missing),
            "payload": np.full(n, np.nan),
            "category": nullable(missing),
            "open_at_end": np.zeros(n, dtype=bool),
        }, copy=False)

    @lists_columns(("Columns", frames.NVTX_RANGES))
    def nvtx_ranges(self, names: Collection[str] | None = None, *, prefixes: Collection[str] = (),
                    nesting: bool = True, warn: bool = True) -> pd.DataFrame:
        """The trace's ranges in the columns of an export's NVTX ranges: every `user_annotation` (domain ""); with
        `names` / `prefixes`, those that match (`nsys_cc.trace.nvtx.matches`) and also the `python_function` frames
        that do (domain "python_function": `prefixes=["vllm/v1/spec_decode/"]`, or a frame's full name), by start.
        `nesting=False`: `level` and `parent_id` <NA>. Nesting is among ranges of the same category on a thread.
        Names that match nothing warn with the closest names unless `warn=False` (`ExportTrace.nvtx_ranges`)."""
        names = None if names is None else [str(n) for n in many(names, "names")]
        prefixes = [str(p) for p in many(prefixes, "prefixes")]
        if warn and names and not prefixes:
            found = self.nvtx_ranges(names, nesting=nesting, warn=False)
            if found.empty:
                nvtx.warn_no_such_names(self, names)
            return found
        whole = names is None and not prefixes
        key = f"nvtx_ranges:{None if names is None else sorted(names)!r}:{sorted(prefixes)!r}:{nesting}"
        if whole and nesting:
            key = "nvtx_ranges"

        def build() -> pd.DataFrame:
            if whole:
                return self._range_frame(self._ranges, RANGE_DOMAIN, None, nesting)
            parts: list[pd.DataFrame] = []
            for spans, domain in ((self._ranges, RANGE_DOMAIN), (self._frames, FRAME_DOMAIN)):
                probe = pd.DataFrame({"name": spans.name, "qualified_name": _qualify(spans.name, domain)}, copy=False)
                hit = np.flatnonzero(nvtx.matches(probe, names or (), prefixes))
                if len(hit) or not parts:
                    parts.append(self._range_frame(spans, domain, hit, nesting))
            if len(parts) == 1:
                return parts[0]
            out = pd.concat(parts, ignore_index=True)
            for col in ("name", "domain", "qualified_name"):
                out[col] = out[col].astype("category")
            order = np.lexsort((out["range_id"].to_numpy(), out["start_ns"].to_numpy()))
            return out.iloc[order].reset_index(drop=True)

        return self._kept(key, build)

    @lists_columns(("Columns", frames.NVTX_RANGES))
    def python_frames(self, *, nesting: bool = True) -> pd.DataFrame:
        """Every `python_function` frame (traces recorded with_stack: most of the events), in the columns of
        `nvtx_ranges` (domain "python_function"), nested among the frames of each thread (the Python call stack)."""
        return self._kept(f"python_frames:{nesting}", lambda: self._range_frame(self._frames, FRAME_DOMAIN, None,
                                                                                 nesting))

    # -- CUDA -------------------------------------------------------------------------------------------------------
    @lists_columns(("Columns", frames.CUDA_API))
    def cuda_api(self) -> pd.DataFrame:
        """CUDA runtime (`cuda_runtime`) and driver (`cuda_driver`) calls, runtime first, each in file order."""
        def build() -> pd.DataFrame:
            a = self._api
            return pd.DataFrame({
                "start_ns": a.start, "end_ns": a.start + a.dur, "duration_ns": a.dur, "global_tid": a.gtid,
                "pid": a.pid, "tid": a.tid, "correlation_id": self._api_corr, "name": a.name,
                "api": pd.Categorical.from_codes(self._api_kind, categories=["runtime", "driver", "other"]),
            }, copy=False)

        return self._kept("cuda_api", build)

    def _op_frame(self, sel: np.ndarray, columns: list[str]) -> dict:
        o = self._ops_columns
        return {c: o[c][sel] for c in columns}

    @lists_columns(("Columns", frames.KERNELS))
    def kernels(self) -> pd.DataFrame:
        """GPU kernels (`kernel` events), in file order. Kineto writes one, demangled, name: `name` and
        `demangled_name` both hold it. It writes static and dynamic shared memory as one sum ("shared memory"):
        `static_shared_memory` holds that sum, `dynamic_shared_memory` 0."""
        def build() -> pd.DataFrame:
            o = d = self._ops_columns
            sel = o["kind"] == 0
            base = self._op_frame(sel, ["start_ns", "end_ns", "duration_ns", "device_id", "context_id", "stream_id",
                                        "correlation_id", "global_pid", "pid"])
            name = _categorical(o["names"][sel])
            return pd.DataFrame({
                **base, "name": name, "demangled_name": name.copy(),
                "grid_x": d["grid"][:, 0], "grid_y": d["grid"][:, 1], "grid_z": d["grid"][:, 2],
                "block_x": d["block"][:, 0], "block_y": d["block"][:, 1], "block_z": d["block"][:, 2],
                "graph_node_id": nullable(d["graph_node"]), "registers_per_thread": d["registers"],
                "static_shared_memory": d["shared"], "dynamic_shared_memory": np.zeros(int(sel.sum()), np.int64),
            }, copy=False)

        return self._kept("kernels", build)

    def _copy_kinds(self, sel: np.ndarray) -> pd.Categorical:
        """Memcpy direction labels (nsys's) of the memcpy ops `sel`, from Kineto's names; NaN for memsets."""
        o = self._ops_columns
        labels = []
        for kind, name in zip(o["kind"][sel].tolist(), o["names"][sel].tolist()):
            found = _COPY_NAME.match(name) if kind == 1 else None
            labels.append(COPY_KINDS.get(found.group(1), found.group(1)) if found else
                          (None if kind == 2 else "unknown"))
        return _categorical(labels)

    @lists_columns(("Columns", frames.MEMOPS))
    def memops(self) -> pd.DataFrame:
        """GPU memcpy (`gpu_memcpy`) then memset (`gpu_memset`) operations, each in file order; `copy_kind` is the
        direction in Kineto's name (`Memcpy HtoD (…)`) as nsys labels it ("Host-to-Device")."""
        def build() -> pd.DataFrame:
            o = d = self._ops_columns
            sel = o["kind"] > 0
            base = self._op_frame(sel, ["start_ns", "end_ns", "duration_ns", "device_id", "context_id", "stream_id",
                                        "correlation_id", "global_pid", "pid"])
            return pd.DataFrame({
                "kind": pd.Categorical.from_codes(o["kind"][sel] - 1, categories=["memcpy", "memset"]), **base,
                "bytes": d["bytes"], "graph_node_id": nullable(d["mem_graph_node"]), "copy_kind": self._copy_kinds(sel),
            }, copy=False)

        return self._kept("memops", build)

    @lists_columns(("Columns", frames.GRAPH_LAUNCHES))
    def graph_launches(self) -> pd.DataFrame:
        """Always empty: Kineto records a replayed CUDA graph's kernels one by one (with the launch's correlation id),
        never a graph-level row."""
        return self._kept("graph_launches", lambda: pd.DataFrame(
            {c.name: pd.Series(dtype="int64") for c in frames.GRAPH_LAUNCHES}))

    @lists_columns(("Columns", frames.GPU_OPS))
    def gpu_ops(self) -> pd.DataFrame:
        """Every GPU operation: kernels, then memcpy, then memset (each in file order); memcpy named
        '[CUDA memcpy <direction>]' and memset '[CUDA memset]' as in an export, kernels by Kineto's name."""
        def build() -> pd.DataFrame:
            o = self._ops_columns
            kind = o["kind"]
            names = o["names"].copy()
            copies = kind == 1
            if copies.any():
                names[copies] = [f"[CUDA memcpy {k}]" for k in self._copy_kinds(copies)]
            names[kind == 2] = "[CUDA memset]"
            return pd.DataFrame({
                "kind": pd.Categorical.from_codes(kind, categories=["kernel", "memcpy", "memset", "graph"]),
                "name": _categorical(names), "start_ns": o["start_ns"], "end_ns": o["end_ns"],
                "duration_ns": o["duration_ns"], "device_id": o["device_id"], "stream_id": o["stream_id"],
                "correlation_id": o["correlation_id"], "global_pid": o["global_pid"], "pid": o["pid"],
            }, copy=False)

        return self._kept("gpu_ops", build)

    # -- what only a Kineto trace has -------------------------------------------------------------------------------
    @lists_columns(("Columns", frames.PROCESSES))
    def processes(self) -> pd.DataFrame:
        """Processes named by the trace's metadata events (`process_name`, `process_labels`), by pid."""
        def build() -> pd.DataFrame:
            procs = sorted(self._process_names.items())
            return pd.DataFrame({"pid": np.array([p for p, _ in procs], dtype=np.int64),
                                 "name": [v.get("name", "") for _, v in procs],
                                 "labels": [v.get("labels", "") for _, v in procs]})

        return self._kept("processes", build)

    @lists_columns(("Columns", frames.THREADS))
    def threads(self) -> pd.DataFrame:
        """Every CPU thread that is named (`thread_name`) or holds ranges or CUDA calls, by (pid, tid)."""
        def build() -> pd.DataFrame:
            pairs = {(int(p), int(t)) for p, t in zip(self._ranges.pid, self._ranges.tid)}
            pairs |= {(int(p), int(t)) for p, t in zip(self._api.pid, self._api.tid)}
            pairs |= set(self._thread_names)
            pairs_sorted = sorted(pairs)
            pid = np.array([p for p, _ in pairs_sorted], dtype=np.int64)
            tid = np.array([t for _, t in pairs_sorted], dtype=np.int64)
            gtid = self._ids.gtid(pid, tid) if len(pid) else np.empty(0, np.int64)
            per_range = pd.Series(self._ranges.gtid).value_counts()
            per_api = pd.Series(self._api.gtid).value_counts()
            return pd.DataFrame({
                "pid": pid, "tid": tid, "global_tid": gtid,
                "name": [self._thread_names.get(p, "") for p in pairs_sorted],
                "ranges": per_range.reindex(gtid, fill_value=0).to_numpy(np.int64),
                "launches": per_api.reindex(gtid, fill_value=0).to_numpy(np.int64),
            })

        return self._kept("threads", build)

    @lists_columns(("Columns", frames.DEVICES))
    def devices(self) -> pd.DataFrame:
        """The GPUs of `deviceProperties` (empty for a CPU-only trace)."""
        def build() -> pd.DataFrame:
            props = self._device_properties()

            def ints(key: str) -> np.ndarray:
                return np.array([d.get(key) if _small_int(d.get(key)) else -1 for d in props], dtype=np.int64)

            return pd.DataFrame({"device_id": ints("id"), "name": [str(d.get("name", "")) for d in props],
                                 "total_memory": ints("totalGlobalMem"), "compute_major": ints("computeMajor"),
                                 "compute_minor": ints("computeMinor"), "sms": ints("numSms")})

        return self._kept("devices", build)


def _qualify(names: pd.Categorical, domain: str) -> pd.Categorical:
    if not domain:
        return names
    return pd.Categorical.from_codes(names.codes, categories=pd.Index([f"{domain}:{c}" for c in names.categories],
                                                                      dtype=object))


def _version(key: str, value: Any) -> str:
    """A version the file states, as text: CUDA's integers (12090) as major.minor ("12.9")."""
    if key.startswith("cuda") and type(value) is int and value >= 1000:
        return f"{value // 1000}.{value % 1000 // 10}"
    if isinstance(value, list):
        return ".".join(str(v) for v in value)
    return str(value)


def open_kineto(path: str | os.PathLike) -> KinetoTrace:
    """`KinetoTrace(path)`: what `open_trace` calls for a file that holds JSON (gzip-compressed or not)."""
    return KinetoTrace(path)
