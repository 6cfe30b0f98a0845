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
    described = about.description
    from ..report.table_text import text_rows

    if about.format == "kineto":
        lines = _kineto_lines(about)
        lines.insert(2, f"ran on          {described}")  # `TraceInfo.description`
        rows = [{"category": name, "events": f"{count:,}"} for name, count in about.tables.items()]
        table = text_rows(rows, right={"events"}, columns=["category", "events"])
    else:
        yes = {True: "yes", False: "no"}
        lines = [
            f"file            {about.path}",
            *([f"exported to     {about.sqlite_path}"] if about.sqlite_path != about.path else []),
            f"ran on          {described}",
            f"nsys version    {about.nsys_version or 'unknown'}",
            f"schema version  {about.schema_version or 'unknown'}",
            f"CUDA data       {yes[about.has_cuda]}",
            f"NVTX data       {yes[about.has_nvtx]}",
        ]
        rows = [{"table": name, "rows": f"{count:,}"} for name, count in sorted(about.tables.items())]
        table = text_rows(rows, right={"rows"}, columns=["table", "rows"])
    # every string a trace supplies (a version, a device's name, the backend, a table's name) one line each: a
    # newline in `distributedInfo.backend` printed a line of its own (a forged `nsys-cc: error:` line)
    click.echo("\n".join([*(one_line(line) for line in lines), "", ""]) + table + "\n", nl=False)


# Range names listed by `info` of a PyTorch-profiler trace (the most frequent first; the JSON lists all).
LISTED_RANGES = 8


def _kineto_lines(about) -> list[str]:
    """`nsys-cc info`'s header for a PyTorch-profiler trace: what the file states, what it holds."""
    d = about.details
    versions = ", ".join(f"{k.removesuffix('_version').removesuffix('Version')} {v}" for k, v in d["versions"].items())
    devices = d["devices"]
    names = sorted({str(x.get("name")) for x in devices})
    device = (f"{', '.join(names)} × {len(devices)}" if devices else "none listed (a CPU-only profile)")
    ranges = sorted(d["ranges"].items(), key=lambda kv: (-kv[1], kv[0]))
    shown = [f"{n} × {name}" for name, n in ranges[:LISTED_RANGES]]
    if len(ranges) > LISTED_RANGES:
        shown.append(f"… {len(ranges) - LISTED_RANGES} more names (--format json lists them)")
    rank = (f"{d['rank']} of {d['world_size']}" + (f" ({d['backend']})" if d.get("backend") else "")
            if d.get("rank") is not None else "unknown")
    frames = {None: "not stated", True: "recorded (with_stack)", False: "not recorded"}[d.get("with_stack")]
    return [
        f"file            {about.path}",
        f"format          PyTorch profiler (Kineto) trace, schema {about.schema_version or 'unknown'}",
        f"versions        {versions or 'none stated'}",
        f"devices         {device}",
        f"rank            {rank}",
        f"CUDA data       {'yes' if about.has_cuda else 'no'}",
        f"Python frames   {frames}: {d['python_frames']:,}",
        f"ranges          {sum(d['ranges'].values()):,} user_annotation ranges"
        + (":" if ranges else " (torch.profiler.record_function writes them)"),
        *(f"                {line}" for line in shown),
    ]


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
        kineto = trace.format == "kineto"
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
        click.echo(one_line(f"no {'user_annotation' if kineto else 'NVTX'} ranges in {file}"
                            + (": its NVTX_EVENTS is a view, not the table nsys exports (the file was edited); "
                               "export the report again" if view else "")), err=True)
    else:
        numeric = {c for c in table.columns if c not in ("name", "range_style")}
        click.echo(text_table(table, right=numeric) + "\n", nl=False)
