"""`run_model`'s outcomes with stand-in commands (small Python programs in place of nsys and vLLM)."""

from __future__ import annotations

import hashlib
import json
import shutil
import sqlite3
import sys
import time
from pathlib import Path

import pytest

from conftest import REPO, planned, unchanged
from nsys_cc.launch import check, plan, process, resume
from nsys_cc.launch.commands import ModelCommands, ModelFiles
from nsys_cc.launch.models import resolve
from nsys_cc.request import BenchOptions

FIXTURE = REPO / "fixtures" / "vllm" / "tiny-llama-target.sqlite"


def _run(tmp_path: Path, profile_code: str, export_code: str) -> plan.ModelLaunch:
    files = ModelFiles(tmp_path, "m")
    py = [sys.executable, "-c"]
    env = {"NSYS_CC_TEST_FILES": str(tmp_path / "m"), "NSYS_CC_TEST_TRIED": str(tmp_path / "m.tried")}
    cmds = ModelCommands(env, [*py, profile_code], [*py, export_code], files)
    return plan.ModelLaunch("target", resolve("tiny-llama-target"), cmds)


WRITE_OUTPUTS = ("import os; b = os.environ['NSYS_CC_TEST_FILES']; "
                 "open(b + '.bench.json', 'w').write('{}'); open(b + '.nsys-rep', 'w').write('rep')")
COPY_FIXTURE = f"import os, shutil; shutil.copy({str(FIXTURE)!r}, os.environ['NSYS_CC_TEST_FILES'] + '.sqlite')"


def test_a_complete_model_gets_its_marker(tmp_path):
    run = _run(tmp_path, WRITE_OUTPUTS, COPY_FIXTURE)
    process.run_model(run, timeout=60)
    assert (run.status, run.reason) == ("done", "")
    marker = json.loads(run.files.done.read_text())
    files = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in (run.files.recorded, run.files.trace,
                                                                           run.files.bench_json)}
    assert marker == {"commands": run.commands.shell(), "trace": "m.sqlite", "range": "model_executable()",
                      "models": [{"label": "tiny-llama-target", "role": "target", "model": "tiny-llama-target"}],
                      "forward_ranges": {"tiny-llama-target": 20},
                      "files": files}  # the sha256 of its trace set: what lets a rerun replace it
    assert resume.is_complete(run)
    log = run.files.log.read_text()
    assert log.startswith("# nsys-cc profile: ") and log.count("\n$ ") == 2


def test_a_crashing_benchmark_is_reported_with_its_error(tmp_path):
    run = _run(tmp_path, "raise SystemExit('RuntimeError: engine core died')", COPY_FIXTURE)
    process.run_model(run, timeout=60)
    assert run.status == "failed"
    assert run.reason == "benchmark under nsys failed (exit 1): RuntimeError: engine core died"
    assert not run.files.trace.exists() and not run.files.done.exists()


def test_an_unreadable_export_fails_the_model_not_the_run(tmp_path):
    run = _run(tmp_path, WRITE_OUTPUTS, "import os; open(os.environ['NSYS_CC_TEST_FILES'] + '.sqlite', 'w').write('x')")
    process.run_model(run, timeout=60)
    assert run.status == "failed" and "m.sqlite" in run.reason


def test_a_trace_without_forward_ranges_fails(tmp_path):
    scopes = FIXTURE.with_name("vllm_scopes.sqlite")
    bare = tmp_path / "bare.sqlite"
    shutil.copy(scopes, bare)
    with sqlite3.connect(bare) as conn:
        conn.execute("DELETE FROM NVTX_EVENTS")
    run = _run(tmp_path, WRITE_OUTPUTS, f"import os, shutil; shutil.copy({str(bare)!r}, "
                                        "os.environ['NSYS_CC_TEST_FILES'] + '.sqlite')")
    process.run_model(run, timeout=60)
    assert run.status == "failed" and "no model_executable() ranges" in run.reason


# a real process tree waited on past its 2 s timeout (~3 s of wall, idle): in `make test`, not the edit-test loop
@pytest.mark.slow
def test_a_timeout_kills_the_whole_process_tree(tmp_path):
    pid_file = tmp_path / "grandchild.pid"
    hang = ("import subprocess, sys, time; "
            "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'], start_new_session=True); "
            f"open({str(pid_file)!r}, 'w').write(str(p.pid)); time.sleep(600)")
    run = _run(tmp_path, hang, COPY_FIXTURE)
    t0 = time.monotonic()
    process.run_model(run, timeout=3)
    assert run.status == "failed" and run.reason == "timed out after 3 s (timeout=3)"
    assert time.monotonic() - t0 < 300  # stopped, not left to its 600 s sleep (the bound is for a busy machine)
    grandchild = int(pid_file.read_text())
    deadline = time.monotonic() + 60  # a killed process takes a moment to finish exiting; the loop ends when it has
    while _alive(grandchild) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(grandchild)


def _alive(pid: int) -> bool:
    """Running or sleeping; a killed orphan can stay a zombie until init reaps it."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


# A fake nsys whose first attempt writes what nsys 2022.4 writes when it fails before starting the program, exits
# with `rc`, and writes no report; the second attempt runs. The signs: the start racing another nsys session; what
# CI saw once, only "End of file" on stderr and exit 1; and what CI saw once (2026-12-07, another nsys session
# running), only "Connection to the Agent lost." and exit 0, 0.1 s after the start.
def failing_start(said: str, rc: int) -> str:
    return ("import os, sys; b = os.environ['NSYS_CC_TEST_FILES']; "
            "t = os.environ['NSYS_CC_TEST_TRIED']; first = not os.path.exists(t); open(t, 'a').write('x'); "
            f"{said} if first else None; sys.exit({rc}) if first else None; "
            "open(b + '.bench.json', 'w').write('{}'); open(b + '.nsys-rep', 'w').write('rep')")


@pytest.mark.slow
@pytest.mark.parametrize(("said", "rc", "logged"), [
    ("print('Dynamic exception type: boost::wrapexcept<QuadDCommon::SystemException>')", 1,
     "# nsys failed to start (exit 1, QuadDCommon::SystemException); retrying"),
    ("print('End of file', file=sys.stderr)", 1, "# nsys failed to start (exit 1, End of file); retrying"),
    ("print('Connection to the Agent lost.')", 0,
     "# nsys failed to start (exit 0, Connection to the Agent lost.); retrying"),
])
def test_nsys_failing_to_start_is_retried(tmp_path, monkeypatch, said, rc, logged):
    monkeypatch.setattr(process, "START_RETRY_PAUSE_S", 0.05)  # the pause is for a real nsys race, not this fake
    run = _run(tmp_path, failing_start(said, rc), COPY_FIXTURE)
    process.run_model(run, timeout=60)
    assert (run.status, run.reason) == ("done", "")
    assert (tmp_path / "m.tried").read_text() == "xx"
    assert logged in run.files.log.read_text()


@pytest.mark.parametrize(("rc", "output", "sign"), [
    (1, "$ nsys profile …\nEnd of file\n", "End of file"),
    (1, "\nEnd of file\n\n", "End of file"),
    (1, "Dynamic exception type: boost::wrapexcept<QuadDCommon::SystemException>\n", "QuadDCommon::SystemException"),
    (1, "RuntimeException: Local Endpoint is not available\n", "Local Endpoint is not available"),
    (0, "End of file\n", None),  # it succeeded
    (1, "INFO vLLM starting\nEnd of file\n", None),  # the program ran and printed it: its own failure
    (1, "RuntimeError: engine core died\n", None),
    (1, "", None),
    (0, "Connection to the Agent lost.\n", "Connection to the Agent lost."),  # exit 0, no report
    (1, "$ nsys profile …\n# nsys failed to start\nConnection to the Agent lost.\n", "Connection to the Agent lost."),
    (0, "Connection to the Agent lost.\nGenerating '/tmp/nsys-report-1.qdstrm'\n", "Connection to the Agent lost."),
    (0, "INFO vLLM starting\nConnection to the Agent lost.\n", None),  # the program ran: not a failed start
])
def test_the_signs_of_nsys_failing_to_start(rc, output, sign):
    assert process.nsys_start_failure(rc, output) == sign


def test_other_failures_are_not_retried(tmp_path):
    once = ("import os, sys; open(os.environ['NSYS_CC_TEST_TRIED'], 'a').write('x'); "
            "sys.exit('RuntimeError: engine core died')")
    run = _run(tmp_path, once, COPY_FIXTURE)
    process.run_model(run, timeout=60)
    assert run.status == "failed" and (tmp_path / "m.tried").read_text() == "x"


# -- a rerun never loses finished work ---------------------------------------------------------------------------------
def _trace_set(run: plan.ModelLaunch) -> list[Path]:
    f = run.files
    return [f.recorded, f.trace, f.bench_json, f.done]


def _complete(tmp_path: Path) -> plan.ModelLaunch:
    run = _run(tmp_path, WRITE_OUTPUTS, COPY_FIXTURE)
    process.run_model(run, timeout=60)
    assert run.status == "done"
    return run


FAIL_AFTER_WRITING = ("import os, sys; b = os.environ['NSYS_CC_TEST_FILES']; open(b + '.bench.json', 'w').write('[]'); "
                      "open(b + '.nsys-rep', 'w').write('new'); print('prog: error: unrecognized arguments: --bad'); "
                      "sys.exit(2)")


@pytest.mark.parametrize("profile_code, export_code, reason", [
    (FAIL_AFTER_WRITING, COPY_FIXTURE,
     "benchmark under nsys failed (exit 2): prog: error: unrecognized arguments: --bad"),
    (WRITE_OUTPUTS, "import sys; sys.exit('RuntimeError: export broke')",
     "nsys export failed (exit 1): RuntimeError: export broke"),
    (WRITE_OUTPUTS, "import os; open(os.environ['NSYS_CC_TEST_FILES'] + '.sqlite', 'w').write('x')", "m.sqlite"),
    # waits its 2 s bound: in `make test`; the loop keeps the other failed reruns above, a timeout's kill
    # (test_a_timeout_kills_the_whole_process_tree) and a hanging export's (tests/reliability/test_bad_input.py)
    pytest.param(WRITE_OUTPUTS, "import time; time.sleep(600)", "timed out after 2 s (timeout=2)",
                 marks=pytest.mark.slow),
])
def test_a_failing_rerun_keeps_the_earlier_trace_set(tmp_path, profile_code, export_code, reason):
    """The earlier attempt's files (report, export, bench JSON, marker) are byte for byte what they were, and the
    model still counts as complete for the commands that made it."""
    first = _complete(tmp_path)
    again = _run(tmp_path, profile_code, export_code)
    with unchanged(*_trace_set(first)):
        process.run_model(again, timeout=2 if "sleep" in export_code else 60)
    assert again.status == "failed" and reason in again.reason
    assert ".nsys-cc-attempts" not in again.reason  # the files named are those a user sees
    assert resume.is_complete(first)
    assert not (tmp_path / resume.ATTEMPTS_DIR).exists()


@pytest.mark.slow
def test_an_interrupted_rerun_keeps_the_earlier_trace_set(tmp_path, monkeypatch):
    first = _complete(tmp_path)
    again = _run(tmp_path, WRITE_OUTPUTS, COPY_FIXTURE)

    def interrupted(path, **checks):
        raise KeyboardInterrupt

    monkeypatch.setattr(check, "after_export", interrupted)
    with unchanged(*_trace_set(first)), pytest.raises(KeyboardInterrupt):
        process.run_model(again, timeout=60)
    # the earlier complete trace set is listed as kept (status.json then lets `analyze DIR` read it)
    assert again.status == "resumed" and again.reason.startswith("the rerun was stopped (Ctrl-C)")
    assert not (tmp_path / resume.ATTEMPTS_DIR).exists()
    fresh = _run(tmp_path / "fresh", WRITE_OUTPUTS, COPY_FIXTURE)  # nothing earlier: interrupted, as it was
    (tmp_path / "fresh").mkdir()
    with pytest.raises(KeyboardInterrupt):
        process.run_model(fresh, timeout=60)
    assert fresh.status == "interrupted"


@pytest.mark.slow
def test_a_completed_rerun_replaces_the_trace_set(tmp_path):
    first = _complete(tmp_path)
    rewrite = WRITE_OUTPUTS.replace("write('rep')", "write('second')")
    again = _run(tmp_path, rewrite, COPY_FIXTURE)
    process.run_model(again, timeout=60)
    assert again.status == "done"
    assert first.files.recorded.read_text() == "second"
    assert resume.is_complete(again)
    assert not (tmp_path / resume.ATTEMPTS_DIR).exists()


def test_an_attempt_writes_only_under_the_attempts_directory():
    """Every path of the trace set in the commands (nsys -o, the bench JSON, the export, the metrics dump) is moved;
    nothing else changes."""
    runs = planned("tiny-llama-target", ["tiny-llama-draft-s"], "/tmp/out", BenchOptions(), nsys="/opt/nsys",
                   speculate=[2])
    for run in runs:
        cmds = resume.staged(run)
        final = run.files
        words = [*cmds.profile, *cmds.export, *cmds.env.values()]
        for path in (final.base, *final.trace_set):
            assert str(path) not in words
        moved = [w for w in words if resume.ATTEMPTS_DIR in w]
        expected = {"base", "bench_json", "trace", "recorded"} | ({"metrics"} if run.speculative else set())
        assert sorted(moved) == sorted(str(getattr(cmds.files, k)) for k in expected)
        same = [a for a in run.commands.profile if a not in {str(getattr(final, k)) for k in expected}]
        assert same == [a for a in cmds.profile if resume.ATTEMPTS_DIR not in a]
