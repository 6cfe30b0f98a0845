"""`nsys_cc.cli.options`: the options several verbs share — a flag's empty value (`--timeout ''`, `--nsys-arg ''`,
`--metrics ''`) is one error line naming the flag, never taken as nothing or as the default."""

from __future__ import annotations

import pytest

from conftest import FIXTURES, cli_in_process, one_error_line as _one_error_line
from nsys_cc.errors import InputError

VLLM = FIXTURES / "vllm"
TARGET = VLLM / "tiny-llama-target.sqlite"
DRAFT = VLLM / "tiny-llama-draft-s.sqlite"
PAIR = ("--target", "tiny-llama-target", "--draft", "tiny-llama-draft-s", "--device", "cpu")


# -- a flag's empty value is no value -------------------------------------------------------------------------------
@pytest.mark.parametrize("verb", [("profile", *PAIR, "--dry-run"), ("sweep", *PAIR, "--dry-run"),
                                  ("analyze", str(TARGET), str(DRAFT)), ("info", str(TARGET)),
                                  ("ranges", str(TARGET)), ("kernels", str(TARGET))], ids=lambda v: v[0])
def test_an_empty_timeout_is_an_error_not_no_limit(verb, tmp_path):
    """`--timeout ''` was taken as 0 (no limit), silently."""
    args = [*verb, "--timeout", ""]
    if verb[0] in ("profile", "sweep"):
        args += ["-o", str(tmp_path / "o")]
    _one_error_line(cli_in_process(*args), "--timeout", "empty")


WORDS = ["--vllm-arg", "--nsys-arg", "--nsys-trace", "--target", "--draft"]


@pytest.mark.parametrize("verb, flag", [*(("profile", f) for f in [*WORDS, "--acceptance"]),
                                        *(("sweep", f) for f in WORDS)])
def test_an_empty_word_never_reaches_nsys_or_vllm(verb, flag, tmp_path):
    """`--nsys-arg ''` reached nsys as an empty argument, `--vllm-arg ''` vLLM; `--target ''` was read as the
    current directory ("  is a directory without a config.json")."""
    args = [verb, *PAIR, "--dry-run", "-o", str(tmp_path / "o"), flag, ""]
    _one_error_line(cli_in_process(*args), flag.lstrip("-").split("-")[0], "empty")


@pytest.mark.parametrize("flag", ["--speculate", "--target-tp", "--scheduler"])
def test_an_empty_sweep_axis_or_scheduler_is_an_error(flag, tmp_path):
    """`sweep --speculate ''` ran no speculative run and `--target-tp ''` no rank axis, silently; `--scheduler ''`
    ran the cells here."""
    _one_error_line(cli_in_process("sweep", *PAIR, "--dry-run", "-o", str(tmp_path / "o"), flag, ""), flag)


@pytest.mark.parametrize("flag", ["--batch-size", "--speculate", "--check"])
def test_tune_with_an_empty_design_value_profiles_nothing(flag, tmp_path, monkeypatch):
    """`tune --batch-size ''` profiled the default design (1, 8)."""
    from nsys_cc.workflows import tune as workflow

    monkeypatch.setattr(workflow, "_profile_round", lambda *a, **kw: pytest.fail("profiled"))
    out = tmp_path / "t"
    _one_error_line(cli_in_process("tune", *PAIR, "-o", str(out), flag, ""), flag)
    key = {"--batch-size": "batch_sizes", "--speculate": "speculate", "--check": "check"}[flag]
    for empty in ("", " ", ","):
        with pytest.raises(InputError, match=rf"^{key} is empty"):
            workflow.tune(target="tiny-llama-target", draft="tiny-llama-draft-s", out_dir=out, device="cpu",
                          **{key: empty})
    assert not out.exists()


@pytest.mark.parametrize("flag", ["--metrics"])
@pytest.mark.parametrize("verb", [("analyze", str(TARGET), str(DRAFT)), ("speedup", "--c", "0.3")],
                         ids=lambda v: v[0])
def test_an_empty_metrics_dump_is_named(verb, flag):
    """`--metrics ''` said "metrics dump not found: " and named nothing."""
    _one_error_line(cli_in_process(*verb, flag, ""), flag, "empty")
