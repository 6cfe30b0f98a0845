"""`nsys-cc analyze TARGET DRAFT [DRAFT …]`: the cost coefficient of each draft from existing traces."""

from __future__ import annotations

import click

from ..analysis.coefficient import DEFAULT_RANGE
from . import cli
from .options import acceptance_option, format_option, metrics_option


@cli.command()
@click.argument("target", type=click.Path(dir_okay=True))
@click.argument("drafts", nargs=-1, required=True, type=click.Path(dir_okay=True))
@click.option("--range", "range_name", multiple=True, default=(DEFAULT_RANGE,), show_default=True,
              help="NVTX range around each forward (e.g. 'gpu_model_runner: forward' for vLLM's own scopes); once for "
                   "every trace, or once per trace in order (a trace may then be given twice, with two ranges).")
@click.option("--skip-ranges", type=int, default=None,
              help="Drop the first N matching ranges of each model as warm-up (default: the trace's warm-up marks).")
@click.option("--output-len", type=int, default=None,
              help="Benchmark output length: each iteration = 1 prefill + N−1 decodes (when ranges carry no payload).")
@click.option("--name", "names", multiple=True, help="Label per trace, in order (default: file names).")
@acceptance_option
@metrics_option
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the bootstrap intervals.")
@format_option()
@click.option("-o", "--output", "out_dir", type=click.Path(file_okay=False), default=None,
              help="Also write a report directory (report.md, report.json, CSV tables, plots).")
def analyze(target, drafts, range_name, skip_ranges, output_len, names, acceptance, metrics_dump, seed, fmt, out_dir):
    """Cost coefficient c of each DRAFT against TARGET (.sqlite or .nsys-rep exports, one per model)."""
    from ..analysis.coefficient import cost_coefficient
    from ..report import render, write_report

    result = cost_coefficient(
        target, list(drafts), names=list(names) or None, range_name=list(range_name), skip_ranges=skip_ranges,
        output_len=output_len, acceptance=acceptance, metrics_dump=metrics_dump, seed=seed,
    )
    click.echo(render(result, fmt), nl=False)
    if out_dir:
        path = write_report(result, out_dir)
        click.echo(f"report: {path}", err=True)
