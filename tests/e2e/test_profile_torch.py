"""`nsys-cc profile --profiler torch` end to end on the CPU: real vLLM (CPU build), the interleaving driver running the
torch profiler itself, no nsys, the report. What the traces hold is read here from the raw Kineto JSON (gzip + json),
never through nsys_cc."""

from __future__ import annotations

import gzip
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from nsys_cc.formats import status_json

pytestmark = pytest.mark.vllm

NSYS_CC = str(Path(sys.executable).parent / "nsys-cc")
TARGET, DRAFT = "tiny-llama-target", "tiny-llama-draft-xs"
INPUT_LEN, OUTPUT_LEN, WARMUP, ITERS, RUNS, GAMMA = 32, 4, 1, 2, 2, 2
SPEC = f"{DRAFT}.spec-g{GAMMA}"


def annotations(trace: Path) -> list[tuple[str, float, float]]:
    """(name, start µs, end µs) of every user_annotation of a Kineto trace, from the raw JSON."""
    with gzip.open(trace, "rt") as fh:
        events = json.load(fh)["traceEvents"]
    return [(e["name"], float(e["ts"]), float(e["ts"]) + float(e["dur"])) for e in events
            if e.get("cat") == "user_annotation" and e.get("ph") == "X"]


def forward_payloads(trace: Path, label: str) -> list[int]:
    """The payloads of `model_executable()#N` annotations inside the engine windows of `label`."""
    marks = annotations(trace)
    windows = [(s, e) for n, s, e in marks if re.fullmatch(rf"nsys_cc:engine {re.escape(label)}#-?\d+", n)]
    out = []
    for name, s, _ in marks:
        m = re.fullmatch(r"model_executable\(\)#(\d+)", name)
        if m and any(a <= s <= b for a, b in windows):
            out.append(int(m.group(1)))
    return out


@pytest.fixture(scope="module")
def profiled(tmp_path_factory):
    out = tmp_path_factory.mktemp("torch_route") / "out"
    cmd = [NSYS_CC, "profile", "--profiler", "torch", "--target", TARGET, "--draft", DRAFT, "--repeat", str(RUNS),
           "--replicas", "1", "--speculate", str(GAMMA), "--input-len", str(INPUT_LEN), "--output-len",
           str(OUTPUT_LEN), "--num-iters-warmup", str(WARMUP), "--num-iters", str(ITERS), "--device", "cpu",
           "-o", str(out), "--format", "json"]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=1200, env=without_nsys(out.parent))
    return out, res


def without_nsys(where: Path) -> dict[str, str]:
    """The environment with NSYS pointing at a stand-in that records being called and fails: nsys_cc takes $NSYS
    before any nsys on PATH or beside nsys-cc (`trace.nsys.find_nsys`), so a torch route that ran nsys at any step
    leaves `where/nsys-called` behind (the check in each test below)."""
    fake = where / "fake-nsys"
    fake.write_text(f"#!/bin/sh\necho \"$@\" >> {where / 'nsys-called'}\nexit 1\n")
    fake.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k != "NSYS_CC_NSYS_PREFIX"}
    env["NSYS"] = str(fake)
    return env


def test_it_runs_without_nsys_and_says_which_profiler(profiled):
    out, res = profiled
    assert res.returncode == 0, res.stderr[-3000:]
    status = json.loads((out / "status.json").read_text())
    assert status["recorder"]["name"] == "torch" and status_json.recorder_of(status)["name"] == "torch"
    assert not (out.parent / "nsys-called").exists(), (out.parent / "nsys-called").read_text()
    for k in range(1, RUNS + 1):
        run = out / f"run-{k}"
        assert (run / "trace.pt.trace.json.gz").is_file()
        assert not list(run.glob("*.sqlite")) and not list(run.glob("*.nsys-rep"))
        assert json.loads((run / "done.json").read_text())["recorder"]["name"] == "torch"


def test_the_payloads_came_through(profiled):
    out, res = profiled
    assert res.returncode == 0, res.stderr[-3000:]
    for k in range(1, RUNS + 1):
        trace = out / f"run-{k}" / "trace.pt.trace.json.gz"
        for label in (TARGET, DRAFT):
            payloads = forward_payloads(trace, label)
            # per iteration (warm-up included) one prefill of the prompt and OUTPUT_LEN − 1 one-token decodes
            assert sorted(payloads) == sorted([INPUT_LEN, *[1] * (OUTPUT_LEN - 1)] * (WARMUP + ITERS)), label
        verify = forward_payloads(trace, SPEC)
        assert INPUT_LEN in verify and GAMMA + 1 in verify  # the target's verify of 1 + γ tokens


def test_c_per_phase_and_the_report_names_the_torch_traces(profiled):
    out, res = profiled
    assert res.returncode == 0, res.stderr[-3000:]
    report = json.loads((out / "report.json").read_text())
    rows = [r for r in report["coefficients"] if r["draft"] == DRAFT and r["metric"] == "wall"]
    by_phase = {r["phase"]: r["c"] for r in rows}
    assert set(by_phase) >= {"prefill", "decode"} and all(0 < c < 1 for c in by_phase.values())
    paths = " ".join(m["path"] for m in report["models"])
    assert all(str(out / f"run-{k}" / "trace.pt.trace.json.gz") in paths for k in range(1, RUNS + 1))
    assert "sqlite" not in paths


def test_the_speculative_engine_is_measured_in_place(profiled):
    out, res = profiled
    assert res.returncode == 0, res.stderr[-3000:]
    report = json.loads((out / "report.json").read_text())
    (spec,) = [r for r in report["speculative"] if r["name"] == SPEC]
    assert spec["gamma"] == GAMMA and spec["steps"] > 0 and spec["draft_forward_ms"] > 0
    assert "trace.pt.trace.json.gz" in spec["path"]


def test_analyze_of_the_directory_gives_the_same_c(profiled):
    out, res = profiled
    assert res.returncode == 0, res.stderr[-3000:]
    again = subprocess.run([NSYS_CC, "analyze", str(out), "--format", "json"], capture_output=True, text=True,
                           timeout=600)
    assert again.returncode == 0, again.stderr[-2000:]
    first = json.loads((out / "report.json").read_text())["coefficients"]
    second = json.loads(again.stdout)["coefficients"]
    pick = {(r["draft"], r["phase"], r["metric"]): r["c"] for r in first}
    assert pick == {(r["draft"], r["phase"], r["metric"]): r["c"] for r in second}


def test_tune_profiles_its_design_on_the_torch_route(tmp_path):
    """`tune --profiler torch`: the design's cells in interleaved torch-profiled runs (no nsys called), fitted and
    checked as on the nsys route — a tune.json whose cells were read from the runs' Kineto traces."""
    out = tmp_path / "tune"
    cmd = [NSYS_CC, "tune", "--profiler", "torch", "--target", TARGET, "--draft", DRAFT, "--batch-size", "1,2",
           "--speculate", "1,2", "--input-len", str(INPUT_LEN), "--output-len", str(OUTPUT_LEN),
           "--num-iters-warmup", str(WARMUP), "--num-iters", str(ITERS), "--repeat", "2", "--device", "cpu",
           "--no-confirm", "--no-plot", "--max-batch-size", "4", "-o", str(out), "--format", "json"]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=1800, env=without_nsys(tmp_path))
    # 0: recommended; 3: measured and fitted but not recommended (two runs give the forecast no interval)
    assert res.returncode in (0, 3), res.stderr[-3000:]
    assert not (tmp_path / "nsys-called").exists()
    traces = sorted(out.glob("round-*/**/trace.pt.trace.json.gz"))
    assert len(traces) >= 2, sorted(p.relative_to(out) for p in out.rglob("*") if p.is_file())[:40]
    assert not list(out.rglob("*.sqlite")) and not list(out.rglob("*.nsys-rep"))
    doc = json.loads(res.stdout)
    cells = {(c["batch_size"], c["gamma"]) for c in doc["fitted_cells"] + doc["held_out_cells"]}
    assert {(1, 1), (1, 2), (2, 1), (2, 2)} <= cells, cells
    assert all(c["verify_ms"] > 0 and c["draft_forward_ms"] > 0 for c in doc["fitted_cells"])
    for trace in traces[:1]:  # each batch size's verify steps are in the raw trace: 1 + γ tokens per sequence
        verify = {int(m.group(1)) for n, _, _ in annotations(trace)
                  if (m := re.fullmatch(r"model_executable\(\)#(\d+)", n))}
        assert {2, 3, 4, 6} & verify, sorted(verify)


def all_payloads(trace: Path, name: str = "model_executable()") -> list[int]:
    """The payloads of every `name#N` annotation of a Kineto trace (a trace of one model: no engine windows)."""
    return [int(m.group(1)) for n, _, _ in annotations(trace) if (m := re.fullmatch(rf"{re.escape(name)}#(\d+)", n))]


def test_separate_processes_on_the_torch_route(tmp_path):
    """`--separate-processes --profiler torch`: one process and one Kineto trace per model, named after its label
    (`<label>.pt.trace.json.gz`, no engine windows), no nsys called; the payloads in each model's own trace; c from
    the report and from `analyze` of the directory the same."""
    out = tmp_path / "out"
    cmd = [NSYS_CC, "profile", "--profiler", "torch", "--separate-processes", "--target", TARGET, "--draft", DRAFT,
           "--speculate", str(GAMMA), "--input-len", str(INPUT_LEN), "--output-len", str(OUTPUT_LEN),
           "--num-iters-warmup", str(WARMUP), "--num-iters", str(ITERS), "--device", "cpu", "-o", str(out),
           "--format", "json"]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=1200, env=without_nsys(tmp_path))
    assert res.returncode == 0, res.stderr[-3000:]
    assert not (tmp_path / "nsys-called").exists(), (tmp_path / "nsys-called").read_text()
    assert not list(out.glob("*.sqlite")) and not list(out.glob("*.nsys-rep")) and not list(out.glob("run-*"))
    doc = json.loads((out / "status.json").read_text())
    assert doc["strategy"] == "separate" and doc["recorder"]["name"] == "torch"
    status = {m["label"]: m for m in status_json.models_of(doc)}
    assert set(status) == {TARGET, DRAFT, SPEC}
    iterations = WARMUP + ITERS
    for label, m in status.items():
        trace = out / f"{label}.pt.trace.json.gz"
        assert m["status"] == "done" and m["trace"] == str(trace)
        payloads = all_payloads(trace)
        if label == SPEC:  # per iteration one prefill, then verifies of 1 + γ tokens
            assert payloads.count(INPUT_LEN) == iterations and set(payloads) == {INPUT_LEN, GAMMA + 1}, payloads
            assert all_payloads(trace, "draft_model_executable()"), "no draft forward in the speculative run"
        else:  # per iteration one prefill of the prompt and OUTPUT_LEN − 1 one-token decodes
            assert sorted(payloads) == sorted([INPUT_LEN, *[1] * (OUTPUT_LEN - 1)] * iterations), label
    report = json.loads((out / "report.json").read_text())
    assert sorted(m["path"] for m in report["models"]) == sorted(str(out / f"{x}.pt.trace.json.gz")
                                                                 for x in (TARGET, DRAFT))
    (spec,) = [r for r in report["speculative"] if r["name"] == SPEC]
    assert spec["gamma"] == GAMMA and spec["steps"] > 0 and spec["draft_forward_ms"] > 0
    first = {(r["draft"], r["phase"], r["metric"]): r["c"] for r in report["coefficients"]}
    assert {p for d, p, _ in first if d == DRAFT} >= {"prefill", "decode"} and all(0 < c < 1 for c in first.values())
    again = subprocess.run([NSYS_CC, "analyze", str(out), "--format", "json"], capture_output=True, text=True,
                           timeout=600)
    assert again.returncode == 0, again.stderr[-2000:]
    assert first == {(r["draft"], r["phase"], r["metric"]): r["c"] for r in json.loads(again.stdout)["coefficients"]}
