"""A Kineto trace's JSON document read as a stream: its top-level entries whole, its `traceEvents` in batches.

`read_document(source, take)` walks the top-level object of the text `source` gives (`kineto_stream.TraceBytes`)
and returns its entries other than `traceEvents` (the metadata); the events go to `take(first, events)` a batch at
a time (`first`: the position in `traceEvents` of the batch's first event), never all at once, so memory holds one
batch (a few MB of text) beside what `take` keeps. Each event is an `Event`: the fields the reader uses, the others
skipped unread; `ts` and `dur` as the text of their JSON value (`msgspec.Raw`), so that times stay exact decimals.

Two parsers, one answer:
- **fast**: msgspec decodes a batch of whole events (a span of up to `MAX_SPAN` bytes of text ending at a `}` that
  a `,` or `]` follows) into `Event`s in C. A span whose end falls inside a string or a nested object is not valid
  JSON as a list, so a batch that decodes is exactly the events it spans;
- **exact**: the standard library's parser (`parse_float=str`: a number's text kept; NaN and Infinity refused), one
  value at a time, for what msgspec will not take — the document's top level, an event that is no object, and an
  event msgspec refuses: a batch that fails is tried again over a quarter of its span, down to `MIN_SPAN` bytes, so
  the batches close in on the odd event, which alone is read exactly; the span then restarts at `RESTART_SPAN`
  and doubles with each batch (and with each span too short for a whole event). Its errors are the ones the
  reader reports, with the byte they are at.

So a damaged or odd file costs time only where it is odd, and every error comes from the exact parser, as soon as
its text is seen: a file invalid from its second byte is refused after reading one piece.

Bounds: one value (an event, a top-level entry) of at most `MAX_VALUE` bytes; a run of at most `MAX_BLANK` blanks.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

import msgspec

from ..errors import InputError

UNSET = msgspec.UNSET
NO_TEXT = msgspec.Raw(b"")  # a time that is not there
MAX_SPAN = 4 << 20
MIN_SPAN = 64
RESTART_SPAN = 4 << 10
FIRST_WINDOW = 4 << 10
MAX_VALUE = 64 << 20
MAX_BLANK = 64 << 20
_WS = re.compile(rb"[ \t\n\r]*")


def _past_blanks(buf: bytes, pos: int) -> int:
    """The position of the first character at or after `pos` that is not blank (len(buf) if none)."""
    m = _WS.match(buf, pos)
    return m.end() if m else pos
_COMMA, _OPEN_LIST, _CLOSE_LIST, _OPEN_OBJECT, _CLOSE_OBJECT, _QUOTE, _COLON = b",[]{}\":"


class Args(msgspec.Struct, gc=False, rename={"registers": "registers per thread", "shared": "shared memory",
                                              "graph_node": "graph node id"}):
    """The `args` entries the reader uses (None: missing or null)."""

    correlation: Any = None
    device: Any = None
    stream: Any = None
    context: Any = None
    grid: Any = None
    block: Any = None
    registers: Any = None
    shared: Any = None
    graph_node: Any = None
    bytes: Any = None
    name: Any = None
    labels: Any = None


ARG_KEYS = {f: Args.__struct_encode_fields__[i] for i, f in enumerate(Args.__struct_fields__)}


class Event(msgspec.Struct, gc=False):
    """One event's fields the reader uses: UNSET when missing (None: null); `ts`/`dur` as their JSON text
    (NO_TEXT: missing), or — read by the exact parser — as it gives them (`parse_float=str`)."""

    ph: Any = UNSET
    cat: Any = UNSET
    name: Any = UNSET
    pid: Any = UNSET
    tid: Any = UNSET
    ts: msgspec.Raw = NO_TEXT
    dur: msgspec.Raw = NO_TEXT
    args: Args | None = None


_DECODER = msgspec.json.Decoder(list[Event])


def _refuse_constant(word: str):
    raise ValueError(f"{word} is not a JSON number (Kineto never writes one)")


_EXACT = json.JSONDecoder(parse_float=str, parse_constant=_refuse_constant)


def event_of(value: Any) -> Any:
    """An event as the exact parser gave it (a dict) as an `Event`; anything else as it is."""
    if not isinstance(value, dict):
        return value
    args = value.get("args")
    return Event(ph=value.get("ph", UNSET), cat=value.get("cat", UNSET), name=value.get("name", UNSET),
                 pid=value.get("pid", UNSET), tid=value.get("tid", UNSET), ts=value.get("ts", NO_TEXT),
                 dur=value.get("dur", NO_TEXT),
                 args=Args(**{f: args.get(k) for f, k in ARG_KEYS.items()}) if isinstance(args, dict) else None)


def _replaced(value: Any) -> Any:
    """`value` with the bytes that were not UTF-8 (kept as surrogates to count bytes) as U+FFFD, as a whole-file
    decode with errors="replace" would give them."""
    if isinstance(value, str):
        try:
            return value.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
        except UnicodeEncodeError:  # a surrogate the text wrote as an escape (\\ud800), kept as the JSON says
            return value
    if isinstance(value, list):
        return [_replaced(v) for v in value]
    if isinstance(value, dict):
        return {_replaced(k): _replaced(v) for k, v in value.items()}
    return value


class Document:
    """The reading state of one document: the text not yet consumed (`buf[pos:]`, at byte `base + pos` of the
    text), and the span the next fast batch tries."""

    def __init__(self, source, take: Callable[[int, list], None]):
        self.source, self.take = source, take
        self.name = source.name
        self.buf = b""
        self.pos = self.base = 0
        self.eof = False
        self.span = MAX_SPAN
        self.failed = -1  # where the last batch msgspec refused began

    # -- the text ---------------------------------------------------------------------------------------------------
    def _more(self) -> bool:
        """Append the next piece of text; False at its end."""
        if self.eof:
            return False
        piece = self.source.read()
        if not piece:
            self.eof = True
            return False
        self.base += self.pos
        self.buf = self.buf[self.pos:] + piece if self.pos < len(self.buf) else piece
        self.pos = 0
        return True

    def _next(self) -> int | None:
        """The next character that is not blank (its byte; the position is left on it), None at the end."""
        blank = 0
        while True:
            end = _past_blanks(self.buf, self.pos)
            blank += end - self.pos
            self.pos = end
            if blank > MAX_BLANK:
                raise InputError(f"{self.name} holds more than {MAX_BLANK >> 20} MiB of blanks in a row (before byte "
                                 f"{self.base + self.pos:,}): no profiler writes that, it is not a trace")
            if end < len(self.buf):
                return self.buf[end]
            if not self._more():
                return None

    def fail(self, detail: str) -> InputError:
        what = "gzip-compressed text that is not JSON" if self.source.compressed else "not JSON"
        return InputError(f"{self.name} is {what} (truncated, or not a PyTorch-profiler trace): {detail}")

    def _ended(self, expected: str) -> InputError:
        return self.fail(f"it ends at byte {self.base + self.pos:,} where {expected} should follow")

    def value(self, what: str) -> Any:
        """The JSON value at the position, read by the exact parser; the position moves past it."""
        window = FIRST_WINDOW
        while True:
            while len(self.buf) - self.pos < window and self._more():
                pass
            part = self.buf[self.pos:self.pos + window]
            whole = self.eof and self.pos + window >= len(self.buf)  # the window holds all the text left
            try:
                text, odd = part.decode("utf-8"), False
            except UnicodeDecodeError:
                text, odd = part.decode("utf-8", "surrogateescape"), True
            try:
                value, end = _EXACT.raw_decode(text)
            except RecursionError:
                raise InputError(f"{self.name} is nested too deep to be a PyTorch-profiler trace") from None
            except json.JSONDecodeError as exc:
                near_end = exc.pos >= len(text) - 16 or exc.msg.startswith("Unterminated string")
                if whole or not near_end or window >= MAX_VALUE:
                    if not whole and near_end:
                        raise InputError(f"{self.name}: {what} is larger than {MAX_VALUE >> 20} MiB (at byte "
                                         f"{self.base + self.pos:,}): not a PyTorch-profiler trace") from None
                    at = self.base + self.pos + len(text[:exc.pos].encode("utf-8", "surrogateescape"))
                    raise self.fail(f"{exc.msg} at byte {at:,}") from None
                window *= 8
                continue
            except ValueError as exc:  # NaN, Infinity
                raise self.fail(" ".join(str(exc).split())[:160]) from None
            if end == len(text) and not whole and window < MAX_VALUE:  # a number may go on past the window
                window *= 8
                continue
            self.pos += len(text[:end].encode("utf-8", "surrogateescape")) if odd or not text.isascii() else end
            return _replaced(value) if odd else value

    # -- the document -----------------------------------------------------------------------------------------------
    def read(self) -> dict:
        """Walk the document (module docstring); its top-level entries other than `traceEvents`."""
        c = self._next()
        if c == 0xEF and self.buf.startswith(b"\xef\xbb\xbf", self.pos):  # a UTF-8 byte order mark
            self.pos += 3
            c = self._next()
        if c is None:
            raise InputError(f"{self.name} is empty: not a PyTorch-profiler trace")
        if c != _OPEN_OBJECT:
            kind = "array" if c == _OPEN_LIST else None
            if kind is None:
                value = self.value("the document")
                kind = {str: "string", bool: "true/false", type(None): "null"}.get(type(value), "number")
            raise InputError(f"{self.name} is a JSON {kind}, not an object with 'traceEvents': neither a "
                             "PyTorch-profiler (Kineto) trace nor an Nsight Systems export")
        self.pos += 1
        meta: dict = {}
        events = False
        c = self._next()
        while c != _CLOSE_OBJECT:
            if c is None:
                raise self._ended("an entry")
            if c != _QUOTE:
                raise self.fail(f"Expecting property name enclosed in double quotes at byte {self.base + self.pos:,}")
            key = self.value("a key")
            if self._next() != _COLON:
                raise self.fail(f"Expecting ':' delimiter at byte {self.base + self.pos:,}")
            self.pos += 1
            c = self._next()
            if key == "traceEvents":
                if events:
                    raise InputError(f"{self.name} holds two 'traceEvents' lists: two traces merged into one file, "
                                     "or a damaged file")
                if c != _OPEN_LIST:
                    raise InputError(f"{self.name}: 'traceEvents' is not a list of events: not a PyTorch-profiler "
                                     "trace")
                self._events()
                events = True
            else:
                if c is None:
                    raise self._ended(f"the value of {key!r:.40}")
                meta[key] = self.value(f"the entry {key!r:.40}")
            c = self._next()
            if c == _COMMA:
                self.pos += 1
                c = self._next()
                if c == _CLOSE_OBJECT:  # a comma before the '}'
                    raise self.fail(f"Expecting property name enclosed in double quotes at byte "
                                    f"{self.base + self.pos:,}")
            elif c != _CLOSE_OBJECT:
                raise self._ended("',' or '}'") if c is None else self.fail(
                    f"Expecting ',' delimiter at byte {self.base + self.pos:,}")
        self.pos += 1
        if self._next() is not None:
            raise self.fail(f"Extra data at byte {self.base + self.pos:,}")
        if not events:
            raise InputError(f"{self.name} is a JSON object without 'traceEvents': neither a PyTorch-profiler "
                             "(Kineto) trace nor an Nsight Systems export")
        return meta

    def _events(self) -> None:
        """The `traceEvents` list, from its '[' through its ']', batch by batch to `take`."""
        self.pos += 1
        index = 0
        c = self._next()
        if c == _CLOSE_LIST:
            self.pos += 1
            return
        while True:
            if c is None:
                raise self._ended(f"traceEvents[{index}]")
            n = -1
            while n < 0:
                n = self._fast(index) if c == _OPEN_OBJECT else 0
            if n == 0:
                value = self.value(f"traceEvents[{index}]")
                self.take(index, [event_of(value)])
                n = 1
            index += n
            c = self._next()
            if c == _COMMA:
                self.pos += 1
                c = self._next()
                continue
            if c == _CLOSE_LIST:
                self.pos += 1
                return
            raise self._ended("',' or ']'") if c is None else self.fail(
                f"Expecting ',' delimiter at byte {self.base + self.pos:,}")

    def _cut(self, end: int) -> int | None:
        """The end of the last whole event before `end` that a ',' or ']' follows (a candidate: the batch's decode
        tells whether it is one), None when there is none."""
        j = end
        for _ in range(16):
            j = self.buf.rfind(b"}", self.pos, j)
            if j < 0:
                return None
            k = _past_blanks(self.buf, j + 1)
            if k < len(self.buf) and self.buf[k] in (_COMMA, _CLOSE_LIST):
                return j + 1
        return None

    def _fast(self, index: int) -> int:
        """A batch of events decoded by msgspec and handed to `take`: how many; 0 when the event at hand is to be read
        exactly; -1 to try again with a smaller span."""
        while len(self.buf) - self.pos < self.span and self._more():
            pass
        cut = self._cut(min(len(self.buf), self.pos + self.span))
        if cut is None:  # no event ends within the span
            if self.failed != self.pos and self.span < MAX_SPAN:  # longer events than the span: a longer span
                self.span *= 2
                return -1
            self.span = RESTART_SPAN
            return 0
        piece = b"".join((b"[", memoryview(self.buf)[self.pos:cut], b"]"))
        try:
            events = _DECODER.decode(piece)
        except (msgspec.DecodeError, RecursionError):
            self.failed = self.pos
            self.span //= 4
            if self.span < MIN_SPAN:  # the odd event is the one at hand
                self.span = RESTART_SPAN
                return 0
            return -1
        del piece
        self.pos = cut
        self.span = min(self.span * 2, MAX_SPAN)
        self.take(index, events)
        return len(events)


def read_document(source, take: Callable[[int, list], None]) -> dict:
    """`Document(source, take).read()`: the metadata; the events handed to `take` batch by batch."""
    return Document(source, take).read()
