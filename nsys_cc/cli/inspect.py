"""`nsys-cc info FILE` and `nsys-cc ranges FILE`: what an export holds, and its NVTX ranges projected on the GPU."""

from __future__ import annotations

import json
import os
import sys

import click

from ..progress import one_line
from .options import export_timeout_option, format_option

FILE = click.argument("file", type=click.Path(dir_okay=True))


@click.command()
@FILE
@format_option(("table", "json"))
@export_timeout_option
def info(file, fmt):
    """What FILE (.sqlite export or .nsys-rep report) holds: versions, CUDA/NVTX presence, tables with row counts."""
    from ..trace import open_trace

    with open_trace(file) as trace:
        about = trace.info()
    if fmt == "json":
        click.echo(json.dumps(about.to_dict(), indent=2))
        return
    yes = {True: "yes", False: "no"}
    lines = [
        f"file            {about.path}",
        *([f"exported to     {about.sqlite_path}"] if about.sqlite_path != about.path else []),
        f"nsys version    {about.nsys_version or 'unknown'}",
        f"schema version  {about.schema_version or 'unknown'}",
        f"CUDA data       {yes[about.has_cuda]}",
        f"NVTX data       {yes[about.has_nvtx]}",
        "",
        "",
    ]
    from ..report.table_text import text_rows

    rows = [{"table": name, "rows": f"{count:,}"} for name, count in sorted(about.tables.items())]
    click.echo("\n".join(lines) + text_rows(rows, right={"rows"}, columns=["table", "rows"]) + "\n", nl=False)


@click.command()
@FILE
@click.option("--name", default=None, help="Only ranges of this name (plain or 'domain:name').")
@format_option(("table", "csv", "json"))
@export_timeout_option
def ranges(file, name, fmt):
    """Every NVTX range of FILE with its projection on the GPU (empty GPU cells: nothing launched, or no CUDA)."""
    from ..analysis.ranges import range_table
    from ..report.table_files import write_csv, write_json_records
    from ..report.table_text import text_table
    from ..trace import open_trace
    from ..trace.cuda import dropped_note

    with open_trace(file) as trace:
        table = range_table(trace, name)
        dropped = dropped_note(trace)
        view = "NVTX_EVENTS" in getattr(trace, "views", ())
    if dropped:  # the projection left damaged CUDA rows out: said, on stderr so that csv/json stay data
        click.echo(one_line(f"note: {dropped}"), err=True)
    if fmt in ("csv", "json"):
        sys.stdout.flush()
        out = sys.stdout.buffer
        try:
            (write_csv if fmt == "csv" else write_json_records)(table, out)
            out.flush()
        except BrokenPipeError:  # `| head`: the reader has all it wanted
            os.dup2(os.open(os.devnull, os.O_WRONLY), out.fileno())
    elif table.empty:
        click.echo(one_line(f"no NVTX ranges in {file}" + (": its NVTX_EVENTS is a view, not the table nsys exports "
                                                          "(the file was edited); export the report again"
                                                          if view else "")), err=True)
    else:
        numeric = {c for c in table.columns if c not in ("name", "range_style")}
        click.echo(text_table(table, right=numeric) + "\n", nl=False)
