"""The launcher's analysis step on the committed vLLM fixtures (no profiling): report, notes, fallback range."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from conftest import REPO, planned
from nsys_cc.analysis.profile_dir.forward_share import COLUMNS as SHARE_COLUMNS
from nsys_cc.launch import check, orchestrator, plan, process, separate
from nsys_cc.report.result_text import SHARE_TITLE
from nsys_cc.request import BenchOptions, ProfileRequest
from nsys_cc.workflows import profile as profile_workflow


def _profile(*args, **kwargs):
    """One process per model as the profile workflow runs it: its directory analysed and reported
    (`workflows.profile.finish`)."""
    return profile_workflow.profile(ProfileRequest.of(*args, separate=True, **kwargs))

FIXTURES = REPO / "fixtures" / "vllm"
OPTIONS = BenchOptions(input_len=64, output_len=4, batch_size=2, warmup_iters=2, iters=3)


def _finish(runs: list[plan.ModelLaunch], out: Path):
    """What the launches add up to (`separate.conclude`), with the status the orchestrator writes of them, then the
    workflow's analysis and report (`workflows.profile.finish`)."""
    request = ProfileRequest.of("tiny-llama-target", [r.model.label for r in runs[1:]], out, OPTIONS)
    concluded = orchestrator.conclude(separate.Separate(request, gpu=False, dry=True, launches=runs), out)
    return profile_workflow.finish(concluded, request)


def _runs(out: Path, sources: list[str]) -> list[plan.ModelLaunch]:
    """Runs planned for the tiny models, completed from copies of the fixture traces `sources` (in run order)."""
    runs = planned("tiny-llama-target", ["tiny-llama-draft-s", "tiny-llama-draft-xs"][: len(sources) - 1], out,
                   OPTIONS, nsys="nsys", gpu=False)
    for run, source in zip(runs, sources):
        shutil.copy(FIXTURES / f"{source}.sqlite", run.files.trace)
        shutil.copy(FIXTURES / f"{source}.bench.json", run.files.bench_json)
        run.range_name, _ = check.forward_range(run.files.trace)
        run.status = "done"
    return runs


@pytest.mark.slow  # 4 s or more on 2 cores: in `make test`, not the edit-test loop (`make check` ≤ 60 s)
def test_report_with_forward_share_and_a_failed_draft(tmp_path):
    runs = _runs(tmp_path, ["tiny-llama-target", "tiny-llama-draft-s", "tiny-llama-draft-xs"])
    runs[2].status, runs[2].reason = "failed", "timed out after 5 s (timeout=5)"
    outcome = _finish(runs, tmp_path)
    assert [m.name for m in outcome.result.models] == ["tiny-llama-target", "tiny-llama-draft-s"]
    report = json.loads((tmp_path / "report.json").read_text())
    assert [r["model"] for r in report["forward_share"]] == ["tiny-llama-target", "tiny-llama-draft-s"]
    failed = [n for n in report["notes"] if "tiny-llama-draft-xs" in n]
    assert failed == [f"draft tiny-llama-draft-xs: FAILED: timed out after 5 s (timeout=5); log: {runs[2].files.log}"]
    assert sum("forward ranges cover" in n for n in report["notes"]) == 2
    md = (tmp_path / "report.md").read_text()
    section = md.split(f"**{SHARE_TITLE}**\n\n", 1)[1].split("\n\n", 1)[0].splitlines()
    # A Markdown table (header, rule, one row per model), not a fixed-width dump.
    header = [c.strip() for c in section[0].strip("|").split("|")]
    assert header == list(SHARE_COLUMNS)
    assert set(section[1].replace("|", "")) == {"-"}
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in section[2:]]
    assert [r[1] for r in rows] == ["tiny-llama-target", "tiny-llama-draft-s"]
    share = header.index("forward_share")
    assert [float(r[share]) for r in rows] == [r["forward_share"] for r in report["forward_share"]]


@pytest.mark.slow  # 4 s or more on 2 cores: in `make test`, not the edit-test loop (`make check` ≤ 60 s)
def test_vllms_own_scopes_are_analysed_when_the_plugin_fell_back(tmp_path):
    runs = _runs(tmp_path, ["vllm_scopes", "vllm_scopes"])
    outcome = _finish(runs, tmp_path)
    assert outcome.result.range_name == "gpu_model_runner: forward"
    assert any("measured vLLM's own forward scope 'gpu_model_runner: forward'" in n for n in outcome.result.notes)


def test_a_draft_traced_with_another_kind_of_range_is_not_compared(tmp_path):
    runs = _runs(tmp_path, ["vllm_scopes", "tiny-llama-draft-s"])
    outcome = _finish(runs, tmp_path)
    assert outcome.result is None and outcome.report is None
    assert runs[1].status == "failed" and "'model_executable()' ranges" in runs[1].reason
    status = json.loads((tmp_path / "status.json").read_text())
    assert [s["status"] for s in status["models"]] == ["done", "failed"]


@pytest.mark.slow  # 4 s or more on 2 cores: in `make test`, not the edit-test loop (`make check` ≤ 60 s)
def test_ctrl_c_after_two_models_still_reports_them(tmp_path, monkeypatch):
    sources = iter(["tiny-llama-target", "tiny-llama-draft-s"])

    def fake_run_model(run, *, timeout):
        source = next(sources, None)
        if source is None:
            run.status, run.reason = "interrupted", "interrupted (Ctrl-C)"
            raise KeyboardInterrupt
        shutil.copy(FIXTURES / f"{source}.sqlite", run.files.trace)
        shutil.copy(FIXTURES / f"{source}.bench.json", run.files.bench_json)
        run.status = "done"

    monkeypatch.setattr(separate, "run_model", fake_run_model)
    monkeypatch.setattr(process, "preflight", lambda recorder, binary: [])
    with pytest.raises(KeyboardInterrupt):
        _profile("tiny-llama-target", ["tiny-llama-draft-s", "tiny-llama-draft-xs", "tiny-llama-draft-s"],
                         tmp_path, OPTIONS, device="cpu")
    status = json.loads((tmp_path / "status.json").read_text())
    assert [s["status"] for s in status["models"]] == ["done", "done", "interrupted", "not run"]
    report = json.loads((tmp_path / "report.json").read_text())
    assert [r["model"] for r in report["forward_share"]] == ["tiny-llama-target", "tiny-llama-draft-s"]
    assert sum("INTERRUPTED" in n or "NOT RUN" in n for n in report["notes"]) == 2
