"""c of a profile's output directory as it is: the numbers `profile` reported at its end and `nsys-cc analyze DIR`
prints (`analyze_profile`) — interleaved runs pooled, each model by its engine's windows (`over_runs`), or one
process per model (`measure`) — and the precision loop's measure between interleaved runs (`decode_precision_of`).
The directory is read by `profile_dir.outputs`."""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Sequence

from ...errors import InputError
from ..metrics import ALL, DECODE, WALL
from ..profile_dir import outputs
from ..profile_dir.spec_labels import LABEL_RE, MODEL_FREE_METHODS, proposes_without_model
from .measure import cost_coefficient
from .over_runs import cost_coefficient_runs
from .result import CostCoefficientResult


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
