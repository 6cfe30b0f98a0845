"""Round 5 (issue 52): unclear errors — a flag's empty value taken as nothing, a library parameter named where the
verb's flag is meant, a string a trace supplies printed raw (a forged `nsys-cc: error:` line), the environment the
launcher reads and hands on — each case a test that fails without its fix."""

from __future__ import annotations

import gzip
import json
import shutil
import sqlite3

import pytest

from conftest import FIXTURES, cli_in_process, unchanged
from nsys_cc.errors import InputError

VLLM = FIXTURES / "vllm"
TARGET = VLLM / "tiny-llama-target.sqlite"
DRAFT = VLLM / "tiny-llama-draft-s.sqlite"
PAIR = ("--target", "tiny-llama-target", "--draft", "tiny-llama-draft-s", "--device", "cpu")


def _one_error_line(done, *needles: str) -> str:
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2, (done.returncode, done.stderr)
    assert len(lines) == 1 and lines[0].startswith("nsys-cc: error: "), done.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


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


def test_an_empty_model_name_is_said_so_by_the_library():
    from nsys_cc.launch.models import resolve

    for empty in ("", "  "):
        with pytest.raises(InputError, match="a model name is empty"):
            resolve(empty)


def test_a_dry_run_refuses_the_seed_the_run_refuses(tmp_path):
    _one_error_line(cli_in_process("profile", *PAIR, "--dry-run", "-o", str(tmp_path), "--seed", "-1"), "--seed")


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


# -- what a trace says is printed one line each --------------------------------------------------------------------
FORGED = "\nnsys-cc: error: forged"


def test_info_writes_a_traces_strings_on_their_own_lines(tmp_path):
    """`info` printed `distributedInfo.backend` (and a device's name) raw: a newline in it forged an
    `nsys-cc: error:` line."""
    doc = json.loads(gzip.decompress((FIXTURES / "torch" / "tiny-llama-target.pt.trace.json.gz").read_bytes()))
    doc["distributedInfo"] = {**doc.get("distributedInfo", {}), "backend": "gloo" + FORGED}
    doc["deviceProperties"] = [{"name": "GPU" + FORGED}]
    doc["vllm_version"] = "0.32" + FORGED
    evil = tmp_path / "evil.pt.trace.json.gz"
    evil.write_bytes(gzip.compress(json.dumps(doc).encode()))
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
