"""`nsys_cc.report.run_plots`: c of each run beside the pooled c — the rows of each draft's decision phase (decode,
else all), the runs' table for people, and the figure: each run's c with its own interval, the pooled c as a line,
its band across runs when there is one (two runs: none, said in the title). Frames built by hand."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from nsys_cc.report.run_plots import decision_rows, plot_runs, run_table

NAN = math.nan


def _runs(rows: list[tuple]) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=["draft", "phase", "metric", "run", "c", "ci_low", "ci_high",
                                       "draft_median_ms", "target_median_ms", "n_draft", "n_target"])


RUNS = _runs([("d", "decode", "wall", 1, 0.146, 0.14, 0.15, 1.46, 10.0, 9, 9),
              ("d", "decode", "wall", 2, 0.231, NAN, NAN, 2.31, 10.0, 9, 9),
              ("d", "all", "wall", 1, 0.5, 0.4, 0.6, 5.0, 10.0, 12, 12),
              ("e", "all", "wall", 1, 0.3, 0.2, 0.4, 3.0, 10.0, 12, 12),
              ("d", "decode", "gpu_span", 1, 0.9, 0.8, 1.0, 9.0, 10.0, 9, 9)])
POOLED = RUNS.drop(columns="run").drop_duplicates(["draft", "phase", "metric"]).assign(
    c=lambda f: np.where((f["draft"] == "d") & (f["phase"] == "decode"), math.sqrt(0.146 * 0.231), f["c"]),
    ci_low=NAN, ci_high=NAN)


def test_each_draft_in_its_decision_phase_on_the_metric():
    rows = decision_rows(RUNS)
    assert list(zip(rows["draft"], rows["phase"], rows["run"])) == [("d", "decode", 1), ("d", "decode", 2),
                                                                     ("e", "all", 1)]
    assert decision_rows(RUNS, "gpu_busy").empty


def test_the_runs_table_says_each_runs_c_and_its_interval():
    table = run_table(SimpleNamespace(runs=RUNS, headline="wall"))
    assert table["c (this run)"].tolist() == ["0.146 [0.140–0.150]", "0.231 [no interval]", "0.300 [0.200–0.400]"]
    assert table.iloc[0][["Draft (ms)", "Target (ms)", "N"]].tolist() == ["1.460", "10.000", "9/9"]


def test_the_figure_shows_each_run_and_the_pooled_c_and_two_runs_say_they_have_no_band():
    result = SimpleNamespace(runs=RUNS, coefficients=POOLED, headline="wall", target=SimpleNamespace(name="t"))
    fig = plot_runs(result, {})
    d, e = fig.axes
    assert d.get_title() == "d (decode, wall-clock; 2 runs: no interval across runs)"
    assert e.get_title() == "e (all, wall-clock)"
    points = [line for line in d.get_lines() if line.get_marker() == "o"]
    assert list(points[0].get_ydata()) == pytest.approx([0.146, 0.231])
    pooled = [line for line in d.get_lines() if line.get_label().startswith("pooled c = ")]
    assert pooled[0].get_ydata()[0] == pytest.approx(math.sqrt(0.146 * 0.231))
    assert fig.get_suptitle() == "c of each run against t, and pooled"
    assert d.get_ylabel() == "c = median draft ÷ median target forward"


def test_one_run_has_no_figure():
    assert plot_runs(SimpleNamespace(runs=RUNS.iloc[0:0]), {}) is None
