"""`nsys_cc.report.speculative_text`: the speculative runs in the JSON (one entry per run, intervals as pairs, the
predictions as one object with the γ each held-out forecast was fitted on) and in words (the forecast check names
the other γ; each pooled run's own values). On the CPU fixtures: one draft, γ = 1, 2, 3 (fixtures/spec/)."""

from __future__ import annotations

from types import SimpleNamespace

import pandas as pd
import pytest

import nsys_cc
from conftest import FIXTURES
from nsys_cc.report import speculative_text

SPEC = FIXTURES / "spec"
GAMMAS = (1, 2, 3)


@pytest.fixture(scope="module")
def spec():
    return nsys_cc.analyze(SPEC / "tiny-llama-target.sqlite", [
        SPEC / "tiny-llama-draft-xs.sqlite", *(SPEC / f"tiny-llama-draft-xs.spec-g{g}.sqlite" for g in GAMMAS)
    ]).speculative


def test_without_speculative_runs_the_json_lists_are_empty():
    assert speculative_text.to_json(None) == {"speculative": [], "speculative_metric": None, "speculative_runs": [],
                                              "forecast": [], "speculative_best": []}


@pytest.mark.slow
def test_one_json_entry_per_run_with_its_intervals_as_pairs_and_its_predictions(spec):
    doc = speculative_text.to_json(spec)
    entries = doc["speculative"]
    assert [(e["name"], e["gamma"]) for e in entries] == [(f"tiny-llama-draft-xs.spec-g{g}", g) for g in GAMMAS]
    assert doc["speculative_metric"] == "wall"
    for e in entries:
        assert list(e)[:3] == ["name", "draft", "gamma"] and list(e["by_metric"]) == ["wall"]
        low, high = e["measured_speedup_ci95"]
        assert low <= e["measured_speedup"] <= high
        # held out: fitted on the two other γ
        assert e["predicted_speedup"]["held_out_fit_gammas"] == [g for g in GAMMAS if g != e["gamma"]]
        assert set(e["predicted_speedup"]) == {"leviathan", "cost_model", "cost_model_held_out",
                                               "leviathan_in_place", "held_out_fit_gammas"}


@pytest.mark.slow
def test_the_forecast_check_names_the_gammas_it_was_fitted_on(spec):
    lines = speculative_text.check_lines(spec)
    assert [line.split(":")[0] for line in lines] == [f"tiny-llama-draft-xs.spec-g{g}" for g in GAMMAS]
    assert lines[0].startswith("tiny-llama-draft-xs.spec-g1: forecast from γ 2,3 ")


def test_the_metrics_shown_and_the_step_in_words():
    assert speculative_text.shown_metrics(SimpleNamespace(metric="wall")) == ["wall"]
    assert speculative_text.shown_metrics(SimpleNamespace(metric="gpu_span")) == ["gpu_span", "wall"]
    assert speculative_text.step_words(SimpleNamespace(metric="gpu_span")) == (
        "each step from its start to the end of its GPU work")


def test_each_pooled_runs_values_in_run_order():
    runs = pd.DataFrame({"name": ["r", "r"], "metric": ["wall", "wall"], "figure": ["c_in_place"] * 2,
                         "run": [2, 1], "value": [0.25, 0.125]})
    assert speculative_text.run_values(SimpleNamespace(runs=runs)) == {("r", "wall", "c_in_place"): [0.125, 0.25]}
    assert speculative_text.run_values(SimpleNamespace(runs=runs.iloc[0:0])) == {}
