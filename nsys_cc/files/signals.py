"""Signals that wait until a change is complete: `signals_deferred()` holds SIGINT, SIGTERM and SIGHUP received
inside it until it ends (then as KeyboardInterrupt, or the signal's own handler), so a few renames that belong
together are not split by Ctrl-C."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Iterator

DEFERRED_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


@contextlib.contextmanager
def signals_deferred() -> Iterator[None]:
    """Hold SIGINT/SIGTERM/SIGHUP until the block ends, then act on the first one received (module docstring).
    Outside the main thread (where Python delivers signals) it does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    received: list[signal.Signals] = []
    previous: dict[signal.Signals, object] = {}
    for sig in DEFERRED_SIGNALS:
        try:
            previous[sig] = signal.signal(sig, lambda signum, frame: received.append(signal.Signals(signum)))
        except (ValueError, OSError):  # not settable here (e.g. an embedded interpreter)
            pass
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)  # type: ignore[arg-type]
        if received:
            first = received[0]
            handler = previous.get(first)
            if callable(handler):
                handler(first, None)
            elif handler == signal.SIG_DFL:
                if first == signal.SIGINT:
                    raise KeyboardInterrupt
                os.kill(os.getpid(), first)
