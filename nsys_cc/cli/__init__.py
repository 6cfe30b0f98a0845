"""`nsys-cc` command line: thin click verbs over the library.

Every error caused by the user's input is an `NsysCCError`: one line on stderr, exit code 2, no traceback. The
library's messages name its parameters (`skip_ranges`); the handler writes the verb's flags instead (`--skip-ranges`).
"""

from __future__ import annotations

import os
import re

import click

from .. import __version__
from ..errors import NsysCCError


def _flags(command: click.Command | None) -> dict[str, str]:
    """Library parameter name → the verb's flag, from the options' destinations (which are the library's names)."""
    if command is None:
        return {}
    out = {}
    for p in command.params:
        longs = [o for o in p.opts if o.startswith("--")]
        if isinstance(p, click.Option) and p.name and longs:
            out[p.name] = longs[0]
    return out


def in_flags(exc: NsysCCError, command: click.Command | None) -> str:
    """The error's message with the library's parameter names written as the verb's flags: the parameter at fault
    (`exc.param`) and any snake_case parameter name of the verb (never a plain word such as `acceptance` elsewhere)."""
    text = str(exc)
    flags = _flags(command)
    names = {n for n in flags if "_" in n} | ({exc.param} if exc.param in flags else set())
    for name in sorted(names, key=len, reverse=True):
        text = re.sub(rf"(?<![\w-]){re.escape(name)}(?![\w-])", flags[name], text)
    return text


class _Cli(click.Group):
    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except NsysCCError as exc:
            command = self.commands.get(ctx.invoked_subcommand or "")
            click.echo(f"nsys-cc: error: {in_flags(exc, command)}", err=True)
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
from . import analyze, inspect, profile, speedup, sweep  # noqa: E402,F401
