"""THE way nsys-cc opens a SQLite file (`connect`): every connection bounded in time (a statement running longer than
`source.query_timeout()` is stopped and said in one line, `too_slow`; a Ctrl-C during one stays a Ctrl-C), and the
read-only, immutable connection an export is read through (`connect_readonly`: text that is not valid UTF-8 read with
U+FFFD in place of the bad bytes)."""

from __future__ import annotations

import collections
import sqlite3
import time
from pathlib import Path

from ..errors import InputError
from .source import ENV_QUERY_TIMEOUT, query_timeout, readonly_uri


def _decode(raw: bytes) -> str:
    return raw.decode("utf-8", errors="replace")


# SQLite virtual-machine steps between two looks at the clock. A row read costs 10–20 steps, so a look comes every
# 5–10 rows: a column that costs seconds a row (G01) is stopped within seconds of the bound; on a plain table the
# looks cost ~2% of a read (measured: 0.5 µs a look against the ~4.6 µs a row costs to fetch and convert).
PROGRESS_STEPS = 100


class BoundedConnection(sqlite3.Connection):
    """A connection whose every statement is stopped after `limit` seconds (`connect`); `expired` says a statement
    was stopped so (SQLite then raises OperationalError "interrupted", which `too_slow` turns into one line)."""

    limit: float | None = None
    expired: bool = False
    started: float = 0.0


def connect(database: str, *, uri: bool = False, check_same_thread: bool = True) -> BoundedConnection:
    """THE way nsys-cc opens a SQLite file: every connection has a progress handler that stops a statement running
    longer than `query_timeout()` (a trace callback marks each statement's start). A test walks the package for
    `sqlite3.connect(` calls anywhere else."""
    conn = sqlite3.connect(database, uri=uri, check_same_thread=check_same_thread, factory=BoundedConnection)
    assert isinstance(conn, BoundedConnection)
    conn.limit = query_timeout()
    if conn.limit is not None:
        # Python code in a SQLite callback is where a Ctrl-C lands during a long statement, and SQLite swallows what
        # a callback raises: the trace callback is therefore C code (a deque's append: no Python frame, so no
        # signal handler runs in it), and a KeyboardInterrupt in `check` stops the statement, which `too_slow`
        # turns back into a KeyboardInterrupt (issue 45: a Ctrl-C once read as a corrupt file, its cell skipped).
        begun: collections.deque = collections.deque(maxlen=1)

        def check() -> int:
            if begun:  # a statement began since the last look: its clock starts now
                begun.clear()
                conn.started = time.monotonic()
            elif time.monotonic() - conn.started > (conn.limit or 0):
                conn.expired = True
                return 1  # SQLite stops the statement
            return 0

        conn.started = time.monotonic()
        conn.set_trace_callback(begun.append)
        conn.set_progress_handler(check, PROGRESS_STEPS)
    return conn


def too_slow(conn: sqlite3.Connection | None, source: str, exc: BaseException | None = None) -> InputError | None:
    """The one line for a statement `connect`'s bound stopped (None when it was not stopped by it). A statement
    stopped otherwise (`exc`, SQLite's "interrupted") was stopped by a KeyboardInterrupt raised in the bound's own
    check (SQLite swallows it): raised again here."""
    if isinstance(conn, BoundedConnection) and not conn.expired and conn.limit is not None \
            and isinstance(exc, sqlite3.OperationalError) and str(exc) == "interrupted":
        raise KeyboardInterrupt
    if not isinstance(conn, BoundedConnection) or not conn.expired:
        return None
    conn.expired = False
    return InputError(f"{source}: a query ran longer than {conn.limit:g} s and was stopped (a view or generated "
                      f"column makes it slow?); set {ENV_QUERY_TIMEOUT}=SECONDS for a longer bound (0: none)")


def connect_readonly(path: Path):
    uri = readonly_uri(path)

    def open_ro():
        conn = connect(uri, uri=True, check_same_thread=False)
        conn.text_factory = _decode
        return conn

    return open_ro
