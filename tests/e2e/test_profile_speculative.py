"""`nsys-cc profile --speculate` end to end on the CPU: real nsys, real vLLM, the known-α pair, then a resumed rerun
that adds an ngram run through `--speculative-config`. Expectations come from raw SQL on the exports, the files the
runs left and vLLM's own counters, never from nsys_cc's analysis."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from nsys_cc.formats import status_json
from nsys_cc.launch import pair

pytestmark = pytest.mark.vllm

NSYS_CC = str(Path(sys.executable).parent / "nsys-cc")
INPUT_LEN, OUTPUT_LEN, WARMUP, ITERS, GAMMA = 32, 8, 1, 2, 2
BENCH = ["--input-len", str(INPUT_LEN), "--output-len", str(OUTPUT_LEN), "--num-iters-warmup", str(WARMUP),
         "--num-iters", str(ITERS), "--nsys-trace", "nvtx", "--device", "cpu", "--separate-processes"]
NGRAM = {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 3, "prompt_lookup_min": 1}


def _ranges(sqlite: Path) -> list[tuple[str, int, int, int | None]]:
    with sqlite3.connect(f"file:{sqlite}?mode=ro", uri=True) as conn:
        return conn.execute(
            "SELECT coalesce(e.text, s.value), e.start, e.\"end\", e.int64Value FROM NVTX_EVENTS e "
            "LEFT JOIN StringIds s ON s.id = e.textId WHERE e.eventType = 59 ORDER BY e.start").fetchall()


@pytest.fixture(scope="module")
def profiled(tmp_path_factory):
    root = tmp_path_factory.mktemp("spec_e2e")
    out = root / "out"
    env = {**os.environ, pair.ENV_MODELS: str(root / "models")}
    base = [NSYS_CC, "profile", "--target", "pair-target-a50", "--draft", "pair-draft", *BENCH, "-o", str(out)]
    first = subprocess.run([*base, "--speculate", str(GAMMA), "--format", "json"], capture_output=True, text=True,
                           timeout=1500, env=env)
    status = json.loads((out / "status.json").read_text()) if (out / "status.json").is_file() else None
    mtimes = {p.name: p.stat().st_mtime_ns for p in out.glob("*.sqlite")}
    again = subprocess.run([*base, "--speculative-config", json.dumps(NGRAM)], capture_output=True, text=True,
                           timeout=900, env=env)
    return {"out": out, "first": first, "status": status, "mtimes": mtimes, "again": again,
            "status_again": json.loads((out / "status.json").read_text())}


def test_profile_speculate_runs_plain_and_speculative_and_reports(profiled):
    first, out = profiled["first"], profiled["out"]
    assert first.returncode == 0, first.stderr[-3000:]
    status = status_json.models_of(profiled["status"])
    assert [(s["role"], s["label"], s["status"]) for s in status] == [
        ("target", "pair-target-a50", "done"), ("draft", "pair-draft", "done"),
        ("speculative", "pair-draft.spec-g2", "done")]
    assert status[2]["draft"] == "pair-draft" and status[2]["gamma"] == GAMMA
    for suffix in (".sqlite", ".bench.json", ".metrics.json", ".log", ".nsys-rep", ".done.json"):
        assert (out / f"pair-draft.spec-g2{suffix}").is_file(), suffix
    assert not (out / "pair-draft.metrics.json").exists()  # plain runs dump no metrics
    assert "pair-draft.spec-g2" in first.stderr  # the speculative trace is listed in the notes
    report = json.loads(first.stdout)
    assert {m["name"] for m in report["models"]} == {"pair-target-a50", "pair-draft"}


def test_the_speculative_trace_has_steps_verify_and_drafts(profiled):
    rows = _ranges(profiled["out"] / "pair-draft.spec-g2.sqlite")
    iterations = [r for r in rows if r[0] in ("nsys_cc:warmup", "nsys_cc:iteration")]
    assert len(iterations) == WARMUP + ITERS
    steps = [r for r in rows if r[0] == "nsys_cc:step"]
    for start, end in ((it[1], it[2]) for it in iterations):
        mine = [s for s in steps if start <= s[1] <= end]
        assert mine[0][3] == INPUT_LEN and {s[3] for s in mine[1:]} == {GAMMA + 1}
        # α = 0.5 at γ = 2 gives 1.75 tokens per step on average: fewer steps than tokens.
        assert len(mine) < OUTPUT_LEN
        for s in mine:
            inside = [r[0] for r in rows if s[1] < r[1] and r[2] < s[2]]
            assert inside.count("model_executable()") == 1
            assert inside.count("draft_model_executable()") == GAMMA
    stats = json.loads((profiled["out"] / "pair-draft.spec-g2.metrics.json").read_text())
    values = {m["name"]: m.get("value", m.get("values")) for m in stats["metrics"]}
    # vLLM counts a draft per verify step: all steps but the prefills, and the last of an iteration when it
    # needed fewer tokens than γ.
    verify_steps = sum(1 for s in steps if s[3] == GAMMA + 1)
    assert values["vllm:spec_decode_num_drafts"] == verify_steps
    assert 0 < values["vllm:spec_decode_num_accepted_tokens"] < values["vllm:spec_decode_num_draft_tokens"]


def test_a_rerun_resumes_and_adds_an_ngram_run(profiled):
    again = profiled["again"]
    assert again.returncode == 0, again.stderr[-3000:]
    status = {s["label"]: s for s in status_json.models_of(profiled["status_again"])}
    assert status["pair-target-a50"]["status"] == status["pair-draft"]["status"] == "resumed"
    assert status["ngram.spec-g3"]["status"] == "done" and status["ngram.spec-g3"]["role"] == "speculative"
    assert "pair-draft.spec-g2" not in status  # not asked for this time
    out = profiled["out"]
    for name, mtime in profiled["mtimes"].items():
        assert (out / name).stat().st_mtime_ns == mtime, name
    rows = _ranges(out / "ngram.spec-g3.sqlite")
    steps = [r for r in rows if r[0] == "nsys_cc:step"]
    forwards = [r for r in rows if r[0] == "model_executable()"]
    assert len(steps) == len(forwards) > 0
    assert not any(r[0] == "draft_model_executable()" for r in rows)  # ngram proposes without a model
    assert (out / "ngram.spec-g3.metrics.json").is_file()
