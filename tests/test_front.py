"""The front door: `nsys_cc.analyze(source)` takes what `nsys-cc analyze` takes — traces, a profile's output
directory as it is (interleaved, speculative, one process per model, tensor-parallel), a sweep directory or a
manifest — and gives the numbers the CLI prints. Each case is checked against the CLI's JSON and against the analysis
written the long way (the traces given one by one to `cost_coefficient` / `cost_coefficient_runs`); the profile
directories are the fixtures as `profile` leaves them (its own status writer, the fixture traces in its files)."""

from __future__ import annotations

import ast
import json
import math
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

import nsys_cc
from conftest import FIXTURES, nodes, planned, raw_sql
from nsys_cc.cli import cli
from nsys_cc.errors import InputError
from nsys_cc.launch import orchestrator, separate
from nsys_cc.request import BenchOptions, ProfileRequest

# Reports are written without their PNGs here (conftest `no_figures`): these tests check what runs and analyses
# wrote, and drawing the figures was most of their time; tests/report/test_result_plots.py and the plots/ tests draw
# them.
pytestmark = pytest.mark.usefixtures("no_figures")

VLLM, SPEC, TP = FIXTURES / "vllm", FIXTURES / "spec", FIXTURES / "tp"
INTERLEAVED = FIXTURES / "interleaved"
PLAIN = ["tiny-llama-target", "tiny-llama-draft-s", "tiny-llama-draft-xs"]
ENGINES = ["tiny-llama-target", "tiny-llama-draft-xs", *(f"tiny-llama-draft-xs.spec-g{g}" for g in (1, 2, 3))]
OPTIONS = BenchOptions(input_len=64, output_len=4, batch_size=2, warmup_iters=2, iters=3)
PACKAGE = Path(nsys_cc.__file__).parent


def _cli_json(*args: str) -> dict:
    res = CliRunner().invoke(cli, ["analyze", *map(str, args), "--format", "json"])
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)


def _same_numbers(doc: dict, result) -> None:
    """The CLI's JSON says the c, intervals and forward shares of `result`."""
    got = {(c["draft"], c["phase"], c["metric"]): tuple(math.nan if x is None else x for x in (c["c"], *c["ci95"]))
           for c in doc["coefficients"]}
    want = {(r.draft, r.phase, r.metric): (r.c, r.ci_low, r.ci_high) for r in result.coefficients.itertuples()}
    assert got.keys() == want.keys() and got
    for key, values in want.items():
        assert got[key] == pytest.approx(values, nan_ok=True), key
    assert doc.get("forward_share", []) == json.loads(result.forward_share.to_json(orient="records"))


def _separate(out: Path, sources: dict[str, Path], **plan) -> Path:
    """A one-process-per-model profile's output directory: `launch.plan.plan`'s files, the fixture traces (and bench
    JSON, metrics dumps) copied in, its status.json written by `profile`'s own writer."""
    out.mkdir()
    request = ProfileRequest.of(sources["target"], sources["drafts"], out, OPTIONS, **plan)
    runs = planned(sources["target"], sources["drafts"], out, OPTIONS, nsys="nsys", gpu=False, **plan)
    for run, src in zip(runs, sources["files"]):
        shutil.copy(src, run.files.trace)
        for suffix, dest in ((".bench.json", run.files.bench_json), (".metrics.json", run.files.metrics)):
            side = src.with_name(src.name.removesuffix(".sqlite") + suffix)
            if side.exists():
                shutil.copy(side, dest)
        run.status = "done"
    orchestrator.write_status(out, separate.Separate(request, gpu=False, dry=True, launches=runs))
    return out


# ---- interleaved runs ---------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_interleaved_runs_give_the_numbers_the_cli_prints():
    res = nsys_cc.analyze(INTERLEAVED)
    traces = [INTERLEAVED / f"run-{k}" / "trace.sqlite" for k in (1, 2, 3)]
    assert res == nsys_cc.cost_coefficient_runs([[t] * 3 for t in traces], names=PLAIN, engines=[PLAIN] * 3)
    _same_numbers(_cli_json(INTERLEAVED), res)
    assert sorted(set(res.forward_share["run"])) == [1, 2, 3] and set(res.forward_share["model"]) == set(PLAIN)


RAW_RANGES = ("SELECT coalesce(e.text, s.value), e.start, e.\"end\" FROM NVTX_EVENTS e LEFT JOIN StringIds s "
              "ON s.id = e.textId WHERE e.eventType = 59")


def _draft_forwards(sqlite: Path, label: str) -> int:
    """Measured draft forwards of engine `label`, from the raw rows: `draft_model_executable()` ranges that start
    inside one of its `nsys_cc:engine` windows and inside an `nsys_cc:iteration` range (not the warm-up)."""
    rows = raw_sql(sqlite, RAW_RANGES)
    engine = [(a, b) for n, a, b in rows if n == f"nsys_cc:engine {label}"]
    iters = [(a, b) for n, a, b in rows if n == "nsys_cc:iteration"]
    return sum(1 for n, s, _ in rows if n == "draft_model_executable()"
               and any(a <= s <= b for a, b in engine) and any(a <= s <= b for a, b in iters))


@pytest.mark.slow
def test_interleaved_speculative_runs_give_the_numbers_the_cli_prints():
    # (that these are the numbers of the runs written out the long way and of spec_runs' own reader:
    # test_user_calls.test_interleaved_runs_with_speculative_engines_pool_them_as_the_cli_does and the slow
    # test_a_profile_directory_of_speculative_runs_is_read_as_it_is)
    src = INTERLEAVED / "spec"
    res = nsys_cc.analyze(src)
    assert [m.name for m in res.models] == ENGINES[:2]
    assert list(res.speculative.table["name"]) == ENGINES[2:]
    measured = res.speculative.steps.groupby("run")["draft_forwards"].sum()
    for label in ENGINES[2:]:  # both runs' draft forwards of each engine, as the raw rows count them
        assert measured[label] == sum(_draft_forwards(src / f"run-{k}" / "trace.sqlite", label) for k in (1, 2)) > 0
    doc = _cli_json(src)
    _same_numbers(doc, res)
    assert [r["measured_speedup"] for r in doc["speculative"]] == pytest.approx(
        list(res.speculative.table["measured_speedup"]))


# ---- one process per model ----------------------------------------------------------------------------------------
@pytest.mark.slow
def test_a_plain_profile_directory_gives_the_numbers_the_cli_prints(tmp_path):
    out = _separate(tmp_path / "o", {"target": PLAIN[0], "drafts": PLAIN[1:],
                                     "files": [VLLM / f"{m}.sqlite" for m in PLAIN]})
    res = nsys_cc.analyze(out)
    assert res == nsys_cc.cost_coefficient(out / f"{PLAIN[0]}.sqlite", [out / f"{m}.sqlite" for m in PLAIN[1:]])
    _same_numbers(_cli_json(out), res)
    assert list(res.forward_share["model"]) == PLAIN


def test_models_resumed_from_an_earlier_call_are_complete(tmp_path):
    # a rerun of profile keeps what an earlier call completed and writes "resumed" for it: analysed as done (it was
    # "nothing to analyse (target …: not completed)", test_profile_e2e.test_a_rerun_resumes_completed_models)
    out = _separate(tmp_path / "o", {"target": PLAIN[0], "drafts": PLAIN[1:],
                                     "files": [VLLM / f"{m}.sqlite" for m in PLAIN]})
    status = json.loads((out / "status.json").read_text())
    for entry in status["models"][:2]:
        entry["status"] = "resumed"
    (out / "status.json").write_text(json.dumps(status))
    assert [m.name for m in nsys_cc.analyze(out).models] == PLAIN


def test_a_failed_draft_of_a_profile_directory_is_left_out(tmp_path):
    out = _separate(tmp_path / "o", {"target": PLAIN[0], "drafts": PLAIN[1:],
                                     "files": [VLLM / f"{m}.sqlite" for m in PLAIN]})
    status = json.loads((out / "status.json").read_text())
    status["models"][2]["status"], status["models"][2]["reason"] = "failed", "timed out"
    (out / "status.json").write_text(json.dumps(status))
    assert [m.name for m in nsys_cc.analyze(out).models] == PLAIN[:2]
    status["models"][0]["status"] = "failed"
    (out / "status.json").write_text(json.dumps(status))
    with pytest.raises(InputError, match=r"nothing to analyse \(target tiny-llama-target: timed out"
                                         r"|nothing to analyse \(target tiny-llama-target"):
        nsys_cc.analyze(out)


@pytest.mark.slow
def test_a_speculative_profile_directory_gives_the_numbers_the_cli_prints(tmp_path):
    labels = ["tiny-llama-target", "tiny-llama-draft-xs", *(f"tiny-llama-draft-xs.spec-g{g}" for g in (1, 2, 3))]
    out = _separate(tmp_path / "o", {"target": labels[0], "drafts": labels[1:2],
                                     "files": [SPEC / f"{m}.sqlite" for m in labels]}, speculate=[1, 2, 3])
    res = nsys_cc.analyze(out)
    long_way = nsys_cc.cost_coefficient(out / f"{labels[0]}.sqlite", [out / f"{m}.sqlite" for m in labels[1:]])
    assert res == long_way and list(res.speculative.table["name"]) == labels[2:]
    doc = _cli_json(out)
    _same_numbers(doc, res)
    assert [r["measured_speedup"] for r in doc["speculative"]] == pytest.approx(
        list(res.speculative.table["measured_speedup"]))


@pytest.mark.slow
def test_a_tensor_parallel_profile_directory_gives_the_numbers_the_cli_prints(tmp_path):
    out = _separate(tmp_path / "o", {"target": "tiny-llama-target", "drafts": ["tiny-llama-draft-xs"],
                                     "files": [TP / "tiny-llama-target.tp2.sqlite",
                                               VLLM / "tiny-llama-draft-xs.sqlite"]}, target_tp=2)
    res = nsys_cc.analyze(out)
    assert [m.name for m in res.models] == ["tiny-llama-target.tp2", "tiny-llama-draft-xs"]
    assert res.target.ranks is not None and res.target.ranks.count == 2 and not res.ranks.empty
    assert res == nsys_cc.cost_coefficient(out / "tiny-llama-target.tp2.sqlite", out / "tiny-llama-draft-xs.sqlite")
    _same_numbers(_cli_json(out), res)


def test_a_profile_directory_refuses_what_names_traces_one_by_one(tmp_path):
    with pytest.raises(InputError, match=r"^names applies to traces given one by one") as err:
        nsys_cc.analyze(INTERLEAVED, names=["a", "b", "c"])
    assert err.value.param == "names"
    with pytest.raises(InputError, match=r"^range_name: give one forward range for a profile directory"):
        nsys_cc.analyze(INTERLEAVED, range_name=["model_executable()", "gpu_model_runner: forward"])
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(InputError, match="is neither a profile's output directory .* nor a sweep directory"):
        nsys_cc.analyze(empty)


# ---- traces, many trace sets -----------------------------------------------------------------------------------
@pytest.mark.slow
def test_traces_are_cost_coefficient():
    traces = [VLLM / f"{m}.sqlite" for m in PLAIN]
    long_way = nsys_cc.cost_coefficient(traces[0], traces[1:], acceptance=0.8)
    assert nsys_cc.analyze(traces[0], traces[1:], acceptance=0.8) == long_way
    assert nsys_cc.analyze(traces, acceptance=0.8) == long_way  # [target, *drafts] as one list
    with pytest.raises(InputError, match="^jobs applies to many trace sets") as err:
        nsys_cc.analyze(traces, jobs=2)
    assert err.value.param == "jobs"


@pytest.mark.slow
def test_a_manifest_is_many_trace_sets(tmp_path):
    manifest = tmp_path / "m.json"
    manifest.write_text(json.dumps([{"name": "a", "target": str(VLLM / "tiny-llama-target.sqlite"),
                                     "drafts": [str(VLLM / "tiny-llama-draft-xs.sqlite")]}]))
    many = nsys_cc.analyze(manifest, jobs=1)
    one = nsys_cc.cost_coefficient(VLLM / "tiny-llama-target.sqlite", VLLM / "tiny-llama-draft-xs.sqlite")
    rows = many.table[(many.table["phase"] == "decode") & (many.table["metric"] == "wall")]
    want = one.coefficients.query("phase == 'decode' and metric == 'wall'")["c"].iloc[0]
    assert many.failures == [] and list(rows["c"]) == pytest.approx([want])
    with pytest.raises(InputError, match=r"^skip_ranges applies to one trace set") as err:
        nsys_cc.analyze(manifest, skip_ranges=2)
    assert err.value.param == "skip_ranges"


def test_jobs_apply_to_many_trace_sets_whatever_the_one_set_is(tmp_path):
    # a folder of traces is one trace set: jobs and scheduler are refused for it as for traces given one by one
    # (the folder's own decision once skipped that check, and said what the folder lacked instead)
    for param in ("jobs", "scheduler"):
        with pytest.raises(InputError, match=f"^{param} applies to many trace sets") as err:
            nsys_cc.analyze(tmp_path, **{param: 2 if param == "jobs" else "tcp://nowhere:1"})
        assert err.value.param == param


def test_the_front_door_is_in_the_facade():
    assert "analyze" in nsys_cc.__all__ and nsys_cc.analyze.__module__ == "nsys_cc.front"


# ---- the house: no analysis built above the analysis floor ------------------------------------------------------
FLOOR_INSIDES = {"nsys_cc.analysis.speculative.pooled", "nsys_cc.analysis.profile_dir.forward_share",
                 "nsys_cc.analysis.forwards.steps"}
FLOOR_NAMES = {"models_of_trace", "load_model", "standalone_c", "analyze_runs", "analyze_speculative", "share_row"}


@pytest.mark.parametrize("room", ["launch", "cli"])
def test_no_module_of_launch_or_cli_builds_an_analysis(room):
    # they call the analysis (`sources.analyze_profile`, `nsys_cc.analyze`), never its pieces, and never patch a
    # result's speculative analysis in
    found = []
    for path in sorted((PACKAGE / room).rglob("*.py")):
        for node in nodes(path):
            if isinstance(node, ast.ImportFrom) and node.module:
                module = ("nsys_cc." + node.module.lstrip(".")) if node.level else node.module
                module = module.replace("nsys_cc..", "nsys_cc.")
                names = {a.name for a in node.names}
                if any(module.endswith(m.removeprefix("nsys_cc.")) for m in FLOOR_INSIDES) or names & FLOOR_NAMES:
                    found.append(f"{path.name}: from {node.module} import {', '.join(sorted(names))}")
            if (isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", "")) == "replace"
                    and any(k.arg == "speculative" for k in node.keywords) and room == "launch"):
                found.append(f"{path.name}: replace(…, speculative=…)")
    assert found == []


# ---- profile = the runs, then analyze(out_dir), then the report -----------------------------------------------------
@pytest.mark.slow
def test_the_end_of_profile_is_the_analysis_analyze_makes_of_its_directory(tmp_path):
    # profile's runs hand the directory they wrote to the front door's finish (a sweep cell to the same one,
    # `workflows.profile.finish`): the result is the one nsys_cc.analyze(out_dir) gives, the report is written beside it
    # with the runs' notes
    from nsys_cc.workflows import profile as profile_workflow

    out = _separate(tmp_path / "o", {"target": PLAIN[0], "drafts": PLAIN[1:],
                                     "files": [VLLM / f"{m}.sqlite" for m in PLAIN]})
    runs = planned(PLAIN[0], PLAIN[1:], out, OPTIONS, nsys="nsys", gpu=False)
    for run in runs:
        run.status, run.range_name = "done", "model_executable()"
    request = ProfileRequest.of(PLAIN[0], PLAIN[1:], out, OPTIONS)
    concluded = separate.conclude(runs, out)
    assert concluded.analysable and concluded.result is None and concluded.report is None  # launch analyses nothing
    done = profile_workflow.finish(concluded, request)
    assert done.result == nsys_cc.analyze(out)
    assert done.report is not None and json.loads((out / "report.json").read_text())["models"]
    again = profile_workflow.finish(separate.conclude(runs, out), request)
    assert again.result == done.result
    runs[0].status = "failed"  # no target: nothing to analyse, and finish leaves the run as it is
    failed = separate.conclude(runs, out)
    assert not failed.analysable and profile_workflow.finish(failed, request).result is None


def test_the_cli_profiles_through_the_front_door():
    tree = ast.parse((PACKAGE / "cli" / "profile.py").read_text())
    called = {ast.unparse(n.func) for n in ast.walk(tree) if isinstance(n, ast.Call)}
    assert "front.profile" in called and "profile_mod.profile" not in called
