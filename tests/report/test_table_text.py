"""`nsys_cc.report.table_text`: the terminal's aligned columns and Markdown's pipes — widths, alignment, empty cells
for NaN/None, control characters escaped so that a name a trace holds never starts a line of its own."""

from __future__ import annotations

import math

import pandas as pd

from nsys_cc.report.table_text import markdown_table, text_rows, text_table


def test_columns_are_as_wide_as_their_widest_cell_numbers_right_aligned():
    df = pd.DataFrame({"model": ["target", "d"], "c": ["1.000", "0.25"]})
    assert text_table(df, right={"c"}) == ("model       c\n"
                                           "------  -----\n"
                                           "target  1.000\n"
                                           "d        0.25")


def test_missing_values_are_empty_cells_and_no_line_ends_in_spaces():
    df = pd.DataFrame({"a": ["x", None], "b": [math.nan, "y"]})
    out = text_table(df)
    assert out.splitlines() == ["a  b", "-  -", "x", "   y"]


def test_a_control_character_in_a_cell_stays_on_its_row():
    out = text_table(pd.DataFrame({"range": ["a\nnsys-cc: error: forged"]}))
    assert len(out.splitlines()) == 3 and "\\n" in out.splitlines()[2]


def test_plain_rows_print_as_a_frame_does_and_an_empty_table_keeps_its_header():
    rows = [{"alpha": "0.60", "speedup": "1.5"}, {"alpha": "0.80", "speedup": "2.25"}]
    assert text_rows(rows, right={"speedup"}) == text_table(pd.DataFrame(rows), right={"speedup"})
    assert text_rows([], columns=["alpha", "speedup"]) == "alpha  speedup\n-----  -------"


def test_markdown_escapes_pipes():
    df = pd.DataFrame({"kernel": ["a|b"], "ms": [1.5]})
    assert markdown_table(df) == "| kernel | ms |\n|---|---|\n| a\\|b | 1.5 |"
