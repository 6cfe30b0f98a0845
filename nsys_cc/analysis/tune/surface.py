"""The step-cost surface: a step's time as a function of its batch B, the tokens it computes and the context (KV
length) it reads, its terms chosen by held-out error.

    ms ≈ a + b·tokens [+ k·Σcontext] [+ m·extra]

- `tokens`: the tokens the forward(s) compute — a plain decode B, a verify B·(1 + γ), the draft's proposing B·γ;
- `Σcontext`: the KV length summed over the step's sequences — what attention reads. Measured where the trace names
  it (vLLM's detailed step annotation `…sk<Σ>…`, the step table's `context` column); else, for a benchmark cell of
  B sequences of prompt L generating n tokens, B·(L + n/2): the mean over its decode steps;
- `extra`, per part: the draft's number of forwards γ (each forward has a fixed cost of its own: launches, weight
  reads), the target's B·γ (the verify's per-draft-token work besides its tokens).

Which terms: every candidate (the intercept and `tokens` always; each subset of the optional terms) is fitted with
non-negative slopes (`model._nnls_slopes`) and scored by its *held-out* error: leave one group out — one measured
(B, L) cell with all its γ, or one (batch, context) bin of a trace's steps — fit on the rest, predict the group,
and take the RMSE over every row so predicted. The candidate of the lowest held-out RMSE is kept, except that a
smaller candidate within `PARSIMONY` of it wins (a term that does not forecast better is not kept because it fits
better). The token-only model (a + b·tokens) is scored on the same groups and shown beside it: the context term
pays exactly when its held-out RMSE is lower. With fewer than `MIN_GROUPS` groups there is nothing to hold out:
the token-only model is kept and the held-out RMSE is NaN (said in `why`).

Rows: `cell_rows` (tune and sweep cells: `model.Cell`, one row per part and cell), `step_rows` (a step table's
decode/verify steps with their batch and context: one serving trace's many steps), `trace_rows` (a torch trace's
vLLM/SGLang detailed step annotations, GPU span on a GPU trace, wall time on a CPU one).
"""

from __future__ import annotations

import itertools
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ...errors import InputError
from .model import CONTEXT_PARTS, Cell, _nnls_slopes

BASE = ("intercept", "tokens")
OPTIONAL = {"target decode": ("context",), "target verify": ("context", "batch_x_gamma"),
            "draft propose": ("context", "forwards"), "steps": ("context",)}
ROW_COLUMNS = ["part", "group", "batch_size", "gamma", "tokens", "context", "batch_x_gamma", "forwards", "ms"]
PARSIMONY = 0.02  # a smaller candidate within 2 % of the best held-out RMSE is kept instead
MIN_GROUPS = 3


@dataclass(frozen=True)
class Surface:
    """One part's fitted surface: `terms` kept (BASE first), their coefficients (ms per unit), the held-out RMSE of
    every candidate (`candidates`, keyed by its terms joined with '+'), the kept one's and the token-only one's,
    the in-sample residuals (ms, row order) and why the terms were kept."""

    part: str
    terms: tuple[str, ...]
    coef: dict[str, float]
    held_out_rmse: float
    token_only_rmse: float
    fit_rmse: float
    candidates: dict[str, float]
    residuals: tuple[float, ...]
    rows: int
    groups: int
    why: str
    held_out_errors: dict[str, float] = field(default_factory=dict)  # group → the kept model's held-out RMSE there

    def predict(self, **values) -> np.ndarray:
        """ms at the given term values (`tokens=…, context=…`; an absent term counts 0)."""
        out = np.asarray(self.coef.get("intercept", 0.0), dtype=float)
        for t in self.terms[1:]:
            out = out + self.coef[t] * np.asarray(values.get(t, 0.0), dtype=float)
        return out

    def describe(self) -> str:
        parts = [f"{self.coef['intercept']:.4g}"] + [f"{self.coef[t]:.4g}·{t}" for t in self.terms[1:]]
        return f"{self.part}: ms = " + " + ".join(parts)

    def to_dict(self) -> dict:
        return {"part": self.part, "terms": list(self.terms), "coefficients_ms": self.coef,
                "held_out_rmse_ms": self.held_out_rmse, "token_only_held_out_rmse_ms": self.token_only_rmse,
                "fit_rmse_ms": self.fit_rmse, "candidates_held_out_rmse_ms": self.candidates,
                "residuals_ms": list(self.residuals), "rows": self.rows, "groups": self.groups, "why": self.why,
                "held_out_rmse_by_group_ms": self.held_out_errors}


def _design(rows: pd.DataFrame, terms: Sequence[str]) -> np.ndarray:
    cols = [np.ones(len(rows)) if t == "intercept" else rows[t].to_numpy(dtype=float) for t in terms]
    return np.column_stack(cols)


def _held_out(rows: pd.DataFrame, terms: Sequence[str]) -> tuple[float, dict[str, float]]:
    """Leave-one-group-out RMSE of `terms` over `rows` (and per group); NaN with fewer than MIN_GROUPS groups."""
    groups = rows["group"].astype(str).to_numpy()
    names = list(dict.fromkeys(groups))
    if len(names) < MIN_GROUPS:
        return math.nan, {}
    y = rows["ms"].to_numpy(dtype=float)
    x = _design(rows, terms)
    errors = np.full(len(rows), np.nan)
    for g in names:
        out = groups == g
        beta = _nnls_slopes(x[~out], y[~out])
        errors[out] = x[out] @ beta - y[out]
    per = {g: float(np.sqrt(np.nanmean(errors[groups == g] ** 2))) for g in names}
    return float(np.sqrt(np.nanmean(errors ** 2))), per


def fit_surface(rows: pd.DataFrame, part: str, optional: Sequence[str] | None = None) -> Surface:
    """The surface of `rows` (ROW_COLUMNS; those of `part` when the column holds several), its terms chosen by
    held-out error (module docstring). `optional`: the candidate terms beyond BASE (default `OPTIONAL[part]`); a
    term whose values do not vary over the rows (one context, γ = 1 everywhere) is not a candidate."""
    if "part" in rows:
        rows = rows[rows["part"] == part]
    rows = rows[np.isfinite(rows["ms"].to_numpy(dtype=float)) & np.isfinite(rows["tokens"].to_numpy(dtype=float))]
    if len(rows) < 2:
        raise InputError(f"{part}: {len(rows)} measured step(s) with their tokens: a surface needs at least 2")
    wanted = OPTIONAL.get(part, ("context",)) if optional is None else tuple(optional)
    usable = [t for t in wanted if t in rows and np.isfinite(rows[t].to_numpy(dtype=float)).all()
              and np.unique(rows[t].to_numpy(dtype=float)).size > 1
              and not _collinear(rows, t)]
    candidates: dict[tuple[str, ...], float] = {}
    per_group: dict[tuple[str, ...], dict[str, float]] = {}
    for k in range(len(usable) + 1):
        for extra in itertools.combinations(usable, k):
            terms = (*BASE, *extra)
            candidates[terms], per_group[terms] = _held_out(rows, terms)
    token_only = candidates[BASE]
    groups = rows["group"].astype(str).nunique()
    chosen: tuple[str, ...]
    if not math.isfinite(token_only):
        chosen = BASE
        why = (f"{groups} group(s) of rows: fewer than {MIN_GROUPS}, nothing to hold out — the token-only model "
               "kept, its error unknown")
    else:
        best = min(candidates.values())
        chosen = min((t for t, e in candidates.items() if e <= best * (1 + PARSIMONY)), key=lambda t: (len(t),
                                                                                                        candidates[t]))
        dropped = [t for t in usable if t not in chosen]
        why = (f"lowest held-out RMSE (leave one of {groups} groups out) among {len(candidates)} candidates"
               + (f": kept {', '.join(chosen[2:])}" if len(chosen) > 2 else ": the token-only model")
               + (f"; not kept: {', '.join(dropped)} (no better held out, within {PARSIMONY:.0%})" if dropped else "")
               + ("" if usable or not wanted else f"; {', '.join(wanted)} did not vary over the rows"))
    y = rows["ms"].to_numpy(dtype=float)
    x = _design(rows, chosen)
    beta = _nnls_slopes(x, y)
    resid = y - x @ beta
    return Surface(part, chosen, {t: float(b) for t, b in zip(chosen, beta)}, candidates[chosen], token_only,
                   float(np.sqrt(np.mean(resid ** 2))), {"+".join(t): e for t, e in candidates.items()},
                   tuple(float(r) for r in resid), len(rows), groups, why, per_group.get(chosen, {}))


def _collinear(rows: pd.DataFrame, term: str) -> bool:
    """Whether `term` is a multiple of tokens plus a constant over the rows (it would add nothing identifiable)."""
    x = np.column_stack([np.ones(len(rows)), rows["tokens"].to_numpy(dtype=float)])
    t = rows[term].to_numpy(dtype=float)
    beta, *_ = np.linalg.lstsq(x, t, rcond=None)
    return bool(np.allclose(x @ beta, t, rtol=1e-9, atol=1e-9 * max(1.0, float(np.abs(t).max()))))


def cell_context(c: Cell, output_len: int | None = None) -> float:
    """Σ context of a cell's steps: its measured mean (`Cell.context`) where known, else B·(L + n/2) of its prompt
    length L and output length n (NaN without L)."""
    measured = getattr(c, "context", math.nan)
    if isinstance(measured, float) and math.isfinite(measured):
        return measured
    if c.key.input_len is None:
        return math.nan
    n = c.output_len if output_len is None else output_len
    return c.batch_size * (c.key.input_len + max(n, 0) / 2)


def _drafts_ms(c: Cell) -> float:
    """The draft's proposing in one step: catch-up + (γ − 1) later forwards, else γ × the median forward."""
    if math.isfinite(c.draft_catchup_ms) and (c.gamma == 1 or math.isfinite(c.draft_later_ms)):
        return c.draft_catchup_ms + (c.gamma - 1) * (c.draft_later_ms if c.gamma > 1 else 0.0)
    return c.gamma * c.draft_forward_ms


def cell_rows(cells: Sequence[Cell]) -> pd.DataFrame:
    """ROW_COLUMNS of tune or sweep cells: per cell key one `target decode` row (the plain decode step, B tokens),
    per cell a `target verify` row (the verify forward, B·(1 + γ) tokens) and a `draft propose` row (B·γ tokens
    over γ forwards). The group is the cell key's name: a held-out group is one (B, L) cell with all its γ."""
    out, seen = [], set()
    for c in cells:
        b, g, s, group = c.batch_size, c.gamma, cell_context(c), c.key.name
        if c.key not in seen:
            seen.add(c.key)
            out.append(("target decode", group, b, 0, b, s, 0, 0, c.decode_step_ms))
        out.append(("target verify", group, b, g, b * (g + 1), s, b * g, 0, c.verify_ms))
        out.append(("draft propose", group, b, g, b * g, s, b * g, g, _drafts_ms(c)))
    return pd.DataFrame(out, columns=ROW_COLUMNS)


def fit_cells(cells: Sequence[Cell]) -> dict[str, Surface]:
    """The three parts' surfaces of `cells` (`cell_rows`), by part; a part with too few rows left out."""
    rows = cell_rows(cells)
    out = {}
    for part in ("target decode", "target verify", "draft propose"):
        try:
            out[part] = fit_surface(rows, part)
        except InputError:
            continue
    return out


def _bin(values: np.ndarray) -> np.ndarray:
    """Powers-of-two bins (1, 2, 3–4, 5–8, …) as their upper bound."""
    v = np.maximum(np.asarray(values, dtype=float), 1.0)
    return np.exp2(np.ceil(np.log2(v))).astype(int)


def step_rows(steps: pd.DataFrame, *, kinds: Sequence[str] = ("decode", "verify"), ms: str = "target_ms",
              context_bins: int = 4) -> pd.DataFrame:
    """ROW_COLUMNS of a step table's steps of `kinds` (columns kind or step_kind, batch, step_tokens or tokens,
    context, and `ms`): part "steps", grouped for the held-out error by batch bin (powers of two) and context
    quantile (`context_bins` of them): one serving trace's steps, a group a region of (batch, context) it served."""
    kind = steps["step_kind"] if "step_kind" in steps else steps["kind"]
    sel = steps[kind.isin(list(kinds)).to_numpy()]
    tok_col = "step_tokens" if "step_tokens" in sel and sel["step_tokens"].notna().any() else "tokens"
    b = sel["batch"].to_numpy(dtype=float)
    ctx = sel["context"].to_numpy(dtype=float) if "context" in sel else np.full(len(sel), np.nan)
    keep = np.isfinite(b) & np.isfinite(ctx) & np.isfinite(sel[ms].to_numpy(dtype=float))
    sel, b, ctx = sel[keep], b[keep], ctx[keep]
    if not len(sel):
        raise InputError(f"no {'/'.join(kinds)} step names its batch and context (vLLM's detailed step annotation, "
                         "or the step table's context column)")
    edges = np.unique(np.quantile(ctx, np.linspace(0, 1, context_bins + 1)[1:-1]))
    cbin = np.searchsorted(edges, ctx, side="right")
    group = [f"B≤{x}-ctx{q}" for x, q in zip(_bin(b), cbin)]
    tokens = sel[tok_col].to_numpy(dtype=float)
    return pd.DataFrame({"part": "steps", "group": group, "batch_size": b, "gamma": 0, "tokens": tokens,
                         "context": ctx, "batch_x_gamma": 0.0, "forwards": 0.0,
                         "ms": sel[ms].to_numpy(dtype=float)})[ROW_COLUMNS]


def trace_rows(path: str | os.PathLike) -> pd.DataFrame:
    """The decode and verify steps of a PyTorch-profiler trace with vLLM's (or SGLang's) detailed step annotations:
    kind, batch, step_tokens, context and ms — the step's GPU span on a GPU trace (its launched work, first kernel
    to last), its wall time on a CPU one. InputError where the trace has no such steps."""
    from ...trace import open_trace
    from ..forwards import vllm_steps
    from ..forwards.projection import project

    with open_trace(os.fspath(path)) as trace:
        found = vllm_steps.read(trace)
        if found is None:
            raise InputError(f"{os.fspath(path)}: no engine step annotation (vLLM's or SGLang's)")
        rows = found.rows[found.rows["step_kind"].notna().to_numpy()] if "step_kind" in found.rows else None
        if rows is None or rows.empty:
            raise InputError(f"{os.fspath(path)}: no kept engine step")
        if trace.has_cuda:
            proj = project(trace, rows)
            ms = pd.to_numeric(proj["proj_duration_ns"], errors="coerce").to_numpy(dtype=float) / 1e6
        else:
            ms = rows["duration_ns"].to_numpy(dtype=float) / 1e6
    return pd.DataFrame({"kind": rows["step_kind"].to_numpy(), "batch": rows["batch"].to_numpy(dtype=float),
                         "step_tokens": rows["step_tokens"].to_numpy(dtype=float),
                         "context": rows["context"].to_numpy(dtype=float), "ms": ms})


def fit_trace(path: str | os.PathLike, *, kinds: Sequence[str] = ("decode", "verify", "mixed", "prefill")) -> Surface:
    """The surface of one trace's steps (`trace_rows` → `step_rows` → `fit_surface`): a serving trace's steps of
    varying batch and context, the held-out groups its (batch, context) regions."""
    steps = trace_rows(path)
    return fit_surface(step_rows(steps, kinds=kinds, ms="ms"), "steps")


def context_parts(cells: Sequence[Cell]) -> tuple[str, ...]:
    """The parts (CONTEXT_PARTS) whose surface kept a Σ context term by held-out error (`surface.fit_cells`): none
    when the cells saw fewer than two contexts."""
    s = np.array([c.context_tokens for c in cells], dtype=float)
    if not np.isfinite(s).all() or len({c.key.input_len for c in cells}) < 2:
        return ()
    fits = fit_cells(cells)
    names = {"decode": "target decode", "draft": "draft propose", "verify": "target verify"}
    return tuple(p for p in CONTEXT_PARTS if names[p] in fits and "context" in fits[names[p]].terms)
