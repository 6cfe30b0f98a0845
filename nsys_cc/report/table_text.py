"""Plain-text tables: the one renderer for the terminal (every verb) and the one for Markdown.

`text_rows` takes plain rows (no pandas: the `speedup` verb renders without it); `text_table` and `markdown_table`
take a DataFrame.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ..progress import one_line

if TYPE_CHECKING:
    import pandas as pd


def _text(v: Any) -> str:
    """A cell as printed: control characters written as escapes (`progress.one_line`), so that a range or kernel
    name a trace holds ("a\\nnsys-cc: error: …") never starts a line of its own."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return ""
    text = str(v)
    return text if text.isprintable() else one_line(text)


def _cells(df: pd.DataFrame) -> list[list[str]]:
    return [[_text(v) for v in row] for row in df.astype(object).itertuples(index=False)]


def _aligned(cols: list[str], cells: list[list[str]], right: Collection[str]) -> str:
    widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(cols)]

    def line(row: list[str]) -> str:
        return "  ".join(v.rjust(w) if c in right else v.ljust(w) for v, w, c in zip(row, widths, cols)).rstrip()

    return "\n".join([line(cols), "  ".join("-" * w for w in widths), *(line(r) for r in cells)])


def text_rows(rows: Sequence[Mapping[str, Any]], right: Collection[str] = (), columns: Sequence[str] = ()) -> str:
    """`rows` (dicts with the same keys, in order: the columns, or `columns` when given, which an empty table
    needs for its header) as `text_table` prints a DataFrame."""
    cols = [str(c) for c in (columns or (rows[0] if rows else ()))]
    return _aligned(cols, [[_text(r[c]) for c in cols] for r in rows], right)


def text_table(df: pd.DataFrame, right: Collection[str] = ()) -> str:
    """`df` as aligned columns under a header and a rule of dashes, two spaces apart, no trailing spaces; columns
    named in `right` are right-aligned (numbers), the others left-aligned. Empty cells for None/NaN."""
    return _aligned([str(c) for c in df.columns], _cells(df), right)


def markdown_table(df: pd.DataFrame) -> str:
    """`df` as a GitHub-flavoured Markdown table (pipes in cells escaped)."""
    cols = [str(c) for c in df.columns]
    esc = [[v.replace("|", "\\|") for v in row] for row in _cells(df)]
    lines = ["| " + " | ".join(cols) + " |", "|" + "|".join("---" for _ in cols) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in esc]
    return "\n".join(lines)
