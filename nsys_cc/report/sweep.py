"""What a sweep (or an analysis of many trace sets) writes and prints: the tidy table, cells.json, notes, plots.

Files in the sweep directory: `sweep.csv` and `sweep.parquet` (the table of `nsys_cc.sweep.table`: one row per
draft, phase, metric and cell; gamma and target_tp empty where they do not apply), `cells.json` (each cell's status,
reason, attempts and seconds, and the notes), `plots/c_vs_batch_size.png` and `plots/c_vs_input_len.png`.
"""

from __future__ import annotations

import io
import json
import math
import os
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from ..errors import InputError
from .sweep_plots import make_sweep_plots
from .tables import markdown_table, text_table


def write_sweep(table: pd.DataFrame, out_dir: str | os.PathLike, *, cells: Sequence[dict] = (),
                notes: Sequence[str] = (), plots: bool = True) -> dict[str, Path]:
    """Write sweep.csv, sweep.parquet, cells.json (when `cells`) and the plots; return their paths by kind."""
    out = Path(out_dir)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError(f"cannot write the sweep table to {out}: {exc.strerror}") from None
    files = {"csv": out / "sweep.csv", "parquet": out / "sweep.parquet"}
    table.to_csv(files["csv"], index=False)
    table.to_parquet(files["parquet"], index=False)
    if cells:
        files["cells"] = out / "cells.json"
        files["cells"].write_text(json.dumps({"cells": list(cells), "notes": list(notes)}, indent=2,
                                             ensure_ascii=False) + "\n")
    if plots:
        for path in make_sweep_plots(table, out / "plots"):
            files[path.stem] = path
    return files


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
    """The tidy table as text in `fmt` (table | markdown | csv | json); notes after the table (json: a key)."""
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
    head = "c = median(draft forward) ÷ median(target forward) per cell, phase and metric; 95 % bootstrap interval"
    return "\n".join([head, "", text_table(shown), "", *[f"note: {n}" for n in notes]]) + "\n"
