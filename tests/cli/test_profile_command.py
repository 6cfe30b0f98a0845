"""`nsys-cc profile` (`nsys_cc.cli.profile`) as a user meets it on the command line: `--help`, a bad or missing flag
one error line (exit 2), and `--dry-run` — the commands printed, nothing written, no vLLM needed. (The verb's inside:
tests/workflows/test_profile.py and tests/launch/; named `_command` as tests/workflows/test_profile.py holds the
name `test_profile.py`.)"""

from __future__ import annotations

import pytest

from conftest import cli_in_process, one_error_line as _one_error_line

PAIR = ("--target", "tiny-llama-target", "--draft", "tiny-llama-draft-s", "--device", "cpu")


def test_help_lists_the_flags_and_the_profilers():
    done = cli_in_process("profile", "--help")
    assert done.returncode == 0 and done.stdout.startswith("Usage: nsys-cc profile [OPTIONS]")
    for flag in ("--target", "--draft", "--dry-run", "--profiler [nsys|torch]", "--separate-processes", "-o,"):
        assert flag in done.stdout, flag


@pytest.mark.parametrize("args, says", [
    ((), "Missing option '--target'"),
    ((*PAIR, "--bogus"), "No such option '--bogus'"),
    ((*PAIR, "--profiler", "bogus"), "'bogus' is not one of 'nsys', 'torch'"),
    ((*PAIR, "--device", "tpu"), "'tpu' is not one of 'auto', 'cpu', 'gpu'"),
])
def test_a_missing_or_bad_flag_is_one_line(args, says):
    line = _one_error_line(cli_in_process("profile", *args, "--dry-run"), says)
    assert line.endswith("(nsys-cc profile -h lists the options)")


def test_a_dry_run_prints_each_run_and_writes_nothing(tmp_path):
    out = tmp_path / "o"
    done = cli_in_process("profile", *PAIR, "--dry-run", "-o", str(out))
    assert done.returncode == 0, done.stderr
    first = done.stdout.splitlines()[0]
    assert first == (f"# interleaved run 1 of 6: tiny-llama-target + tiny-llama-draft-s in one process (CPU, nsys); "
                     f"run k writes {out}/run-k/")
    assert "nsys profile -t nvtx,osrt" in done.stdout and f"-o {out}/run-1/trace " in done.stdout
    assert f"nsys export --type sqlite -f true -o {out}/run-1/trace.sqlite {out}/run-1/trace.nsys-rep" in done.stdout
    assert not out.exists()


def test_a_torch_dry_run_runs_no_nsys(tmp_path):
    out = tmp_path / "o"
    done = cli_in_process("profile", *PAIR, "--dry-run", "--profiler", "torch", "-o", str(out))
    assert done.returncode == 0, done.stderr
    assert "(CPU, torch)" in done.stdout and f"NSYS_CC_TORCH_TRACE={out}/run-1/trace.pt.trace.json.gz" in done.stdout
    assert "nsys profile" not in done.stdout and "nsys export" not in done.stdout
    assert not out.exists()


def test_a_dry_run_with_one_process_per_model_prints_each_models_run(tmp_path):
    out = tmp_path / "o"
    done = cli_in_process("profile", *PAIR, "--dry-run", "--separate-processes", "-o", str(out))
    assert done.returncode == 0, done.stderr
    heads = [ln for ln in done.stdout.splitlines() if ln.startswith("# ")]
    assert heads == ["# target tiny-llama-target (CPU)", "# draft tiny-llama-draft-s (CPU)"]
    assert f"-o {out}/tiny-llama-draft-s.sqlite {out}/tiny-llama-draft-s.nsys-rep" in done.stdout
    assert not out.exists()


def test_a_dry_run_refuses_the_seed_the_run_refuses(tmp_path):
    _one_error_line(cli_in_process("profile", *PAIR, "--dry-run", "-o", str(tmp_path), "--seed", "-1"), "--seed")
