"""The analysis of one source as `nsys-cc analyze` takes it: trace files, or a profile's output directory as it is.

- traces: `coefficient.cost_coefficient(target, drafts, …)` (speculative runs among the drafts measured in place);
- a profile's output directory (`outputs`: what `profile` left), read as `profile` itself analyses it at its end —
  interleaved runs: every completed run pooled, each model by its engine's windows, the speculative engines measured
  in place against the same runs' plain target (`coefficient.cost_coefficient_runs`); one process per model (plain,
  speculative, tensor-parallel): the completed target, drafts and speculative runs (`cost_coefficient`). Either way
  the forward share of each model against vLLM's latencies is in the result (`share`).

The forward range is the caller's `range_name`, else the plugin's or vLLM's own scope, decided per trace as `profile`
decided it (`ranges.forward_range`, with its note) and passed down. Many trace
sets (a sweep directory, a manifest) are `nsys_cc.front.analyze`'s: it runs them in parallel, above this floor.
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Mapping, Sequence

from ...arguments import is_one, many
from ...errors import InputError
from ..metrics import ALL, DECODE, WALL
from ..profile_dir import outputs
from ..profile_dir.spec_labels import LABEL_RE, MODEL_FREE_METHODS, proposes_without_model
from .measure import cost_coefficient
from .model import InterleavedTraceError
from .over_runs import cost_coefficient_runs
from .result import CostCoefficientResult

__all__ = ["analyze_profile", "analyze_source", "decode_precision", "decode_precision_of", "is_profile_output"]

is_profile_output = outputs.is_profile_output

# What names the models of traces given one by one: a profile's directory names them itself.
_TRACES_ONLY = ("names", "engines", "spec_metrics")


def analyze_source(source, drafts=None, *, names: Sequence[str] | None = None,
                   range_name: str | Sequence[str] | Mapping[str, str] | None = None,
                   skip_ranges: int | None = None, output_len: int | None = None,
                   engines: Sequence[str | None] | None = None, acceptance=(), metrics_dump=None,
                   spec_metrics: Mapping | None = None, seed: int = 0) -> CostCoefficientResult:
    """c of each draft against the target from `source`: a profile's output directory alone (`analyze_profile`),
    else the target's trace with `drafts` (`cost_coefficient`; the other arguments are its own). A list of traces
    as `source` alone is [target, *drafts]."""
    listed = [] if drafts is None else many(drafts, "drafts")
    if not listed and is_one(source) and isinstance(source, (str, os.PathLike)) and outputs.is_profile_output(source):
        given = {"names": names, "engines": engines, "spec_metrics": spec_metrics}
        for param in _TRACES_ONLY:
            if given[param]:
                raise InputError(f"{param} applies to traces given one by one; a profile directory labels its models "
                                 "itself", param=param)
        if range_name is not None and not isinstance(range_name, str):
            ranges = list(range_name.values()) if isinstance(range_name, Mapping) else many(range_name, "range_name")
            if len(set(ranges)) > 1:
                raise InputError("range_name: give one forward range for a profile directory (its models were "
                                 "profiled alike), not one per model", param="range_name")
            range_name = ranges[0] if ranges else None
        return analyze_profile(source, range_name=range_name, skip_ranges=skip_ranges, output_len=output_len,
                               acceptance=acceptance, metrics_dump=metrics_dump, seed=seed)
    if not listed and not is_one(source):  # [target, *drafts] as one list
        items = many(source, "source")
        source, listed = (items[0], items[1:]) if items else (source, [])
    notes: list[str] = []
    if not listed and isinstance(source, (str, os.PathLike)):
        source, listed, notes = _one_path(os.fspath(source))
        if not listed:  # one PyTorch-profiler trace alone: its steps described, no c (`coefficient.target_alone`)
            from .measure import target_alone

            result = target_alone(source, range_name=range_name, skip_ranges=skip_ranges, output_len=output_len,
                                  seed=seed)
            return dataclasses.replace(result, notes=(*result.notes, *notes))
    try:
        if notes:
            result = cost_coefficient(source, listed, range_name=range_name, skip_ranges=skip_ranges,
                                      output_len=output_len, acceptance=acceptance, metrics_dump=metrics_dump,
                                      seed=seed)
            return dataclasses.replace(result, notes=(*notes, *result.notes))
        return cost_coefficient(source, listed, names=names, range_name=range_name, skip_ranges=skip_ranges,
                                output_len=output_len, acceptance=acceptance, metrics_dump=metrics_dump, seed=seed,
                                spec_metrics=spec_metrics, engines=engines)
    except InterleavedTraceError:
        # each trace holds every model of one interleaved run: analysed as runs (as `profile` analyses them), never
        # pooled as one model's forwards; names, engines and spec_metrics label the models of one run's traces
        items = [source, *listed]
        if names or engines or spec_metrics or not all(isinstance(i, (str, os.PathLike)) for i in items):
            raise
        return cost_coefficient_runs([os.fspath(i) for i in items], range_name=range_name, skip_ranges=skip_ranges,
                                     output_len=output_len, acceptance=acceptance, metrics_dump=metrics_dump,
                                     seed=seed)


_GLOB = set("*?[")


def _one_path(source: str) -> tuple[str, list[str], list[str]]:
    """A single path given alone, as (target, drafts, notes): a glob pattern that is no file is expanded (sorted: the
    runs `out/run-*/trace.sqlite` of a profile); a folder of traces is read when its speculative runs tell the target
    (`traces_of_folder`); a path that does not exist, a folder that cannot be read so, or one trace alone are errors
    that say which."""
    import glob

    if not os.path.exists(source) and _GLOB & set(source):
        found = sorted(glob.glob(source))
        if not found:
            raise InputError(f"{source}: no file matches this pattern", param="source")
        if len(found) > 1 and not all(_holds_engines(f) for f in found):
            # plain traces: a pattern's order says nothing of which one is the target
            raise InputError(f"{source} matches {len(found)} traces ({', '.join(found[:4])}"
                             f"{', …' if len(found) > 4 else ''}), not all the runs of an interleaved profile: give "
                             "them in order, the target's first (nsys_cc.analyze(target, [draft, …]))",
                             param="source")
        return found[0], found[1:] if len(found) > 1 else _needs_drafts(found[0]), []
    if not os.path.exists(source):
        raise InputError(f"{source}: no such file or directory", param="source")
    if os.path.isdir(source):
        return traces_of_folder(source)
    if _is_torch_trace(source):  # vLLM's own torch trace: it says its steps' phases and GPU time itself
        return source, [], [f"{source} is one trace: its steps are described alone (no draft, no c); give the drafts' "
                            "traces after it for c (nsys_cc.analyze(target, [draft, …]))"]
    return source, _needs_drafts(source), []


def _is_torch_trace(path: str) -> bool:
    """Whether `path` is a PyTorch-profiler (Kineto) trace, as `open_trace` tells it (by content)."""
    from ...trace.kineto_events import looks_like_json

    try:
        return os.path.isfile(path) and looks_like_json(path)
    except InputError:
        return False


def traces_of_folder(folder: str) -> tuple[str, list[str], list[str]]:
    """(target, [drafts, speculative runs], notes) of a folder of traces that is no profile's output (one made with
    --separate-processes, kept without its status.json): each trace's label is its file name; the speculative runs
    (`<draft>.spec-g<γ>`) name their draft, and the one trace left that is neither is the target. InputError naming
    the traces when the folder says no more than that (no speculative run, or more than one trace left)."""
    from ..profile_dir.spec_labels import LABEL_RE

    files = sorted(f for f in os.listdir(folder) if f.endswith(".sqlite")) or \
        sorted(f for f in os.listdir(folder) if f.endswith(".nsys-rep"))
    labels = {f.removesuffix(".sqlite").removesuffix(".nsys-rep"): os.path.join(folder, f) for f in files}
    spec = {label: m.group("draft") for label in labels if (m := LABEL_RE.match(label))}
    drafts = sorted({d for d in spec.values() if d in labels})
    left = [label for label in labels if label not in spec and label not in drafts]
    if spec and len(left) == 1:
        target = left[0]
        note = (f"{folder}: no status.json — read as a folder of traces named by their labels: target {target} (the "
                f"one trace that is neither a speculative run nor the draft one names), draft(s) "
                f"{', '.join(drafts) or 'none (heads or proposers without a plain run)'}, speculative run(s) "
                f"{', '.join(sorted(spec))}")
        return labels[target], [labels[d] for d in drafts] + [labels[s] for s in sorted(spec)], [note]
    listed = f" (it holds {len(files)} trace(s): {', '.join(files[:6])}{', …' if len(files) > 6 else ''})" \
        if files else ""
    raise InputError(f"{folder} is neither a profile's output directory (no status.json, no completed run-<k>/ "
                     f"folder) nor a sweep directory (no manifest.json){listed}: give the target's trace, then the "
                     "drafts' (nsys_cc.analyze(target, [draft, …]))", param="source")


def _holds_engines(path: str) -> bool:
    """Whether the trace at `path` holds the engine windows of an interleaved run (two engines or more)."""
    from ...contract import ENGINE_RANGE_PREFIX
    from ...trace import open_trace
    from ..forwards.engines import engines

    if not os.path.isfile(path):
        return False
    with open_trace(path) as trace:
        return len(engines(trace.nvtx_ranges(prefixes=[ENGINE_RANGE_PREFIX], nesting=False))) >= 2


def _needs_drafts(source: str) -> list[str]:
    raise InputError(f"{source} is one trace: give the drafts' traces after the target's (nsys_cc.analyze(target, "
                     "[draft, …])), a profile's output directory, or the traces of interleaved runs", param="drafts")


def analyze_profile(path: str | os.PathLike, *, range_name: str | None = None, skip_ranges: int | None = None,
                    output_len: int | None = None, acceptance=(), metrics_dump=None,
                    seed: int = 0) -> CostCoefficientResult:
    """The analysis of a profile's output directory as it is (module docstring): the numbers `profile` reported at
    its end, and `nsys-cc analyze DIR` prints. InputError when it holds nothing to analyse (no completed target and
    draft)."""
    out = outputs.read_output(path)
    done = out.done
    target = next((m for m in out.models if m.role == "target"), None)
    if target is None or not target.done:
        why = ("its status file lists no target" if target is None
               else f"target {target.label}: {target.reason or 'not completed'}")
        raise InputError(f"{out.path}: nothing to analyse ({why}; see its status.json)")
    if out.interleaved:
        if not out.runs:
            raise InputError(f"{out.path}: no completed interleaved run (see its status.json)")
        labels = [m.label for m in done]
        if len(labels) < 2:
            raise InputError(f"{out.path}: no draft has forwards in every completed run (see its status.json)")
        return cost_coefficient_runs(path, names=labels, range_name=range_name, skip_ranges=skip_ranges,
                                     output_len=output_len, acceptance=acceptance, metrics_dump=metrics_dump,
                                     seed=seed)
    return _separate(out, target, range_name=range_name, skip_ranges=skip_ranges, output_len=output_len,
                     acceptance=acceptance, metrics_dump=metrics_dump, seed=seed)


def _separate(out: outputs.ProfileOutput, target: outputs.OutputModel, *, range_name, skip_ranges, output_len,
              acceptance, metrics_dump, seed) -> CostCoefficientResult:
    """One process per model: the target's trace, the completed drafts', then the speculative runs' — those of a
    proposer without a draft model only when its counters show it proposed tokens (an ngram run that found no match
    proposed none: nothing to measure in place)."""
    assert target.trace is not None
    notes: list[str] = []
    rest = []
    for m in out.done:
        if m is target or m.trace is None:
            continue
        if m.speculative and _model_free(m) and not proposes_without_model(m.trace):
            notes.append(f"speculative run {m.label}: no draft model, and vLLM's spec-decode counters show no token "
                         "proposed: nothing to measure in place")
            continue
        rest.append(m)
    if not rest:
        raise InputError(f"{out.path}: nothing to analyse (no completed draft or speculative run besides the target; "
                         "see its status.json)")
    # the range: the caller's, else decided for each trace as `profile` decided it (the plugin's, else vLLM's own
    # scope, with its note)
    result = cost_coefficient(target.trace, [m.trace for m in rest if m.trace is not None],
                              names=[target.label, *(m.label for m in rest)], range_name=range_name,
                              skip_ranges=skip_ranges, output_len=output_len, acceptance=acceptance,
                              metrics_dump=metrics_dump, seed=seed)
    return dataclasses.replace(result, notes=(*result.notes, *notes)) if notes else result


def _model_free(m: outputs.OutputModel) -> bool:
    label = LABEL_RE.match(m.label)
    return (m.draft or (label.group("draft") if label else "")) in MODEL_FREE_METHODS


def decode_precision_of(out: str | os.PathLike, labels: Sequence[str], *, output_len: int | None = None,
                        seed: int = 0) -> dict[str, float]:
    """The precision loop's measure between interleaved runs (`profile(precision=…)`): c pooled over the completed
    runs in `out` of the models `labels` (target first; the speculative engines left out) and each draft's
    `decode_precision`."""
    result = cost_coefficient_runs(out, names=list(labels), output_len=output_len, seed=seed)
    return decode_precision(result, labels[1:])


def decode_precision(result: CostCoefficientResult, drafts: Sequence[str]) -> dict[str, float]:
    """Per draft, the relative half-width of its decode c interval (wall-clock), max(c − low, high − c) ÷ c; inf
    where there is no interval across runs yet (fewer than `stats.MIN_RUNS` runs: one run's bootstrap says nothing of
    the next run, and two runs give none)."""
    from ..stats import MIN_RUNS

    coef = result.coefficients
    out = {}
    for d in drafts:
        rows = coef[(coef["draft"] == d) & (coef["metric"] == WALL)]
        rows = rows[rows["phase"] == DECODE] if (rows["phase"] == DECODE).any() else rows[rows["phase"] == ALL]
        if rows.empty:
            out[d] = math.inf
            continue
        r = rows.iloc[0]
        if int(r["runs"]) < MIN_RUNS:
            out[d] = math.inf
            continue
        half = max(r["c"] - r["ci_low"], r["ci_high"] - r["c"]) / r["c"] if r["c"] > 0 else math.nan
        out[d] = half if math.isfinite(half) else math.inf
    return out
