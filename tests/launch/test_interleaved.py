"""`profile`'s interleaved runs without running vLLM: how many runs, what stops them (repeat, precision, max_repeat,
failures, Ctrl-C), resume and force, the machine's state, the report — with each run's work replaced by a copy of a
real interleaved run (fixtures/interleaved)."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner

from conftest import FIXTURES
from nsys_cc import front
from nsys_cc.analysis.coefficient import of_profile as analysis_sources
from nsys_cc.cli import cli
from nsys_cc.errors import InputError
from nsys_cc.launch import interleaved, interleaved_run, process
from nsys_cc.request import BenchOptions, ProfileRequest
from nsys_cc.workflows import profile as profile_mod

# Reports are written without their PNGs here (conftest `no_figures`): these tests check what runs and analyses
# wrote, and drawing the figures was most of their time; tests/report/test_result_plots.py and the plots/ tests draw
# them.
pytestmark = pytest.mark.usefixtures("no_figures")

TARGET, DRAFTS = "tiny-llama-target", ["tiny-llama-draft-s", "tiny-llama-draft-xs"]
OPTIONS = BenchOptions(input_len=64, output_len=4, batch_size=2, warmup_iters=1, iters=2)
QUIET = {"when": "t", "load_1m": 0.5, "load_5m": 0.5, "load_15m": 0.5, "cpus": 2}
BUSY = {**QUIET, "load_1m": 7.5}


@pytest.fixture
def fake_runs(monkeypatch):
    """Each run copies fixture run ((k − 1) mod 3) + 1; `plan` (a list) can make run k fail ("fail"), stop with Ctrl-C
    ("ctrl-c") or run on a busy machine ("busy"); `source` (run number → folder) picks other fixture runs. Returns
    the list of run numbers executed."""
    class Executed(list):
        plan: dict[int, str]
        source: Callable[[int], Path]

    executed = Executed()
    plan: dict[int, str] = {}

    def fake_execute(run, engines, attempt, *, gpu, timeout):
        executed.append(run.index)
        what = plan.get(run.index, "")
        if what == "ctrl-c":
            run.status, run.reason = "interrupted", "interrupted (Ctrl-C)"
            raise KeyboardInterrupt
        if what == "fail":
            run.status, run.reason = "failed", "benchmark under nsys failed (exit 1): MemoryError"
            return
        shutil.rmtree(run.dir, ignore_errors=True)
        shutil.copytree(executed.source(run.index), run.dir)
        run.engines = {e.label: "done" for e in engines}
        if what.startswith("unbuilt:"):  # these engines' vLLM engine could not be built in this run
            for label in what.removeprefix("unbuilt:").split(","):
                run.engines[label] = "its engine could not be built: ValidationError: Invalid repository ID"
        state = BUSY if what == "busy" else QUIET
        run.machine = {"before": state, "after": state}
        (run.dir / "done.json").write_text(json.dumps({"commands": run.commands.shell(), "machine": run.machine,
                                                       "engines": run.engines}))
        run.status = "done"

    monkeypatch.setattr(interleaved_run, "execute", fake_execute)
    monkeypatch.setattr(process, "preflight", lambda recorder, binary: [])
    monkeypatch.setattr("nsys_cc.trace.nsys.require_nsys", lambda: "/opt/nsys/bin/nsys")
    executed.plan = plan
    executed.source = lambda index: FIXTURES / "interleaved" / f"run-{(index - 1) % 3 + 1}"
    return executed


def _profile(out, **kwargs):
    return front.profile(TARGET, DRAFTS, out, OPTIONS, device="cpu", **kwargs)


@pytest.mark.slow  # 4 s or more on 2 cores: in `make test`, not the edit-test loop (`make check` ≤ 60 s)
def test_default_profile_makes_the_default_number_of_runs_and_pools_them(tmp_path, fake_runs):
    outcome = _profile(tmp_path)
    assert fake_runs == list(range(1, interleaved.DEFAULT_REPEAT + 1))
    assert outcome.stopped_by == "repeat" and [r.ok for r in outcome.runs] == [True, True, True]
    assert len(outcome.interleaved) == interleaved.DEFAULT_REPEAT
    coef = outcome.result.coefficients
    assert set(coef["runs"]) == {interleaved.DEFAULT_REPEAT}
    assert len(outcome.result.runs[(outcome.result.runs["phase"] == "decode")
                                   & (outcome.result.runs["draft"] == DRAFTS[1])]) == interleaved.DEFAULT_REPEAT
    status = json.loads((tmp_path / "status.json").read_text())
    assert [r["status"] for r in status["runs"]] == ["done"] * interleaved.DEFAULT_REPEAT
    assert [m["status"] for m in status["models"]] == ["done"] * 3
    machine = json.loads((tmp_path / "report.json").read_text())["machine"]
    assert len(machine) == 2 * interleaved.DEFAULT_REPEAT and machine[0]["load_1m"] == 0.5 and machine[0]["cpus"] == 2


@pytest.mark.slow  # 4 s or more on 2 cores: in `make test`, not the edit-test loop (`make check` ≤ 60 s)
def test_precision_stops_as_soon_as_it_is_reached(tmp_path, fake_runs):
    from nsys_cc.analysis.coefficient.over_runs import cost_coefficient_runs

    # Runs 2 and 3 of the fixtures, alternating: run 1 caught a slow spell of the loaded machine (its target's decode
    # at 22 ms against 8), and with it three runs know c only to ±400 %, which no precision (< 1) can ask for.
    fake_runs.source = lambda index: FIXTURES / "interleaved" / f"run-{2 + (index - 1) % 2}"
    labels = [TARGET, *DRAFTS]

    def precision(n: int) -> float:  # what n such runs know c to, computed here from the fixture traces
        sources = [fake_runs.source(k) / "trace.sqlite" for k in range(1, n + 1)]
        pooled = cost_coefficient_runs([[s] * 3 for s in sources], names=labels, engines=[labels] * n)
        return max(analysis_sources.decode_precision(pooled, DRAFTS).values())

    # two runs (Student's t on one degree of freedom) do not know c to the precision asked; three do
    two, three = precision(2), precision(3)
    assert three < min(two, 1.0)
    asked = round((three + min(two, 1.0)) / 2, 3)
    outcome = _profile(tmp_path, repeat=2, precision=asked, max_repeat=6)
    assert fake_runs == [1, 2, 3] and outcome.stopped_by == "precision"
    assert max(analysis_sources.decode_precision(outcome.result, DRAFTS).values()) == pytest.approx(three)
    assert any("stopped by the precision" in n for n in outcome.notes)


@pytest.mark.slow  # 4 s or more on 2 cores: in `make test`, not the edit-test loop (`make check` ≤ 60 s)
def test_max_repeat_stops_a_precision_that_is_not_reached_and_says_so(tmp_path, fake_runs):
    outcome = _profile(tmp_path, repeat=2, precision=0.001, max_repeat=3)
    assert fake_runs == [1, 2, 3] and outcome.stopped_by == "max_repeat"
    note = next(n for n in outcome.notes if "max_repeat" in n)
    assert "stopped by max_repeat (3) before the precision" in note and "asked ±0.1%" in note


@pytest.mark.slow  # 4 s or more on 2 cores: in `make test`, not the edit-test loop (`make check` ≤ 60 s)
def test_a_rerun_keeps_completed_runs_and_force_redoes_them(tmp_path, fake_runs):
    _profile(tmp_path, repeat=2)
    assert fake_runs == [1, 2]
    again = _profile(tmp_path, repeat=3)
    assert fake_runs == [1, 2, 3] and [r.status for r in again.interleaved] == ["resumed", "resumed", "done"]
    _profile(tmp_path, repeat=3, force=True)
    assert fake_runs == [1, 2, 3, 1, 2, 3]


@pytest.mark.slow
def test_two_failed_runs_in_a_row_stop_and_a_single_failure_is_noted(tmp_path, fake_runs):
    fake_runs.plan.update({2: "fail"})
    outcome = _profile(tmp_path, repeat=3)
    assert fake_runs == [1, 2, 3] and outcome.result is not None
    assert any(n.startswith("run 2: FAILED: benchmark under nsys failed") for n in outcome.notes)
    assert "2 interleaved run(s) completed of 3 made" in outcome.notes[0]
    fake_runs.plan.update({1: "fail", 2: "fail"})
    stopped = _profile(tmp_path / "b", repeat=4)
    assert fake_runs[-2:] == [1, 2] and stopped.stopped_by == "failures" and stopped.result is None
    assert all(not r.ok for r in stopped.runs)


@pytest.mark.slow
def test_an_engine_that_cannot_be_built_leaves_the_runs_and_with_no_draft_left_they_stop(tmp_path, fake_runs):
    """A draft whose vLLM engine could not be built (a config error: it fails alike in every run) is left out of the
    later runs; when no draft is left, the runs stop at once (a tune on a fresh machine once ran five more target-only
    runs before saying nothing was measured), and the notes say why."""
    fake_runs.plan.update({1: f"unbuilt:{DRAFTS[1]}"})
    outcome = _profile(tmp_path / "a", repeat=3)
    assert fake_runs == [1, 2, 3] and outcome.stopped_by == "repeat"
    assert [sorted(r.engines) for r in outcome.interleaved][1:] == [sorted([TARGET, DRAFTS[0]])] * 2
    fake_runs.clear()
    fake_runs.plan.update({1: f"unbuilt:{DRAFTS[0]},{DRAFTS[1]}"})
    stopped = _profile(tmp_path / "b", repeat=4)
    assert fake_runs == [1] and stopped.stopped_by == "unbuilt" and stopped.result is None
    assert "no draft's or speculative engine could be built" in stopped.notes[0]
    assert any("Invalid repository ID" in n for n in stopped.notes)


@pytest.mark.slow
def test_ctrl_c_keeps_the_runs_completed_and_reports_them(tmp_path, fake_runs):
    fake_runs.plan.update({3: "ctrl-c"})
    with pytest.raises(KeyboardInterrupt):
        _profile(tmp_path, repeat=4)
    status = json.loads((tmp_path / "status.json").read_text())
    assert [r["status"] for r in status["runs"]] == ["done", "done", "interrupted"]
    assert status["stopped_by"] == "interrupted"
    report = json.loads((tmp_path / "report.json").read_text())
    assert {r["run"] for r in report["runs"]} == {1, 2}


@pytest.mark.slow  # 4 s or more on 2 cores: in `make test`, not the edit-test loop (`make check` ≤ 60 s)
def test_a_run_on_a_busy_machine_gets_a_note(tmp_path, fake_runs):
    fake_runs.plan.update({2: "busy"})
    outcome = _profile(tmp_path, repeat=2)
    busy = [n for n in outcome.notes if "busy machine" in n]
    assert len(busy) == 1 and busy[0].startswith("run 2 of 2 ran on a busy machine: load average 7.5 on 2 CPUs")
    fake_runs.plan.update({1: "busy", 2: "busy", 3: ""})
    both = _profile(tmp_path / "b", repeat=3)
    assert [n for n in both.notes if "busy machine" in n] == [
        "runs 1, 2 of 3 ran on a busy machine: load average 7.5 on 2 CPUs (other work competed for the CPUs; the "
        "interval across runs includes its effect)"]


@pytest.mark.parametrize("kwargs, message", [
    ({"repeat": 0}, "repeat must be a whole number ≥ 1"),
    ({"replicas": 0}, "replicas must be a whole number ≥ 1"),
    ({"precision": 1.5}, "precision must lie between 0 and 1"),
    ({"precision": 0.05, "repeat": 3, "max_repeat": 2}, r"max_repeat must be a whole number ≥ repeat \(3\)"),
    ({"max_repeat": 5}, r"max_repeat only bounds the runs of a precision \(e.g. precision=0.05\)"),
    ({"repeat": 2, "separate": True}, "need interleaved runs, which separate does not make"),
])
def test_bad_repeat_arguments_name_the_parameter(tmp_path, kwargs, message):
    with pytest.raises(InputError, match=message) as err:
        profile_mod.dry_run(ProfileRequest.of(TARGET, DRAFTS, tmp_path, OPTIONS, device="cpu", **kwargs))
    assert "--" not in str(err.value)


@pytest.mark.parametrize("args, message", [
    (["--repeat", "0"], "--repeat must be a whole number ≥ 1"),
    (["--precision", "2"], "--precision must lie between 0 and 1"),
    (["--max-repeat", "3"], "--max-repeat only bounds the runs of a precision (e.g. --precision=0.05)"),
])
def test_bad_repeat_flags_are_one_line_errors(args, message):
    res = CliRunner().invoke(cli, ["profile", "--target", TARGET, "--draft", DRAFTS[0], "--dry-run", "--device", "cpu",
                                   *args])
    lines = res.output.strip().splitlines()
    assert res.exit_code == 2 and len(lines) == 1
    assert lines[0].startswith("nsys-cc: error: ") and message in lines[0]


def test_dry_run_prints_one_process_for_every_model(tmp_path):
    out = tmp_path / "out"
    res = CliRunner().invoke(cli, ["profile", "--target", TARGET, "--draft", DRAFTS[0], "--draft", DRAFTS[1], "-o",
                                   str(out), "--device", "cpu", "--dry-run", "--replicas", "3", "--num-iters-warmup",
                                   "2"])
    assert res.exit_code == 0, res.output
    assert not out.exists()
    lines = res.output.splitlines()
    assert lines[0].startswith(f"# interleaved run 1 of {interleaved.DEFAULT_REPEAT}: ")
    profile = next(ln for ln in lines if " profile " in ln)
    engines = profile.split(" --engine ")[1:]
    assert [e.split()[0] for e in engines] == [TARGET, *DRAFTS] * 3
    assert "-m nsys_cc.vllm.interleave --output-json " + str(out / "run-1" / "interleaved.json") in profile
    assert "NSYS_CC_WARMUP_ITERS=18 " in profile  # 2 warm-up iterations × 9 engines
    assert all("--output-len 32" in e and "--kv-cache-memory-bytes" in e for e in engines)
    assert any(ln.endswith(f"-o {out}/run-1/trace.sqlite {out}/run-1/trace.nsys-rep") for ln in lines)


@pytest.mark.slow
def test_the_cli_reports_the_runs_and_the_stop(tmp_path, fake_runs):
    res = CliRunner().invoke(cli, ["profile", "--target", TARGET, "--draft", DRAFTS[0], "--draft", DRAFTS[1], "-o",
                                   str(tmp_path), "--device", "cpu", "--repeat", "2", "--precision", "0.001",
                                   "--max-repeat", "2", "--input-len", "64", "--output-len", "4", "--batch-size", "2",
                                   "--num-iters-warmup", "1", "--num-iters", "2"])
    assert res.exit_code == 0, res.output
    assert "c per run" in res.output
    assert "stopped by --max-repeat (2) before the precision" in res.output


@pytest.mark.slow
def test_analyze_reads_a_profile_directory_as_profile_reported_it(tmp_path, fake_runs):
    outcome = _profile(tmp_path, repeat=3, acceptance=[0.6])
    res = CliRunner().invoke(cli, ["analyze", str(tmp_path), "--format", "json", "--acceptance", "0.6"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output[res.output.index("{"):])
    again = {(c["draft"], c["phase"]): c["c"] for c in doc["coefficients"] if c["metric"] == "wall"}
    first = outcome.result.coefficients[outcome.result.coefficients["metric"] == "wall"]
    assert again == {(r.draft, r.phase): pytest.approx(r.c) for r in first.itertuples()}
    assert {r["run"] for r in doc["runs"]} == {1, 2, 3}
    bad = CliRunner().invoke(cli, ["analyze", str(tmp_path), "--name", "x"])
    assert bad.exit_code == 2 and "a profile directory labels its models itself" in bad.output


def test_analyze_reads_one_model_of_an_interleaved_trace_by_its_scope():
    run = str(FIXTURES / "interleaved" / "run-1" / "trace.sqlite")
    res = CliRunner().invoke(cli, ["analyze", run, run, "--engine", TARGET, "--engine", DRAFTS[1], "--format", "json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    assert [m["name"] for m in doc["models"]] == [TARGET, DRAFTS[1]]
    assert [m["phases"]["decode"]["count"] for m in doc["models"]] == [12, 12]
    wrong = CliRunner().invoke(cli, ["analyze", run, run, "--engine", "nope", "--engine", DRAFTS[1]])
    lines = wrong.output.strip().splitlines()
    assert wrong.exit_code == 2 and len(lines) == 1 and "no 'nsys_cc:engine nope' ranges" in lines[0]


def test_an_interleaved_gpu_run_shares_the_gpu_between_its_engines():
    res = CliRunner().invoke(cli, ["profile", "--target", "llama-2-7b-shape", "--draft", "llama-68m-shape", "--device",
                                   "gpu", "--dry-run"])
    assert res.exit_code == 0, res.output
    profile = next(ln for ln in res.output.splitlines() if " profile " in ln)
    engines = profile.split(" --engine ")[1:]
    assert len(engines) == 2 * interleaved.DEFAULT_REPLICAS
    # 0.9 of the GPU split between 4 engines; graphs traced node by node; vLLM's engines in their own processes
    assert all("--gpu-memory-utilization 0.23" in e and "--enforce-eager" not in e for e in engines)
    assert "--cuda-graph-trace=node" in profile and "--trace-fork-before-exec=true" in profile
    assert "VLLM_ENABLE_V1_MULTIPROCESSING" not in profile and "--kv-cache-memory-bytes" not in profile


def test_the_driver_counts_each_speculative_engines_own_steps():
    from types import SimpleNamespace

    from nsys_cc.analysis.profile_dir.acceptance import from_metrics
    from nsys_cc.vllm import interleave

    seen = []

    class Manager:
        def record(self, scheduler_stats=None, iteration_stats=None, mm_cache_stats=None):
            seen.append(scheduler_stats)

    def llm():
        return SimpleNamespace(llm_engine=SimpleNamespace(logger_manager=Manager()))

    def step(drafts, tokens, accepted, per_pos):
        spec = SimpleNamespace(num_drafts=drafts, num_draft_tokens=tokens, num_accepted_tokens=accepted,
                               num_accepted_tokens_per_pos=per_pos)
        return SimpleNamespace(spec_decoding_stats=spec)

    g1, g2, totals1, totals2 = llm(), llm(), {}, {}
    assert interleave.count_spec_decoding(g1, totals1) and interleave.count_spec_decoding(g2, totals2)
    g1.llm_engine.logger_manager.record(scheduler_stats=step(1, 1, 1, [1]), iteration_stats=None)
    g2.llm_engine.logger_manager.record(scheduler_stats=step(1, 2, 1, [1, 0]))
    g2.llm_engine.logger_manager.record(scheduler_stats=step(1, 2, 2, [1, 1]))
    g1.llm_engine.logger_manager.record(scheduler_stats=SimpleNamespace(spec_decoding_stats=None))
    assert len(seen) == 4  # vLLM's own loggers still get every step
    s1, s2 = from_metrics(interleave.as_metric_records(totals1)), from_metrics(interleave.as_metric_records(totals2))
    assert (s1.num_drafts, s1.num_draft_tokens, s1.num_accepted, s1.accepted_per_position) == (1, 1, 1, (1,))
    assert (s2.num_drafts, s2.num_draft_tokens, s2.num_accepted, s2.accepted_per_position) == (2, 4, 3, (2, 1))
    assert not interleave.count_spec_decoding(SimpleNamespace(llm_engine=SimpleNamespace(logger_manager=None)), {})


def test_speculative_engines_join_the_interleaved_runs(tmp_path):
    out = tmp_path / "out"
    res = CliRunner().invoke(cli, ["profile", "--target", TARGET, "--draft", DRAFTS[1], "--speculate", "1,3", "-o",
                                   str(out), "--device", "cpu", "--dry-run", "--replicas", "1"])
    assert res.exit_code == 0, res.output
    profile = next(ln for ln in res.output.splitlines() if " profile " in ln)
    engines = profile.split(" --engine ")[1:]
    labels = [e.split()[0] for e in engines]
    assert labels == [TARGET, DRAFTS[1], f"{DRAFTS[1]}.spec-g1", f"{DRAFTS[1]}.spec-g3"]
    for g, engine in zip((1, 3), engines[2:]):
        config = json.loads(engine.split("--speculative-config ")[1].split("'")[1])
        assert config["num_speculative_tokens"] == g and config["model"].endswith(DRAFTS[1])
        assert str(models_dir() / TARGET) in engine  # a speculative engine is the target with its draft
    # the driver dumps each speculative engine's counters into the run's directory
    assert f"NSYS_CC_METRICS_OUT={out / 'run-1'} " in profile
    assert "NSYS_CC_WARMUP_ITERS=20 " in profile  # 5 warm-up iterations × 4 engines


def models_dir():
    from nsys_cc.launch.models import MODELS_DIR

    return MODELS_DIR


def test_a_speculative_label_that_meets_a_drafts_is_refused(tmp_path):
    folder = tmp_path / "x.spec-g1"
    folder.mkdir()
    (folder / "config.json").write_text((models_dir() / DRAFTS[1] / "config.json").read_text())
    x = tmp_path / "x"
    x.mkdir()
    (x / "config.json").write_text((models_dir() / DRAFTS[1] / "config.json").read_text())
    with pytest.raises(InputError, match="two runs would both be labelled 'x.spec-g1'"):
        profile_mod.dry_run(ProfileRequest.of(TARGET, [str(x), str(folder)], tmp_path / "o", OPTIONS, device="cpu",
                                              speculate=[1]))


def _shares_as_read_alone(out, labels, runs) -> None:
    """The report's forward-share rows: one per run and model, each equal to the same model read from that run's
    trace alone (`load_model` by its engine's windows) against that run's bench JSON."""
    from nsys_cc.analysis.coefficient.model import load_model
    from nsys_cc.analysis.profile_dir.forward_share import share_row

    share = json.loads((out / "report.json").read_text())["forward_share"]
    assert sorted((row["run"], row["model"]) for row in share) == sorted((k, lb) for k in runs for lb in labels)
    for row in share:
        run_dir = out / f"run-{row['run']}"
        model = load_model(run_dir / "trace.sqlite", name=row["model"], role="model", engine=row["model"])
        alone = share_row(model.name, model.forwards, model.iterations, run_dir / f"{row['model']}.bench.json",
                          row["run"])
        for key in ("iterations", "forward_ms", "latency_ms", "nvtx_iteration_ms", "forward_share"):
            assert row[key] == pytest.approx(round(alone[key], 3)), (row, key)


def _per_trace(out, runs, n: int) -> dict[str, int]:
    return {os.path.realpath(out / f"run-{k}" / "trace.sqlite"): n for k in runs}


@pytest.mark.slow  # 4 s or more on 2 cores: in `make test`, not the edit-test loop (`make check` ≤ 60 s)
def test_the_forward_share_of_each_run_is_that_runs_own_and_no_trace_is_opened_again(tmp_path, fake_runs, counted):
    """The pooled analysis reads each run's trace once; the forward-share check then measures each run's models as
    that run saw them (its forwards, its iterations, its bench JSON), not run 1's iterations for every run."""
    outcome = _profile(tmp_path)
    assert outcome.result is not None
    runs = range(1, interleaved.DEFAULT_REPEAT + 1)
    assert dict(counted[0]) == _per_trace(tmp_path, runs, 1)
    _shares_as_read_alone(tmp_path, [TARGET, *DRAFTS], runs)
    share = json.loads((tmp_path / "report.json").read_text())["forward_share"]
    per_run = {row["run"]: row["nvtx_iteration_ms"] for row in share if row["model"] == TARGET}
    assert len(set(per_run.values())) > 1  # the fixture runs' iterations really differ


@pytest.mark.slow
def test_speculative_engines_of_interleaved_runs_get_their_forward_share_from_the_one_read(tmp_path, fake_runs,
                                                                                            counted):
    """The speculative branch of the interleaved analysis (fixtures/interleaved/spec: two real runs with γ 1–3
    engines): every engine, speculative ones too, gets each run's own forward-share row, as it reads alone."""
    fake_runs.source = lambda index: FIXTURES / "interleaved" / "spec" / f"run-{index}"
    labels = [TARGET, DRAFTS[1], *(f"{DRAFTS[1]}.spec-g{g}" for g in (1, 2, 3))]
    options = BenchOptions(input_len=64, output_len=6, batch_size=1, warmup_iters=1, iters=2)
    outcome = front.profile(TARGET, [DRAFTS[1]], tmp_path, options, device="cpu", speculate=[1, 2, 3], repeat=2,
                             replicas=1)
    assert outcome.result is not None and outcome.result.speculative is not None
    assert set(outcome.result.speculative.table["name"]) == set(labels[2:])
    # the pooled analysis, the speculative engines' steps and every engine's share from one open per run
    assert dict(counted[0]) == _per_trace(tmp_path, (1, 2), 1)
    _shares_as_read_alone(tmp_path, labels, (1, 2))
