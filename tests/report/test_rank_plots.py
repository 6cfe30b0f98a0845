"""`nsys_cc.report.rank_plots.plot_rank_lag`: a tensor-parallel model's ranks, forward by forward — each rank's end
behind the forward's first finisher, one line per rank over the kept forwards; checked against the forward ranges'
ends read with raw SQL (the k-th forward of each rank's process is one forward). No figure without ranks."""

from __future__ import annotations

import pytest

import nsys_cc
from conftest import FIXTURES, raw_sql
from nsys_cc.report.rank_plots import plot_rank_lag

TP = FIXTURES / "tp" / "tiny-llama-target.tp2.sqlite"
DRAFT = FIXTURES / "vllm" / "tiny-llama-draft-xs.sqlite"
ENDS = ("SELECT e.globalTid >> 24 & 16777215, e.\"end\" FROM NVTX_EVENTS e LEFT JOIN StringIds s ON s.id = e.textId "
        "WHERE coalesce(e.text, s.value) = 'model_executable()' AND e.\"end\" IS NOT NULL ORDER BY e.start")


@pytest.fixture(scope="module")
def result():
    return nsys_cc.cost_coefficient(TP, [DRAFT])


def test_each_rank_is_a_line_of_its_lag_behind_the_first_to_finish(result):
    fig = plot_rank_lag(result, {})
    (ax,) = fig.axes
    assert ax.get_title() == "tiny-llama-target.tp2"  # the model named after its file
    lines = ax.get_lines()
    assert [line.get_label() for line in lines] == ["rank 0 (pid 10021)", "rank 1 (pid 10022)"]
    ends: dict[int, list[int]] = {}
    for pid, end in raw_sql(TP, ENDS):
        ends.setdefault(pid, []).append(end)
    pairs = {(round((a - min(a, b)) / 1e6, 6), round((b - min(a, b)) / 1e6, 6))
             for a, b in zip(ends[10021], ends[10022])}
    drawn = list(zip(lines[0].get_ydata(), lines[1].get_ydata()))
    kept = int(result.target.forwards["kept"].sum())
    assert len(drawn) == kept < len(pairs)  # the kept forwards only
    assert {(round(a, 6), round(b, 6)) for a, b in drawn} <= pairs
    assert all(min(a, b) == 0 for a, b in drawn)


def test_no_ranks_no_figure():
    plain = nsys_cc.cost_coefficient(FIXTURES / "vllm" / "tiny-llama-target.sqlite", [DRAFT])
    assert plot_rank_lag(plain, {}) is None
