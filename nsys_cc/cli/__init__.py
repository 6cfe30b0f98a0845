"""`nsys-cc` command line: thin click verbs over the library.

Every error caused by the user's input is an `NsysCCError`: one line on stderr, exit code 2, no traceback. The
library's messages and notes name its parameters (`skip_ranges`); the CLI writes the verb's flags instead
(`--skip-ranges`), by one function (`in_flags`) for the error handler and for the notes the verbs print.
"""

from __future__ import annotations

import os
import re

import click

from .. import __version__
from ..errors import NsysCCError
from ..trace.pages import small_pages


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


def in_flags(text: str, command: click.Command | None = None, param: str | None = None) -> str:
    """A library sentence (an error's message or a note) with the library's parameter names written as the verb's
    flags (`command`, default: the verb running now): any snake_case parameter name of the verb, any of its parameters
    written `name=value` (`timeout=3` → `--timeout=3`; `force=True` → `--force` for an on/off flag), and `param` (the
    parameter at fault of an error) — never a plain word such as `acceptance` elsewhere in the sentence."""
    if command is None:
        ctx = click.get_current_context(silent=True)
        command = ctx.command if ctx is not None else None
    flags = _flags(command)
    switches = {p.name for p in command.params if isinstance(p, click.Option) and p.is_flag} if command else set()
    for name in sorted(flags, key=len, reverse=True):
        flag = flags[name]
        if name in switches:
            text = re.sub(rf"(?<![\w-]){re.escape(name)}=True(?![\w-])", flag, text)
        bare = "_" in name or name == param
        pattern = rf"(?<![\w-]){re.escape(name)}(?![\w-])" if bare else rf"(?<![\w-]){re.escape(name)}(?==)"
        text = re.sub(pattern, flag, text)
    return text


def result_in_flags(result):
    """An analysis result as the CLI shows it: its notes, each model's warm-up note and phase rule, and the speculative
    runs' notes written with the verb's flags (`in_flags`); every number untouched."""
    import dataclasses

    models = tuple(dataclasses.replace(m, warmup_note=in_flags(m.warmup_note), phase_rule=dataclasses.replace(
        m.phase_rule, detail=in_flags(m.phase_rule.detail))) for m in result.models)
    spec = result.speculative
    if spec is not None:
        spec = dataclasses.replace(spec, notes=[in_flags(n) for n in spec.notes])
    return dataclasses.replace(result, models=models, notes=tuple(in_flags(n) for n in result.notes), speculative=spec)


class _Cli(click.Group):
    def invoke(self, ctx: click.Context):
        from .. import progress

        progress.wording = in_flags  # progress lines name the verb's flags, as its notes and errors do
        _tolerant_stdout()
        try:
            with small_pages():  # the process is ours: no huge-page faults for any verb (trace/pages.py)
                return super().invoke(ctx)
        except NsysCCError as exc:
            command = self.commands.get(ctx.invoked_subcommand or "")
            click.echo(f"nsys-cc: error: {in_flags(str(exc), command, exc.param)}", err=True)
            ctx.exit(exc.exit_code)
        except KeyboardInterrupt:
            click.echo("nsys-cc: interrupted", err=True)
            ctx.exit(130)
        except BrokenPipeError:  # `| head -1`: the reader has what it wanted
            _quiet_broken_pipe()
        except click.UsageError as exc:  # a bad option value or name: one line, as for every other bad input
            verb = f" {exc.ctx.info_name}" if exc.ctx is not None and exc.ctx.parent is not None else ""
            click.echo(f"nsys-cc: error: {exc.format_message()} (nsys-cc{verb} -h lists the options)", err=True)
            ctx.exit(exc.exit_code)
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
        finally:
            progress.wording = str


@click.group(cls=_Cli, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110})
@click.version_option(__version__, prog_name="nsys-cc")
def cli() -> None:
    """Measure the cost coefficient c of speculative decoding from Nsight Systems traces."""


def _tolerant_stdout() -> None:
    """A file name that is not UTF-8 reaches Python as text with surrogate escapes; written out, it becomes the
    escape `\\udcff` (as stderr already does), which JSON reads back as the same name, instead of an error."""
    import io
    import sys

    if isinstance(sys.stdout, io.TextIOWrapper) and sys.stdout.errors in ("strict", "surrogateescape"):
        try:
            sys.stdout.reconfigure(errors="backslashreplace")
        except (AttributeError, ValueError, OSError):
            pass


def _quiet_broken_pipe() -> None:
    """Leave as Unix tools do when the reader of the output went away (`nsys-cc … | head -1`): no message, exit
    status 141 (128 + SIGPIPE); stdout now points at /dev/null so that flushing it at exit fails no more."""
    import sys

    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass
    raise SystemExit(141)


def main(argv: list[str] | None = None) -> None:
    try:
        cli.main(args=argv, prog_name="nsys-cc")
    except BrokenPipeError:  # outside a verb (`--help | head -1`)
        _quiet_broken_pipe()


# Each verb lives in its own module and registers itself on `cli`.
from . import analyze, inspect, profile, speedup, sweep  # noqa: E402,F401
