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
    "--metrics", "metrics_dump", type=click.Path(), default=None,
    help="vLLM spec-decode metrics dump (nsys_cc.analysis.acceptance.dump_metrics) to read α from.",
)


def format_option(choices: tuple[str, ...] = FORMATS, help: str | None = None):
    """`--format`, its choices from `nsys_cc.report.FORMATS` (or the subset a verb renders)."""
    return click.option("--format", "fmt", type=click.Choice(list(choices)), default=choices[0], show_default=True,
                        help=help)
