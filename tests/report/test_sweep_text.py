"""`nsys_cc.report.sweep_text.render_sweep`: a sweep's tidy table in each format — c with its interval in one column,
blank cells for what a row has not, the notes after the table (a key in JSON)."""

from __future__ import annotations

import csv
import io
import json

import pandas as pd

from nsys_cc.report.sweep_text import SWEEP_HEAD, render_sweep
from nsys_cc.sweep import table as table_mod

TABLE = table_mod.normalise(pd.DataFrame([
    {"draft": "xs", "phase": "decode", "metric": "wall", "batch_size": 4, "input_len": 128, "c": 0.25,
     "ci_low": 0.2, "ci_high": 0.3125, "cell": "bs4-in128", "attempts": 1},
    {"draft": "xs", "phase": "decode", "metric": "wall", "batch_size": 4, "input_len": 128, "gamma": 3.0,
     "c": float("nan"), "ci_low": float("nan"), "ci_high": float("nan"), "cell": "bs4-in128", "attempts": 2},
]))


def test_the_text_table_has_the_head_one_line_per_row_and_the_notes():
    lines = render_sweep(TABLE, "table", ["cell bs8-in128: FAILED: no trace"]).splitlines()
    assert lines[0] == SWEEP_HEAD and lines[1] == ""
    assert lines[2].split() == ["Cell", "Draft", "Phase", "Metric", "Batch", "Input", "γ", "c", "[95", "%",
                                "interval]", "Attempts"]
    assert lines[4].split() == ["bs4-in128", "xs", "decode", "wall", "4", "128", "0.250", "[0.200–0.312]", "1"]
    assert lines[5].split() == ["bs4-in128", "xs", "decode", "wall", "4", "128", "3", "–", "2"]
    assert lines[-1] == "note: cell bs8-in128: FAILED: no trace"


def test_json_is_the_rows_and_the_notes():
    out = json.loads(render_sweep(TABLE, "JSON", ["a note"]))
    assert out["notes"] == ["a note"] and len(out["rows"]) == 2
    assert out["rows"][0]["c"] == 0.25 and out["rows"][0]["gamma"] is None and out["rows"][1]["c"] is None


def test_csv_is_the_tidy_table_itself():
    rows = list(csv.DictReader(io.StringIO(render_sweep(TABLE, "csv", ["not in the csv"]))))
    assert list(rows[0]) == list(table_mod.COLUMNS)
    assert [r["c"] for r in rows] == ["0.25", ""] and rows[1]["gamma"] == "3.0"


def test_markdown_lists_the_notes_under_the_table():
    out = render_sweep(TABLE, "md", ["a note"])
    assert out.startswith("| Cell | Draft | Phase |") and out.endswith("\n- a note\n")
