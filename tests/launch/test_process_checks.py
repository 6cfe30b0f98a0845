"""`run_model`'s checks of what a run recorded, with stand-in commands in place of nsys and vLLM:

- a `--device gpu` run whose forward ranges have no GPU work projected onto them fails, naming the likely cause
  (GPU-shaped traces from `gpu_shaped`: launches on another thread, CUPTI that lost the GPU activity, no CUDA at all,
  `-t` without cuda);
- a speculative run that recorded no draft range fails, unless its proposer runs no draft model (ngram).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from gpu_shaped import FORWARD, add_gpu_work, read_ranges, steady

from conftest import FIXTURES
from nsys_cc.launch import plan, process
from nsys_cc.launch.commands import ModelCommands, ModelFiles
from nsys_cc.launch.models import resolve

TARGET = FIXTURES / "spec" / "tiny-llama-target.sqlite"
DRAFT_PLAIN = FIXTURES / "spec" / "tiny-llama-draft-xs.sqlite"
SPEC = FIXTURES / "spec" / "tiny-llama-draft-xs.spec-g3.sqlite"
WRITE_OUTPUTS = ("import os; b = os.environ['NSYS_CC_TEST_FILES']; "
                 "open(b + '.bench.json', 'w').write('{}'); open(b + '.nsys-rep', 'w').write('rep'); "
                 "open(b + '.metrics.json', 'w').write('{}')")


def _run(tmp_path: Path, export: Path, *, gpu: bool = False, trace: str = "cuda,nvtx,osrt",
         method: str | None = None) -> plan.ModelLaunch:
    """A run whose 'profile' writes the benchmark's outputs and whose 'export' copies `export` into place."""
    files = ModelFiles(tmp_path, "m")
    py = [sys.executable, "-c"]
    copy = f"import os, shutil; shutil.copy({str(export)!r}, os.environ['NSYS_CC_TEST_FILES'] + '.sqlite')"
    cmds = ModelCommands({"NSYS_CC_TEST_FILES": str(tmp_path / "m")}, [*py, WRITE_OUTPUTS, "-t", trace],
                         [*py, copy], files, gpu=gpu)
    role = "speculative" if method else "target"
    return plan.ModelLaunch(role, resolve("tiny-llama-target"), cmds, method=method)


def _outcome(run):
    process.run_model(run, timeout=120)
    return run.status, run.reason


def test_a_gpu_run_with_gpu_work_on_its_forwards_completes(tmp_path):
    shaped = add_gpu_work(TARGET, tmp_path / "gpu.sqlite", steady(1.5, names=(FORWARD,)), names=(FORWARD,))
    assert _outcome(_run(tmp_path, shaped.path, gpu=True)) == ("done", "")


@pytest.mark.slow
def test_a_gpu_run_whose_kernels_were_launched_from_another_thread_fails_saying_so(tmp_path):
    other = read_ranges(TARGET, (FORWARD,))[0].global_tid + 1
    shaped = add_gpu_work(TARGET, tmp_path / "gpu.sqlite", steady(1.5, names=(FORWARD,), thread=other),
                          names=(FORWARD,))
    status, reason = _outcome(_run(tmp_path, shaped.path, gpu=True))
    assert status == "failed"
    assert f"none of the {len(shaped.work)} model_executable() ranges has GPU work projected onto it" in reason
    assert "another thread or process" in reason and "--trace-fork-before-exec=true" in reason


def test_a_gpu_run_whose_gpu_activity_cupti_lost_fails_saying_so(tmp_path):
    shaped = add_gpu_work(TARGET, tmp_path / "gpu.sqlite", steady(1.5, names=(FORWARD,)), names=(FORWARD,),
                          gpu_rows=False)
    status, reason = _outcome(_run(tmp_path, shaped.path, gpu=True))
    calls = sum(w.range.name == FORWARD for w in shaped.work) * 4  # steady(): 4 launch calls per forward
    assert status == "failed" and f"CUDA API calls were recorded ({calls}) but no GPU activity" in reason
    assert "CUPTI/driver mismatch" in reason


@pytest.mark.parametrize("trace, cause", [("cuda,nvtx,osrt", "no CUDA API call was recorded"),
                                          ("nvtx,osrt", "-t nvtx,osrt leaves out cuda")])
def test_a_gpu_run_without_cuda_data_fails_saying_why(tmp_path, trace, cause):
    status, reason = _outcome(_run(tmp_path, TARGET, gpu=True, trace=trace))
    assert status == "failed" and cause in reason


def test_the_same_trace_from_a_cpu_run_is_fine(tmp_path):
    assert _outcome(_run(tmp_path, TARGET, gpu=False)) == ("done", "")


@pytest.mark.slow
def test_a_speculative_run_without_draft_ranges_fails(tmp_path):
    status, reason = _outcome(_run(tmp_path, DRAFT_PLAIN, method="draft_model"))
    assert status == "failed"
    assert "recorded no draft_model_executable() ranges" in reason and "cannot be measured in place" in reason


def test_a_speculative_run_with_its_draft_ranges_completes(tmp_path):
    assert _outcome(_run(tmp_path, SPEC, method="eagle")) == ("done", "")


def test_a_proposer_without_a_draft_model_needs_no_draft_ranges(tmp_path):
    assert _outcome(_run(tmp_path, DRAFT_PLAIN, method="ngram")) == ("done", "")


def test_speculative_runs_know_their_method(tmp_path):
    def make(model, spec):
        return ModelCommands({}, [], [], ModelFiles(tmp_path, model.label))

    target, draft = resolve("tiny-llama-target"), resolve("tiny-llama-draft-xs")
    runs = plan.speculative_runs(target, [draft], [1], None, make)
    assert [r.method for r in runs] == ["draft_model"]
    runs = plan.speculative_runs(target, [draft], [1], {"method": "eagle"}, make)
    assert [r.method for r in runs] == ["eagle"]
    runs = plan.speculative_runs(target, [], [], {"method": "ngram", "num_speculative_tokens": 3}, make)
    assert [(r.method, r.model.label) for r in runs] == [("ngram", "ngram.spec-g3")]
