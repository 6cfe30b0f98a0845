"""The live estimate: c and the best γ from the engine steps a server ran lately (a sliding window).

Input: the step records of the window (`StepTimes`: what `nsys_cc.live.timing.StepRecord` holds; times in seconds)
and α. Numbers (`LiveEstimate`, times in ms, medians over the window's steps of the kind named). A token is a
forward with its logits and sampling (issue 29; the draft's own logits and sampling where the plugin times them):
- `draft_token_ms`: draft tokens of VERIFY steps; `verify_token_ms`: the target's verify token (its forward, its
  logits over the γ + 1 positions, the rejection sampling) of VERIFY steps; `draft_forward_ms`, `verify_forward_ms`:
  the forwards alone;
- `c` = draft_token_ms ÷ verify_token_ms: the in-place cost coefficient, what one draft token costs in units of the
  verify it feeds; `c_forward` = draft_forward_ms ÷ verify_forward_ms, the forwards' alone;
- `outside_ms`: step period − the target's token − the draft tokens, of VERIFY steps with a known period;
- verify(n) = `verify_intercept_ms` + `verify_slope_ms` · n, n = tokens verified per sequence: a least-squares
  line through the median target token of each n seen in VERIFY and DECODE steps (n rounded to 0.5), when two
  or more n are seen; else (`verify_fit` = "flat") verify(n) = the median verify forward for every n — Thm 3.8's
  assumption, right while a forward is memory-bound (a GPU decode), too kind to speculation when it grows with n
  (a CPU forward does);
- `decode_step_ms`: the median period of the window's DECODE steps when it has at least `MIN_STEPS` of them
  (`decode_source` = "observed"); else verify(1) + outside_ms ("estimated": a speculative step's outside time holds
  the proposer's bookkeeping too, so this overstates a plain step slightly, in speculation's favour);
- the forecast (`nsys_cc.analysis.speculative.forecast.StepCostModel`): draft_token_ms, the verify line, other(γ) =
  outside_ms for every γ (one γ is observed, so its growth with γ is not), decode_step_ms; `best_gamma` and
  `best_speedup` at α over γ = 1…max_gamma; `num_speculative_tokens` = 0 when even the best γ is slower than plain
  decoding (best_speedup ≤ 1), else best_gamma.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from ...contract import LIVE_DECODE as DECODE, LIVE_VERIFY as VERIFY
from ..speculative.forecast import StepCostModel
from ..stats import median

MIN_STEPS = 3


class StepTimes(Protocol):
    """One engine step as the live timing records it (`nsys_cc.live.timing.StepRecord`, which runs inside vLLM and
    is not imported here): its kind (`contract.LIVE_*`), tokens verified per sequence, and times in seconds."""

    kind: int
    tokens_per_seq: float
    step_s: float
    target_s: float
    draft_s: list[float]

    @property
    def target_token_s(self) -> float: ...

    @property
    def draft_token_s(self) -> list[float]: ...

    @property
    def outside_s(self) -> float: ...


@dataclass(frozen=True)
class LiveEstimate:
    """c and the forecast of one window (see the module docstring); times in ms."""

    steps: int
    draft_forward_ms: float
    verify_forward_ms: float
    outside_ms: float
    c: float
    draft_token_ms: float
    verify_token_ms: float
    c_forward: float
    tokens_per_seq: float
    verify_intercept_ms: float
    verify_slope_ms: float
    verify_fit: str
    decode_step_ms: float
    decode_source: str
    alpha: float
    best_gamma: int | None
    best_speedup: float
    num_speculative_tokens: int | None


def _usable(r: StepTimes) -> bool:
    """Whether a record's numbers are ones a step can have: times finite and ≥ 0 (the period also NaN, unknown),
    tokens per sequence below 2³¹."""
    def ok(x) -> bool:
        return isinstance(x, (int, float)) and math.isfinite(x) and x >= 0

    return (ok(r.tokens_per_seq) and r.tokens_per_seq < 2**31 and ok(r.target_s) and ok(r.target_token_s)
            and all(ok(d) for d in r.draft_s)
            and all(ok(d) for d in r.draft_token_s) and (ok(r.step_s) or math.isnan(r.step_s)))


def verify_line(records: Sequence[StepTimes]) -> tuple[float, float, str]:
    """(intercept_ms, slope_ms, "linear" | "flat") of the target's token against tokens verified per sequence."""
    groups: dict[float, list[float]] = {}
    for r in records:
        if r.kind in (VERIFY, DECODE):
            groups.setdefault(round(r.tokens_per_seq * 2) / 2, []).append(r.target_token_s * 1e3)
    if len(groups) >= 2:
        n = np.array(sorted(groups))
        t = np.array([median(groups[k]) for k in n])
        slope, intercept = np.polyfit(n, t, 1)
        if slope >= 0:
            return float(intercept), float(slope), "linear"
    verify = median([r.target_token_s * 1e3 for r in records if r.kind == VERIFY])
    return verify, 0.0, "flat"


def estimate(records: Sequence[StepTimes], alpha: float, max_gamma: int = 16) -> LiveEstimate | None:
    """The estimate of a window of steps at acceptance rate α (NaN: no forecast); None without a verify step.
    Records whose numbers no step can have (`StepRecord.valid`: inf, NaN, negative) are left out; without a
    measured verify token (c NaN) there is no γ to advise."""
    records = [r for r in records if _usable(r)]
    verify = [r for r in records if r.kind == VERIFY]
    if not verify:
        return None
    draft_fwd_ms = median([d * 1e3 for r in verify for d in r.draft_s])
    verify_fwd_ms = median([r.target_s * 1e3 for r in verify])
    draft_ms = median([d * 1e3 for r in verify for d in r.draft_token_s])
    verify_ms = median([r.target_token_s * 1e3 for r in verify])
    outside_ms = median([r.outside_s * 1e3 for r in verify])
    intercept, slope, fit = verify_line(records)
    decode_periods = [r.step_s * 1e3 for r in records if r.kind == DECODE and math.isfinite(r.step_s)]
    if len(decode_periods) >= MIN_STEPS:
        decode_ms, source = median(decode_periods), "observed"
    else:
        decode_ms, source = intercept + slope + outside_ms, "estimated"
    best, speedup, advice = None, math.nan, None
    measured = verify_ms > 0 and draft_ms > 0  # c is a number: the gauge of γ rests on it (else it stays absent)
    if measured and all(math.isfinite(x) for x in (alpha, draft_ms, decode_ms, outside_ms, intercept, slope)):
        model = StepCostModel(decode_ms, draft_ms, intercept, slope, outside_ms, 0.0)
        best, speedup = model.best_gamma(min(max(alpha, 0.0), 1.0), max_gamma)
        advice = (best if speedup > 1.0 else 0) if math.isfinite(speedup) else None
    return LiveEstimate(
        steps=len(verify),
        draft_forward_ms=draft_fwd_ms,
        verify_forward_ms=verify_fwd_ms,
        outside_ms=outside_ms,
        c=draft_ms / verify_ms if verify_ms > 0 else math.nan,
        draft_token_ms=draft_ms,
        verify_token_ms=verify_ms,
        c_forward=draft_fwd_ms / verify_fwd_ms if verify_fwd_ms > 0 else math.nan,
        tokens_per_seq=median([r.tokens_per_seq for r in verify]),
        verify_intercept_ms=intercept,
        verify_slope_ms=slope,
        verify_fit=fit,
        decode_step_ms=decode_ms,
        decode_source=source,
        alpha=alpha,
        best_gamma=best,
        best_speedup=speedup,
        num_speculative_tokens=advice,
    )


def batch_schedule(records: Sequence[StepTimes], acceptance=None, alpha: float = math.nan,
                   max_batch_size: int = 256, max_gamma: int = 8) -> list[list[int]] | None:
    """The best γ per batch-size range from the window's steps, as vLLM's num_speculative_tokens_per_batch_size:
    the model of `nsys_cc.analysis.tune.model` (issue 30) fitted on the window's VERIFY steps grouped by batch size
    (each group of at least MIN_STEPS steps one cell: its median draft token, verify token and outside time) and its
    DECODE steps (plain step period per batch size; where none is observed, verify(B, 0) + the cell's outside time).
    Tokens per step from `acceptance` (an `AcceptanceStats` with per-position counts; else i.i.d. at `alpha`).
    None without verify steps at one batch size or more (a record without a batch size, 0, counts for none)."""
    from .keys import CellKey
    from .model import Cell, TokensModel, fit_cost, speedup, tokens_model
    from .schedule import schedule_ranges

    groups: dict[int, list[StepTimes]] = {}
    decode: dict[int, list[float]] = {}
    for r in records:
        b = int(getattr(r, "batch", 0) or 0)
        if b <= 0 or not _usable(r):
            continue
        if r.kind == VERIFY:
            groups.setdefault(b, []).append(r)
        elif r.kind == DECODE and math.isfinite(r.step_s):
            decode.setdefault(b, []).append(r.step_s * 1e3)
    cells = []
    for b, steps in sorted(groups.items()):
        if len(steps) < MIN_STEPS:
            continue
        gamma = max(1, round(median([r.tokens_per_seq for r in steps]) - 1))
        draft = median([d * 1e3 for r in steps for d in r.draft_token_s])
        verify = median([r.target_token_s * 1e3 for r in steps])
        outside = median([r.outside_s * 1e3 for r in steps])
        dec = decode.get(b, [])
        decode_ms = median(dec) if len(dec) >= MIN_STEPS else verify / (gamma + 1) + outside
        cells.append(Cell(CellKey(b), gamma, draft, verify, outside, decode_ms, math.nan, acceptance=acceptance))
    if not cells or not all(math.isfinite(x) for c in cells for x in (c.draft_forward_ms, c.verify_ms,
                                                                       c.other_ms, c.decode_step_ms)):
        return None
    cost = fit_cost(cells)
    tokens = tokens_model(cells) if acceptance is not None else TokensModel((), min(max(alpha, 0.0), 1.0))
    if not math.isfinite(tokens.alpha):
        return None
    best = []
    for b in range(1, max_batch_size + 1):
        s = [speedup(cost, tokens, b, g) for g in range(1, max_gamma + 1)]
        if np.isnan(s).all():  # nothing forecast at this batch size: no schedule rather than "never speculate"
            return None
        i = int(np.nanargmax(s))
        best.append(i + 1 if s[i] > 1.0 else 0)
    return schedule_ranges(best)
