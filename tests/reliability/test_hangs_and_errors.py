"""Hangs and runaway work, tracebacks, errors that name the wrong thing, and numbers that changed without a word,
on crafted exports and tampered profile directories — each case a test that fails without its fix (tune's own
cases are in tests/reliability/test_tune_writes.py, the report's SIGKILL in tests/files/test_publishing.py).
Files outside
`-o` are hashed before and after where a case writes.
"""

from __future__ import annotations

import json
import math
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

from conftest import FIXTURES, REPO, bounded, cli_in_process, slow_column, unchanged
from nsys_cc.errors import InputError, NsysCCError

PACKAGE = REPO / "nsys_cc"
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
@pytest.mark.slow
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


# A stand-in for what nsys starts (`_stand_in`): a "benchmark" that starts a process leaving its session (as vLLM's
# engine process may) which writes into the folder it is given every 50 ms; the benchmark prints both pids.
TICKER = """import os, sys, time
while True:
    with open(os.path.join(sys.argv[1], "tick"), "a") as fh:
        fh.write("x")
    time.sleep(0.05)
"""
BENCH = """import os, subprocess, sys, time
p = subprocess.Popen([sys.executable, sys.argv[1], sys.argv[2]], start_new_session=True)
print(os.getpid(), p.pid, flush=True)
time.sleep(600)
"""


def _stand_in(tmp_path: Path) -> tuple[Path, Path]:
    (tmp_path / "ticker.py").write_text(TICKER)
    (tmp_path / "bench.py").write_text(BENCH)
    return tmp_path / "bench.py", tmp_path / "ticker.py"


def _ticking(where: Path, deadline_s: float = 60) -> int:
    deadline = time.monotonic() + deadline_s
    while not (where / "tick").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    return (where / "tick").stat().st_size


def _pids_from(log: Path, deadline_s: float = 60) -> list[int]:
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        for line in (log.read_text().splitlines() if log.exists() else []):
            words = line.split()
            if len(words) == 2 and all(w.isdigit() for w in words):
                return [int(w) for w in words]
        time.sleep(0.05)
    raise AssertionError(f"the stand-in never started: {log.read_text() if log.exists() else 'no log'}")


def _all_gone(pids: list[int], within_s: float) -> bool:
    deadline = time.monotonic() + within_s
    while any(_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not any(_alive(p) for p in pids)


@pytest.mark.slow
def test_kill_9_of_nsys_cc_takes_everything_it_started_with_it(tmp_path):
    """`kill -9` of nsys-cc alone left the benchmark and vLLM running for over 5 s, writing into `run-1.attempt/`.
    The command's keeper (`nsys_cc.keeper`) sees nsys-cc's end and SIGKILLs everything below it — a process that
    left its parent's session included."""
    log, where = tmp_path / "log", tmp_path / "attempt"
    where.mkdir()
    bench, ticker = _stand_in(tmp_path)
    script = ("import sys\nfrom nsys_cc.launch.process import run_logged\n"
              f"with open({str(log)!r}, 'w') as log:\n"
              f"    run_logged([sys.executable, {str(bench)!r}, {str(ticker)!r}, {str(where)!r}], {{}}, log, None)\n")
    _killed_takes_its_tree_along(subprocess.Popen([sys.executable, "-c", script], env=ENV), log, where)


def _killed_takes_its_tree_along(proc: subprocess.Popen, started: Path, where: Path) -> None:
    """SIGKILL `proc` (nsys-cc) once the stand-in it started (`_stand_in`: its pids in `started`) writes into
    `where`: nothing of the stand-in runs 5 s later, and nothing writes into `where` any more."""
    pids: list[int] = []
    try:
        pids = _pids_from(started)
        _ticking(where)
        assert all(_alive(p) for p in pids)
        proc.kill()  # SIGKILL: nothing in nsys-cc runs after it
        proc.wait(30)
        assert _all_gone(pids, 5), "what nsys-cc started still runs 5 s after its kill -9"
        ticks = (where / "tick").stat().st_size
        time.sleep(0.3)
        assert (where / "tick").stat().st_size == ticks
    finally:
        for pid in pids:
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
        proc.kill()
        proc.wait()


@pytest.mark.slow  # a real `nsys-cc analyze` killed during its export (~2 s): in `make test`
def test_kill_9_of_analyze_during_an_export_stops_the_export(tmp_path):
    """`nsys-cc analyze r.nsys-rep d.sqlite` exports the report with nsys first. The export ran in a session of its
    own with a timeout, not under the keeper: a `kill -9` of nsys-cc left nsys and what it started running (into the
    export cache). Now the export has the keeper every command has, and dies with nsys-cc."""
    where = tmp_path / "export"
    where.mkdir()
    bench, ticker = _stand_in(tmp_path)
    started = tmp_path / "started"
    fake = tmp_path / "nsys"
    fake.write_text(f"""#!{sys.executable}
import subprocess, sys
if sys.argv[1:2] == ["--version"]:
    print("NVIDIA Nsight Systems version 2022.4.2.1-3ad1ba9")
    raise SystemExit(0)
subprocess.Popen([sys.executable, {str(bench)!r}, {str(ticker)!r}, {str(where)!r}],
                 stdout=open({str(started)!r}, "a")).wait()
""")
    fake.chmod(0o755)
    report = tmp_path / "r.nsys-rep"
    shutil.copyfile(VLLM / "tiny-llama-target.nsys-rep", report)
    env = {**ENV, "NSYS": str(fake), "NSYS_CC_CACHE": str(tmp_path / "cache"), "NSYS_CC_QUIET": "1"}
    proc = subprocess.Popen([sys.executable, "-c", "from nsys_cc.cli import main; main()", "analyze", str(report),
                             str(DRAFT)], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _killed_takes_its_tree_along(proc, started, where)


def test_the_keeper_says_why_it_could_not_start_its_command():
    """The keeper's line when its command cannot start (exit status 127) is how `nsys export`'s missing or
    unrunnable nsys is told (`cannot run nsys at …: <reason>`); a command that exits 127 itself is not that."""
    from nsys_cc import keeper

    line = f"{keeper.CANNOT_RUN}/opt/my: nsys/bin/nsys: Permission denied\n"
    assert keeper.cannot_run(127, "some output\n" + line) == "Permission denied"
    assert keeper.cannot_run(1, line) is None
    assert keeper.cannot_run(127, "sh: nsys: not found\n") is None


@pytest.mark.slow
def test_the_keeper_passes_the_exit_status_and_the_output_on(tmp_path):
    from nsys_cc.launch.process import run_logged

    with open(tmp_path / "log", "w") as log:
        rc = run_logged([sys.executable, "-c", "print('hello'); raise SystemExit(3)"], dict(ENV), log, 60)
        killed = run_logged([sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"],
                            dict(ENV), log, 60)
        missing = run_logged([str(tmp_path / "no-such-program")], dict(ENV), log, 60)
    text = (tmp_path / "log").read_text()
    assert rc == 3 and killed == 128 + signal.SIGKILL and missing == 127
    assert "hello" in text and "cannot run" in text and "no-such-program" in text


@pytest.mark.slow  # a whole `nsys-cc profile` process killed mid-run (~5 s): in `make test`
def test_kill_9_of_a_profile_stops_nsys_and_a_rerun_gets_its_own_attempt_folder(tmp_path):
    """The case as a user meets it: `nsys-cc profile` (a stand-in nsys whose program writes into the run's attempt
    folder) killed with SIGKILL; nothing it started runs 5 s later, and the rerun writes into an attempt folder of
    its own, never the one an orphan wrote into."""
    fake = tmp_path / "nsys"
    started = tmp_path / "started"
    bench, ticker = _stand_in(tmp_path)
    fake.write_text(f"""#!{sys.executable}
import os, subprocess, sys, time
if sys.argv[1:2] == ["--version"]:
    print("NVIDIA Nsight Systems version 2022.4.2.1-3ad1ba9")
    raise SystemExit(0)
out = os.path.dirname(sys.argv[sys.argv.index("-o") + 1])
p = subprocess.Popen([sys.executable, {str(bench)!r}, {str(ticker)!r}, out], stdout=open({str(started)!r}, "a"))
p.wait()
""")
    fake.chmod(0o755)
    out = tmp_path / "o"
    env = {**ENV, "NSYS": str(fake), "NSYS_CC_QUIET": "1"}
    cmd = [sys.executable, "-c", "from nsys_cc.cli import main; main()", "profile", "--target", "tiny-llama-target",
           "--draft", "tiny-llama-draft-s", "--device", "cpu", "--repeat", "1", "-o", str(out)]
    pids: list[int] = []
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        pids = _pids_from(started, 120)
        (first,) = [p for p in out.iterdir() if p.name.startswith("run-1.attempt")]
        _ticking(first)
        proc.kill()
        proc.wait(30)
        assert _all_gone(pids, 5), "the stand-in benchmark still runs 5 s after nsys-cc's kill -9"
        started.unlink()
        again = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            pids += _pids_from(started, 120)
            fresh = [p for p in out.iterdir() if p.name.startswith("run-1.attempt") and p != first]
            assert len(fresh) == 1 and _ticking(fresh[0]), fresh  # the rerun's own folder, not reused
            assert (first / "tick").exists() and not (first / "log").exists()  # cleaned of what nsys-cc wrote
        finally:
            again.kill()
            again.wait(30)
    finally:
        for pid in pids:
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
        proc.kill()
        proc.wait()
    assert _all_gone(pids, 5)


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
        slow_column(con)
        con.commit()
    finally:
        con.close()


@pytest.mark.slow
def test_ctrl_c_during_a_long_query_is_a_ctrl_c_not_a_corrupt_file(tmp_path, cache_dir, monkeypatch):
    """A Ctrl-C lands in the query bound's Python callback, and SQLite swallows what a callback raises: the
    statement stopped as "interrupted", read as a corrupt file — and `tune` skipped that cell and ran on (the
    intermittent SIGINT that had no effect)."""
    from nsys_cc.trace import open_trace

    slow = shutil.copyfile(TARGET, tmp_path / "slow.sqlite")
    _slow(slow)
    monkeypatch.setenv("NSYS_CC_QUERY_TIMEOUT", "120")
    timer = threading.Timer(0.5, lambda: os.kill(os.getpid(), signal.SIGINT))
    with unchanged(slow), bounded(60), pytest.raises(KeyboardInterrupt):
        timer.start()
        try:
            with open_trace(slow, cache_dir=cache_dir) as trace:
                trace.nvtx_ranges()
        finally:
            timer.cancel()


@pytest.mark.slow
def test_the_query_bound_still_stops_a_slow_query(tmp_path, cache_dir, monkeypatch):
    from nsys_cc.trace import open_trace

    slow = shutil.copyfile(TARGET, tmp_path / "slow.sqlite")
    _slow(slow)
    monkeypatch.setenv("NSYS_CC_QUERY_TIMEOUT", "0.3")  # a fraction of a second: the bound is what is tested
    with bounded(60), pytest.raises(InputError, match=r"a query ran longer than 0\.3 s and was stopped"):
        with open_trace(slow, cache_dir=cache_dir) as trace:
            trace.nvtx_ranges()


def test_attempts_a_kill_left_are_removed_by_the_next_profile(tmp_path, monkeypatch):
    """`run-1.attempt/` survived a SIGKILL and the next profile (run-1 was complete, so never attempted again),
    though the docs say the next profile removes it."""
    from conftest import interleaved_runs
    from nsys_cc.launch import interleaved, interleaved_run
    from nsys_cc.launch.models import resolve

    out = tmp_path / "O"
    out.mkdir()
    for name in ("run-1.attempt", "run-7.attempt"):
        (out / name).mkdir()
        (out / name / "log").write_text("a killed attempt\n")
    (out / "run-1.attemptive").mkdir()  # not an attempt's name: the user's
    (out / "run-1.attemptive" / "mine.txt").write_text("mine\n")
    monkeypatch.setattr(interleaved_run, "execute", lambda run, *a, **kw: setattr(run, "status", "failed"))
    engines = [interleaved.Engine("target", resolve("tiny-llama-target"), ()),
               interleaved.Engine("draft", resolve("tiny-llama-draft-s"), ())]
    with unchanged(out / "run-1.attemptive"):
        interleaved_runs(monkeypatch, engines, out)
    assert not (out / "run-1.attempt").exists() and not (out / "run-7.attempt").exists()


# -- numbers that changed without a word ------------------------------------------------------------------------------
def _relaxed_copy(src: Path, dst: Path, *sql: str) -> Path:
    """A copy of `src` with its NVTX_EVENTS and CUDA tables rebuilt without constraints, then `sql` run on it."""
    shutil.copyfile(src, dst)
    con = sqlite3.connect(dst)
    try:
        for table in ("NVTX_EVENTS", "CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME"):
            if con.execute("SELECT 1 FROM sqlite_master WHERE name = ?", (table,)).fetchone():
                con.execute(f"CREATE TABLE _f AS SELECT * FROM {table} ORDER BY rowid")
                con.execute(f"DROP TABLE {table}")
                con.execute(f"ALTER TABLE _f RENAME TO {table}")
        for statement in sql:
            con.execute(statement)
        con.commit()
    finally:
        con.close()
    return dst


def _c(result) -> dict:
    return {(r.draft, r.phase, r.metric): r.c for r in result.coefficients.itertuples()}


@pytest.mark.slow
def test_every_nvtx_row_duplicated_counts_logits_and_sampling_once_too(tmp_path):
    """`INSERT INTO NVTX_EVENTS SELECT * FROM NVTX_EVENTS`: the forwards were counted once with a note, but the
    logits and sampling twice — decode c 0.852 instead of 0.653. The c is now the untouched trace's, and the note
    names every range it dropped copies of."""
    from nsys_cc.analysis.coefficient.measure import cost_coefficient

    doubled = _relaxed_copy(TARGET, tmp_path / "doubled.sqlite", "INSERT INTO NVTX_EVENTS SELECT * FROM NVTX_EVENTS")
    with unchanged(doubled, DRAFT):
        got = cost_coefficient(str(doubled), [str(DRAFT)], names=["t", "d"])
    want = cost_coefficient(str(TARGET), [str(DRAFT)], names=["t", "d"])
    assert _c(got) == pytest.approx(_c(want))
    (note,) = [n for n in got.notes if "duplicated row(s)" in n]
    for name in ("model_executable()", "nsys_cc:logits", "nsys_cc:sample"):
        assert f"20 duplicated row(s) of {name!r}" in note


@pytest.mark.slow
def test_a_correlation_id_shared_by_every_kernel_is_said(tmp_path):
    """Every kernel given one correlationId (no CUDA graph traced): all of them counted for the one call with that
    id and the ranges that launched them missing their work — 16 GEMM rows gone without a note."""
    from gpu_shaped import FORWARD, add_gpu_work, steady

    from nsys_cc.analysis.coefficient.measure import cost_coefficient

    spec = FIXTURES / "spec"
    shaped = add_gpu_work(spec / "tiny-llama-target.sqlite", tmp_path / "t.sqlite", steady(1.5, names=(FORWARD,)),
                          names=(FORWARD,))
    draft = add_gpu_work(spec / "tiny-llama-draft-xs.sqlite", tmp_path / "d.sqlite", steady(1.5, names=(FORWARD,)),
                         names=(FORWARD,))
    damaged = _relaxed_copy(shaped.path, tmp_path / "damaged.sqlite", "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET "
                            "correlationId = (SELECT min(correlationId) FROM CUPTI_ACTIVITY_KIND_KERNEL)")
    clean = cost_coefficient(str(shaped.path), [str(draft.path)], names=["t", "d"])
    assert not [n for n in clean.notes if "correlationId" in n]
    got = cost_coefficient(str(damaged), [str(draft.path)], names=["t", "d"])
    kernels = sqlite3.connect(damaged).execute("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()[0]
    (note,) = [n for n in got.notes if "share their process's correlationId" in n]
    assert f"{kernels:,} GPU ops share" in note and note.startswith("t: ")


def test_zero_length_forwards_are_said(tmp_path):
    from nsys_cc.analysis.coefficient.measure import cost_coefficient

    flat = _relaxed_copy(DRAFT, tmp_path / "d.sqlite", 'UPDATE NVTX_EVENTS SET "end" = start WHERE textId = '
                         "(SELECT id FROM StringIds WHERE value = 'model_executable()')")
    got = cost_coefficient(str(TARGET), [str(flat)], names=["t", "d"])
    assert any(n.startswith("d: ") and "every kept 'model_executable()' range lasts 0 ns" in n for n in got.notes)


@pytest.mark.slow
@pytest.mark.parametrize("value", [-0.5, 0, float("nan")])
def test_latencies_that_are_no_time_give_no_forward_share(tmp_path, value):
    """Negative bench latencies printed "per run −76 %–75 %"; now the file is no latency record, said in a note."""
    from nsys_cc.analysis.coefficient.of_profile import analyze_profile

    out = tmp_path / "O"
    shutil.copytree(FIXTURES / "interleaved", out, ignore=shutil.ignore_patterns("spec", "README.md"))
    bench = out / "run-1" / "tiny-llama-target.bench.json"
    doc = json.loads(bench.read_text())
    doc["latencies"] = [value] + doc["latencies"][1:]
    bench.write_text(json.dumps(doc))
    result = analyze_profile(out)
    (note,) = [n for n in result.notes if "no forward share" in n]
    assert note.startswith("tiny-llama-target: ") and "tiny-llama-target.bench.json is not a vLLM latency" in note
    (share,) = [n for n in result.notes if n.startswith("tiny-llama-target: forward ranges cover")]
    assert "median over 2 runs" in share and "−" not in share and "-" not in share.split("per run")[1][:3]


def _status(out: Path, runs: list[int]) -> None:
    labels = ["tiny-llama-target", "tiny-llama-draft-s", "tiny-llama-draft-xs"]
    (out / "status.json").write_text(json.dumps({
        "runs": [{"run": k, "status": "done"} for k in runs], "stopped_by": "repeat",
        "models": [{"role": "target" if i == 0 else "draft", "label": lab, "status": "done"}
                   for i, lab in enumerate(labels)]}))


@pytest.fixture
def profile_dir(tmp_path):
    out = tmp_path / "O"
    shutil.copytree(FIXTURES / "interleaved", out, ignore=shutil.ignore_patterns("spec", "README.md"))
    return out


@pytest.mark.slow
def test_a_run_listed_twice_is_refused_not_pooled_twice(profile_dir):
    from nsys_cc.analysis.coefficient.of_profile import analyze_profile

    _status(profile_dir, [1, 2, 3])
    analyze_profile(profile_dir)  # as profile wrote it
    _status(profile_dir, [1, 1, 2, 3])
    with unchanged(profile_dir), pytest.raises(InputError, match=r"status\.json is not a profile's status file "
                                                                 r"\(run 1 is listed twice\)"):
        analyze_profile(profile_dir)


def test_a_trace_linked_as_another_runs_is_refused_not_pooled_as_a_second_run(profile_dir):
    from nsys_cc.analysis.coefficient.of_profile import analyze_profile

    (profile_dir / "run-2" / "trace.sqlite").unlink()
    os.link(profile_dir / "run-1" / "trace.sqlite", profile_dir / "run-2" / "trace.sqlite")
    for with_status in (False, True):
        if with_status:
            _status(profile_dir, [1, 2, 3])
        with unchanged(profile_dir), pytest.raises(InputError, match=r"run-2/trace\.sqlite is the same file as "
                                                                     r".*run-1/trace\.sqlite \(a link\)"):
            analyze_profile(profile_dir)


def test_a_label_that_is_a_path_reads_nothing_outside(tmp_path):
    """A status label `../t` made `analyze` read `../t.sqlite`, outside the profile directory."""
    from nsys_cc.analysis.coefficient.of_profile import analyze_profile

    out = tmp_path / "O"
    out.mkdir()
    shutil.copyfile(TARGET, tmp_path / "t.sqlite")  # outside -o
    shutil.copyfile(DRAFT, out / "d.sqlite")
    (out / "status.json").write_text(json.dumps([
        {"role": "target", "label": "../t", "status": "done"}, {"role": "draft", "label": "d", "status": "done"}]))
    with unchanged(tmp_path), pytest.raises(InputError, match=r"the model label '\.\./t' is a path, not a name"):
        analyze_profile(out)


def test_a_bad_label_in_done_json_is_the_files_fault_not_names(profile_dir):
    """A label of two lines in a run's done.json was blamed on --name, which the user never gave."""
    done = profile_dir / "run-1" / "done.json"
    doc = json.loads(done.read_text())
    doc["engines"] = {"tiny-llama-target": "done", "bad\nlabel": "done"}
    done.write_text(json.dumps(doc))
    got = cli_in_process("analyze", str(profile_dir))
    assert got.returncode == 2 and "--name" not in got.stderr and "done.json" in got.stderr, got.stderr


# -- the live gauges and α ---------------------------------------------------------------------------------------------
def _steps(target_s=0.01, n=20):
    from nsys_cc.contract import LIVE_VERIFY
    from nsys_cc.live.timing import StepRecord

    return [StepRecord(LIVE_VERIFY, 2.0, 0.02, target_s, [0.002, 0.002], 0.0, [0.0, 0.0], 4) for _ in range(n)]


def test_no_gamma_is_advised_from_a_window_with_no_measured_verify_token():
    """The gauge published best γ when the verify token measured 0 (c NaN): a γ from nothing."""
    from nsys_cc.analysis.tune.live import estimate

    assert estimate(_steps(), 0.7).num_speculative_tokens is not None  # a measured window advises a γ
    est = estimate(_steps(target_s=0.0), 0.7)
    assert est is not None and math.isnan(est.c) and est.num_speculative_tokens is None


@pytest.mark.parametrize("column", ["kind", "tokens_per_seq", "step_s", "target_s", "num_drafts", "draft_s", "batch"])
@pytest.mark.parametrize("value", [math.inf, -math.inf, math.nan, -1.0, 1e308])
def test_a_payload_of_impossible_numbers_is_no_record_never_an_exception(column, value):
    """inf in a count raised OverflowError out of the stat logger (inside vLLM's API server)."""
    from nsys_cc.analysis.tune.live import estimate
    from nsys_cc.live import channel

    payload = channel.encode(_steps(n=3))
    payload[column][0] = value
    records = channel.decode(payload)
    finite_time = column in ("tokens_per_seq", "step_s", "target_s", "draft_s") and value == 1e308
    if not (column == "step_s" and math.isnan(value)) and not finite_time:  # NaN: an unknown period, by design
        assert records == []
    estimate(records, 0.7)


@pytest.mark.parametrize("field", ["target_s", "tokens_per_seq", "step_s"])
@pytest.mark.parametrize("value", [math.inf, -1.0])
def test_the_estimator_leaves_out_records_of_impossible_numbers(field, value):
    from dataclasses import replace

    from nsys_cc.analysis.tune.live import batch_schedule, estimate

    good = _steps()
    bad = [replace(r, **{field: value}) for r in _steps(n=5)]
    want = estimate(good, 0.7)
    got = estimate([*good, *bad], 0.7)
    assert got is not None and got.steps == want.steps and got.c == pytest.approx(want.c)
    assert batch_schedule([*good, *bad], None, 0.7) == batch_schedule(good, None, 0.7)
    assert estimate(bad, 0.7) is None and batch_schedule(bad, None, 0.7) is None


def test_acceptance_minus_zero_is_zero():
    from nsys_cc.analysis.profile_dir.acceptance import parse_alphas

    (a,) = parse_alphas("-0")
    assert math.copysign(1.0, a) == 1.0
    done = cli_in_process("analyze", str(TARGET), str(DRAFT), "--acceptance", "-0")
    assert done.returncode == 0 and "-0" not in done.stdout, done.stdout


def test_a_metrics_position_that_is_no_small_number_is_one_error(tmp_path):
    from nsys_cc.analysis.profile_dir import acceptance

    for position in ("²", "99999999999"):
        dump = tmp_path / "m.json"
        dump.write_text(json.dumps({"format": acceptance.DUMP_FORMAT, "metrics": [
            {"name": "vllm:spec_decode_num_accepted_tokens_per_pos", "labels": {"position": position}, "value": 3}]}))
        with bounded(30), pytest.raises(NsysCCError):
            acceptance.load(dump)


# -- one line, never a traceback; errors that name the right thing ---------------------------------------------------
def test_a_speculative_config_nested_30000_deep_is_one_line():
    from nsys_cc.launch.plan import parse_speculative_config

    with pytest.raises(InputError, match=r"speculative_config is nested deeper than 200 levels"):
        parse_speculative_config("[" * 30_000 + "]" * 30_000)
    done = cli_in_process("profile", "--target", "tiny-llama-target", "--draft", "tiny-llama-draft-s",
                          "--speculative-config", '{"a":' * 30_000 + "1" + "}" * 30_000, "--dry-run")
    assert done.returncode == 2 and "Traceback" not in done.stderr and "RecursionError" not in done.stderr
    assert done.stderr.startswith("nsys-cc: error: --speculative-config is nested deeper"), done.stderr


@pytest.mark.parametrize("value", [str(10**20), str(2**31)])
def test_an_output_length_no_array_holds_is_one_line(value):
    """`kernels --output-len 1e20` raised OverflowError in the phases of a GPU trace."""
    from nsys_cc.analysis.coefficient.arguments import check_range_arguments

    with pytest.raises(InputError, match=r"output_len must be at most 2147483647"):
        check_range_arguments(None, int(value))
    done = cli_in_process("kernels", str(TARGET), "--output-len", value)
    assert done.returncode == 2 and done.stderr.startswith("nsys-cc: error: --output-len must be at most"), \
        done.stderr


@pytest.mark.slow
def test_a_scheduler_that_is_no_dask_is_one_line(tmp_path):
    """An HTTP server given as --scheduler: Dask read its reply as a frame length and asked for 3 EiB (MemoryError),
    and the half-made client printed a traceback at exit."""
    pytest.importorskip("distributed")
    import contextlib
    import socket

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(4)
    port = server.getsockname()[1]

    def serve():
        for _ in range(4):
            try:
                conn, _ = server.accept()
            except OSError:
                return
            with conn:
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello" * 50)
                with contextlib.suppress(OSError):
                    conn.recv(1 << 16)

    threading.Thread(target=serve, daemon=True).start()
    sets = tmp_path / "sets.json"
    sets.write_text(json.dumps([{"target": str(TARGET), "drafts": [str(DRAFT)]}]))
    try:
        done = subprocess.run([sys.executable, "-c", "from nsys_cc.cli import main; main()", "analyze", str(sets),
                               "--scheduler", f"tcp://127.0.0.1:{port}"], capture_output=True, text=True, env=ENV,
                              timeout=120)
    finally:
        server.close()
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines() == [done.stderr.strip()] and "is no Dask cluster" in done.stderr
    assert "Traceback" not in done.stderr and "internal error" not in done.stderr


@pytest.mark.slow
def test_a_generator_of_drafts_is_read_once():
    import nsys_cc

    got = nsys_cc.analyze(TARGET, (d for d in [DRAFT]), names=["t", "d"])
    want = nsys_cc.analyze(TARGET, [DRAFT], names=["t", "d"])
    assert _c(got) == _c(want)


def test_nvtx_events_as_a_view_is_called_a_view_not_missing(tmp_path):
    view = shutil.copyfile(TARGET, tmp_path / "view.sqlite")
    con = sqlite3.connect(view)
    con.execute("ALTER TABLE NVTX_EVENTS RENAME TO NVTX_RAW")
    con.execute("CREATE VIEW NVTX_EVENTS AS SELECT * FROM NVTX_RAW")
    con.commit()
    con.close()
    with unchanged(view):
        done = cli_in_process("analyze", str(view), str(DRAFT))
    assert done.returncode == 2 and "its NVTX_EVENTS is a view, not the table nsys exports" in done.stderr
    assert "nsys profile -t nvtx" not in done.stderr


def test_the_full_disk_line_names_the_file(capsys):
    import errno

    from nsys_cc.cli import _cannot_write_output

    with pytest.raises(SystemExit):
        _cannot_write_output(OSError(errno.ENOSPC, "No space left on device", "/o/status.json"))
    assert capsys.readouterr().err.strip() == "nsys-cc: error: cannot write /o/status.json: No space left on device"


@pytest.mark.parametrize("verb", ["analyze", "profile", "sweep"])
def test_an_empty_output_name_is_one_line_not_ignored(tmp_path, verb, monkeypatch):
    """`-o ''` was silently ignored (exit 0, no report); tune wrote its report into the current directory."""
    monkeypatch.chdir(tmp_path)
    args = {"analyze": ["analyze", str(TARGET), str(DRAFT)],
            "profile": ["profile", "--target", "tiny-llama-target", "--draft", "tiny-llama-draft-s", "--device",
                        "cpu"],
            "sweep": ["sweep", "--target", "tiny-llama-target", "--draft", "tiny-llama-draft-s", "--device", "cpu",
                      "--batch-size", "1"]}[verb]
    done = cli_in_process(*args, "-o", "")
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1 and "'--output': the directory name is empty" in lines[0], lines
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow  # a whole report with its plots (~4 s); tune's line is checked in the loop (test_reliability_tune)
def test_a_newline_in_the_report_name_forges_no_error_line(tmp_path):
    out = tmp_path / "O\nnsys-cc: error: forged"
    done = cli_in_process("analyze", str(TARGET), str(DRAFT), "-o", str(out))
    assert done.returncode == 0, done.stderr
    assert not [ln for ln in done.stderr.splitlines() if ln.startswith("nsys-cc: error")], done.stderr
