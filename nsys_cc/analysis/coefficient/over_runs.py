"""c over several runs of every model (`cost_coefficient_runs`, what `profile --repeat R` makes): each run read as
one (`read_run`), a model's runs merged into one model whose forwards carry their `run`, and c pooled across the
runs (`assemble`). Interleaved runs may be given as they are: a profile's output directory, run folders, or traces
that hold every model of one run (their engines are the models)."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping, Sequence

import pandas as pd

from ...arguments import is_one, many, path_of, paths as arg_paths
from ...contract import ENGINE_RANGE_PREFIX
from ...errors import InputError
from ...trace.pages import with_small_pages
from ..profile_dir.acceptance import alphas_with_source
from ..profile_dir.spec_labels import refuse_mixed_batch_sizes
from .arguments import (
    PathLike,
    alpha_intervals,
    check_distinct,
    check_range_arguments,
    check_seed,
    engine_per_trace,
    model_names,
    range_name_per_trace,
)
from .assemble import assemble
from .read_run import read_run
from .result import CostCoefficientResult, ModelForwards


def _merge_runs(per_run: list[ModelForwards]) -> ModelForwards:
    """One model from its runs: the forwards of every run (each carrying its `run`), GPU op totals summed, the
    warm-up notes joined when they differ."""
    first = per_run[0]
    if len(per_run) == 1:
        return first
    if any(m.ranks is not None for m in per_run):
        raise InputError(f"{first.name}: runs of a model on several tensor-parallel ranks cannot be pooled yet; "
                         "analyse each run on its own", param="runs")
    forwards = pd.concat([m.forwards for m in per_run], ignore_index=True)
    totals = [m.op_totals for m in per_run if not m.op_totals.empty]
    op_totals = (pd.concat(totals, ignore_index=True).groupby(["group", "kind", "name"], as_index=False, sort=False)
                 .sum(numeric_only=True) if totals else first.op_totals)
    warm = list(dict.fromkeys(m.warmup_note for m in per_run))
    note = warm[0] if len(warm) == 1 else "; ".join(f"run {i + 1}: {m.warmup_note}" for i, m in enumerate(per_run))
    paths = list(dict.fromkeys(m.path for m in per_run))
    iterations = pd.concat([m.iterations for m in per_run], ignore_index=True)  # each row with its run, as forwards
    note = f"each of {len(per_run)} runs: {note}" if len(warm) == 1 else note
    sources = tuple((int(m.forwards["run"].iloc[0]) if len(m.forwards) else i + 1, m.path, m.warmup_note)
                    for i, m in enumerate(per_run))
    return dataclasses.replace(first, forwards=forwards, op_totals=op_totals, iterations=iterations,
                               warmup_note=note, path="; ".join(paths), has_cuda=all(m.has_cuda for m in per_run),
                               run_sources=sources)


def _interleaved_runs(items: Sequence[str], names: Sequence[str] | None):
    """A flat list given as `runs`, when its items are interleaved runs: a profile's output directory alone (its
    completed runs, `outputs`), run folders (`run-<k>/`, their `trace.sqlite`) or traces that hold every model of one
    run (`nsys_cc:engine` windows, `forwards.engines`). Then (runs, names, engines, run numbers): each run its trace
    once per model, the models its engines (`names`, when given, choose and order them, target first). None when no item
    is an interleaved run (a flat list is then one run, a trace per model). InputError for a mix, or names that are not
    the runs' engines."""
    from ...trace import open_trace
    from ..forwards.engines import engine_labels
    from ..profile_dir import outputs

    if len(items) == 1 and outputs.is_profile_output(items[0]):
        out = outputs.read_output(items[0])
        if not out.interleaved:
            raise InputError(f"runs: {items[0]} holds one process per model, not interleaved runs: analyse it with "
                             "nsys_cc.analyze", param="runs")
        if not out.runs:
            raise InputError(f"runs: {items[0]} holds no completed interleaved run (see its status.json)",
                             param="runs")
        traces: list[str] = [os.fspath(r.trace) for r in out.runs]
        engines = [m.label for m in out.done]
        target = next((m for m in out.models if m.role == "target"), None)
        if target is not None and not target.done:
            raise InputError(f"runs: target {target.label} of {items[0]} has no forwards in every completed run "
                             f"({target.reason}; see its status.json)", param="runs")
        numbers = [r.number for r in out.runs]
    else:
        per_item: list[list[str]] = []
        traces = []
        for item in items:
            if os.path.isdir(item):
                if outputs.is_profile_output(item):
                    raise InputError(f"runs: {item} is a profile's output directory: give it alone (runs={item!r}), "
                                     "not in a list", param="runs")
                trace = str(outputs.run_trace(item))
                if not os.path.isfile(trace):
                    raise InputError(f"runs: {item} is a directory without a {outputs.RUN_TRACE} (the folder of an "
                                     "interleaved run holds one)", param="runs")
                listed = outputs.run_engines(item)
                found = ([label for label, state in listed.items() if state == "done"] if listed is not None
                         else None)
            else:
                trace, found = item, None
            if found is None:
                with open_trace(trace) as t:
                    found = engine_labels(t.nvtx_ranges(prefixes=[ENGINE_RANGE_PREFIX], nesting=False))
            traces.append(trace)
            per_item.append(found)
        if not any(per_item):
            return None
        if not all(per_item):
            one = next(i for i, e in zip(items, per_item) if e)
            other = next(i for i, e in zip(items, per_item) if not e)
            raise InputError(f"runs: {one} holds every model of one interleaved run but {other} holds no engine "
                             "windows: give one trace per model of one run ([target, *drafts]), or one interleaved "
                             "run per item", param="runs")
        engines = [label for label in per_item[0] if all(label in e for e in per_item)]
        found_numbers = [outputs.run_number(os.path.dirname(os.path.abspath(t))) for t in traces]
        numbers = [k or 0 for k in found_numbers]
        if None in found_numbers or len(set(numbers)) != len(numbers):
            numbers = list(range(1, len(traces) + 1))
    if names is not None:
        chosen = [str(n) for n in many(names, "names")]
        unknown = [n for n in chosen if n not in engines]
        if unknown:
            raise InputError(
                f"names: {', '.join(map(repr, unknown))} {'is' if len(unknown) == 1 else 'are'} not an engine of "
                f"these runs: each of the {len(traces)} traces holds every model of one interleaved run (its engines: "
                f"{', '.join(map(repr, engines))}); "
                "give names from those labels (target first) to choose the models, or none for all of them; to label "
                f"them otherwise give runs=[[trace] * {len(engines)} for each run] with engines=[[{', '.join(engines)}]"
                f"] * {len(traces)} and your names", param="names")
        engines = chosen
    refuse_mixed_batch_sizes(engines, f"runs: {items[0] if len(items) == 1 else traces[0]}")
    if len(engines) < 2:
        raise InputError(f"runs: {traces[0]} holds {len(engines)} engine(s) in every run ({', '.join(engines)}): "
                         "c needs the target and a draft", param="runs")
    return [[t] * len(engines) for t in traces], engines, [engines] * len(traces), numbers


@with_small_pages
def cost_coefficient_runs(
    runs: PathLike | Sequence[PathLike] | Sequence[Sequence[PathLike]],
    *,
    names: Sequence[str] | None = None,
    engines: Sequence[Sequence[str | None]] | None = None,
    range_name: str | Sequence[str] | Mapping[str, str] | None = None,
    skip_ranges: int | None = None,
    output_len: int | None = None,
    acceptance: float | str | Sequence[float | str] = (),
    metrics_dump: PathLike | None = None,
    seed: int = 0,
) -> CostCoefficientResult:
    """c of each draft against the target over several runs of every model (`profile --repeat R`).

    Args:
        runs: per run, the traces of [target, *drafts] (the same trace several times when one process held every
            model: then `engines` says which engine is which). Every run has the same models, in the same order.
            Interleaved runs may also be given as they are: a profile's output directory (its completed runs), or
            a flat list of run folders (`run-<k>/`) or of their traces, each holding every model (its engines are
            the models). A flat list of plain traces is one run, [target, *drafts].
        names: the labels of [target, *drafts] (default: the file names; the engines' labels with `engines`); for
            interleaved runs given as they are, the engines to take, target first (default: every engine).
        engines: per run, the engine label of each trace's model (None: the whole trace); default None everywhere.
            Speculative engines among them (draft-model forward ranges inside their windows) are measured in place,
            pooled over the runs (`speculative.pooled.analyze_pooled`; the result's `speculative`).
        range_name: as for `cost_coefficient` (one name, one per model of a run, or by label), as are
            `skip_ranges`, `output_len`, `acceptance`, `metrics_dump` and `seed`.
    Returns:
        A `CostCoefficientResult` over the pooled runs: per model the forwards of every run (column `run`, 1 … R; an
        interleaved profile's own run numbers, its `run-<k>` folders', when read as it is), c = the ratio of the
        pooled medians with the interval across runs, and `runs`, c per run (the same numbers).
    """
    listed = many(runs, "runs")
    numbers: list[int] | None = None
    if listed and all(is_one(r) for r in listed):
        found = None if engines is not None else _interleaved_runs([path_of(r, "runs") for r in listed], names)
        if found is None:  # [target, *drafts] alone: one run, a trace per model
            listed = [listed]
        else:  # one interleaved run per item, every model in its trace
            listed, names, engines, numbers = found
    run_paths = [arg_paths(r, "runs") for r in listed]
    names = None if names is None else [str(n) for n in many(names, "names")]
    run_engines: list[list | None] | None = None
    if engines is not None:
        per_run = many(engines, "engines")
        if len(run_paths) == 1 and len(per_run) > 1 and all(s is None or is_one(s) for s in per_run):
            per_run = [per_run]  # the one run's engines, not wrapped in a list of runs
        run_engines = [None if s is None else many(s, "engines") for s in per_run]
        if len(run_engines) != len(run_paths):
            raise InputError(f"engines has {len(run_engines)} entries for {len(run_paths)} runs: give one list per run",
                             param="engines")
    if not run_paths:
        raise InputError("give at least one run", param="runs")
    n = len(run_paths[0])
    if n < 2:
        raise InputError("each run needs the target and at least one draft", param="runs")
    if any(len(r) != n for r in run_paths):
        raise InputError("every run must hold the same models (target first, then the drafts)", param="runs")
    if names is not None and len(names) != n:
        raise InputError(f"names has {len(names)} label(s) for {n} models per run", param="names")
    if names is None and run_engines is not None and run_engines[0] is not None and all(run_engines[0]):
        names = [str(s) for s in run_engines[0]]  # a model read by its engine's windows is called by its label
    names = model_names(run_paths[0], names)  # each label once, one line of printable text
    check_range_arguments(skip_ranges, output_len)
    check_seed(seed)
    alphas, alpha_note = alphas_with_source(acceptance, metrics_dump)
    alpha_cis = alpha_intervals(alphas, metrics_dump)
    per_run_engines = [engine_per_trace(None if run_engines is None else run_engines[i], n)
                       for i in range(len(run_paths))]
    numbers = list(range(1, len(run_paths) + 1)) if numbers is None else numbers
    range_names = range_name_per_trace(range_name, run_paths[0], names)
    reads = []
    for number, paths, engines_of_run in zip(numbers, run_paths, per_run_engines):
        check_distinct(paths, range_names, engines_of_run)
        reads.append(read_run(paths, names, range_names, engines_of_run, skip_ranges=skip_ranges,
                              output_len=output_len, dumps={}, run=number))
    spec_models = sorted(reads[0].spec)
    for i, read in enumerate(reads[1:], start=1):
        if sorted(read.spec) != spec_models:
            j = sorted(set(read.spec) ^ set(spec_models))[0]
            raise InputError(f"{names[j]} is a speculative run in run {1 if j in reads[0].spec else i + 1} but a plain "
                             f"model in run {i + 1 if j in reads[0].spec else 1}: every run must hold the same "
                             "models", param="runs")
    models = [_merge_runs([read.models[j] for read in reads]) for j in range(n) if j not in spec_models]
    spec = {j: [read.spec[j] for read in reads] for j in spec_models}
    plain_steps = [read.plain_steps for read in reads if read.plain_steps is not None]
    return assemble(models, names, plain_steps, spec, alphas, alpha_note, alpha_cis, seed, output_len,
                     [note for read in reads for note in read.notes], [row for read in reads for row in read.share],
                     numbers=[n for n, read in zip(numbers, reads) if read.plain_steps is not None])
