"""From the fitted model to vLLM's schedule (`model` has the definitions): the forecast of every batch size and γ with
its bootstrap interval, the best γ per batch size as vLLM's `num_speculative_tokens_per_batch_size` ranges (one
schedule per workload), the check of the forecast on cells it was not fitted on, and whether the schedule is trusted
(`fit_schedule` does it all; `TuneResult` holds it)."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from ...errors import InputError
from .keys import CellKey
from .model import (
    COST_PARTS,
    PART_FIELDS,
    BatchCostModel,
    Cell,
    TokensModel,
    cell_values,
    context_of,
    fit_cost,
    sd_from_interval,
    speedup,
    tokens_model,
)
from .verdict import TRUST_ERROR, K0Price, imprecise_steps, k0_note, plain_beats, verdict

DEFAULT_MAX_GAMMA = 8
WORKLOADS = ("server", "benchmark")  # steady state (continuous batching) | static batches of the cells' length
DEFAULT_MAX_BATCH = 32
BOOTSTRAP_DRAWS = 400
# More than this share of the bootstrap's refits blowing up (a step cost at or below 0, or not finite, somewhere on
# the grid): its percentiles are not read as an interval (`forecast_intervals`).
MAX_FAILED_DRAWS = 0.05


@dataclass
class TuneResult:
    """What `tune` gives: the model, forecasts per (B, γ), the held-out checks, the schedule and its check."""

    cost: BatchCostModel
    tokens: TokensModel
    fitted: list[Cell]
    held_out: list[Cell]
    forecast: list[dict]
    checks: list[dict]
    schedule: list[list[int]]
    schedule_check: list[dict]
    no_gain_from: int | None
    max_batch_size: int
    max_gamma: int
    draft: str = ""
    target: str = ""
    notes: list[str] = field(default_factory=list)
    draft_path: str = ""  # what vLLM's config names as the draft model (its folder), when known
    workload: str = "server"  # whose schedule `schedule` is (WORKLOADS)
    schedules: dict[str, list[list[int]]] = field(default_factory=dict)  # every workload's schedule
    output_len: int = 0  # the benchmark workload's tokens per sequence (the measured cells'; 0: unknown)
    # Whether the schedule is recommended (`trust`): False when a held-out cell missed by more than TRUST_ERROR or the
    # forecast has no usable interval; `trust_reason` says why, `next_steps` what to measure next. `schedule` and
    # `schedules` are the fitted tables either way; `speculative_config()` and the JSON give them only when trusted.
    trusted: bool = True
    trust_reason: str = ""
    next_steps: str = ""
    interval_note: str = ""  # why the forecast rows have no interval ("" when they have)
    # the prompt length L the schedule (`schedule`, `schedules`) is chosen at (None: the cells name none), every
    # measured L's server and benchmark schedules (`by_context`), the forecast rows of every L (`input_len` column)
    context: int | None = None
    by_context: dict = field(default_factory=dict)
    k0_known: bool = False  # whether K = 0 was priced with a measured overhead (`verdict.K0Price`)
    plain_beats: str = ""  # where a plain engine (speculation off for the whole server) beats every schedule
    surfaces: dict = field(default_factory=dict)  # part → `surface.Surface` of the fitted cells
    outcome: str = "consistent"  # the held-out checks' verdict: consistent | refuted | imprecise (`verdict`)

    def rows_at(self, input_len: int | None = None) -> list[dict]:
        """The forecast rows at prompt length `input_len` (default: the schedule's `context`)."""
        L = self.context if input_len is None else input_len
        return [r for r in self.forecast if r.get("input_len") == L]

    def speculative_config(self, method: str = "draft_model", workload: str | None = None, *,
                           untrusted: bool = False) -> str | None:
        """vLLM's --speculative-config with the schedule (of `workload`, default the result's own; None when no
        batch size speculates, or when the schedule is not recommended — `trusted` False — unless `untrusted`: the
        fitted table, e.g. to measure it)."""
        if not self.trusted and not untrusted:
            return None
        schedule = self.schedules.get(workload, self.schedule) if workload else self.schedule
        k = max((g for _, _, g in schedule), default=0)
        if k == 0:
            return None
        doc: dict = {"method": method}
        if self.draft_path or self.draft:
            doc["model"] = self.draft_path or self.draft
        doc["num_speculative_tokens"] = k
        doc["num_speculative_tokens_per_batch_size"] = schedule
        return json.dumps(doc)

    def schedule_doc(self) -> dict:
        """schedule.json: the schedule to use and its --speculative-config — both null when it is not recommended
        (`trusted`, `trust_reason`), the fitted tables then under `fitted_num_speculative_tokens_per_batch_size`."""
        doc: dict = {"trusted": self.trusted,
                     "num_speculative_tokens_per_batch_size": self.schedule if self.trusted else None,
                     "speculative_config": self.speculative_config(), "workload": self.workload,
                     "schedules": {w: sch if self.trusted else None for w, sch in self.schedules.items()}}
        if not self.trusted:
            doc.update({"fitted_num_speculative_tokens_per_batch_size": self.schedule,
                        "fitted_schedules": dict(self.schedules), "not_recommended": self.trust_reason,
                        "next_steps": self.next_steps})
        return doc

    def to_dict(self) -> dict:
        return {"trusted": self.trusted, "trust_reason": self.trust_reason or None,
                "next_steps": self.next_steps or None,
                "num_speculative_tokens_per_batch_size": self.schedule if self.trusted else None,
                **({} if self.trusted else {"fitted_num_speculative_tokens_per_batch_size": self.schedule}),
                "speculative_config": self.speculative_config(), "workload": self.workload,
                "schedules": {w: {"num_speculative_tokens_per_batch_size": sch if self.trusted else None,
                                  **({} if self.trusted else {"fitted_num_speculative_tokens_per_batch_size": sch}),
                                  "speculative_config": self.speculative_config(workload=w)}
                              for w, sch in self.schedules.items()},
                "forecast_interval_note": self.interval_note or None,
                "context_input_len": self.context, "k0_priced": self.k0_known, "plain_beats": self.plain_beats or None,
                "check_outcome": self.outcome,
                "schedules_by_input_len": {str(L): v for L, v in self.by_context.items()},
                "surfaces": {k: v.to_dict() for k, v in self.surfaces.items()},
                "benchmark_output_len": self.output_len,
                "no_gain_from_batch_size": self.no_gain_from, "max_batch_size": self.max_batch_size,
                "max_gamma": self.max_gamma, "target": self.target, "draft": self.draft,
                "model": self.cost.to_dict(), "model_text": self.cost.describe(),
                "tokens": {"per_position": list(self.tokens.rates), "alpha_iid": self.tokens.alpha,
                           "measured_positions": self.tokens.measured_positions,
                           "extrapolation": "i.i.d. tail: a_i = a_(K-1) * alpha^(i-K+1) past the measured K"},
                "forecast": self.forecast, "checks": self.checks, "schedule_check": self.schedule_check,
                "fitted_cells": [c.to_dict() for c in self.fitted],
                "held_out_cells": [c.to_dict() for c in self.held_out], "notes": self.notes}


def _draws(cells: Sequence[Cell], tokens: TokensModel, n: int, seed: int, parts: Sequence[str] = ()):
    rng = np.random.default_rng(seed)
    base = cell_values(cells)
    sds = {k: np.array([sd_from_interval(getattr(c, value), getattr(c, ci)) for c in cells])
           for k, (value, ci) in PART_FIELDS.items()}
    out = []
    for _ in range(n):
        vals = {k: base[k] + rng.standard_normal(len(cells)) * sds[k] for k in COST_PARTS}
        out.append((fit_cost(cells, vals, parts), tokens.draw(rng)))
    return out


@dataclass(frozen=True)
class ForecastIntervals:
    """The bootstrap's percentiles of the steady-state forecast over a grid of (B, γ) (`forecast_intervals`): `low`,
    `high` indexed [i_b, i_g] (NaN where there is no usable interval), the draws made and those dropped because
    their refit blew up, and `reason`: why there is no interval anywhere ("" when there are intervals)."""

    low: np.ndarray
    high: np.ndarray
    draws: int
    failed: int
    reason: str = ""
    outside: int = 0  # grid points whose estimate fell outside its own percentiles: no interval there

    @property
    def usable(self) -> bool:
        return not self.reason and self.outside == 0


def _grid_speedups(cost: BatchCostModel, tokens: TokensModel, bs: Sequence[int], gs: Sequence[int],
                   s=0.0) -> np.ndarray:
    """The steady-state forecast over bs × gs ([i_b, i_g]) at Σ context `s` (one per batch size, or one for all);
    NaN where the step costs nothing or less, or the decode step does (a refit that blew up)."""
    b = np.asarray(bs, dtype=float)[:, None]
    g = np.asarray(gs, dtype=float)[None, :]
    s = np.broadcast_to(np.asarray(s, dtype=float), (len(bs),))[:, None]
    step = np.asarray(cost.step_ms(b, g, s), dtype=float)
    dec = np.asarray(cost.decode_step_ms(b, s), dtype=float)
    e = np.array([tokens.expected(int(x)) for x in gs])[None, :]
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where((step > 0) & (dec > 0), e * dec / step, np.nan)


def forecast_intervals(draws, bs: Sequence[int], gs: Sequence[int], estimate: np.ndarray | None = None,
                       cells: Sequence[Cell] = (), s=0.0) -> ForecastIntervals:
    """The bootstrap's 2.5 and 97.5 percentiles of the steady-state speedup for every (B, γ) of bs × gs, per draw
    one vectorised step(B, γ) over the grid (what `speedup` computes, cell by cell). A draw whose refit blew up —
    a step or decode step at or below 0, or not finite, anywhere on the grid: a negative or infinite speedup — is
    dropped and counted, not read as a percentile; with more than MAX_FAILED_DRAWS of them, or fitted `cells` whose
    medians have no interval (the bootstrap would then vary the acceptance alone), there is no interval at all (NaN,
    and `reason` says why). A grid point whose `estimate` lies outside its own percentiles gets none either."""
    nb, ng = len(bs), len(gs)
    nan = np.full((nb, ng), np.nan)
    missing = _cells_without_interval(cells)
    if missing:
        return ForecastIntervals(nan, nan.copy(), len(draws), 0, missing)
    grids = [_grid_speedups(cost, tokens, bs, gs, s) for cost, tokens in draws]
    ok = [x for x in grids if np.isfinite(x).all() and (x > 0).all()]
    failed = len(grids) - len(ok)
    if not grids or failed > MAX_FAILED_DRAWS * len(grids):
        return ForecastIntervals(nan, nan.copy(), len(grids), failed,
                                 f"{failed} of {len(grids)} bootstrap refits blew up (a step cost at or below 0 "
                                 f"somewhere from B = 1 to {max(bs)}): the cells' medians are too uncertain for the "
                                 "model's slopes, and percentiles of the rest would not be a 95 % interval")
    stack = np.stack(ok)
    low, high = np.percentile(stack, 2.5, axis=0), np.percentile(stack, 97.5, axis=0)
    outside = 0
    if estimate is not None:
        bad = ~((low <= estimate) & (estimate <= high)) | ~(low > 0)
        outside = int(bad.sum())
        low, high = np.where(bad, np.nan, low), np.where(bad, np.nan, high)
    return ForecastIntervals(low, high, len(grids), failed, "", outside)


def _cells_without_interval(cells: Sequence[Cell]) -> str:
    """Why the fitted cells give the bootstrap nothing to draw from ("" when each has an interval on every part it
    measured): cells of two runs have none (`stats`: their two values, no interval)."""
    lacking = [c for c in cells if any(math.isfinite(getattr(c, value)) and not all(map(math.isfinite, getattr(c, ci)))
                                       for value, ci in PART_FIELDS.values())]
    if not lacking:
        return ""
    return (f"{len(lacking)} of the {len(cells)} fitted cells have no interval on their medians (two runs give their "
            "two values, no interval), so the bootstrap would vary the acceptance alone")


def _interval(intervals: ForecastIntervals, bs: Sequence[int], gs: Sequence[int], b: int,
              g: int) -> tuple[float, float]:
    """The forecast interval of (b, γ) from the grid's, NaN off the grid."""
    if b not in bs or g not in gs:
        return (math.nan, math.nan)
    i, j = list(bs).index(b), list(gs).index(g)
    return (float(intervals.low[i, j]), float(intervals.high[i, j]))


def _rel_half(value: float, ci: tuple[float, float]) -> float:
    lo, hi = ci
    if not (value > 0 and math.isfinite(lo) and math.isfinite(hi)):
        return math.nan
    return max(value - lo, hi - value) / value


def schedule_ranges(best: Sequence[int]) -> list[list[int]]:
    """[[start, end, γ], …] (inclusive, 1-based) from the best γ of batch sizes 1, 2, …"""
    out: list[list[int]] = []
    for i, g in enumerate(best, 1):
        if out and out[-1][2] == g:
            out[-1][1] = i
        else:
            out.append([i, i, int(g)])
    return out


def _no_gain_from(best: Sequence[int]) -> int | None:
    no_gain = None
    for i in range(len(best), 0, -1):
        if best[i - 1] != 0:
            break
        no_gain = i
    return no_gain


def fit_schedule(fitted: Sequence[Cell], held_out: Sequence[Cell] = (), *, max_batch_size: int = DEFAULT_MAX_BATCH,
         max_gamma: int = DEFAULT_MAX_GAMMA, draws: int = BOOTSTRAP_DRAWS, seed: int = 0, target: str = "",
         draft: str = "", workload: str = "server", output_len: int | None = None, context: int | None = None,
         k0: K0Price | None = None) -> TuneResult:
    """Fit on `fitted`, forecast every B ≤ max_batch_size and γ ≤ max_gamma at every measured prompt length L (and
    `context`), check `held_out`, choose the schedule.

    Two schedules are chosen (`WORKLOADS`): the server's, on the steady-state forecast (E(γ) tokens per step: a
    continuously batched server, what vLLM's table is for), and the benchmark's, on the static-batch forecast of B
    sequences of `output_len` tokens waiting for the slowest (default: the measured cells' output length) — what a
    measured cell is. `workload` says which one is `schedule` (and the --speculative-config); the schedule check
    compares the benchmark's with the measured cells, like with like. Per prompt length its own pair
    (`by_context`); `schedule` is the one at `context` (default: the median of the measured prompt lengths).
    `k0`: the measured K = 0 overhead (`verdict.K0Price`): a bucket speculates only where a γ ≥ 1 beats K = 0 so
    priced; unmeasured, against plain decoding (a note says K = 0 was not priced)."""
    if max_batch_size < 1 or max_gamma < 1:
        raise InputError("max_batch_size and max_gamma must be ≥ 1")
    if workload not in WORKLOADS:
        raise InputError(f"workload must be one of {', '.join(WORKLOADS)}, not {workload!r}", param="workload")
    fitted = list(fitted)
    if not fitted:
        raise InputError("no measured cell to fit on")
    k0 = k0 or K0Price()
    cells_all = [*fitted, *held_out]
    notes = _cell_notes(fitted, cells_all)
    n_out = int(output_len) if output_len is not None else max((c.output_len for c in cells_all), default=0)
    from .surface import context_parts, fit_cells

    cost = fit_cost(fitted, context=context_parts(fitted))
    tokens = tokens_model(cells_all)  # counters of every cell: acceptance does not depend on the cost fit
    boot = _draws(fitted, tokens, draws, seed, cost.context_parts)
    gammas = range(1, max_gamma + 1)
    batches = range(1, max_batch_size + 1)
    measured_l = sorted({c.key.input_len for c in cells_all if c.key.input_len is not None})
    chosen_l = context if context is not None else (int(np.median(measured_l)) if measured_l else None)
    lens: list[int | None] = [*sorted({*measured_l, *([chosen_l] if chosen_l is not None else [])})] or [None]
    forecast: list[dict] = []
    by_context: dict = {}
    best: dict[str, list[int]] = {}
    intervals = None
    for L in lens:
        ctx = context_of(np.asarray(batches), L, n_out)
        here = forecast_intervals(boot, batches, gammas, _grid_speedups(cost, tokens, batches, gammas, ctx), fitted,
                                  ctx)
        rows, best_l = _forecast_rows(cost, tokens, here, max_batch_size, max_gamma, n_out, L, k0)
        forecast += rows
        by_context[L] = {w: schedule_ranges(best_l[w]) for w in WORKLOADS}
        if L == chosen_l:
            best, intervals = best_l, here
    assert intervals is not None
    schedules = by_context[chosen_l]
    if n_out <= 1:
        notes.append("the benchmark's output length is unknown: its schedule is the server's (steady state)")
    notes.append(k0_note(k0))
    no_gain = _no_gain_from(best[workload])
    if no_gain == 1 and best[workload][0] == 0:
        notes.append("no γ pays at any batch size: the schedule speculates nowhere (run without --speculative-config)")
    checks = [held_out_check(c, cost, tokens, intervals, boot, fitted) for c in held_out]
    # the measured cells are benchmarks: the benchmark workload's schedule is the one they can check
    sched_check = schedule_check(cells_all, best["benchmark"], server=best["server"], k0=k0)
    if intervals.failed and not intervals.reason:
        notes.append(f"{intervals.failed} of {intervals.draws} bootstrap refits blew up (a step cost at or below 0 "
                     "somewhere on the grid): dropped, the intervals are the percentiles of the rest")
    if intervals.outside and not intervals.reason:
        notes.append(f"{intervals.outside} of {intervals.low.size} forecasts lie outside their own bootstrap "
                     "percentiles (the refits are skewed there): no interval is given for them")
    reason, advice = trust(checks, intervals, held_out, fitted)
    outcome = "refuted" if any(c["verdict"] == "refuted" for c in checks) else (
        "imprecise" if any(c["verdict"] == "imprecise" for c in checks) else "consistent")
    return TuneResult(cost, tokens, fitted, list(held_out), forecast, checks, schedules[workload], sched_check,
                      no_gain, max_batch_size, max_gamma, draft, target, notes, workload=workload,
                      schedules=schedules, output_len=n_out, trusted=not reason, trust_reason=reason,
                      next_steps=advice, interval_note=intervals.reason, context=chosen_l, by_context=by_context,
                      k0_known=k0.known, plain_beats=plain_beats(forecast, lens, k0), surfaces=fit_cells(fitted),
                      outcome=outcome)


def _cell_notes(fitted: Sequence[Cell], cells: Sequence[Cell]) -> list[str]:
    """What the cells themselves say of the fit: one batch size fitted (no slope in B), and counters replayed."""
    notes: list[str] = []
    if len({c.batch_size for c in fitted}) < 2:
        notes.append("the fit saw one batch size: every per-sequence and per-token slope is 0 (the model does not "
                     "extrapolate in B; profile a second batch size)")
    if replays := [c for c in cells if c.replayed_runs]:
        why = "(vLLM seeds every run alike: the same tokens, the same drafts), counted once"
        counts = {c.replayed_runs for c in replays}
        if len(replays) == len(cells) and len(counts) == 1:
            notes.append(f"in every cell the spec-decode counters of {counts.pop()} run(s) replay another run's "
                         f"exactly {why}")
        else:
            notes.append(f"the spec-decode counters of {len(replays)} cell(s) replay another run's exactly {why}: "
                         + ", ".join(f"{c.key.label} γ={c.gamma} ({c.replayed_runs} of its runs)" for c in replays))
    return notes


def _forecast_rows(cost: BatchCostModel, tokens: TokensModel, intervals: ForecastIntervals, max_batch_size: int,
                   max_gamma: int, n_out: int, input_len: int | None = None,
                   k0: K0Price | None = None) -> tuple[list[dict], dict[str, list[int]]]:
    """(a forecast row per batch size 1…max_batch_size and γ 0…max_gamma at prompt length `input_len`, the best γ
    per batch size of each workload). A row's steady-state speedup and interval, and the benchmark's: the same step
    at the static batch's tokens per step (`n_out` tokens per sequence; the steady state's when unknown). γ = 0: the
    K = 0 price (`K0Price.speedup`, NaN unmeasured); the best γ is 0 where no γ ≥ 1 beats it (or 1× unmeasured)."""
    k0 = k0 or K0Price()
    forecast: list[dict] = []
    best: dict[str, list[int]] = {"server": [], "benchmark": []}
    axis = {} if input_len is None else {"input_len": input_len}
    for b in range(1, max_batch_size + 1):
        ctx = float(context_of(b, input_len, n_out))
        dec = float(cost.decode_step_ms(b, ctx))
        s0 = k0.speedup(dec, b, input_len)
        floor = s0 if math.isfinite(s0) else 1.0
        row_best = {"server": (0, floor), "benchmark": (0, floor)}
        forecast.append({"batch_size": b, **axis, "gamma": 0, "context_tokens": ctx, "alpha": tokens.alpha,
                         "tokens_per_step": 1.0, "tokens_per_step_iid": 1.0, "speedup": s0, "speedup_ci_low": math.nan,
                         "speedup_ci_high": math.nan, "speedup_iid": s0, "tokens_per_step_benchmark": 1.0,
                         "speedup_benchmark": s0, "speedup_benchmark_ci_low": math.nan,
                         "speedup_benchmark_ci_high": math.nan,
                         "step_ms": dec + k0.overhead_ms(b, input_len), "decode_step_ms": dec})
        for g in range(1, max_gamma + 1):
            s = speedup(cost, tokens, b, g, s=ctx)
            e_bench = tokens.static_batch(g, b, n_out - 1) if n_out > 1 else tokens.expected(g)
            s_bench = s * e_bench / tokens.expected(g)  # the same step, the benchmark's tokens per step
            lo, hi = float(intervals.low[b - 1, g - 1]), float(intervals.high[b - 1, g - 1])
            scale = s_bench / s if s > 0 else math.nan
            forecast.append({"batch_size": b, **axis, "gamma": g, "context_tokens": ctx, "alpha": tokens.alpha,
                             "tokens_per_step": tokens.expected(g), "tokens_per_step_iid": tokens.expected_iid(g),
                             "speedup": s, "speedup_ci_low": lo, "speedup_ci_high": hi,
                             "speedup_iid": speedup(cost, tokens, b, g, iid=True, s=ctx),
                             "tokens_per_step_benchmark": e_bench,
                             "speedup_benchmark": s_bench, "speedup_benchmark_ci_low": lo * scale,
                             "speedup_benchmark_ci_high": hi * scale,
                             "step_ms": float(cost.step_ms(b, g, ctx)), "decode_step_ms": dec})
            for w, v in (("server", s), ("benchmark", s_bench)):
                if math.isfinite(v) and v > row_best[w][1]:
                    row_best[w] = (g, v)
        for w in best:
            best[w].append(row_best[w][0])
    return forecast, best


def held_out_check(c: Cell, cost: BatchCostModel, tokens: TokensModel, intervals: ForecastIntervals, boot,
                   fitted: Sequence[Cell]) -> dict:
    """The check of one held-out cell: its forecast like against like (the cell is a benchmark of static batches of
    its output length: its forecast too) with its interval (`boot`'s refits at the cell, scaled to the benchmark),
    the steady-state forecast against the cell's step ratio at vLLM's tokens per step, the error, and whether it lies
    within the runs' own precision and within TRUST_ERROR."""
    b, g = c.batch_size, c.gamma
    ctx = c.context_tokens if cost.context_parts else 0.0
    f = speedup(cost, tokens, b, g, output_len=c.output_len, s=ctx)
    steady = speedup(cost, tokens, b, g, s=ctx)
    here = intervals if intervals.reason else forecast_intervals(boot, [b], [g], np.array([[steady]]), fitted, ctx)
    ci = (math.nan, math.nan) if here.reason else _interval(here, [b], [g], b, g)
    if c.output_len > 1 and steady > 0:
        ci = (ci[0] * f / steady, ci[1] * f / steady)
    err = f / c.measured_speedup - 1 if c.measured_speedup > 0 else math.nan
    halves = [_rel_half(c.measured_speedup, c.measured_ci), _rel_half(f, ci)]
    # the runs' own precision: NaN where neither side has an interval (two runs), not ±0 %
    tol = (math.hypot(*(h if math.isfinite(h) else 0.0 for h in halves)) if any(map(math.isfinite, halves))
           else math.nan)
    return {**c.key.to_dict(), "gamma": g, "label": c.label, "output_len": c.output_len,
            "forecast": f, "forecast_steady_state": steady, "forecast_ci_low": ci[0], "forecast_ci_high": ci[1],
            "forecast_iid": speedup(cost, tokens, b, g, iid=True, s=ctx), "context_tokens": ctx,
            **verdict(f, ci, c.measured_speedup, c.measured_ci, c.runs),
            "measured": c.measured_speedup, "measured_ci_low": c.measured_ci[0], "measured_ci_high": c.measured_ci[1],
            "error": err, "measured_counters": c.measured_counters_speedup,
            "error_counters": (steady / c.measured_counters_speedup - 1 if c.measured_counters_speedup > 0
                               else math.nan), "tolerance": tol,
            "within_precision": bool(math.isfinite(err) and abs(err) <= tol),
            "within_10pct": bool(math.isfinite(err) and abs(err) <= TRUST_ERROR)}


def trust(checks: Sequence[dict], intervals: ForecastIntervals, held_out: Sequence[Cell],
          fitted: Sequence[Cell] = ()) -> tuple[str, str]:
    """(why the schedule is not recommended, what to measure next), ("", "") when it is: a held-out cell whose
    forecast misses its measurement by more than TRUST_ERROR and beyond both intervals (`verdict`: "refuted")
    refutes the model the schedule comes from, and a forecast without usable intervals (`forecast_intervals`) says
    nothing of how far it may be off. A miss within the intervals ("imprecise") refutes nothing: the schedule stays,
    unchecked, and the next steps say how many runs would decide (`imprecise_steps`)."""
    why, next_steps = [], []
    misses = [c for c in checks if c.get("verdict", "refuted" if not c["within_10pct"] else "") == "refuted"]
    if misses:
        worst = max(misses, key=lambda c: abs(c["error"]) if math.isfinite(c["error"]) else math.inf)
        why.append(f"{len(misses)} of {len(checks)} held-out cell(s) miss their measurement by more than "
                   f"{TRUST_ERROR:.0%}".replace("%", " %") + " beyond both intervals — " + "; ".join(
                       f"{CellKey.from_dict(c).label} γ={c['gamma']}: forecast {c['forecast']:.3g}× vs measured "
                       f"{c['measured']:.3g}× ({c['error']:+.0%})".replace("%)", " %)") for c in misses)
                   + ": the cost model the schedule comes from does not forecast cells it was not fitted on")
        fit_b = sorted({c.batch_size for c in fitted})
        beyond = sorted({c["batch_size"] for c in misses if fit_b and not fit_b[0] <= c["batch_size"] <= fit_b[-1]})
        if beyond:
            wider = ",".join(map(str, sorted({*fit_b, *beyond})))
            next_steps.append(f"the design's batch sizes span {fit_b[0]}–{fit_b[-1]} and B = "
                              f"{', '.join(map(str, beyond))} lies beyond them: fit on a design that covers the batch "
                              f"sizes you serve (e.g. --batch-size {wider}) and keep other cells as checks (--check)")
        next_steps.append(f"measure again on a quiet machine with at least 3 interleaved runs (--repeat 3 or more), "
                          f"the missed cell kept as a check (--check {CellKey.from_dict(worst).text}:"
                          f"{worst['gamma']}), so every cell has an interval across runs: a miss larger than that is "
                          "the model's, a smaller one the machine's")
    if intervals.reason:
        why.append(f"the forecast has no usable interval: {intervals.reason}")
        if "no interval on their medians" in intervals.reason:
            if not misses:  # the advice on a miss says it already
                next_steps.append("profile at least 3 interleaved runs (--repeat 3) so every cell's medians have an "
                                  "interval across runs")
        else:
            next_steps.append("measure more iterations and runs per cell (--num-iters, --repeat) so the cells' "
                              "medians pin the model's slopes down")
    elif intervals.outside:
        why.append(f"{intervals.outside} forecast(s) lie outside their own bootstrap interval (the refits are "
                   "skewed): the forecast's precision is unknown there")
        next_steps.append("measure more runs per cell (--repeat) so the refits settle around the fit")
    if not why:
        return "", imprecise_steps(checks)
    if not held_out and not misses:
        next_steps.append("add held-out cells (--check B:γ) to check the forecast on")
    return "; ".join(why), "; ".join(dict.fromkeys(next_steps))


def schedule_check(cells: Sequence[Cell], best: Sequence[int], *, server: Sequence[int] | None = None,
                   k0=None) -> list[dict]:
    """Per measured cell key (its batch size, and prompt length where known): the schedule's γ at its batch size
    (`best`, per batch size 1, 2, …: the benchmark workload's) against the best fixed γ measured there (γ = 0 is the
    plain target: speedup 1). The schedule's measured speedup is unknown (NaN) when its γ was not measured there.
    A schedule's K = 0 is not a plain engine: speculation stays configured and proposes nothing, so its speedup is
    the plain decode step measured there ÷ that step plus the K = 0 overhead measured in the same runs (`k0`, a
    `verdict.K0Price`; NaN when not measured), never 1.
    `server`: the server workload's γ per batch size, shown beside it (with its measured speedup where that γ was
    measured; not what the bar checks)."""

    def at(seq: Sequence[int], b: int) -> int:
        return seq[b - 1] if b <= len(seq) else (seq[-1] if seq else 0)

    def measured(here: dict[int, float], g: int, key: CellKey) -> float:
        if g != 0:
            return here.get(g, math.nan)
        decode = [c.decode_step_ms for c in cells if c.key == key and math.isfinite(c.decode_step_ms)]
        if k0 is None or not decode:
            return math.nan
        return k0.speedup(float(np.median(decode)), key.batch_size, key.input_len)

    out = []
    for key in sorted({c.key for c in cells}):
        here = _measured_at(cells, key)
        g_best = max(here, key=lambda g: here[g])
        g_sched = at(best, key.batch_size)
        m = measured(here, g_sched, key)
        gap = m / here[g_best] - 1 if math.isfinite(m) else math.nan
        row = {**key.to_dict(), "workload": "benchmark", "schedule_gamma": g_sched, "schedule_measured": m,
               "best_fixed_gamma": g_best, "best_fixed_measured": here[g_best], "gap": gap,
               "within_5pct": bool(math.isfinite(gap) and gap >= -0.05), "measured_gammas": sorted(here)}
        if server is not None:
            g_server = at(server, key.batch_size)
            m_server = measured(here, g_server, key)
            row.update({"server_gamma": g_server, "server_measured": m_server,
                        "server_gap": m_server / here[g_best] - 1 if math.isfinite(m_server) else math.nan})
        out.append(row)
    return out


def _measured_at(cells: Sequence[Cell], key: CellKey) -> dict[int, float]:
    """γ → the measured speedup of the cells at `key` (γ = 0: the plain target, 1)."""
    here = {c.gamma: c.measured_speedup for c in cells if c.key == key}
    here.setdefault(0, 1.0)
    return here


def with_schedule_runs(rows: Sequence[dict], runs: Sequence[Cell], cells: Sequence[Cell], table: Sequence,
                       *, device: str) -> list[dict]:
    """The schedule check's rows with the engines that ran vLLM's whole schedule (`table`, one engine serving every
    batch size) beside them: per cell key its measured speedup and interval, and its gap to the best fixed γ
    measured in the same round (`cells`: that round's fixed-γ cells; γ = 0 is the plain target). What the engine ran
    is said in `schedule_run_note`: vLLM 0.32's V1 runner (the CPU build's) applies the table every step, K = 0 as one
    catch-up draft forward; its V2 GPU runner cuts the verify to K, but its draft_model speculator drafts all
    num_speculative_tokens whatever K (vLLM PR #51575, open)."""
    by_key = {c.key: c for c in runs}
    out = []
    for row in rows:
        row = dict(row)
        key = CellKey.from_dict(row)
        run = by_key.get(key)
        if run is not None:
            best = max(_measured_at(cells, key).values())
            row.update({"schedule_run_measured": run.measured_speedup, "schedule_run_ci_low": run.measured_ci[0],
                        "schedule_run_ci_high": run.measured_ci[1], "schedule_run_gap": run.measured_speedup / best - 1,
                        "schedule_run_table": [list(r) for r in table],
                        "schedule_run_note": (
                            f"vLLM 0.32's V2 runner verifies the table's K but its draft_model speculator drafts "
                            f"γ = {run.gamma} tokens at every K" if device == "gpu" else
                            f"the CPU build's V1 runner ran the table: K as it gives at each batch size (≤ γ = "
                            f"{run.gamma}; K = 0: one catch-up draft forward, nothing proposed)")})
        out.append(row)
    return out


def split_design(cells: Sequence[Cell], keys: Sequence[CellKey] | None,
                 gammas: Sequence[int] | None) -> tuple[list[Cell], list[Cell]]:
    """(fitted, held out): the cells of the design — at a key the design covers (`CellKey.covers`: a design of
    batch sizes alone takes a cell at any prompt length) with a γ of the design — and the rest (every cell fitted
    without a design; every key, or every γ, when the design names none)."""
    if not keys and not gammas:
        return list(cells), []
    gs = set(gammas or {c.gamma for c in cells})

    def designed(c: Cell) -> bool:
        return c.gamma in gs and (not keys or any(k.covers(c.key) for k in keys))

    return [c for c in cells if designed(c)], [c for c in cells if not designed(c)]
