"""The profile workflow: profile the target and every draft with vLLM under nsys, then analyse the directory written as
`nsys_cc.analyze(out_dir)` analyses it and write its report. The facade's `nsys_cc.profile`, `nsys-cc profile` and
every sweep cell (`sweep.cell.run_cell`: a cell's directory is a profile directory) call `profile`; `dry_run` prints
the commands it would run.

The runs: interleaved by default (`launch.interleaved`: every model in one process per run, `repeat` runs, c pooled
over them); one process per model (`launch.launcher`) with `separate`, for tensor-parallel models and for a
speculative config without drafts (`interleaves`). Nothing under `launch/` builds an analysis: the precision loop's
c between runs is handed down as `measure`, the analysis and report of the directory as `finish`.

`profiler` picks what records the runs: "nsys" (the default: NVTX ranges, an export to SQLite) or "torch" (vLLM's torch
profiler in the benchmark's own process, the plugin's ranges as torch.profiler ranges: no nsys needed); the runs, the
precision loop, `speculate` and the analysis are the same on both (`check_profiler` says what the torch route refuses).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Sequence

from .. import inputs, progress
from ..arguments import many
from ..contract import ENV_TORCH_SETTINGS
from ..errors import InputError
from ..files.folder import check_out_dir
from ..launch import launcher, plan
from ..launch.commands import BenchOptions, known_profiler, nsys_for
from ..launch.interleaved import (
    DEFAULT_OPTIONS,
    DEFAULT_REPEAT,
    DEFAULT_REPLICAS,
    dry_run_interleaved,
    profile_interleaved,
    validate,
)
from ..launch.results import ProfileOutcome


def profile(target: str, drafts: Sequence[str], out_dir: str | os.PathLike, options: BenchOptions | None = None, *,
            device: str = "auto", timeout: float | None = None, force: bool = False, trace: str | None = None,
            nsys_args: Sequence[str] = (), acceptance: float | str | Sequence[float | str] = (), seed: int = 0,
            speculate: Sequence[int] = (), speculative_config: str | None = None, target_tp: int = 1,
            draft_tp: int = 1, repeat: int | None = None, precision: float | None = None,
            max_repeat: int | None = None, replicas: int | None = None, separate: bool = False,
            profiler: str = "nsys") -> ProfileOutcome:
    """The runs (interleaved, or one process per model: module docstring), then `finish`: the analysis of the
    directory and its report. The arguments are `nsys_cc.profile`'s (its docstring says each), checked before
    minutes of profiling (the seed, the timeout, the runs' own). Returns the `ProfileOutcome`, its `result` and
    `report` set when the runs left enough to analyse."""
    from ..analysis.coefficient.arguments import check_seed
    from ..analysis.coefficient.of_profile import decode_precision_of

    check_seed(seed)  # before minutes of profiling, not after
    check_profiler(profiler, target_tp=target_tp, draft_tp=draft_tp, trace=trace, nsys_args=nsys_args)
    options = DEFAULT_OPTIONS if options is None else options
    done = functools.partial(finish, options=options, acceptance=many(acceptance, "acceptance"), seed=seed)
    drafts, speculate = [str(d) for d in many(drafts, "drafts")], many(speculate, "speculate")
    nsys_args = [str(a) for a in many(nsys_args, "nsys_args")]
    # the one rule for every bound: nan, inf or a negative number never reaches the benchmark (issue 32, P10/P11)
    if isinstance(timeout, str) and not timeout.strip():
        raise InputError(f"timeout is empty ({timeout!r}): give a number of seconds (0: no limit)", param="timeout")
    timeout = inputs.seconds(timeout, "timeout", default=launcher.DEFAULT_TIMEOUT_S, param="timeout") or 0
    check_report_writable(out_dir)
    if not interleaves(speculate, speculative_config, target_tp, draft_tp, separate, drafts):
        refuse_repeat(repeat, precision, max_repeat, replicas, separate, speculative_config, speculate)
        return launcher.profile_separately(target, drafts, out_dir, options, device=device, timeout=timeout or None,
                                           force=force, trace=trace, nsys_args=nsys_args, seed=seed,
                                           speculate=speculate, speculative_config=speculative_config,
                                           target_tp=target_tp, draft_tp=draft_tp, finish=done, profiler=profiler)
    check_out_dir(out_dir, "the profile run")
    measure = functools.partial(decode_precision_of, output_len=options.output_len, seed=seed)
    return profile_interleaved(target, drafts, out_dir, options, device=device, timeout=timeout or None, force=force,
                               trace=trace, nsys_args=nsys_args,
                               repeat=DEFAULT_REPEAT if repeat is None else repeat, precision=precision,
                               max_repeat=max_repeat, replicas=DEFAULT_REPLICAS if replicas is None else replicas,
                               speculate=speculate, speculative_config=speculative_config, measure=measure,
                               finish=done, profiler=profiler)


# The files every profile's report writes (`report.write_report`): a file of the user's at one of these names in -o is
# refused before the first run, not after the runs replaced the traces beside it.
REPORT_NAMES = ("report.md", "report.json", "summary.csv", "coefficients.csv", "forwards.csv", "kernel_summary.csv",
                "categories.csv", "diagnosis.csv")


def check_report_writable(out_dir: str | os.PathLike) -> None:
    """InputError when the report `profile` ends with could not be written in `out_dir` (`publishing.check_publishable`:
    a file of the user's where it goes), before any run."""
    from ..files import publishing
    from ..report.report_files import MANIFEST

    publishing.check_publishable(out_dir, REPORT_NAMES, manifest=MANIFEST, what="the profile's report")


def finish(run: ProfileOutcome, options: BenchOptions | None = None, *, acceptance: Sequence[float | str] = (),
           seed: int = 0) -> ProfileOutcome:
    """The end of `profile`: the analysis of the directory the runs wrote, as `nsys_cc.analyze(run.out_dir)` makes it
    (`analysis.coefficient.of_profile.analyze_profile`), and its report with the runs' notes and tables (the machine's
    state), when the runs left enough to analyse (`run.analysable`, `launch.results.conclude`). Returns `run`, its
    `result` and `report` set."""
    from ..analysis.coefficient.of_profile import analyze_profile
    from ..report import write_report

    if not run.analysable:
        return run
    output_len = None if options is None else options.output_len
    with progress.step(run.step, always=True):
        run.result = analyze_profile(run.out_dir, output_len=output_len, acceptance=acceptance, seed=seed)
    run.report = write_report(run.result, run.out_dir, extra_notes=run.notes, extra_tables=run.tables or None)
    return run


def dry_run(target: str, drafts: Sequence[str], out_dir: str | os.PathLike, options: BenchOptions | None = None, *,
            device: str = "auto", trace: str | None = None, nsys_args: Sequence[str] = (),
            speculate: Sequence[int] = (), speculative_config: str | None = None, target_tp: int = 1,
            draft_tp: int = 1, repeat: int | None = None, precision: float | None = None,
            max_repeat: int | None = None, replicas: int | None = None, separate: bool = False,
            profiler: str = "nsys") -> str:
    """The exact commands `profile` would run (runs nothing, creates nothing): an interleaved run's, or one block
    per model (`plan.dry_run`)."""
    check_profiler(profiler, target_tp=target_tp, draft_tp=draft_tp, trace=trace, nsys_args=nsys_args)
    check_out_dir(out_dir, "the profile run")  # what the run would refuse (a link as out_dir: every verb alike)
    options = DEFAULT_OPTIONS if options is None else options
    if not interleaves(speculate, speculative_config, target_tp, draft_tp, separate, drafts):
        refuse_repeat(repeat, precision, max_repeat, replicas, separate, speculative_config, speculate)
        return plan.dry_run(target, drafts, out_dir, options, device=device, trace=trace, nsys_args=nsys_args,
                            speculate=speculate, speculative_config=speculative_config, target_tp=target_tp,
                            draft_tp=draft_tp, profiler=profiler)
    nsys = nsys_for(profiler, shown_only=True)
    return dry_run_interleaved(target, drafts, out_dir, options, nsys=nsys,
                               gpu=plan.uses_gpu(device), trace=trace, nsys_args=nsys_args,
                               repeat=DEFAULT_REPEAT if repeat is None else repeat, precision=precision,
                               max_repeat=max_repeat, replicas=DEFAULT_REPLICAS if replicas is None else replicas,
                               speculate=speculate, speculative_config=speculative_config, profiler=profiler)


def check_profiler(profiler: str, *, target_tp: int = 1, draft_tp: int = 1, trace: str | None = None,
                   nsys_args: Sequence[str] = ()) -> None:
    """InputError (naming the parameter) unless `profiler` is "nsys" or "torch", and for "torch" what its route cannot
    do: tensor-parallel models (their ranks run in vLLM's worker processes, out of reach of the profiler that runs in
    the benchmark's process) and nsys's own options."""
    known_profiler(profiler)
    if profiler != "torch":
        return
    for param, tp in (("target_tp", target_tp), ("draft_tp", draft_tp)):
        if tp != 1:
            raise InputError(f"profiler torch with {param} {tp}: the torch profiler runs in the benchmark's process "
                             "and does not see vLLM's tensor-parallel workers; profile tensor-parallel models with "
                             "profiler nsys", param=param)
    if trace is not None or list(nsys_args):
        which = "trace" if trace is not None else "nsys_args"
        raise InputError(f"{which} is an nsys option, which the torch route does not take ({ENV_TORCH_SETTINGS} "
                         "chooses what its profiler records)", param=which)


def interleaves(speculate: Sequence[int] = (), speculative_config: str | None = None, target_tp: int = 1,
                draft_tp: int = 1, separate: bool = False, drafts: Sequence[str] = ("draft",)) -> bool:
    """Whether `profile` makes interleaved runs (every model in one process): yes unless asked for one process per
    model (`separate`), or a model runs on several tensor-parallel ranks, or a speculative config runs without a plain
    draft to compare (ngram alone). Speculative engines join the interleaved runs."""
    del speculate, speculative_config
    return not (separate or target_tp != 1 or draft_tp != 1 or not drafts)


def refuse_repeat(repeat: int | None, precision: float | None, max_repeat: int | None, replicas: int | None,
                  separate: bool, speculative_config: str | None, speculate: Sequence[int]) -> None:
    """InputError when runs are asked for where one process per model runs (`interleaves` is False)."""
    if (repeat or 1) != 1 or precision is not None or max_repeat is not None or (replicas or 1) != 1:
        why = ("separate" if separate else "speculative_config without drafts"
               if speculative_config is not None and not speculate else "target_tp")
        raise InputError(f"repeat, precision, max_repeat and replicas need interleaved runs, which {why} does not "
                         "make yet (one process per model)", param="repeat")


def choose(drafts: Sequence[str], *, speculate: Sequence[int] = (), speculative_config: str | None = None,
           target_tp: int = 1, draft_tp: int = 1, repeat: int | None = None, precision: float | None = None,
           max_repeat: int | None = None, replicas: int | None = None, separate: bool = False,
           profiler: str = "nsys") -> bool:
    """Whether `profile` makes interleaved runs with these arguments (`interleaves`), after the checks `profile` makes
    of them before it starts (InputError): for a caller that checks many profiles before any runs (a sweep's
    cells)."""
    check_profiler(profiler, target_tp=target_tp, draft_tp=draft_tp)
    if interleaves(speculate, speculative_config, target_tp, draft_tp, separate, drafts):
        validate(DEFAULT_REPEAT if repeat is None else repeat, precision, max_repeat,
                 DEFAULT_REPLICAS if replicas is None else replicas)
        return True
    refuse_repeat(repeat, precision, max_repeat, replicas, separate, speculative_config, speculate)
    return False
