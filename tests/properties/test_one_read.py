"""Each trace is opened once per analysis, and its NVTX ranges are read once (the ranges the analysis needs, handed on
to everything that looks at them): plain runs, speculative runs with their plain target, a tensor-parallel target,
and `profile`'s analysis with its forward-share check. Opens are counted at the reader's constructor, reads at the one
function that runs the NVTX query (`nsys_cc.trace.nvtx.read_ranges`)."""

from __future__ import annotations

import os
import shutil
from collections import Counter

import pytest

import nsys_cc
from conftest import REPO, planned
from nsys_cc.analysis.coefficient.model import load_model
from nsys_cc.launch import check, orchestrator, separate
from nsys_cc.request import BenchOptions, ProfileRequest
from nsys_cc.workflows import profile as profile_workflow

# Reports are written without their PNGs here (conftest `no_figures`): these tests check what runs and analyses
# wrote, and drawing the figures was most of their time; tests/report/test_result_plots.py and the plots/ tests draw
# them.
pytestmark = pytest.mark.usefixtures("no_figures")

FIXTURES = REPO / "fixtures"
VLLM, SPEC, TP = FIXTURES / "vllm", FIXTURES / "spec", FIXTURES / "tp"


def once_each(counter: Counter, paths) -> bool:
    return dict(counter) == {os.path.realpath(p): 1 for p in paths}


def test_plain_runs(counted):
    paths = [VLLM / "tiny-llama-target.sqlite", VLLM / "tiny-llama-draft-s.sqlite", VLLM / "tiny-llama-draft-xs.sqlite"]
    nsys_cc.cost_coefficient(paths[0], paths[1:])
    opens, reads = counted
    assert once_each(opens, paths) and once_each(reads, paths)


@pytest.mark.slow
def test_speculative_runs_and_their_plain_target(counted):
    paths = [SPEC / f"{label}.sqlite" for label in ("tiny-llama-target", "tiny-llama-draft-xs",
                                                     "tiny-llama-draft-xs.spec-g1", "tiny-llama-draft-xs.spec-g3")]
    res = nsys_cc.cost_coefficient(paths[0], paths[1:])
    assert sorted(res.speculative.table["gamma"]) == [1, 3]
    opens, reads = counted
    assert once_each(opens, paths) and once_each(reads, paths)


def test_a_tensor_parallel_target_with_its_all_reduces(counted):
    paths = [TP / "tiny-llama-target.tp2.sqlite", VLLM / "tiny-llama-draft-s.sqlite"]
    res = nsys_cc.cost_coefficient(paths[0], paths[1:])
    assert res.ranks["allreduce_ms"].notna().all()  # the all-reduce ranges came with the one read
    opens, reads = counted
    assert once_each(opens, paths) and once_each(reads, paths)


@pytest.mark.slow
def test_profiles_analysis_and_forward_share_check(tmp_path, counted):
    options = BenchOptions(input_len=64, output_len=4, batch_size=2, warmup_iters=2, iters=3)
    runs = planned("tiny-llama-target", ["tiny-llama-draft-s"], tmp_path, options, nsys="nsys", gpu=False)
    for run, source in zip(runs, ["tiny-llama-target", "tiny-llama-draft-s"]):
        shutil.copy(VLLM / f"{source}.sqlite", run.files.trace)
        shutil.copy(VLLM / f"{source}.bench.json", run.files.bench_json)
        run.range_name, run.status = "model_executable()", "done"
    request = ProfileRequest.of("tiny-llama-target", ["tiny-llama-draft-s"], tmp_path, options)
    concluded = orchestrator.conclude(separate.Separate(request, gpu=False, dry=True, launches=runs), tmp_path)
    outcome = profile_workflow.finish(concluded, request)
    assert len(outcome.result.models) == 2 and any("forward ranges cover" in n for n in outcome.result.notes)
    opens, reads = counted
    paths = [r.files.trace for r in runs]
    assert once_each(opens, paths) and once_each(reads, paths)
    assert check  # the forward-share check reads nothing of its own (it measures the models analysed above)


@pytest.mark.slow
def test_gpu_shaped_speculative_runs_projected_without_a_second_read(tmp_path, counted):
    """The GPU metrics of a speculative run's forwards (in place, on every metric) come from projecting the ranges
    already read: the trace's NVTX ranges are still read once (GPU-shaped copies of the real fixtures, `gpu_shaped`)."""
    from gpu_shaped import add_gpu_work, steady

    labels = ("tiny-llama-target", "tiny-llama-draft-xs", "tiny-llama-draft-xs.spec-g3")
    paths = [add_gpu_work(SPEC / f"{label}.sqlite", tmp_path / f"{label}.sqlite", steady(0.8)).path
             for label in labels]
    opens, reads = counted
    opens.clear()
    reads.clear()
    res = nsys_cc.cost_coefficient(paths[0], paths[1:])
    assert res.speculative is not None and "gpu_busy" in set(res.speculative.by_metric["metric"])
    assert once_each(opens, paths) and once_each(reads, paths)


@pytest.mark.slow
def test_interleaved_runs_read_each_trace_once_for_all_its_engines(counted):
    # every model of an interleaved run lives in the run's one trace (told apart by its engine's windows)
    runs = [FIXTURES / "interleaved" / f"run-{k}" / "trace.sqlite" for k in (1, 2, 3)]
    labels = ["tiny-llama-target", "tiny-llama-draft-s", "tiny-llama-draft-xs"]
    res = nsys_cc.cost_coefficient_runs([[r] * 3 for r in runs], names=labels, engines=[labels] * 3)
    assert len(res.runs) > 0
    opens, reads = counted
    assert once_each(opens, runs) and once_each(reads, runs)


@pytest.mark.slow
def test_one_trace_given_once_per_model_with_scopes_is_opened_and_read_once(counted):
    # `analyze run run run --engine …`: the three models of one interleaved run, each by its engine's windows
    run = FIXTURES / "interleaved" / "run-1" / "trace.sqlite"
    labels = ["tiny-llama-target", "tiny-llama-draft-s", "tiny-llama-draft-xs"]
    res = nsys_cc.cost_coefficient(run, [run, run], engines=labels)
    assert [m.name for m in res.models] == labels
    opens, reads = counted
    assert once_each(opens, [run]) and once_each(reads, [run])
    # each model is still its own engine's: the same forwards as a model read alone by its scope
    for model in res.models:
        alone = load_model(run, name=model.name, role=model.role, engine=model.name)
        assert list(model.forwards["start_ns"]) == list(alone.forwards["start_ns"])


def test_one_trace_read_for_two_range_names_is_opened_once(counted):
    # a trace against itself, forwards against the iterations that hold them: one open, one read per range name
    trace = VLLM / "tiny-llama-target.sqlite"
    res = nsys_cc.cost_coefficient(trace, trace, names=["iteration", "forward"],
                                   range_name=["nsys_cc:iteration", "model_executable()"])
    assert [m.range_name for m in res.models] == ["nsys_cc:iteration", "model_executable()"]
    opens, reads = counted
    assert once_each(opens, [trace]) and dict(reads) == {os.path.realpath(trace): 2}
