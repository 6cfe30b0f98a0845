"""`nsys_cc.report.speculative_plots`: the waterfall (one panel per speculative run, from the ideal speedup to the
measured one by the decomposition's factors) and each draft's forecast heatmap, by file stem. On the CPU fixtures:
one draft, γ = 1, 2, 3 (fixtures/spec/); the factors multiply to the measured speedup (the decomposition's identity)."""

from __future__ import annotations

import math

import pytest

import nsys_cc
from conftest import FIXTURES
from nsys_cc.report import speculative_plots
from nsys_cc.report.sentence_text import fmt_speedup

SPEC = FIXTURES / "spec"
GAMMAS = (1, 2, 3)
DRAFT = "tiny-llama-draft-xs"


@pytest.fixture(scope="module")
def spec():
    return nsys_cc.analyze(SPEC / "tiny-llama-target.sqlite", [
        SPEC / f"{DRAFT}.sqlite", *(SPEC / f"{DRAFT}.spec-g{g}.sqlite" for g in GAMMAS)]).speculative


@pytest.mark.slow
def test_the_figures_by_file_stem_and_none_without_runs(spec):
    assert list(speculative_plots.figures(spec, str.upper)) == ["speculative_waterfall",
                                                                f"speculative_forecast_{DRAFT.upper()}"]
    assert speculative_plots.figures(None) == {}


@pytest.mark.slow
def test_each_runs_panel_steps_through_its_factors_to_the_measured_speedup(spec):
    fig = speculative_plots.waterfall(spec)
    panels = [ax for ax in fig.axes if ax.get_visible()]
    assert [ax.get_title() for ax in panels] == [f"{DRAFT}.spec-g{g}\n(draft {DRAFT}, γ = {g})" for g in GAMMAS]
    dec, table = spec.decomposition, spec.table.set_index("name")
    for ax, g in zip(panels, GAMMAS):
        name = f"{DRAFT}.spec-g{g}"
        rows = dec[(dec["name"] == name) & (dec["metric"] == "wall")].sort_values("order")
        factors = rows["factor"].tolist()[:-1]  # the last row is the measured end
        measured = table.loc[name, "measured_speedup"]
        assert math.prod(factors) == pytest.approx(measured, rel=1e-9)
        labels = [t.get_text() for t in ax.texts]
        assert labels[-1] == f"{fmt_speedup(measured)}×"
        assert [f"×{f:.3g}" for f in factors[1:]] == labels[1:len(factors)]


def test_the_heatmap_says_what_its_model_was_fitted_on(spec):
    heat = speculative_plots.forecast_heatmap(spec, DRAFT)
    assert "fitted on step times split on wall" in heat.axes[0].get_title()
