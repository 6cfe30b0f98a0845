"""Speculative decoding measured in interleaved runs: the plain target and every speculative engine timed in the same
process, run after run, pooled, with intervals that cover the variation between runs.

An interleaved profile with speculation (`nsys_cc.launch.interleaved`) holds, in each run (one process, one trace), the
plain target, the drafts and one engine per (draft, γ) — `<draft>.spec-g<γ>` — their iterations alternating, so a
speculative engine's verify steps and the plain target's decode steps are timed in the same seconds. Per run, each
engine's part of the trace is read by its engine's windows (`forwards.engines`) into the step tables of `speculative`;
across runs, each engine's steps are pooled (step and iteration numbers kept apart per run, a `run` column added), its
spec-decode counters summed, and `in_place.analyze_speculative` measures the pooled runs as it measures single ones.

Each figure is then pooled as c is (`stats`): per run — a median of that run's steps, or a ratio of medians
within the run (the measured speedup: tokens per step × median(plain decode step) ÷ median(verify step) of the same
run; verify_factor, c_in_place, …) — then the geometric mean of the runs' values, which lies within them
(`speculative.metric_figures`, `speculative.by_run`). Intervals across runs from three runs on (Student's t on the
log scale, R − 1 degrees of freedom); two runs give none, and each run's own values are in
`SpeculativeAnalysis.runs`; forecast_tolerance: the root sum of squares of the held-out run's and the widest fitted
run's relative half-width of the measured speedup across runs (with two runs, how far the farther run lies from the
pooled value).
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from ..forwards.engines import engine_range, in_engine
from ..forwards.ranges import forward_range, marked_ranges
from ..forwards.steps import StepTable, step_table, with_gpu_metrics, with_latencies
from ..profile_dir import acceptance as acceptance_mod
from ..stats import MIN_RUNS
from .in_place import analyze_speculative
from .runs import SpecRun, load_run
from .tables import SpeculativeAnalysis

__all__ = ["SpecEngine", "analyze_pooled", "analyze_runs", "pool_stats", "pool_tables", "read_run"]


@dataclasses.dataclass(frozen=True)
class SpecEngine:
    """A speculative engine of an interleaved profile: its label (`<draft>.spec-g<γ>`), draft label and γ."""

    label: str
    draft: str
    gamma: int


def read_run(sqlite: str | os.PathLike, run_dir: str | os.PathLike, plain: str, engines: Sequence[SpecEngine],
             range_name: str | None) -> tuple[StepTable, list[SpecRun]]:
    """One interleaved run's plain target steps (engine `plain`) and speculative runs (`engines`), each read by its
    engine's windows; latencies from `<run_dir>/<label>.bench.json`, counters from `<label>.metrics.json`."""
    from ...trace import open_trace

    run_dir = Path(run_dir)
    labels = [plain, *(e.label for e in engines)]
    with open_trace(os.fspath(sqlite)) as trace:
        ranges = marked_ranges(trace, range_name, *[engine_range(label) for label in labels])
        range_name, _ = forward_range(ranges, range_name, label=plain)  # decided once for the trace
        ranges = with_gpu_metrics(trace, ranges, range_name)
    table = with_latencies(step_table(in_engine(ranges, plain, path=os.fspath(sqlite)), range_name),
                           run_dir / f"{plain}.sqlite")
    runs = []
    for e in engines:
        metrics = run_dir / f"{e.label}.metrics.json"
        run = load_run(str(run_dir / f"{e.label}.sqlite"), e.label, e.draft, range_name,
                                str(metrics) if metrics.is_file() else None,
                                ranges=in_engine(ranges, e.label, path=os.fspath(sqlite)))
        runs.append(dataclasses.replace(run, path=os.fspath(sqlite)))
    return table, runs


def pool_tables(tables: Sequence[StepTable], numbers: Sequence[int] | None = None) -> StepTable:
    """One step table from the same engine's tables of several runs: steps and their draft forwards with step and
    iteration numbers kept apart per run, a `run` column on both (`numbers`, default 1 …), iterations summed,
    latencies joined."""
    numbers = list(range(1, len(tables) + 1)) if numbers is None else [int(k) for k in numbers]
    if len(tables) == 1:
        return dataclasses.replace(tables[0], steps=tables[0].steps.assign(run=numbers[0]),
                                   draft_forwards=tables[0].draft_forwards.assign(run=numbers[0]))
    steps, drafts, lat = [], [], []
    step_offset = iter_offset = 0
    for i, t in enumerate(tables):
        s = t.steps.copy()
        s["iteration"] = np.where(s["iteration"] >= 0, s["iteration"] + iter_offset, s["iteration"])
        s["step"] = s["step"] + step_offset
        d = t.draft_forwards.copy()
        d["step"] = np.where(d["step"] >= 0, d["step"] + step_offset, d["step"])
        steps.append(s.assign(run=numbers[i]))
        drafts.append(d.assign(run=numbers[i]))
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
        latencies_s=np.concatenate(lat) if lat else None,
        forwards=None)  # each run's forwards on its own clock: the requests' lives are read from the pooled steps


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


def _pool_runs(per_run: Sequence[SpecRun], numbers: Sequence[int] | None = None) -> SpecRun:
    first = per_run[0]
    table = pool_tables([r.steps for r in per_run], numbers)
    notes = list(dict.fromkeys(n for r in per_run for n in r.notes))
    if replays := replayed_runs([r.acceptance for r in per_run]):
        notes.append(f"{first.name}: {replays} of {len(per_run)} runs counted the same drafts and accepted tokens as "
                     "another run (vLLM seeds every run alike: a replay of the same tokens): each is counted once")
    return dataclasses.replace(first, path="; ".join(dict.fromkeys(r.path for r in per_run)), steps=table,
                               acceptance=pool_stats([r.acceptance for r in per_run]),
                               latencies_s=table.latencies_s, notes=notes)


def analyze_runs(runs: Sequence[tuple[str | os.PathLike, str | os.PathLike]], plain: str,
                 engines: Sequence[SpecEngine], *, range_name: str | None = None,
                 c_standalone: Mapping[str | tuple[str, str], tuple[float, float, float]] | None = None,
                 output_len: int | None = None, acceptance: Sequence[float] = (),
                 seed: int = 0) -> SpeculativeAnalysis:
    """The speculative engines of interleaved runs ((trace, run directory) each) against the plain target engine
    `plain` of the same runs, pooled (module docstring)."""
    read = [read_run(sqlite, run_dir, plain, engines, range_name) for sqlite, run_dir in runs]
    return analyze_pooled([t for t, _ in read], [[rs[i] for _, rs in read] for i in range(len(engines))],
                          c_standalone=c_standalone, output_len=output_len, acceptance=acceptance, seed=seed)


def analyze_pooled(plain_tables: Sequence[StepTable], per_engine: Sequence[Sequence[SpecRun]], *,
                   c_standalone: Mapping[str | tuple[str, str], tuple[float, float, float]] | None = None,
                   output_len: int | None = None, acceptance: Sequence[float] = (),
                   seed: int = 0, numbers: Sequence[int] | None = None) -> SpeculativeAnalysis:
    """The speculative analysis of runs already read: per run the plain target's step table (`plain_tables`), per
    speculative engine its run of each of those runs (`per_engine`, in the same run order); one run is measured as
    it is, several are pooled (module docstring). `numbers`: the runs' numbers (default 1, 2, …)."""
    if len(plain_tables) == 1:
        return analyze_speculative(plain_tables[0], [rs[0] for rs in per_engine], c_standalone=c_standalone,
                                            output_len=output_len, acceptance=acceptance, seed=seed)
    per_label = {rs[0].name: list(rs) for rs in per_engine}
    analysis = analyze_speculative(pool_tables(plain_tables, numbers),
                                            [_pool_runs(rs, numbers) for rs in per_label.values()],
                                            c_standalone=c_standalone, output_len=output_len, acceptance=acceptance,
                                            seed=seed)
    return dataclasses.replace(analysis, notes=(*analysis.notes, runs_note(len(plain_tables)),
                                                *_disagreement(analysis)))


def _disagreement(analysis: SpeculativeAnalysis) -> list[str]:
    """A note per engine whose runs disagree on its measured speedup: an interval across runs more than 2-fold wide
    (three runs or more), or two runs more than 2-fold apart."""
    out = []
    for r in analysis.table.itertuples():
        mine = analysis.runs[(analysis.runs["name"] == r.name) & (analysis.runs["figure"] == "measured_speedup")]
        values = mine["value"].to_numpy(dtype=float)
        values = values[np.isfinite(values) & (values > 0)]
        if values.size < 2:
            continue
        lo, hi = r.measured_speedup_ci_low, r.measured_speedup_ci_high
        wide = math.isfinite(lo) and lo > 0 and hi > 2 * lo
        if wide or values.max() > 2 * values.min():
            out.append(f"{r.name}: its {values.size} runs disagree on the measured speedup ({values.min():.3g}× to "
                       f"{values.max():.3g}×" + (f", interval {lo:.3g}–{hi:.3g}" if wide else "") + "): the pooled "
                       f"{r.measured_speedup:.3g}× is their geometric mean; look for a slow spell in one run and "
                       "profile more runs")
    return out


def runs_note(n: int) -> str:
    """What the speculative figures' intervals rest on when `n` runs were pooled."""
    if n >= MIN_RUNS:
        return (f"the speculative figures pool {n} runs: each figure per run (a median, or a ratio of medians within "
                f"the run), then their geometric mean; intervals across runs: Student's t on the log scale "
                f"({n - 1} degrees of freedom)")
    return (f"the speculative figures pool {n} runs: each figure per run (a median, or a ratio of medians within the "
            f"run), then their geometric mean; {n} runs give no interval: each figure shows its runs' values (their "
            f"table: `runs`); profile at least {MIN_RUNS} runs for intervals")
