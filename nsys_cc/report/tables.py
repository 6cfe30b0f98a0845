"""Plain-text tables: the one renderer for the terminal (every verb) and the one for Markdown."""

from __future__ import annotations

from collections.abc import Collection

import pandas as pd


def _cells(df: pd.DataFrame) -> list[list[str]]:
    return [["" if v is None or (isinstance(v, float) and pd.isna(v)) else str(v) for v in row]
            for row in df.astype(object).itertuples(index=False)]


def text_table(df: pd.DataFrame, right: Collection[str] = ()) -> str:
    """`df` as aligned columns under a header and a rule of dashes, two spaces apart, no trailing spaces; columns
    named in `right` are right-aligned (numbers), the others left-aligned. Empty cells for None/NaN."""
    cols = [str(c) for c in df.columns]
    cells = _cells(df)
    widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(cols)]

    def line(row: list[str]) -> str:
        return "  ".join(v.rjust(w) if c in right else v.ljust(w) for v, w, c in zip(row, widths, cols)).rstrip()

    return "\n".join([line(cols), "  ".join("-" * w for w in widths), *(line(r) for r in cells)])


def markdown_table(df: pd.DataFrame) -> str:
    """`df` as a GitHub-flavoured Markdown table (pipes in cells escaped)."""
    cols = [str(c) for c in df.columns]
    esc = [[v.replace("|", "\\|") for v in row] for row in _cells(df)]
    lines = ["| " + " | ".join(cols) + " |", "|" + "|".join("---" for _ in cols) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in esc]
    return "\n".join(lines)
