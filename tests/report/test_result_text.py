"""`nsys_cc.report.result_text`: a result's renderings — the JSON's documented shape (every NaN a null, the ranges
matched and kept as the raw rows count them), the long CSV, the terminal table and Markdown, the notebook's HTML;
an unknown format refused."""

from __future__ import annotations

import csv
import io
import json

import pytest

import nsys_cc
from conftest import FIXTURES, raw_sql
from nsys_cc.errors import InputError
from nsys_cc.report.result_text import render, result_to_dict, traces_line

VLLM = FIXTURES / "vllm"
TARGET, DRAFT = VLLM / "tiny-llama-target.sqlite", VLLM / "tiny-llama-draft-s.sqlite"
FORWARDS = ("SELECT count(*) FROM NVTX_EVENTS e LEFT JOIN StringIds s ON s.id = e.textId "
            "WHERE coalesce(e.text, s.value) = 'model_executable()' AND e.\"end\" IS NOT NULL")
WARMUP = "SELECT count(*) FROM NVTX_EVENTS e LEFT JOIN StringIds s ON s.id = e.textId WHERE coalesce(e.text, " \
         "s.value) = 'model_executable()' AND e.start < (SELECT max(w.\"end\") FROM NVTX_EVENTS w LEFT JOIN StringIds" \
         " t ON t.id = w.textId WHERE coalesce(w.text, t.value) = 'nsys_cc:warmup')"


@pytest.fixture(scope="module")
def result():
    return nsys_cc.cost_coefficient(TARGET, [DRAFT], acceptance=[0.6])


def test_the_json_models_count_the_raw_rows_and_hold_no_nan(result):
    doc = json.loads(render(result, "json"))
    assert doc == result_to_dict(result)  # render's JSON is the dict, whole
    target = doc["models"][0]
    assert (target["name"], target["role"], target["range"]) == ("tiny-llama-target", "target", "model_executable()")
    ((matched,),) = raw_sql(TARGET, FORWARDS)
    ((warm,),) = raw_sql(TARGET, WARMUP)
    assert target["ranges_matched"] == matched and target["ranges_kept"] == matched - warm
    assert target["phases"]["decode"]["count"] + target["phases"]["prefill"]["count"] == matched - warm
    assert "NaN" not in render(result, "json")
    assert {"draft", "phase", "metric", "c", "ci95"} <= set(doc["coefficients"][0]) and doc["speedup"]


def test_the_long_csv_has_a_row_per_model_phase_and_metric(result):
    rows = list(csv.DictReader(io.StringIO(render(result, "csv"))))
    assert {(r["model"], r["phase"]) for r in rows} == {(m, p) for m in ("tiny-llama-target", "tiny-llama-draft-s")
                                                        for p in ("all", "prefill", "decode")}
    assert all(r["c"] == "" for r in rows if r["role"] == "target")  # a target has no c of its own
    (decode,) = [r for r in rows if r["model"] == "tiny-llama-draft-s" and r["phase"] == "decode"]
    assert float(decode["c"]) == pytest.approx(0.653, abs=5e-4)  # the pair's decode c (docs/reliability.md)


def test_the_table_and_markdown_head_with_the_range_and_the_models(result):
    table = render(result, "table")
    assert table.startswith("Forward range: 'model_executable()'; c = median(draft token) / median(target token)")
    assert "tiny-llama-draft-s" in table
    md = render(result, "MD")
    assert "| Model | Role | Phase |" in md and not md.startswith("Forward range")


def test_html_escapes_and_cpu_traces_alike_have_no_traces_line(result):
    assert render(result, "html").startswith("<p><b>Cost coefficient</b> — forward range <code>model_executable()"
                                             "</code>")
    assert traces_line(result) is None


def test_an_unknown_format_is_refused(result):
    with pytest.raises(InputError, match=r"fmt must be one of table, markdown, csv, json, html \(or md\), not 'xml'"):
        render(result, "xml")
