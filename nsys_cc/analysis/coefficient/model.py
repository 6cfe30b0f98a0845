"""One model read from one trace: its forward ranges with the per-forward metrics, warm-up flags and phases
(`model_of`, `load_model`; one engine's part of a trace that holds several: `forwards.engines`), and what is said of
the ranges on the way (copies and nested ranges dropped, forwards never closed, GPU work missing or lost)."""

from __future__ import annotations

import contextlib
import os
import re
import weakref
from collections.abc import Sequence

import numpy as np
import pandas as pd

from ...contract import VLLM_STEP_RANGE
from ...errors import RangeNotFoundError
from ...trace import open_trace
from ...trace.cuda import dropped_note
from ...trace.description import TraceDescription
from ...trace.nvtx import matches
from ..forwards import phases as phase_mod, ranks as rank_mod
from ..forwards.engines import engine_windows, split_by_engine
from ..forwards.gpu_loss import GpuLoss, measure as measure_gpu_loss, shared_id_warnings, warnings as gpu_loss_warnings
from ..forwards.projection import op_totals, project
from ..forwards.ranges import (
    by_start,
    draft_range_of,
    forward_range,
    marked_ranges,
    nested_same_name,
    not_found,
    quoted,
)
from ..forwards.steps import STEP_NAME_COLUMNS
from ..metrics import COLUMNS, GPU_SPAN, KERNEL_SUM, METRICS
from .arguments import PathLike
from .result import ModelForwards, PhaseRule
from .token import PART_COLUMNS, with_parts

# What a model keeps of its forward ranges once they are measured (the rest of the trace's NVTX and GPU columns is
# let go, so analysing N traces holds about one trace's worth of memory at a time, not N).
MODEL_COLUMNS = ["range_id", "qualified_name", "pid", "tid", "start_ns", "end_ns", "payload", "open_at_end", "kept",
                   "phase", "kernels", "gpu_ops", "run", *COLUMNS.values()]


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


# The engine runner's frame around each forward step, which a torch trace without step annotations still holds (a
# tensor-parallel rank's trace, say): vLLM's `…/gpu_model_runner.py(N): execute_model`, SGLang's
# `…/model_runner.py(N): forward`.
RUNNER_FRAME = re.compile(r"model_runner\.py\(\d+\): (?:execute_model|forward)$")


def _no_such_range(trace, ranges: pd.DataFrame, path: str, range_name: str) -> RangeNotFoundError:
    """The error for a range name that matches nothing (`ranges.not_found`), with the parameter that picks one; for a
    PyTorch-profiler trace whose runner frames hold the forwards (a TP rank's trace was pointed at
    'nccl:_all_gather_base', the one name that is no forward), the frame that works and which rank it is."""
    hint = " (choose one with range_name)"
    if trace.capabilities.engine_steps:  # an engine's own trace: its runner frames, its rank
        frames = trace.python_frames(nesting=False)["name"].astype(str)
        runner = frames[frames.str.contains(RUNNER_FRAME)].value_counts()
        d = described(trace)
        rank = (f"it is rank {d.rank if d.rank is not None else '?'} of {d.world_size} of a distributed run; "
                if d is not None and d.world_size is not None and d.world_size > 1 else "")
        if len(runner):
            hint += (f"; {rank}its ranges are not forwards, but its engine's runner frame is, one per step: "
                     f"range_name={quoted(str(runner.index[0]))} ({int(runner.iloc[0])} of them)")
        elif rank:
            hint += f"; {rank.removesuffix('; ')}"
    return not_found(trace, ranges, range_name, path=path, hint=hint, param="range_name")


def load_model(
    path: PathLike,
    *,
    name: str,
    role: str,
    range_name: str | None = None,
    skip_ranges: int | None = None,
    output_len: int | None = None,
    engine: str | None = None,
    run: int = 1,
) -> ModelForwards:
    """Read one trace and return its forward ranges with metrics, warm-up flags and phases (opens the trace;
    `cost_coefficient` opens each trace once and hands what it read to `model_of`). range_name: the forward range
    (None: the default, settled per trace by `forwards.ranges.forward_range`); engine: the engine label of the model
    in a trace that holds several (only ranges inside its `nsys_cc:engine` windows are read, `forwards.engines`); run:
    the run number its forwards carry (`cost_coefficient_runs`)."""
    (model,) = models_of_trace(path, names=[name], roles=[role], engines=[engine], range_name=range_name,
                               skip_ranges=skip_ranges, output_len=output_len, run=run)
    return model


def models_of_trace(path: PathLike, *, names: Sequence[str], roles: Sequence[str], engines: Sequence[str | None],
                    range_name: str | None = None, skip_ranges: int | None = None, output_len: int | None = None,
                    run: int = 1) -> list[ModelForwards]:
    """`load_model` for several engines of one trace (`names`, `roles`, `engines` side by side): the trace opened once
    and its ranges read once for all of them (`forwards.engines.split_by_engine`)."""
    path = os.fspath(path)
    with open_trace(path) as trace:
        ranges = marked_ranges(trace, range_name, *engine_windows(engines), engines=None in engines)
        out = []
        for name, role, engine, part in zip(names, roles, engines,
                                            split_by_engine(ranges, engines, path=path, trace=trace)):
            forward, _ = forward_range(part, range_name, label=name)
            out.append(model_of(trace, part, path=path, name=name, role=role, range_name=forward,
                                skip_ranges=skip_ranges, output_len=output_len, engine=engine, run=run))
        return out


def model_of(
    trace,
    ranges: pd.DataFrame,
    *,
    path: str,
    name: str,
    role: str,
    range_name: str,
    skip_ranges: int | None = None,
    output_len: int | None = None,
    engine: str | None = None,
    run: int = 1,
) -> ModelForwards:
    """One model from its open `trace` and the ranges read of it (`forwards.ranges.marked_ranges`: the forwards and
    the markers, nothing else; one engine's part when `engine` says which): the forward ranges of `range_name` (the
    forward range decided for this trace, `forward_range`) with metrics, warm-up flags and phases, each forward
    carrying `run`."""
    ranges, twice = _without_copies(ranges)
    matched, inner = _forward_ranges(trace, ranges, path, range_name, engine)
    has_cuda = bool(trace.has_cuda)
    forwards = _per_forward(project(trace, matched), has_cuda).reset_index(drop=True)
    forwards, ranks = rank_mod.group_forwards(trace, forwards, ranges)
    token_parts, token_note = "", "tensor-parallel forwards: c is the forwards' c alone (no logits/sampling added yet)"
    if ranks is None:  # the logits and sampling after each forward (`token`): one process's forwards only
        forwards, token_parts, token_note = with_parts(trace, ranges, forwards, range_name, has_cuda)
    marks = phase_mod.marker_sets(ranges)  # the warm-up, the phases' batches and the iterations all read them
    warm_note = _keep(forwards, ranges, marks, skip_ranges, "ranges" if ranks is None else "forwards",
                      path=path, range_name=range_name, twice=twice, inner=inner)
    has_cuda, gpu_note, loss = _gpu_notes(trace, forwards, range_name)
    forwards, rule = _with_phases(trace, forwards, ranges, marks, output_len, range_name, run)
    totals = pd.DataFrame()
    if has_cuda:
        kept = forwards[forwards["kept"]]
        phases = kept["phase"].to_numpy(dtype=object)
        totals = ranks.op_totals(trace, kept) if ranks else op_totals(trace, kept, phases)
    # The kept columns only. They were taken (copied) out of the trace's ranges, so nothing of the trace's own
    # tables stays referenced; a deep copy here would copy every forward's columns once more (0.7 s at 2 M).
    forwards = forwards[MODEL_COLUMNS + (rank_mod.TP_COLUMNS if ranks else [])
                        + [c for c in (*PART_COLUMNS, *STEP_NAME_COLUMNS) if c in forwards]]
    if ranks:
        ranks.compact(MODEL_COLUMNS)
    return ModelForwards(name=name, role=role, path=path, range_name=range_name, nsys_version=trace.nsys_version,
                         has_cuda=has_cuda, forwards=forwards, warmup_note=warm_note, phase_rule=rule,
                         op_totals=totals, gpu_note=gpu_note, ranks=ranks,
                         speculative=draft_range_of(ranges) is not None, token_parts=token_parts, gpu_loss=loss,
                         token_note=token_note,
                         iterations=marks.iterations.assign(run=run), description=described(trace),
                         trace_format=trace.format, recorder=trace.recorder)


def _without_copies(ranges: pd.DataFrame) -> tuple[pd.DataFrame, pd.Series]:
    """The ranges with every copy of a row dropped, and how many were dropped of each name.

    The same row twice (name, thread, start and end): nsys writes each range once, so a copy would only count a
    forward, its logits or its sampling (and a marker) twice. Every copy is dropped here, before anything reads the
    ranges, and said (issue 45: the forwards' copies alone were, and decode c read 0.852 instead of 0.653)."""
    copies = _duplicated(by_start(ranges))
    if not copies.any():
        return ranges, pd.Series(dtype="int64")
    ranges = by_start(ranges)
    twice = ranges["qualified_name"][copies].astype(object).value_counts()
    return ranges[~copies], twice


def _forward_ranges(trace, ranges: pd.DataFrame, path: str, range_name: str,
                    engine: str | None) -> tuple[pd.DataFrame, np.ndarray]:
    """The ranges of `range_name` that are forwards, in start order, and which of the matched ranges were dropped as
    nested in another of that name; the error when none has the name."""
    hit = matches(ranges, (range_name,))
    if not hit.any():
        if engine is not None:
            raise RangeNotFoundError(f"{path}: no {_quoted(range_name)} ranges inside engine {engine!r}'s windows",
                                     param="range_name")
        raise _no_such_range(trace, trace.nvtx_ranges(nesting=False), path, range_name)
    matched = by_start(ranges[hit])
    # A range of the forward's name inside another on the same thread is part of that forward, not one more.
    inner = nested_same_name(matched)
    if inner.any():
        matched = matched[~inner]
    return matched, inner


def _keep(forwards: pd.DataFrame, ranges: pd.DataFrame, marks, skip_ranges: int | None, unit: str, *, path: str,
          range_name: str, twice: pd.Series, inner: np.ndarray) -> str:
    """Marks the forwards kept (`kept`: past the warm-up, and closed) and returns the warm-up note with all that was
    dropped on the way (never-closed forwards, copies, nested ranges) and zero-length ranges said; the error when no
    forward is kept."""
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
        warm_note += (f"; every kept {_quoted(range_name)} range lasts 0 ns (it ends where it starts), which no "
                      "forward that ran can (the ranges are damaged, or are markers, not forwards): no c is made of "
                      "that time")
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
    return warm_note


def _gpu_notes(trace, forwards: pd.DataFrame, range_name: str) -> tuple[bool, str, GpuLoss | None]:
    """Whether the kept forwards have GPU metrics (`_gpu_state`), the note on what of the GPU work is missing,
    damaged or lost, and the partial CUDA loss measured (None without GPU metrics)."""
    has_cuda, gpu_note = _gpu_state(trace, forwards, range_name)
    gpu_note = "; ".join(t for t in (gpu_note, dropped_note(trace)) if t)  # damaged CUDA rows, left out, said
    if trace.has_cuda:  # correlationIds shared where CUPTI never shares them: said whatever was projected
        gpu_note = "; ".join(t for t in (gpu_note, *shared_id_warnings(trace)) if t)
    loss = measure_gpu_loss(trace, forwards[forwards["kept"]]) if has_cuda else None  # partial CUDA loss, said
    if loss is not None:
        gpu_note = "; ".join(t for t in (gpu_note, *gpu_loss_warnings(loss, range_name)) if t)
    return has_cuda, gpu_note, loss


def _with_phases(trace, forwards: pd.DataFrame, ranges: pd.DataFrame, marks, output_len: int | None,
                 range_name: str, run: int) -> tuple[pd.DataFrame, PhaseRule]:
    """The forwards with their phase (and, for vLLM's step annotations, each step's kind, batch, tokens and context)
    and `run`, and the rule that decided the phases."""
    phase, rule = phase_mod.assign_phases(forwards, ranges, output_len, forwards["kept"].to_numpy(),
                                          windows=marks.windows)
    if range_name == VLLM_STEP_RANGE:  # vLLM's step annotations name their phase (`vllm_steps`)
        from ..forwards.vllm_steps import phases_of, step_columns

        phase, detail = phases_of(trace, forwards)
        rule = PhaseRule("step names", detail)
        forwards = forwards.assign(**step_columns(trace, forwards))  # kind, batch, tokens, context of each step
    forwards["phase"] = phase_mod.phase_column(phase)
    forwards["run"] = run
    return forwards, rule

# Each open trace's description (`Trace.describe`), asked once however many engines of it are read.
_DESCRIBED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def described(trace) -> TraceDescription | None:
    """Where `trace` ran (`Trace.describe`), once per open trace; None for a trace object that cannot say."""
    if not hasattr(trace, "describe"):
        return None
    try:
        return _DESCRIBED[trace]
    except (KeyError, TypeError):
        description = trace.describe()
        with contextlib.suppress(TypeError):  # an object that cannot be weakly referenced: not kept
            _DESCRIBED[trace] = description
        return description


def _duplicated(matched: pd.DataFrame) -> np.ndarray:
    """Rows of `matched` (in start order, `by_start`) equal to an earlier row in name, thread, start and end: a
    boolean array. Equal rows have equal starts, so where no two starts are equal (nsys's rows of one thread, the usual
    case) there are none and the rows are not hashed (0.3 s at 2 M forwards); a range and its first child may start
    together, and then they are."""
    start = matched["start_ns"].to_numpy(dtype=np.int64)
    if len(start) < 2 or bool((start[1:] != start[:-1]).all()):
        return np.zeros(len(start), dtype=bool)
    return matched.duplicated(["qualified_name", "global_tid", "start_ns", "end_ns"]).to_numpy(dtype=bool)


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
