"""`nsys-cc profile`'s interleaved runs end to end on the CPU: real nsys, real vLLM (CPU build), the interleaving
driver, the report. Every expectation about the traces is computed here with raw SQL on the exports and the driver's
own JSON, never read back from nsys_cc."""

from __future__ import annotations

import json
import sqlite3
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import decode_tokens_ms, named_ranges

pytestmark = pytest.mark.vllm

NSYS_CC = str(Path(sys.executable).parent / "nsys-cc")
TARGET, DRAFT = "tiny-llama-target", "tiny-llama-draft-xs"
INPUT_LEN, OUTPUT_LEN, BATCH, WARMUP, ITERS, RUNS = 32, 4, 2, 1, 2, 2


def _decode_ms(sqlite: Path, label: str, *, token: bool = False) -> list[float]:
    """A model's decode forwards (with `token`, tokens) in its engine's windows, not in a warm-up, ms: the raw-SQL
    oracle (conftest.decode_tokens_ms)."""
    return list(decode_tokens_ms(sqlite, label, BATCH, token=token))


@pytest.fixture(scope="module")
def profiled(tmp_path_factory):
    out = tmp_path_factory.mktemp("interleaved") / "out"
    cmd = [NSYS_CC, "profile", "--target", TARGET, "--draft", DRAFT, "--repeat", str(RUNS), "--replicas", "2",
           "--input-len", str(INPUT_LEN), "--output-len", str(OUTPUT_LEN), "--batch-size", str(BATCH),
           "--num-iters-warmup", str(WARMUP), "--num-iters", str(ITERS), "--device", "cpu", "-o", str(out),
           "--format", "json"]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=1200)
    return out, res


def test_every_run_is_one_process_holding_every_model(profiled):
    out, res = profiled
    assert res.returncode == 0, res.stderr[-3000:]
    status = json.loads((out / "status.json").read_text())
    assert [r["status"] for r in status["runs"]] == ["done"] * RUNS
    for k in range(1, RUNS + 1):
        run = out / f"run-{k}"
        doc = json.loads((run / "interleaved.json").read_text())
        assert [e["label"] for e in doc["engines"]] == [TARGET, DRAFT] * 2
        assert all(e["error"] is None and len(e["latencies"]) == ITERS for e in doc["engines"])
        sqlite = run / "trace.sqlite"
        # one process: every forward range in one thread of one process
        with sqlite3.connect(f"file:{sqlite}?mode=ro", uri=True) as conn:
            tids = conn.execute("SELECT DISTINCT e.globalTid FROM NVTX_EVENTS e JOIN StringIds s ON s.id = e.textId "
                                "WHERE s.value = 'model_executable()'").fetchall()
        assert len(tids) == 1
        for label in (TARGET, DRAFT):
            assert len(named_ranges(sqlite, f"nsys_cc:engine {label}")) == 2 * (WARMUP + ITERS)
            assert len(_decode_ms(sqlite, label)) == 2 * ITERS * (OUTPUT_LEN - 1)
        machine = json.loads((run / "done.json").read_text())["machine"]
        assert machine["before"]["cpus"] >= 1 and "load_1m" in machine["after"]


def test_c_per_run_and_pooled_are_the_traces_medians(profiled):
    out, res = profiled
    doc = json.loads(res.stdout)
    per_run = {r["run"]: r for r in doc["runs"] if r["phase"] == "decode" and r["metric"] == "wall"}
    run_c, run_c_forward = [], []
    for k in range(1, RUNS + 1):
        sqlite = out / f"run-{k}" / "trace.sqlite"
        t, d = _decode_ms(sqlite, TARGET, token=True), _decode_ms(sqlite, DRAFT, token=True)
        # every decode forward has its token's logits and sampling (the plugin writes them on both engines)
        assert all(a > b for a, b in zip(d, _decode_ms(sqlite, DRAFT), strict=True))
        # c is the token's: median(draft forward + logits + sampling) / median(the target's)
        assert per_run[k]["c"] == pytest.approx(statistics.median(d) / statistics.median(t))
        assert per_run[k]["n_draft"] == len(d)
        run_c.append(statistics.median(d) / statistics.median(t))
        forwards = statistics.median(_decode_ms(sqlite, DRAFT)), statistics.median(_decode_ms(sqlite, TARGET))
        run_c_forward.append(forwards[0] / forwards[1])
    # pooled: the geometric mean of the runs' own c (docs/definitions.md), so it lies within them
    pooled = next(c for c in doc["coefficients"] if c["phase"] == "decode" and c["metric"] == "wall")
    assert pooled["c"] == pytest.approx(statistics.geometric_mean(run_c))
    assert min(run_c) <= pooled["c"] <= max(run_c)
    assert pooled["basis"] == "token"
    assert pooled["c_forward"] == pytest.approx(statistics.geometric_mean(run_c_forward))
    # two runs support no interval: none is given (never Student's t on one degree of freedom)
    assert pooled["ci95"] is None or all(v is None for v in pooled["ci95"]), pooled["ci95"]
    report = json.loads((out / "report.json").read_text())
    assert {r["run"] for r in report["machine"]} == set(range(1, RUNS + 1))
    assert (out / "plots" / "runs.png").is_file()
    assert "interleaved run(s) completed of" in res.stderr


def test_a_rerun_keeps_the_runs_and_analyze_reads_the_directory(profiled):
    out, res = profiled
    again = subprocess.run([NSYS_CC, "profile", "--target", TARGET, "--draft", DRAFT, "--repeat", str(RUNS),
                            "--replicas", "2", "--input-len", str(INPUT_LEN), "--output-len", str(OUTPUT_LEN),
                            "--batch-size", str(BATCH), "--num-iters-warmup", str(WARMUP), "--num-iters", str(ITERS),
                            "--device", "cpu", "-o", str(out), "--format", "json"],
                           capture_output=True, text=True, timeout=600)
    assert again.returncode == 0 and again.stderr.count("already complete") == RUNS
    first = json.loads(res.stdout)["coefficients"]
    assert json.loads(again.stdout)["coefficients"] == first
    read = subprocess.run([NSYS_CC, "analyze", str(out), "--format", "json"], capture_output=True, text=True,
                          timeout=300)
    assert read.returncode == 0 and json.loads(read.stdout)["coefficients"] == first
