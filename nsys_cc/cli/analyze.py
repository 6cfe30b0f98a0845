"""`nsys-cc analyze TARGET DRAFT [DRAFT …]`: the cost coefficient of each draft from existing traces.

`nsys-cc analyze SOURCE` with one argument that is a sweep directory or a manifest (.json/.csv, see
`nsys_cc.sweep.manifest`): every trace set in it, analysed in parallel (a local process pool, or a Dask cluster
with --scheduler), printed as one tidy table (`-o DIR`: sweep.csv, sweep.parquet and the plots).

`nsys-cc analyze PROFILE_DIR` with one argument that is a profile's output directory: its completed runs (or
traces, with one process per model) analysed as `profile` reported them. `--engine LABEL` (once per trace) reads one
model's part of a trace that holds several (one interleaved run: `run-<k>/trace.sqlite`).

The verb parses its flags, calls `nsys_cc.analyze` (`nsys_cc.front`) once and renders what it returns.
"""

from __future__ import annotations

import click

from ..contract import FORWARD_RANGE, SCOPES_FORWARD
from ..errors import InputError
from .flags import in_flags, result_in_flags
from .options import ADDRESS, OUTPUT_DIR, acceptance_option, export_timeout_option, format_option, metrics_option


@click.command("analyze")
@click.argument("target", type=click.Path(dir_okay=True))
@click.argument("drafts", nargs=-1, type=click.Path(dir_okay=True))
@click.option("--range", "range_name", multiple=True,
              help=f"NVTX range around each forward (default: the plugin's '{FORWARD_RANGE}', else vLLM's own "
                   f"'{SCOPES_FORWARD}' — in a PyTorch-profiler trace vLLM's step annotations —, with a note); once "
                   "for every trace, or once per trace in order (a trace may then be given twice, with two ranges).")
@click.option("--skip-ranges", type=int, default=None,
              help="Drop the first N matching ranges of each model as warm-up (default: the trace's warm-up marks).")
@click.option("--output-len", type=int, default=None,
              help="Benchmark output length: each iteration = 1 prefill + N−1 decodes (when ranges carry no payload).")
@click.option("--name", "names", multiple=True, help="Label per trace, in order (default: file names).")
@click.option("--engine", "engines", multiple=True, metavar="LABEL",
              help="For a trace that holds several models (an interleaved run of profile): the engine label of each "
                   "trace's model, once per trace in order; that model's ranges only are read (its engine window).")
@acceptance_option
@metrics_option
@click.option("--spec-metrics", "spec_metrics", multiple=True, metavar="TRACE=DUMP",
              help="vLLM metrics dump of a speculative trace (default: X.metrics.json beside X.sqlite); repeatable.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the bootstrap intervals.")
@click.option("--mixed-platforms", "mixed_platforms", is_flag=True, default=False,
              help="Compare a CPU trace with a GPU trace anyway (refused by default: c would divide CPU time by a "
                   "GPU's launch time).")
@format_option()
@click.option("-o", "--output", "out_dir", type=OUTPUT_DIR, default=None,
              help="Also write a report directory (report.md, report.json, CSV tables, plots).")
@click.option("--jobs", type=int, default=None,
              help="Many trace sets: local worker processes (default: one per CPU).")
@click.option("--scheduler", default=None, metavar="ADDRESS", type=ADDRESS,
              help="Many trace sets: analyse them on this Dask scheduler instead (traces at the same paths there).")
@export_timeout_option
def analyze_command(target, drafts, range_name, skip_ranges, output_len, names, engines, acceptance,
                    metrics_dump, spec_metrics, seed, mixed_platforms, fmt, out_dir, jobs, scheduler):
    """Cost coefficient c of each DRAFT against TARGET (.sqlite or .nsys-rep exports, or PyTorch-profiler traces
    .pt.trace.json.gz, one per model); or, given alone, of a profile's output directory (as profile reported it), or
    of every trace set of a sweep directory or manifest file; one PyTorch-profiler trace alone is described by itself
    (its steps, launch time against GPU time; no c). On traces with GPU work c is headlined on GPU time (the GPU span),
    the CPU time named as launch time.

    Speculative-decoding runs may follow the drafts: traces holding draft-model forward ranges are recognised as such
    and measured in place (verify, draft and outside time per step, measured vs predicted speedup, a forecast); each
    belongs to the draft named before `.spec-g<γ>` in its label (file name or --name), or to the only draft.
    """
    from ..files.folder import check_out_dir
    from ..front import analyze as analyze_source
    from ..report.result_text import render

    if out_dir is not None:  # `-o ''` is an error, never ignored
        check_out_dir(out_dir)  # before the analysis, not after
    pairs = {}
    for item in spec_metrics:
        trace, sep, dump = item.partition("=")
        if not (sep and trace and dump):
            raise InputError(f"--spec-metrics must be TRACE=DUMP, not {item!r}")
        pairs[trace] = dump
    result = analyze_source(
        target, list(drafts) or None, names=list(names) or None, range_name=list(range_name) or None,
        skip_ranges=skip_ranges, output_len=output_len, engines=list(engines) or None, acceptance=acceptance,
        metrics_dump=metrics_dump, spec_metrics=pairs or None, seed=seed, jobs=jobs, scheduler=scheduler,
        mixed_platforms=mixed_platforms)
    if not hasattr(result, "models"):  # many trace sets: the tidy table
        return _many_sets(result, fmt, out_dir)
    result = result_in_flags(result)  # its notes name this verb's flags, not the library's parameters
    click.echo(render(result, fmt), nl=False)
    if out_dir is not None:
        from ..progress import one_line
        from ..report.report_files import write_report  # the figures' matplotlib only when a report is written

        click.echo(one_line(f"report: {write_report(result, out_dir)}"), err=True)


def _many_sets(result, fmt, out_dir):
    from ..report.sweep_files import write_sweep
    from ..report.sweep_text import render_sweep

    notes = [in_flags(f"trace set {name}: FAILED: {reason}") for name, reason in result.failures]
    click.echo(render_sweep(result.table, fmt, notes), nl=False)
    if out_dir is not None:
        from ..progress import one_line

        files = write_sweep(result.table, out_dir, notes=notes)
        click.echo(one_line(f"table: {files['csv']}"), err=True)
    if result.table.empty:
        raise InputError("no trace set could be analysed: " + "; ".join(notes))
    if result.failures:
        raise SystemExit(1)
