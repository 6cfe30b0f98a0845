"""`nsys-cc info FILE` and `nsys-cc ranges FILE`: what a trace holds, and its ranges projected on the GPU."""

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
    """What FILE (.sqlite export, .nsys-rep report, or PyTorch-profiler trace .json/.json.gz) holds: where it ran
    (platform, GPU, runtime, engine and version, rank), versions, CUDA and range presence, tables (or event
    categories) with their counts."""
    from ..trace import open_trace

    with open_trace(file) as trace:
        about = trace.info()
    if fmt == "json":
        click.echo(json.dumps(about.to_dict(), indent=2))
        return
    from ..report.table_text import text_rows
    from ..trace.registry import format_named

    kind = format_named(about.format)  # how its format describes its files
    columns, rows = kind.table_rows(about.tables)
    table = text_rows(rows, right={columns[1]}, columns=columns)
    # every string a trace supplies (a version, a device's name, the backend, a table's name) one line each: a
    # newline in `distributedInfo.backend` printed a line of its own (a forged `nsys-cc: error:` line)
    click.echo("\n".join([*(one_line(line) for line in kind.info_lines(about)), "", ""]) + table + "\n", nl=False)


@click.command()
@FILE
@click.option("--range", "range_name", default=None, metavar="NAME",
              help="Only ranges of this name (plain or 'domain:name').")
@format_option(("table", "csv", "json"))
@export_timeout_option
def ranges(file, range_name, fmt):
    """Every NVTX range of FILE with its projection on the GPU (empty GPU cells: nothing launched, or no CUDA); of a
    PyTorch-profiler trace, every user_annotation range (torch.profiler.record_function)."""
    from ..analysis.forwards.ranges import range_table
    from ..report.table_files import write_csv, write_json_records
    from ..report.table_text import text_table
    from ..trace import open_trace
    from ..trace.cuda import dropped_note

    with open_trace(file) as trace:
        table = range_table(trace, range_name)
        dropped = dropped_note(trace)
        ranges_are, no_table = trace.capabilities.ranges_are, trace.no_range_table()
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
        click.echo(one_line(f"no {ranges_are} ranges in {file}" + (f": {no_table}" if no_table else "")), err=True)
    else:
        numeric = {c for c in table.columns if c not in ("name", "range_style")}
        click.echo(text_table(table, right=numeric) + "\n", nl=False)
