"""Kernel breakdowns per forward: which kernels a model's forward launches, and in which category time goes.

Categories come from the kernel's name (first rule that matches, case-insensitive) and, for copies and fills, from
the GPU operation's kind. They are a reading aid, not a measurement: the rules are listed in `CATEGORY_RULES`, in the
order they are tried. They cover the kernels of today's inference stacks: Hopper/Blackwell GEMMs (cuBLAS's
`nvjet_*`, `sm90`/`sm100` xmma, CUTLASS, block-scaled FP8/FP4 and MoE batched GEMMs such as TRT-LLM's
`bmm_MxE4m3_MxE2m1…`, Triton's `_matmul_ogs_…`), ROCm's (hipBLASLt/Tensile `Cijk_…`, vLLM's skinny `wvSplitK`, CK and
aiter kernels, `__amd_rocclr_*` copies and fills), MoE token routing apart from the expert GEMMs, quantisation apart
from attention, NCCL/RCCL and custom all-reduce. `tests/analysis/forwards/kernel_categories.tsv` holds every GPU-op
name of the public real traces with the category written by hand, and the test checks these rules against it.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

CATEGORIES = (
    "GEMM",
    "attention",
    "MoE routing",
    "normalisation",
    "quantisation",
    "activation/elementwise",
    "embedding/sampling",
    "convolution",
    "communication",
    "memcpy/memset",
    "CUDA graph",
    "other",
)

# Tried in this order; the first that matches names the category. A kernel's name often carries words of another
# category in its template arguments (`cutlass::bfloat16_t` in a MoE finalize kernel, `flashinfer::QuantizationSFLayout`
# in a quantiser, `Renormalize` in a router), so the specific rules come first and the broad ones last.
CATEGORY_RULES: tuple[tuple[str, str], ...] = (
    # ROCm's runtime copies and fills are kernels (`__amd_rocclr_copyBuffer`, `__amd_rocclr_fillBufferAligned`)
    ("memcpy/memset", r"^__amd_rocclr_"),
    ("communication", r"nccl|rccl|all_?reduce|all_?gather|reduce_?scatter|all_?to_?all|cross_device|custom_ar|"
                      r"multimem|sendrecv|quickreduce|one_?shot_|two_?shot_"),
    # token routing, permutation and combining of MoE layers (their expert GEMMs are GEMM)
    ("MoE routing", r"routing|topk_?gating|topk_?softmax|grouped_?topk|moe_align|moe_sum|moe_sort|moe_?permute|"
                    r"moe_?unpermute|expandinputrows|bitmatrix|^_topk_forward|moe::dev::finalize|"
                    r"finalize_matmul_scatter|count_and_sort_expert|expert_?map|ep_scatter|ep_gather"),
    ("normalisation", r"rms_?norm|layer_?norm|group_?norm|batch_?norm|instance_?norm|l2_?norm|norm2d|norm_kernel"),
    ("quantisation", r"quant|cvt_fp16_to_fp4|convert_?sf"),
    ("embedding/sampling", r"sampling|sampler|top_?k_?top_?p|multinomial"),
    ("attention", r"flash|fmha|attn|attention|paged|mha|_fwd_kernel|decode_kernel|mla|kv_?cache|reshape_and_cache|"
                  r"^reduce_segments$"),
    ("convolution", r"convolve|convolution|conv[123]d|cudnn|winograd|im2col|fft2d|flip_filter"),
    ("GEMM", r"gemm|matmul|cublas|xmma|wgmma|hmma|nvjet|splitk|s1688|s884|gemv|dot_kernel|^cijk_|(^|_)bmm_|"
             r"hipblaslt|rocblas|tensile|marlin|fused_moe_kernel|scaled_mm|"
             r"cutlass(?!::(bfloat16_t|half_t|float_e4m3_t|float_e5m2_t|float_ue8m0_t|tfloat32_t)\b)"),
    ("normalisation", r"norm"),
    ("embedding/sampling", r"embed|rotary|rope|index_select|gather|index_kernel|index_elementwise|argmax|top_?k|"
                           r"top_?p|sampl|sort|softmax|cumsum|scatter|logit"),
    ("activation/elementwise", r"elementwise|activation|silu|gelu|relu|act_and_mul|swiglu|vectorized|unrolled|reduce|"
                               r"fill|copy|add|mul|cat|where|pow|rsqrt|neg|exp|clamp|axpy|triton_poi"),
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


# ---- Kernels per range, and two sets of ranges compared (`nsys_cc.kernels`, `nsys_cc.kernel_diff`) ------------------
# One row per GPU operation name (kernel base name, or '[CUDA memcpy …]', '[CUDA memset]', '[CUDA graph N]'):
# - count: how many ran, launched inside the kept ranges (nsys's projection rule: the launching call inside the range,
#   on its thread); count_per_range: that ÷ the number of kept ranges (ranges that launched none of it count too);
# - ms_per_range: their summed duration ÷ the number of kept ranges; mean_ms: one of them on average; share: their
#   part of all the ranges' GPU-op time (0–1).
KERNEL_COLUMNS = ["kernel", "kind", "category", "count", "count_per_range", "ms_per_range", "mean_ms", "share"]
# a: the first set of ranges, b: the second; a kernel one side never ran has 0 there; delta = b − a.
SIDE_COLUMNS = ["count", "count_per_range", "ms_per_range", "share"]
DIFF_COLUMNS = ["kernel", "kind", "category", *[f"a_{c}" for c in SIDE_COLUMNS], *[f"b_{c}" for c in SIDE_COLUMNS],
                "delta_count_per_range", "delta_ms_per_range"]
CATEGORY_DIFF_COLUMNS = ["category", "a_ms_per_range", "b_ms_per_range", "delta_ms_per_range"]


def per_range(totals: pd.DataFrame, n_ranges: int) -> pd.DataFrame:
    """The kernel table (KERNEL_COLUMNS) of `n_ranges` ranges from their op totals (`name, kind, count, duration_ns`;
    rows of one name and kind add up, e.g. `projection.op_totals` of several phases), most time per range first (ties
    by name). Empty (these columns) without ops or ranges."""
    if totals.empty or n_ranges == 0:
        return empty_table(KERNEL_COLUMNS)
    g = totals.groupby(["name", "kind"], observed=True, sort=False)[["count", "duration_ns"]].sum().reset_index()
    g = g[g["count"] > 0]
    count = g["count"].to_numpy(dtype=np.int64)
    duration = g["duration_ns"].to_numpy(dtype=float)
    total = duration.sum()
    out = pd.DataFrame({
        "kernel": g["name"].astype(str).to_numpy(dtype=object), "kind": g["kind"].astype(str).to_numpy(dtype=object),
        "category": [categorise(str(n), str(k)) for n, k in zip(g["name"], g["kind"])], "count": count,
        "count_per_range": count / n_ranges, "ms_per_range": duration / n_ranges / 1e6,
        "mean_ms": duration / count / 1e6, "share": duration / total if total > 0 else np.nan,
    })
    out = out.sort_values(["ms_per_range", "kernel"], ascending=[False, True], kind="stable")
    return out[KERNEL_COLUMNS].reset_index(drop=True)


def diff(a: pd.DataFrame, b: pd.DataFrame) -> pd.DataFrame:
    """Two kernel tables (`per_range`) side by side (DIFF_COLUMNS): a kernel either side never ran has 0 calls and 0 ms
    there; delta = b − a per range. What matters most first: the largest |delta_ms_per_range|, then the most time on
    either side, then the name."""
    key = ["kernel", "kind"]
    sides = [t[[*key, "category", *SIDE_COLUMNS]].rename(columns={c: f"{p}_{c}" for c in SIDE_COLUMNS})
             for t, p in ((a, "a"), (b, "b"))]
    out = sides[0].merge(sides[1], on=key, how="outer", suffixes=("", "_b"))
    if out.empty:
        return empty_table(DIFF_COLUMNS)
    out["category"] = out["category"].fillna(out.pop("category_b"))
    for p in ("a", "b"):
        out[f"{p}_count"] = out[f"{p}_count"].fillna(0).astype(np.int64)
        for c in SIDE_COLUMNS[1:]:
            out[f"{p}_{c}"] = out[f"{p}_{c}"].astype(float).fillna(0.0)
    out["delta_count_per_range"] = out["b_count_per_range"] - out["a_count_per_range"]
    out["delta_ms_per_range"] = out["b_ms_per_range"] - out["a_ms_per_range"]
    out["_size"] = -out["delta_ms_per_range"].abs()
    out["_most"] = -np.maximum(out["a_ms_per_range"], out["b_ms_per_range"])
    out = out.sort_values(["_size", "_most", "kernel"], kind="stable")
    return out[DIFF_COLUMNS].reset_index(drop=True)


def of_model(model, phase: str) -> pd.DataFrame:
    """The kernel table (`per_range`) of a model's kept forwards of `phase` (a `result.ModelForwards`: its op totals
    per phase, and its forwards)."""
    totals = model.op_totals
    if not totals.empty and phase != "all":
        totals = totals[totals["group"].to_numpy(dtype=object) == phase]
    return per_range(totals, model.phase_count(phase))


def category_diff(table: pd.DataFrame) -> pd.DataFrame:
    """A `diff` table summed by category (CATEGORY_DIFF_COLUMNS), in CATEGORIES order."""
    if table.empty:
        return empty_table(CATEGORY_DIFF_COLUMNS)
    g = table.groupby("category")[["a_ms_per_range", "b_ms_per_range", "delta_ms_per_range"]].sum()
    return g.reindex([c for c in CATEGORIES if c in g.index]).reset_index()[CATEGORY_DIFF_COLUMNS]


def empty_table(columns: list[str]) -> pd.DataFrame:
    """A table of `columns` without rows, each column of its type (text, whole numbers for counts, else floats)."""
    return pd.DataFrame({c: pd.Series(dtype=object if c in ("kernel", "kind", "category", "draft", "phase") else
                                      "int64" if c.endswith("count") else float) for c in columns})
