"""The cost coefficient c = the time the draft takes to make one token ÷ the time the target takes (a token: its
forward, its logits and its sampling; Leviathan et al. 2023, Def. 3.7), from one trace per model.

For every model (one trace each) the forward ranges are selected by name, warm-up is dropped and each forward gets a
phase (`forwards.phases`), the per-forward metrics of the registry (`metrics.METRICS`, from `forwards.projection`)
and its token's logits and sampling (`token`); when the ranges lie in several processes (tensor-parallel ranks) each
forward is one range per rank (`forwards.ranks`). c per draft, phase and metric is the ratio of the tokens' medians
with a seeded 95 % bootstrap interval (`stats`). A trace that holds several models (one interleaved process of
`profile`) is read once per model inside the model's engine windows (`engines`, `forwards.engines`); a trace read
whole that holds several engines is refused (`model.InterleavedTraceError`): its models' forwards would mix. Several
runs of every model: `over_runs.cost_coefficient_runs`.

The jobs, one module each: the arguments checked (`arguments`), the traces of a run read once (`read_run`), one
model read of one trace (`model`), the result assembled (`assemble`: plain data, `result`). This module is the
entry: `cost_coefficient`, and `target_alone` for one trace described without a draft.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ...arguments import is_one, many, one_path, path_of
from ...errors import InputError
from ...trace.pages import with_small_pages
from ...trace.source import Trace
from ..profile_dir.acceptance import alphas_with_source
from .arguments import (
    PathLike,
    alpha_intervals,
    check_distinct,
    check_range_arguments,
    check_seed,
    engine_per_trace,
    model_names,
    range_name_per_trace,
    spec_metrics_per_model,
)
from .assemble import assemble
from .mismatch import check_platforms
from .read_run import read_run
from .result import CostCoefficientResult

__all__ = ["cost_coefficient", "target_alone"]


@with_small_pages
def cost_coefficient(
    target: PathLike | Trace,
    drafts: PathLike | Trace | Sequence[PathLike | Trace],
    *,
    names: Sequence[str] | None = None,
    range_name: str | Sequence[str] | Mapping[str, str] | None = None,
    skip_ranges: int | None = None,
    output_len: int | None = None,
    acceptance: float | str | Sequence[float | str] = (),
    metrics_dump: PathLike | None = None,
    seed: int = 0,
    spec_metrics: Mapping[str, PathLike] | None = None,
    engines: Sequence[str | None] | None = None,
    mixed_platforms: bool = False,
) -> CostCoefficientResult:
    """Measure c of each draft against the target, from one trace (`.sqlite` or `.nsys-rep`) per model.

    Args:
        target: the target model's trace (one path; a list holding one is that path), or a `Trace` already open
            (`open_trace`: read as it is and left open), as each draft may be.
        drafts: the draft models' traces: one path, or a sequence of paths (at least one). Speculative-decoding runs
            may follow (traces holding draft-model forward ranges, recognised by them; with `engines`, the speculative
            engines of an interleaved run, recognised by those inside their windows): they are measured in place
            (`speculative`; the result's `speculative`), each belonging to the draft named before `.spec-g<γ>` in
            its label when that is a draft, else to the only draft.
        names: labels for [target, *drafts], each once; default: the file names.
        range_name: the NVTX range around each forward (`model_executable()`; vLLM's own: `gpu_model_runner: forward`):
            one name for every trace, a sequence with one per trace ([target, *drafts]), or a mapping from a model's
            label to its name (others get the default). A trace may be given twice with two different ranges. The
            default (None), settled per trace: the plugin's `model_executable()`, else vLLM's own forward scope (in
            a PyTorch-profiler trace, vLLM's step annotations), with a note (`forwards.ranges.forward_range`).
        skip_ranges: drop the first N matching ranges of each model (default: use the trace's warm-up markers).
        output_len: the benchmark's output length, to tell prefill from decode when ranges carry no payload.
        acceptance: acceptance rates α at which to judge each draft (speedup verdicts): a number, a sequence of
            numbers, or a string "0.6,0.8"; empty for none.
        metrics_dump: a vLLM spec-decode metrics dump (`acceptance.dump_metrics`); its i.i.d. α is judged too.
        seed: seed of the bootstrap intervals.
        spec_metrics: vLLM metrics dump per speculative trace path or model label (default: `X.metrics.json`
            beside `X.sqlite`; for an engine of an interleaved run, `<label>.metrics.json` in the run's folder); a key
            that names no trace given and no label is refused.
        engines: for traces that hold several models (an interleaved run of `profile`), the engine label of each
            trace's model ([target, *drafts]; None: the whole trace): only ranges inside that engine's
            `nsys_cc:engine` windows are read (`forwards.engines`). One trace may then be given once per model.
        mixed_platforms: compare a CPU trace with a GPU trace anyway (refused by default: c would divide CPU time
            by a GPU's launch time; `mismatch`). Whatever differs between the traces — GPU, engine, ranks, step kind,
            phase — is said in a "warning:" note and in the result's `mismatches`.
    Returns:
        A `CostCoefficientResult` (see its docstring for every table and column).
    """
    opened: dict[str, Trace] = {}  # traces given open (`open_trace`): read as they are, left open

    def path_of_trace(value, param: str) -> str:
        if isinstance(value, Trace):
            opened[value.path] = value
            return value.path
        return path_of(value, param)

    if isinstance(target, Trace) or (not is_one(target) and len(many(target, "target")) == 1):
        paths = [path_of_trace(target if isinstance(target, Trace) else many(target, "target")[0], "target")]
    else:
        paths = [one_path(target, "target", plural="drafts")]
    paths += [path_of_trace(d, "drafts") for d in many(drafts, "drafts")]
    names = None if names is None else [str(n) for n in many(names, "names")]
    if len(paths) < 2:
        raise InputError("give at least one draft trace after the target", param="drafts")
    check_range_arguments(skip_ranges, output_len)
    check_seed(seed)
    alphas, alpha_note = alphas_with_source(acceptance, metrics_dump)
    alpha_cis = alpha_intervals(alphas, metrics_dump)
    per_trace = engine_per_trace(engines, len(paths))
    labels = model_names(paths, names)
    if not names and any(per_trace):  # a model read by its engine's windows is called by its engine's label
        labels = [engine or label for engine, label in zip(per_trace, labels)]
    range_names = range_name_per_trace(range_name, paths, labels)
    check_distinct(paths, range_names, per_trace)
    dumps = spec_metrics_per_model(spec_metrics, paths, labels, per_trace)
    read = read_run(paths, labels, range_names, per_trace, skip_ranges=skip_ranges, output_len=output_len, dumps=dumps,
                     run=1, opened=opened)
    models = [read.models[i] for i in sorted(read.models)]
    check_platforms(models, mixed_platforms)
    spec = {i: [read.spec[i]] for i in sorted(read.spec)}
    plain_steps = [] if read.plain_steps is None else [read.plain_steps]
    return assemble(models, labels, plain_steps, spec, alphas, alpha_note, alpha_cis, seed, output_len, read.notes,
                     read.share)


def target_alone(target: PathLike, *, range_name: str | Sequence[str] | Mapping[str, str] | None = None,
                 skip_ranges: int | None = None, output_len: int | None = None,
                 seed: int = 0) -> CostCoefficientResult:
    """One trace described alone — its forwards per phase on every metric, its token, launch time against GPU time
    (`gpu_time`) — with no draft and no c: what `nsys_cc.analyze` gives for one PyTorch-profiler trace of vLLM
    (`source_kinds`), whose steps name their phases. A speculative run alone has no plain target to be measured against:
    InputError."""
    path = one_path(target, "target", plural="drafts")
    check_range_arguments(skip_ranges, output_len)
    check_seed(seed)
    labels = model_names([path], None)
    read = read_run([path], labels, range_name_per_trace(range_name, [path], labels), [None], skip_ranges=skip_ranges,
                     output_len=output_len, dumps={}, run=1)
    models = [read.models[i] for i in sorted(read.models)]
    if models[0].speculative:
        raise InputError(f"{path} is a speculative run: give the plain target's trace first, then the drafts' and this "
                         "one (nsys_cc.analyze(target, [draft, spec_run]))", param="source")
    return assemble(models, labels, [], {}, [], None, [], seed, output_len, read.notes, read.share)

