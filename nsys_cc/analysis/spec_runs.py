"""Speculative decoding measured in interleaved runs: the plain target and every speculative engine timed in the same
process, run after run, pooled, with intervals that cover the variation between runs.

An interleaved profile with speculation (`nsys_cc.launch.interleaved`) holds, in each run (one process, one trace), the
plain target, the drafts and one engine per (draft, γ) — `<draft>.spec-g<γ>` — their iterations alternating, so a
speculative engine's verify steps and the plain target's decode steps are timed in the same seconds. Per run, each
engine's part of the trace is read by its engine's windows (`scope`) into the step tables of `speculative`; across
runs, each engine's steps are pooled (step and iteration numbers kept apart per run, a `run` column added), its
spec-decode counters summed, and `speculative.analyze_speculative` measures the pooled runs as it measures single ones.

Then the intervals are made to cover the runs, as c's are (`stats.runs_ratio_of_medians`: two-level bootstrap, Student's
t on R − 1 degrees of freedom), with two or more runs:
- measured_speedup_ci_low/_ci_high: tokens per step × the interval of median(plain decode step) ÷ median(verify
  step) across runs;
- verify_ms, step_ms, other_ms, draft_forward_ms, decode_ms, decode_step_ms (their `_ci_low`/`_ci_high`):
  `stats.runs_median_ci` of their values per run; verify_factor and c_in_place: `stats.runs_ratio_of_medians`;
- the same figures on every metric (`by_metric`: draft_forward_ms, verify_ms, decode_ms, verify_factor, c_in_place,
  other_ms, and the token figures c_in_place_forward, c_in_place_decode, draft_catchup_ms, draft_later_ms,
  draft_token_ms, verify_token_ms, decode_token_ms, propose_ms on wall and on each GPU metric the traces have), so
  that its wall rows stay the table's figures;
- forecast_tolerance: the root sum of squares of the held-out run's and the widest fitted run's relative half-width of
  the measured speedup across runs (how far the forecast may miss from the runs' own spread alone).
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from ..contract import DEFAULT_RANGE
from . import acceptance as acceptance_mod, speculative as spec_mod
from .metrics import WALL
from .ranges import forward_range, marked_ranges
from .scope import engine_range, in_scope
from .stats import runs_median_ci, runs_ratio_of_medians
from .steps import StepTable, metric_columns, step_table, with_gpu_metrics, with_latencies

__all__ = ["SpecEngine", "analyze_pooled", "analyze_runs", "pool_stats", "pool_tables", "read_run"]


@dataclasses.dataclass(frozen=True)
class SpecEngine:
    """A speculative engine of an interleaved profile: its label (`<draft>.spec-g<γ>`), draft label and γ."""

    label: str
    draft: str
    gamma: int


def read_run(sqlite: str | os.PathLike, run_dir: str | os.PathLike, plain: str, engines: Sequence[SpecEngine],
             range_name: str) -> tuple[StepTable, list[spec_mod.SpecRun]]:
    """One interleaved run's plain target steps (engine `plain`) and speculative runs (`engines`), each read by its
    engine's windows; latencies from `<run_dir>/<label>.bench.json`, counters from `<label>.metrics.json`."""
    from ..trace import open_trace

    run_dir = Path(run_dir)
    labels = [plain, *(e.label for e in engines)]
    with open_trace(os.fspath(sqlite)) as trace:
        ranges = marked_ranges(trace, range_name, *[engine_range(label) for label in labels])
        range_name, _ = forward_range(ranges, range_name, label=plain)  # decided once for the trace
        ranges = with_gpu_metrics(trace, ranges, range_name)
    table = with_latencies(step_table(in_scope(ranges, plain, path=os.fspath(sqlite)), range_name),
                           run_dir / f"{plain}.sqlite")
    runs = []
    for e in engines:
        metrics = run_dir / f"{e.label}.metrics.json"
        run = spec_mod.load_run(str(run_dir / f"{e.label}.sqlite"), e.label, e.draft, range_name,
                                str(metrics) if metrics.is_file() else None,
                                ranges=in_scope(ranges, e.label, path=os.fspath(sqlite)))
        runs.append(dataclasses.replace(run, path=os.fspath(sqlite)))
    return table, runs


def pool_tables(tables: Sequence[StepTable]) -> StepTable:
    """One step table from the same engine's tables of several runs: steps and their draft forwards with step and
    iteration numbers kept apart per run, a `run` column (1 …), iterations summed, latencies joined."""
    if len(tables) == 1:
        return dataclasses.replace(tables[0], steps=tables[0].steps.assign(run=1))
    steps, drafts, lat = [], [], []
    step_offset = iter_offset = 0
    for i, t in enumerate(tables):
        s = t.steps.copy()
        s["iteration"] = np.where(s["iteration"] >= 0, s["iteration"] + iter_offset, s["iteration"])
        s["step"] = s["step"] + step_offset
        d = t.draft_forwards.copy()
        d["step"] = np.where(d["step"] >= 0, d["step"] + step_offset, d["step"])
        steps.append(s.assign(run=i + 1))
        drafts.append(d)
        ids = [*t.steps["step"].to_numpy().tolist(), *t.draft_forwards["step"].to_numpy().tolist()]
        step_offset += max(ids, default=-1) + 1
        iters = t.steps["iteration"]
        iter_offset += int(iters.max()) + 1 if len(iters) and iters.max() >= 0 else 0
        if t.latencies_s is not None:
            lat.append(t.latencies_s)
    first = tables[0]
    gammas = [t.gamma_from_payload for t in tables if t.gamma_from_payload is not None]
    return dataclasses.replace(
        first, steps=pd.concat(steps, ignore_index=True), draft_forwards=pd.concat(drafts, ignore_index=True),
        iterations=sum(t.iterations for t in tables),
        forwards_per_iteration=float(np.nanmedian([t.forwards_per_iteration for t in tables])),
        gamma_from_payload=gammas[0] if gammas else None,
        notes=tuple(dict.fromkeys(n for t in tables for n in t.notes)),
        latencies_s=np.concatenate(lat) if lat else None)


def _counts(s: acceptance_mod.AcceptanceStats) -> tuple:
    return (s.num_drafts, s.num_draft_tokens, s.num_accepted, tuple(s.accepted_per_position))


def replayed_runs(stats: Sequence[acceptance_mod.AcceptanceStats | None]) -> int:
    """How many runs' counters repeat another run's exactly (0: none). vLLM's benchmark seeds its sampling the same
    way in every process, so interleaved runs of one profile generate the same tokens and count the same drafts:
    such a run is a replay, not new evidence of acceptance."""
    known = [_counts(s) for s in stats if s is not None and s.num_drafts]
    return len(known) - len(set(known))


def pool_stats(stats: Sequence[acceptance_mod.AcceptanceStats | None]) -> acceptance_mod.AcceptanceStats | None:
    """The spec-decode counters of several runs summed (None when a run has none: α then comes from the steps).
    Counters that repeat another run's exactly (`replayed_runs`) are counted once: summing replays would leave α as
    it is but make the acceptance's posterior (tune's interval) as narrow as if the runs had drawn new tokens."""
    if not stats or any(s is None for s in stats):
        return None
    known = list({_counts(s): s for s in stats if s is not None}.values())
    per_pos: list[int] = []
    for s in known:
        per_pos += [0] * (len(s.accepted_per_position) - len(per_pos))
        for i, n in enumerate(s.accepted_per_position):
            per_pos[i] += n
    drafts = sum(s.num_drafts for s in known)
    tokens = sum(s.num_draft_tokens for s in known)
    accepted = sum(s.num_accepted for s in known)
    return acceptance_mod.AcceptanceStats(
        alpha=accepted / tokens if tokens else math.nan,
        per_position=tuple(p / drafts for p in per_pos) if drafts else (), num_drafts=drafts,
        num_draft_tokens=tokens, num_accepted=accepted, accepted_per_position=tuple(per_pos))


def _pool_runs(per_run: Sequence[spec_mod.SpecRun]) -> spec_mod.SpecRun:
    first = per_run[0]
    table = pool_tables([r.steps for r in per_run])
    notes = list(dict.fromkeys(n for r in per_run for n in r.notes))
    if replays := replayed_runs([r.acceptance for r in per_run]):
        notes.append(f"{first.name}: {replays} of {len(per_run)} runs counted the same drafts and accepted tokens as "
                     "another run (vLLM seeds every run alike: a replay of the same tokens): each is counted once")
    return dataclasses.replace(first, path="; ".join(dict.fromkeys(r.path for r in per_run)), steps=table,
                               acceptance=pool_stats([r.acceptance for r in per_run]),
                               latencies_s=table.latencies_s, notes=notes)


def _rel_half(value: float, lo: float, hi: float) -> float:
    if not (value > 0 and math.isfinite(lo) and math.isfinite(hi)):
        return math.nan
    return max(value - lo, hi - value) / value


def analyze_runs(runs: Sequence[tuple[str | os.PathLike, str | os.PathLike]], plain: str,
                 engines: Sequence[SpecEngine], *, range_name: str = DEFAULT_RANGE,
                 c_standalone: Mapping[str | tuple[str, str], tuple[float, float, float]] | None = None,
                 output_len: int | None = None, acceptance: Sequence[float] = (),
                 seed: int = 0) -> spec_mod.SpeculativeAnalysis:
    """The speculative engines of interleaved runs ((trace, run directory) each) against the plain target engine
    `plain` of the same runs, pooled (module docstring)."""
    read = [read_run(sqlite, run_dir, plain, engines, range_name) for sqlite, run_dir in runs]
    return analyze_pooled([t for t, _ in read], [[rs[i] for _, rs in read] for i in range(len(engines))],
                          c_standalone=c_standalone, output_len=output_len, acceptance=acceptance, seed=seed)


def analyze_pooled(plain_tables: Sequence[StepTable], per_engine: Sequence[Sequence[spec_mod.SpecRun]], *,
                   c_standalone: Mapping[str | tuple[str, str], tuple[float, float, float]] | None = None,
                   output_len: int | None = None, acceptance: Sequence[float] = (),
                   seed: int = 0) -> spec_mod.SpeculativeAnalysis:
    """The speculative analysis of runs already read: per run the plain target's step table (`plain_tables`), per
    speculative engine its run of each of those runs (`per_engine`, in the same run order); one run is measured as
    it is, several are pooled with intervals across them (module docstring)."""
    if len(plain_tables) == 1:
        return spec_mod.analyze_speculative(plain_tables[0], [rs[0] for rs in per_engine], c_standalone=c_standalone,
                                            output_len=output_len, acceptance=acceptance, seed=seed)
    per_label = {rs[0].name: list(rs) for rs in per_engine}
    analysis = spec_mod.analyze_speculative(pool_tables(plain_tables), [_pool_runs(rs) for rs in per_label.values()],
                                            c_standalone=c_standalone, output_len=output_len, acceptance=acceptance,
                                            seed=seed)
    n = len(plain_tables)
    memo: dict[tuple[str, str], dict] = {}  # an engine's wall-clock figures serve both tables: bootstrapped once
    return dataclasses.replace(analysis, table=_across_runs(analysis.table, plain_tables, per_label, seed, memo),
                               by_metric=_by_metric_across_runs(analysis.by_metric, plain_tables, per_label, seed,
                                                                memo),
                               notes=(*analysis.notes, f"intervals of the speculative figures cover the variation "
                                      f"between {n} runs (two-level bootstrap, Student's t on {n - 1} "
                                      "degrees of freedom)"))


def _column(frame: pd.DataFrame, column: str) -> np.ndarray:
    """`frame[column]` as floats; NaN throughout when a run's steps lack it (a run without that metric)."""
    return frame[column].to_numpy(dtype=float) if column in frame else np.full(len(frame), np.nan)


def _metric_intervals(metric: str, plain: Sequence[StepTable], runs: Sequence[spec_mod.SpecRun],
                      seed: int) -> dict[str, tuple[float, float, float]]:
    """The by-metric figures of one engine's runs with their intervals across runs (`spec_mod.BY_METRIC_FIGURES`)."""
    target, _, other, _ = metric_columns(metric)
    decode = [_column(t.of_kind("decode"), target) for t in plain]
    verify = [r.steps.of_kind("verify") for r in runs]
    v_target = [_column(v, target) for v in verify]
    drafts = [spec_mod.draft_forwards_of(r, v, metric) for r, v in zip(runs, verify)]
    # issue 29: the token figures, on the basis the pooled analysis used (`speculative.token_basis`)
    basis = spec_mod.token_basis(plain[0], runs[0]) if plain and runs else "forward"
    tok = [spec_mod.token_arrays(r, v, metric, basis) for r, v in zip(runs, verify)]
    d_token = [spec_mod.token_of_target(t.of_kind("decode"), metric, basis) for t in plain]

    def each(key: str) -> list[np.ndarray]:
        return [t[key] for t in tok]

    forward_c = runs_ratio_of_medians(drafts, v_target, seed=seed)
    return {"draft_forward_ms": runs_median_ci(drafts, seed=seed), "verify_ms": runs_median_ci(v_target, seed=seed),
            "decode_ms": runs_median_ci(decode, seed=seed),
            "verify_factor": runs_ratio_of_medians(v_target, decode, seed=seed),
            "c_in_place": (runs_ratio_of_medians(each("draft_token"), each("verify_token"), seed=seed)
                           if basis == "token" else forward_c),
            "other_ms": runs_median_ci([_column(v, other) for v in verify], seed=seed),
            "c_in_place_forward": forward_c,
            "c_in_place_decode": runs_ratio_of_medians(each("draft_token"), d_token, seed=seed),
            **{f"{key}_ms": runs_median_ci(each(key), seed=seed)
               for key in ("draft_catchup", "draft_later", "draft_token", "verify_token")},
            "decode_token_ms": runs_median_ci(d_token, seed=seed),
            "propose_ms": runs_median_ci([x[np.isfinite(x)] for x in each("propose")], seed=seed)}


def _memo_intervals(memo: dict[tuple[str, str], dict], metric: str, plain: Sequence[StepTable], name: str,
                    per_label: Mapping[str, Sequence[spec_mod.SpecRun]], seed: int) -> dict:
    """`_metric_intervals` of engine `name` on `metric`, worked out once per pooled analysis (`memo`)."""
    if (metric, name) not in memo:
        memo[(metric, name)] = _metric_intervals(metric, plain, per_label[name], seed)
    return memo[(metric, name)]


def _by_metric_across_runs(by_metric: pd.DataFrame, plain: Sequence[StepTable],
                           per_label: Mapping[str, Sequence[spec_mod.SpecRun]], seed: int,
                           memo: dict[tuple[str, str], dict]) -> pd.DataFrame:
    """`by_metric`'s intervals recomputed across runs (module docstring)."""
    by_metric = by_metric.copy()
    for i, row in by_metric.iterrows():
        for fig, (_, lo, hi) in _memo_intervals(memo, row["metric"], plain, row["name"], per_label, seed).items():
            by_metric.at[i, f"{fig}_ci_low"], by_metric.at[i, f"{fig}_ci_high"] = lo, hi
    return by_metric


def _across_runs(table: pd.DataFrame, plain: Sequence[StepTable],
                 per_label: Mapping[str, Sequence[spec_mod.SpecRun]], seed: int,
                 memo: dict[tuple[str, str], dict]) -> pd.DataFrame:
    """The table's intervals recomputed across runs (module docstring)."""
    table = table.copy()
    decode = [t.of_kind("decode") for t in plain]
    dec_step = [d["step_ms"].to_numpy(dtype=float) for d in decode]
    halves: dict[str, float] = {}
    for i, row in table.iterrows():
        verify = [r.steps.of_kind("verify") for r in per_label[row["name"]]]
        v_step = [v["step_ms"].to_numpy(dtype=float) for v in verify]
        ratio, lo, hi = runs_ratio_of_medians(dec_step, v_step, seed=seed)
        tps = row["tokens_per_step"]
        table.at[i, "measured_speedup_ci_low"], table.at[i, "measured_speedup_ci_high"] = tps * lo, tps * hi
        halves[row["name"]] = _rel_half(tps * ratio, tps * lo, tps * hi)
        for col, values in (("step_ms", v_step), ("decode_step_ms", dec_step)):
            _, c_lo, c_hi = runs_median_ci(values, seed=seed)
            table.at[i, f"{col}_ci_low"], table.at[i, f"{col}_ci_high"] = c_lo, c_hi
        for col, (_, c_lo, c_hi) in _memo_intervals(memo, WALL, plain, row["name"], per_label, seed).items():
            table.at[i, f"{col}_ci_low"], table.at[i, f"{col}_ci_high"] = c_lo, c_hi
    for i, row in table.iterrows():
        fitted = [int(g) for g in str(row["held_out_fit_gammas"] or "").split(",") if g]
        if not fitted or not math.isfinite(row["forecast_error"]):
            continue
        others = [halves[r["name"]] for _, r in table.iterrows()
                  if r["draft"] == row["draft"] and r["gamma"] in fitted]
        table.at[i, "forecast_tolerance"] = float(math.hypot(halves[row["name"]], max(others, default=0.0)))
    return table
