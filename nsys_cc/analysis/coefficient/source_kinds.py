"""What `analyze` was given, decided once (`decide`), and the analysis that kind of source gets (`analyze_given`).

The kinds (`Given.kind`):
- `PROFILE`: a profile's output directory as it is (`profile_dir.outputs.is_profile_output`), analysed as `profile`
  itself analysed it at its end (`of_profile.analyze_profile`);
- `MANY`: many trace sets, a sweep directory or a manifest file — only when the caller says what those are
  (`is_many`: the manifest's format is the sweep's, above this floor; `nsys_cc.front.analyze` runs them in parallel);
- `TRACES`: the target and the drafts (a list given alone is [target, *drafts]): measured by `measure.cost_coefficient`
  (speculative runs among the drafts measured in place), or, when each trace holds every model of one interleaved run,
  as runs (`over_runs.cost_coefficient_runs`). One path given alone is expanded first (`_one_path`): a glob pattern,
  a folder of traces named by their labels (`traces_of_folder`), or one PyTorch-profiler trace described alone
  (`measure.target_alone`).

The forward range is the caller's `range_name`, else the plugin's or vLLM's own scope, decided per trace as `profile`
decided it (`forwards.ranges.forward_range`, with its note) and passed down.
"""

from __future__ import annotations

import dataclasses
import errno
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ...arguments import is_one, many
from ...errors import InputError
from ..forwards.engines import InterleavedTraceError
from ..profile_dir import outputs
from .measure import cost_coefficient
from .of_profile import analyze_profile
from .over_runs import cost_coefficient_runs
from .result import CostCoefficientResult

__all__ = ["MANY", "PROFILE", "TRACES", "Given", "analyze_given", "analyze_source", "decide", "traces_of_folder"]

PROFILE, MANY, TRACES = "profile", "many", "traces"

# What names the models of traces given one by one: a profile's directory names them itself.
_TRACES_ONLY = ("names", "engines", "spec_metrics")


@dataclasses.dataclass(frozen=True)
class Given:
    """What `analyze` was given, once decided (`decide`): its `kind`, and `source` (the directory or manifest of a
    PROFILE or MANY; the target of TRACES: a path, an open `Trace`, or one path to expand) with `drafts` (TRACES)."""

    kind: str
    source: Any
    drafts: tuple = ()


def decide(source, drafts=None, *, is_many: Callable[[str | os.PathLike], bool] | None = None) -> Given:
    """What `source` (with `drafts`) is, decided once for every analysis of it (module docstring). `is_many`: whether
    a path given alone is many trace sets (a sweep directory, a manifest); without it, never."""
    listed = [] if drafts is None else many(drafts, "drafts")
    if not listed and is_one(source) and isinstance(source, (str, os.PathLike)):
        if outputs.is_profile_output(source):
            return Given(PROFILE, source)
        if is_many is not None and is_many(source):
            return Given(MANY, source)
    if not listed and not is_one(source):  # [target, *drafts] as one list
        items = many(source, "source")
        source, listed = (items[0], items[1:]) if items else (source, [])
    return Given(TRACES, source, tuple(listed))


def analyze_source(source, drafts=None, **kwargs) -> CostCoefficientResult:
    """c of each draft against the target from one trace set as `nsys-cc analyze` takes it: `analyze_given` of what
    `decide` makes of `source` and `drafts` (the other arguments are `analyze_given`'s)."""
    return analyze_given(decide(source, drafts), **kwargs)


def analyze_given(given: Given, *, names: Sequence[str] | None = None,
                  range_name: str | Sequence[str] | Mapping[str, str] | None = None,
                  skip_ranges: int | None = None, output_len: int | None = None,
                  engines: Sequence[str | None] | None = None, acceptance=(), metrics_dump=None,
                  spec_metrics: Mapping | None = None, seed: int = 0,
                  mixed_platforms: bool = False) -> CostCoefficientResult:
    """c of each draft against the target from a source already decided (`decide`): a profile's output directory
    (`of_profile.analyze_profile`), else the target's trace with the drafts (`measure.cost_coefficient`; the other
    arguments are its own). MANY is the caller's (InputError here)."""
    if given.kind == PROFILE:
        passed = {"names": names, "engines": engines, "spec_metrics": spec_metrics}
        for param in _TRACES_ONLY:
            if passed[param]:
                raise InputError(f"{param} applies to traces given one by one; a profile directory labels its models "
                                 "itself", param=param)
        if range_name is not None and not isinstance(range_name, str):
            ranges = list(range_name.values()) if isinstance(range_name, Mapping) else many(range_name, "range_name")
            if len(set(ranges)) > 1:
                raise InputError("range_name: give one forward range for a profile directory (its models were "
                                 "profiled alike), not one per model", param="range_name")
            range_name = ranges[0] if ranges else None
        return analyze_profile(given.source, range_name=range_name, skip_ranges=skip_ranges, output_len=output_len,
                               acceptance=acceptance, metrics_dump=metrics_dump, seed=seed)
    if given.kind != TRACES:
        raise InputError(f"{os.fspath(given.source)} holds many trace sets: analyse it with nsys_cc.analyze",
                         param="source")
    source, listed = given.source, list(given.drafts)
    notes: list[str] = []
    if not listed and isinstance(source, (str, os.PathLike)):
        source, listed, notes = _one_path(os.fspath(source))
        if not listed:  # one PyTorch-profiler trace alone: its steps described, no c (`measure.target_alone`)
            from .measure import target_alone

            result = target_alone(source, range_name=range_name, skip_ranges=skip_ranges, output_len=output_len,
                                  seed=seed)
            return dataclasses.replace(result, notes=(*result.notes, *notes))
    try:
        if notes:
            result = cost_coefficient(source, listed, range_name=range_name, skip_ranges=skip_ranges,
                                      output_len=output_len, acceptance=acceptance, metrics_dump=metrics_dump,
                                      seed=seed, mixed_platforms=mixed_platforms)
            return dataclasses.replace(result, notes=(*notes, *result.notes))
        return cost_coefficient(source, listed, names=names, range_name=range_name, skip_ranges=skip_ranges,
                                output_len=output_len, acceptance=acceptance, metrics_dump=metrics_dump, seed=seed,
                                spec_metrics=spec_metrics, engines=engines, mixed_platforms=mixed_platforms)
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
    try:
        os.stat(source)
    except (FileNotFoundError, NotADirectoryError):
        raise InputError(f"{source}: no such file or directory", param="source") from None
    except OSError as exc:  # a folder on the way that may not be searched (chmod 000), a loop of links
        if exc.errno == errno.ENAMETOOLONG:  # the CLI's own line names the limit
            raise
        raise InputError(f"{source}: cannot read: {exc.strerror or exc}", param="source") from None
    if os.path.isdir(source):
        return traces_of_folder(source)
    if _described_alone(source):  # an engine's own trace (vLLM's torch trace): its steps say their phases themselves
        return source, [], [f"{source} is one trace: its steps are described alone (no draft, no c); give the drafts' "
                            "traces after it for c (nsys_cc.analyze(target, [draft, …]))"]
    return source, _needs_drafts(source), []


def _described_alone(path: str) -> bool:
    """Whether `path` is a trace of a format engines write their steps into (`Capabilities.engine_steps`), told as
    `open_trace` tells it (`registry.reader_of`, by content)."""
    from ...trace.registry import reader_of

    try:
        fmt = reader_of(path) if os.path.isfile(path) else None
    except InputError:
        return False
    return fmt is not None and fmt.capabilities.engine_steps


def traces_of_folder(folder: str) -> tuple[str, list[str], list[str]]:
    """(target, [drafts, speculative runs], notes) of a folder of traces that is no profile's output (one made with
    --separate-processes, kept without its status.json): each trace's label is its file name; the speculative runs
    (`<draft>.spec-g<γ>`) name their draft, and the one trace left that is neither is the target. InputError naming
    the traces when the folder says no more than that (no speculative run, or more than one trace left)."""
    from ...trace.registry import traces_in
    from ..profile_dir.spec_labels import LABEL_RE

    labels = traces_in(folder)  # the traces by label, of every format (an export before its report)
    files = [os.path.basename(p) for p in labels.values()]
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
    from ..forwards.engines import engine_labels

    if not os.path.isfile(path):
        return False
    with open_trace(path) as trace:
        return len(engine_labels(trace.nvtx_ranges(prefixes=[ENGINE_RANGE_PREFIX], nesting=False))) >= 2


def _needs_drafts(source: str) -> list[str]:
    raise InputError(f"{source} is one trace: give the drafts' traces after the target's (nsys_cc.analyze(target, "
                     "[draft, …])), a profile's output directory, or the traces of interleaved runs", param="drafts")

