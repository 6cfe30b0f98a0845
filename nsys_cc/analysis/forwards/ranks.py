"""Forwards that span processes: one model on several tensor-parallel ranks, its forward ranges grouped into forwards.

A tensor-parallel forward is one forward of the whole model: one forward range per rank (the word "step" is kept for
vLLM's engine step, `steps`). A model run tensor-parallel on N ranks records its forward range once per rank per
forward, each rank in its own
process (vLLM's mp executor: one worker process per rank). So the ranges of the chosen name that lie in several
processes are one model's ranks; several models in one trace stay apart by their range names, as everywhere else.

Ranks are the processes holding forward ranges (global process id: the pid on its host), numbered 0… in ascending
pid order: nsys does not record vLLM's rank numbers. On a GPU trace each rank's CUDA device is listed beside it.

Matching (which ranges are one forward): within each rank its ranges are ordered by start; rank 0's k-th range is
matched with rank r's (k + d_r)-th, where the offset d_r (|d_r| ≤ |n_r − n_0| + 2, at most MAX_OFFSET) is the one
whose pairs have the smallest median start difference. Ranks that recorded the same forwards get d_r = 0; ranks
that disagree on the number of ranges (a capture that cut a forward at one edge, a rank that started earlier) get the
alignment that pairs neighbours in time, and the ranges without a partner in every rank are left out, with a note.
The matching is then checked by time: a forward's ranges must overlap (each starts before every other one ends, as a
TP forward's all-reduces force); forwards that do not are counted in a note, never silently.

Per forward (a row of the model's forwards, with the columns of a one-process forward):
- wall: first rank's start → last rank's end;
- gpu_span: first GPU op start → last GPU op end of all ranks' projected work;
- gpu_busy: the length of the union over ranks of their op intervals (time some rank's GPU worked for the forward);
- kernel_sum, kernels, gpu_ops, launch_api: added over ranks; gpu_idle = gpu_span − gpu_busy;
- payload (tokens, for phases): rank 0's; ranks that disagree are counted in a note.
Per rank and forward: lag = the rank's end − the forward's earliest end; the last rank is the one with the largest
lag, and the forward's skew = max end − min end (the last rank's lag). `rank_table` summarises both per rank.

Communication: on a GPU, the rank's communication kernels (NCCL, `kernel_tables.CATEGORY_RULES`). On vLLM's CPU build
the all-reduce is CPU work (gloo or vLLM's shared-memory all-reduce) inside the forward; nsys_cc's plugin wraps each in
an `nsys_cc:all_reduce` range, and a rank's all-reduce time in a forward is the summed duration of those ranges inside
its forward range on the same thread. That time includes waiting for the other ranks to arrive.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ...contract import ALL_REDUCE_RANGE
from ...trace.bulk import PID_MASK
from ...trace.nvtx import matches
from ..metrics import GPU_BUSY_NS, GPU_IDLE_NS, GPU_SPAN_NS, KERNEL_SUM_NS, LAUNCH_API_NS, WALL_NS
from ..result_values import Value
from ..stats import describe
from . import kernel_tables as kernel_mod
from .projection import op_totals, union_by_group

MAX_OFFSET = 64
# Columns added over ranks (NaN when no rank has a value: a CPU trace, or no rank launched GPU work).
_SUMMED = (KERNEL_SUM_NS, "kernels", "gpu_ops", LAUNCH_API_NS)

# Columns a tensor-parallel forward has beyond a one-process forward's (`forward`: its position in the model's
# forwards); and the per-range columns the rank table and checks read.
TP_COLUMNS = ["forward", "skew_ns", "last_rank"]
RANGE_COLUMNS = ["global_tid", "proj_start_ns", "proj_duration_ns", "rank", "forward", "allreduce_ns", "lag_ns",
                 "start_offset_ns"]

RANK_COLUMNS = ["model", "role", "phase", "rank", "pid", "device", "forwards", "wall_ms", "gpu_busy_ms",
                "kernel_sum_ms", "comm_mean_ms", "comm_share", "allreduce_ms", "allreduce_share", "last_forwards",
                "last_share", "lag_ms", "lag_p90_ms", "start_offset_ms"]


@dataclass(eq=False)
class Ranks(Value):
    """How one model's forward ranges in several processes became its forwards (its tables are handed out as the
    caller's own, `result_values.Value`).

    - `count`: number of ranks; `processes`: rank, pid, global_pid, device (CUDA device ids, "" on CPU).
    - `ranges`: every matching range (the per-process forwards, their own metrics) with `rank` and `forward`
      (position in the model's forwards, −1 for a range without a partner in every rank).
    - `notes`: what did not match, said once per model.
    - `totals`: GPU ops of the kept forwards per (phase, rank, kind, name): count, duration_ns (after `op_totals`).
    """

    count: int
    processes: pd.DataFrame
    ranges: pd.DataFrame
    notes: list[str]
    totals: pd.DataFrame = field(default_factory=pd.DataFrame, repr=False)

    def compact(self, columns: list[str]) -> None:
        """Keep of `ranges` only `columns` (a forward's, as the model keeps them) and RANGE_COLUMNS, deep-copied: a
        model holds its ranges' columns, not its trace."""
        keep = [c for c in dict.fromkeys([*columns, *RANGE_COLUMNS]) if c in self.ranges]
        self.ranges = self.ranges[keep].copy()

    def members(self, forwards: pd.DataFrame) -> tuple[pd.DataFrame, np.ndarray]:
        """The per-rank ranges of `forwards` (rows of the model's forwards) and, for each, its forward's phase."""
        rows = self.ranges[self.ranges["forward"].isin(forwards["forward"])]
        phase = forwards.set_index("forward")["phase"].reindex(rows["forward"]).to_numpy(dtype=object)
        return rows, phase

    def op_totals(self, trace, kept: pd.DataFrame) -> pd.DataFrame:
        """`projection.op_totals` of the kept forwards grouped by phase (kernels of all ranks added); keeps the same
        per (phase, rank) in `totals` for the per-rank table. One pass over the ops."""
        rows, phase = self.members(kept)
        labels = np.array([f"{p}\x1f{r}" for p, r in zip(phase, rows["rank"])], dtype=object)
        per_rank = op_totals(trace, rows, labels)
        split = per_rank["group"].astype(str).str.split("\x1f", n=1, expand=True)
        if per_rank.empty:
            split = pd.DataFrame({0: pd.Series(dtype=object), 1: pd.Series(dtype=object)})
        phase_col = split[0].replace("None", None)
        self.totals = per_rank.assign(group=phase_col, rank=pd.to_numeric(split[1]))
        by_phase = self.totals.groupby(["group", "kind", "name"], observed=True, dropna=False)[["count", "duration_ns"]]
        return by_phase.sum().reset_index()[list(per_rank.columns)]


@dataclass
class Matching:
    """Result of `match`: per row its rank and forward (−1: left out); the offsets; the forwards' time-overlap flags."""

    rank: np.ndarray
    forward: np.ndarray
    offsets: list[int]
    overlapping: np.ndarray
    counts: list[int]


def _best_offset(ref: np.ndarray, other: np.ndarray) -> int:
    """The offset d (other[k + d] pairs with ref[k]) whose pairs have the smallest median start difference; ties go
    to more pairs, then to the smaller |d|."""
    span = min(abs(len(other) - len(ref)) + 2, MAX_OFFSET)
    best: tuple | None = None
    for d in range(-span, span + 1):
        lo, hi = max(0, -d), min(len(ref), len(other) - d)
        if hi <= lo:
            continue
        key = (float(np.median(np.abs(other[lo + d:hi + d] - ref[lo:hi]))), lo - hi, abs(d))
        if best is None or key < best[0]:
            best = (key, d)
    return 0 if best is None else best[1]


def match(process: np.ndarray, start: np.ndarray, end: np.ndarray) -> Matching:
    """Group ranges (one per row: process id, start, end in ns) into forwards across processes (module docstring).
    Ranks are the distinct `process` values in ascending order."""
    procs, rank = np.unique(process, return_inverse=True)
    order = [np.flatnonzero(rank == r)[np.argsort(start[rank == r], kind="stable")] for r in range(len(procs))]
    counts = [len(o) for o in order]
    ref = start[order[0]]
    offsets = [0] + [_best_offset(ref, start[o]) for o in order[1:]]
    lo = max(max(0, -d) for d in offsets)
    hi = min(min(n - d for n, d in zip(counts, offsets)), counts[0])
    n_forwards = max(hi - lo, 0)
    forward = np.full(len(process), -1, dtype=np.int64)
    for o, d in zip(order, offsets):
        forward[o[lo + d:lo + d + n_forwards]] = np.arange(n_forwards)
    matched = forward >= 0
    last_start = np.full(n_forwards, np.iinfo(np.int64).min)
    first_end = np.full(n_forwards, np.iinfo(np.int64).max)
    np.maximum.at(last_start, forward[matched], start[matched])
    np.minimum.at(first_end, forward[matched], end[matched])
    return Matching(rank, forward, offsets, last_start <= first_end, counts)


def _all_reduce_ns(ranges: pd.DataFrame, forwards: pd.DataFrame) -> np.ndarray:
    """Per forward range: the summed duration of the `nsys_cc:all_reduce` ranges inside it on its thread (`ranges`:
    the trace's ranges as read, `ranges.marked_ranges`, which include them); NaN for every range when the trace has
    none (a GPU run, or a plugin that did not wrap the CPU all-reduce)."""
    inner = ranges[matches(ranges, (ALL_REDUCE_RANGE,))]
    if inner.empty:
        return np.full(len(forwards), np.nan)
    out = np.zeros(len(forwards))
    f_tid = forwards["global_tid"].to_numpy(np.int64)
    f_start, f_end = forwards["start_ns"].to_numpy(np.int64), forwards["end_ns"].to_numpy(np.int64)
    i_tid = inner["global_tid"].to_numpy(np.int64)
    i_start, i_end = inner["start_ns"].to_numpy(np.int64), inner["end_ns"].to_numpy(np.int64)
    for tid in np.unique(i_tid):
        mine = np.flatnonzero(f_tid == tid)
        if not mine.size:
            continue
        mine = mine[np.argsort(f_start[mine], kind="stable")]
        sel = i_tid == tid
        pos = np.searchsorted(f_start[mine], i_start[sel], side="right") - 1  # the last forward started before it
        owner = mine[np.clip(pos, 0, None)]
        ok = (pos >= 0) & (i_end[sel] <= f_end[owner])
        np.add.at(out, owner[ok], (i_end[sel] - i_start[sel])[ok].astype(float))
    return out


def _devices(trace, global_pids: np.ndarray) -> list[str]:
    """CUDA device ids each process ran kernels on ("" when none, or a CPU trace)."""
    if not trace.has_cuda:
        return [""] * len(global_pids)
    kern = trace.kernels()
    if kern.empty:
        return [""] * len(global_pids)
    by = kern.groupby("global_pid")["device_id"].unique()
    return [",".join(str(int(d)) for d in sorted(by.get(int(g), []))) for g in global_pids]


def _notes(m: Matching, pids: np.ndarray, payload_mismatch: int) -> list[str]:
    notes = []
    n_forwards = int(m.overlapping.size)
    listed = ", ".join(f"rank {r} (pid {int(p)}) {n}" for r, (p, n) in enumerate(zip(pids, m.counts)))
    if len(set(m.counts)) > 1 or any(m.offsets):
        left = [int(((m.rank == r) & (m.forward < 0)).sum()) for r in range(len(pids))]
        notes.append(
            f"ranks disagree on the number of forward ranges ({listed}): matched {n_forwards} forwards by order at the "
            f"alignment with the closest starts (offsets {m.offsets} against rank 0); left out "
            + ", ".join(f"{n} range(s) of rank {r}" for r, n in enumerate(left) if n)
        )
    apart = int((~m.overlapping).sum())
    if apart:
        notes.append(f"{apart} of {n_forwards} forwards have ranks whose ranges do not overlap in time (a TP forward's "
                     "all-reduces make them overlap): check that these ranges are one model's ranks")
    if payload_mismatch:
        notes.append(f"{payload_mismatch} of {n_forwards} forwards have ranks with different token-count payloads; "
                     "phases follow rank 0")
    return notes


def group_forwards(trace, forwards: pd.DataFrame, ranges: pd.DataFrame) -> tuple[pd.DataFrame, Ranks | None]:
    """One row per tensor-parallel forward for a model whose forward ranges lie in several processes (module
    docstring), with the columns of `forwards` (a per-range table from `coefficient`: projection columns and
    per-forward metrics), plus `forward`, `skew_ns` and `last_rank`; `forwards` itself and None when they lie in one
    process. `ranges`: the trace's ranges as read (`ranges.marked_ranges`), for the all-reduces."""
    gpid = forwards["global_tid"].to_numpy(np.int64) & PID_MASK
    if len(np.unique(gpid)) < 2:
        return forwards, None
    start, end = forwards["start_ns"].to_numpy(np.int64), forwards["end_ns"].to_numpy(np.int64)
    m = match(gpid, start, end)
    procs = np.unique(gpid)
    pids = (procs >> 24) & 0xFFFFFF
    ranges = forwards.assign(rank=m.rank, forward=m.forward, allreduce_ns=_all_reduce_ns(ranges, forwards))
    matched = ranges[ranges["forward"] >= 0]
    by = matched.groupby("forward", sort=True)
    grouped = matched[matched["rank"] == 0].sort_values("forward").reset_index(drop=True)
    grouped["start_ns"] = by["start_ns"].min().to_numpy()
    grouped["end_ns"] = by["end_ns"].max().to_numpy()
    grouped["duration_ns"] = grouped["end_ns"] - grouped["start_ns"]
    grouped[WALL_NS] = grouped["duration_ns"].astype(float)
    grouped["open_at_end"] = by["open_at_end"].any().to_numpy()
    for col in _SUMMED:
        grouped[col] = by[col].sum(min_count=1).to_numpy(dtype=float)
    first = pd.to_numeric(matched["proj_start_ns"], errors="coerce").groupby(matched["forward"]).min()
    last = pd.to_numeric(matched["proj_end_ns"], errors="coerce").groupby(matched["forward"]).max()
    grouped["proj_start_ns"], grouped["proj_end_ns"] = first.to_numpy(), last.to_numpy()
    grouped[GPU_SPAN_NS] = (last - first).to_numpy(dtype=float)
    grouped[GPU_BUSY_NS] = np.nan
    if matched[GPU_BUSY_NS].notna().any():
        busy = union_by_group(trace, matched, matched["forward"].to_numpy(np.int64), len(grouped)).astype(float)
        grouped[GPU_BUSY_NS] = np.where(np.isfinite(grouped[GPU_SPAN_NS]), busy, np.nan)
    grouped[GPU_IDLE_NS] = grouped[GPU_SPAN_NS] - grouped[GPU_BUSY_NS]
    lag = matched["end_ns"] - by["end_ns"].transform("min")
    ranges.loc[matched.index, "lag_ns"] = lag
    ranges.loc[matched.index, "start_offset_ns"] = matched["start_ns"] - by["start_ns"].transform("min")
    grouped["skew_ns"] = (by["end_ns"].max() - by["end_ns"].min()).to_numpy()
    grouped["last_rank"] = matched.loc[lag.groupby(matched["forward"]).idxmax(), "rank"].to_numpy()
    grouped["forward"] = np.arange(len(grouped))
    payloads = matched.groupby("forward")["payload"].nunique(dropna=False)
    notes = _notes(m, pids, int((payloads > 1).sum()))
    processes = pd.DataFrame({"rank": np.arange(len(procs)), "pid": pids, "global_pid": procs,
                              "device": _devices(trace, procs)})
    return grouped, Ranks(len(procs), processes, ranges, notes)


def _median_ms(values: pd.Series) -> float:
    """Median in ms of the finite values (NaN where a rank launched nothing); NaN when none is."""
    return describe(values.to_numpy(dtype=float) / 1e6)["median"]


def _rank_rows(model, phase: str) -> list[dict]:
    ranks: Ranks = model.ranks
    kept = model.phase_rows(phase)
    rows = ranks.ranges[ranks.ranges["forward"].isin(kept["forward"])]
    totals = ranks.totals
    if not totals.empty and phase != "all":
        totals = totals[totals["group"].to_numpy(dtype=object) == phase]
    out = []
    for proc in ranks.processes.itertuples():
        mine = rows[rows["rank"] == proc.rank]
        n = len(mine)
        comm_mean_ms = share = np.nan
        if model.has_cuda and not totals.empty and n:
            t = totals[totals["rank"] == proc.rank]
            cats = np.array([kernel_mod.categorise(str(nm), str(k)) for nm, k in zip(t["name"], t["kind"])])
            comm = float(t["duration_ns"].to_numpy()[cats == "communication"].sum())
            total = float(t["duration_ns"].sum())
            comm_mean_ms = comm / n / 1e6
            share = comm / total if total > 0 else np.nan
        last = int((kept["last_rank"] == proc.rank).sum())
        med = {col: _median_ms(mine[col])
               for col in (WALL_NS, GPU_BUSY_NS, KERNEL_SUM_NS, "start_offset_ns", "allreduce_ns")}
        own = float(mine[WALL_NS].sum())
        allreduce = float(mine["allreduce_ns"].sum(min_count=1))
        lag = mine["lag_ns"].to_numpy(dtype=float) / 1e6
        out.append({
            "model": model.name, "role": model.role, "phase": phase, "rank": proc.rank, "pid": int(proc.pid),
            "device": proc.device, "forwards": n, "wall_ms": med[WALL_NS], "gpu_busy_ms": med[GPU_BUSY_NS],
            "kernel_sum_ms": med[KERNEL_SUM_NS], "comm_mean_ms": comm_mean_ms, "comm_share": share,
            "allreduce_ms": med["allreduce_ns"], "allreduce_share": allreduce / own if own > 0 else np.nan,
            "last_forwards": last,
            "last_share": last / len(kept) if len(kept) else np.nan,
            "lag_ms": float(np.median(lag)) if n else np.nan,
            "lag_p90_ms": float(np.percentile(lag, 90)) if n else np.nan,
            "start_offset_ms": med["start_offset_ns"],
        })
    return out


def rank_table(models) -> pd.DataFrame:
    """Per model with several ranks, phase and rank: the rank's own forward ranges in the kept forwards (median
    wall, GPU busy and kernel sum in ms), its communication kernels (`comm_mean_ms`: their time per forward, a mean
    — the op totals hold no per-forward split — and `comm_share`, their share of its GPU-op time), how
    often it was the last rank to finish (`last_forwards`, `last_share`), by how much (median and p90 lag behind the
    forward's first finisher, ms) and its median start offset after the forward's first rank; on the CPU build its
    all-reduce time (median ms per forward, and share of its own forward time; NaN without `nsys_cc:all_reduce`
    ranges).
    Columns RANK_COLUMNS."""
    rows = [row for m in models if m.ranks is not None for phase in m.phases for row in _rank_rows(m, phase)]
    return pd.DataFrame(rows, columns=RANK_COLUMNS)


def ranks_note(model) -> str:
    """One line on a model's ranks: how many, how its forwards were formed, which rank finishes last and by how much."""
    ranks: Ranks = model.ranks
    kept = model.phase_rows("all")
    pids = ", ".join(str(int(p)) for p in ranks.processes["pid"])
    text = (f"{ranks.count} tensor-parallel ranks (processes {pids}, rank = pid order): each forward is one "
            f"range per rank, its wall from the first rank's start to the last rank's end")
    if len(kept):
        last = kept["last_rank"].value_counts()
        skew = kept["skew_ns"].to_numpy(dtype=float) / 1e6
        text += (f"; rank {int(last.index[0])} finishes last in {int(last.iloc[0])} of {len(kept)} kept forwards; "
                 f"skew (last − first rank's end) median {np.median(skew):.3f} ms, max {skew.max():.3f} ms")
    return text


def forward_bounds(process: np.ndarray, start: np.ndarray, end: np.ndarray,
                   open_at_end: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Start and end (ns) of each forward of ranges in one or more processes: the first rank's start and the last
    rank's end of each matched forward (`match`); in one process, the ranges themselves. Forwards with a range still
    open when the capture ended (`open_at_end`, whose end is only the trace's) are left out, as the analysis drops
    them."""
    fwd = match(process, start, end).forward if len(np.unique(process)) > 1 else np.arange(len(start))
    if open_at_end is not None:
        fwd = np.where(np.isin(fwd, fwd[np.asarray(open_at_end, dtype=bool)]), -1, fwd)
    ok = fwd >= 0
    codes, fwd = np.unique(fwd[ok], return_inverse=True)
    first = np.full(len(codes), np.iinfo(np.int64).max)
    last = np.full(len(codes), np.iinfo(np.int64).min)
    np.minimum.at(first, fwd, start[ok])
    np.maximum.at(last, fwd, end[ok])
    return first, last
