"""Picking NVTX ranges by name from `Trace.nvtx_ranges()`, and the one read of a trace's ranges the analysis makes.

A name matches a range when it equals the range's plain `name` or its `qualified_name` ("domain:name"),
exactly, after dropping one leading ":" from the query (newer nsys prints default-domain ranges as
":name"; a leading "::" is kept).
"""

from __future__ import annotations

import difflib

import numpy as np
import pandas as pd

from ...contract import (
    ALL_REDUCE_RANGE,
    DRAFT_FORWARD_RANGE,
    DRAFT_LOGITS_RANGE,
    DRAFT_RANGES,
    DRAFT_SAMPLE_RANGE,
    ENGINE_RANGE_PREFIX,
    FORWARD_RANGE,
    ITERATION_RANGE,
    LOGITS_RANGE,
    PROPOSE_RANGE,
    SAMPLE_RANGE,
    SCOPES_ALLOCATE,
    SCOPES_DRAFT,
    SCOPES_FORWARD,
    SCOPES_POSTPROCESS,
    SCOPES_SAMPLE,
    SCOPES_STEP_PREFIX,
    STEP_CONTEXT_RANGE,
    STEP_RANGE,
    VLLM_SCOPES_ENV,
    VLLM_STEP_RANGE,
    WARMUP_RANGE,
)
from ...errors import RangeNotFoundError
from ...trace.nvtx import clean_name, matches
from ...trace.pages import with_small_pages
from ...trace.source import Trace
from ..metrics import GPU_BUSY_NS, KERNEL_SUM_NS

# Longest range name quoted in a message: NVTX names can be kilobytes (whole call stacks, JSON).
NAME_CHARS = 80


def select(ranges: pd.DataFrame, name: str) -> pd.DataFrame:
    """The rows of `ranges` whose name or qualified name is `name` (same index, all columns)."""
    return ranges[matches(ranges, (name,))]


def by_start(frame: pd.DataFrame) -> pd.DataFrame:
    """`frame` in start order (stable); as it is when it already is, as an export's rows of one thread are."""
    if frame["start_ns"].is_monotonic_increasing:
        return frame
    return frame.sort_values("start_ns", kind="stable")


def nested_same_name(frame: pd.DataFrame) -> np.ndarray:
    """Rows of `frame` (ranges of one name) that lie inside another of its rows on the same thread (start ≥ and end ≤
    the other's; rows exactly equal to another are duplicates, not nested): a boolean array in `frame`'s order. Only
    the outermost range of a nested same-name chain is a forward: a child range of the forward's own name (a
    re-entrant hook, a wrapper calling the wrapped) would otherwise count every forward twice. A range still open
    when the capture ended (`open_at_end`) has no real end: it neither holds nor is held (its own note drops it)."""
    inside = np.zeros(len(frame), dtype=bool)
    closed = (~frame["open_at_end"].to_numpy(dtype=bool) if "open_at_end" in frame
              else np.ones(len(frame), dtype=bool))
    at = np.flatnonzero(closed)
    if len(at) < 2:
        return inside
    gtid = frame["global_tid"].to_numpy(dtype=np.int64)[at]
    start = frame["start_ns"].to_numpy(dtype=np.int64)[at]
    end = frame["end_ns"].to_numpy(dtype=np.int64)[at]
    one_thread = bool((gtid == gtid[0]).all())
    if one_thread and bool((start[1:] > start[:-1]).all()):
        # one thread, its starts strictly rising (the usual forwards of one process, already by start): that is the
        # order below, and the threads' running maximum is one running maximum (no sort, no groupby: 0.1 s at 2 M)
        order = np.arange(len(at))
        e = end
        first = np.zeros(len(at), dtype=bool)
        first[0] = True
        reach = np.maximum.accumulate(e)
    else:
        order = np.lexsort((-end, start, gtid))  # per thread by start, the longer first at an equal start
        g, e = gtid[order], end[order]
        first = np.r_[True, g[1:] != g[:-1]]
        # The latest end among the earlier ranges of the thread: a range ending no later is inside one of them.
        reach = pd.Series(e).groupby(np.cumsum(first)).cummax().to_numpy()
    before = np.r_[np.iinfo(np.int64).min, reach[:-1]]
    before[first] = np.iinfo(np.int64).min
    nested = np.zeros(len(at), dtype=bool)
    nested[order] = e <= before
    inside[at[nested]] = True
    return inside


def name_counts(ranges: pd.DataFrame) -> pd.Series:
    """Number of ranges per qualified name, most frequent first (ties by name). Unnamed ranges (no text, no
    registered string: real, e.g. 1,998 of 21,462 in one public nvFuser trace) are counted under a missing name."""
    counts = ranges["qualified_name"].value_counts(dropna=False)  # per category: no object per row
    counts = counts[counts > 0]
    counts.index = pd.Index(counts.index.astype(object), name=counts.index.name)
    frame = counts.rename_axis("name").reset_index(name="count")
    frame = frame.sort_values(["count", "name"], ascending=[False, True], na_position="last", kind="stable")
    return pd.Series(frame["count"].to_numpy(), index=pd.Index(frame["name"], name="name"), name="count")


def closest_names(ranges: pd.DataFrame, name: str, n: int = 5) -> list[str]:
    """Up to `n` distinct range names (qualified) closest to `name` (difflib ratio), for "did you mean" hints."""
    names = [str(x) for x in name_counts(ranges).index if isinstance(x, str)]
    close = difflib.get_close_matches(clean_name(name), names, n=n, cutoff=0.4)
    if len(close) < n:
        lowered = clean_name(name).lower()
        close += [x for x in names if lowered in x.lower() and x not in close][: n - len(close)]
    return close


def quoted(name: str) -> str:
    """A range name as messages quote it (shortened past NAME_CHARS characters)."""
    return repr(name if len(name) <= NAME_CHARS else name[: NAME_CHARS - 1] + "…")


def not_found(trace: Trace, ranges: pd.DataFrame, name: str, *, path: str | None = None, hint: str = "",
              param: str | None = None) -> RangeNotFoundError:
    """The one error for a range name that matches nothing in `ranges` (the trace's NVTX ranges), saying what the
    trace does hold: no NVTX table, no ranges, no names, else the closest names (or the most frequent ones).
    `path`: the file as the user named it (default `trace.path`); `hint` is appended to the list of names (e.g.
    "(choose one with range_name)"), `param` the parameter at fault (the CLI writes its flag)."""
    can = trace.capabilities
    wanted = f"{path or trace.path}: no {can.range_word} named {quoted(name)}"
    no_table = trace.no_range_table()
    if no_table is not None:
        return RangeNotFoundError(f"{wanted}: {no_table}", param=param)
    if ranges.empty:
        return RangeNotFoundError(f"{wanted}: {can.no_ranges}", param=param)
    if ranges["qualified_name"].isna().all():
        return RangeNotFoundError(
            f"{wanted}: none of its {len(ranges)} NVTX ranges has a name (registered names need the StringIds table)",
            param=param,
        )
    near = closest_names(ranges, name)
    listed = near or [n for n in name_counts(ranges).index if isinstance(n, str)][:5]
    label = "closest names" if near else "names in the trace"
    if name == FORWARD_RANGE:  # an engine's steps read as forwards: say that they are not there either
        from .vllm_steps import missing_note

        wanted += f" and {missing_note(trace)}" if missing_note(trace) else ""
    return RangeNotFoundError(f"{wanted}; {label}: {', '.join(map(quoted, listed))}{hint}", param=param)


# Columns of `range_table`, in order: the range, then its projection onto the GPU.
TABLE_COLUMNS = [
    "range_id", "name", "range_style", "pid", "tid", "start_ns", "end_ns", "duration_ns", "level",
    "proj_start_ns", "proj_duration_ns", "gpu_ops", KERNEL_SUM_NS, GPU_BUSY_NS,
]


@with_small_pages
def range_table(trace: Trace, range_name: str | None = None) -> pd.DataFrame:
    """One row per NVTX range (only those named `range_name` when given) with its GPU projection, columns
    TABLE_COLUMNS (`name` is the qualified name). GPU columns are <NA> where the range launched nothing
    or the trace has no CUDA data. Raises RangeNotFoundError for an unknown name."""
    from .projection import project

    if range_name is None:
        ranges = trace.nvtx_ranges()
    else:  # SQLite reads only these (their nesting among all ranges is still worked out)
        ranges = trace.nvtx_ranges(names=[range_name], warn=False)
        if ranges.empty:
            raise not_found(trace, trace.nvtx_ranges(nesting=False), range_name)
    table = project(trace, ranges)
    table["name"] = table["qualified_name"]
    return table[TABLE_COLUMNS].reset_index(drop=True)


# Every range the analysis looks at besides the forwards (`forward_names`): warm-up and iteration markers,
# speculative steps and drafts (plugin and vLLM scopes), each step's context (the plugin's), the tensor-parallel
# all-reduce, a token's logits and sampling (plugin and vLLM scopes, `token`), a draft's, a model-free proposer's
# proposing (`steps.STEP_PARTS`). `marked_ranges` reads only these.
MARKERS = (WARMUP_RANGE, ITERATION_RANGE, DRAFT_FORWARD_RANGE, STEP_RANGE, STEP_CONTEXT_RANGE, SCOPES_DRAFT,
           SCOPES_ALLOCATE, ALL_REDUCE_RANGE, LOGITS_RANGE, SAMPLE_RANGE, SCOPES_POSTPROCESS, SCOPES_SAMPLE,
           DRAFT_LOGITS_RANGE, DRAFT_SAMPLE_RANGE, PROPOSE_RANGE)
MARKER_PREFIXES = (SCOPES_STEP_PREFIX,)

# The columns of `Trace.nvtx_ranges()` the analysis uses (the nullable nesting, domain and category columns cost
# a copy of their values and masks on every selection of millions of rows).
MARKED_COLUMNS = ["range_id", "name", "qualified_name", "start_ns", "end_ns", "duration_ns", "global_tid", "pid", "tid",
                  "ended_on_other_thread", "payload", "open_at_end"]


def forward_names(range_name: str | None) -> tuple[str, ...]:
    """The range names read for the forward range `range_name` before the trace says which one it is (`forward_range`
    decides): the name given; for the default (None, or the plugin's `FORWARD_RANGE`) the plugin's range and vLLM's
    own forward scope, which it falls back to (vLLM's step annotations of a PyTorch-profiler trace come with
    `vllm_steps.marked`)."""
    if range_name is None or range_name == FORWARD_RANGE:
        return FORWARD_RANGE, SCOPES_FORWARD
    return (range_name,)


def marked_ranges(trace: Trace, *range_names: str | None, engines: bool = False) -> pd.DataFrame:
    """The forward ranges `range_names` (each with what its default falls back to: `forward_names`) and the
    `MARKERS`, without nesting, in `MARKED_COLUMNS`: what the analysis of a trace reads of it, in one read. On an
    NVTX-heavy trace SQLite leaves every other range out. `engines`: every engine window of an interleaved run too
    (`nsys_cc:engine …`, a handful of rows), in the same read; other names (one engine's windows) may be among
    `range_names`."""
    prefixes = (*MARKER_PREFIXES, ENGINE_RANGE_PREFIX) if engines else MARKER_PREFIXES
    names = dict.fromkeys(n for r in range_names for n in forward_names(r))
    ranges = trace.nvtx_ranges(names=[*names, *MARKERS], prefixes=prefixes, nesting=False)
    if trace.capabilities.engine_steps:  # the engine's step annotations and frames, as read (`vllm_steps`)
        from .vllm_steps import marked

        added = marked(trace)
        if added is not None and len(added):
            # the engine's steps carry their kind, batch, tokens and context (`vllm_steps.STEP_ROW_COLUMNS`)
            extra = [c for c in added.columns if c not in MARKED_COLUMNS]
            return pd.concat([ranges[MARKED_COLUMNS], added[MARKED_COLUMNS + extra]], ignore_index=True)
    return ranges[MARKED_COLUMNS]


def forward_range(ranges: pd.DataFrame, range_name: str | None, *, label: str) -> tuple[str, str | None]:
    """THE place the forward range's default is settled: the range to measure in a trace whose ranges are `ranges`
    (`marked_ranges`, which reads what the default falls back to: `forward_names`), decided once per trace and passed
    down to everything that reads its forwards. `range_name` when one is given; the default (None, or the plugin's
    `model_executable()`, which says the same) is the plugin's range, else — a trace without it — vLLM's own step
    annotations of a PyTorch-profiler trace (`vllm_steps`), else vLLM's own forward scope (`gpu_model_runner:
    forward`: a trace made the built-in way, VLLM_NVTX_SCOPES_FOR_PROFILING=1), with the note that says so (None when
    the range is kept). `label`: the model's label, which the note names."""
    name = FORWARD_RANGE if range_name is None else range_name
    if name == FORWARD_RANGE and not matches(ranges, (name,)).any() and matches(ranges, (VLLM_STEP_RANGE,)).any():
        from .engine_marks import engine_of
        from .vllm_steps import forward_note  # a torch trace: vLLM's (or SGLang's) own step annotations

        return VLLM_STEP_RANGE, forward_note(label, engine_of(ranges))
    if name != FORWARD_RANGE or matches(ranges, (name,)).any() or not matches(ranges, (SCOPES_FORWARD,)).any():
        return name, None
    return SCOPES_FORWARD, (f"{label}: no {quoted(FORWARD_RANGE)} ranges (nsys_cc's plugin was off): measured vLLM's "
                            f"own forward scope {quoted(SCOPES_FORWARD)} ({VLLM_SCOPES_ENV}=1) instead; "
                            "choose another range with range_name")


def draft_range_of(ranges: pd.DataFrame) -> str | None:
    """The draft-forward range name of a speculative trace (the plugin's, else vLLM's own scope) among `ranges`,
    None for a plain trace."""
    for name in DRAFT_RANGES:
        if matches(ranges, (name,)).any():
            return name
    return None
