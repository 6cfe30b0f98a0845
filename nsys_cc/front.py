"""The library's front door: `nsys_cc.analyze(source, …)` takes what `nsys-cc analyze` takes and returns the result.

`source` is one of:
- a trace (`.sqlite` or `.nsys-rep`) with `drafts`, or a list [target, *drafts] — `cost_coefficient`;
- a profile's output directory as it is (interleaved runs, one process per model; plain, speculative,
  tensor-parallel) — `analysis.coefficient.of_profile.analyze_profile`: the numbers `profile` reported;
- a sweep directory or a manifest file (.json/.csv) of many trace sets — `sweep.run.analyze_many`, in parallel (a
  local process pool, `jobs`, or a Dask cluster, `scheduler`): an `AnalysisResult` (the tidy table, the failures).

What the source is, is decided once (`analysis.coefficient.source_kinds.decide`; whether a path is many trace sets
is the sweep's manifest's to say, `_is_many`), then analysed as that kind. It sits above the floors it chooses between
(the analysis, the sweeps); the CLI's `analyze` parses its flags, calls it once and renders what it returns.

`profile(target, drafts, out_dir, …)` or `profile(request)` (`nsys_cc.profile`, `nsys-cc profile`) is the same door
after a run: its docstring, the request its arguments make (`nsys_cc.request.ProfileRequest`) and one call into the
profile workflow (`nsys_cc.workflows.profile`: the runs, then the analysis of the
directory they wrote as `analyze(out_dir)` makes it, and its report), which each sweep cell calls as well.
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from .arguments import is_one, many
from .errors import InputError, NsysCCError

if TYPE_CHECKING:
    from .analysis.coefficient.result import CostCoefficientResult
    from .launch.results import ProfileOutcome
    from .request import BenchOptions, ProfileRequest
    from .sweep.table import AnalysisResult

__all__ = ["ManifestError", "analyze", "profile"]

# The options of one trace set: a manifest sets its range and output length per set.
ONE_SET_ONLY = ("names", "range_name", "skip_ranges", "output_len", "engines", "acceptance", "metrics_dump",
                "spec_metrics")


class ManifestError(InputError):
    """A manifest or sweep directory that cannot be read: its message names the manifest's keys (`output_len`),
    not a verb's flags, and the CLI says it as it is."""

    said_as_is = True


def analyze(source, drafts: str | os.PathLike | Sequence[str | os.PathLike] | None = None, *,
            names: Sequence[str] | None = None, range_name: str | Sequence[str] | Mapping[str, str] | None = None,
            skip_ranges: int | None = None, output_len: int | None = None, engines: Sequence[str | None] | None = None,
            acceptance: float | str | Sequence[float | str] = (), metrics_dump: str | os.PathLike | None = None,
            spec_metrics: Mapping | None = None, seed: int = 0, jobs: int | None = None,
            scheduler: str | None = None, mixed_platforms: bool = False,
            ) -> CostCoefficientResult | AnalysisResult:
    """c of each draft against its target, from whatever `source` is (module docstring).

    Args:
        source: the target's trace (then `drafts`), a list [target, *drafts], a profile's output directory, a sweep
            directory or a manifest file.
        drafts: the drafts' traces (and speculative runs) after a target's trace; none with a directory or manifest.
        names: the models' names, as for `cost_coefficient` (refused with a directory: a profile names its models).
        range_name: the forward range, as for `cost_coefficient` (one name with a profile directory).
        skip_ranges: as for `cost_coefficient`.
        output_len: as for `cost_coefficient`.
        engines: as for `cost_coefficient` (refused with a profile directory).
        acceptance: as for `cost_coefficient`.
        metrics_dump: as for `cost_coefficient`.
        spec_metrics: as for `cost_coefficient` (refused with a profile directory).
        seed: as for `cost_coefficient`; the only one of these that applies to many sets (a manifest sets range and
            output length per set).
        jobs: many trace sets: local worker processes (default: one per CPU).
        scheduler: many trace sets: the address of a Dask scheduler to analyse them on instead.
        mixed_platforms: as for `cost_coefficient` (a CPU trace compared with a GPU trace: refused unless True).
    Returns:
        A `CostCoefficientResult`, or for many trace sets an `AnalysisResult` (`.table`, one tidy row per set, draft,
        phase and metric; `.failures`, the sets that could not be analysed and why).
    """
    from .analysis.coefficient import source_kinds

    if drafts is not None and not is_one(drafts):
        drafts = many(drafts, "drafts")  # read once: a generator was consumed here and then seen empty
    given = source_kinds.decide(source, drafts, is_many=_is_many)  # what the source is: decided here, once
    if given.kind == source_kinds.MANY:
        passed = {"names": names, "range_name": range_name, "skip_ranges": skip_ranges, "output_len": output_len,
                  "engines": engines, "acceptance": acceptance, "metrics_dump": metrics_dump,
                  "spec_metrics": spec_metrics}
        for param in ONE_SET_ONLY:
            value = passed[param]
            if value is not None and not (isinstance(value, (tuple, list)) and not value):
                raise InputError(f"{param} applies to one trace set; a manifest sets range_name and output_len "
                                 "per set", param=param)
        if mixed_platforms:
            raise InputError("mixed_platforms applies to one trace set (a target and its drafts)",
                             param="mixed_platforms")
        return _many(given.source, seed=seed, jobs=jobs, scheduler=scheduler)
    for param, value in (("jobs", jobs), ("scheduler", scheduler)):
        if value is not None:
            raise InputError(f"{param} applies to many trace sets (a sweep directory or a manifest)", param=param)
    return source_kinds.analyze_given(given, names=names, range_name=range_name, skip_ranges=skip_ranges,
                                      output_len=output_len, engines=engines, acceptance=acceptance,
                                      metrics_dump=metrics_dump, spec_metrics=spec_metrics, seed=seed,
                                      mixed_platforms=mixed_platforms)


def _is_many(path: str | os.PathLike) -> bool:
    """Whether a path given alone (no profile's output directory) is many trace sets: a directory holding a sweep's
    manifest, or a manifest file (a .json or .csv file whose content is no trace: `sweep.manifest.is_many`). A
    directory without one is a folder of traces (`source_kinds.traces_of_folder`)."""
    from .sweep.manifest import MANIFEST_NAME, is_many

    if os.path.isdir(path):
        return os.path.isfile(os.path.join(path, MANIFEST_NAME))
    return is_many(path)


def _many(source, *, seed: int, jobs: int | None, scheduler: str | None) -> AnalysisResult:
    from .sweep.manifest import trace_sets
    from .sweep.run import analyze_many

    try:
        sets = trace_sets(source)
    except NsysCCError as exc:
        raise ManifestError(str(exc)) from None
    return analyze_many(sets, seed=seed, jobs=jobs, scheduler=scheduler)


def profile(target: str | ProfileRequest, drafts: str | Sequence[str] = (), out_dir: str | os.PathLike = "out/profile",
            options: BenchOptions | None = None, *, device: str = "auto", timeout: float | None = None,
            force: bool = False, trace: str | None = None, nsys_args: Sequence[str] = (),
            acceptance: float | str | Sequence[float | str] = (), seed: int = 0, speculate: Sequence[int] = (),
            speculative_config: str | None = None, target_tp: int = 1, draft_tp: int = 1, repeat: int | None = None,
            precision: float | None = None, max_repeat: int | None = None, replicas: int | None = None,
            separate: bool = False, profiler: str = "nsys") -> ProfileOutcome:
    """Profile the target and every draft with vLLM under nsys (or its torch profiler), then analyse and report: what
    `nsys-cc profile` does.

    By default every model is timed in one process per run (their iterations interleaved, `replicas` engines of each),
    `repeat` runs one after another, c pooled over the runs with an interval across them; speculative runs
    (`speculate`, `speculative_config` with drafts) join the same processes. One process per model with `separate`,
    for tensor-parallel models and for a speculative config without drafts. The analysis is the one
    `analyze(out_dir)` makes of the directory written, and its report is written there. Each cell of a sweep is this
    same workflow (`nsys_cc.workflows.profile`).

    The arguments make one request (`nsys_cc.request.ProfileRequest`, the fields of their names, `options` unpacked
    into its benchmark fields), which may be given instead: `profile(ProfileRequest("t", ("d",), "out/p",
    output_len=8))`. The request is stored in the directory's records (`status.json`, each run's `done.json`).

    Args:
        target: the target model: a shipped shape (e.g. `llama-2-7b-shape`, `tiny-llama-target`), a directory with a
            config.json, or a Hugging Face id; or a whole `ProfileRequest` (then nothing else).
        drafts: the draft models, same forms (none with a speculative config that needs no draft model: ngram).
        out_dir: where traces, vLLM's latencies, logs, status.json and the report go (created; a rerun resumes).
        options: the benchmark's options (`nsys_cc.request.BenchOptions`; default 128 prompt and 32 output tokens, 5
            warm-up and 5 measured iterations of batch 1).
        device: "auto" (GPU when `nvidia-smi -L` lists one), "cpu" or "gpu".
        timeout: seconds allowed per run (per model with one process each) for the benchmark and for the export
            (default 1800; 0: no limit).
        force: profile again what an earlier call completed in `out_dir`.
        trace: nsys `-t` instead of the platform default.
        nsys_args: extra `nsys profile` options.
        acceptance: α values to judge the speedup with (the analysis').
        seed: the bootstrap intervals' seed (checked before the runs).
        speculate: γ values: also run the target speculatively with each draft at each γ.
        speculative_config: vLLM's speculative config JSON: the base of the `speculate` runs, or alone one more run.
        target_tp: tensor-parallel ranks of the target (one process per model when not 1).
        draft_tp: tensor-parallel ranks of each draft.
        repeat: interleaved runs (≥ 1; default 6).
        precision: keep adding runs until every draft's decode c interval lies within ±precision·c (e.g. 0.05), at
            most `max_repeat` runs (default 30).
        max_repeat: the most runs a `precision` may make.
        replicas: engines of each model in a run (default 2).
        separate: one process per model (repeat 1 only).
        profiler: what records the runs (`nsys_cc.launch.recorders`): "nsys" (the default), or "torch": vLLM's torch
            profiler in the benchmark's process, the plugin's ranges as torch.profiler ranges, no nsys needed (no
            tensor parallel, no trace/nsys_args; docs/profile.md).
    Returns:
        A `launch.results.ProfileOutcome`: the runs, the notes, and `result` and `report` when the target and a draft
        (or a speculative run) completed.
    """
    given = dict(locals())  # the arguments, named as the request's fields
    from .request import ProfileRequest
    from .workflows import profile as workflow

    if isinstance(target, ProfileRequest):
        defaults = {k: p.default for k, p in inspect.signature(profile).parameters.items()}
        also = [k for k, v in given.items() if k != "target" and not _is_default(v, defaults[k])]
        if also:
            raise InputError(f"give a ProfileRequest alone or the arguments that make one, not both (also given: "
                             f"{', '.join(also)})", param=also[0])
        return workflow.profile(target)
    return workflow.profile(ProfileRequest.of(**given))


def _is_default(value, default) -> bool:
    try:
        return value is default or bool(value == default)
    except (TypeError, ValueError):  # an array, compared element by element
        return False
