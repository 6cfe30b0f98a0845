"""`nsys_cc.report.token_text`: a token's cost in the text and the JSON — the split table (forward, logits, sampling,
the token's own median; a draft's c of the token beside c of the forward), the JSON records, each run's values."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pandas as pd
import pytest

import nsys_cc
from conftest import FIXTURES
from nsys_cc.report import token_text

VLLM = FIXTURES / "vllm"


@pytest.fixture(scope="module")
def result():
    return nsys_cc.cost_coefficient(VLLM / "tiny-llama-target.sqlite", [VLLM / "tiny-llama-draft-s.sqlite"])


def _tokens(**overrides) -> pd.DataFrame:
    row = {"model": "t", "role": "target", "phase": "decode", "metric": "wall", "basis": "token", "count": 9,
           "token_median_ms": 6.25, "forward_median_ms": 5.0, "logits_median_ms": 0.875, "sample_median_ms": 0.375}
    return pd.DataFrame([{**row, **overrides}])


def test_the_split_table_shows_each_part_and_the_target_as_one(result):
    table = token_text.split_table(result)
    assert list(table.columns) == ["Model", "Phase", "Metric", "Forward", "Logits", "Sampling", "Token", "c token",
                                   "c forward"]
    target = table[table["Model"] == "tiny-llama-target"].iloc[0]
    row = result.tokens.query("model == 'tiny-llama-target' and phase == 'decode' and metric == 'wall'").iloc[0]
    assert target["Phase"] == "decode" and target["c token"] == target["c forward"] == "1 (target)"
    assert target["Forward"] == f"{row['forward_median_ms']:.3f}" and target["Token"] == f"{row['token_median_ms']:.3f}"


def test_a_draft_shows_c_of_its_token_with_its_interval(result):
    draft = token_text.split_table(result).query("Model == 'tiny-llama-draft-s'").iloc[0]
    c = result.coefficients.query("draft == 'tiny-llama-draft-s' and phase == 'decode' and metric == 'wall'").iloc[0]
    assert draft["c token"] == f"{c['c']:.3f} [{c['ci_low']:.3f}–{c['ci_high']:.3f}]"
    assert draft["c forward"].startswith(f"{c['c_forward']:.3f} [")


def test_without_token_ranges_there_is_no_split_table():
    forward_only = SimpleNamespace(tokens=_tokens(basis="forward"))
    assert token_text.split_table(forward_only).empty
    assert not token_text.any_token(SimpleNamespace(coefficients=pd.DataFrame({"basis": ["forward"]})))
    assert token_text.any_token(SimpleNamespace(coefficients=pd.DataFrame({"basis": ["forward", "token"]})))


def test_the_json_records_of_a_phase_and_no_nan():
    records = token_text.phase_records(SimpleNamespace(tokens=_tokens(logits_median_ms=math.nan)))
    assert records == {("t", "decode"): {"wall": {"token_median_ms": 6.25, "forward_median_ms": 5.0,
                                                  "logits_median_ms": None, "sample_median_ms": 0.375, "count": 9}}}


def test_each_runs_values_in_run_order_and_none_for_one_run():
    runs = pd.DataFrame({"run": [2, 1], "draft": ["d", "d"], "phase": ["decode"] * 2, "metric": ["wall"] * 2,
                         "c": [0.25, 0.125]})
    assert token_text.run_values(SimpleNamespace(runs=runs)) == {("d", "decode", "wall"): [0.125, 0.25]}
    assert token_text.run_values(SimpleNamespace(runs=pd.DataFrame())) == {}
