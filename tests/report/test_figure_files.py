"""`nsys_cc.report.figure_files`: which figures a result makes and under which file names — with many drafts the
plots keep those of lowest c (and say what was left out), a figure with no data is no file, a file stem met twice
gets `-2`. (What each figure draws: tests/report/test_result_plots.py and the other *_plots tests.)"""

from __future__ import annotations

import pytest
from matplotlib.figure import Figure

import nsys_cc
from conftest import FIXTURES
from nsys_cc.report import figure_files

VLLM = FIXTURES / "vllm"


@pytest.fixture(scope="module")
def result():
    return nsys_cc.cost_coefficient(VLLM / "tiny-llama-target.sqlite",
                                    [VLLM / "tiny-llama-draft-s.sqlite", VLLM / "tiny-llama-draft-xs.sqlite"])


def test_every_draft_is_plotted_when_they_are_few(result):
    view, left_out = figure_files.plotted(result)
    assert view is result and left_out is None


def test_with_more_drafts_than_the_limit_the_lowest_c_is_kept_and_said(result):
    coef = result.coefficients.query("phase == 'decode' and metric == 'wall'").set_index("draft")["c"]
    view, left_out = figure_files.plotted(result, top=1)
    assert [m.name for m in view.models] == ["tiny-llama-target", coef.idxmin()]
    assert set(view.coefficients["draft"]) == {coef.idxmin()}
    assert left_out == ("the plots show 1 of the 2 drafts, those of lowest c (wall-clock, decode else all); the "
                        "tables hold every draft")


def test_a_figure_without_data_is_no_file_and_a_stem_met_twice_gets_a_number(monkeypatch, tmp_path):
    fig = Figure()
    fig.subplots()
    makers = [("coefficients", lambda: fig), ("kernel_categories", lambda: None), ("coefficients", lambda: fig)]
    monkeypatch.setattr(figure_files, "_makers", lambda result: iter(makers))
    assert [stem for stem, _ in figure_files.iter_figures(None)] == ["coefficients", "coefficients-2"]
    paths = figure_files.make_plots(None, tmp_path / "new" / "plots")
    assert [p.name for p in paths] == ["coefficients.png", "coefficients-2.png"]
    assert all(p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in paths)
