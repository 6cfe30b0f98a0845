"""What a sweep (or an analysis of many trace sets) prints: its tidy table (`nsys_cc.sweep.table`) as text, markdown,
csv or json, with the notes; the files it writes are `sweep_files`.
"""

from __future__ import annotations

import io
import json
import math
from collections.abc import Sequence

import pandas as pd

from .render_formats import format_of
from .table_text import markdown_table, text_table

# What c and its interval are in every row (as `analyze` computes them for the cell's directory): the token's cost
# where the traces have the plugin's logits and sampling ranges, the forwards' otherwise; one run's interval is a
# bootstrap of its forwards, a cell of several interleaved runs pools them and its interval covers the runs' spread.
SWEEP_HEAD = ("c = median(draft token) ÷ median(target token) per cell, phase and metric (a token: forward + logits + "
              "sampling where the traces time them, else the forward); 95 % interval: across the runs of a cell of "
              "several runs, a bootstrap of one run's forwards otherwise; γ rows: c in place (draft ÷ verify token)")


def _c_text(c: float, lo: float, hi: float) -> str:
    return "–" if math.isnan(c) else f"{c:.3f} [{lo:.3f}–{hi:.3f}]"


def _blank(v) -> str:
    return "" if v is None or v is pd.NA or (isinstance(v, float) and math.isnan(v)) else f"{v:g}" \
        if isinstance(v, float) else str(v)


def display_table(table: pd.DataFrame) -> pd.DataFrame:
    """One line per row of the tidy table, c with its interval in one column."""
    return pd.DataFrame({
        "Cell": table["cell"], "Draft": table["draft"], "Phase": table["phase"], "Metric": table["metric"],
        "Batch": table["batch_size"].map(_blank), "Input": table["input_len"].map(_blank),
        "γ": table["gamma"].map(_blank), "c [95 % interval]": [
            _c_text(*r) for r in table[["c", "ci_low", "ci_high"]].itertuples(index=False)],
        "Attempts": table["attempts"].map(_blank),
    })


def render_sweep(table: pd.DataFrame, fmt: str = "table", notes: Sequence[str] = ()) -> str:
    """The tidy table as text in `fmt` (table | markdown | csv | json, any case; md for markdown); notes after the
    table (json: a key)."""
    fmt = format_of(fmt)
    if fmt == "json":
        rows = json.loads(table.to_json(orient="records"))
        return json.dumps({"rows": rows, "notes": list(notes)}, indent=2, ensure_ascii=False) + "\n"
    if fmt == "csv":
        buf = io.StringIO()
        table.to_csv(buf, index=False)
        return buf.getvalue()
    shown = display_table(table)
    if fmt == "markdown":
        return "\n".join([markdown_table(shown), "", *[f"- {n}" for n in notes]]) + "\n"
    head = SWEEP_HEAD
    return "\n".join([head, "", text_table(shown), "", *[f"note: {n}" for n in notes]]) + "\n"
