"""`nsys_cc.cli.flags`: the library's sentences in the words of a verb — a parameter name written as the verb's flag
(`skip_ranges` → `--skip-ranges`, `timeout=3` → `--timeout=3`, `force=True` → `--force`), a plain word never."""

from __future__ import annotations

import click
import pytest

from conftest import FIXTURES, cli_in_process, one_error_line as _one_error_line
from nsys_cc.cli.flags import in_flags
from nsys_cc.errors import InputError

TARGET = FIXTURES / "vllm" / "tiny-llama-target.sqlite"
DRAFT = FIXTURES / "vllm" / "tiny-llama-draft-s.sqlite"
PAIR = ("--target", "tiny-llama-target", "--draft", "tiny-llama-draft-s", "--device", "cpu")


@click.command()
@click.option("--skip-ranges", "skip_ranges", type=int)
@click.option("--timeout", type=float)
@click.option("--force", is_flag=True)
@click.option("--acceptance")
@click.option("--batch-sizes", "batch_sizes")
def verb(**kwargs):
    """A verb with the kinds of option `in_flags` tells apart."""


@pytest.mark.parametrize("library, cli", [
    ("lower skip_ranges", "lower --skip-ranges"),
    ("timeout=3 was too short", "--timeout=3 was too short"),
    ("run again with force=True", "run again with --force"),
    ("the acceptance you gave", "the acceptance you gave"),  # a plain word: left alone
    ("acceptance=0.7 is above 1", "--acceptance=0.7 is above 1"),  # written name=value: the flag
    ("batch_size 3 is not in the design", "--batch-sizes 3 is not in the design"),  # one value of a list option
    ("my_skip_ranges_file", "my_skip_ranges_file"),  # inside a longer word: left alone
])
def test_a_library_sentence_names_the_verbs_flags(library, cli):
    assert in_flags(library, verb) == cli


def test_the_parameter_at_fault_is_named_as_its_flag_even_as_a_plain_word():
    assert in_flags("timeout must be > 0", verb) == "timeout must be > 0"
    assert in_flags("timeout must be > 0", verb, param="timeout") == "--timeout must be > 0"


def test_outside_a_verb_the_sentence_is_unchanged():
    assert in_flags("lower skip_ranges") == "lower skip_ranges"


def test_an_analysis_note_names_the_flag_on_the_command_line():
    done = cli_in_process("analyze", str(TARGET), str(DRAFT), "--skip-ranges", "1000")
    line = _one_error_line(done, "ranges were dropped as warm-up")
    assert line.endswith("lower --skip-ranges"), line


# -- errors name the verb's flags -------------------------------------------------------------------------------------
def test_tune_errors_name_its_flags_not_the_librarys_parameters(tmp_path, monkeypatch):
    """tune said `batch_size: 'x' is not …` and `trace is an nsys option` where the flags are `--batch-size` and
    `--nsys-trace` (profile's `trace` too)."""
    from nsys_cc.workflows import tune as workflow

    monkeypatch.setattr(workflow, "_profile_round", lambda *a, **kw: pytest.fail("profiled"))
    line = _one_error_line(cli_in_process("tune", *PAIR, "-o", str(tmp_path / "t"), "--batch-size", "x"))
    assert line.startswith("nsys-cc: error: --batch-size: 'x'"), line
    line = _one_error_line(cli_in_process("tune", *PAIR, "-o", str(tmp_path / "t"), "--profiler", "torch",
                                          "--nsys-trace", "nvtx"))
    assert line.startswith("nsys-cc: error: --nsys-trace is an nsys option"), line
    line = _one_error_line(cli_in_process("profile", *PAIR, "--dry-run", "--profiler", "torch", "--nsys-trace",
                                          "nvtx"))
    assert line.startswith("nsys-cc: error: --nsys-trace is an nsys option"), line
    with pytest.raises(InputError, match=r"^batch_sizes: 'x'"):  # the library names its own parameter
        workflow.tune(target="tiny-llama-target", draft="tiny-llama-draft-s", out_dir=tmp_path / "t",
                      batch_sizes="x")
