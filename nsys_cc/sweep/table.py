"""The tidy table of a sweep or of many trace sets: one row per draft, phase, metric and cell.

Columns (`COLUMNS`):
- draft, phase, metric: as in `cost_coefficient(...).coefficients` (metric wall on CPU traces; gpu_span, kernel_sum,
  gpu_busy as well on GPU traces);
- batch_size, input_len: the cell's benchmark settings (empty for a trace set whose manifest does not say);
- gamma: empty for plain runs (c = draft forward ÷ target forward, Def. 3.7: pooled over a cell's interleaved runs, or
  from one process per model); for a speculative run with γ proposed tokens per step, c is the in-place c of that run
  (draft forward ÷ verify forward, both measured inside the speculative run's steps: `analysis.speculative.in_place`),
  phase "decode", metric "wall";
- c, ci_low, ci_high: c and its 95 % bootstrap interval;
- target_tp: the target's tensor-parallel size when the sweep set it (empty otherwise);
- cell: the cell (sub-directory) or trace-set name;
- attempts: how many times the cell was started before its table was complete (more than 1: a worker was lost
  mid-cell, or an earlier sweep left it failed or interrupted); for the analysis of trace sets, how many times the
  analysis ran (more than 1 only when a Dask worker was lost while analysing it).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from ..analysis.metrics import DECODE, WALL
from ..errors import NsysCCError
from .manifest import TraceSet

COLUMNS = ["draft", "phase", "metric", "batch_size", "input_len", "gamma", "c", "ci_low", "ci_high", "target_tp",
           "cell", "attempts"]
_INTS = ("batch_size", "input_len", "target_tp", "attempts")


def empty() -> pd.DataFrame:
    return normalise(pd.DataFrame(columns=COLUMNS))


def normalise(table: pd.DataFrame) -> pd.DataFrame:
    """`table` with exactly `COLUMNS`, in that order, with nullable integer columns and float gamma and c."""
    out = table.reindex(columns=COLUMNS).reset_index(drop=True)
    for col in _INTS:
        out[col] = pd.to_numeric(out[col]).astype("Int64")
    for col in ("gamma", "c", "ci_low", "ci_high"):
        out[col] = pd.to_numeric(out[col]).astype(float)
    for col in ("draft", "phase", "metric", "cell"):
        out[col] = out[col].astype(object)
    return out


def from_coefficients(coefficients: pd.DataFrame, *, cell: str, batch_size: int | None, input_len: int | None,
                      target_tp: int | None, attempts: int) -> pd.DataFrame:
    """The plain-run rows of one cell from a `cost_coefficient` result's `coefficients`."""
    rows = coefficients[["draft", "phase", "metric", "c", "ci_low", "ci_high"]].assign(
        batch_size=batch_size, input_len=input_len, gamma=float("nan"), target_tp=target_tp, cell=cell,
        attempts=attempts)
    return normalise(rows)


def from_speculative(speculative, *, cell: str, batch_size: int | None, input_len: int | None,
                     target_tp: int | None, attempts: int) -> pd.DataFrame:
    """The rows with a gamma: the in-place c of each speculative run, from a result's `speculative` analysis
    (None, or a result without speculative runs, gives no rows)."""
    spec = None if speculative is None else speculative.table
    if spec is None or spec.empty:
        return empty()
    # the table's in-place c is on its own metric (the headline: gpu_span on GPU traces, wall on CPU ones)
    metric = spec["metric"] if "metric" in spec else WALL
    rows = pd.DataFrame({"draft": spec["draft"], "phase": DECODE, "metric": metric, "gamma": spec["gamma"],
                         "c": spec["c_in_place"], "ci_low": spec["c_in_place_ci_low"],
                         "ci_high": spec["c_in_place_ci_high"]})
    return normalise(rows.assign(batch_size=batch_size, input_len=input_len, target_tp=target_tp, cell=cell,
                                 attempts=attempts))


def from_result(result, *, cell: str, batch_size: int | None, input_len: int | None, target_tp: int | None,
                attempts: int) -> pd.DataFrame:
    """Every row of one cell or trace set from a `cost_coefficient` result: plain c, then in-place c per γ."""
    where: dict[str, Any] = {"cell": cell, "batch_size": batch_size, "input_len": input_len, "target_tp": target_tp,
             "attempts": attempts}
    plain = from_coefficients(result.coefficients, **where)
    spec = from_speculative(result.speculative, **where)
    return normalise(pd.concat([plain, spec], ignore_index=True)) if not spec.empty else plain


def analyze_task(trace_set: TraceSet, seed: int) -> tuple[pd.DataFrame | None, str]:
    """One trace set's rows (`analyze_set`), or None and why it could not be analysed (bad input only; a bug still
    raises): the task of a local worker and of a Dask one alike."""
    try:
        return analyze_set(trace_set, seed), ""
    except NsysCCError as exc:
        return None, str(exc)


@dataclass
class AnalysisResult:
    """The tidy table of many trace sets (in the order given) and the sets that could not be analysed."""

    table: pd.DataFrame
    failures: list[tuple[str, str]] = field(default_factory=list)


def analyze_set(trace_set: TraceSet, seed: int = 0, attempts: int = 1) -> pd.DataFrame:
    """The tidy rows of one trace set, analysed as `nsys_cc.analyze` analyses its source
    (`analysis.coefficient.source_kinds.analyze_source`): a profile directory as it is (`trace_set.profile`: a sweep
    cell's), else the target's trace with the drafts' and the speculative runs'. Only the table leaves (the traces and
    per-forward frames are dropped here, so a worker of a pool hands back kilobytes)."""
    from ..analysis.coefficient.source_kinds import analyze_source

    if trace_set.profile is not None:
        result = analyze_source(trace_set.profile, range_name=trace_set.range_name, output_len=trace_set.output_len,
                                seed=seed)
    else:
        result = analyze_source(trace_set.target, [*trace_set.drafts, *trace_set.speculative],
                                names=trace_set.names, range_name=trace_set.range_name,
                                output_len=trace_set.output_len, seed=seed)
    return from_result(result, cell=trace_set.name, batch_size=trace_set.batch_size,
                       input_len=trace_set.input_len, target_tp=trace_set.target_tp, attempts=attempts)
