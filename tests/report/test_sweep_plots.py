"""`nsys_cc.report.sweep_plots`: c against batch size and against input length — one panel per phase and metric,
one line per draft and value of the other axis (and γ for the in-place rows), every row's interval a bar."""

from __future__ import annotations

import pandas as pd
import pytest

from nsys_cc.report.sweep_plots import sweep_figures
from nsys_cc.sweep import table as table_mod


def test_the_plots_draw_every_row_of_the_table_per_phase_with_its_interval():
    from nsys_cc.report.sweep_plots import plot_c_against

    rows = [{"draft": d, "phase": ph, "metric": "wall", "batch_size": bs, "input_len": n, "gamma": g,
             "c": c, "ci_low": c - 0.01, "ci_high": c + 0.02, "cell": f"bs{bs}-in{n}", "attempts": 1}
            for d, base in (("a", 0.1), ("b", 0.2)) for bs in (1, 4) for n in (16, 64)
            for ph, g in (("prefill", None), ("decode", None), ("decode", 2.0), ("all", None))
            for c in [base + bs / 100 + n / 1000 + (0.05 if g else 0)]]
    table = table_mod.normalise(pd.DataFrame(rows))
    fig = plot_c_against(table, "batch_size")
    prefill, decode = fig.axes[:2]
    assert [prefill.get_title(), decode.get_title()] == ["prefill forwards, wall-clock", "decode forwards, wall-clock"]
    # Lines: per draft and input length (and γ for the in-place rows), x = batch sizes, y = c as in the table.
    drawn = {line.get_label(): list(line.get_ydata()) for line in decode.get_lines()}
    assert set(drawn) == {"a, input 16", "a, input 64", "b, input 16", "b, input 64", "a, γ=2, input 16",
                          "a, γ=2, input 64", "b, γ=2, input 16", "b, γ=2, input 64"}
    expected = table[(table["phase"] == "decode") & (table["draft"] == "b") & (table["input_len"] == 64)
                     & table["gamma"].isna()].sort_values("batch_size")["c"].tolist()
    assert drawn["b, input 64"] == pytest.approx(expected)
    bars = sorted(v for coll in decode.collections for seg in coll.get_segments() for v in (seg[0][1], seg[1][1]))
    dec = table[table["phase"] == "decode"]
    assert bars == pytest.approx(sorted([*dec["ci_low"], *dec["ci_high"]]))
    assert plot_c_against(table.assign(c=float("nan")), "input_len") is None


def test_the_figures_are_named_after_their_axis_and_a_table_without_c_draws_none():
    rows = [{"draft": "a", "phase": "decode", "metric": "wall", "batch_size": bs, "input_len": 16, "c": 0.1 * bs,
             "ci_low": 0.05, "ci_high": 0.5, "cell": f"bs{bs}-in16", "attempts": 1} for bs in (1, 4)]
    table = table_mod.normalise(pd.DataFrame(rows))
    assert [stem for stem, _ in sweep_figures(table)] == ["c_vs_batch_size", "c_vs_input_len"]
    assert list(sweep_figures(table.assign(c=float("nan")))) == []
