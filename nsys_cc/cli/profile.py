"""`nsys-cc profile --target MODEL --draft MODEL …`: profile each model with vLLM under nsys, then report c.

Exit status: 0 when every model was profiled and the report written; 1 when the report was written but some
draft failed (the report and status.json say which, and where its log is); 2 when no report could be made
(bad arguments, nsys or vLLM missing, the target or every draft failed); 130 on Ctrl-C. With `--speculate` (or
`--speculative-config`) the speculative runs count like drafts: 1 when one failed.

By default every model runs in one process per run, their iterations interleaved, `--repeat` runs (6), and c pools
the runs with an interval across them (`nsys_cc.launch.interleaved`); `--precision P` adds runs until every
draft's decode c is known to ±P·c (or `--max-repeat` runs were made), and says which stopped it.
"""

from __future__ import annotations

import click

from ..progress import one_line
from .flags import in_flags, result_in_flags
from .options import (
    MODEL,
    OUTPUT_DIR,
    SECONDS,
    TRACE_LIST,
    WORD,
    acceptance_option,
    format_option,
    profiler_option,
)


@click.command("profile")
@click.option("--target", required=True, metavar="MODEL", type=MODEL,
              help="Target model: a shipped shape (e.g. llama-2-7b-shape, tiny-llama-target), a directory with a "
                   "config.json, or a Hugging Face id.")
@click.option("--draft", "drafts", multiple=True, metavar="MODEL", type=MODEL,
              help="Draft model (repeat for several), same forms as --target; needed unless --speculative-config "
                   "names a proposer without a draft model (ngram).")
@click.option("--target-tp", type=int, default=1, show_default=True, metavar="N",
              help="Run the target tensor-parallel on N ranks (one process each; vLLM's mp executor).")
@click.option("--draft-tp", type=int, default=1, show_default=True, metavar="N",
              help="Run every draft tensor-parallel on N ranks.")
@click.option("-o", "--output", "out_dir", type=OUTPUT_DIR, default="out/profile",
              show_default=True, help="Directory for traces, bench JSON, logs and the report; a rerun resumes.")
@click.option("--input-len", type=int, default=128, show_default=True, help="Prompt tokens per sequence.")
@click.option("--output-len", type=int, default=32, show_default=True,
              help="Generated tokens per sequence (1 prefill + N−1 decode forwards per iteration): 155 decode "
                   "forwards per model and run at the defaults.")
@click.option("--batch-size", type=int, default=1, show_default=True, help="Sequences per iteration.")
@click.option("--num-iters-warmup", "warmup_iters", type=int, default=5, show_default=True,
              help="Warm-up iterations (marked).")
@click.option("--num-iters", "iters", type=int, default=5, show_default=True, help="Measured iterations.")
@click.option("--repeat", type=int, default=None, metavar="R",
              help="Interleaved runs: every model in one process per run, iterations alternating; c pools the runs "
                   "and its interval covers the variation between them. [default: 6]")
@click.option("--precision", type=float, default=None, metavar="P",
              help="Add runs until every draft's decode c interval lies within ±P·c (e.g. 0.05), at most "
                   "--max-repeat runs; the output says which stopped it.")
@click.option("--max-repeat", type=int, default=None, metavar="N",
              help="The most runs --precision may make. [default: 30]")
@click.option("--replicas", type=int, default=None, metavar="N",
              help="Engines of each model in every run (instances of one model differ in speed by where their "
                   "weights land in memory). [default: 2]")
@click.option("--separate-processes", "separate", is_flag=True,
              help="One process per model, one after another (one trace per model, <label>.sqlite; no --repeat).")
@click.option("--speculate", default=None, metavar="G1,G2,…",
              help="Also run the target speculatively with each draft (vLLM method draft_model) at each γ "
                   "(num_speculative_tokens), labelled DRAFT.spec-gγ, e.g. --speculate 1,3.")
@click.option("--speculative-config", default=None, metavar="JSON",
              help="vLLM's --speculative-config: the base of the --speculate runs (model and γ filled in), or alone "
                   "one more speculative run as given, e.g. '{\"method\": \"ngram\", \"num_speculative_tokens\": 3, "
                   "\"prompt_lookup_max\": 4}'.")
@click.option("--enforce-eager", is_flag=True,
              help="On a GPU, run vLLM eagerly instead of with its CUDA graphs (the default, as users serve; a CPU "
                   "run is always eager).")
@click.option("--vllm-arg", "vllm_args", multiple=True, metavar="ARG", type=WORD,
              help="Extra option for vLLM's latency benchmark, e.g. --vllm-arg=--dtype=float16 (repeatable).")
@click.option("--device", type=click.Choice(["auto", "cpu", "gpu"]), default="auto", show_default=True,
              help="Platform settings for nsys and vLLM (auto: GPU when nvidia-smi lists one).")
@profiler_option()
@click.option("--nsys-trace", "trace", default=None, metavar="LIST", type=TRACE_LIST,
              help="nsys -t value instead of the platform default (e.g. nvtx for the smallest traces).")
@click.option("--nsys-arg", "nsys_args", multiple=True, metavar="ARG", type=WORD,
              help="Extra `nsys profile` option, e.g. --nsys-arg=--sample=cpu (repeatable).")
@click.option("--timeout", type=SECONDS, default=1800, show_default=True,
              help="Seconds allowed per model (benchmark, then export); 0 for no limit.")
@click.option("--force", is_flag=True, help="Profile again models that a previous run in -o DIR completed.")
@click.option("--dry-run", is_flag=True, help="Print the exact commands and exit.")
@acceptance_option
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the bootstrap intervals.")
@format_option(help="Format of the table printed at the end.")
def profile_command(dry_run, fmt, **fields):
    """Profile TARGET and each DRAFT with vLLM's latency benchmark under nsys (or vLLM's torch profiler: --profiler
    torch), then report the cost coefficient c."""
    from .. import front
    from ..errors import ProfileError
    from ..request import ProfileRequest
    from ..workflows import profile as workflow

    # the flags are the request's fields of the same names (an error naming a field names its flag)
    request = ProfileRequest(**fields)
    if dry_run:
        click.echo(workflow.dry_run(request), nl=False)
        return
    outcome = front.profile(request)
    if outcome.result is None and outcome.speculative and outcome.runs[0].ok:
        for note in outcome.notes:  # speculative runs without plain drafts to compare (e.g. ngram alone)
            click.echo(one_line(f"note: {in_flags(note)}"), err=True)
        if outcome.failed:
            raise SystemExit(1)
        return
    if outcome.result is None:
        raise ProfileError("no report (the target and at least one draft must complete): " + "; ".join(outcome.notes))
    from ..report import render

    click.echo(render(result_in_flags(outcome.result), fmt), nl=False)
    for note in outcome.notes:
        click.echo(one_line(f"note: {in_flags(note)}"), err=True)
    click.echo(one_line(f"report: {outcome.report}"), err=True)
    if outcome.failed:
        failed = f"{len(outcome.failed)} of {len(outcome.runs)} models failed"
        click.echo(f"nsys-cc: {failed}: see the notes above", err=True)
        raise SystemExit(1)
