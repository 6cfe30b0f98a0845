"""`nsys_cc.files.signals.signals_deferred`: Ctrl-C (SIGINT, SIGTERM, SIGHUP) inside the block waits for its end, then
acts as it would have (KeyboardInterrupt, or the handler that was set); the handlers are restored; outside the main
thread it changes nothing."""

from __future__ import annotations

import os
import signal
import threading

import pytest

from nsys_cc.files.signals import signals_deferred


def test_ctrl_c_inside_the_block_is_raised_after_the_block_ends():
    done = []
    with pytest.raises(KeyboardInterrupt):
        with signals_deferred():
            os.kill(os.getpid(), signal.SIGINT)
            done.append("the rest of the block")  # not cut short
    assert done == ["the rest of the block"]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_a_deferred_signal_reaches_the_handler_that_was_set_once():
    seen = []
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: seen.append(signum))
    try:
        with signals_deferred():
            os.kill(os.getpid(), signal.SIGTERM)
            os.kill(os.getpid(), signal.SIGTERM)
            assert seen == []
        assert seen == [signal.SIGTERM]  # the first one received, once
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_without_a_signal_nothing_happens_and_the_handlers_are_restored():
    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    with signals_deferred():
        assert signal.getsignal(signal.SIGINT) is not before[signal.SIGINT]
    assert {s: signal.getsignal(s) for s in before} == before


def test_outside_the_main_thread_it_sets_no_handler():
    seen = []

    def worker():
        with signals_deferred():
            seen.append(signal.getsignal(signal.SIGINT))

    t = threading.Thread(target=worker)
    t.start()
    t.join()
    assert seen == [signal.default_int_handler]
