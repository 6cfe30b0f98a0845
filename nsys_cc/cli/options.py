"""Options shared by several verbs."""

from __future__ import annotations

import click

from ..report.render_formats import FORMATS


class NonEmpty(click.ParamType):
    """Text that says something: an empty or blank value (`--nsys-arg ''`, `--scheduler ''`) is one error line naming
    the flag, never taken as nothing (it reached nsys and vLLM as an empty word, or was read as the default)."""

    name = "text"

    def __init__(self, what: str = "a value"):
        self.what = what

    def convert(self, value, param, ctx):
        if isinstance(value, str) and not value.strip():
            self.fail(f"{value!r} is empty: give {self.what}", param, ctx)
        return value


class NonEmptyPath(click.Path):
    """A path that is not empty (`--metrics ''` said "metrics dump not found:" and named nothing)."""

    def convert(self, value, param, ctx):
        if isinstance(value, str) and not value.strip():
            self.fail(f"{value!r} is empty: give a file", param, ctx)
        return super().convert(value, param, ctx)


MODEL = NonEmpty("a model (a shipped shape, a directory with a config.json, or a Hugging Face id)")
NUMBERS = NonEmpty("whole numbers, e.g. 1,8")
TRACE_LIST = NonEmpty("nsys's -t list, e.g. nvtx")
ADDRESS = NonEmpty("a Dask scheduler's address")
WORD = NonEmpty("a word (an empty one reaches the program as an empty argument)")

# Each option's `dest` is the library parameter it feeds, so that the error handler can name the flag of a parameter
# the library's message names (`NsysCCError.param`).
acceptance_option = click.option(
    "--acceptance", "acceptance", multiple=True, type=NonEmpty("a rate between 0 and 1"),
    help="Acceptance rate α (0–1) at which to judge each draft; repeat or comma-separate for several.",
)

metrics_option = click.option(
    "--metrics", "metrics_dump", type=NonEmptyPath(), default=None,
    help="vLLM spec-decode metrics dump (nsys_cc.analysis.profile_dir.acceptance.dump_metrics) to read α from.",
)


def profiler_option(verb: str = "profile"):
    """`--profiler`: what records the runs, one of the recorders (`launch.recorders.NAMES`, the one list)."""
    from ..launch import recorders

    return click.option(
        "--profiler", type=click.Choice(list(recorders.NAMES)), default=recorders.DEFAULT.name, show_default=True,
        help=f"What records the {verb}'s runs: nsys (NVTX ranges, exported to SQLite) or torch (vLLM's torch profiler "
             "in the benchmark's process, the plugin's ranges as torch.profiler ranges: no nsys needed, no tensor "
             "parallel; docs/profile.md).")


def format_option(choices: tuple[str, ...] = FORMATS, help: str | None = None):
    """`--format`, its choices from `nsys_cc.report.FORMATS` (or the subset a verb renders)."""
    return click.option("--format", "fmt", type=click.Choice(list(choices)), default=choices[0], show_default=True,
                        help=help)


class Seconds(click.ParamType):
    """A time bound in seconds (`nsys_cc.inputs.seconds`: finite, ≥ 0; 0: no limit, given on as 0). NaN, inf, a
    negative number or a word is one error line naming the flag."""

    name = "seconds"

    def convert(self, value, param, ctx):
        from ..inputs import seconds

        if isinstance(value, (int, float)) and not isinstance(value, bool) and value == value and value >= 0 \
                and value != float("inf"):
            return float(value)
        if isinstance(value, str) and not value.strip():  # `--timeout ''` was no limit at all, silently
            self.fail(f"{value!r} is empty: give a number of seconds (0: no limit)", param, ctx)
        flag = f"--{param.name}" if param is not None and param.name else "the value"
        return seconds(value, flag) or 0.0


SECONDS = Seconds()


def export_timeout_option(fn):
    """`--timeout S`: seconds each `nsys export` of a .nsys-rep may take (0: no limit); it is stopped after that.
    Passed on as NSYS_CC_EXPORT_TIMEOUT, so the worker processes of many trace sets use it too."""

    def apply(ctx, param, value):
        if value is not None:
            import os

            from ..trace.export import ENV_EXPORT_TIMEOUT

            os.environ[ENV_EXPORT_TIMEOUT] = repr(value)
        return value

    return click.option("--timeout", "timeout", type=SECONDS, default=None, callback=apply, expose_value=False,
                        is_eager=False, help="Seconds each `nsys export` of a .nsys-rep may take (default 1800; 0: "
                                             "no limit).")(fn)


class WholeNumber(click.ParamType):
    """An integer, also written as a float without a fraction (`1e9`, `100.0`); never inf, nan or 2.5."""

    name = "integer"

    def convert(self, value, param, ctx):
        if isinstance(value, int):
            return value
        text = str(value).strip()
        try:
            return int(text)
        except ValueError:
            pass
        try:
            number = float(text)
        except ValueError:
            number = float("nan")
        if not number.is_integer():
            self.fail(f"{value!r} is not a whole number", param, ctx)
        return int(number)


class OutputDir(click.Path):
    """`-o DIR`: a path, never empty (`-o ''` was ignored by `analyze`, and `tune` and `sweep` took it as the current
    directory)."""

    def convert(self, value, param, ctx):
        if isinstance(value, str) and not value:
            self.fail("the directory name is empty: give a new or existing directory", param, ctx)
        return super().convert(value, param, ctx)


OUTPUT_DIR = OutputDir()
