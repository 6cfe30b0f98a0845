"""The result assembled from the models read: c per draft, phase and metric by the one pooling rule (each run's
ratio of medians, their geometric mean, the interval across runs from three runs on: `stats.runs_ratio_of_medians`),
c per run, the summary, the kernel tables, the verdicts, and the notes that say what the numbers rest on."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from ..forwards import kernel_tables as kernel_mod, ranks as rank_mod, steps as steps_mod
from ..metrics import ALL, C_METRICS, COLUMNS, WALL, decision_phase, metrics_for
from ..profile_dir import forward_share as share_mod
from ..stats import MIN_RUNS, STAT_NAMES, describe, median, ratio_of_medians, runs_ratio_of_medians
from ..theory.speedup import speedup_marks, verdicts
from . import gpu_time as gpu_time_mod, mismatch as mismatch_mod
from .diagnosis import diagnose
from .result import CostCoefficientResult, ModelForwards
from .token import coefficients as token_coefficients, notes as token_notes, token_table

if TYPE_CHECKING:
    from ..speculative.runs import SpecRun


RUN_COLUMNS = ["draft", "phase", "metric", "run", "c", "ci_low", "ci_high", "draft_median_ms", "target_median_ms",
               "n_draft", "n_target"]


def _summary(models: list[ModelForwards]) -> pd.DataFrame:
    """Per model, phase and metric: count (forwards with a value of that metric) and the statistics in ms."""
    rows = []
    for m in models:
        for phase in m.phases:
            for metric in metrics_for(m.has_cuda):
                values = m.phase_values(phase, metric.column)
                st = describe(values / 1e6)
                rows.append({"model": m.name, "role": m.role, "phase": phase, "metric": metric.name,
                             "count": int(np.isfinite(values).sum()), **{f"{k}_ms": v for k, v in st.items()}})
    return pd.DataFrame(rows, columns=["model", "role", "phase", "metric", "count", *[f"{k}_ms" for k in STAT_NAMES]])


def _runs_of(m: ModelForwards, phase: str) -> list[int]:
    """The run numbers of the kept forwards of `phase`, each once, ascending."""
    return [int(r) for r in np.unique(m.phase_values(phase, "run"))]


def _coefficients(target: ModelForwards, drafts: list[ModelForwards], seed: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(coefficients, c per run): c and its interval by the one pooling rule (`stats.runs_ratio_of_medians`: each
    run's ratio of medians, their geometric mean, the interval across runs from three runs on; one run: its
    forwards' bootstrap), and a row per run in the second table (empty with one run): that run's c with its forwards'
    bootstrap interval."""
    rows, per_run = [], []
    for d in drafts:
        for phase in d.phases:
            if phase not in target.phases:
                continue
            gpu_ok = d.has_cuda and target.has_cuda
            # the columns read, not the phase's frames (millions of forwards): a frame only with several runs
            runs = sorted(set(_runs_of(d, phase)) & set(_runs_of(target, phase)))
            # each run's rows of either side, found once for every metric (a filter of the phase's frames per metric
            # and run cost more than the bootstrap of a small trace)
            d_at = [d.phase_values(phase, "run") == r for r in runs] if len(runs) > 1 else []
            t_at = [target.phase_values(phase, "run") == r for r in runs] if len(runs) > 1 else []
            for metric in C_METRICS:
                if not gpu_ok and metric not in {m.name for m in metrics_for(False)}:
                    continue
                col = COLUMNS[metric]
                dv, tv = d.phase_values(phase, col), target.phase_values(phase, col)
                d_runs, t_runs = ([dv[at] for at in d_at], [tv[at] for at in t_at]) if len(runs) > 1 else ([dv], [tv])
                c, lo, hi = runs_ratio_of_medians(d_runs, t_runs, seed=seed)
                if len(runs) > 1:
                    for r, rd, rt in zip(runs, d_runs, t_runs):
                        rc, rlo, rhi = ratio_of_medians(rd, rt, seed=seed)
                        per_run.append({"draft": d.name, "phase": phase, "metric": metric, "run": int(r), "c": rc,
                                        "ci_low": rlo, "ci_high": rhi, "draft_median_ms": median(rd) / 1e6,
                                        "target_median_ms": median(rt) / 1e6, "n_draft": int(np.isfinite(rd).sum()),
                                        "n_target": int(np.isfinite(rt).sum())})
                rows.append({"draft": d.name, "phase": phase, "metric": metric, "c": c, "ci_low": lo, "ci_high": hi,
                             "draft_median_ms": d.phase_median(phase, col) / 1e6,
                             "target_median_ms": target.phase_median(phase, col) / 1e6,
                             "n_draft": int(np.isfinite(dv).sum()), "n_target": int(np.isfinite(tv).sum()),
                             "runs": len(runs)})
    cols = ["draft", "phase", "metric", "c", "ci_low", "ci_high", "draft_median_ms", "target_median_ms",
            "n_draft", "n_target", "runs"]
    return pd.DataFrame(rows, columns=cols), pd.DataFrame(per_run, columns=RUN_COLUMNS)


# An interval across runs whose high end is more than this many times its low end: the runs disagree, said in words.
WIDE = 2.0


def _interval_notes(coefficients: pd.DataFrame, per_run: pd.DataFrame, headline: str = WALL) -> list[str]:
    """What the intervals rest on: across runs (the pooling rule, `stats.runs_ratio_of_medians`), or one run's
    forwards only; two runs give none (their values are said); runs that disagree are said; NaN where a side had one
    value."""
    notes = []
    if len(coefficients):
        runs = int(coefficients["runs"].max())
        if runs >= MIN_RUNS:
            notes.append(f"c pools {runs} runs: each run's c (median draft ÷ median target of that run), then their "
                         f"geometric mean (it lies within the runs' c; times likewise: each run's median, then their "
                         f"geometric mean); intervals across runs: Student's t on the log scale of the runs' c "
                         f"({runs - 1} degrees of freedom)")
        elif runs == 2:
            notes.append("c pools 2 runs: each run's c (median draft ÷ median target of that run), then their "
                         "geometric mean (it lies within the runs' c; times likewise); two runs give no interval "
                         "(Student's t on one degree of freedom would stretch their difference 12.7-fold): the "
                         "tables show both runs' values, and profile at least 3 runs for an interval")
        else:
            notes.append("intervals rest on the forwards of one run (one process): they do not cover the drift "
                         "between runs, which on a shared machine is larger (profile with repeat ≥ 3 for an interval "
                         "that does)")
    notes += _disagreement_notes(coefficients, per_run, headline)
    few = coefficients[(coefficients["n_draft"] < 2) | (coefficients["n_target"] < 2)]
    for r in few.itertuples():
        notes.append(f"{r.draft} ({r.phase}, {gpu_time_mod.called(r.metric, headline)}): no interval: fewer than two "
                     "forwards on one side "
                     f"({r.n_draft} draft, {r.n_target} target)")
    return notes


def _disagreement_notes(coefficients: pd.DataFrame, per_run: pd.DataFrame, headline: str = WALL) -> list[str]:
    """One note per draft whose runs give no interval (two runs: their c and how far apart) or an interval more than
    WIDE-fold wide (the runs disagree), in the phase c is judged on, for each metric."""
    if per_run.empty or not len(coefficients):
        return []
    notes = []
    for draft, rows in coefficients.groupby("draft", sort=False):
        phase = decision_phase(rows["phase"].unique())
        parts, runs = [], 0
        for r in rows[rows["phase"] == phase].itertuples():
            mine = per_run[(per_run["draft"] == draft) & (per_run["phase"] == phase) & (per_run["metric"] == r.metric)]
            cs = mine.sort_values("run")["c"].to_numpy(dtype=float)
            cs = cs[np.isfinite(cs)]
            if cs.size < 2 or not np.isfinite(r.c):
                continue
            apart = (f" ({cs.max() / cs.min() - 1:.0%} apart)".replace("%", " %") if cs.min() > 0 else "")
            if cs.size == 2:
                parts.append(f"c {cs[0]:.3g} and {cs[1]:.3g} on {gpu_time_mod.called(r.metric, headline)}{apart}")
            elif np.isfinite(r.ci_low) and r.ci_high > WIDE * r.ci_low:
                parts.append(f"c {cs.min():.3g} to {cs.max():.3g} on {gpu_time_mod.called(r.metric, headline)}, "
                             f"interval {r.ci_low:.3g}–"
                             f"{r.ci_high:.3g} (a {r.ci_high / r.ci_low:.1f}-fold span)")
            runs = max(runs, cs.size)
        if not parts:
            continue
        if runs == 2:
            notes.append(f"{draft} ({phase}): 2 runs, {'; '.join(parts)}: profile at least {MIN_RUNS} runs for an "
                         "interval")
        else:
            notes.append(f"{draft} ({phase}): the {runs} runs disagree — {'; '.join(parts)}: c is their geometric "
                         "mean; look for a slow spell or a loaded machine (the machine note, each run's c above) and "
                         "profile more runs")
    return notes


def _marks(coefficients: pd.DataFrame, headline: str) -> pd.DataFrame:
    """`speedup_marks` on the headline metric (`gpu_time`), a draft without a c on it taking its wall c."""
    marks = speedup_marks(coefficients, headline)
    if headline == WALL:
        return marks
    wall = speedup_marks(coefficients)
    return pd.concat([marks, wall[~wall["draft"].isin(marks["draft"])]], ignore_index=True)


def _slow_draft_notes(marks: pd.DataFrame, target: str, headline: str = WALL) -> list[str]:
    """One note per draft whose c (on the headline metric, in the phase it is judged on: `speedup_marks`) is 1 or
    more: a draft at least as slow as its target cannot speed it up at any acceptance rate or γ (the speedup of
    Leviathan et al. Thm 3.8 is below 1 for c ≥ 1), which most often means the traces were given the other way
    round."""
    on = "wall-clock" if headline == WALL else headline
    return [f"{r.draft}: c = {r.c:.3g} ({r.phase}, {on}): its forward takes at least as long as the target's "
            f"({target}), so speculative decoding with it cannot be faster at any acceptance rate or γ; if "
            f"{r.draft} is the target, give its trace first" for r in marks.itertuples() if r.c >= 1]


def _kernel_tables(models: list[ModelForwards]) -> tuple[pd.DataFrame, pd.DataFrame]:
    kern, cats = [], []
    for m in models:
        if not m.has_cuda or m.op_totals.empty:
            continue
        totals = m.op_totals
        for phase in m.phases:
            sub = totals if phase == ALL else totals[totals["group"].to_numpy(dtype=object) == phase]
            table = kernel_mod.breakdown_totals(sub, m.phase_count(phase))
            kern.append(table.assign(model=m.name, role=m.role, phase=phase))
            cats.append(kernel_mod.by_category(table).assign(model=m.name, role=m.role, phase=phase))
    kcols = ["model", "role", "phase", *kernel_mod.BREAKDOWN_COLUMNS]
    ccols = ["model", "role", "phase", "category", "calls_per_forward", "time_per_forward_ms", "share"]
    k = pd.concat(kern, ignore_index=True)[kcols] if kern else pd.DataFrame(columns=kcols)
    c = pd.concat(cats, ignore_index=True)[ccols] if cats else pd.DataFrame(columns=ccols)
    return k, c


def _model_notes(models: list[ModelForwards]) -> list[str]:
    """What was dropped and how phases were decided, one line per distinct statement, naming the models it is
    about ("every model" when it holds for all)."""
    holders: dict[str, list[str]] = {}
    for m in models:
        confidence = "" if m.phase_rule.confidence == "exact" else f" (confidence: {m.phase_rule.confidence})"
        texts = [m.warmup_note, f"phases by {m.phase_rule.rule}: {m.phase_rule.detail}{confidence}"]
        if m.gpu_note:
            texts.append(m.gpu_note)
        if m.ranks is not None:
            texts += [rank_mod.ranks_note(m), *m.ranks.notes]
        for text in texts:
            holders.setdefault(text, []).append(m.name)
    every = len(models) > 1
    return [f"{'every model' if every and len(names) == len(models) else ', '.join(names)}: {text}"
            for text, names in holders.items()]


def assemble(models: list[ModelForwards], labels: list[str], plain_steps: Sequence[steps_mod.StepTable],
              spec: Mapping[int, Sequence[tuple[SpecRun, bool]]], alphas: list[float],
              alpha_note: str | None, alpha_cis: list[tuple[float, float] | None], seed: int,
              output_len: int | None, range_notes: Sequence[str] = (),
              share_rows: Sequence[dict] = (), numbers: Sequence[int] | None = None) -> CostCoefficientResult:
    """The result from the loaded plain models and the speculative runs: per speculative engine its run of each run
    ((run, has draft-model forwards) each), measured in place against the plain target's steps of the same runs
    (`plain_steps`, one table per run; pooled over several, `speculative.pooled.analyze_pooled`); `share_rows`: the
    forward share of each model and run that has vLLM's latencies (`profile_dir.forward_share`)."""
    coefficients, per_run = token_coefficients(models, seed, _coefficients)  # c of a token (`token`)
    kernel_summary, categories = _kernel_tables(models)
    headline = gpu_time_mod.headline(models)  # GPU time is the answer on a GPU trace (`gpu_time`)
    marks = _marks(coefficients, headline)
    forward_share = share_mod.share_table(share_rows)
    differ = mismatch_mod.mismatches(models)  # what differs between the traces, said before the numbers
    notes = [*mismatch_mod.notes(differ), *dict.fromkeys(range_notes), *_model_notes(models),
             *token_notes(models, coefficients),
             *_interval_notes(coefficients, per_run, headline),
             *_slow_draft_notes(marks, labels[0], headline), *share_mod.share_notes(forward_share),
             *([alpha_note] if alpha_note else [])]
    if models[0].speculative:
        notes.append(f"{labels[0]}: the target trace is a speculative-decoding run: its verify forwards are phase "
                     "'verify', which no plain draft has; for c and the speculative analysis give the plain target "
                     "run first, then the drafts and the speculative runs")
    speculative = None
    if spec:
        from ..speculative import pooled as spec_runs_mod
        from ..speculative.in_place import standalone_c
        from ..speculative.runs import draft_of

        draft_labels = [m.name for m in models[1:]]
        per_engine = [[dataclasses.replace(run, draft=draft_of(run.name, draft_labels, with_model))
                       for run, with_model in runs] for runs in spec.values()]
        speculative = spec_runs_mod.analyze_pooled(
            plain_steps, per_engine, c_standalone=standalone_c(coefficients, per_run), output_len=output_len,
            acceptance=alphas, seed=seed, numbers=numbers)
    tokens = token_table(models)
    return CostCoefficientResult(
        models=tuple(models),
        summary=_summary(models),
        coefficients=coefficients,
        kernel_summary=kernel_summary,
        categories=categories,
        diagnosis=diagnose(models[0], models[1:]),
        verdicts=_verdicts(coefficients, alphas, alpha_cis, speculative),
        speedup_marks=marks,
        notes=tuple(notes),
        seed=seed,
        acceptance=tuple(alphas),
        speculative=speculative,
        ranks=rank_mod.rank_table(models),
        runs=per_run,
        tokens=tokens,
        forward_share=forward_share,
        headline=headline,
        gpu_time=gpu_time_mod.table(models, tokens, coefficients),
        mismatches=differ,
    )


def _verdicts(coefficients: pd.DataFrame, alphas: list[float], alpha_cis: list, speculative) -> pd.DataFrame:
    """The speedup verdicts: Thm 3.8 with c alone; where a draft was measured in place, resting on its runs
    (`speculative.tables.verdicts_in_place`: the measured speedups and their cost model's forecast first)."""
    table = verdicts(coefficients, alphas, alpha_intervals=alpha_cis)
    if speculative is None:
        return table
    from ..speculative.tables import verdicts_in_place

    return verdicts_in_place(table, speculative)
