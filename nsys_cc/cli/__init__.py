"""`nsys-cc` command line: thin click verbs over the library.

Every error caused by the user's input is an `NsysCCError`: one line on stderr, exit code 2, no traceback.
"""

from __future__ import annotations

import os

import click

from .. import __version__
from ..errors import NsysCCError


class _Cli(click.Group):
    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except NsysCCError as exc:
            click.echo(f"nsys-cc: error: {exc}", err=True)
            ctx.exit(exc.exit_code)
        except KeyboardInterrupt:
            click.echo("nsys-cc: interrupted", err=True)
            ctx.exit(130)
        except (click.exceptions.Exit, click.ClickException, click.Abort):
            raise
        except Exception as exc:  # a bug in nsys_cc: still one line unless asked for the traceback
            if os.environ.get("NSYS_CC_DEBUG"):
                raise
            click.echo(
                f"nsys-cc: internal error: {type(exc).__name__}: {exc} "
                "(set NSYS_CC_DEBUG=1 for the traceback and please report it)",
                err=True,
            )
            ctx.exit(1)


@click.group(cls=_Cli, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110})
@click.version_option(__version__, prog_name="nsys-cc")
def cli() -> None:
    """Measure the cost coefficient c of speculative decoding from Nsight Systems traces."""


def main(argv: list[str] | None = None) -> None:
    cli.main(args=argv, prog_name="nsys-cc")


# Each verb lives in its own module and registers itself on `cli`.
from . import analyze, inspect, profile, speedup  # noqa: E402,F401
