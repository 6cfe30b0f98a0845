"""`profile --profiler torch`: the commands of both routes (dry-run output read back as words), what the torch route
refuses, where its traces are looked for, and that a torch profile directory is read as an nsys one is."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from conftest import cli_in_process
from nsys_cc.analysis.profile_dir.outputs import read_output
from nsys_cc.contract import ENV_TORCH_RANGES, ENV_TORCH_TRACE
from nsys_cc.errors import InputError
from nsys_cc.launch import commands, process, recorders
from nsys_cc.launch.commands import ModelFiles
from nsys_cc.request import BenchOptions, ProfileRequest
from nsys_cc.trace import nsys as trace_nsys
from nsys_cc.workflows import profile as workflow

PAIR = ("--target", "tiny-llama-target", "--draft", "tiny-llama-draft-xs", "--device", "cpu")


def _command_lines(text: str) -> list[list[str]]:
    """The shell lines of a dry run (no comments, no blank lines), split as a shell would."""
    return [shlex.split(line) for line in text.splitlines() if line.strip() and not line.startswith("#")]


def _env_and_argv(words: list[str]) -> tuple[dict[str, str], list[str]]:
    env = {}
    while words and "=" in words[0] and not words[0].startswith("-"):
        key, value = words.pop(0).split("=", 1)
        env[key] = value
    return env, words


def test_interleaved_dry_run_of_both_routes(tmp_path):
    out = tmp_path / "o"
    nsys = cli_in_process("profile", *PAIR, "-o", str(out), "--dry-run")
    torch = cli_in_process("profile", *PAIR, "-o", str(out), "--dry-run", "--profiler", "torch")
    assert nsys.returncode == 0 and torch.returncode == 0, (nsys.stderr, torch.stderr)
    (n_run, n_export), (t_run,) = _command_lines(nsys.stdout), _command_lines(torch.stdout)
    n_env, n_argv = _env_and_argv(n_run)
    t_env, t_argv = _env_and_argv(t_run)
    # nsys: the driver under `nsys profile`, then its export; no torch switch
    assert Path(n_argv[0]).name == "nsys" and n_argv[1] == "profile" and n_export[1] == "export"
    assert ENV_TORCH_RANGES not in n_env and ENV_TORCH_TRACE not in n_env
    # torch: the same driver and the same engines under plain python, its trace in the run's folder
    assert t_argv[1:3] == ["-m", "nsys_cc.vllm.interleave"] and "nsys" not in Path(t_argv[0]).name
    assert t_env[ENV_TORCH_RANGES] == "1"
    assert t_env[ENV_TORCH_TRACE] == str(out.resolve() / "run-1" / "trace.pt.trace.json.gz")
    assert t_env["VLLM_ENABLE_V1_MULTIPROCESSING"] == "0"
    driver = n_argv.index("-m") - 1
    assert t_argv == [t_argv[0], *n_argv[driver + 1:]]


def test_separate_dry_run_names_a_trace_per_model(tmp_path):
    done = cli_in_process("profile", *PAIR, "-o", str(tmp_path), "--dry-run", "--profiler", "torch",
                          "--separate-processes")
    assert done.returncode == 0, done.stderr
    lines = _command_lines(done.stdout)
    assert len(lines) == 2  # one line per model, no export
    traces = [_env_and_argv(words)[0][ENV_TORCH_TRACE] for words in lines]
    assert traces == [str(tmp_path.resolve() / f"{m}.pt.trace.json.gz")
                      for m in ("tiny-llama-target", "tiny-llama-draft-xs")]


def test_the_speculative_engine_joins_the_torch_run(tmp_path):
    done = cli_in_process("profile", *PAIR, "-o", str(tmp_path), "--dry-run", "--profiler", "torch",
                          "--speculate", "2")
    assert done.returncode == 0, done.stderr
    (words,) = _command_lines(done.stdout)
    labels = [words[i + 1] for i, w in enumerate(words) if w == "--engine"]
    assert "tiny-llama-draft-xs.spec-g2" in labels


@pytest.mark.parametrize("extra, flag", [(("--target-tp", "2"), "--target-tp"), (("--draft-tp", "2"), "--draft-tp"),
                                         (("--nsys-trace", "nvtx"), "trace is an nsys option"),
                                         (("--nsys-arg=--sample=cpu",), "--nsys-arg")])
def test_what_the_torch_route_refuses_is_one_line(tmp_path, extra, flag):
    done = cli_in_process("profile", *PAIR, "-o", str(tmp_path), "--dry-run", "--profiler", "torch", *extra)
    assert done.returncode == 2 and done.stdout == ""
    (line,) = done.stderr.splitlines()
    assert line.startswith("nsys-cc: error: ") and flag in line


def test_an_unknown_profiler_is_refused():
    with pytest.raises(InputError, match="profiler must be nsys or torch") as err:
        workflow.check_profiler("perf")
    assert err.value.param == "profiler"
    done = cli_in_process("profile", *PAIR, "--dry-run", "--profiler", "perf")
    assert done.returncode == 2 and "perf" in done.stderr


def test_the_torch_route_needs_no_nsys(tmp_path, monkeypatch):
    """No nsys anywhere: the torch route goes on past the check (and stops at the first thing it does need, here a
    stand-in for vLLM), while the nsys route stops with nsys's own one line."""
    monkeypatch.setattr(trace_nsys, "find_nsys", lambda: None)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("NSYS", raising=False)

    class Reached(Exception):
        pass

    def preflight(recorder, binary):
        assert not binary
        raise Reached

    monkeypatch.setattr(process, "preflight", preflight)
    for separate in (True, False):  # both ways of running engines
        with pytest.raises(Reached):
            workflow.profile(ProfileRequest("tiny-llama-target", ["tiny-llama-draft-xs"], tmp_path / "o",
                                            device="cpu", profiler="torch", separate=separate))
        with pytest.raises(Exception, match="nsys") as err:
            workflow.profile(ProfileRequest("tiny-llama-target", ["tiny-llama-draft-xs"], tmp_path / "o2",
                                            device="cpu", separate=separate))
        assert not isinstance(err.value, Reached)


def test_the_torch_files_and_commands():
    files = ModelFiles(Path("/o"), "m", recorders.TORCH)
    assert files.trace == Path("/o/m.pt.trace.json.gz") == files.recorded
    assert ModelFiles(Path("/o"), "m").trace == Path("/o/m.sqlite")
    cmds = commands.model_commands("", "/models/m", files, BenchOptions(), gpu=False, environ={})
    assert cmds.export == [] and cmds.profile[1:3] == ["-m", "nsys_cc.vllm.bench"]
    assert cmds.env[ENV_TORCH_TRACE] == "/o/m.pt.trace.json.gz" and "\n" not in cmds.shell()
    gpu = commands.model_commands("", "/models/m", files, BenchOptions(), gpu=True, environ={})
    assert gpu.env["VLLM_ENABLE_V1_MULTIPROCESSING"] == "0"  # the engine where the profiler is
    user = commands.model_commands("", "/m", files, BenchOptions(), gpu=True,
                                   environ={"VLLM_ENABLE_V1_MULTIPROCESSING": "1"})
    assert "VLLM_ENABLE_V1_MULTIPROCESSING" not in user.env  # the user's environment wins


def test_a_torch_profile_directory_is_read_like_an_nsys_one(tmp_path):
    """The run folders' traces are found whichever profiler made them."""
    for k, name in ((1, "trace.pt.trace.json.gz"), (2, "trace.sqlite")):
        run = tmp_path / f"run-{k}"
        run.mkdir()
        (run / name).write_bytes(b"x")
        (run / "done.json").write_text(json.dumps({"engines": {"t": "done", "d": "done"}}))
    out = read_output(tmp_path)
    assert [r.trace.name for r in out.runs] == ["trace.pt.trace.json.gz", "trace.sqlite"]
    separate = tmp_path / "sep"
    separate.mkdir()
    (separate / "status.json").write_text(json.dumps([
        {"role": "target", "label": "t", "status": "done", "trace": "/elsewhere/t.pt.trace.json.gz"},
        {"role": "draft", "label": "d", "status": "done", "sqlite": "/elsewhere/d.sqlite"}]))
    models = read_output(separate).models
    assert [m.trace for m in models] == [separate / "t.pt.trace.json.gz", separate / "d.sqlite"]


def test_sweep_and_tune_take_the_option(tmp_path):
    sweep = cli_in_process("sweep", "--target", "tiny-llama-target", "--draft", "tiny-llama-draft-xs", "--device",
                           "cpu", "-o", str(tmp_path / "s"), "--dry-run", "--profiler", "torch")
    assert sweep.returncode == 0, sweep.stderr
    (words,) = _command_lines(sweep.stdout)
    assert _env_and_argv(words)[0][ENV_TORCH_RANGES] == "1"
    refused = cli_in_process("sweep", "--target", "tiny-llama-target", "--draft", "tiny-llama-draft-xs", "--device",
                             "cpu", "-o", str(tmp_path / "s2"), "--dry-run", "--profiler", "torch", "--target-tp",
                             "2")
    assert refused.returncode == 2 and "nsys-cc: error:" in refused.stderr
    tune = cli_in_process("tune", "--help")
    assert "--profiler [nsys|torch]" in tune.stdout  # (the tune route itself runs in tests/e2e/test_profile_torch.py)
