"""`nsys-cc analyze TARGET DRAFT [DRAFT …]`: the cost coefficient of each draft from existing traces."""

from __future__ import annotations

import os

import click

from ..analysis.coefficient import DEFAULT_RANGE
from ..errors import InputError
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
@click.option("--spec-metrics", "spec_metrics", multiple=True, metavar="TRACE=DUMP",
              help="vLLM metrics dump of a speculative trace (default: X.metrics.json beside X.sqlite); repeatable.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the bootstrap intervals.")
@format_option()
@click.option("-o", "--output", "out_dir", type=click.Path(file_okay=False), default=None,
              help="Also write a report directory (report.md, report.json, CSV tables, plots).")
def analyze(target, drafts, range_name, skip_ranges, output_len, names, acceptance, metrics_dump, spec_metrics, seed,
            fmt, out_dir):
    """Cost coefficient c of each DRAFT against TARGET (.sqlite or .nsys-rep exports, one per model).

    Speculative-decoding runs may follow the drafts: traces holding draft-model forward ranges are recognised as such
    and measured in place (verify, draft and outside time per step, measured vs predicted speedup, a forecast); each
    belongs to the draft named before `.spec-g<γ>` in its label (file name or --name), or to the only draft.
    """
    from ..analysis.coefficient import cost_coefficient
    from ..report import render, write_report

    pairs = {}
    for item in spec_metrics:
        trace, sep, dump = item.partition("=")
        if not (sep and trace and dump):
            raise InputError(f"--spec-metrics must be TRACE=DUMP, not {item!r}")
        pairs[trace] = dump
    unknown = [t for t in pairs if os.path.realpath(t) not in {os.path.realpath(d) for d in drafts}]
    if unknown:
        raise InputError(f"--spec-metrics {unknown[0]}: not one of the traces given")
    result = cost_coefficient(
        target, list(drafts), names=list(names) or None, range_name=list(range_name), skip_ranges=skip_ranges,
        output_len=output_len, acceptance=acceptance, metrics_dump=metrics_dump, seed=seed, spec_metrics=pairs,
    )
    click.echo(render(result, fmt), nl=False)
    if out_dir:
        path = write_report(result, out_dir)
        click.echo(f"report: {path}", err=True)
