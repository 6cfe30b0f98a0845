"""What `profile` checks of a fresh export before it keeps a run: which forward range it holds and how many (the
analysis's own decision, `analysis.forwards.ranges.forward_range`: the plugin's `model_executable()`, else vLLM's own
`gpu_model_runner: forward`), whether a GPU run's forwards have GPU work, and whether a speculative run holds the
draft ranges it needs. (The forward-share check against vLLM's latencies is the analysis's:
`analysis.profile_dir.forward_share`.)
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from ..analysis.forwards.ranges import forward_range as decided_range
from ..analysis.profile_dir.spec_labels import MODEL_FREE_METHODS
from ..contract import DRAFT_FORWARD_RANGE, DRAFT_RANGES, FORWARD_RANGES
from ..trace import open_trace
from ..trace.nvtx import matches


@dataclass(frozen=True)
class RunCheck:
    """What `profile` checks of a trace right after its export: its forward range and how many there are (0: none;
    the run failed), and why the run cannot be measured (None when it can)."""

    range_name: str
    forwards: int
    problem: str | None = None


def after_export(sqlite: str | Path, *, gpu: bool = False, trace_option: str | None = None, speculative: bool = False,
                 method: str | None = None) -> RunCheck:
    """`profile`'s check of a fresh export, with one open and one read of the ranges it needs (the forward and draft
    forward names only): which forward range it holds (`forward_range`), and for a GPU run whose forwards have no GPU
    work, or a speculative run (`method`: its proposer) without draft ranges, the problem (`gpu_problem`,
    `draft_problem`)."""
    with open_trace(sqlite) as trace:
        ranges = trace.nvtx_ranges(names=[*FORWARD_RANGES, *DRAFT_RANGES], nesting=False, warn=False)
        name, count = _forward_range_of(ranges)
        problem = None
        if count and gpu:
            problem = _gpu_problem(trace, ranges, name, trace_option)
        if count and speculative and not problem:
            problem = _draft_problem(ranges, method)
    return RunCheck(name, count, problem)


def _forward_range_of(ranges: pd.DataFrame) -> tuple[str, int]:
    name, _ = decided_range(ranges, None, label="")
    return name, int(matches(ranges, (name,)).sum())


def forward_range(sqlite: str | Path) -> tuple[str, int]:
    """Which forward range the export holds and how many: the plugin's `model_executable()`, else vLLM's own
    `gpu_model_runner: forward` (the plugin's fallback on vLLM layouts it does not know), else
    (`model_executable()`, 0). Only ranges of these two names are read (`after_export` does it all at once)."""
    with open_trace(sqlite) as trace:
        return _forward_range_of(trace.nvtx_ranges(names=FORWARD_RANGES, nesting=False, warn=False))


# A user's own proposer class: whether it runs a model is unknown, so its runs are not required to hold draft ranges.
UNKNOWN_METHODS = ("custom_class",)


def draft_problem(sqlite: str | Path, method: str | None) -> str | None:
    """Why a speculative run's trace cannot be measured in place (None when it can, or when its proposer `method`
    runs no draft model): it holds no draft-forward range."""
    with open_trace(sqlite) as trace:
        return _draft_problem(trace.nvtx_ranges(names=DRAFT_RANGES, nesting=False, warn=False), method)


def _draft_problem(ranges: pd.DataFrame, method: str | None) -> str | None:
    if method in MODEL_FREE_METHODS or method in UNKNOWN_METHODS:
        return None
    if matches(ranges, DRAFT_RANGES).any():
        return None
    return (f"the speculative run (method {method or 'draft_model'}) recorded no {DRAFT_FORWARD_RANGE} ranges: the "
            "plugin did not wrap this vLLM's proposer (see the nsys-cc warnings in the log) or vLLM ran no draft "
            "forward; without draft ranges the run cannot be measured in place, and measured as a plain draft its c "
            "would be wrong")


def gpu_problem(sqlite: str | Path, range_name: str, trace_option: str | None) -> str | None:
    """Why a GPU run's forward ranges (`range_name`) have no GPU work projected onto them, naming the likely causes
    (None when at least one has): `trace_option` is the run's nsys `-t` value."""
    with open_trace(sqlite) as trace:
        return _gpu_problem(trace, trace.nvtx_ranges(names=[range_name], nesting=False, warn=False), range_name,
                            trace_option)


def _gpu_problem(trace, ranges: pd.DataFrame, range_name: str, trace_option: str | None) -> str | None:
    from ..analysis.forwards.projection import project

    traced = (trace_option or "").split(",")
    forwards = 0
    calls = trace.count("cuda_api")  # (the torch route's trace: its cuda_runtime/cuda_driver events)
    gpu_activity = bool(trace.has_cuda)
    if calls and gpu_activity:
        matched = ranges[matches(ranges, (range_name,))]
        forwards = len(matched)
        if (project(trace, matched)["gpu_ops"].fillna(0) > 0).any():
            return None
    if trace_option is not None and "cuda" not in traced:
        return (f"no GPU work was recorded: the nsys trace option -t {trace_option} leaves out cuda (CUDA tracing); "
                "profile with the default, or add cuda to it")
    if not calls:
        return ("no CUDA API call was recorded, so no forward has GPU work: likely causes: nsys's CUPTI could not "
                "attach to this CUDA driver (an nsys older than the driver: use the nsys of the installed CUDA toolkit "
                "or a newer one; see nsys's warnings in the log), or the model ran on the CPU")
    if not gpu_activity:
        return (f"CUDA API calls were recorded ({calls}) but no GPU activity (no kernel, copy or graph rows): CUPTI "
                "recorded none of the GPU work — likely a CUPTI/driver mismatch (an nsys older than the driver: use "
                "the nsys of the installed CUDA toolkit or a newer one), or the capture stopped before CUPTI flushed")
    return (f"none of the {forwards} {range_name} ranges has GPU work projected onto it although the trace holds "
            "GPU activity: as in nsys, only CUDA calls made inside a range on its own thread count; likely causes: "
            "kernels launched from another thread or process (vLLM's engine/worker processes traced without "
            "--trace-fork-before-exec=true, a worker thread), or forward ranges recorded where CUDA was not traced")
