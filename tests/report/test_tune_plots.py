"""`report.tune_plots`: the figure's lines (one per γ shown, the schedule) and its measured cells, each marked with its
γ and its key's axes beside the batch size; the title says when the schedule is not recommended."""

from __future__ import annotations

import dataclasses

import pytest

from conftest import room_module
from nsys_cc.analysis.tune import schedule as tune_schedule
from nsys_cc.analysis.tune.keys import CellKey
from nsys_cc.report.tune_plots import plot_tune

model_tests = room_module("analysis/tune/test_model.py")


def _result(measured: float, key: CellKey):
    stats = model_tests._stats(200, [180, 160, 140])
    fitted = [model_tests._cell(b, g, stats) for b, g in model_tests.DESIGN]
    held = dataclasses.replace(model_tests._cell(4, 2, stats), key=key, measured_speedup=measured)
    return tune_schedule.fit_schedule(fitted, [held], draws=20, max_batch_size=16)


@pytest.mark.slow
def test_each_cell_is_marked_with_its_gamma_and_its_other_axes():
    fig = plot_tune(_result(1.2, CellKey(4, 128)))
    ax = fig.axes[0]
    marks = sorted(t.get_text() for t in ax.texts)
    assert marks == ["γ=1", "γ=1", "γ=2 L=128", "γ=3", "γ=3"]
    labels = [line.get_label() for line in ax.get_lines()]
    assert [lab for lab in labels if lab.startswith("γ = ")] == ["γ = 1", "γ = 2", "γ = 3", "γ = 4", "γ = 6", "γ = 8"]


def test_an_untrusted_schedule_is_drawn_and_said_not_recommended():
    r = _result(0.3, CellKey(4))
    assert not r.trusted
    ax = plot_tune(r).axes[0]
    assert "NOT RECOMMENDED: a held-out cell missed by more than 10 %" in ax.get_title()
    assert "fitted schedule: NOT RECOMMENDED" in [line.get_label() for line in ax.get_lines()]
