"""`nsys-cc profile --target MODEL --draft MODEL …`: profile each model with vLLM under nsys, then report c.

Exit status: 0 when every model was profiled and the report written; 1 when the report was written but some
draft failed (the report and status.json say which, and where its log is); 2 when no report could be made
(bad arguments, nsys or vLLM missing, the target or every draft failed); 130 on Ctrl-C.
"""

from __future__ import annotations

import click

from . import cli
from .options import acceptance_option, format_option


@cli.command()
@click.option("--target", required=True, metavar="MODEL",
              help="Target model: a shipped shape (e.g. llama-2-7b-shape, tiny-llama-target), a directory with a "
                   "config.json, or a Hugging Face id.")
@click.option("--draft", "drafts", multiple=True, required=True, metavar="MODEL",
              help="Draft model (repeat for several), same forms as --target.")
@click.option("-o", "--output", "out_dir", type=click.Path(file_okay=False), default="out/profile",
              show_default=True, help="Directory for traces, bench JSON, logs and the report; a rerun resumes.")
@click.option("--input-len", type=int, default=128, show_default=True, help="Prompt tokens per sequence.")
@click.option("--output-len", type=int, default=2, show_default=True,
              help="Generated tokens per sequence (1 prefill + N−1 decode forwards per iteration).")
@click.option("--batch-size", type=int, default=1, show_default=True, help="Sequences per iteration.")
@click.option("--num-iters-warmup", type=int, default=5, show_default=True, help="Warm-up iterations (marked).")
@click.option("--num-iters", type=int, default=5, show_default=True, help="Measured iterations.")
@click.option("--cuda-graphs", is_flag=True, help="Let vLLM use CUDA graphs (GPU only; default: eager).")
@click.option("--vllm-arg", "vllm_args", multiple=True, metavar="ARG",
              help="Extra option for vLLM's latency benchmark, e.g. --vllm-arg=--dtype=float16 (repeatable).")
@click.option("--device", type=click.Choice(["auto", "cpu", "gpu"]), default="auto", show_default=True,
              help="Platform settings for nsys and vLLM (auto: GPU when nvidia-smi lists one).")
@click.option("--nsys-trace", default=None, metavar="LIST",
              help="nsys -t value instead of the platform default (e.g. nvtx for the smallest traces).")
@click.option("--nsys-arg", "nsys_args", multiple=True, metavar="ARG",
              help="Extra `nsys profile` option, e.g. --nsys-arg=--sample=cpu (repeatable).")
@click.option("--timeout", type=float, default=1800, show_default=True,
              help="Seconds allowed per model (benchmark, then export); 0 for no limit.")
@click.option("--force", is_flag=True, help="Profile again models that a previous run in -o DIR completed.")
@click.option("--dry-run", is_flag=True, help="Print the exact commands and exit.")
@acceptance_option
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the bootstrap intervals.")
@format_option(help="Format of the table printed at the end.")
def profile(target, drafts, out_dir, input_len, output_len, batch_size, num_iters_warmup, num_iters, cuda_graphs,
            vllm_args, device, nsys_trace, nsys_args, timeout, force, dry_run, acceptance, seed, fmt):
    """Profile TARGET and each DRAFT with vLLM's latency benchmark under nsys, then report the cost coefficient c."""
    from ..analysis.acceptance import parse_alphas
    from ..errors import ProfileError
    from ..launch import launcher
    from ..launch.commands import BenchOptions

    options = BenchOptions(input_len=input_len, output_len=output_len, batch_size=batch_size,
                           warmup_iters=num_iters_warmup, iters=num_iters, cuda_graphs=cuda_graphs,
                           vllm_args=tuple(vllm_args))
    alphas = parse_alphas(acceptance)  # before minutes of profiling, not after
    if dry_run:
        click.echo(launcher.dry_run(target, list(drafts), out_dir, options, device=device, trace=nsys_trace,
                                    nsys_args=nsys_args), nl=False)
        return
    outcome = launcher.profile(
        target, list(drafts), out_dir, options, device=device, timeout=timeout or None, force=force,
        trace=nsys_trace, nsys_args=nsys_args, acceptance=alphas, seed=seed,
    )
    if outcome.result is None:
        raise ProfileError("no report (the target and at least one draft must complete): " + "; ".join(outcome.notes))
    from ..report import render

    click.echo(render(outcome.result, fmt), nl=False)
    for note in outcome.notes:
        click.echo(f"note: {note}", err=True)
    click.echo(f"report: {outcome.report}", err=True)
    if outcome.failed:
        failed = f"{len(outcome.failed)} of {len(outcome.runs)} models failed"
        click.echo(f"nsys-cc: {failed}: see the notes above", err=True)
        raise SystemExit(1)
