"""`nsys-cc info FILE` and `nsys-cc ranges FILE`: what an export holds, and its NVTX ranges projected on the GPU."""

from __future__ import annotations

import json

import click
import pandas as pd

from . import cli

FILE = click.argument("file", type=click.Path(dir_okay=True))


def _text_table(rows: list[list[str]], header: list[str], right: set[int]) -> str:
    widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(header)]

    def line(cells):
        padded = (c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths)))
        return "  ".join(padded).rstrip()

    return "\n".join([line(header), line(["-" * w for w in widths]), *(line(r) for r in rows)]) + "\n"


@cli.command()
@FILE
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True)
def info(file, fmt):
    """What FILE (.sqlite export or .nsys-rep report) holds: versions, CUDA/NVTX presence, tables with row counts."""
    from ..trace import open_trace

    with open_trace(file) as trace:
        summary = trace.summary()
    if fmt == "json":
        click.echo(json.dumps(summary, indent=2))
        return
    yes = {True: "yes", False: "no"}
    lines = [
        f"file            {summary['path']}",
        *([f"exported to     {summary['sqlite_path']}"] if summary["sqlite_path"] != summary["path"] else []),
        f"nsys version    {summary['nsys_version'] or 'unknown'}",
        f"schema version  {summary['schema_version'] or 'unknown'}",
        f"CUDA data       {yes[summary['has_cuda']]}",
        f"NVTX data       {yes[summary['has_nvtx']]}",
        "",
        "",
    ]
    rows = [[name, f"{count:,}"] for name, count in sorted(summary["tables"].items())]
    click.echo("\n".join(lines) + _text_table(rows, ["table", "rows"], right={1}), nl=False)


@cli.command()
@FILE
@click.option("--name", default=None, help="Only ranges of this name (plain or 'domain:name').")
@click.option("--format", "fmt", type=click.Choice(["table", "csv", "json"]), default="table", show_default=True)
def ranges(file, name, fmt):
    """Every NVTX range of FILE with its projection on the GPU (empty GPU cells: nothing launched, or no CUDA)."""
    from ..analysis.ranges import range_table
    from ..trace import open_trace

    with open_trace(file) as trace:
        table = range_table(trace, name)
    if fmt == "csv":
        click.echo(table.to_csv(index=False), nl=False)
    elif fmt == "json":
        rows = table.astype(object).to_dict("records")
        records = [{k: (None if pd.isna(v) else v) for k, v in row.items()} for row in rows]
        click.echo(json.dumps(records, indent=1, default=int))
    elif table.empty:
        click.echo(f"no NVTX ranges in {file}", err=True)
    else:
        cells = [["" if pd.isna(v) else str(v) for v in row] for row in table.astype(object).itertuples(index=False)]
        numeric = {i for i, c in enumerate(table.columns) if c not in ("name", "style")}
        click.echo(_text_table(cells, list(table.columns), right=numeric), nl=False)
