"""The files of `nsys-cc tune`'s report directory: tune.json (the tune record, its design kept) and schedule.json
(`formats.tune_json`), forecast.csv and checks.csv (tables), report.md (`tune_text`'s words), tune.png
(`tune_plots`). Written as every command's report is (`files.publishing.publish`, the report manifest every command
shares): replaced as a whole, a file of the user's in the way refused, a link replaced, never written through. Before
the first round a profiling tune publishes its design alone (`publish_design`), so that the directory says what it
was asked from the start.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from ..analysis.tune.keys import CellKey
from ..files import publishing
from ..files.folder import check_out_dir
from ..formats import tune_json
from .report_files import MANIFEST
from .tune_text import render_text

if TYPE_CHECKING:
    from ..analysis.tune.schedule import TuneResult

FORM_FILES = ("schedule.vllm-0.32.json", "schedule.vllm-pr48944.json", "schedule.tensorrt-llm.json",
              "schedule.sglang.json")  # `analysis.tune.forms`, one file per engine's form
FILES = (tune_json.NAME, tune_json.SCHEDULE_NAME, "forecast.csv", "checks.csv", "report.md", "tune.png",
         "tune-context.png", *FORM_FILES)
WHAT = "the tune report"
# checks.csv's columns after the cell key's (`CellKey.to_dict`: batch_size, and input_len where a cell names it)
CHECK_COLUMNS = ["gamma", "label", "forecast", "forecast_ci_low", "forecast_ci_high", "forecast_iid", "measured",
                 "measured_ci_low", "measured_ci_high", "error", "measured_counters", "error_counters", "tolerance",
                 "within_precision", "within_10pct"]


def check_publishable(out: str | os.PathLike) -> None:
    """InputError when the report could not be published in `out` (a file of the user's in the way, a link on the
    way out): checked before hours of profiling, and before a read."""
    publishing.check_publishable(out, FILES, manifest=MANIFEST, what=WHAT)


def publish_design(out: Path, design: dict) -> None:
    """The tune record with the design alone (`tune.json`), before the first round (and again when a round adds to
    it): the report of the directory from now on (the earlier tune's, whose design this may not be, is replaced as a
    whole)."""

    def build(stage: publishing.Stage) -> None:
        with stage.file(tune_json.NAME) as path:
            path.write_text(tune_json.design_text(design))

    publishing.publish(out, build, manifest=MANIFEST, what=WHAT)


def key_columns(rows: Sequence[dict]) -> list[str]:
    """The cell key's columns of a table of `rows` (`CellKey.to_dict`): the batch size always, another axis where a
    row names it."""
    names = [f.name for f in dataclasses.fields(CellKey)]
    return [n for n in names if n == names[0] or any(n in r for r in rows)]


def write(result: TuneResult, notes: Sequence[str], out: str | os.PathLike, *, plot: bool = True) -> dict[str, Path]:
    """tune.json (the design of `out`'s tune record kept), schedule.json, forecast.csv, checks.csv, report.md and
    tune.png (with `plot`) in `out`, replacing the earlier report there as a whole, or nothing changes; the files
    written by kind (json, schedule, forecast, checks, report, plot)."""
    import pandas as pd

    out = check_out_dir(out, WHAT)
    doc = tune_json.record(result, list(notes))
    design = tune_json.checked_design(out) if out.is_dir() else {}
    if design:
        doc["design"] = design
    names = {"json": tune_json.NAME, "schedule": tune_json.SCHEDULE_NAME, "forecast": "forecast.csv",
             "checks": "checks.csv", "report": "report.md", **({"plot": "tune.png"} if plot else {})}
    forms = schedule_forms(result)
    names.update({f"form {stem}": f"schedule.{stem}.json" for stem in forms})
    heat = plot and len(result.by_context) >= 2
    if heat:
        names["heatmap"] = "tune-context.png"

    def build(stage: publishing.Stage) -> None:
        with stage.file(tune_json.NAME) as path:
            path.write_text(tune_json.text(doc))
        with stage.file(tune_json.SCHEDULE_NAME) as path:
            path.write_text(tune_json.schedule_text(result.schedule_doc()))
        with stage.file("forecast.csv") as path:
            pd.DataFrame(result.forecast).to_csv(path, index=False)
        with stage.file("checks.csv") as path:
            checks = result.checks or []
            pd.DataFrame(checks, columns=[*key_columns(checks), *CHECK_COLUMNS]).to_csv(path, index=False)
        with stage.file("report.md") as path:
            path.write_text("```\n" + render_text(result, notes) + "```\n")
        for stem, form in forms.items():
            with stage.file(f"schedule.{stem}.json") as path:
                path.write_text(tune_json.schedule_text(tune_json.finite(form)))
        if plot:
            from .tune_plots import plot_context, plot_tune

            with stage.file("tune.png") as path:
                plot_tune(result, path)
            if heat:
                with stage.file("tune-context.png") as path:
                    plot_context(result, path)

    written = publishing.publish(out, build, manifest=MANIFEST, what=WHAT)
    return {kind: written[name] for kind, name in names.items()}


def schedule_forms(result: TuneResult) -> dict[str, dict]:
    """The schedule in every engine's form (`analysis.tune.forms`), each with what engine and version takes it; the
    fitted tables even when not recommended, marked so ("recommended": false)."""
    from ..analysis.tune import forms

    table = result.schedule
    by = {L: v[result.workload] for L, v in result.by_context.items()}
    out = forms.every_form(table, by, result.context, result.max_batch_size, output_len=result.output_len)
    for form in out.values():
        form["recommended"] = result.trusted
        form["check_outcome"] = result.outcome
    return out
