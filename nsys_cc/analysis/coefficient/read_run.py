"""The traces of one run read once: each trace opened once for every model it holds, its ranges read once and
handed on — the target's and a plain draft's to their model (`model`), a speculative run's to its steps
(`speculative.in_place`), vLLM's latencies beside a trace to the forward share (`profile_dir.forward_share`)."""

from __future__ import annotations

import contextlib
import dataclasses
import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import pandas as pd

from ...contract import DRAFT_FORWARD_RANGE, FORWARD_RANGE, ITERATION_RANGE, SCOPES_DRAFT, VLLM_STEP_RANGE
from ...errors import InputError
from ...trace import open_trace
from ...trace.registry import trace_stem
from ...trace.source import Trace
from ..forwards import phases as phase_mod, steps as steps_mod
from ..forwards.engines import engine_windows, split_by_engine
from ..forwards.ranges import draft_range_of, forward_range, marked_ranges, select
from ..profile_dir import forward_share as share_mod
from ..profile_dir.latencies import model_stem
from ..profile_dir.spec_labels import LABEL_RE, model_free_label, proposes_without_model
from .model import model_of
from .result import ModelForwards

if TYPE_CHECKING:
    from ..speculative.runs import SpecRun


def _refuse_mislabelled(path: str, where: str, label: str, dumped: bool) -> None:
    """A draft trace labelled speculative (`<draft>.spec-g<γ>`), or given a spec-decode metrics dump (`dumped`: in
    spec_metrics; or `X.metrics.json` beside it, `where` = its files' stem), must hold draft-model forward ranges:
    without them it would be measured as a plain draft and give a wrong c."""
    if LABEL_RE.match(label):
        why = f"is labelled as a speculative run ({label!r})"
    elif dumped:
        why = "was given a spec-decode metrics dump (spec_metrics)"
    elif os.path.exists(trace_stem(where) + ".metrics.json"):
        beside = os.path.basename(trace_stem(where)) + ".metrics.json"
        why = f"has a spec-decode metrics dump beside it ({beside})"
    else:
        return
    raise InputError(
        f"{path} {why} but holds no draft-model forward ranges ('{DRAFT_FORWARD_RANGE}', or vLLM's "
        f"'{SCOPES_DRAFT}'): the plugin recorded no draft forward (see the profile log's nsys-cc "
        "warnings: a vLLM whose proposer it does not wrap), or the proposer runs no draft model (ngram, "
        "suffix: label it '<method>.spec-g<γ>', e.g. 'ngram.spec-g3', to measure it in place); measured as a plain "
        "draft its c would be wrong: leave it out (or rename it if it is a plain draft run)", param="drafts")


@dataclasses.dataclass
class RunRead:
    """What the traces of one run gave: the plain models and the speculative runs (with whether they hold
    draft-model forwards) by model index, the plain target's step table when a speculative run needs it, and the
    notes on the forward ranges chosen."""

    models: dict[int, ModelForwards]
    spec: dict[int, tuple[SpecRun, bool]]
    plain_steps: steps_mod.StepTable | None
    notes: list[str]
    share: list[dict] = dataclasses.field(default_factory=list)  # the forward-share rows (`forward_share.share_row`)


def read_run(paths: Sequence[str], labels: Sequence[str], range_names: Sequence[str | None],
             engines: Sequence[str | None], *, skip_ranges: int | None, output_len: int | None,
             dumps: Mapping[int, str], run: int, opened: Mapping[str, Trace] | None = None) -> RunRead:
    """Read the traces of one run of [target, *drafts] (`paths`; a trace given once per model, with `engines`, is
    opened and read once for all of them).

    Each trace's ranges are read once (`forwards.ranges.marked_ranges`, split among its engines' models), the forward
    range decided for each model (`forwards.ranges.forward_range`: `range_names`, None for the default), then the
    ranges handed on: the target's and a plain draft's to
    its model, a speculative run's to its steps. A run is speculative when it holds draft-forward ranges (inside its
    engine's windows when it is one engine of an interleaved run), or (a proposer that runs no model, ngram) when its
    label says so and its metrics dump holds the counters; a draft labelled or dumped as speculative without them is
    an error (`_refuse_mislabelled`). A model's own files (vLLM's latencies, its metrics dump) sit beside its trace,
    or in an interleaved run's folder under its engine's label (`latencies.model_stem`); `dumps`: the metrics dumps
    given, by model index; `opened`: traces given open, by path (read, not closed). Of the target, what its own
    engine steps need besides the forwards its model keeps (the markers, a few columns) is kept until the other
    traces say whether a speculative run needs them."""
    loaded: dict[int, ModelForwards] = {}
    spec: dict[int, tuple[SpecRun, bool]] = {}
    target_markers = None
    notes: list[str] = []
    shares: dict[int, dict] = {}
    for path, group in _same_trace(paths).items():
        given = (opened or {}).get(path)
        with contextlib.nullcontext(given) if given is not None else open_trace(path) as trace:
            parts: dict[int, pd.DataFrame] = {}
            for asked in dict.fromkeys(range_names[i] for i in group):  # one read per range name given
                js = [i for i in group if range_names[i] == asked]
                read = marked_ranges(trace, asked, *engine_windows([engines[i] for i in js]),
                                     engines=any(engines[i] is None for i in js))
                parts.update(zip(js, split_by_engine(read, [engines[i] for i in js], path=path, trace=trace)))
            for i in group:
                ranges, label, engine = parts.pop(i), labels[i], engines[i]
                range_name, range_note = forward_range(ranges, range_names[i], label=label)
                notes += [range_note] if range_note else []
                if range_name in (FORWARD_RANGE, VLLM_STEP_RANGE):  # a torch trace's vLLM steps (`vllm_steps`)
                    from ..forwards import vllm_steps

                    vllm_steps.refuse_unmeasurable(trace, path, label, draft=i > 0)
                    notes += vllm_steps.notes(trace, label) if range_name == VLLM_STEP_RANGE else []
                # an engine's model's own files are named after its engine: its runs are read as if its trace were there
                where = path if engine is None else model_stem(path, engine)
                dump_path = dumps.get(i)
                with_model = i > 0 and draft_range_of(ranges) is not None
                if with_model or (i > 0 and model_free_label(label)
                                  and proposes_without_model(where, dump_path)):
                    # the speculative analysis is imported only when a speculative run is among the inputs
                    from ..speculative.runs import load_run

                    spec_run = load_run(where, label, "", range_name, dump_path,
                                                 ranges=steps_mod.with_gpu_metrics(trace, ranges, range_name))
                    if range_name == VLLM_STEP_RANGE:  # the first proposing runs over the prompt: kept apart
                        from ..forwards.vllm_steps import in_place_notes

                        spec_run.notes.extend(in_place_notes(label, spec_run.steps))
                    spec[i] = dataclasses.replace(spec_run, path=path), with_model
                else:
                    if i > 0:
                        _refuse_mislabelled(path, where, label, i in dumps)
                    loaded[i] = model_of(trace, ranges, path=path, name=label, role="target" if i == 0 else "draft",
                                         range_name=range_name, skip_ranges=skip_ranges, output_len=output_len,
                                         engine=engine, run=run)
                bench = model_stem(path, engine) + ".bench.json"
                if os.path.isfile(bench):  # vLLM's latencies: the forward-share check (`profile_dir.forward_share`)
                    if i in loaded:
                        forwards, iterations = loaded[i].forwards, loaded[i].iterations
                    else:
                        forwards = select(ranges, range_name)
                        iterations = phase_mod.markers(ranges, (ITERATION_RANGE,))
                    try:
                        shares[i] = share_mod.share_row(label, forwards, iterations, bench, run)
                    except InputError as exc:
                        notes.append(f"{label}: {exc}: no forward share")
                if i == 0:
                    target_markers = steps_mod.markers_of(ranges, range_name, trace)
                del ranges
    plain_steps = None
    if spec:
        target = loaded[0]
        if target.ranks is not None and target.ranks.count > 1:
            raise InputError(f"{labels[0]} runs on {target.ranks.count} tensor-parallel ranks: speculative runs are "
                             "measured in place against a plain target on one process (give one, or leave the "
                             "speculative traces out)")
        plain_steps = steps_mod.with_latencies(
            steps_mod.step_table(steps_mod.with_forwards(target_markers, target), target.range_name),
            model_stem(paths[0], engines[0]))
    return RunRead(loaded, spec, plain_steps, notes, [shares[i] for i in sorted(shares)])


def _same_trace(paths: Sequence[str]) -> dict[str, list[int]]:
    """The models' indexes per trace path, in the order the paths first come."""
    groups: dict[str, list[int]] = {}
    for i, path in enumerate(paths):
        groups.setdefault(os.fspath(path), []).append(i)
    return groups
