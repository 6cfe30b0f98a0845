"""The profile workflow: profile the target and every draft with vLLM under the request's recorder, then analyse the
directory written as `nsys_cc.analyze(out_dir)` analyses it and write its report. The facade's `nsys_cc.profile`,
`nsys-cc profile` and every sweep cell (`sweep.cell.run_cell`: a cell's directory is a profile directory) call
`profile` with one `nsys_cc.request.ProfileRequest`; `dry_run` prints the commands it would run.

The runs are made by the one launch orchestrator (`launch.orchestrator`) with one of its two strategies (`strategy`):
interleaved runs by default (`launch.interleaved`: every model in one process per run, `repeat` runs, c pooled over
them); one process per model (`launch.separate`) with `separate`, for tensor-parallel models and for a speculative
config without drafts (`interleaves`). Nothing under `launch/` builds an analysis: the precision loop's c between runs
is handed down as `measure`, the analysis and report of the directory as `finish`.

`profiler` picks what records the runs (`launch.recorders`): "nsys" (the default: NVTX ranges, an export to SQLite)
or "torch" (vLLM's torch profiler in the benchmark's own process, the plugin's ranges as torch.profiler ranges: no
nsys needed); the runs, the precision loop, `speculate` and the analysis are the same on both (`check_profiler` says
what a recorder refuses).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Sequence

from .. import inputs, progress
from ..errors import InputError
from ..files.folder import check_out_dir
from ..launch import orchestrator, recorders
from ..launch.interleaved import DEFAULT_REPEAT, DEFAULT_REPLICAS, Interleaved, validate
from ..launch.results import ProfileOutcome
from ..launch.separate import Separate
from ..request import DEFAULT_TIMEOUT_S, ProfileRequest


def profile(request: ProfileRequest) -> ProfileOutcome:
    """The runs (interleaved, or one process per model: module docstring), then `finish`: the analysis of the
    directory and its report. The request's fields are `nsys_cc.profile`'s arguments (its docstring says each),
    checked before minutes of profiling (`check`). Returns the `ProfileOutcome`, its `result` and `report` set when the
    runs left enough to analyse."""
    check(request)
    check_report_writable(request.out_dir)
    check_out_dir(request.out_dir, "the profile run")
    return orchestrator.run(strategy(request, measured=True), finish=functools.partial(finish, request=request))


def dry_run(request: ProfileRequest) -> str:
    """The exact commands `profile` would run (runs nothing, creates nothing): an interleaved run's, or one block
    per model; what the run would refuse of the request is refused here too (`check`)."""
    check(request)
    check_out_dir(request.out_dir, "the profile run")  # what the run would refuse (a link as out_dir: every verb alike)
    return orchestrator.dry_run(strategy(request, dry=True))


def check(request: ProfileRequest) -> None:
    """What `profile` refuses of a request before minutes of profiling (InputError naming the field, which is the
    flag): the seed, the acceptance rates, what the recorder cannot do, the timeout."""
    from ..analysis.coefficient.arguments import check_seed
    from ..analysis.profile_dir.acceptance import parse_alphas

    check_seed(request.seed)
    parse_alphas(list(request.acceptance))
    check_profiler(request.profiler, target_tp=request.target_tp, draft_tp=request.draft_tp, trace=request.trace,
                   nsys_args=request.nsys_args)
    # the one rule for every bound: nan, inf or a negative number never reaches the benchmark
    if isinstance(request.timeout, str) and not request.timeout.strip():
        raise InputError(f"timeout is empty ({request.timeout!r}): give a number of seconds (0: no limit)",
                         param="timeout")
    inputs.seconds(request.timeout, "timeout", default=DEFAULT_TIMEOUT_S, param="timeout")


def strategy(request: ProfileRequest, *, measured: bool = False, dry: bool = False) -> Interleaved | Separate:
    """The orchestrator's strategy for `request` (`interleaves`), its arguments checked (InputError); `measured`: the
    precision loop's c between runs handed down (`analysis.coefficient.of_profile.decode_precision_of`); `dry`: for a
    dry run (the recorder's binary as shown, not required)."""
    if not interleaves(request):
        refuse_repeat(request)
        return Separate(request, dry=dry)
    measure = None
    if measured:
        from ..analysis.coefficient.of_profile import decode_precision_of

        measure = functools.partial(decode_precision_of, output_len=request.output_len, seed=request.seed)
    return Interleaved(request, measure=measure, dry=dry)


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


def finish(run: ProfileOutcome, request: ProfileRequest | None = None) -> ProfileOutcome:
    """The end of `profile`: the analysis of the directory the runs wrote, as `nsys_cc.analyze(run.out_dir)` makes it
    (`analysis.coefficient.of_profile.analyze_profile`, with the request's output length, acceptance rates and seed),
    and its report with the runs' notes and tables (the machine's state), when the runs left enough to analyse
    (`run.analysable`: the strategy's `conclude`). Returns `run`, its `result` and `report` set."""
    from ..analysis.coefficient.of_profile import analyze_profile
    from ..analysis.profile_dir.acceptance import parse_alphas
    from ..report import write_report

    if not run.analysable:
        return run
    output_len = None if request is None else request.output_len
    acceptance, seed = ([], 0) if request is None else (parse_alphas(list(request.acceptance)), request.seed)
    with progress.step(run.step, always=True):
        run.result = analyze_profile(run.out_dir, output_len=output_len, acceptance=acceptance, seed=seed)
    run.report = write_report(run.result, run.out_dir, extra_notes=run.notes, extra_tables=run.tables or None)
    return run


def check_profiler(profiler: str, *, target_tp: int = 1, draft_tp: int = 1, trace: str | None = None,
                   nsys_args: Sequence[str] = ()) -> None:
    """InputError (naming the parameter) unless `profiler` names a recorder (`launch.recorders.NAMES`), and for what
    that recorder cannot do (`Recorder.refuse`: the torch profiler takes no tensor-parallel models and no nsys
    options)."""
    recorders.get(profiler).refuse(target_tp=target_tp, draft_tp=draft_tp, trace=trace, nsys_args=nsys_args)


def interleaves(request: ProfileRequest) -> bool:
    """Whether `profile` makes interleaved runs (every model in one process): yes unless asked for one process per
    model (`separate`), or a model runs on several tensor-parallel ranks, or a speculative config runs without a plain
    draft to compare (ngram alone). Speculative engines join the interleaved runs."""
    return not (request.separate or request.target_tp != 1 or request.draft_tp != 1 or not request.drafts)


def refuse_repeat(request: ProfileRequest) -> None:
    """InputError when runs are asked for where one process per model runs (`interleaves` is False)."""
    if ((request.repeat or 1) != 1 or request.precision is not None or request.max_repeat is not None
            or (request.replicas or 1) != 1):
        why = ("separate" if request.separate else "speculative_config without drafts"
               if request.speculative_config is not None and not request.speculate else "target_tp")
        raise InputError(f"repeat, precision, max_repeat and replicas need interleaved runs, which {why} does not "
                         "make yet (one process per model)", param="repeat")


def choose(request: ProfileRequest) -> bool:
    """Whether `profile` makes interleaved runs of `request` (`interleaves`), after the checks `profile` makes of
    them before it starts (InputError): for a caller that checks many profiles before any runs (a sweep's cells)."""
    check_profiler(request.profiler, target_tp=request.target_tp, draft_tp=request.draft_tp)
    if interleaves(request):
        validate(DEFAULT_REPEAT if request.repeat is None else request.repeat, request.precision, request.max_repeat,
                 DEFAULT_REPLICAS if request.replicas is None else request.replicas)
        return True
    refuse_repeat(request)
    return False
