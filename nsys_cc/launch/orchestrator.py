"""The one launch orchestrator of `profile`: a request's runs, made by one of two strategies that share everything
but how engines are put into processes.

- `interleaved.Interleaved` (the default): every model in one process per run, `repeat` runs one after another (the
  precision loop adds more), each in `run-<k>/`;
- `separate.Separate` (`separate`, tensor-parallel models, a speculative config without drafts): one process per
  model, one after another, each model's files `<label>.*` in the output directory.

What the strategies share is here, in one place: the dry run (`dry_run`: the recorder's binary as it would be shown,
the environment the runs would refuse, then the strategy's commands); the checks before the first run (the
environment, the recorder's warnings, the output directory, files in the way, the pair weights); one writer per
directory (its lock) and the leftovers of killed calls cleaned under it; resume (a run whose record names the same
commands and whose files are there is kept unless `force`; `resume.recorded`); the status (`status.json`, one layout:
`formats.status_json.document`, rewritten after every run); the record every run's `done.json` stores beside what
happened (`stamp`: the request, the recorder and its version, the device); Ctrl-C (the status written, what completed
concluded and handed to `finish`, then the KeyboardInterrupt goes on); and the end — what the runs did
(`ProfileOutcome`) handed to `finish` (the workflow's analysis and report, `workflows.profile.finish`) when it is
enough to analyse. Nothing under `launch/` builds an analysis.

A strategy (`Strategy`) says which runs there are and in what order (`next_run`, which stops them), how one is made
(`execute`) and kept (`resumed`), its progress lines, its entries in the status, and what its runs add up to
(`conclude`).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from .. import inputs, progress
from ..files.folder import Folder, check_out_dir
from ..formats import status_json
from ..request import DEFAULT_TIMEOUT_S, ProfileRequest
from . import environment, process
from .models import Model
from .recorders.base import Recorder
from .results import ProfileOutcome

Finish = Callable[[ProfileOutcome], ProfileOutcome]


class Strategy(Protocol):
    """One way to put a profile's engines into processes (module docstring). `name` is the status file's
    "strategy"; `recorder` records its runs, `binary` is the program that recorder runs; `gpu` and `tp` (the most
    tensor-parallel ranks of a model) are what the environment check asks."""

    name: str
    request: ProfileRequest
    recorder: Recorder
    gpu: bool
    tp: int

    @property
    def binary(self) -> str: ...

    def dry_run(self) -> str: ...

    def models(self) -> list[Model]: ...

    def refuse(self) -> None: ...

    def clean(self, out: Path) -> list[str]: ...

    def next_run(self): ...

    def resumed(self, run) -> bool: ...

    def start(self, run) -> str: ...

    def execute(self, run, timeout: float | None) -> None: ...

    def said(self, run) -> str: ...

    def after(self, run) -> None: ...

    def interrupted(self) -> None: ...

    def stopped_by(self) -> str | None: ...

    def entries(self) -> tuple[list[dict], list[dict]]: ...

    def conclude(self, out: Path) -> ProfileOutcome: ...


def device(gpu: bool) -> str:
    """The device as the records store it."""
    return "gpu" if gpu else "cpu"


def stamp(strategy: Strategy) -> dict:
    """What every run's record stores beside what happened (`formats.done_json`): the request, which recorder made its
    trace and the recorder's version, and the device the runs are made for."""
    return {"recorder": strategy.recorder.record(strategy.binary), "device": device(strategy.gpu),
            "request": strategy.request.to_dict()}


def write_status(out: Path, strategy: Strategy) -> Path:
    """`status.json` of the runs so far (`formats.status_json`, one layout for both strategies)."""
    runs, models = strategy.entries()
    return status_json.write(out, status_json.document(
        strategy=strategy.name, request=strategy.request.to_dict(),
        recorder=strategy.recorder.record(strategy.binary), device=device(strategy.gpu),
        stopped_by=strategy.stopped_by(), runs=runs, models=models))


def timeout_of(request: ProfileRequest) -> float | None:
    """Seconds allowed per run (None: no limit): the request's, `DEFAULT_TIMEOUT_S` when it gives none, 0 no limit
    (`inputs.seconds`, the one rule for every bound: InputError naming `timeout` for nan, inf or a negative number)."""
    return inputs.seconds(request.timeout, "timeout", default=DEFAULT_TIMEOUT_S, param="timeout")


def dry_run(strategy: Strategy) -> str:
    """The exact commands the runs would execute (runs nothing, creates nothing), after what the runs would refuse of
    the environment."""
    environment.check(strategy.recorder, gpu=strategy.gpu, tp=strategy.tp)
    return strategy.dry_run()


def run(strategy: Strategy, *, finish: Finish | None = None) -> ProfileOutcome:
    """Make the request's runs with `strategy` (module docstring), then hand what they did to `finish` when it is
    enough to analyse; returns the `ProfileOutcome` (`finish`'s). Ctrl-C (or SIGTERM: `process.Terminated`): the status
    is written and what completed handed to `finish` too, then the KeyboardInterrupt goes on."""
    binary = strategy.binary
    warnings = [*environment.check(strategy.recorder, gpu=strategy.gpu, tp=strategy.tp),
                *process.preflight(strategy.recorder, binary)]
    for warning in warnings:
        progress.say(f"warning: {warning}")
    out = check_out_dir(strategy.request.out_dir, "the profile run").resolve()
    strategy.refuse()  # a file of the user's at a name a run writes: refused now, nothing changed
    process.prepare(out, strategy.models())
    with Folder(out).lock("the profile run"):  # one writer per out_dir
        for note in strategy.clean(out):  # what killed calls left (an orphan's still running: left)
            progress.say(f"note: {note}")
        try:
            _make_runs(strategy, out)
        except KeyboardInterrupt:
            strategy.interrupted()
            partial = conclude(strategy, out)
            if finish is not None and partial.analysable:
                partial = finish(partial)
            if partial.report is not None:
                progress.say(f"interrupted: report on the runs completed so far: {partial.report}")
            raise
        done = conclude(strategy, out)
        return finish(done) if finish is not None and done.analysable else done


def _make_runs(strategy: Strategy, out: Path) -> None:
    """The runs one after another, each kept (resume) or made, the status rewritten after each."""
    force, timeout = strategy.request.force, timeout_of(strategy.request)
    while (made := strategy.next_run()) is not None:
        if not force and strategy.resumed(made):
            made.status = "resumed"
        else:
            progress.say(strategy.start(made))
            strategy.execute(made, timeout)
        progress.say(strategy.said(made))
        write_status(out, strategy)
        strategy.after(made)


def conclude(strategy: Strategy, out: Path) -> ProfileOutcome:
    """What the runs did (`strategy.conclude`: what `finish` takes), then the status as it ends."""
    outcome = strategy.conclude(out)
    write_status(out, strategy)
    return outcome
