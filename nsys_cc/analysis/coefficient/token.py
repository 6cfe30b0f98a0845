"""The cost of a token: a forward and the rest of its token's work, its logits and its sampling (issue 29).

vLLM computes the logits after the forward and samples after them, outside the forward range; c is the cost of what
a model does to produce a token (Leviathan et al. Def. 3.7), so it adds them in. Definitions (docs/definitions.md,
"The cost of a token"):

- The **parts** of a forward are the plugin's `nsys_cc:logits` and `nsys_cc:sample` ranges tied to it; in a trace
  without them, vLLM's own scopes `gpu_model_runner: postprocess` and `gpu_model_runner: sample`. A part belongs to the
  forward range that ended last before the part started, on its thread, with no other forward starting in between
  (`tie`); a part inside a forward, or before any, belongs to none. A forward's parts of one kind add up.
- Each part gets the per-forward metrics of the registry from its own GPU projection (`projection.project`): per
  forward the columns `<part>_<metric>_ns` (`metrics.part_column`). A part that launched no GPU work adds 0 to the
  GPU metrics; one whose kernels are unknown (a CUDA graph recorded whole) leaves its kernel metrics unknown.
- A **token** = forward + its parts, per metric (`token_view`); the median of a token is the median of these
  per-token sums. c = median(draft token) ÷ median(target token); `c_forward`, the forwards' ratio, stays beside it
  with the parts' medians (`coefficients`). A pair where either side has no parts (an older trace, vLLM's forward
  scope alone, a range of the user's own, whose span nsys_cc cannot know) keeps the forward-only c (`basis`
  "forward") and a note says so.

Only the parts the forwards' range pairs with are read: the plugin's for `model_executable()` and vLLM's forward
scope alike (the plugin's win when both are there), never for another range name.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

import numpy as np
import pandas as pd

from ...contract import (
    FORWARD_RANGES,
    LOGITS_RANGE,
    SAMPLE_RANGE,
    SCOPES_POSTPROCESS,
    SCOPES_SAMPLE,
    VLLM_SAMPLE_RANGE,
    VLLM_STEP_RANGE,
)
from ...trace.nvtx import matches
from ..forwards.projection import project
from ..forwards.ranges import quoted
from ..metrics import (
    GPU_BUSY,
    GPU_IDLE,
    GPU_SPAN,
    METRICS,
    PART_COLUMNS,
    PARTS,
    WALL,
    decision_phase,
    metrics_for,
    part_column,
)
from .result import ModelForwards

# Where the parts come from: the plugin's ranges, else vLLM's own scopes (part → range name); for vLLM's step
# annotations in a torch trace, the sampling frame after each step (`vllm_steps`: the logits are inside the step).
SOURCES: dict[str, dict[str, str]] = {
    "plugin": {"logits": LOGITS_RANGE, "sample": SAMPLE_RANGE},
    "scopes": {"logits": SCOPES_POSTPROCESS, "sample": SCOPES_SAMPLE},
}
VLLM_SOURCES: dict[str, dict[str, str]] = {"torch frames": {"sample": VLLM_SAMPLE_RANGE}}
TOKEN, FORWARD = "token", "forward"  # a coefficient's basis

# Columns a coefficients row gains beside c (now the token's): its basis, the forwards' c with its interval, and the
# medians of each part on each side.
SPLIT = ("forward", *PARTS)
EXTRA_COLUMNS = ["basis", "c_forward", "c_forward_ci_low", "c_forward_ci_high",
                 *[f"{side}_{part}_median_ms" for side in ("draft", "target") for part in SPLIT]]
# `CostCoefficientResult.tokens`: per model, phase and metric, the token's median and its split.
TOKEN_COLUMNS = ["model", "role", "phase", "metric", "basis", "count", "token_median_ms",
                 *[f"{part}_median_ms" for part in SPLIT]]


def tie(forwards: pd.DataFrame, parts: pd.DataFrame) -> np.ndarray:
    """For each row of `parts`, the position (in `forwards`) of the forward it belongs to, or −1: on the part's thread,
    the forward that started last before it, when that forward had ended by the part's start."""
    out = np.full(len(parts), -1, dtype=np.int64)
    if len(parts) == 0 or len(forwards) == 0:
        return out
    f_tid = forwards["global_tid"].to_numpy(np.int64)
    f_start = forwards["start_ns"].to_numpy(np.int64)
    f_end = forwards["end_ns"].to_numpy(np.int64)
    p_tid = parts["global_tid"].to_numpy(np.int64)
    p_start = parts["start_ns"].to_numpy(np.int64)
    order = np.lexsort((f_start, f_tid))
    for tid in np.unique(p_tid):
        mine = order[f_tid[order] == tid]
        if len(mine) == 0:
            continue
        sel = np.flatnonzero(p_tid == tid)
        k = np.searchsorted(f_start[mine], p_start[sel], side="right") - 1
        ok = k >= 0
        cand = mine[np.maximum(k, 0)]
        ok &= f_end[cand] <= p_start[sel]
        out[sel[ok]] = cand[ok]
    return out


def _part_metrics(proj: pd.DataFrame, has_cuda: bool) -> dict[str, np.ndarray]:
    """Per projected part range, each source metric's value (ns, float): NaN where unknown; a GPU metric of a part
    that launched nothing is 0 (it did no GPU work), not unknown."""
    out: dict[str, np.ndarray] = {}
    launched = pd.to_numeric(proj["gpu_ops"], errors="coerce").to_numpy(dtype=float) > 0
    for m in METRICS:
        if m.derive is not None or (m.gpu and not has_cuda):
            continue
        values = pd.to_numeric(proj[m.source], errors="coerce").to_numpy(dtype=float)
        if m.gpu:
            values = np.where(launched, values, 0.0)
        out[m.name] = values
    return out


def with_parts(trace, ranges: pd.DataFrame, forwards: pd.DataFrame, range_name: str,
               has_cuda: bool) -> tuple[pd.DataFrame, str, str]:
    """(forwards with the parts' columns, the parts' source — "plugin" | "scopes" | "" for none —, a note, "" when
    there is nothing to say). `ranges`: the trace's ranges as the analysis read them (`ranges.marked_ranges`, which
    holds the parts); `forwards`: the forward ranges of `range_name` projected, one row each (one process)."""
    if range_name not in FORWARD_RANGES:
        return forwards, "", (f"{quoted(range_name)} is a range of your own: c is its ranges' c alone (the logits and "
                              "sampling after a forward are added only to the plugin's or vLLM's forward ranges, "
                              "whose span is known)")
    sources = VLLM_SOURCES if range_name == VLLM_STEP_RANGE else SOURCES
    found = [(source, {part: matches(ranges, (name,)) for part, name in names.items()})
             for source, names in sources.items()]
    found = [(source, hits) for source, hits in found if any(h.any() for h in hits.values())]
    if not found and range_name == VLLM_STEP_RANGE:
        from ..forwards.vllm_steps import token_note

        return forwards, "", token_note(trace)
    if not found:
        return forwards, "", (f"no logits or sampling ranges after the forwards ({quoted(LOGITS_RANGE)} / "
                              f"{quoted(SAMPLE_RANGE)}, or vLLM's {quoted(SCOPES_POSTPROCESS)} / "
                              f"{quoted(SCOPES_SAMPLE)}): a trace made before nsys_cc wrote them — c is the "
                              "forwards' c alone (profile again for the cost of a token)")
    source, hits = found[0]  # the plugin's when both are there
    out = forwards.copy(deep=False)
    untied = 0
    for part, hit in hits.items():
        if not hit.any():
            continue
        rows = ranges[hit]
        owner = tie(forwards, rows)
        untied += int((owner < 0).sum())
        rows, owner = rows[owner >= 0], owner[owner >= 0]
        values = _part_metrics(project(trace, rows), has_cuda)
        count = np.bincount(owner, minlength=len(forwards))
        for metric, v in values.items():
            total = np.bincount(owner, weights=v, minlength=len(forwards)) if len(v) else np.zeros(len(forwards))
            out[part_column(part, metric)] = np.where(count > 0, total, np.nan)
        if has_cuda:  # the derived metric (gpu_idle = span − busy) of the part, as a forward's
            out[part_column(part, GPU_IDLE)] = (out[part_column(part, GPU_SPAN)]
                                                  - out[part_column(part, GPU_BUSY)])
    note = ""
    if source == "scopes":
        note = (f"logits and sampling from vLLM's own scopes {quoted(SCOPES_POSTPROCESS)} / {quoted(SCOPES_SAMPLE)} "
                f"(the plugin's {quoted(LOGITS_RANGE)} / {quoted(SAMPLE_RANGE)} are not in the trace)")
    if untied:
        note += ("; " if note else "") + (f"{untied} logits/sampling range(s) follow no forward on their thread "
                                          "(before the first, or inside one): left out")
    return out, source, note


def _columns(m: ModelForwards) -> pd.Index:
    """The columns of a model's forwards (read off its own frame: `m.forwards` would hand out a copy)."""
    return object.__getattribute__(m, "forwards").columns


def parts_of(m: ModelForwards) -> list[str]:
    """The parts a model's forwards carry (those its trace has), in order."""
    columns = _columns(m)
    return [p for p in PARTS if part_column(p, WALL) in columns]


def token_frame(forwards: pd.DataFrame, parts: Sequence[str]) -> pd.DataFrame:
    """`forwards` whose metric columns hold the token's (forward + each of `parts`); NaN where the forward lacks a
    part its trace has (the token is then not known)."""
    if not parts:
        return forwards
    out = forwards.copy(deep=False)
    for m in METRICS:
        if m.derive is not None:
            continue
        cols = [part_column(p, m.name) for p in parts]
        if m.column in out and all(c in out for c in cols):
            total = out[m.column].to_numpy(dtype=float).copy()
            for c in cols:
                total += out[c].to_numpy(dtype=float)
            out[m.column] = total
    for m in METRICS:
        if m.derive is not None:
            out[m.column] = m.derive(out)
    return out


def token_view(m: ModelForwards) -> ModelForwards:
    """The model whose forwards' metrics are its tokens' (itself when it has no parts)."""
    parts = parts_of(m)
    return m if not parts else dataclasses.replace(m, forwards=token_frame(m.forwards, parts))


def _part_median(m: ModelForwards, phase: str, part: str, metric: str) -> float:
    """Of the kept forwards of `phase`, the median of the part's metric (ns); NaN for a part the model has no column
    of."""
    col = next(x.column for x in METRICS if x.name == metric) if part == "forward" else part_column(part, metric)
    return m.phase_median(phase, col) if col in _columns(m) else float("nan")


def _split_medians(m: ModelForwards, phase: str, metric: str) -> dict[str, float]:
    return {part: _part_median(m, phase, part, metric) / 1e6 for part in SPLIT}


def no_time(m: ModelForwards, phase: str, metric: str) -> bool:
    """Whether every kept forward of `phase` that has a value of `metric` has 0 ns of it (at least one has a value):
    a forward that ran takes time, so such a metric measured nothing (zero-length ranges: damaged, or markers), and a
    c made of it is no c (`coefficients`: NaN, said in `notes`), never 0.0."""
    col = next(x.column for x in METRICS if x.name == metric)
    if col not in _columns(m):
        return False
    values = np.asarray(m.phase_values(phase, col), dtype=float)
    values = values[np.isfinite(values)]
    return bool(len(values)) and not values.any()


Compute = Callable[[ModelForwards, list[ModelForwards], int], tuple[pd.DataFrame, pd.DataFrame]]


def coefficients(models: Sequence[ModelForwards], seed: int, compute: Compute) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(coefficients, c per run) with c = the token's (`compute`: the forwards' coefficients of a target and its
    drafts, `coefficient.assemble._coefficients`, run once on the forwards and once on the tokens). Each row gains
    EXTRA_COLUMNS; a pair where either side has no parts, or not the same, keeps the forwards' c (basis "forward")."""
    target, drafts = models[0], list(models[1:])
    fwd, fwd_runs = compute(target, drafts, seed)
    basis = {d.name: TOKEN if parts_of(d) and parts_of(d) == parts_of(target) else FORWARD for d in drafts}
    if TOKEN in basis.values():
        tok, tok_runs = compute(token_view(target), [token_view(d) for d in drafts], seed)
    else:
        tok, tok_runs = fwd, fwd_runs
    keys = ["draft", "phase", "metric"]
    by_token = _by_key(tok, keys)
    rows = []
    unmeasured: set[tuple] = set()
    for r in fwd.to_dict("records"):
        b = basis[r["draft"]]
        row = dict(r)
        if b == TOKEN:
            row.update(by_token[tuple(r[k] for k in keys)])
        d = next(x for x in drafts if x.name == r["draft"])
        split_d, split_t = _split_medians(d, r["phase"], r["metric"]), _split_medians(target, r["phase"], r["metric"])
        row.update({"basis": b, "c_forward": r["c"], "c_forward_ci_low": r["ci_low"], "c_forward_ci_high": r["ci_high"],
                    **{f"draft_{p}_median_ms": split_d[p] for p in SPLIT},
                    **{f"target_{p}_median_ms": split_t[p] for p in SPLIT}})
        if no_time(d, r["phase"], r["metric"]) or no_time(target, r["phase"], r["metric"]):
            # forwards of no time measured nothing: no c of them, nor of a token holding one (it was 0.0, and the
            # token's c its logits' and sampling's alone: 0.189 for 0.653)
            row.update(dict.fromkeys(("c", "ci_low", "ci_high", "c_forward", "c_forward_ci_low", "c_forward_ci_high"),
                                     float("nan")))
            unmeasured.add(tuple(r[k] for k in keys))
        rows.append(row)
    out = _dtypes_of(pd.DataFrame(rows, columns=[*fwd.columns, *EXTRA_COLUMNS]), fwd)
    runs = _runs(fwd_runs, tok_runs, basis)
    if unmeasured and len(runs):
        gone = [tuple(k) in unmeasured for k in runs[keys].itertuples(index=False)]
        runs.loc[gone, [c for c in ("c", "ci_low", "ci_high", "c_forward") if c in runs]] = float("nan")
    return out, runs


def _by_key(table: pd.DataFrame, keys: list[str]) -> dict[tuple, dict]:
    """Each row of `table` (unique in `keys`) as a record of its other columns, looked up by its keys (a `.loc` of
    the indexed table per row cost more than the rest of the token table)."""
    return {tuple(r[k] for k in keys): {c: v for c, v in r.items() if c not in keys}
            for r in table.to_dict("records")}


def _dtypes_of(out: pd.DataFrame, like: pd.DataFrame) -> pd.DataFrame:
    """`out` with `like`'s integer columns (counts) integer again: a token row taken whole (`.loc[key]`) comes back as
    one float Series, which would print 310 as 310.0."""
    ints = {c: like[c].dtype for c in like.columns if like[c].dtype.kind in "iu" and c in out}
    return out.astype(ints) if ints else out


def _runs(fwd: pd.DataFrame, tok: pd.DataFrame, basis: dict[str, str]) -> pd.DataFrame:
    """c per run: the token's where the pair's basis is, with `c_forward` and `basis` beside it."""
    if fwd.empty:
        return fwd.assign(basis=pd.Series(dtype=object), c_forward=pd.Series(dtype=float))
    keys = ["draft", "phase", "metric", "run"]
    token_rows = _by_key(tok, keys)
    rows = []
    for r in fwd.to_dict("records"):
        b = basis[r["draft"]]
        row = dict(r)
        if b == TOKEN:
            row.update(token_rows[tuple(r[k] for k in keys)])
        rows.append({**row, "basis": b, "c_forward": r["c"]})
    return _dtypes_of(pd.DataFrame(rows, columns=[*fwd.columns, "basis", "c_forward"]), fwd)


def token_table(models: Sequence[ModelForwards]) -> pd.DataFrame:
    """Per model, phase and metric: the token's median and the medians of its forward, logits and sampling (ms),
    `count` = tokens with a value, `basis` "token" when the model has parts, else "forward" (the token is then its
    forward)."""
    rows = []
    for m in models:
        parts = parts_of(m)
        view = token_view(m)
        for phase in m.phases:
            for metric in metrics_for(m.has_cuda):
                values = view.phase_values(phase, metric.column)
                split = _split_medians(m, phase, metric.name)
                rows.append({"model": m.name, "role": m.role, "phase": phase, "metric": metric.name,
                             "basis": TOKEN if parts else FORWARD, "count": int(np.isfinite(values).sum()),
                             "token_median_ms": view.phase_median(phase, metric.column) / 1e6,
                             **{f"{p}_median_ms": split[p] for p in SPLIT}})
    return pd.DataFrame(rows, columns=TOKEN_COLUMNS)


def notes(models: Sequence[ModelForwards], coefficients: pd.DataFrame) -> list[str]:
    """What the reader must know of the token cost: how c is made, which pairs keep the forwards' c and why, the
    models' notes on their parts, and tokens left out for a missing part."""
    out = []
    target = models[0]
    by_basis = dict(zip(coefficients["draft"], coefficients["basis"])) if len(coefficients) else {}
    if TOKEN in by_basis.values():
        out.append("c is the cost of a token: per token its forward + logits + sampling (each its own ranges' "
                   "metric), then median(draft tokens) ÷ median(target tokens); c_forward, the forwards' alone, is "
                   "beside it")
    for d in models[1:]:  # a model without parts says so in its own note; a pair whose parts differ, here
        if by_basis.get(d.name) == FORWARD and parts_of(d) and parts_of(target):
            out.append(f"{d.name}: c is the forwards' c alone (basis 'forward'): its logits/sampling ranges "
                       f"({', '.join(parts_of(d))}) are not the target's ({', '.join(parts_of(target))})")
    holders: dict[str, list[str]] = {}
    for m in models:
        if m.token_note:
            holders.setdefault(m.token_note, []).append(m.name)
    for text, names in holders.items():
        who = "every model" if len(models) > 1 and len(names) == len(models) else ", ".join(names)
        out.append(f"{who}: {text}")
    for m in models:  # a metric whose forwards took no time gives no c (`coefficients`: NaN), said here
        empty: dict[str, list[str]] = {}
        for phase in m.phases:
            for metric in metrics_for(m.has_cuda):
                if no_time(m, phase, metric.name):
                    empty.setdefault(metric.name, []).append(phase)
        for name, phases in empty.items():
            out.append(f"{m.name}: every kept forward takes 0 ns of {name} ({', '.join(phases)}): it measured "
                       f"nothing, so c on {name} is left out (NaN), not 0 — its forwards' and its tokens' alike")
    for m in models:
        parts = parts_of(m)
        if parts:
            kept = m.kept
            lacking = int(np.logical_or.reduce([kept[part_column(p, WALL)].isna().to_numpy() for p in parts]).sum())
            if lacking:
                out.append(f"{m.name}: {lacking} of its {len(kept)} kept forwards have no {'/'.join(parts)} range "
                           "after them: left out of the token medians (their forwards count in c_forward)")
    return out


def decision_split(result_tokens: pd.DataFrame) -> pd.DataFrame:
    """The rows of `tokens` in each model's decision phase (decode, else all): what the report's split table shows."""
    frames = []
    for _, sub in result_tokens.groupby("model", sort=False):
        phase = decision_phase(sub["phase"].unique())
        frames.append(sub[sub["phase"] == phase])
    return pd.concat(frames, ignore_index=True) if frames else result_tokens


__all__ = ["EXTRA_COLUMNS", "PART_COLUMNS", "TOKEN_COLUMNS", "coefficients", "decision_split", "no_time", "notes",
           "parts_of", "tie", "token_frame", "token_table", "token_view", "with_parts"]
