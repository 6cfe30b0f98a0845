"""Steps grouped by what they hold: their kind, their batch and their context — a serving trace's steps, whose batch
and KV length vary from step to step (`vllm bench serve --profile`: most steps mix a prefill chunk with decodes).

The engine's step annotations of a PyTorch-profiler trace name each step's kind, batch (requests), tokens and, in the
detailed form, context (the KV length summed over its requests: `step_names`); the analysis keeps them on each
forward (`ModelForwards.forwards`: step_kind, batch, step_tokens, context; `vllm_steps.step_columns`). `table` groups
a model's kept steps by kind, then by batch and context in powers of two (batch 1, 2, 3–4, 5–8, …; context
0–1,023, 1,024–2,047, 2,048–4,095, … tokens; "?" where the annotation does not name it), and gives per group the
steps, their median tokens, and the median of each metric the forwards carry (ms): what a step of that shape costs.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from ..metrics import BY_NAME, METRICS
from .step_names import KINDS

# The columns of `table`, before one `<metric>_ms` column per metric the forwards have (`metrics.METRICS` order).
COLUMNS = ["model", "kind", "batch", "batch_lo", "batch_hi", "context", "context_lo", "context_hi", "steps",
           "tokens_median"]
# Context bins start at this many tokens (the first bin is 0 to it − 1).
CONTEXT_FIRST = 1024


def _bin(value: float, first: int) -> tuple[float, float]:
    """The power-of-two bin [lo, hi] (whole numbers) holding `value`: batch bins 1, 2, 3–4, 5–8, … (`first` 1);
    context bins 0–1,023, 1,024–2,047, … (`first` 1,024); (NaN, NaN) for NaN."""
    if not math.isfinite(value):
        return math.nan, math.nan
    if first == 1:
        if value <= 2:
            return value, value
        hi = 2 ** math.ceil(math.log2(value))
        return hi // 2 + 1, hi
    if value < first:
        return 0, first - 1
    lo = first * 2 ** math.floor(math.log2(value / first))
    return lo, 2 * lo - 1


def _label(lo: float, hi: float) -> str:
    if not math.isfinite(lo):
        return "?"
    return f"{int(lo):,}" if lo == hi else f"{int(lo):,}–{int(hi):,}"


def table(forwards: pd.DataFrame, model: str) -> pd.DataFrame:
    """The kept steps of `forwards` (one model's, with the step columns) by kind, batch and context (module
    docstring); empty when its forwards are no engine steps."""
    metrics = [m.name for m in METRICS if m.column in forwards and forwards[m.column].notna().any()]
    columns = [*COLUMNS, *(f"{m}_ms" for m in metrics)]
    if "step_kind" not in forwards:
        return pd.DataFrame(columns=columns)
    rows = forwards[forwards["kept"].to_numpy(dtype=bool) & forwards["step_kind"].notna().to_numpy()]
    if rows.empty:
        return pd.DataFrame(columns=columns)
    batch = [_bin(float(b), 1) for b in rows["batch"].to_numpy(dtype=float)]
    context = [_bin(float(c), CONTEXT_FIRST) for c in rows["context"].to_numpy(dtype=float)]
    frame = pd.DataFrame({
        "kind": rows["step_kind"].to_numpy(dtype=object),
        "batch_lo": [b[0] for b in batch], "batch_hi": [b[1] for b in batch],
        "context_lo": [c[0] for c in context], "context_hi": [c[1] for c in context],
        "batch_value": rows["batch"].to_numpy(dtype=float), "context_value": rows["context"].to_numpy(dtype=float),
        "tokens": rows["step_tokens"].to_numpy(dtype=float),
        **{m: rows[BY_NAME[m].column].to_numpy(dtype=float) / 1e6 for m in metrics}})
    keys = ["kind", "batch_lo", "batch_hi", "context_lo", "context_hi"]
    grouped = frame.groupby(keys, dropna=False, sort=False)
    out = grouped.agg(steps=("tokens", "size"), tokens_median=("tokens", "median"),
                      batch_min=("batch_value", "min"), batch_max=("batch_value", "max"),
                      context_min=("context_value", "min"), context_max=("context_value", "max"),
                      **{f"{m}_ms": (m, "median") for m in metrics}).reset_index()
    out["model"] = model
    # A group is labelled by the values its steps hold, within its bin: "3", not "3–4", when every step had batch 3
    # (one step, or many of one size); the bin orders and groups, the label says what was measured.
    out["batch"] = [_label(lo, hi) for lo, hi in zip(out["batch_min"], out["batch_max"])]
    out["context"] = [_label(lo, hi) for lo, hi in zip(out["context_min"], out["context_max"])]
    order = {k: i for i, k in enumerate(KINDS)}
    out["_kind"] = out["kind"].map(lambda k: order.get(k, len(order)))
    out = out.sort_values(["_kind", "batch_lo", "context_lo"], na_position="last", kind="stable")
    return out[columns].reset_index(drop=True)


def of_models(models) -> pd.DataFrame:
    """`table` of every model (`ModelForwards`) whose forwards are engine steps, one after the other."""
    frames = [t for m in models if len(t := table(m.forwards, m.name))]
    if not frames:
        return pd.DataFrame(columns=COLUMNS)
    return pd.concat(frames, ignore_index=True)


def batch_bins(values: np.ndarray) -> list[tuple[float, float]]:
    """The batch bin of each of `values` (for tests and callers that bin their own steps alike)."""
    return [_bin(float(v), 1) for v in values]


def context_bins(values: np.ndarray) -> list[tuple[float, float]]:
    """The context bin of each of `values`."""
    return [_bin(float(v), CONTEXT_FIRST) for v in values]
