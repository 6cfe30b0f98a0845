"""`nsys_cc.report.speedup_text`: what c means at given α, as `nsys-cc speedup` prints it — the JSON record of each
judgement (its keys in order, no NaN), the table with its head line and one verdict per α. Speedups by hand from Thm
3.8: S(α, γ) = (1 − α^(γ+1)) / ((1 − α)(γc + 1))."""

from __future__ import annotations

import json

import pytest

from nsys_cc.analysis.theory.speedup import judge_all
from nsys_cc.errors import InputError
from nsys_cc.report.speedup_text import JSON_KEYS, judgement_record, render_judgements

# c = 0.2, α = 0.6: S(γ=1) = 1.6/1.2 = 1.333, S(2) = 1.96/1.4 = 1.4, S(3) = 2.176/1.6 = 1.36: best γ = 2.


def test_a_record_has_every_key_in_order_and_no_nan():
    (rec,) = [judgement_record(j) for j in judge_all(0.2, [0.6], gamma=3)]
    assert tuple(rec) == JSON_KEYS
    assert rec["acceptance"] == 0.6 and rec["gamma"] == 3 and rec["speedup"] == pytest.approx(1.36)
    assert rec["best_gamma"] == 2 and rec["best_speedup"] == pytest.approx(1.4)
    assert rec["c_low"] is None and rec["speedup_low"] is None and rec["best_gamma_low"] is None  # no interval
    assert rec["break_even_alpha"] == 0.2


def test_json_of_one_alpha_is_one_object_of_several_a_list():
    one = json.loads(render_judgements(judge_all(0.2, [0.6]), "json"))
    assert isinstance(one, dict) and one["best_gamma"] == 2
    two = json.loads(render_judgements(judge_all(0.2, [0.6, 0.1]), "json"))
    assert [r["acceptance"] for r in two] == [0.6, 0.1]


def test_the_table_has_its_head_a_row_and_a_verdict_per_alpha():
    judged = judge_all(0.2, [0.6, 0.1], gamma=3, c_low=0.15, c_high=0.25)
    lines = render_judgements(judged, note="α from the metrics dump").splitlines()
    assert lines[0] == f"c = 0.200 (interval 0.150–0.250); best γ searched over 1…{judged[0].max_gamma}"
    assert lines[1] == "α from the metrics dump"
    assert lines[2].split() == ["α", "S", "at", "γ", "=", "3", "best", "γ", "best", "S"]
    assert lines[4].split()[:2] == ["0.6", "1.36×"]
    assert [ln.split(":")[0] for ln in lines[-2:]] == ["α = 0.6", "α = 0.1"]


def test_a_format_the_verb_has_not_is_refused():
    with pytest.raises(InputError, match="fmt must be one of table, json"):
        render_judgements(judge_all(0.2, [0.6]), "csv")
