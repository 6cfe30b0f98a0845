"""Kernel breakdowns per forward: which kernels a model's forward launches, and in which category time goes.

Categories come from the kernel's name (first rule that matches, case-insensitive) and, for copies and fills, from
the GPU operation's kind. They are a reading aid, not a measurement: the rules are listed in `CATEGORY_RULES`.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

CATEGORIES = (
    "GEMM",
    "attention",
    "normalisation",
    "activation/elementwise",
    "embedding/sampling",
    "communication",
    "memcpy/memset",
    "CUDA graph",
    "other",
)

CATEGORY_RULES: tuple[tuple[str, str], ...] = (
    ("communication", r"nccl|all_?reduce|all_?gather|reduce_?scatter|cross_device|custom_ar|allreduce"),
    ("attention", r"flash|fmha|attn|attention|paged|mha|_fwd_kernel|decode_kernel|unified_attention|mla"),
    ("GEMM", r"gemm|cutlass|cublas|matmul|xmma|wgmma|hmma|nvjet|splitk|s1688|s884|gemv|dot_kernel"),
    ("normalisation", r"norm"),
    ("embedding/sampling", r"embed|rotary|rope|index_select|gather|argmax|top_?k|top_?p|sampl|sort|softmax|"
                           r"multinomial|cumsum|scatter|logit"),
    ("activation/elementwise", r"elementwise|silu|gelu|relu|act_and_mul|swiglu|vectorized|unrolled|reduce|fill|"
                               r"copy|add|mul|cat|where|pow|rsqrt|neg|exp"),
)
_COMPILED = tuple((cat, re.compile(rx, re.IGNORECASE)) for cat, rx in CATEGORY_RULES)


def categorise(name: str, kind: str = "kernel") -> str:
    """Category of one GPU operation from its kind ("kernel" | "memcpy" | "memset" | "graph") and name."""
    if kind in ("memcpy", "memset"):
        return "memcpy/memset"
    if kind == "graph":
        return "CUDA graph"
    for cat, rx in _COMPILED:
        if rx.search(name or ""):
            return cat
    return "other"


BREAKDOWN_COLUMNS = ["name", "kind", "category", "calls_per_forward", "time_per_forward_ms", "mean_duration_ms",
                     "share"]


def breakdown(ops: pd.DataFrame, n_forwards: int) -> pd.DataFrame:
    """Per GPU-operation name: calls and time per forward, share of the model's GPU-op time, category.

    `ops` has one row per (forward range, GPU op) with at least `kind, name, duration_ns`; `n_forwards` is how many
    forwards those ops came from (averages are per forward, counting forwards that launched none of a kernel).
    Columns: name, kind, category, calls_per_forward, time_per_forward_ms, mean_duration_ms, share (0–1).
    """
    if ops.empty or n_forwards == 0:
        return pd.DataFrame(columns=BREAKDOWN_COLUMNS)
    totals = ops.groupby(["name", "kind"], observed=True, sort=False)["duration_ns"].agg(["count", "sum"])
    return breakdown_totals(totals.rename(columns={"sum": "duration_ns"}).reset_index(), n_forwards)


def breakdown_totals(totals: pd.DataFrame, n_forwards: int) -> pd.DataFrame:
    """`breakdown` from totals instead of rows: `totals` has `name, kind, count, duration_ns` (the ops' number and
    summed duration; several rows of one name and kind add up), e.g. `projection.op_totals` for some phases."""
    if totals.empty or n_forwards == 0:
        return pd.DataFrame(columns=BREAKDOWN_COLUMNS)
    g = totals.groupby(["name", "kind"], observed=True, sort=False)[["count", "duration_ns"]].sum().reset_index()
    g = g[g["count"] > 0].rename(columns={"duration_ns": "sum"})
    g["category"] = [categorise(n, k) for n, k in zip(g["name"], g["kind"])]
    g["calls_per_forward"] = g["count"] / n_forwards
    g["time_per_forward_ms"] = g["sum"] / n_forwards / 1e6
    g["mean_duration_ms"] = g["sum"] / g["count"] / 1e6
    total = g["sum"].sum()
    g["share"] = g["sum"] / total if total > 0 else np.nan
    g["name"] = g["name"].astype(str)
    g["kind"] = g["kind"].astype(str)
    # Ties in time are ordered by name, so the table does not depend on the order ops were listed in.
    g = g.sort_values(["time_per_forward_ms", "name"], ascending=[False, True], kind="stable")
    return g[BREAKDOWN_COLUMNS].reset_index(drop=True)


def by_category(kernel_table: pd.DataFrame) -> pd.DataFrame:
    """Sum a `breakdown` table by category: calls_per_forward, time_per_forward_ms, share, in CATEGORIES order."""
    g = kernel_table.groupby("category")[["calls_per_forward", "time_per_forward_ms", "share"]].sum()
    g = g.reindex([c for c in CATEGORIES if c in g.index])
    return g.reset_index()
