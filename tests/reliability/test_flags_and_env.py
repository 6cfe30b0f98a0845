"""Round 5: unclear errors — a string a trace supplies printed raw (a forged `nsys-cc: error:` line), the environment
the launcher reads and hands on, a sequence longer than the model's context — each case a test that fails without its
fix. (A flag's empty value taken as nothing: tests/cli/test_options.py; a library parameter named where the verb's
flag is meant: tests/cli/test_flags.py.)"""

from __future__ import annotations

import gzip
import json
import shutil
import sqlite3

import pytest

from conftest import FIXTURES, cli_in_process, one_error_line as _one_error_line, unchanged
from nsys_cc.errors import InputError

VLLM = FIXTURES / "vllm"
TARGET = VLLM / "tiny-llama-target.sqlite"
DRAFT = VLLM / "tiny-llama-draft-s.sqlite"
PAIR = ("--target", "tiny-llama-target", "--draft", "tiny-llama-draft-s", "--device", "cpu")


def test_an_empty_model_name_is_said_so_by_the_library():
    from nsys_cc.launch.models import resolve

    for empty in ("", "  "):
        with pytest.raises(InputError, match="a model name is empty"):
            resolve(empty)


# -- what a trace says is printed one line each --------------------------------------------------------------------
FORGED = "\nnsys-cc: error: forged"


@pytest.mark.slow
def test_info_writes_a_traces_strings_on_their_own_lines(tmp_path):
    """`info` printed `distributedInfo.backend` (and a device's name) raw: a newline in it forged an
    `nsys-cc: error:` line."""
    doc = json.loads(gzip.decompress((FIXTURES / "torch" / "tiny-llama-target.pt.trace.json.gz").read_bytes()))
    doc["distributedInfo"] = {**doc.get("distributedInfo", {}), "backend": "gloo" + FORGED}
    doc["deviceProperties"] = [{"name": "GPU" + FORGED}]
    doc["vllm_version"] = "0.32" + FORGED
    evil = tmp_path / "evil.pt.trace.json.gz"
    evil.write_bytes(gzip.compress(json.dumps(doc).encode(), compresslevel=1))
    with unchanged(evil):
        done = cli_in_process("info", str(evil))
    assert done.returncode == 0, done.stderr
    assert not [ln for ln in done.stdout.splitlines() if ln.startswith("nsys-cc")], done.stdout
    assert "gloo\\nnsys-cc: error: forged" in done.stdout and "GPU\\nnsys-cc: error: forged" in done.stdout


def test_a_range_name_with_a_newline_stays_in_its_row(tmp_path):
    """The one table renderer wrote a cell as it was: a range name with a newline started a row of its own."""
    evil = shutil.copyfile(TARGET, tmp_path / "evil.sqlite")
    con = sqlite3.connect(evil)
    con.execute("UPDATE StringIds SET value = ? WHERE value = 'nsys_cc:step'", ("nsys_cc:step" + FORGED,))
    con.commit()
    con.close()
    done = cli_in_process("ranges", str(evil))
    assert done.returncode == 0, done.stderr
    assert not [ln for ln in done.stdout.splitlines() if ln.startswith("nsys-cc")], done.stdout


# -- the environment the tool reads and hands on ----------------------------------------------------------------------
def test_nsys_ccs_own_variables_left_in_the_environment_never_reach_a_run(tmp_path, monkeypatch):
    """A leftover `NSYS_CC_TORCH_TRACE=$TMPDIR/x.pt.trace.json.gz` made an nsys route's benchmark run the torch
    profiler and write its trace there, outside -o; a leftover NSYS_CC_METRICS_OUT made a plain run dump metrics
    there; NSYS_CC_TORCH_RANGES=1 made the plugin write no NVTX range. The run's benchmark (a stand-in here) sees
    only what the run sets."""
    import sys

    from conftest import planned
    from nsys_cc.contract import ENV_METRICS_OUT, ENV_PLUGIN, ENV_TORCH_RANGES, ENV_TORCH_TRACE
    from nsys_cc.launch import environment, process, recorders
    from nsys_cc.launch.commands import ModelFiles, model_commands
    from nsys_cc.request import BenchOptions

    outside = tmp_path / "outside"
    leftovers = {ENV_TORCH_TRACE: str(outside / "x.pt.trace.json.gz"), ENV_METRICS_OUT: str(outside / "m.json"),
                 ENV_TORCH_RANGES: "1", ENV_PLUGIN: "0"}
    for name, value in leftovers.items():
        monkeypatch.setenv(name, value)
    out = tmp_path / "o"
    out.mkdir()
    seen = out / "env.json"
    cmds = model_commands("nsys", "m", ModelFiles(out, "m"), BenchOptions(), gpu=False)
    record = f"import json, os; json.dump(dict(os.environ), open({str(seen)!r}, 'w'))"
    cmds = type(cmds)(cmds.env, [sys.executable, "-c", record], [], cmds.files)
    process.profile_and_export(cmds, out / "m.log", shown="", outputs=(), who="m", timeout=60)
    env = json.loads(seen.read_text())
    assert ENV_TORCH_TRACE not in env and ENV_METRICS_OUT not in env and ENV_TORCH_RANGES not in env
    assert env[ENV_PLUGIN] == "1" and not outside.exists()
    warned = environment.check(recorders.NSYS, gpu=False)  # each said once, before the runs
    assert [w.split("=")[0] for w in warned] == [ENV_PLUGIN, ENV_METRICS_OUT, ENV_TORCH_RANGES, ENV_TORCH_TRACE]
    # the torch route's own trace does reach its run
    runs = planned("tiny-llama-target", ["tiny-llama-draft-s"], out, BenchOptions(), nsys="", profiler="torch")
    assert runs[0].commands.env[ENV_TORCH_TRACE] == str(out.resolve() / "tiny-llama-target.pt.trace.json.gz")


@pytest.mark.parametrize("profiler, device, refused", [("torch", "cpu", True), ("torch", "gpu", True),
                                                       ("nsys", "cpu", True), ("nsys", "gpu", False)])
def test_vllm_multiprocessing_that_breaks_the_runs_is_named(profiler, device, refused, tmp_path, monkeypatch):
    """VLLM_ENABLE_V1_MULTIPROCESSING=1 failed every run with "no model_executable() ranges (plugin not loaded …)",
    without a word of the variable."""
    monkeypatch.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "1")
    for separate in ((), ("--separate-processes",)):
        done = cli_in_process("profile", "--target", "tiny-llama-target", "--draft", "tiny-llama-draft-s",
                              "--device", device, "--profiler", profiler, "--dry-run", "-o", str(tmp_path),
                              *separate)
        if refused:
            _one_error_line(done, "VLLM_ENABLE_V1_MULTIPROCESSING='1'")
        else:
            assert done.returncode == 0, done.stderr


def test_torch_settings_are_checked_before_the_runs_and_keep_their_name(tmp_path, monkeypatch):
    """A newline in NSYS_CC_TORCH_SETTINGS: the driver's error split over two lines of the log, and the run's reason
    (the last line) lost the variable's name. Checked before the runs now, one line naming it; on the nsys route,
    to which it does not belong, refused."""
    from nsys_cc.vllm import torch_profiler

    monkeypatch.setenv("NSYS_CC_TORCH_SETTINGS", "stack\nops")
    args = ("profile", *PAIR, "--dry-run", "-o", str(tmp_path))
    _one_error_line(cli_in_process(*args, "--profiler", "torch"), "NSYS_CC_TORCH_SETTINGS", "'stack\\nops'")
    _one_error_line(cli_in_process(*args), "NSYS_CC_TORCH_SETTINGS", "--profiler torch")
    with pytest.raises(SystemExit) as stop:
        torch_profiler.from_environment({"NSYS_CC_TORCH_TRACE": "t.json", "NSYS_CC_TORCH_SETTINGS": "stack\nops"})
    assert "\n" not in str(stop.value.code) and str(stop.value.code).startswith("NSYS_CC_TORCH_SETTINGS")
    monkeypatch.setenv("NSYS_CC_TORCH_SETTINGS", "stack")
    assert cli_in_process(*args, "--profiler", "torch").returncode == 0


def test_nsys_naming_no_program_is_refused_not_replaced(tmp_path, monkeypatch):
    """NSYS=/typo profiled and exported with whichever nsys came next on PATH, without a word."""
    monkeypatch.setenv("NSYS", str(tmp_path / "no-such-nsys"))
    _one_error_line(cli_in_process("profile", *PAIR, "--dry-run", "-o", str(tmp_path)), "NSYS=",
                    "no-such-nsys")


# -- lengths beyond the model's context ------------------------------------------------------------------------------
@pytest.mark.parametrize("route", [(), ("--separate-processes",), ("--profiler", "torch")], ids=["interleaved",
                                                                                                "separate", "torch"])
@pytest.mark.parametrize("lengths, flag", [(("--input-len", "1000000000"), "--input-len"),
                                           (("--input-len", "128", "--output-len", "2000"), "--output-len"),
                                           (("--input-len", "600", "--vllm-arg=--max-model-len=512"), "--input-len")])
def test_a_sequence_longer_than_the_models_context_is_refused_before_vllm(route, lengths, flag, tmp_path):
    """`profile --input-len 1000000000` was taken: the driver built an 11.4 GB prompt list (a length vLLM refuses
    reached it after its engines were built)."""
    line = _one_error_line(cli_in_process("profile", *PAIR, "--dry-run", "-o", str(tmp_path), *route, *lengths),
                           f"give a shorter {flag}")
    assert ("--max-model-len 512" if "512" in str(lengths) else "context of 1024 tokens") in line, line


def test_tune_and_sweep_check_the_context_before_anything_is_made(tmp_path, monkeypatch):
    from nsys_cc.workflows import tune as workflow

    monkeypatch.setattr(workflow, "_profile_round", lambda *a, **kw: pytest.fail("profiled"))
    out = tmp_path / "t"
    _one_error_line(cli_in_process("tune", *PAIR, "-o", str(out), "--input-len", "1000000000"), "--input-len",
                    "context of 1024 tokens")
    assert not out.exists()
    _one_error_line(cli_in_process("sweep", *PAIR, "--dry-run", "-o", str(out), "--input-len", "128,5000"),
                    "--input-len", "context of 1024 tokens")


def test_the_context_comes_from_the_config_and_an_unknown_one_refuses_nothing(tmp_path):
    from nsys_cc.launch.models import Model, context_length, resolve

    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"max_position_embeddings": 4096, "seq_length": 2048,
                                                    "rope_scaling": {"rope_type": "linear", "factor": 4.0}}))
    model = resolve(str(folder))
    assert context_length(model) == (8192, "seq_length × rope scaling 4 in its config.json")
    assert context_length(model, ["--max-model-len", "32k"])[0] == 32000
    assert context_length(Model("org/x", "org/x", "x", "hub")) is None
    (folder / "config.json").write_text("{}")
    assert context_length(model) is None


def test_the_driver_refuses_a_sequence_its_engine_cannot_hold_before_building_prompts():
    from types import SimpleNamespace

    from nsys_cc.vllm.interleave import _too_long

    llm = SimpleNamespace(llm_engine=SimpleNamespace(model_config=SimpleNamespace(max_model_len=1024)))
    assert _too_long(llm, 1_000_000_000, 32).endswith("exceed the engine's max_model_len 1024")
    assert _too_long(llm, 1000, 24) == "" and _too_long(None, 10**9, 1) == ""
