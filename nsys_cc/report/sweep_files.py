"""What a sweep (or an analysis of many trace sets) writes: the tidy table (sweep.csv, sweep.parquet), cells.json
(each cell's status, reason, attempts and seconds, and the notes), `plots/c_vs_batch_size.png` and
`plots/c_vs_input_len.png`; its text is `sweep_text`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from ..files import publishing
from .sweep_plots import DPI, sweep_figures

SWEEP_MANIFEST = ".nsys_cc_sweep.json"


def write_sweep(table: pd.DataFrame, out_dir: str | os.PathLike, *, cells: Sequence[dict] = (),
                notes: Sequence[str] = (), plots: bool = True) -> dict[str, Path]:
    """Write sweep.csv, sweep.parquet, cells.json (when `cells`) and the plots; return their paths by kind. They
    replace the earlier ones as a whole, or nothing changes (`nsys_cc.files.publishing.publish`, its manifest
    `.nsys_cc_sweep.json`)."""
    kinds: dict[str, str] = {}

    def build(stage: publishing.Stage) -> None:
        with stage.file("sweep.csv") as path:
            table.to_csv(path, index=False)
        with stage.file("sweep.parquet") as path:
            table.to_parquet(path, index=False)
        kinds.update(csv="sweep.csv", parquet="sweep.parquet")
        if cells:
            with stage.file("cells.json") as path:
                path.write_text(json.dumps({"cells": list(cells), "notes": list(notes)}, indent=2,
                                           ensure_ascii=False) + "\n")
            kinds["cells"] = "cells.json"
        if plots:
            for stem, fig in sweep_figures(table):
                with stage.file(f"plots/{stem}.png") as path:
                    fig.savefig(path, dpi=DPI)
                kinds[stem] = f"plots/{stem}.png"

    written = publishing.publish(out_dir, build, manifest=SWEEP_MANIFEST, what="the sweep table")
    return {kind: written[name] for kind, name in kinds.items()}
