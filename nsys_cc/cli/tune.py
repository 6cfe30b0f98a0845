"""`nsys-cc tune`: γ per batch size for vLLM's dynamic speculative decoding, fitted on a design of measured cells and
checked on cells it was not fitted on (`nsys_cc.workflows.tune`, docs/tune.md).

Exit codes: 0 done, the schedule recommended; 3 done, but the schedule is NOT recommended (a held-out cell missed its
measurement by more than 10 %, or the forecast has no usable interval: the report says why and what to measure next;
the JSON has "trusted": false, no schedule and no --speculative-config); 4 done, but the held-out cells are not
precise enough to check the schedule (a miss beyond 10 % within the intervals: "check_outcome": "imprecise", the
runs that would decide in the report); 2 bad input or nothing to fit; 130 Ctrl-C.
"""

from __future__ import annotations

import click

from .options import MODEL, NUMBERS, OUTPUT_DIR, TRACE_LIST, NonEmpty, WholeNumber, profiler_option


@click.command("tune")
@click.argument("source", required=False, type=click.Path())
@click.option("--target", default=None, metavar="MODEL", type=MODEL,
              help="Target model (as for `profile`); profiles the design.")
@click.option("--draft", default=None, metavar="MODEL", type=MODEL, help="Draft model (as for `profile`).")
@click.option("--batch-size", "batch_sizes", default=None, metavar="N[,N…]", type=NUMBERS,
              help="Batch sizes of the design the model is fitted on [default: 1,8; reading SOURCE: its design].")
@click.option("--speculate", default=None, metavar="G[,G…]", type=NUMBERS,
              help="γ values of the design, every batch size × every γ [default: 1,3; reading SOURCE: its design].")
@click.option("--check", default=None, metavar="B[@L]:G[,…]", type=NonEmpty("cells B:G or B@L:G, e.g. 4:2"),
              help="Extra held-out cells to profile and check the forecast on, e.g. 4:2,16:3; B@L:G names the "
                   "prompt length too (4@1024:2).")
@click.option("--max-batch-size", type=WholeNumber(), default=32, show_default=True,
              help="The schedule covers batch sizes 1…N.")
@click.option("--max-gamma", type=WholeNumber(), default=8, show_default=True, help="Largest γ searched.")
@click.option("-o", "--output", "out_dir", type=OUTPUT_DIR, default=None,
              help="Report directory (profiling: the cells go there too; default out/tune). Reading SOURCE: files "
                   "are written only with -o.")
@click.option("--input-len", default="128", show_default=True, metavar="L[,L…]", type=NUMBERS,
              help="Prompt tokens per sequence; several (e.g. 128,1024) make prompt length a second design axis: "
                   "every (B, L) is a cell, c and γ* are forecast over batch × context.")
@click.option("--context", type=WholeNumber(), default=None,
              help="The prompt length whose schedule is vLLM 0.32's table [default: the median measured one].")
@click.option("--precision", type=float, default=None,
              help="Add runs until the speedup is known to ±P (e.g. 0.05), as `profile --precision`.")
@click.option("--max-repeat", type=WholeNumber(), default=None, help="The most runs --precision may take.")
@click.option("--output-len", type=int, default=32, show_default=True, help="Generated tokens per sequence.")
@click.option("--num-iters-warmup", "warmup_iters", type=int, default=2, show_default=True, help="Warm-up iterations.")
@click.option("--num-iters", "iters", type=int, default=5, show_default=True, help="Measured iterations.")
@click.option("--repeat", type=int, default=3, show_default=True,
              help="Interleaved runs per round (every cell in every run).")
@click.option("--replicas", type=int, default=1, show_default=True, help="Engines of each model per run.")
@click.option("--device", type=click.Choice(["auto", "cpu", "gpu"]), default="auto", show_default=True)
@profiler_option("tune")
@click.option("--nsys-trace", "trace", default=None, metavar="LIST", type=TRACE_LIST,
              help="nsys -t value (e.g. nvtx for the smallest traces).")
@click.option("--force", is_flag=True, help="Profile again cells that an earlier run completed.")
@click.option("--plot/--no-plot", default=True, show_default=True, help="Draw tune.png.")
@click.option("--confirm/--no-confirm", default=True, show_default=True,
              help="After the fit, profile the schedule's γ at the measured batch sizes where it was not measured "
                   "(round-2/: every cell again with those, in the same runs); without it the schedule check may "
                   "have nothing to compare.")
@click.option("--workload", type=click.Choice(["server", "benchmark"]), default="server", show_default=True,
              help="Whose schedule is num_speculative_tokens_per_batch_size and the --speculative-config: a "
                   "server's (steady state, continuous batching: what vLLM's table is for) or the benchmark's "
                   "(static batches of --output-len tokens waiting for the slowest, as the measured cells are). "
                   "Both are printed and in the JSON; the schedule check always checks the benchmark's against the "
                   "measured cells (like with like).")
@click.option("--run-schedule/--no-run-schedule", default=None,
              help="At the end, one round more with every cell and an engine running the benchmark workload's whole "
                   "schedule (its --speculative-config) at each measured batch size, compared with the fixed-γ "
                   "cells of that round [default: on a GPU only; on the CPU vLLM's V1 runner runs it too: ask].")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the bootstrap intervals.")
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True)
def tune_command(fmt, **fields):
    """The γ to speculate at every batch size up to --max-batch-size, as vLLM's num_speculative_tokens_per_batch_size.

    Profiles TARGET with DRAFT at every batch size × γ of the design and the --check cells, all in the same
    interleaved runs (one engine per model serves every batch size), or reads SOURCE (a tune or sweep directory);
    fits the step cost model across batch size, forecasts every batch size and γ 1…max-gamma with an interval,
    checks every measured cell not fitted on, and prints the schedule and the whole --speculative-config.

    Exit codes: 0 the schedule is recommended; 3 it is not (a held-out cell missed its measurement by more than
    10 %, or the forecast has no usable interval: the report says why and what to measure next, and gives no
    --speculative-config); 2 bad input.
    """
    from ..formats import tune_json
    from ..report.tune_text import IMPRECISE_EXIT, UNTRUSTED_EXIT, render_text
    from ..workflows.tune import tune
    from ..workflows.tune_request import TuneRequest

    report = tune(TuneRequest(**fields))  # each flag's destination is the request's field of the same name
    if fmt == "json":
        click.echo(tune_json.dumps(report.to_dict()))
    else:
        click.echo(render_text(report.result, report.notes), nl=False)
    if report.files:
        from ..progress import one_line

        click.echo(one_line(f"report: {report.files['report'].parent}"), err=True)
    if not report.trusted:
        click.echo(f"nsys-cc: tune: the schedule is not recommended (NOT RECOMMENDED above: why, and what to measure "
                   f"next); exit code {UNTRUSTED_EXIT}", err=True)
        raise SystemExit(UNTRUSTED_EXIT)
    if getattr(report.result, "outcome", "consistent") == "imprecise":
        click.echo(f"nsys-cc: tune: the held-out cells are not precise enough to check the schedule (the runs that "
                   f"would decide are above); exit code {IMPRECISE_EXIT}", err=True)
        raise SystemExit(IMPRECISE_EXIT)
