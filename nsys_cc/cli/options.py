"""Options shared by several verbs."""

from __future__ import annotations

import click

from ..report import FORMATS

# Each option's `dest` is the library parameter it feeds, so that the error handler can name the flag of a parameter
# the library's message names (`NsysCCError.param`).
acceptance_option = click.option(
    "--acceptance", "acceptance", multiple=True,
    help="Acceptance rate α (0–1) at which to judge each draft; repeat or comma-separate for several.",
)

metrics_option = click.option(
    "--metrics", "metrics_dump", type=click.Path(dir_okay=False), default=None,
    help="vLLM spec-decode metrics dump (nsys_cc.analysis.acceptance.dump_metrics) to read α from.",
)


def format_option(choices: tuple[str, ...] = FORMATS, help: str | None = None):
    """`--format`, its choices from `nsys_cc.report.FORMATS` (or the subset a verb renders)."""
    return click.option("--format", "fmt", type=click.Choice(list(choices)), default=choices[0], show_default=True,
                        help=help)


def check_eager(enforce_eager: bool, cuda_graphs: bool) -> bool:
    """`--enforce-eager`, after the deprecated `--cuda-graphs`: CUDA graphs are the GPU default now, so that flag
    changes nothing (a warning says so) and contradicts `--enforce-eager` (an error)."""
    from ..errors import InputError

    if cuda_graphs and enforce_eager:
        raise InputError("--cuda-graphs and --enforce-eager contradict each other: CUDA graphs are the GPU default, "
                         "--enforce-eager turns them off")
    if cuda_graphs:
        click.echo("nsys-cc: warning: --cuda-graphs is deprecated and changes nothing: CUDA graphs are the GPU default "
                   "now (--enforce-eager turns them off)", err=True)
    return enforce_eager
