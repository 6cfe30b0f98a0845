"""`formats.tune_json`: a tune directory's `tune.json` and `schedule.json`, written and read back in one module — the
texts against documents written out here by hand and the design fixture's file byte for byte (the files a tune writes
read back through here: tests/analysis/tune/test_model.py)."""

from __future__ import annotations

import json
import math
import os

import pytest

from conftest import FIXTURES
from nsys_cc.errors import InputError
from nsys_cc.formats import tune_json

DESIGN_DIR = FIXTURES / "tune" / "a99-design"


def test_no_nan_reaches_the_file():
    doc = {"speedup": math.nan, "forecast": [{"ci": (1.5, math.inf)}, {"ci": [-math.inf, 2]}], "ok": True, "n": 3}
    text = tune_json.text(doc)
    assert text.endswith("}\n") and "NaN" not in text and "Infinity" not in text
    assert json.loads(text) == {"speedup": None, "forecast": [{"ci": [1.5, None]}, {"ci": [None, 2]}], "ok": True,
                                "n": 3}
    assert tune_json.dumps(doc) + "\n" == text  # what --format json prints is the file


def test_the_design_fixture_is_the_design_text_of_its_design():
    design = tune_json.read_design(DESIGN_DIR)
    assert design == {"target": "pair-target", "draft": "pair-draft", "batch_sizes": [1, 8], "speculate": [1, 3],
                      "check": [[4, 2], [16, 3]]}
    # the fixture's copy lost the file's last newline; the rest is tune's text byte for byte
    assert tune_json.design_text(design) == (DESIGN_DIR / tune_json.NAME).read_text().rstrip("\n") + "\n"


@pytest.mark.parametrize("content", ["[1, 2]", '{"trusted": true}', '{"design": [8]}', "{not json", ""])
def test_a_tune_json_that_is_no_tune_record_has_no_design(tmp_path, content):
    (tmp_path / tune_json.NAME).write_text(content)
    assert tune_json.read_design(tmp_path) == {}


def test_no_tune_json_and_no_regular_file_have_no_design(tmp_path):
    assert tune_json.read_design(tmp_path) == {}
    (tmp_path / tune_json.NAME).mkdir()
    assert tune_json.read_design(tmp_path) == {}
    os.mkfifo(tmp_path / "fifo")
    assert tune_json.read_design(tmp_path / "fifo") == {}


def test_a_schedule_is_read_back_as_written(tmp_path):
    doc = {"trusted": True, "num_speculative_tokens_per_batch_size": [[1, 4, 3], [5, 16, 1]],
           "speculative_config": '{"method": "draft_model", "num_speculative_tokens": 3}', "workload": "benchmark",
           "schedules": {"benchmark": [[1, 4, 3], [5, 16, 1]]}}
    assert tune_json.read_schedule(tmp_path) is None
    (tmp_path / tune_json.SCHEDULE_NAME).write_text(tune_json.schedule_text(doc))
    assert tune_json.read_schedule(tmp_path) == doc
    assert json.loads((tmp_path / tune_json.SCHEDULE_NAME).read_text()) == doc


@pytest.mark.parametrize("content", ['{"num_speculative_tokens_per_batch_size": []}', '{"trusted": "yes"}', "[]"])
def test_a_schedule_of_another_shape_is_one_error_naming_it(tmp_path, content):
    (tmp_path / tune_json.SCHEDULE_NAME).write_text(content)
    with pytest.raises(InputError, match=r"schedule\.json"):
        tune_json.read_schedule(tmp_path)



def test_the_checked_design_is_sorted_whole_numbers_and_a_hand_edit_is_one_error(tmp_path):
    (tmp_path / tune_json.NAME).write_text(json.dumps({"design": {"batch_sizes": "8,1,8", "speculate": [3, "1"],
                                                                  "target": "t", "output_len": 8}}))
    assert tune_json.checked_design(tmp_path) == {"batch_sizes": [1, 8], "speculate": [1, 3], "target": "t",
                                                  "output_len": 8}
    assert tune_json.read_design(tmp_path)["batch_sizes"] == "8,1,8"  # read as written
    assert tune_json.checked_design(tmp_path / "none") == {}
    for design, match in (({"speculate": [0]}, r"its design's γ values \[0\] are not whole numbers"),
                          ({"draft": 3}, r"its design's draft 3 is not a model name; fix the file or give --draft")):
        (tmp_path / tune_json.NAME).write_text(json.dumps({"design": design}))
        with pytest.raises(InputError, match=rf"^{tmp_path / tune_json.NAME}: " + match):
            tune_json.checked_design(tmp_path)


def test_the_record_keeps_the_results_notes_first():
    class Result:
        def to_dict(self):
            return {"trusted": True, "notes": ["the fit's"]}

    assert tune_json.record(Result(), ["the workflow's"]) == {"trusted": True, "notes": ["the fit's", "the workflow's"]}
