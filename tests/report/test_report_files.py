"""`nsys_cc.report.report_files.write_report`: the report directory of `analyze -o` — report.md, report.json and a CSV
per table (speedup only with acceptance rates; the caller's notes and tables added), the versions that recorded each
trace, the environment; a directory given as anything but a path refused."""

from __future__ import annotations

import json
import platform

import pandas as pd
import pytest

import nsys_cc
from conftest import FIXTURES
from nsys_cc.errors import InputError
from nsys_cc.report.report_files import environment, write_report

VLLM = FIXTURES / "vllm"
# the tables every result has, and forward_share: the fixtures have iteration ranges (the forwards' share of them)
BASE_TABLES = {"summary", "coefficients", "forwards", "kernel_summary", "categories", "diagnosis", "forward_share"}


@pytest.fixture(scope="module")
def result():
    return nsys_cc.cost_coefficient(VLLM / "tiny-llama-target.sqlite", [VLLM / "tiny-llama-draft-s.sqlite"],
                                    acceptance=[0.6])


@pytest.mark.slow
def test_the_report_the_json_and_a_csv_per_table(result, tmp_path):
    md = write_report(result, tmp_path / "r", plots=False, extra_notes=["profiled on a quiet machine"],
                      extra_tables={"mine": pd.DataFrame({"k": ["a|b"], "v": [1]})})
    out = tmp_path / "r"
    assert md == out / "report.md"
    assert {p.stem for p in out.glob("*.csv")} == BASE_TABLES | {"speedup", "mine"}
    assert pd.read_csv(out / "mine.csv").to_dict("records") == [{"k": "a|b", "v": 1}]
    doc = json.loads((out / "report.json").read_text())
    assert doc["notes"][-1] == "profiled on a quiet machine" and doc["mine"] == [{"k": "a|b", "v": 1}]
    assert doc["environment"]["python"] == platform.python_version()
    text = md.read_text()
    assert text.startswith("# Cost coefficient report\n")
    assert "**Run**\n\n- profiled on a quiet machine" in text and "| a\\|b | 1 |" in text
    assert "- traces: tiny-llama-draft-s: nsys 2022.4" in text  # the fixtures' nsys (fixtures/vllm/README.md)
    assert "## Plots" not in text and not (out / "plots").exists()


def test_without_acceptance_rates_there_is_no_speedup_table(result, tmp_path):
    write_report(result.__class__(**{**vars(result), "acceptance": ()}), tmp_path / "r", plots=False)
    assert {p.stem for p in (tmp_path / "r").glob("*.csv")} == BASE_TABLES


@pytest.mark.parametrize("bad", [None, 3, b"r"])
def test_a_directory_that_is_no_path_is_refused(result, bad):
    with pytest.raises(InputError, match="out_dir: give the report directory's path, not "):
        write_report(result, bad)


def test_the_environment_names_the_machine_and_when():
    env = environment()
    assert set(env) == {"nsys_cc", "vllm", "python", "machine", "generated"}
    assert env["machine"].startswith(f"{platform.system()} {platform.machine()}, ")
    assert env["generated"].endswith("+00:00")
