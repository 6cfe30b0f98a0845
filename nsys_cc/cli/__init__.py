"""`nsys-cc` command line: thin click verbs over the library.

Every error caused by the user's input is an `NsysCCError`: one line on stderr, exit code 2, no traceback. The
library's messages and notes name its parameters (`skip_ranges`); the CLI writes the verb's flags instead
(`--skip-ranges`), by one function (`in_flags`) for the error handler and for the notes the verbs print.
"""

from __future__ import annotations

import errno
import os

import click

from ..errors import NsysCCError
from ..trace.pages import small_pages
from ..version import __version__
from .flags import in_flags, result_in_flags  # noqa: F401  (the verbs' wording of library sentences)


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
            said = str(exc) if getattr(exc, "said_as_is", False) else in_flags(str(exc), command, exc.param)
            click.echo(f"nsys-cc: error: {one_line(said)}", err=True)
            ctx.exit(exc.exit_code)
        except KeyboardInterrupt as exc:
            signum = getattr(exc, "signum", None)  # SIGTERM/SIGHUP during a profile (`launch.process.Terminated`)
            click.echo(f"nsys-cc: {exc}" if signum else "nsys-cc: interrupted", err=True)
            ctx.exit(128 + (signum or 2))
        except BrokenPipeError:  # `| head -1`: the reader has what it wanted
            _quiet_broken_pipe()
        except OSError as exc:
            if exc.errno == errno.ENAMETOOLONG:  # a 300-character name, a path over PATH_MAX: the user's input
                click.echo(f"nsys-cc: error: {_too_long(exc)}", err=True)
                ctx.exit(2)
            if exc.errno not in _FULL:
                raise
            _cannot_write_output(exc)
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


def one_line(text: str) -> str:
    """`text` with its control characters (a newline or a tab in a file name, an escape sequence) written as
    escapes (`\\n`, `\\x1b`), as range names are quoted: an error stays one line, whatever a path holds. The one
    place every error line goes through (`progress.one_line`, which progress lines and the lines naming what was
    written go through too)."""
    from ..progress import one_line as escaped

    return escaped(text)


def _too_long(exc: OSError) -> str:
    """The line for a file name or path longer than the system takes (ENAMETOOLONG)."""
    name = os.fsdecode(exc.filename) if exc.filename is not None else ""
    shown = name if len(name) <= 80 else f"{name[:38]}…{name[-38:]}"
    return one_line(f"{shown}: file name too long ({len(name)} characters; the system takes at most 255 per name "
                    f"and {os.pathconf('/', 'PC_PATH_MAX') if hasattr(os, 'pathconf') else 4096} per path)")


_FULL = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO)  # the output cannot be written (`> /dev/full`)


def _cannot_write_output(exc: OSError) -> None:
    """The output (stdout) cannot be written — a full disk, `> /dev/full`: one line, exit 2, stdout then pointed at
    /dev/null so that flushing it at exit fails no more."""
    import sys

    # a file nsys-cc writes (a status, a log: a full -o once named none), else the output itself
    what = os.fsdecode(exc.filename) if exc.filename is not None else "the output"
    click.echo(f"nsys-cc: error: {one_line(f'cannot write {what}: {exc.strerror or exc}')}", err=True)
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass
    raise SystemExit(2)


def main(argv: list[str] | None = None) -> None:
    import sys

    try:
        try:
            cli.main(args=argv, prog_name="nsys-cc")
        finally:
            sys.stdout.flush()  # what is still buffered is written here, where a failure can still be said
    except BrokenPipeError:  # outside a verb (`--help | head -1`)
        _quiet_broken_pipe()
    except OSError as exc:
        if exc.errno == errno.ENAMETOOLONG:
            click.echo(f"nsys-cc: error: {_too_long(exc)}", err=True)
            raise SystemExit(2) from None
        if exc.errno not in _FULL:
            raise
        _cannot_write_output(exc)


# Each verb lives in its own module, a click command that knows nothing of the group.
from . import analyze, inspect, kernels, profile, speedup, sweep, tune  # noqa: E402

for _command in (analyze.analyze_command, inspect.info, inspect.ranges, kernels.kernels, profile.profile_command,
                 speedup.speedup, sweep.sweep, tune.tune_command):
    cli.add_command(_command)
