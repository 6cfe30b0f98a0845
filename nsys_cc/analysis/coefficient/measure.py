"""The cost coefficient c = draft forward time ÷ target forward time (Leviathan et al. 2023, Def. 3.7).

For every model (one trace each) the forward ranges are selected by name, warm-up is dropped and each forward gets a
phase (see `phases`) and the per-forward metrics of the registry (`metrics.METRICS`, from `projection.project`).
When the ranges lie in several processes (tensor-parallel ranks) each forward is one range per rank (`ranks`).
c per draft, phase and metric is the ratio of medians with a seeded 95 % bootstrap interval (`stats`).
A trace that holds several models (one interleaved process of `profile`, `nsys_cc.vllm.interleave`) is read once per
model with `scope` = the model's engine label (`scope`). Several runs of every model (`cost_coefficient_runs`, what
`profile --repeat R` makes) give one model each whose forwards carry their `run`; c is then each run's ratio of
medians pooled by their geometric mean, with the interval across runs from three runs on
(`stats.runs_ratio_of_medians`), and `runs` holds c per run. A trace read whole that holds several engines is refused
(`InterleavedTraceError`): its models' forwards would mix.
This module loads and computes; the result it returns is plain data (`result`), assembled in one pass.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from ... import _compat
from ...arguments import file_identity, is_one, many, one_path, path_of, paths as arg_paths
from ...contract import (
    DEFAULT_RANGE,
    DRAFT_FORWARD_RANGE,
    ENGINE_RANGE_PREFIX,
    ITERATION_RANGE,
    SCOPES_DRAFT,
    VLLM_STEP_RANGE,
)
from ...errors import InputError, RangeNotFoundError
from ...trace import open_trace
from ...trace.cuda import dropped_note
from ...trace.nvtx import matches
from ...trace.pages import with_small_pages
from ...trace.source import Trace
from ..forwards import kernel_tables as kernel_mod, phases as phase_mod, ranks as rank_mod, steps as steps_mod
from ..forwards.engines import engine_range, engines as engines_in, in_scope
from ..forwards.gpu_loss import measure as measure_gpu_loss, shared_id_warnings, warnings as gpu_loss_warnings
from ..forwards.projection import op_totals, project
from ..forwards.ranges import (
    by_start,
    draft_range_of,
    forward_range,
    marked_ranges,
    nested_same_name,
    not_found,
    quoted,
    select,
)
from ..metrics import ALL, C_METRICS, COLUMNS, GPU_SPAN, KERNEL_SUM, METRICS, WALL, decision_phase, metrics_for
from ..profile_dir import forward_share as share_mod
from ..profile_dir.acceptance import alphas_with_source, measured_alpha
from ..profile_dir.latencies import model_stem, trace_stem
from ..profile_dir.spec_labels import LABEL_RE, model_free_label, proposes_without_model, refuse_mixed_batch_sizes
from ..stats import MIN_RUNS, STAT_NAMES, describe, median, ratio_of_medians, runs_ratio_of_medians
from ..theory.speedup import speedup_marks, verdicts
from . import gpu_time as gpu_time_mod
from .diagnosis import diagnose
from .result import CostCoefficientResult, ModelForwards, PhaseRule
from .token import PART_COLUMNS, coefficients as token_coefficients, notes as token_notes, token_table, with_parts

if TYPE_CHECKING:
    from ..speculative.in_place import SpecRun

__all__ = ["DEFAULT_RANGE", "CostCoefficientResult", "ModelForwards", "PhaseRule", "cost_coefficient",
           "cost_coefficient_runs", "load_model"]

# What a model keeps of its forward ranges once they are measured (the rest of the trace's NVTX and GPU columns is
# let go, so analysing N traces holds about one trace's worth of memory at a time, not N).
MODEL_COLUMNS = ["range_id", "qualified_name", "pid", "tid", "start_ns", "end_ns", "payload", "open_at_end", "kept",
                   "phase", "kernels", "gpu_ops", "run", *COLUMNS.values()]
RUN_COLUMNS = ["draft", "phase", "metric", "run", "c", "ci_low", "ci_high", "draft_median_ms", "target_median_ms",
               "n_draft", "n_target"]
PathLike = str | os.PathLike


def _per_forward(proj: pd.DataFrame, has_cuda: bool) -> pd.DataFrame:
    out = proj.copy(deep=False)  # copy-on-write: the new columns below never reach `proj`
    for m in METRICS:
        if m.derive is not None:
            continue
        present = m.source in out and (has_cuda or not m.gpu)
        out[m.column] = pd.to_numeric(out[m.source], errors="coerce").astype(float) if present else np.nan
    for m in METRICS:
        if m.derive is not None:
            out[m.column] = m.derive(out)
    out["kernels"] = pd.to_numeric(out["kernels"], errors="coerce") if has_cuda and "kernels" in out else np.nan
    return out


def _quoted(name: str) -> str:
    return quoted(name)


def _no_such_range(trace, ranges: pd.DataFrame, path: str, range_name: str) -> RangeNotFoundError:
    """The error for a range name that matches nothing (`ranges.not_found`), with the parameter that picks one."""
    return not_found(trace, ranges, range_name, path=path, hint=" (choose one with range_name)", param="range_name")


def load_model(
    path: PathLike,
    *,
    name: str,
    role: str,
    range_name: str = DEFAULT_RANGE,
    skip_ranges: int | None = None,
    output_len: int | None = None,
    scope: str | None = None,
    run: int = 1,
) -> ModelForwards:
    """Read one trace and return its forward ranges with metrics, warm-up flags and phases (opens the trace;
    `cost_coefficient` opens each trace once and hands what it read to `model_of`). scope: the engine label of the
    model in a trace that holds several (only ranges inside its `nsys_cc:engine` windows are read, `scope`); run: the
    run number its forwards carry (`cost_coefficient_runs`)."""
    (model,) = models_of_trace(path, names=[name], roles=[role], engines=[scope], range_name=range_name,
                               skip_ranges=skip_ranges, output_len=output_len, run=run)
    return model


def models_of_trace(path: PathLike, *, names: Sequence[str], roles: Sequence[str], engines: Sequence[str | None],
                    range_name: str = DEFAULT_RANGE, skip_ranges: int | None = None, output_len: int | None = None,
                    run: int = 1) -> list[ModelForwards]:
    """`load_model` for several engines of one trace (`names`, `roles`, `engines` side by side): the trace opened once
    and its ranges read once for all of them (`scoped_reads`)."""
    path = os.fspath(path)
    with open_trace(path) as trace:
        return [model_of(trace, ranges, path=path, name=name, role=role, range_name=range_name,
                         skip_ranges=skip_ranges, output_len=output_len, scope=scope, run=run)
                for name, role, scope, ranges in zip(names, roles, engines,
                                                     scoped_reads(trace, range_name, engines, path))]


class InterleavedTraceError(InputError):
    """A trace read whole that holds the engine windows of an interleaved run (several models in one process): read
    whole, their forwards would be pooled as one model's. `path`, `engines`: the trace and its engines' labels."""

    def __init__(self, path: str, engines: Sequence[str]):
        self.path, self.engines = path, list(engines)
        super().__init__(
            f"{path} holds every model of an interleaved run ({len(engines)} engines: {', '.join(engines)}): read "
            "whole, their forwards would be pooled as one model's. Analyse interleaved runs as runs — "
            "nsys_cc.analyze([run-1/trace.sqlite, run-2/trace.sqlite, …]) or nsys_cc.cost_coefficient_runs(…) with "
            "those traces (each run's engines are its models) — or pick one engine per trace with engines=[…]",
            param="engines")


def scoped_reads(trace, range_name: str, engines: Sequence[str | None], path: str) -> list[pd.DataFrame]:
    """`ranges.marked_ranges` for several models of one open trace from one read: per scope, the ranges inside
    that engine's windows (`scope.in_scope`); for None, the whole trace's (without the engine windows). A trace read
    whole (a None scope) that holds the windows of two or more engines is an `InterleavedTraceError`: its models'
    forwards would mix."""
    named = list(dict.fromkeys(engine_range(s) for s in engines if s is not None))
    ranges = marked_ranges(trace, range_name, *named, engines=any(s is None for s in engines))
    is_engine = ranges["name"].astype(str).str.startswith(ENGINE_RANGE_PREFIX).to_numpy(dtype=bool)
    whole = ranges[~is_engine] if is_engine.any() else ranges
    if any(s is None for s in engines) and is_engine.any():
        found = engines_in(ranges[is_engine])
        if len(found) >= 2:
            raise InterleavedTraceError(path, found)
    return [whole if s is None else in_scope(ranges, s, path=path, trace=trace) for s in engines]


def model_of(
    trace,
    ranges: pd.DataFrame,
    *,
    path: str,
    name: str,
    role: str,
    range_name: str = DEFAULT_RANGE,
    skip_ranges: int | None = None,
    output_len: int | None = None,
    scope: str | None = None,
    run: int = 1,
) -> ModelForwards:
    """One model from its open `trace` and the ranges read of it (`ranges.marked_ranges`: the forwards and the
    markers, nothing else; one engine's part when `scope` says which): forward ranges with metrics, warm-up flags and
    phases, each forward carrying `run`."""
    # The same row twice (name, thread, start and end): nsys writes each range once, so a copy would only count a
    # forward, its logits or its sampling (and a marker) twice. Every copy is dropped here, before anything reads
    # the ranges, and said (issue 45: the forwards' copies alone were, and decode c read 0.852 instead of 0.653).
    copies = _duplicated(by_start(ranges))
    if copies.any():
        ranges = by_start(ranges)
        twice = ranges["qualified_name"][copies].astype(object).value_counts()
        ranges = ranges[~copies]
    else:
        twice = pd.Series(dtype="int64")
    hit = matches(ranges, (range_name,))
    if not hit.any():
        if scope is not None:
            raise RangeNotFoundError(f"{path}: no {_quoted(range_name)} ranges inside engine {scope!r}'s windows",
                                     param="range_name")
        raise _no_such_range(trace, trace.nvtx_ranges(nesting=False), path, range_name)
    matched = by_start(ranges[hit])
    # A range of the forward's name inside another on the same thread is part of that forward, not one more.
    inner = nested_same_name(matched)
    if inner.any():
        matched = matched[~inner]
    has_cuda = bool(trace.has_cuda)
    forwards = _per_forward(project(trace, matched), has_cuda).reset_index(drop=True)
    forwards, ranks = rank_mod.group_forwards(trace, forwards, ranges)
    token_parts, token_note = "", "tensor-parallel forwards: c is the forwards' c alone (no logits/sampling added yet)"
    if ranks is None:  # the logits and sampling after each forward (`token`): one process's forwards only
        forwards, token_parts, token_note = with_parts(trace, ranges, forwards, range_name, has_cuda)
    unit = "ranges" if ranks is None else "forwards"
    marks = phase_mod.marker_sets(ranges)  # the warm-up, the phases' batches and the iterations all read them
    warm, warm_note = phase_mod.warmup_mask(forwards, ranges, skip_ranges, unit, marks=marks)
    # A forward still open when the capture ended has no real end: its "duration" runs to the end of the trace.
    unclosed = forwards["open_at_end"].to_numpy(dtype=bool)
    forwards["kept"] = ~warm & ~unclosed
    if unclosed.any():
        warm_note += (f"; dropped {int(unclosed.sum())} {unit[:-1]}(s) never closed (still open when the capture "
                      "ended)")
    if len(twice):  # the forwards' first, as round 3 said them
        order = [*(n for n in twice.index if n == range_name), *(n for n in twice.index if n != range_name)]
        warm_note += ("; dropped " + ", ".join(f"{int(twice[n])} duplicated row(s) of {_quoted(str(n))}" for n in order)
                      + " (the same thread, start and end as another row: each range counted once)")
    kept_rows = forwards["kept"].to_numpy(dtype=bool)
    if kept_rows.any() and bool((forwards["end_ns"].to_numpy(np.int64)[kept_rows]
                                 == forwards["start_ns"].to_numpy(np.int64)[kept_rows]).all()):
        warm_note += (f"; every kept {_quoted(range_name)} range lasts 0 ns (it ends where it starts): its time, and "
                      "a c made of it, is 0, which no forward that ran can be (the ranges are damaged, or are markers, "
                      "not forwards)")
    if inner.any():
        warm_note += (f"; dropped {int(inner.sum())} {_quoted(range_name)} range(s) nested inside another of the same "
                      "name on the same thread (only the outermost of a nested chain is a forward)")
    if not forwards["kept"].any():
        if (~warm).any():
            raise RangeNotFoundError(
                f"{path}: every {_quoted(range_name)} range left after warm-up was never closed (the capture "
                "ended inside it): let the profiled program finish its forwards"
            )
        raise RangeNotFoundError(
            f"{path}: all {len(forwards)} {_quoted(range_name)} ranges were dropped as warm-up ({warm_note}); "
            "lower skip_ranges", param="skip_ranges"
        )
    has_cuda, gpu_note = _gpu_state(trace, forwards, range_name)
    gpu_note = "; ".join(t for t in (gpu_note, dropped_note(trace)) if t)  # damaged CUDA rows, left out, said
    if trace.has_cuda:  # correlationIds shared where CUPTI never shares them: said whatever was projected
        gpu_note = "; ".join(t for t in (gpu_note, *shared_id_warnings(trace)) if t)
    loss = measure_gpu_loss(trace, forwards[forwards["kept"]]) if has_cuda else None  # partial CUDA loss, said
    if loss is not None:
        gpu_note = "; ".join(t for t in (gpu_note, *gpu_loss_warnings(loss, range_name)) if t)
    phase, rule = phase_mod.assign_phases(forwards, ranges, output_len, forwards["kept"].to_numpy(),
                                          windows=marks.windows)
    if range_name == VLLM_STEP_RANGE:  # vLLM's step annotations name their phase (`vllm_steps`)
        from ..forwards.vllm_steps import phases_of

        phase, detail = phases_of(trace, forwards)
        rule = PhaseRule("step names", detail)
    forwards["phase"] = phase_mod.phase_column(phase)
    forwards["run"] = run
    totals = pd.DataFrame()
    if has_cuda:
        kept = forwards[forwards["kept"]]
        phases = kept["phase"].to_numpy(dtype=object)
        totals = ranks.op_totals(trace, kept) if ranks else op_totals(trace, kept, phases)
    # The kept columns only. They were taken (copied) out of the trace's ranges, so nothing of the trace's own
    # tables stays referenced; a deep copy here would copy every forward's columns once more (0.7 s at 2 M).
    forwards = forwards[MODEL_COLUMNS + (rank_mod.TP_COLUMNS if ranks else [])
                        + [c for c in PART_COLUMNS if c in forwards]]
    if ranks:
        ranks.compact(MODEL_COLUMNS)
    return ModelForwards(name=name, role=role, path=path, range_name=range_name, nsys_version=trace.nsys_version,
                         has_cuda=has_cuda, forwards=forwards, warmup_note=warm_note, phase_rule=rule,
                         op_totals=totals, gpu_note=gpu_note, ranks=ranks,
                         speculative=draft_range_of(ranges) is not None, token_parts=token_parts, gpu_loss=loss,
                         token_note=token_note,
                         iterations=marks.iterations.assign(run=run))


def _duplicated(matched: pd.DataFrame) -> np.ndarray:
    """Rows of `matched` (in start order, `by_start`) equal to an earlier row in name, thread, start and end: a
    boolean array. Equal rows have equal starts, so where no two starts are equal (nsys's rows of one thread, the usual
    case) there are none and the rows are not hashed (0.3 s at 2 M forwards); a range and its first child may start
    together, and then they are."""
    start = matched["start_ns"].to_numpy(dtype=np.int64)
    if len(start) < 2 or bool((start[1:] != start[:-1]).all()):
        return np.zeros(len(start), dtype=bool)
    return matched.duplicated(["qualified_name", "global_tid", "start_ns", "end_ns"]).to_numpy(dtype=bool)


# The largest skip_ranges or output_len taken: a count of ranges or tokens that int32/int64 arithmetic holds.
MAX_COUNT = 2**31 - 1


def check_range_arguments(skip_ranges: int | None, output_len: int | None) -> None:
    """InputError naming the parameter unless `skip_ranges` is a whole number ≥ 0 and `output_len` one ≥ 1 (None:
    not given); a string, a fraction or a bool is refused, not read as a count."""
    for param, value, least in (("skip_ranges", skip_ranges, 0), ("output_len", output_len, 1)):
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
            raise InputError(f"{param} must be a whole number ≥ {least} (an int), not {type(value).__name__} "
                             f"{value!r}", param=param)
        if value < least:
            raise InputError(f"{param} must be ≥ {least}, not {value}", param=param)
        if value > MAX_COUNT:  # a count the arrays can hold (10²⁰ raised OverflowError in the phases, issue 45)
            raise InputError(f"{param} must be at most {MAX_COUNT} (2³¹ − 1), not {value}", param=param)



def check_seed(seed) -> int:
    """`seed` when it can seed the bootstrap (a whole number ≥ 0, as NumPy takes it); else InputError naming it."""
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise InputError(f"seed must be a whole number ≥ 0, not {seed!r}", param="seed")
    return int(seed)


def _gpu_state(trace, forwards: pd.DataFrame, range_name: str) -> tuple[bool, str]:
    """Whether the kept forwards have GPU metrics, and a note on what is missing (empty when nothing is): no CUDA
    data at all (a CPU run), CUDA API calls without any GPU activity (CUPTI lost it), GPU work of which nothing was
    projected onto the forward ranges, or graphs recorded whole (no kernel metrics for the forwards that ran them)."""
    kept = forwards["kept"].to_numpy(dtype=bool)
    n = int(kept.sum())
    if not trace.has_cuda:
        calls = trace.count("cuda_api")
        if not calls:
            return False, "no CUDA tables in the trace (a CPU run): wall-clock time only, no GPU metrics"
        return False, (
            f"the trace holds {calls} CUDA API calls but no GPU activity (no kernel, copy, fill or graph rows): CUPTI "
            "recorded none of the GPU work — likely causes: an nsys whose CUPTI does not support this CUDA driver "
            "(use the nsys of the installed CUDA toolkit or a newer one), or the capture stopped before CUPTI "
            f"flushed its buffers; its {n} {_quoted(range_name)} ranges get wall-clock time only, no GPU metrics")
    span = forwards.loc[kept, COLUMNS[GPU_SPAN]]
    if span.isna().all():
        return False, (
            f"none of its {n} {_quoted(range_name)} ranges launched GPU work from their own thread, although the "
            "trace holds GPU activity: nothing was projected onto them (as in nsys, only CUDA calls made inside a "
            "range on its own thread count); likely causes: kernels launched from another thread or process (a "
            "worker thread, or vLLM's engine/worker process traced without --trace-fork-before-exec=true), or "
            "forwards recorded outside CUDA tracing: wall-clock time only, no GPU metrics")
    whole = span.notna() & forwards.loc[kept, COLUMNS[KERNEL_SUM]].isna()
    if whole.any():
        return True, (
            f"{int(whole.sum())} of its {n} {_quoted(range_name)} ranges launched CUDA graphs recorded whole (nsys "
            "--cuda-graph-trace=graph: one row per graph launch, no kernel rows): kernel metrics (kernel_sum, kernel "
            "counts) are not available for them and are left out, not counted as 0 — profile with "
            "--cuda-graph-trace=node for kernel metrics; GPU span and busy time include the graphs")
    return True, ""


def model_names(paths: Sequence[str], names: Sequence[str] | None) -> list[str]:
    """Labels for the models: `names` when given (each once, one line), else file names without the extension, each
    of a name met more than once getting the first free `#1`, `#2`, … (never another file's own name)."""
    if names:
        if len(names) != len(paths):
            raise InputError(f"names has {len(names)} label(s) for {len(paths)} traces: give one per trace or none",
                             param="names")
        labels = [str(n) for n in names]
        for label in labels:
            if not label.strip() or any(not ch.isprintable() for ch in label):
                raise InputError(f"names: {label!r} is not a label (one line of printable text)", param="names")
        twice = sorted({n for n in labels if labels.count(n) > 1})
        if twice:
            raise InputError(f"names: {', '.join(map(repr, twice))} given to more than one trace: each trace needs a "
                             "label of its own", param="names")
        return labels
    stems = [trace_stem(os.path.basename(p)) for p in paths]
    stems = [s if s.isprintable() else "".join(ch if ch.isprintable() else "?" for ch in s) for s in stems]
    taken, used, out = set(stems), set(), []
    for s in stems:
        label, n = s, 0
        while stems.count(s) > 1 and (n == 0 or label in used or label in taken):
            n += 1
            label = f"{s}#{n}"
        used.add(label)
        out.append(label)
    return out


def _range_names(range_name: str | Sequence[str] | Mapping[str, str] | None, paths: list[str],
                 labels: list[str]) -> list[str]:
    """One range name per trace: the same for all (a string), one per trace in order (a sequence), or by model
    label (a mapping; labels it does not name get the default range). None (for all, or for one) is the default
    range: the plugin's, else vLLM's own forward scope (`ranges.forward_range`)."""
    if range_name is None:
        return [DEFAULT_RANGE] * len(paths)
    if isinstance(range_name, str):
        return [_one_range(range_name)] * len(paths)
    if isinstance(range_name, Mapping):
        unknown = [k for k in range_name if k not in labels]
        if unknown:
            raise InputError(f"range_name names {', '.join(map(repr, unknown))}, which is not a model's label "
                             f"({', '.join(map(repr, labels))})", param="range_name")
        return [_one_range(range_name.get(label)) for label in labels]
    names = [_one_range(r) for r in many(range_name, "range_name")]
    if len(names) == 1:
        return names * len(paths)
    if len(names) != len(paths):
        raise InputError(f"range_name has {len(names)} names for {len(paths)} traces: give one for all or one per "
                         "trace", param="range_name")
    return names


def _one_range(value) -> str:
    """One forward range name as given: a non-empty string, or None for the default range."""
    if value is None:
        return DEFAULT_RANGE
    if not isinstance(value, str) or not value:
        raise InputError(f"range_name: {value!r} is not an NVTX range name (a non-empty string, or None for the "
                         "default)", param="range_name")
    return value


def _check_distinct(paths: Sequence[str], range_names: Sequence[str],
                    engines: Sequence[str | None] | None = None) -> None:
    """A trace may appear twice only with a different range or scope: the same forwards cannot be compared with
    themselves."""
    seen: dict[tuple[tuple, str, str | None], str] = {}
    for p, r, sc in zip(paths, range_names, engines or [None] * len(paths)):
        key = (file_identity(p), r, sc)  # a link (hard or symbolic) to a trace given is that trace
        if key in seen:
            raise InputError(f"{p} is given twice (as {seen[key]!r} too): each model needs its own trace")
        seen[key] = p


def _scopes(engines: Sequence[str | None] | None, n: int) -> list[str | None]:
    """One scope per trace ([target, *drafts]); None for all when not given."""
    if engines is None:
        return [None] * n
    out = [None if s is None else str(s) for s in many(engines, "engines")]
    if len(out) != n:
        raise InputError(f"engines has {len(out)} entries for {n} traces: give one per trace (None: the whole trace)",
                         param="engines")
    return out


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


def _interval_notes(coefficients: pd.DataFrame, per_run: pd.DataFrame) -> list[str]:
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
    notes += _disagreement_notes(coefficients, per_run)
    few = coefficients[(coefficients["n_draft"] < 2) | (coefficients["n_target"] < 2)]
    for r in few.itertuples():
        notes.append(f"{r.draft} ({r.phase}, {r.metric}): no interval: fewer than two forwards on one side "
                     f"({r.n_draft} draft, {r.n_target} target)")
    return notes


def _disagreement_notes(coefficients: pd.DataFrame, per_run: pd.DataFrame) -> list[str]:
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
                parts.append(f"c {cs[0]:.3g} and {cs[1]:.3g} on {r.metric}{apart}")
            elif np.isfinite(r.ci_low) and r.ci_high > WIDE * r.ci_low:
                parts.append(f"c {cs.min():.3g} to {cs.max():.3g} on {r.metric}, interval {r.ci_low:.3g}–"
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


@with_small_pages
def cost_coefficient(
    target: PathLike | Trace,
    drafts: PathLike | Trace | Sequence[PathLike | Trace],
    *,
    names: Sequence[str] | None = None,
    range_name: str | Sequence[str] | Mapping[str, str] | None = DEFAULT_RANGE,
    skip_ranges: int | None = None,
    output_len: int | None = None,
    acceptance: float | str | Sequence[float | str] = (),
    metrics_dump: PathLike | None = None,
    seed: int = 0,
    spec_metrics: Mapping[str, PathLike] | None = None,
    engines: Sequence[str | None] | None = None,
    scopes: Sequence[str | None] | None = None,
) -> CostCoefficientResult:
    """Measure c of each draft against the target, from one trace (`.sqlite` or `.nsys-rep`) per model.

    Args:
        target: the target model's trace (one path; a list holding one is that path), or a `Trace` already open
            (`open_trace`: read as it is and left open), as each draft may be.
        drafts: the draft models' traces: one path, or a sequence of paths (at least one). Speculative-decoding runs
            may follow (traces holding draft-model forward ranges, recognised by them; with `engines`, the speculative
            engines of an interleaved run, recognised by those inside their windows): they are measured in place
            (`speculative`; the result's `speculative`), each belonging to the draft named before `.spec-g<γ>` in
            its label when that is a draft, else to the only draft.
        names: labels for [target, *drafts], each once; default: the file names.
        range_name: the NVTX range around each forward (`model_executable()`; vLLM's own: `gpu_model_runner: forward`):
            one name for every trace, a sequence with one per trace ([target, *drafts]), or a mapping from a model's
            label to its name (others get the default). A trace may be given twice with two different ranges. The
            default (or None): the plugin's `model_executable()`, else vLLM's own forward scope, with a note.
        skip_ranges: drop the first N matching ranges of each model (default: use the trace's warm-up markers).
        output_len: the benchmark's output length, to tell prefill from decode when ranges carry no payload.
        acceptance: acceptance rates α at which to judge each draft (speedup verdicts): a number, a sequence of
            numbers, or a string "0.6,0.8"; empty for none.
        metrics_dump: a vLLM spec-decode metrics dump (`acceptance.dump_metrics`); its i.i.d. α is judged too.
        seed: seed of the bootstrap intervals.
        spec_metrics: vLLM metrics dump per speculative trace path or model label (default: `X.metrics.json`
            beside `X.sqlite`; for an engine of an interleaved run, `<label>.metrics.json` in the run's folder); a key
            that names no trace given and no label is refused.
        engines: for traces that hold several models (an interleaved run of `profile`), the engine label of each
            trace's model ([target, *drafts]; None: the whole trace): only ranges inside that engine's
            `nsys_cc:engine` windows are read (`scope`). One trace may then be given once per model.
        scopes: the old name of `engines` (deprecated, goes in 0.2.0).
    Returns:
        A `CostCoefficientResult` (see its docstring for every table and column).
    """
    engines = _compat.renamed("scopes=", scopes, engines, "engines")
    opened: dict[str, Trace] = {}  # traces given open (`open_trace`): read as they are, left open

    def path_of_trace(value, param: str) -> str:
        if isinstance(value, Trace):
            opened[value.path] = value
            return value.path
        return path_of(value, param)

    if isinstance(target, Trace) or (not is_one(target) and len(many(target, "target")) == 1):
        paths = [path_of_trace(target if isinstance(target, Trace) else many(target, "target")[0], "target")]
    else:
        paths = [one_path(target, "target", plural="drafts")]
    paths += [path_of_trace(d, "drafts") for d in many(drafts, "drafts")]
    names = None if names is None else [str(n) for n in many(names, "names")]
    if len(paths) < 2:
        raise InputError("give at least one draft trace after the target", param="drafts")
    check_range_arguments(skip_ranges, output_len)
    check_seed(seed)
    alphas, alpha_note = alphas_with_source(acceptance, metrics_dump)
    alpha_cis = _alpha_intervals(alphas, metrics_dump)
    sc = _scopes(engines, len(paths))
    labels = model_names(paths, names)
    if not names and any(sc):  # a model read by its engine's windows is called by its engine's label
        labels = [scope or label for scope, label in zip(sc, labels)]
    range_names = _range_names(range_name, paths, labels)
    _check_distinct(paths, range_names, sc)
    dumps = _spec_metrics(spec_metrics, paths, labels, sc)
    read = _read_run(paths, labels, range_names, sc, skip_ranges=skip_ranges, output_len=output_len, dumps=dumps,
                     run=1, opened=opened)
    models = [read.models[i] for i in sorted(read.models)]
    spec = {i: [read.spec[i]] for i in sorted(read.spec)}
    plain_steps = [] if read.plain_steps is None else [read.plain_steps]
    return _assemble(models, labels, plain_steps, spec, alphas, alpha_note, alpha_cis, seed, output_len, read.notes,
                     read.share)


def target_alone(target: PathLike, *, range_name: str | Sequence[str] | Mapping[str, str] | None = DEFAULT_RANGE,
                 skip_ranges: int | None = None, output_len: int | None = None,
                 seed: int = 0) -> CostCoefficientResult:
    """One trace described alone — its forwards per phase on every metric, its token, launch time against GPU time
    (`gpu_time`) — with no draft and no c: what `nsys_cc.analyze` gives for one PyTorch-profiler trace of vLLM
    (`sources`), whose steps name their phases. A speculative run alone has no plain target to be measured against:
    InputError."""
    path = one_path(target, "target", plural="drafts")
    check_range_arguments(skip_ranges, output_len)
    check_seed(seed)
    labels = model_names([path], None)
    read = _read_run([path], labels, _range_names(range_name, [path], labels), [None], skip_ranges=skip_ranges,
                     output_len=output_len, dumps={}, run=1)
    models = [read.models[i] for i in sorted(read.models)]
    if models[0].speculative:
        raise InputError(f"{path} is a speculative run: give the plain target's trace first, then the drafts' and this "
                         "one (nsys_cc.analyze(target, [draft, spec_run]))", param="source")
    return _assemble(models, labels, [], {}, [], None, [], seed, output_len, read.notes, read.share)


@dataclasses.dataclass
class _RunRead:
    """What the traces of one run gave: the plain models and the speculative runs (with whether they hold
    draft-model forwards) by model index, the plain target's step table when a speculative run needs it, and the
    notes on the forward ranges chosen."""

    models: dict[int, ModelForwards]
    spec: dict[int, tuple[SpecRun, bool]]
    plain_steps: steps_mod.StepTable | None
    notes: list[str]
    share: list[dict] = dataclasses.field(default_factory=list)  # the forward-share rows (`share.share_row`)


def _read_run(paths: Sequence[str], labels: Sequence[str], range_names: Sequence[str],
              engines: Sequence[str | None], *, skip_ranges: int | None, output_len: int | None,
              dumps: Mapping[int, str], run: int, opened: Mapping[str, Trace] | None = None) -> _RunRead:
    """Read the traces of one run of [target, *drafts] (`paths`; a trace given once per model, with `engines`, is
    opened and read once for all of them).

    Each trace's ranges are read once (`ranges.marked_ranges`), then handed on: the target's and a plain draft's to
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
            reads = _group_reads(trace, path, group, range_names, engines)
            for i in group:
                ranges, label, scope = reads.pop(i), labels[i], engines[i]
                name_of_range, range_note = forward_range(ranges, range_names[i], label=label)
                notes += [range_note] if range_note else []
                if name_of_range in (DEFAULT_RANGE, VLLM_STEP_RANGE):  # a torch trace's vLLM steps (`vllm_steps`)
                    from ..forwards import vllm_steps

                    vllm_steps.refuse_unmeasurable(trace, path, label, draft=i > 0)
                    notes += vllm_steps.notes(trace, label) if name_of_range == VLLM_STEP_RANGE else []
                # a scoped model's own files are named after its engine: its runs are read as if its trace were there
                where = path if scope is None else model_stem(path, scope)
                metrics_path = dumps.get(i)
                with_model = i > 0 and draft_range_of(ranges) is not None
                if with_model or (i > 0 and model_free_label(label)
                                  and proposes_without_model(where, metrics_path)):
                    # the speculative analysis is imported only when a speculative run is among the inputs
                    from ..speculative import in_place as spec_mod

                    spec_run = spec_mod.load_run(where, label, "", name_of_range, metrics_path,
                                                 ranges=steps_mod.with_gpu_metrics(trace, ranges, name_of_range))
                    if name_of_range == VLLM_STEP_RANGE:  # the first proposing runs over the prompt: kept apart
                        from ..forwards.vllm_steps import in_place_notes

                        spec_run.notes.extend(in_place_notes(label, spec_run.steps))
                    spec[i] = dataclasses.replace(spec_run, path=path), with_model
                else:
                    if i > 0:
                        _refuse_mislabelled(path, where, label, i in dumps)
                    loaded[i] = model_of(trace, ranges, path=path, name=label, role="target" if i == 0 else "draft",
                                         range_name=name_of_range, skip_ranges=skip_ranges, output_len=output_len,
                                         scope=scope, run=run)
                bench = model_stem(path, scope) + ".bench.json"
                if os.path.isfile(bench):  # vLLM's latencies: the forward-share check (`share`)
                    if i in loaded:
                        forwards, iterations = loaded[i].forwards, loaded[i].iterations
                    else:
                        forwards = select(ranges, name_of_range)
                        iterations = phase_mod.markers(ranges, (ITERATION_RANGE,))
                    try:
                        shares[i] = share_mod.share_row(label, forwards, iterations, bench, run)
                    except InputError as exc:
                        notes.append(f"{label}: {exc}: no forward share")
                if i == 0:
                    target_markers = steps_mod.markers_of(ranges, name_of_range, trace)
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
    return _RunRead(loaded, spec, plain_steps, notes, [shares[i] for i in sorted(shares)])


def _spec_metrics(spec_metrics: Mapping | None, paths: Sequence[str], labels: Sequence[str],
                  engines: Sequence[str | None]) -> dict[int, str]:
    """The metrics dumps given (`spec_metrics`: by trace path, or by model label) per model index. A key that is
    neither a trace given (read whole) nor a model's label is refused: its dump would be ignored."""
    if spec_metrics is None:
        return {}
    if not isinstance(spec_metrics, Mapping):
        raise InputError("spec_metrics: give a mapping from a speculative trace (or its label) to its metrics dump",
                         param="spec_metrics")
    out: dict[int, str] = {}
    for key, dump in spec_metrics.items():
        text = os.fspath(key) if isinstance(key, (str, os.PathLike)) else str(key)
        hits = [i for i, label in enumerate(labels) if label == text]
        if not hits:
            hits = [i for i, (p, sc) in enumerate(zip(paths, engines))
                    if sc is None and file_identity(p) == file_identity(text)]
        if not hits:
            raise InputError(f"spec_metrics: {text!r} is neither a trace given (read whole) nor a model's label "
                             f"({', '.join(map(repr, labels))}): its dump would be ignored", param="spec_metrics")
        for i in hits:
            out[i] = os.fspath(dump)
    return out


def _same_trace(paths: Sequence[str]) -> dict[str, list[int]]:
    """The models' indexes per trace path, in the order the paths first come."""
    groups: dict[str, list[int]] = {}
    for i, path in enumerate(paths):
        groups.setdefault(os.fspath(path), []).append(i)
    return groups


def _group_reads(trace, path: str, group: Sequence[int], range_names: Sequence[str],
                 engines: Sequence[str | None]) -> dict[int, pd.DataFrame]:
    """The ranges of each model in `group` (indexes of the models of one open trace): one read for all the models
    that look for the same range name (`scoped_reads`), each its engine's part."""
    out: dict[int, pd.DataFrame] = {}
    for name in dict.fromkeys(range_names[i] for i in group):
        js = [i for i in group if range_names[i] == name]
        out.update(zip(js, scoped_reads(trace, name, [engines[i] for i in js], path)))
    return out


def _alpha_intervals(alphas: list[float], metrics_dump: PathLike | None) -> list[tuple[float, float] | None]:
    """Per α, its interval: the Wilson interval of a metrics dump's α (the last one), None for the α given."""
    out: list[tuple[float, float] | None] = [None] * len(alphas)
    if metrics_dump is not None and alphas:
        out[-1] = measured_alpha(metrics_dump).alpha_iid_ci95
    return out


def _assemble(models: list[ModelForwards], labels: list[str], plain_steps: Sequence[steps_mod.StepTable],
              spec: Mapping[int, Sequence[tuple[SpecRun, bool]]], alphas: list[float],
              alpha_note: str | None, alpha_cis: list[tuple[float, float] | None], seed: int,
              output_len: int | None, range_notes: Sequence[str] = (),
              share_rows: Sequence[dict] = (), numbers: Sequence[int] | None = None) -> CostCoefficientResult:
    """The result from the loaded plain models and the speculative runs: per speculative engine its run of each run
    ((run, has draft-model forwards) each), measured in place against the plain target's steps of the same runs
    (`plain_steps`, one table per run; pooled over several, `spec_runs.analyze_pooled`); `share_rows`: the forward
    share of each model and run that has vLLM's latencies (`share`)."""
    coefficients, per_run = token_coefficients(models, seed, _coefficients)  # c of a token (`token`)
    kernel_summary, categories = _kernel_tables(models)
    headline = gpu_time_mod.headline(models)  # GPU time is the answer on a GPU trace (`gpu_time`)
    marks = _marks(coefficients, headline)
    forward_share = share_mod.share_table(share_rows)
    notes = [*dict.fromkeys(range_notes), *_model_notes(models), *token_notes(models, coefficients),
             *_interval_notes(coefficients, per_run),
             *_slow_draft_notes(marks, labels[0], headline), *share_mod.share_notes(forward_share),
             *([alpha_note] if alpha_note else [])]
    if models[0].speculative:
        notes.append(f"{labels[0]}: the target trace is a speculative-decoding run: its verify forwards are phase "
                     "'verify', which no plain draft has; for c and the speculative analysis give the plain target "
                     "run first, then the drafts and the speculative runs")
    speculative = None
    if spec:
        from ..speculative import in_place as spec_mod, pooled as spec_runs_mod

        draft_labels = [m.name for m in models[1:]]
        per_engine = [[dataclasses.replace(run, draft=spec_mod.draft_of(run.name, draft_labels, with_model))
                       for run, with_model in runs] for runs in spec.values()]
        speculative = spec_runs_mod.analyze_pooled(
            plain_steps, per_engine, c_standalone=spec_mod.standalone_c(coefficients, per_run), output_len=output_len,
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
    )


def _verdicts(coefficients: pd.DataFrame, alphas: list[float], alpha_cis: list, speculative) -> pd.DataFrame:
    """The speedup verdicts: Thm 3.8 with c alone; where a draft was measured in place, resting on its runs
    (`speculative.verdicts_in_place`: the measured speedups and their cost model's forecast first)."""
    table = verdicts(coefficients, alphas, alpha_intervals=alpha_cis)
    if speculative is None:
        return table
    from ..speculative.in_place import verdicts_in_place

    return verdicts_in_place(table, speculative)


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
    run (`nsys_cc:engine` windows, `scope`). Then (runs, names, engines, run numbers): each run its trace once per
    model, the models its engines (`names`, when given, choose and order them, target first). None when no item is
    an interleaved run (a flat list is then one run, a trace per model). InputError for a mix, or names that are not
    the runs' engines."""
    from ...trace import open_trace
    from ..forwards.engines import engines as engines_in
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
                trace = os.path.join(item, outputs.RUN_TRACE)
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
                    found = engines_in(t.nvtx_ranges(prefixes=[ENGINE_RANGE_PREFIX], nesting=False))
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
    range_name: str | Sequence[str] | Mapping[str, str] | None = DEFAULT_RANGE,
    skip_ranges: int | None = None,
    output_len: int | None = None,
    acceptance: float | str | Sequence[float | str] = (),
    metrics_dump: PathLike | None = None,
    seed: int = 0,
    scopes: Sequence[Sequence[str | None]] | None = None,
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
            pooled over the runs (`spec_runs.analyze_pooled`; the result's `speculative`).
        range_name: as for `cost_coefficient` (one name, one per model of a run, or by label), as are
            `skip_ranges`, `output_len`, `acceptance`, `metrics_dump` and `seed`.
        scopes: the old name of `engines` (deprecated, goes in 0.2.0).
    Returns:
        A `CostCoefficientResult` over the pooled runs: per model the forwards of every run (column `run`, 1 … R; an
        interleaved profile's own run numbers, its `run-<k>` folders', when read as it is), c = the ratio of the
        pooled medians with the interval across runs, and `runs`, c per run (the same numbers).
    """
    engines = _compat.renamed("scopes=", scopes, engines, "engines")
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
    run_scopes: list[list | None] | None = None
    if engines is not None:
        per_run = many(engines, "engines")
        if len(run_paths) == 1 and len(per_run) > 1 and all(s is None or is_one(s) for s in per_run):
            per_run = [per_run]  # the one run's engines, not wrapped in a list of runs
        run_scopes = [None if s is None else many(s, "engines") for s in per_run]
        if len(run_scopes) != len(run_paths):
            raise InputError(f"engines has {len(run_scopes)} entries for {len(run_paths)} runs: give one list per run",
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
    if names is None and run_scopes is not None and run_scopes[0] is not None and all(run_scopes[0]):
        names = [str(s) for s in run_scopes[0]]  # a model read by its engine's windows is called by its label
    names = model_names(run_paths[0], names)  # each label once, one line of printable text
    check_range_arguments(skip_ranges, output_len)
    check_seed(seed)
    alphas, alpha_note = alphas_with_source(acceptance, metrics_dump)
    alpha_cis = _alpha_intervals(alphas, metrics_dump)
    all_scopes = [_scopes(None if run_scopes is None else run_scopes[i], n) for i in range(len(run_paths))]
    numbers = list(range(1, len(run_paths) + 1)) if numbers is None else numbers
    range_names = _range_names(range_name, run_paths[0], names)
    reads = []
    for number, paths, sc in zip(numbers, run_paths, all_scopes):
        _check_distinct(paths, range_names, sc)
        reads.append(_read_run(paths, names, range_names, sc, skip_ranges=skip_ranges, output_len=output_len,
                               dumps={}, run=number))
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
    return _assemble(models, names, plain_steps, spec, alphas, alpha_note, alpha_cis, seed, output_len,
                     [note for read in reads for note in read.notes], [row for read in reads for row in read.share],
                     numbers=[n for n, read in zip(numbers, reads) if read.plain_steps is not None])
