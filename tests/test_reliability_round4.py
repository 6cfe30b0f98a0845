"""Issue 45 (round 4): hangs and runaway work, tracebacks, errors that name the wrong thing, and numbers that
changed without a word — each case of the issue a test that fails without its fix (tune's own cases are in
tests/test_reliability_tune.py, the report's SIGKILL in tests/test_reliability_swap.py). Files outside `-o` are
hashed before and after where a case writes.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from conftest import FIXTURES, bounded, cli_in_process, unchanged
from nsys_cc.errors import InputError, NsysCCError

PACKAGE = Path(__file__).resolve().parents[1] / "nsys_cc"
VLLM = FIXTURES / "vllm"
TARGET = VLLM / "tiny-llama-target.sqlite"
DRAFT = VLLM / "tiny-llama-draft-s.sqlite"
ENV = {**os.environ, "PYTHONPATH": str(PACKAGE.parent)}


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, IndexError):
        return False


# -- hangs and runaway work --------------------------------------------------------------------------------------------
def test_sigterm_during_a_profile_stops_nsys_and_everything_it_started(tmp_path):
    """SIGTERM to nsys-cc while nsys runs: nsys-cc ended at once and nsys (in its own session) ran on; SIGINT
    stopped it. Now SIGTERM stops the child as Ctrl-C does, and nsys-cc ends with 128 + 15."""
    log = tmp_path / "log"
    script = ("import sys\nfrom nsys_cc.launch.process import run_logged\n"
              f"with open({str(log)!r}, 'w') as log:\n"
              "    run_logged([sys.executable, '-c', 'import os, time; print(os.getpid(), flush=True); "
              "time.sleep(120)'], {}, log, None)\n")
    proc = subprocess.Popen([sys.executable, "-c", script], env=ENV, stderr=subprocess.PIPE, text=True)
    child = None
    try:
        deadline = time.monotonic() + 60
        while child is None and time.monotonic() < deadline:
            lines = log.read_text().splitlines() if log.exists() else []
            child = next((int(ln) for ln in lines if ln.strip().isdigit()), None)
            time.sleep(0.05)
        assert child is not None and _alive(child)
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
        deadline = time.monotonic() + 15
        while _alive(child) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(child), "the child nsys-cc started is still running after SIGTERM"
    finally:
        if child is not None and _alive(child):
            os.kill(child, signal.SIGKILL)
        proc.kill()
        proc.wait()


def test_sigterm_from_the_command_line_says_so_and_exits_143(monkeypatch):
    from nsys_cc.launch import process

    def terminated(*a, **kw):
        raise process.Terminated(signal.SIGTERM)

    monkeypatch.setattr("nsys_cc.front.analyze", terminated)
    done = cli_in_process("analyze", str(TARGET), str(DRAFT))
    assert done.returncode == 143 and done.stderr.strip() == "nsys-cc: terminated by SIGTERM", done.stderr


def _slow(path: Path) -> None:
    """NVTX_EVENTS.end made a generated column costing ~0.3 s a row (its values unchanged)."""
    con = sqlite3.connect(path)
    try:
        con.execute('ALTER TABLE NVTX_EVENTS RENAME COLUMN "end" TO _raw')
        con.execute('ALTER TABLE NVTX_EVENTS ADD COLUMN "end" INTEGER GENERATED ALWAYS AS '
                    "(_raw + 0 * instr(printf('%.*c', 6000000 + coalesce(_raw, 0) % 2, 'x'), 'y')) VIRTUAL")
        con.commit()
    finally:
        con.close()


def test_ctrl_c_during_a_long_query_is_a_ctrl_c_not_a_corrupt_file(tmp_path, cache_dir, monkeypatch):
    """A Ctrl-C lands in the query bound's Python callback, and SQLite swallows what a callback raises: the
    statement stopped as "interrupted", read as a corrupt file — and `tune` skipped that cell and ran on (the
    intermittent SIGINT that had no effect)."""
    from nsys_cc.trace import open_trace

    slow = shutil.copyfile(TARGET, tmp_path / "slow.sqlite")
    _slow(slow)
    monkeypatch.setenv("NSYS_CC_QUERY_TIMEOUT", "120")
    timer = threading.Timer(1.0, lambda: os.kill(os.getpid(), signal.SIGINT))
    with unchanged(slow), bounded(60), pytest.raises(KeyboardInterrupt):
        timer.start()
        try:
            with open_trace(slow, cache_dir=cache_dir) as trace:
                trace.nvtx_ranges()
        finally:
            timer.cancel()


def test_the_query_bound_still_stops_a_slow_query(tmp_path, cache_dir, monkeypatch):
    from nsys_cc.trace import open_trace

    slow = shutil.copyfile(TARGET, tmp_path / "slow.sqlite")
    _slow(slow)
    monkeypatch.setenv("NSYS_CC_QUERY_TIMEOUT", "1")
    with bounded(60), pytest.raises(InputError, match=r"a query ran longer than 1 s and was stopped"):
        with open_trace(slow, cache_dir=cache_dir) as trace:
            trace.nvtx_ranges()


def test_attempts_a_kill_left_are_removed_by_the_next_profile(tmp_path, monkeypatch):
    """`run-1.attempt/` survived a SIGKILL and the next profile (run-1 was complete, so never attempted again),
    though the docs say the next profile removes it."""
    from nsys_cc.launch import interleaved
    from nsys_cc.launch.commands import BenchOptions
    from nsys_cc.launch.models import resolve

    out = tmp_path / "O"
    out.mkdir()
    for name in ("run-1.attempt", "run-7.attempt"):
        (out / name).mkdir()
        (out / name / "log").write_text("a killed attempt\n")
    (out / "run-1.attemptive").mkdir()  # not an attempt's name: the user's
    (out / "run-1.attemptive" / "mine.txt").write_text("mine\n")
    monkeypatch.setattr(interleaved, "execute", lambda run, *a, **kw: setattr(run, "status", "failed"))
    engines = [interleaved.Engine("target", resolve("tiny-llama-target"), ()),
               interleaved.Engine("draft", resolve("tiny-llama-draft-s"), ())]
    with unchanged(out / "run-1.attemptive"):
        interleaved.run_all(engines, out, BenchOptions(), nsys="nsys", gpu=False, repeat=1, precision=None,
                            max_repeat=1, timeout=None, force=False, trace=None, nsys_args=())
    assert not (out / "run-1.attempt").exists() and not (out / "run-7.attempt").exists()
