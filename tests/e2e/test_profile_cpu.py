"""`nsys-cc profile` end to end on the CPU: real nsys, real vLLM (CPU build), the plugin, the report.

One run profiles a tiny target, a tiny draft and a draft whose config cannot load; every expectation about the
traces is computed here with raw SQL on the exports and the benchmark's own JSON, never read back from nsys_cc.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pytest
from filelock import FileLock

from conftest import processes_mentioning, sha256_tree
from nsys_cc.formats import status_json
from nsys_cc.launch.models import MODELS_DIR

pytestmark = pytest.mark.vllm

NSYS_CC = str(Path(sys.executable).parent / "nsys-cc")
INPUT_LEN, OUTPUT_LEN, BATCH, WARMUP, ITERS = 32, 3, 2, 2, 2
BENCH = ["--input-len", str(INPUT_LEN), "--output-len", str(OUTPUT_LEN), "--batch-size", str(BATCH),
         "--num-iters-warmup", str(WARMUP), "--num-iters", str(ITERS), "--device", "cpu", "--separate-processes"]
GOOD = ["tiny-llama-target", "tiny-llama-draft-xs"]


def _nvtx(sqlite: Path, name: str) -> list[tuple[int, int, int | None, int]]:
    """(start, end, int64 payload, globalTid) of the push/pop ranges called `name`, in time order."""
    with sqlite3.connect(f"file:{sqlite}?mode=ro", uri=True) as conn:
        return conn.execute(
            "SELECT e.start, e.\"end\", e.int64Value, e.globalTid FROM NVTX_EVENTS e "
            "LEFT JOIN StringIds s ON s.id = e.textId "
            "WHERE e.eventType = 59 AND coalesce(e.text, s.value) = ? ORDER BY e.start", (name,)).fetchall()



def _broken_model(root: Path) -> Path:
    """A LLaMA config naming an architecture vLLM does not have: vLLM refuses to load it."""
    cfg = json.loads((MODELS_DIR / "tiny-llama-draft-xs" / "config.json").read_text())
    cfg["architectures"] = ["NoSuchModelForCausalLM"]
    path = root / "models" / "broken-draft"
    path.mkdir(parents=True)
    (path / "config.json").write_text(json.dumps(cfg))
    return path


def _profile(root: Path) -> dict:
    """Profile target + draft + broken draft, keep the status and report it wrote, then rerun without the broken
    draft in the same directory (the resume); everything the tests read, as JSON-able values."""
    out = root / "out"
    cmd = [NSYS_CC, "profile", "--target", GOOD[0], "--draft", GOOD[1], "--draft", str(_broken_model(root)),
           *BENCH, "-o", str(out), "--format", "json"]
    first = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    assert (out / "report.json").is_file(), f"nsys-cc profile wrote no report:\n{first.stderr[-3000:]}"
    found = {"out": str(out), "returncode": first.returncode, "stdout": first.stdout, "stderr": first.stderr,
             "status": json.loads((out / "status.json").read_text()),
             "report": json.loads((out / "report.json").read_text()),
             "mtimes": [(out / f"{m}.sqlite").stat().st_mtime_ns for m in GOOD]}
    again = subprocess.run([NSYS_CC, "profile", "--target", GOOD[0], "--draft", GOOD[1], *BENCH, "-o", str(out)],
                           capture_output=True, text=True, timeout=300)
    found["rerun"] = {"returncode": again.returncode, "stderr": again.stderr,
                      "mtimes": [(out / f"{m}.sqlite").stat().st_mtime_ns for m in GOOD]}
    # The same command with an option vLLM refuses: every model fails, and nothing the first runs made may change.
    kept = [p for p in out.rglob("*") if p.is_file() and not p.name.endswith((".log", "status.json"))]
    before = sha256_tree(out)
    bad = subprocess.run([NSYS_CC, "profile", "--target", GOOD[0], "--draft", GOOD[1], *BENCH, "-o", str(out),
                          "--vllm-arg=--no-such-flag"], capture_output=True, text=True, timeout=300)
    after = sha256_tree(out)
    found["failing_rerun"] = {"returncode": bad.returncode, "stderr": bad.stderr,
                              "kept": sorted(str(p.relative_to(out)) for p in kept),
                              "changed": sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))}
    return found


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> dict:
    """The runs every test below reads, made once even when pytest-xdist spreads the tests over workers
    (their temporary directories share a parent: the first worker profiles, the others wait and read)."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return _profile(tmp_path_factory.mktemp("profile-e2e"))
    root = tmp_path_factory.getbasetemp().parent / "profile-e2e"
    root.mkdir(exist_ok=True)
    result = root / "result.json"
    with FileLock(str(root / "lock")):
        if not result.exists():
            result.write_text(json.dumps(_profile(root)))
    return json.loads(result.read_text())


def test_a_failing_model_does_not_lose_the_others(run):
    out = Path(run["out"])
    assert run["returncode"] == 1, run["stderr"]
    assert "1 of 3 models failed" in run["stderr"]
    status = {s["label"]: s for s in status_json.models_of(run["status"])}
    assert [status[m]["status"] for m in GOOD] == ["done", "done"]
    broken = status["broken-draft"]
    assert broken["status"] == "failed" and "NoSuchModelForCausalLM" in broken["reason"]
    assert "NoSuchModelForCausalLM" in Path(broken["log"]).read_text()
    assert any("broken-draft" in n and "FAILED" in n and broken["log"] in n for n in run["report"]["notes"])
    for m in GOOD:
        for suffix in (".nsys-rep", ".sqlite", ".bench.json", ".log"):
            assert (out / f"{m}{suffix}").is_file()


@pytest.mark.parametrize("model", GOOD)
def test_one_forward_range_per_forward_with_token_payloads(run, model):
    out = Path(run["out"])
    forwards = _nvtx(out / f"{model}.sqlite", "model_executable()")
    assert len(forwards) == (WARMUP + ITERS) * OUTPUT_LEN
    # Each iteration: one prefill of every prompt token, then OUTPUT_LEN − 1 decodes of one token per sequence.
    assert [f[2] for f in forwards] == [INPUT_LEN * BATCH, *[BATCH] * (OUTPUT_LEN - 1)] * (WARMUP + ITERS)


@pytest.mark.parametrize("model", GOOD)
def test_warmup_and_measured_iterations_are_marked(run, model):
    out = Path(run["out"])
    sqlite = out / f"{model}.sqlite"
    warmup, measured = _nvtx(sqlite, "nsys_cc:warmup"), _nvtx(sqlite, "nsys_cc:iteration")
    assert [w[2] for w in warmup] == [BATCH] * WARMUP and [m[2] for m in measured] == [BATCH] * ITERS
    assert max(w[1] for w in warmup) < min(m[0] for m in measured)
    forwards = _nvtx(sqlite, "model_executable()")
    inside = [[i for i, (s, e, _, _) in enumerate(warmup + measured) if s <= f[0] <= e] for f in forwards]
    per_iteration = [i for ranges in inside for i in ranges]
    assert all(len(r) == 1 for r in inside)
    assert per_iteration == sorted(per_iteration)
    assert [per_iteration.count(i) for i in range(WARMUP + ITERS)] == [OUTPUT_LEN] * (WARMUP + ITERS)
    bench = json.loads((out / f"{model}.bench.json").read_text())
    assert len(bench["latencies"]) == ITERS


def test_report_numbers_are_those_of_analyze(run):
    out = Path(run["out"])
    cmd = [NSYS_CC, "analyze", *(str(out / f"{m}.sqlite") for m in GOOD), *(a for m in GOOD for a in ("--name", m)),
           "--output-len", str(OUTPUT_LEN), "--format", "json"]
    analyzed = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert analyzed.returncode == 0, analyzed.stderr
    assert json.loads(run["stdout"]) == json.loads(analyzed.stdout)
    assert run["report"]["coefficients"] == json.loads(analyzed.stdout)["coefficients"]


@pytest.mark.parametrize("model", GOOD)
def test_forward_share_against_the_benchmarks_own_latencies(run, model):
    out = Path(run["out"])
    sqlite = out / f"{model}.sqlite"
    latencies = json.loads((out / f"{model}.bench.json").read_text())["latencies"]
    forwards = _nvtx(sqlite, "model_executable()")
    shares = []
    for (start, end, _, _), latency in zip(_nvtx(sqlite, "nsys_cc:iteration"), latencies):
        covered = sum(e - s for s, e, _, _ in forwards if start <= s <= end)
        shares.append(covered / 1e9 / latency)
    row = next(r for r in run["report"]["forward_share"] if r["model"] == model)
    assert row["iterations"] == ITERS
    assert row["forward_share"] == pytest.approx(statistics.median(shares), abs=1e-3)
    assert row["share_min"] == pytest.approx(min(shares), abs=1e-3)
    assert 0 < min(shares) and max(shares) < 1


def test_a_rerun_resumes_completed_models(run):
    rerun = run["rerun"]
    assert rerun["returncode"] == 0, rerun["stderr"]
    assert rerun["stderr"].count("already complete") == 2
    assert rerun["mtimes"] == run["mtimes"]


def test_a_failing_rerun_changes_nothing_and_says_why(run):
    """A rerun with an option vLLM refuses used to delete every trace before the new attempt started, and
    printed a path as the reason. Now the traces, bench files, markers and report stay byte for byte, and the reason
    is vLLM's own line."""
    bad = run["failing_rerun"]
    assert bad["returncode"] == 2, bad["stderr"]
    assert {f"{m}{s}" for m in GOOD for s in (".sqlite", ".nsys-rep", ".bench.json", ".done.json")} <= set(bad["kept"])
    assert "report.json" in bad["kept"]
    assert set(bad["changed"]) <= {f"{m}.log" for m in GOOD} | {"status.json"}, bad["changed"]
    assert bad["stderr"].count("error: unrecognized arguments: --no-such-flag") >= 2, bad["stderr"]
    assert ".nsys-cc-attempts" not in bad["stderr"]
    assert not (Path(run["out"]) / ".nsys-cc-attempts").exists()


def test_timeout_stops_the_benchmark_and_reports_it(tmp_path):
    out = tmp_path / "out"
    cmd = [NSYS_CC, "profile", "--target", GOOD[0], "--draft", GOOD[1], *BENCH, "--timeout", "2", "-o", str(out)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2
    assert done.stderr.count("timed out after 2 s") >= 2 and "nsys-cc: error: no report" in done.stderr
    status = status_json.models_of(json.loads((out / "status.json").read_text()))
    assert [s["status"] for s in status] == ["failed", "failed"]
    assert not processes_mentioning(str(out))


def test_ctrl_c_keeps_what_is_done_and_says_what_is_missing(tmp_path):
    out = tmp_path / "out"
    cmd = [NSYS_CC, "profile", "--target", GOOD[0], "--draft", GOOD[1], *BENCH, "-o", str(out)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    log = out / f"{GOOD[0]}.log"
    deadline = time.monotonic() + 600  # only against a hang: the loop ends as soon as the benchmark has started
    while not (log.is_file() and "nsys_cc.vllm.bench" in log.read_text()) and time.monotonic() < deadline:
        time.sleep(0.2)
    time.sleep(2)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert "interrupted" in err
    status = status_json.models_of(json.loads((out / "status.json").read_text()))
    assert [s["status"] for s in status] == ["interrupted", "not run"]
    assert log.is_file()
    assert not processes_mentioning(str(out))
