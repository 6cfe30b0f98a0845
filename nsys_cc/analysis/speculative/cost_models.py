"""Each draft's step cost model (`forecast.StepCostModel`) fitted on its speculative runs, its forecast at other γ
and α, and the forecast of a run held out of the fit with how far that forecast may miss it (what each figure
means: `in_place`'s module docstring)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

from ..forwards.steps import metric_columns, step_time_column
from ..metrics import VERIFY, WALL
from ..stats import Pooled, median_ci
from . import forecast as forecast_mod
from .runs import (
    SpecRun,
    alpha_from_tokens,
    median_by_run,
    pooled_ratio_by_run,
    runs_column,
    step_times_by_run,
    tokens_per_step,
)
from .tables import ALPHA_GRID, FORECAST_COLUMNS


def fit(decode_step: float, runs: Sequence[SpecRun], metric: str = WALL) -> forecast_mod.StepCostModel | None:
    """The step cost model of `runs` (one draft's) on `metric`, from the medians of their verify steps' parts; None
    when none of them has a verify step on that metric."""
    target, drafts, other, _ = metric_columns(metric)
    parts = []
    for r in runs:
        v = r.steps.of_kind(VERIFY)
        if v.empty or metric not in r.steps.metrics:
            continue
        at = runs_column(v)
        parts.append((r.gamma, median_by_run(v[drafts], at) / r.gamma, median_by_run(v[target], at),
                      median_by_run(v[other], at)))
    if not parts:
        return None
    g, d, vv, o = zip(*parts)
    return forecast_mod.fit(decode_step, g, d, vv, o, draft_weights=g)


def held_out(run: SpecRun, draft_runs: Sequence[SpecRun], decode_step: float,
             decode_steps: Mapping[int, np.ndarray], alpha: float, measured: float, speedup: Pooled, metric: str,
             seed: int) -> tuple[float, list[int], float, float]:
    """The forecast of `run`'s speedup by its draft's cost model fitted on the draft's other runs (`draft_runs` less
    this one and its γ; two or more other γ needed), the γ it was fitted on, its error against the `measured`
    speedup and how far it may miss (`_tolerance`; from the runs' spread when `speedup`, the measured ratio of
    steps, pools several runs). (NaN, [], NaN, NaN) without such a fit. `decode_steps`: the plain decode steps'
    times on `metric` by run."""
    others = [o for o in draft_runs if o is not run and o.gamma != run.gamma]
    model = fit(decode_step, others, metric) if len({o.gamma for o in others}) >= 2 else None
    if not model:
        return math.nan, [], math.nan, math.nan
    forecast = float(model.speedup(alpha, run.gamma))
    tolerance = _tolerance(_uncertainty(run, seed, metric), [_uncertainty(o, seed, metric) for o in others])
    if speedup.n_runs > 1:  # runs pooled: how far the forecast may miss from the runs' own spread
        tolerance = _tolerance(_runs_uncertainty(speedup), [_runs_uncertainty(
            pooled_ratio_by_run(decode_steps, step_times_by_run(o.steps.of_kind(VERIFY), metric), seed))
            for o in others])
    return forecast, sorted({o.gamma for o in others}), forecast / measured - 1, tolerance


def _uncertainty(run: SpecRun, seed: int, metric: str = WALL) -> float:
    """How well a run's median verify step is known, relative to it: the larger of the half-width of its 95 %
    bootstrap interval (steps resampled) and half the range of its iterations' own medians (steps of one iteration
    share that moment's machine load, so they are not independent draws: on a loaded machine the iterations
    disagree by more than the step bootstrap says). The steps' times on `metric` (`steps.step_time_column`)."""
    v = run.steps.of_kind(VERIFY)
    column = step_time_column(metric, v)
    med, lo, hi = median_ci(v[column].to_numpy(), seed=seed)
    if not med > 0:
        return math.nan
    half = max(med - lo, hi - med) / med
    per_iter = v[v["iteration"] >= 0].groupby("iteration")[column].median()
    if len(per_iter) >= 2:
        half = max(half, float(per_iter.max() - per_iter.min()) / 2 / med)
    return half


def _runs_uncertainty(measured: Pooled) -> float:
    """How well a figure pooled over runs is known, relative to it: the relative half-width of its interval across
    runs (three runs or more), else how far its farthest run lies from it (two runs: no interval)."""
    value, lo, hi = measured
    if not value > 0:
        return math.nan
    if math.isfinite(lo) and math.isfinite(hi):
        return max(value - lo, hi - value) / value
    return max((abs(x / value - 1) for x in measured.runs), default=math.nan)


def _tolerance(held_out: float, fitted: Sequence[float]) -> float:
    """How far a forecast may miss a run it was not fitted on, from the runs' own uncertainty (`_uncertainty`) of
    their median verify step (the plain decode step divides forecast and measurement alike and cancels): the root sum
    of squares of the held-out run's and the largest among the fitted runs' (the forecast rests on medians known only
    that well)."""
    return float(math.hypot(held_out, max(fitted, default=0.0)))


def forecasts(models: Mapping[str, forecast_mod.StepCostModel], by_draft: Mapping[str, list[SpecRun]],
              acceptance: Sequence[float], output_len: float) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """Each draft's forecast by its cost model at its pooled α and each of `acceptance` (γ = 1 … FORECAST_GAMMAS),
    over the α grid, and its best γ at each α: `SpeculativeAnalysis`'s forecast, forecast_grid and best_gamma."""
    rows, grid, best = [], [], []
    gammas = np.arange(1, forecast_mod.FORECAST_GAMMAS + 1)
    for draft, model in models.items():
        alpha, source = _pooled_alpha(by_draft[draft], output_len)
        alphas = ([(alpha, f"measured ({source})")] if math.isfinite(alpha) else []) + \
            [(float(a), "acceptance") for a in acceptance]
        for a, src in alphas:
            s = np.asarray(model.speedup(a, gammas), dtype=float)
            top = int(np.nanargmax(s)) if np.isfinite(s).any() else -1
            rows += [{"draft": draft, "gamma": int(g), "alpha": a, "alpha_source": src, "speedup": float(x),
                      "best": i == top} for i, (g, x) in enumerate(zip(gammas, s))]
            g_best, s_best = model.best_gamma(a) if math.isfinite(a) else (0, math.nan)
            best.append({"draft": draft, "alpha": a, "alpha_source": src, "best_gamma": g_best,
                         "speedup": s_best, "max_gamma": forecast_mod.DEFAULT_MAX_GAMMA})
        s = np.asarray(model.speedup(ALPHA_GRID[None, :], gammas[:, None]), dtype=float)
        top = np.nanargmax(np.where(np.isfinite(s), s, -np.inf), axis=0)
        grid += [{"draft": draft, "gamma": int(g), "alpha": float(a), "speedup": float(s[i, j]), "best": i == top[j]}
                 for i, g in enumerate(gammas) for j, a in enumerate(ALPHA_GRID)]
    return (pd.DataFrame(rows, columns=FORECAST_COLUMNS),
            pd.DataFrame(grid, columns=["draft", "gamma", "alpha", "speedup", "best"]),
            pd.DataFrame(best, columns=["draft", "alpha", "alpha_source", "best_gamma", "speedup", "max_gamma"]))


def _pooled_alpha(runs: Sequence[SpecRun], output_len: float) -> tuple[float, str]:
    """α of a draft over all its runs: the i.i.d. estimate from the summed counters when every run has them, else the
    median of the runs' α from their tokens per step (`output_len` as for `_tokens_per_step`)."""
    stats = [r.acceptance for r in runs if r.acceptance is not None and r.acceptance.accepted_per_position]
    if stats and len(stats) == len(runs):
        accepted = sum(s.num_accepted for s in stats)
        rejected = sum(s.num_drafts - s.accepted_per_position[-1] for s in stats)
        return (accepted / (accepted + rejected) if accepted + rejected else 1.0), "metrics"
    alphas = [a for r in runs if math.isfinite(a := alpha_from_tokens(tokens_per_step(r, output_len)[0], r.gamma))]
    return float(np.median(alphas)) if alphas else math.nan, "tokens per step"
