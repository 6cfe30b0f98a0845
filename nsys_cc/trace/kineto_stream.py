"""The bytes of a PyTorch-profiler (Kineto) trace, read as a stream with every bound applied while it is read.

`TraceBytes(path)` opens the file through `nsys_cc.inputs` (a regular file, never a wait), tells gzip from plain
JSON by its first two bytes, and hands the uncompressed text over in pieces of `CHUNK` bytes (`read()`); nothing
holds more than one piece, so reading a trace of any size takes the same few tens of MB. The bounds, each refused
with one line naming the file the moment it is crossed, never after:

- **size**: at most `max_bytes()` bytes of JSON (`$NSYS_CC_MAX_TRACE_BYTES`, default 16 GiB), counted on the
  decompressed stream as it comes out of gzip; a plain file larger than that is refused by its size before a byte
  is read;
- **gzip bombs**: once `BOMB_AFTER` bytes have come out, more than `BOMB_RATIO` bytes out per byte in is refused.
  gzip expands real traces 10–20× (the public ones: 12.8–17.4×; Kineto's numbers and ids do not repeat), a gzip of
  blanks or zeros ~1000× (deflate's limit): a 21 MB file of 20 GiB of blanks is refused after 64 MiB, in well under a
  second;
- **damage**: a gzip stream cut short, with a bad CRC or bad deflate data.

No read asks for more than `CHUNK` bytes, whatever the limit (an address-space limit, `ulimit -v`, is never met by
a request for the whole limit at once). A gzip is decompressed by a thread of its own, at most `AHEAD` pieces ahead
of the reader: zlib lets go of Python's lock while it inflates, so on a machine with two cores the decompression
costs the reader no time (~3 s of a 1 GB trace's CPU time, docs/PERFORMANCE.md).
"""

from __future__ import annotations

import gzip
import os
import queue
import threading
import zlib

from .. import inputs
from ..errors import InputError

GZIP_MAGIC = b"\x1f\x8b"
# Uncompressed bytes read at most ($NSYS_CC_MAX_TRACE_BYTES): reading is streamed, so this bounds the time a huge or
# crafted file can take, not the memory (the reader keeps only the events the analysis needs).
ENV_MAX_BYTES = "NSYS_CC_MAX_TRACE_BYTES"
DEFAULT_MAX_BYTES = 16 << 30
# The largest value $NSYS_CC_MAX_TRACE_BYTES takes (4 EiB: no file is bigger; beyond, arithmetic on it overflows).
LARGEST_MAX_BYTES = 1 << 62
# Uncompressed bytes handed over per read.
CHUNK = 8 << 20
# A gzip stream that has expanded more than BOMB_RATIO× once BOMB_AFTER bytes came out of it is a bomb.
BOMB_RATIO = 200
BOMB_AFTER = 64 << 20
# Decompressed pieces held ready at most (the decompressing thread waits beyond).
AHEAD = 2


def max_bytes() -> int:
    """Uncompressed bytes a trace may hold: `$NSYS_CC_MAX_TRACE_BYTES` (a whole number from 1 to 2**62), else
    DEFAULT_MAX_BYTES; InputError with one line naming the variable otherwise."""
    text = os.environ.get(ENV_MAX_BYTES, "").strip()
    if not text:
        return DEFAULT_MAX_BYTES
    try:
        value = int(text)
    except ValueError:
        raise InputError(f"{ENV_MAX_BYTES} must be a whole number of bytes, not {text!r:.40}") from None
    if value <= 0 or value > LARGEST_MAX_BYTES:
        raise InputError(f"{ENV_MAX_BYTES} must be a number of bytes from 1 to 2**62 ({LARGEST_MAX_BYTES:,}), not "
                         f"{text!r:.40}")
    return value


def _size(n: int) -> str:
    return f"{n / 2**30:.1f} GiB" if n >= 2**30 else f"{n / 2**20:.0f} MiB" if n >= 2**20 else f"{n:,} bytes"


class TraceBytes:
    """The uncompressed text of one trace file, read piece by piece (module docstring). Use as a context manager;
    `compressed` says whether the file is gzip; `read()` gives the next piece, b"" at the end."""

    def __init__(self, path: str | os.PathLike):
        self.name = os.fsdecode(os.fspath(path))
        self.limit = max_bytes()
        self.out = 0  # uncompressed bytes handed over so far
        self._fh = inputs.open_file(path, "trace")
        try:
            self.compressed = self._fh.read(2) == GZIP_MAGIC
            self._fh.seek(0)
            self.size = os.fstat(self._fh.fileno()).st_size  # of the file (compressed, for a gzip)
            if not self.compressed and self.size > self.limit:
                self._too_big(self.size)
            self._gz = gzip.GzipFile(fileobj=self._fh, mode="rb") if self.compressed else None
            self._ahead: queue.Queue = queue.Queue(maxsize=AHEAD)
            self._stop = threading.Event()
            self._thread: threading.Thread | None = None
        except OSError as exc:
            self._fh.close()
            raise InputError(f"cannot read the trace {self.name}: {exc.strerror or exc}") from None
        except BaseException:
            self._fh.close()
            raise

    def __enter__(self) -> TraceBytes:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        if self._thread is not None:  # stop the decompressing thread: it may be waiting to hand a piece over
            self._stop.set()
            while self._thread.is_alive():
                try:
                    self._ahead.get(timeout=0.05)
                except queue.Empty:
                    pass
            self._thread = None
        if self._gz is not None:
            self._gz.close()
        self._fh.close()

    def _too_big(self, size: int | None = None) -> None:
        held = f"is {size:,} bytes" if size is not None else f"holds more than {self.limit:,} bytes of JSON" + (
            " uncompressed" if self.compressed else "")
        raise InputError(f"{self.name} {held}: more than nsys-cc reads ({_size(self.limit)}); set {ENV_MAX_BYTES}="
                         "BYTES to read a bigger trace (reading is streamed: memory grows with the events kept, not "
                         "with the file)")

    def _decompress(self) -> None:
        """The decompressing thread: pieces (and the compressed bytes read so far) into `_ahead`, then b"" at the end,
        or the exception that stopped it."""
        assert self._gz is not None
        handed = 0
        try:
            while not self._stop.is_set():
                piece = self._gz.read(min(CHUNK, self.limit + 1 - handed))
                handed += len(piece)
                self._ahead.put((piece, self._fh.tell(), None))
                if not piece or handed > self.limit:
                    return
        except BaseException as exc:  # handed over to the reader, which says what it means
            self._ahead.put((b"", 0, exc))

    def _piece(self) -> tuple[bytes, int]:
        """The next piece and the compressed bytes read so far (the file's bytes, for a plain file)."""
        if self._gz is None:
            data = self._fh.read(min(CHUNK, self.limit + 1 - self.out))
            return data, self.out + len(data)
        if self._thread is None:
            self._thread = threading.Thread(target=self._decompress, name="nsys_cc-gunzip", daemon=True)
            self._thread.start()
        data, consumed, exc = self._ahead.get()
        if exc is not None:
            raise exc
        return data, consumed

    def read(self) -> bytes:
        """The next piece of uncompressed text (at most CHUNK bytes), b"" at the end; InputError past a bound."""
        try:
            data, consumed = self._piece()
        except EOFError:
            raise InputError(f"{self.name} is a truncated gzip file (it ends before its compressed data does): copy "
                             "it again, or let the profiler finish writing it") from None
        except (gzip.BadGzipFile, zlib.error) as exc:
            raise InputError(f"{self.name} is a damaged gzip file ({' '.join(str(exc).split())[:160]})") from None
        except OSError as exc:
            raise InputError(f"cannot read the trace {self.name}: {exc.strerror or exc}") from None
        self.out += len(data)
        if self.out > self.limit:
            self._too_big()
        if self._gz is not None and self.out >= BOMB_AFTER and self.out > BOMB_RATIO * max(consumed, 1):
            raise InputError(f"{self.name} expands more than {BOMB_RATIO}× when decompressed ({self.out:,} bytes "
                             f"from its first {consumed:,}): a gzip bomb, not a trace (gzip expands "
                             "PyTorch-profiler traces 10–20×)")
        return data
