"""`nsys-cc analyze` (`nsys_cc.cli.analyze`) on the command line: the c it prints against an oracle by raw SQL, the
labels and engines it takes, the report `-o` writes, and its own bad input one error line. (The front door it calls
gives the numbers the CLI prints: tests/test_front.py.)"""

from __future__ import annotations

import csv
import io
import json

import numpy as np
import pytest

from conftest import FIXTURES, cli_in_process, decode_tokens_ms, one_error_line

VLLM = FIXTURES / "vllm"
TARGET, DRAFT = VLLM / "tiny-llama-target.sqlite", VLLM / "tiny-llama-draft-s.sqlite"
RUN = FIXTURES / "interleaved" / "spec" / "run-1" / "trace.sqlite"  # engines tiny-llama-target, tiny-llama-draft-xs


def _decode_wall_c(report: dict, draft: str) -> float:
    (row,) = [r for r in report["coefficients"] if r["draft"] == draft and r["phase"] == "decode"
              and r["metric"] == "wall"]
    return row["c"]


def test_two_engines_of_one_run_give_the_c_of_their_decode_tokens_by_sql():
    done = cli_in_process("analyze", str(RUN), str(RUN), "--engine", "tiny-llama-target", "--engine",
                          "tiny-llama-draft-xs", "--name", "target", "--name", "xs", "--format", "json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert [(m["name"], m["role"]) for m in report["models"]] == [("target", "target"), ("xs", "draft")]
    oracle = (np.median(decode_tokens_ms(RUN, "tiny-llama-draft-xs", 1))
              / np.median(decode_tokens_ms(RUN, "tiny-llama-target", 1)))
    assert _decode_wall_c(report, "xs") == pytest.approx(oracle, rel=1e-9)


@pytest.mark.slow
def test_a_report_directory_is_written_and_named(tmp_path, no_figures):
    out = tmp_path / "report"
    done = cli_in_process("analyze", str(TARGET), str(DRAFT), "-o", str(out))
    assert done.returncode == 0, done.stderr
    assert f"report: {out}" in done.stderr
    assert (out / "report.md").read_text().startswith("# ")
    assert json.loads((out / "report.json").read_text())["models"][1]["name"] == "tiny-llama-draft-s"


@pytest.mark.parametrize("args, says", [
    (("--spec-metrics", "no-equals-sign"), "--spec-metrics must be TRACE=DUMP, not 'no-equals-sign'"),
    (("--spec-metrics", "=dump.json"), "--spec-metrics must be TRACE=DUMP, not '=dump.json'"),
    (("--format", "xml"), "'xml' is not one of"),
    (("-o", ""), "empty"),
])
def test_bad_input_is_one_line_and_writes_nothing(tmp_path, args, says):
    before = sorted(tmp_path.iterdir())
    one_error_line(cli_in_process("analyze", str(TARGET), str(DRAFT), *args), says)
    assert sorted(tmp_path.iterdir()) == before


def test_a_many_set_manifest_with_a_failed_set_prints_the_others_and_exits_1(tmp_path):
    manifest = tmp_path / "m.json"
    manifest.write_text(json.dumps([{"name": "good", "target": str(TARGET), "drafts": [str(DRAFT)]},
                                    {"name": "bad", "target": str(TARGET), "drafts": [str(tmp_path / "none.sqlite")]}]))
    done = cli_in_process("analyze", str(manifest), "--jobs", "1", "--format", "csv")
    assert done.returncode == 1, done.stderr
    rows = list(csv.DictReader(io.StringIO(done.stdout)))
    assert {r["cell"] for r in rows} == {"good"}
    (decode,) = [r for r in rows if r["phase"] == "decode" and r["metric"] == "wall"]
    assert float(decode["c"]) == pytest.approx(0.653, abs=5e-4)  # the pair's decode c (docs/reliability.md)
    assert f"bad: FAILED: {tmp_path / 'none.sqlite'}: no such file" in done.stderr  # CSV: the rows alone on stdout
