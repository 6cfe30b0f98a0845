"""Every file nsys-cc reads, it reads here: only ever a regular file, never a wait, never more than it can hold.

`read_bytes(path, what)` opens without blocking (`O_NONBLOCK`: a FIFO that nobody writes, a terminal or a device
would otherwise wait forever), checks with `fstat` on the open file (no race with a rename) that it is a regular
file no larger than `limit` bytes, and reads it. `read_text` decodes it. `load_json` parses it as JSON nested at
most `MAX_DEPTH` deep (a 100k-deep document would otherwise end in a RecursionError) and, given a `shape`, checks
its shape (`check_shape`). Every failure is an InputError naming the file as `what` (a "metrics dump", a
"manifest", a "profile status file"). The tool's own state files (a cache record, a run's `done.json`, a sweep
cell's `status.json`) are read through `load_state`: a state file that is not a regular file, or not the shape its
writer writes, is *unreadable state* — None, with the reason handed to the caller's note — never a wait and never
a traceback.

A test (tests/reliability/test_reads.py) walks the package for `open(`, `read_text(`, `read_bytes(`, `json.load(`
and `sqlite3.connect(` calls outside this module, the trace reader's connection function and the writer.

This module imports nothing of the package but its errors: every layer uses it.
"""

from __future__ import annotations

import json
import math
import os
import re
import stat
from collections.abc import Callable
from typing import Any

from .errors import InputError

# The largest file read whole (bytes): a state file, manifest, metrics dump or benchmark JSON is kilobytes; a log is
# read through `read_text(..., limit=…)` by its tail.
MAX_BYTES = 256 << 20
# The deepest nesting of a JSON document read (every file nsys-cc writes is nested fewer than 10 deep).
MAX_DEPTH = 200

_JSON_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"', re.DOTALL)
_JSON_BRACKET = re.compile(rb"[\[\]{}]")


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    return "a device or socket"


def open_file(path: str | os.PathLike, what: str, *, limit: int | None = None):
    """The regular file at `path` opened for reading in binary (module docstring: never a wait); the caller closes
    it (`with inputs.open_file(p, "trace") as fh:`). InputError when it is missing, not a regular file or larger
    than `limit` bytes (None: any size)."""
    name = os.fsdecode(os.fspath(path))
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise InputError(f"{what} not found: {name}") from None
    except OSError as exc:
        raise InputError(f"cannot read the {what} {name}: {exc.strerror or exc}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise InputError(f"the {what} {name} is {_kind(st.st_mode)}, not a file")
        if limit is not None and st.st_size > limit:
            raise InputError(f"the {what} {name} is {st.st_size} bytes, more than the {limit} nsys-cc reads: "
                             "it is not one nsys-cc or vLLM wrote")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb", closefd=True)
    except BaseException:
        os.close(fd)
        raise


def read_bytes(path: str | os.PathLike, what: str, *, limit: int | None = MAX_BYTES, tail: bool = False) -> bytes:
    """The bytes of the regular file at `path` (module docstring); InputError when it is missing, not a regular
    file (a directory, a FIFO, a device, a socket), larger than `limit` bytes (None: no limit) or cannot be read.
    `tail`: a file larger than `limit` gives its last `limit` bytes instead (a log's end)."""
    name = os.fsdecode(os.fspath(path))
    with open_file(path, what, limit=None if tail else limit) as fh:
        try:
            if tail and limit is not None:
                size = os.fstat(fh.fileno()).st_size
                if size > limit:
                    fh.seek(size - limit)
            return fh.read() if limit is None else fh.read(limit)
        except OSError as exc:
            raise InputError(f"cannot read the {what} {name}: {exc.strerror or exc}") from None


def read_text(path: str | os.PathLike, what: str, *, limit: int | None = MAX_BYTES, tail: bool = False,
              errors: str = "strict") -> str:
    """`read_bytes` decoded as UTF-8 (`errors` as `bytes.decode`); InputError when it is not UTF-8 text."""
    data = read_bytes(path, what, limit=limit, tail=tail)
    try:
        return data.decode("utf-8", errors=errors)
    except UnicodeDecodeError as exc:
        raise InputError(f"the {what} {os.fsdecode(os.fspath(path))} is not UTF-8 text ({exc.reason} at byte "
                         f"{exc.start})") from None


def json_depth(data: bytes, stop: int = MAX_DEPTH) -> int:
    """How deep the arrays and objects of the JSON text `data` nest (strings skipped), counted up to `stop` + 1."""
    depth = deepest = 0
    for m in _JSON_BRACKET.finditer(_JSON_STRING.sub(b'""', data)):
        depth += 1 if m.group() in (b"[", b"{") else -1
        if depth > deepest:
            deepest = depth
            if deepest > stop:
                break
    return deepest


def parse_json(data: bytes | str, what: str, name: str = "", *, shape: Any = None, max_depth: int = MAX_DEPTH):
    """The JSON document `data` (the text of the `what` file `name`), nested at most `max_depth` deep, numbers
    finite (NaN and Infinity, which Python writes and JSON does not have, refused), shaped as `shape` when given
    (`check_shape`); InputError otherwise."""
    raw = data.encode("utf-8", "surrogateescape") if isinstance(data, str) else data
    where = f"the {what} {name}".rstrip()
    if json_depth(raw, max_depth) > max_depth:
        raise InputError(f"{where} is nested deeper than {max_depth} levels: it is not one nsys-cc or vLLM wrote")

    def constant(word: str):
        raise ValueError(f"{word} is not a JSON number")

    try:
        doc = json.loads(raw, parse_constant=constant)
    except RecursionError:  # a depth the scan did not see (it cannot happen: kept as the last word)
        raise InputError(f"{where} is nested too deep to read") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise InputError(f"{where} is not JSON: {' '.join(str(exc).split())[:160]}") from None
    if shape is not None:
        check_shape(doc, shape, where)
    return doc


def load_json(path: str | os.PathLike, what: str, *, shape: Any = None, limit: int | None = MAX_BYTES,
              max_depth: int = MAX_DEPTH):
    """The JSON document in the regular file `path` (`read_bytes`, then `parse_json`); InputError naming the file
    when it is not a regular file, too large, not JSON, nested too deep or not of `shape`."""
    return parse_json(read_bytes(path, what, limit=limit), what, os.fsdecode(os.fspath(path)), shape=shape,
                      max_depth=max_depth)


def load_state(path: str | os.PathLike, what: str, *, shape: Any = None, on_unreadable: Callable[[str], None]
               | None = None):
    """One of nsys-cc's own state files (module docstring): its JSON document, or None when there is none or it is
    unreadable state (not a regular file, not JSON, too deep, not of `shape`); `on_unreadable` is given the one-line
    reason then, for the caller's note. A state file is never waited on and never raises."""
    if not os.path.lexists(path):
        return None
    try:
        return load_json(path, what, shape=shape)
    except InputError as exc:
        if on_unreadable is not None:
            on_unreadable(str(exc))
        return None


# -- shapes -------------------------------------------------------------------------------------------------------
class Optional:
    """A key that may be missing (or null) in an object shape: `{"reason": Optional(str)}`."""

    def __init__(self, shape: Any):
        self.shape = shape


class ListOf:
    """An array whose items each have `shape`."""

    def __init__(self, shape: Any):
        self.shape = shape


class MapOf:
    """An object of any keys whose values each have `shape`."""

    def __init__(self, shape: Any):
        self.shape = shape


NUMBER = (int, float)
_NAMES = {dict: "an object", list: "an array", str: "a string", int: "an integer", float: "a number",
          bool: "true or false", type(None): "null"}


def _describe(value: Any) -> str:
    return _NAMES.get(type(value), type(value).__name__)


def _expected(shape: Any) -> str:
    if isinstance(shape, tuple):
        return " or ".join(dict.fromkeys(_expected(s) for s in shape))
    if isinstance(shape, dict) or shape is dict or isinstance(shape, MapOf):
        return "an object"
    if isinstance(shape, ListOf) or shape is list:
        return "an array"
    return _NAMES.get(shape, getattr(shape, "__name__", str(shape)))


def _matches_type(value: Any, shape: type) -> bool:
    if shape is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if shape is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, shape)


def check_shape(doc: Any, shape: Any, where: str, at: str = "") -> Any:
    """`doc` when it has `shape`, else InputError(`where` is not … : the first place it differs).

    A shape is a type (`str`, `int` — never a bool —, `float` — a finite number, integers included —, `bool`,
    `dict`, `list`, `type(None)`), a tuple of shapes (any of them), `ListOf(shape)`, `MapOf(shape)`, or a dict
    `{key: shape}` for an object with those keys (`Optional(shape)`: the key may be missing or null; other keys
    are allowed)."""
    label = at or "the document"
    if isinstance(shape, tuple):
        for option in shape:
            try:
                return check_shape(doc, option, where, at)
            except InputError:
                continue
        raise InputError(f"{where} is not shaped as nsys-cc writes it: {label} is {_describe(doc)}, not "
                         f"{_expected(shape)}")
    if isinstance(shape, dict):
        check_shape(doc, dict, where, at)
        for key, sub in shape.items():
            optional = isinstance(sub, Optional)
            if doc.get(key) is None:
                if optional:
                    continue
                raise InputError(f"{where} is not shaped as nsys-cc writes it: {label} has no {key!r}")
            check_shape(doc[key], sub.shape if optional else sub, where, f"{at}.{key}" if at else key)
        return doc
    if isinstance(shape, ListOf):
        check_shape(doc, list, where, at)
        for i, item in enumerate(doc):
            check_shape(item, shape.shape, where, f"{at}[{i}]" if at else f"[{i}]")
        return doc
    if isinstance(shape, MapOf):
        check_shape(doc, dict, where, at)
        for key, item in doc.items():
            check_shape(item, shape.shape, where, f"{at}.{key}" if at else str(key))
        return doc
    if not _matches_type(doc, shape):
        raise InputError(f"{where} is not shaped as nsys-cc writes it: {label} is {_describe(doc)}, not "
                         f"{_expected(shape)}")
    return doc


# -- bounds on every wait ------------------------------------------------------------------------------------------
def seconds(value: Any, name: str, *, default: float | None = None, param: str | None = None) -> float | None:
    """A time bound as given (a flag's value, an environment variable's text): seconds ≥ 0, 0 meaning no limit
    (None); `default` when `value` is None or blank. NaN, inf, a negative number or no number at all is an
    InputError naming `name` (`param`: the library parameter, for the CLI's flag; one validator for every
    timeout)."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return default
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise InputError(f"{name} must be a number of seconds (0: no limit), not {value!r}", param=param) from None
    if isinstance(value, bool) or math.isnan(number) or math.isinf(number) or number < 0:
        raise InputError(f"{name} must be a finite number of seconds ≥ 0 (0: no limit), not {value!r}", param=param)
    return None if number == 0 else number
