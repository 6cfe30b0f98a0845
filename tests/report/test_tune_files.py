"""`report.tune_files`: tune's report directory — the files and their kinds, checks.csv's columns (the cell key's
first), tune.json keeping the directory's design, the design published alone before the first round, the user's
file refused before anything is profiled. The whole-report guarantees (links, full disks, locks) are
tests/reliability/test_tune_writes.py's."""

from __future__ import annotations

import dataclasses
import json

import pytest

from conftest import room_module
from nsys_cc.analysis.tune import schedule as tune_schedule
from nsys_cc.analysis.tune.keys import CellKey
from nsys_cc.errors import InputError
from nsys_cc.formats import tune_json
from nsys_cc.report import tune_files

model_tests = room_module("analysis/tune/test_model.py")
HEADER = ("gamma,label,forecast,forecast_ci_low,forecast_ci_high,forecast_iid,measured,measured_ci_low,"
          "measured_ci_high,error,measured_counters,error_counters,tolerance,within_precision,within_10pct")


def _result(key: CellKey | None = None):
    stats = model_tests._stats(200, [180, 160, 140])
    fitted = [model_tests._cell(b, g, stats) for b, g in model_tests.DESIGN]
    held = [dataclasses.replace(model_tests._cell(4, 2, stats), measured_speedup=1.2)]
    if key is not None:
        held = [dataclasses.replace(held[0], key=key)]
    return tune_schedule.fit_schedule(fitted, held, draws=20, max_batch_size=8)


def test_the_report_files_by_kind_and_the_design_kept(tmp_path):
    out = tmp_path / "O"
    out.mkdir()
    design = {"target": "t", "draft": "d", "batch_sizes": [1, 8], "speculate": [1, 3], "output_len": 8}
    tune_files.publish_design(out, design)
    assert json.loads((out / "tune.json").read_text()) == {"design": design}  # the directory's record from the start
    r = _result()
    files = tune_files.write(r, ["a note"], out, plot=False)
    assert {k: p.name for k, p in files.items()} == {"json": "tune.json", "schedule": "schedule.json",
                                                     "forecast": "forecast.csv", "checks": "checks.csv",
                                                     "report": "report.md",
                                                     **{f"form {k}": f"schedule.{k}.json" for k in (
                                                         "vllm-0.32", "vllm-pr48944", "tensorrt-llm", "sglang")}}
    # each form says which engine takes it and the table: the vLLM one is the schedule itself
    vllm = json.loads((out / "schedule.vllm-0.32.json").read_text())
    assert vllm["schedule"] == r.schedule and "vLLM" in vllm["engine"]
    assert "OPEN" in json.loads((out / "schedule.vllm-pr48944.json").read_text())["status"]
    doc = json.loads((out / "tune.json").read_text())
    assert doc["design"] == design and doc["notes"][-1] == "a note" and doc["trusted"] == r.trusted
    assert tune_json.read_schedule(out)["num_speculative_tokens_per_batch_size"] == (r.schedule if r.trusted
                                                                                       else None)
    assert (out / "checks.csv").read_text().splitlines()[0] == "batch_size," + HEADER
    assert len((out / "forecast.csv").read_text().splitlines()) == 1 + 8 * (r.max_gamma + 1)  # γ 0 (K = 0) … max
    assert (out / "report.md").read_text().startswith("```\nStep cost model (fitted on 4 cells:")


def test_a_cell_keyed_by_its_prompt_length_has_its_column(tmp_path):
    tune_files.write(_result(CellKey(4, 128)), [], tmp_path / "O", plot=False)
    header, row = (tmp_path / "O" / "checks.csv").read_text().splitlines()[:2]
    assert header == "batch_size,input_len," + HEADER and row.startswith("4,128,2,")


def test_no_check_keeps_the_header(tmp_path):
    r = dataclasses.replace(_result(), checks=[])
    tune_files.write(r, [], tmp_path / "O", plot=False)
    assert (tmp_path / "O" / "checks.csv").read_text().splitlines() == ["batch_size," + HEADER]


def test_a_file_of_the_users_where_the_report_goes_is_refused_first(tmp_path):
    (tmp_path / "report.md").write_text("mine\n")
    with pytest.raises(InputError, match=r"report\.md is in the way: nsys-cc did not write it"):
        tune_files.check_publishable(tmp_path)
    tune_files.check_publishable(tmp_path / "new")  # nothing there yet: nothing in the way
