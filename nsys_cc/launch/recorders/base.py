"""What every recorder of a profile's runs is (`launch.recorders`): the one kind of object the launcher asks how a
run is recorded, whichever profiler it is.

A recorder owns, for the runs it records: the program a run is (its command around the benchmark driver, and the
export after it, if any), the environment it adds, the trace file it leaves (`trace_suffix` after the run's base
name: what the checks and the analysis read) and the files beside it, the binary it needs and its version (stored
in the run records: which recorder made each trace), what it refuses of a request, what in the environment would
break it, and its warnings before the first run.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Commands:
    """How a recorder runs one program: the command line that records it, the command that exports its trace after
    (empty: the trace is written by the run itself), and the variables it adds to the run's environment."""

    profile: list[str]
    export: list[str]
    env: dict[str, str]


class Recorder:
    """A profiler that records a profile's runs (`recorders.nsys.NSYS`, `recorders.torch.TORCH`).

    name: the value of `--profiler` (the request's `profiler`); under: what a run is made under, as progress lines
    and a failed run's reason say it; trace_suffix: the trace a run leaves after its base name (`<label>` or
    `run-<k>/trace`); recorded_suffix: what the profiler itself writes (the export's input, or the trace itself);
    suffixes: every file it may leave beside the base name (an attempt's mark, a later call's proof of what it
    wrote); runs_in_process: why vLLM's engine must run in the benchmark's process for this recorder to see it ("":
    it need not).
    """

    name: str = ""
    under: str = ""
    trace_suffix: str = ""
    recorded_suffix: str = ""
    suffixes: tuple[str, ...] = ()
    runs_in_process: str = ""

    def binary(self, *, shown_only: bool = False) -> str:
        """The program the recorder runs ("" when it runs none): found, or an error saying how to install it; with
        `shown_only` (commands printed, not run) its name when it is not found."""
        return ""

    def version(self, binary: str) -> str | None:
        """The recorder's version as the run records store it; None when it cannot be told."""
        return None

    def commands(self, binary: str, program: Sequence[str], base: Path, *, gpu: bool, trace: str | None = None,
                 extra: Sequence[str] = (), tp: int = 1, environ: Mapping[str, str] | None = None) -> Commands:
        """How `program` (the benchmark driver's command line) is recorded into `base` + `trace_suffix`."""
        raise NotImplementedError

    def refuse(self, *, target_tp: int = 1, draft_tp: int = 1, trace: str | None = None,
               nsys_args: Sequence[str] = ()) -> None:
        """InputError (naming the parameter) for what this recorder cannot do of a request."""

    def check_environment(self, environ: Mapping[str, str]) -> None:
        """InputError (naming the variable) for what in `environ` would break its runs."""

    def warnings(self, binary: str) -> list[str]:
        """What to warn about before the first run (an nvtx that this nsys does not record)."""
        return []

    def trace_name(self, base: str) -> str:
        """The name of the trace a run with base name `base` leaves."""
        return base + self.trace_suffix

    def record(self, binary: str) -> dict[str, str | None]:
        """Which recorder made a run's trace, as its records store it: `{"name", "version"}`."""
        return {"name": self.name, "version": self.version(binary)}
