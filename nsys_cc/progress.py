"""Progress lines on stderr for work that takes a while (reading a big trace, each profiling step).

Library code calls `step(...)`; nothing is printed for quick work, so notebooks and tests stay quiet.
`NSYS_CC_QUIET=1` silences everything; `NSYS_CC_PROGRESS=1` prints every step whatever its size.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Callable, Iterator

# Work estimated to take longer than this (rows to read, say) announces itself before it starts.
BIG_ROWS = 1_000_000

# How a line names the library's parameters: the command line sets its flag writer here while a verb runs
# (`nsys_cc.cli.in_flags`), so a line that says `force=True` in a notebook says `--force` in a terminal.
wording: Callable[[str], str] = str


def _mode() -> str:
    if os.environ.get("NSYS_CC_QUIET"):
        return "quiet"
    if os.environ.get("NSYS_CC_PROGRESS"):
        return "all"
    return "big"


def one_line(text: str) -> str:
    """`text` with its control characters (a newline or a tab in a file name, an escape sequence) written as
    escapes (`\\n`, `\\x1b`), as range names are quoted: a line stays one line whatever a path holds, so a name
    cannot forge a line of its own (`nsys-cc: error: …`). Every error and progress line goes through it."""
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() else repr(ch)[1:-1] for ch in text)


def say(message: str) -> None:
    """Print one progress line unless progress is silenced."""
    if _mode() != "quiet":
        # One write of the whole line: print() writes the text and its newline separately, and a Ctrl-C between the
        # two left a worker's half line for the exit to flush, glued to the parent's "nsys-cc: interrupted".
        sys.stderr.write(f"[nsys-cc] {one_line(wording(message))}\n")
        sys.stderr.flush()


@contextlib.contextmanager
def step(message: str, *, rows: int | None = None, always: bool = False) -> Iterator[None]:
    """Announce `message` before work expected to be long (`rows` ≥ BIG_ROWS, or `always`) and its time after.

    Work that turns out to take more than two seconds reports its duration even when it was not announced.
    """
    mode = _mode()
    loud = mode == "all" or (mode == "big" and (always or (rows is not None and rows >= BIG_ROWS)))
    if loud:
        extra = f" ({rows:,} rows)" if rows is not None else ""
        say(f"{message}{extra} …")
    t0 = time.perf_counter()
    yield
    elapsed = time.perf_counter() - t0
    if loud or (mode != "quiet" and elapsed > 2.0):
        say(f"{message}: done in {elapsed:.1f} s")
