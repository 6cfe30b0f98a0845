"""`nsys_cc.report.sweep_files.write_sweep`: the tidy table as sweep.csv and sweep.parquet, cells.json with each
cell's status and the notes, the plots; a second write replaces the first as a whole."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from nsys_cc.report.sweep_files import write_sweep
from nsys_cc.sweep import table as table_mod


def _table(c: float) -> pd.DataFrame:
    return table_mod.normalise(pd.DataFrame([
        {"draft": "xs", "phase": "decode", "metric": "wall", "batch_size": b, "input_len": 128, "c": c * b,
         "ci_low": c, "ci_high": 2 * c * b, "cell": f"bs{b}-in128", "attempts": 1} for b in (1, 4)]))


def test_the_table_the_cells_and_the_notes_are_written(tmp_path, no_figures):
    cells = [{"cell": "bs1-in128", "status": "done"}, {"cell": "bs8-in128", "status": "failed", "reason": "oom"}]
    files = write_sweep(_table(0.25), tmp_path / "sweep", cells=cells, notes=["bs8-in128 failed"], plots=False)
    assert set(files) == {"csv", "parquet", "cells"}
    assert (tmp_path / "sweep" / "sweep.csv").read_text().splitlines()[1].split(",")[:7] == [
        "xs", "decode", "wall", "1", "128", "", "0.25"]
    assert pd.read_parquet(tmp_path / "sweep" / "sweep.parquet")["c"].tolist() == [0.25, 1.0]
    assert json.loads((tmp_path / "sweep" / "cells.json").read_text()) == {"cells": cells,
                                                                          "notes": ["bs8-in128 failed"]}


def test_a_second_write_replaces_the_first_whole(tmp_path, no_figures):
    out = tmp_path / "sweep"
    write_sweep(_table(0.25), out, cells=[{"cell": "bs1-in128"}], plots=False)
    files = write_sweep(_table(0.5), out, plots=False)
    assert set(files) == {"csv", "parquet"} and not (out / "cells.json").exists()
    assert pd.read_csv(out / "sweep.csv")["c"].tolist() == [0.5, 2.0]


@pytest.mark.slow
def test_the_plots_are_written_under_plots(tmp_path):
    files = write_sweep(_table(0.25), tmp_path / "sweep")
    assert files["c_vs_batch_size"] == tmp_path / "sweep" / "plots" / "c_vs_batch_size.png"
    assert files["c_vs_batch_size"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
