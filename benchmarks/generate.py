"""Large Nsight Systems exports shaped like LLM inference, in the exact schema of a real export.

The schema is never written here: every CREATE statement (all ~150 tables), the export metadata, the enum
tables and the session start time are copied at run time from a real export that nsys 2022.4 wrote with
`--lazy=false` (`fixtures/nvtx/nvtx_cases_full.sqlite`). Only rows are generated, deterministically from a
seed (NumPy's PCG64): the same arguments give the same rows.

Shape (one process, three threads; times in ns on one timeline):
- main thread: `nsys_cc:warmup` (first iteration) / `nsys_cc:iteration` push/pop ranges (payload = batch),
  each around `output_len` forwards: one prefill, then decodes. Each forward is a `model_executable()` range
  (registered string, payload = tokens scheduled) around: 2 host-to-device `cudaMemcpyAsync`, one
  `cudaMemsetAsync`, 50 kernel launches (embedding; per layer — norm, QKV GEMM, rotary, KV-cache write,
  attention, O GEMM, norm, gate/up GEMM, SiLU·mul, down GEMM with one `cudaStreamIsCapturing`, and with
  `layer_ranges=True` all in a `layer_<i>` range with inline text, as `torch.cuda.nvtx` writes; final norm,
  LM head, sampling kernels), a device-to-host
  copy of the sampled tokens and a `cudaStreamSynchronize` that returns when the GPU is done. 25 kernel
  names (GEMMs differ between prefill and decode).
- with `graphs=True`, decode forwards replay a CUDA graph instead (node-level tracing, as nsys 2022.4 records
  it): one `cudaGraphLaunch` whose 43 kernels carry its correlationId and a graphNodeId; sampling stays eager.
- scheduler thread: one `schedule` range (inline text) between forwards, no CUDA.
- output thread: one device-to-host `cudaMemcpyAsync` (another stream) after each forward, outside the
  forward ranges: projection must not give it to them.
- a few start-up API calls (cuInit as a driver call, cudaMalloc, …) outside every range.
GPU work is queued on one stream in launch order (a kernel starts once launched and the previous one ended),
so decode is launch-bound and prefill GPU-bound, as in real serving.

CLI: `python benchmarks/generate.py --kernels 1000000 [--seed 0] [--graphs] [--layer-ranges] [--layers 4] [-o FILE]`.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sqlite3
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
SCHEMA_SOURCE = ROOT / "fixtures" / "nvtx" / "nvtx_cases_full.sqlite"
DATA = Path(__file__).resolve().parent / "data"
# Bump when the rows written for given arguments change, so cached files are rebuilt.
GENERATOR_VERSION = 1
# Tables whose rows are copied from the real export as they are (metadata and enum labels).
COPIED = ("EXPORT_META_DATA", "TARGET_INFO_SESSION_START_TIME", "TARGET_INFO_SYSTEM_ENV", "UnwindMethodType")
# ENUM_CUDA_MEMCPY_OPER as nsys fills it when a capture has CUDA (empty in the CPU-only schema source;
# values as in a real 2024.6 export).
MEMCPY_OPER = [
    (0, "CUDA_MEMCPY_KIND_UNKNOWN", "Unknown"), (1, "CUDA_MEMCPY_KIND_HTOD", "Host-to-Device"),
    (2, "CUDA_MEMCPY_KIND_DTOH", "Device-to-Host"), (3, "CUDA_MEMCPY_KIND_HTOA", "Host-to-Array"),
    (4, "CUDA_MEMCPY_KIND_ATOH", "Array-to-Host"), (5, "CUDA_MEMCPY_KIND_ATOA", "Array-to-Array"),
    (6, "CUDA_MEMCPY_KIND_ATOD", "Array-to-Device"), (7, "CUDA_MEMCPY_KIND_DTOA", "Device-to-Array"),
    (8, "CUDA_MEMCPY_KIND_DTOD", "Device-to-Device"), (9, "CUDA_MEMCPY_KIND_HTOH", "Host-to-Host"),
    (10, "CUDA_MEMCPY_KIND_PTOP", "Peer-to-Peer"), (11, "CUDA_MEMCPY_KIND_UVM_HTOD", "Unified Host-to-Device"),
    (12, "CUDA_MEMCPY_KIND_UVM_DTOH", "Unified Device-to-Host"),
    (13, "CUDA_MEMCPY_KIND_UVM_DTOD", "Unified Device-to-Device"),
]
HTOD, DTOH = 1, 2

PID = 31337
GLOBAL_PID = (1 << 48) | (PID << 24)
MAIN_TID, SCHED_TID, OUTPUT_TID = GLOBAL_PID | PID, GLOBAL_PID | (PID + 5), GLOBAL_PID | (PID + 9)
COMPUTE_STREAM, OUTPUT_STREAM = 7, 13
FORWARD_RANGE, ITERATION_RANGE, WARMUP_RANGE, SCHEDULE_RANGE = (
    "model_executable()", "nsys_cc:iteration", "nsys_cc:warmup", "schedule")
KERNELS_PER_LAYER = 10
HEAD_TAIL_KERNELS = 10  # embedding; final norm, LM head, 7 sampling kernels
GRAPH_TAIL = 7  # sampling kernels launched eagerly after a graph replay

# Kernel catalogue: short name, demangled name, grid x, block x, registers, static smem, decode ns, prefill ×.
_B = "c10::BFloat16"
KERNELS = {
    "embed": ("indexSelectLargeIndex",
              f"void at::native::indexSelectLargeIndex<{_B}, long, unsigned int, 2, 2, -2, true>", 256, 128, 32, 0,
              3_000, 4),
    "norm": ("rms_norm_kernel", f"void vllm::rms_norm_kernel<{_B}, 8, 4>", 8, 1024, 30, 0, 3_200, 4),
    "add_norm": ("fused_add_rms_norm_kernel", f"void vllm::fused_add_rms_norm_kernel<{_B}, 8>", 8, 1024, 34, 0,
                 3_500, 4),
    "rotary": ("rotary_embedding_kernel", f"void vllm::rotary_embedding_kernel<{_B}, true>", 8, 512, 28, 0,
               2_500, 5),
    "cache": ("reshape_and_cache_flash_kernel",
              f"void vllm::reshape_and_cache_flash_kernel<{_B}, {_B}, (vllm::Fp8KVCacheDataType)0>", 8, 512, 24, 0,
              2_200, 5),
    "attn_decode": ("paged_attention_v2_kernel",
                    f"void vllm::paged_attention_v2_kernel<{_B}, {_B}, 128, 16, 128, (vllm::Fp8KVCacheDataType)0, "
                    "false, 512>", 64, 128, 96, 0, 12_000, 1),
    "attn_prefill": ("flash_fwd_kernel",
                     "void flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4, false, false, "
                     "cutlass::bfloat16_t, Flash_kernel_traits<128, 128, 64, 4, cutlass::bfloat16_t>>, false, true, "
                     "false, false, false, true, false, false>", 32, 128, 255, 0, 70_000, 1),
    "act": ("act_and_mul_kernel",
            f"void vllm::act_and_mul_kernel<{_B}, &vllm::silu_kernel<{_B}>, true>", 8, 1024, 26, 0, 3_000, 4),
    "cast": ("unrolled_elementwise_kernel",
             "void at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda, "
             "at::detail::Array<char*, 2>, TrivialOffsetCalculator<1, unsigned int>>", 1024, 128, 24, 0, 4_000, 1),
    "softmax": ("cunn_SoftMaxForward",
                "void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float, float, float, "
                "at::native::(anonymous namespace)::SoftMaxForwardEpilogue>", 8, 1024, 40, 64, 8_000, 1),
    "argmax": ("reduce_kernel",
               "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::ArgMaxOps<float>, "
               "unsigned int, long, 4>>", 8, 512, 48, 16, 6_000, 1),
    "topk": ("gatherTopK", "void at::native::sbtopk::gatherTopK<float, unsigned int, 2, false>", 8, 1024, 56, 0,
             9_000, 1),
    "sort": ("radixSortKVInPlace",
             "void at::native::radixSortKVInPlace<2, -1, 32, 4, float, long, unsigned int>", 8, 1024, 64, 8192,
             7_000, 1),
    "rand": ("distribution_elementwise_grid_stride_kernel",
             "void at::native::distribution_elementwise_grid_stride_kernel<float, 4, "
             "at::native::uniform_and_transform<float, float, 4>>", 132, 256, 30, 0, 3_000, 1),
    "index": ("index_elementwise_kernel",
              "void at::native::index_elementwise_kernel<128, 4, at::native::gpu_index_kernel<"
              "at::native::index_kernel_impl<at::native::OpaqueType<8>>>>", 1, 128, 22, 0, 2_500, 1),
}
_GEMM_TILES = {
    "decode": "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize64x64x64_warpgroupsize1x1x1_execute_segment_k_off"
              "_kernel__5x_cublas",
    "prefill": "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x256x64_warpgroupsize2x1x1_execute_segment_k_off"
               "_kernel__5x_cublas",
}
_GEMM_NS = {"qkv": 9_000, "o": 6_000, "gate_up": 14_000, "down": 10_000, "lm_head": 40_000}
for _phase, _tile in _GEMM_TILES.items():
    for _proj, _ns in _GEMM_NS.items():
        # One name per (projection, phase): cuBLAS picks a kernel per shape, and the shapes differ.
        _short = f"{_tile}_{_proj}" if _phase == "decode" else f"{_tile}_{_proj}_splitk"
        KERNELS[f"gemm_{_proj}_{_phase}"] = (_short, f"{_short}(cublasGemmParams)", 132, 384, 168, 0,
                                             _ns * (1 if _phase == "decode" else 8), 1)
KERNEL_KEYS = list(KERNELS)
PREFILL_FACTOR_COL = 7

# API functions: name, eventClass (0 runtime, 1 driver), median ns, lognormal sigma.
APIS = {
    "launch": ("cudaLaunchKernel_v7000", 0, 4_500, 0.3),
    "memcpy": ("cudaMemcpyAsync_v3020", 0, 9_000, 0.3),
    "memset": ("cudaMemsetAsync_v3020", 0, 5_000, 0.3),
    "capturing": ("cudaStreamIsCapturing_v10000", 0, 600, 0.2),
    "graph": ("cudaGraphLaunch_v10000", 0, 25_000, 0.2),
    "sync": ("cudaStreamSynchronize_v3020", 0, 3_000, 0.2),
    "init": ("cuInit", 1, 900_000, 0.1),
    "malloc": ("cudaMalloc_v3020", 0, 45_000, 0.3),
    "props": ("cudaGetDeviceProperties_v2_v12000", 0, 1_500_000, 0.1),
    "stream": ("cudaStreamCreateWithPriority_v5050", 0, 20_000, 0.2),
}
API_KEYS = list(APIS)


@dataclass(frozen=True)
class Shape:
    """What to generate. `kernels` is rounded up to whole forwards (50 kernels each with 4 layers)."""

    kernels: int
    seed: int = 0
    graphs: bool = False
    layers: int = 4
    batch: int = 8
    prompt_len: int = 128
    output_len: int = 16
    duration_scale: float = 1.0
    layer_ranges: bool = False

    @property
    def kernels_per_forward(self) -> int:
        return HEAD_TAIL_KERNELS + KERNELS_PER_LAYER * self.layers

    @property
    def forwards(self) -> int:
        return max(1, -(-self.kernels // self.kernels_per_forward))

    def file_name(self) -> str:
        key = json.dumps({**asdict(self), "v": GENERATOR_VERSION}, sort_keys=True)
        tag = hashlib.sha1(key.encode()).hexdigest()[:8]
        return f"llm_{_human(self.kernels)}_s{self.seed}{'_graphs' if self.graphs else ''}_{tag}.sqlite"


def _human(n: int) -> str:
    for unit, div in (("M", 1_000_000), ("k", 1_000)):
        if n >= div and n % div == 0:
            return f"{n // div}{unit}"
    return str(n)


# -- one forward, as a template of steps (API calls) and ops (GPU work) ------------------------------------------
@dataclass
class Template:
    """Steps: api key, layer (-1 none). Ops: launching step, kind (kernel/memcpy/memset), catalogue key, graph node
    (-1 none), copy kind (memcpy only)."""

    step_api: list
    step_layer: list
    op_step: list
    op_kind: list
    op_key: list
    op_node: list
    op_copy: list
    prefill: bool


def _template(layers: int, phase: str, graph: bool) -> Template:
    t = Template([], [], [], [], [], [], [], phase == "prefill")

    def step(api: str, layer: int = -1) -> int:
        t.step_api.append(api)
        t.step_layer.append(layer)
        return len(t.step_api) - 1

    def op(s: int, kind: str, key: str = "", node: int = -1, copy: int = -1) -> None:
        t.op_step.append(s)
        t.op_kind.append(kind)
        t.op_key.append(key)
        t.op_node.append(node)
        t.op_copy.append(copy)

    op(step("memcpy"), "memcpy", copy=HTOD)  # input ids
    op(step("memcpy"), "memcpy", copy=HTOD)  # positions / slot mapping
    op(step("memset"), "memset")
    model = ["embed"]
    for i in range(layers):
        attn = "attn_prefill" if phase == "prefill" else "attn_decode"
        model += ["norm" if i == 0 else "add_norm", f"gemm_qkv_{phase}", "rotary", "cache", attn,
                  f"gemm_o_{phase}", "add_norm", f"gemm_gate_up_{phase}", "act", f"gemm_down_{phase}"]
    model += ["add_norm", f"gemm_lm_head_{phase}"]
    tail = ["cast", "softmax", "topk", "sort", "rand", "argmax", "index"]
    if graph:
        g = step("graph")
        for node, key in enumerate(model):
            op(g, "kernel", key, node=node + 1)
    else:
        layer_of = [-1] + [i for i in range(layers) for _ in range(KERNELS_PER_LAYER)] + [-1, -1]
        for key, layer in zip(model, layer_of):
            if key.startswith("attn"):
                step("capturing", layer)  # torch asks before attention whether a graph is being captured
            op(step("launch", layer), "kernel", key)
    for key in tail:
        op(step("launch"), "kernel", key)
    op(step("memcpy"), "memcpy", copy=DTOH)  # sampled token ids back to the host
    step("sync")
    return t


@dataclass
class Block:
    """Forwards of one template, times relative to each forward's range start."""

    rows: np.ndarray  # forward numbers
    step_start: np.ndarray  # (n, steps)
    step_end: np.ndarray
    op_start: np.ndarray  # (n, ops)
    op_end: np.ndarray
    layer_start: np.ndarray  # (n, layers) or (n, 0)
    layer_end: np.ndarray
    length: np.ndarray  # forward range duration


def _lognormal(rng, median, sigma, shape) -> np.ndarray:
    return median * np.exp(sigma * rng.standard_normal(shape))


def _simulate(rng, t: Template, rows: np.ndarray, scale: float) -> Block:
    n, steps, ops = len(rows), len(t.step_api), len(t.op_step)
    med = np.array([APIS[a][2] for a in t.step_api], float)
    sig = np.array([APIS[a][3] for a in t.step_api], float)
    dur = np.maximum(200, _lognormal(rng, med, sig, (n, steps))).astype(np.int64)
    gap = np.maximum(1_000, _lognormal(rng, 12_000, 0.4, (n, steps))).astype(np.int64)  # Python between calls
    step_end = np.cumsum(gap + dur, axis=1)
    step_start = step_end - dur

    op_step = np.array(t.op_step)
    base = np.empty(ops)
    for j, (kind, key) in enumerate(zip(t.op_kind, t.op_key)):
        if kind == "kernel":
            k = KERNELS[key]
            base[j] = k[6] * (k[PREFILL_FACTOR_COL] if t.prefill else 1) * scale
        else:
            base[j] = 1_500 if kind == "memcpy" else 1_200
    op_dur = np.maximum(500, _lognormal(rng, base, 0.08, (n, ops))).astype(np.int64)
    # Graph kernels are ready once the graph is launched; others a few µs after their launch call starts.
    ready = step_start[:, op_step] + np.where(np.array(t.op_node) > 0, 4_000, 2_500)
    # Single stream: end[i] = max(ready[i], end[i-1]) + dur[i]  ⇔  C[i] + max_{j≤i}(ready[j] − C[j−1]).
    c = np.cumsum(op_dur, axis=1)
    op_end = c + np.maximum.accumulate(ready - (c - op_dur), axis=1)
    op_start = op_end - op_dur
    # The closing cudaStreamSynchronize returns once the GPU has finished.
    sync_end = np.maximum(step_end[:, -1], op_end.max(axis=1) + 2_000)
    step_end[:, -1] = sync_end
    layers = max(t.step_layer) + 1
    layer_start = np.empty((n, layers), np.int64)
    layer_end = np.empty((n, layers), np.int64)
    layer_of = np.array(t.step_layer)
    for i in range(layers):
        idx = np.flatnonzero(layer_of == i)
        layer_start[:, i] = step_start[:, idx[0]] - 400
        layer_end[:, i] = step_end[:, idx[-1]] + 400
    return Block(rows, step_start, step_end, op_start, op_end, layer_start, layer_end, sync_end + 1_000)


# -- the whole trace as columns ----------------------------------------------------------------------------------
class Strings:
    def __init__(self):
        self.ids: dict[str, int] = {}

    def __call__(self, s: str) -> int:
        return self.ids.setdefault(s, len(self.ids))


def build(shape: Shape) -> dict:
    """Every generated row as NumPy columns per table (plus the string table)."""
    rng = np.random.default_rng(shape.seed)
    F = shape.forwards
    n_out = shape.output_len
    first_in_iter = np.arange(F) % n_out == 0
    last_in_iter = (np.arange(F) % n_out == n_out - 1) | (np.arange(F) == F - 1)
    templates = {
        "prefill": _template(shape.layers, "prefill", False),
        "decode": _template(shape.layers, "decode", shape.graphs),
    }
    kind_of = np.where(first_in_iter, "prefill", "decode")
    blocks = {k: _simulate(rng, t, np.flatnonzero(kind_of == k), shape.duration_scale) for k, t in templates.items()}

    length = np.empty(F, np.int64)
    for b in blocks.values():
        length[b.rows] = b.length
    pre = np.maximum(12_000, _lognormal(rng, 30_000, 0.3, F)).astype(np.int64) + first_in_iter * 400_000
    post = last_in_iter * 60_000
    t0 = 50_000_000
    slot = pre + length + post
    slot_start = t0 + np.cumsum(slot) - slot
    fwd_start = slot_start + pre
    fwd_end = fwd_start + length

    s = Strings()
    api = {"start": [], "end": [], "tid": [], "name": [], "cls": []}
    ops = {"call": [], "kind": [], "key": [], "node": [], "copy": [], "start": [], "end": [], "stream": []}
    key_ids = {k: i for i, k in enumerate(KERNEL_KEYS)}
    n_calls = 0

    def add_calls(start, end, tid, api_keys):
        nonlocal n_calls
        api["start"].append(start.ravel())
        api["end"].append(end.ravel())
        api["tid"].append(np.full(start.size, tid, np.int64))
        api["name"].append(np.broadcast_to(np.array([s(APIS[a][0]) for a in api_keys]), start.shape).ravel())
        api["cls"].append(np.broadcast_to(np.array([APIS[a][1] for a in api_keys]), start.shape).ravel())
        first = n_calls
        n_calls += start.size
        return first

    # Start-up calls, before any range.
    init = ["init", "props", "stream", "stream", "malloc", "malloc", "malloc", "malloc"]
    starts = np.arange(len(init)) * 4_000_000 + 1_000_000
    add_calls(starts, starts + np.array([APIS[a][2] for a in init]), MAIN_TID, init)

    for kind, b in blocks.items():
        t = templates[kind]
        origin = fwd_start[b.rows][:, None]
        first = add_calls(b.step_start + origin, b.step_end + origin, MAIN_TID, t.step_api)
        steps = len(t.step_api)
        op_step = np.array(t.op_step)
        ops["call"].append((first + np.arange(len(b.rows))[:, None] * steps + op_step).ravel())
        n = len(b.rows)
        ops["kind"].append(np.broadcast_to(np.array([["kernel", "memcpy", "memset"].index(k) for k in t.op_kind]),
                                           (n, len(op_step))).ravel())
        ops["key"].append(np.broadcast_to(np.array([key_ids.get(k, -1) for k in t.op_key]), (n, len(op_step))).ravel())
        ops["node"].append(np.broadcast_to(np.array(t.op_node), (n, len(op_step))).ravel())
        ops["copy"].append(np.broadcast_to(np.array(t.op_copy), (n, len(op_step))).ravel())
        ops["start"].append((b.op_start + origin).ravel())
        ops["end"].append((b.op_end + origin).ravel())
        ops["stream"].append(np.full(b.op_start.size, COMPUTE_STREAM))

    # Output thread: one device-to-host copy after each forward.
    out_start = fwd_end + 2_000 + rng.integers(0, 3_000, F)
    out_end = out_start + np.maximum(2_000, _lognormal(rng, 7_000, 0.3, F)).astype(np.int64)
    first = add_calls(out_start, out_end, OUTPUT_TID, ["memcpy"])
    ops["call"].append(first + np.arange(F))
    ops["kind"].append(np.ones(F, np.int64))
    ops["key"].append(np.full(F, -1))
    ops["node"].append(np.full(F, -1))
    ops["copy"].append(np.full(F, DTOH))
    g0 = out_start + 3_000
    ops["start"].append(g0)
    ops["end"].append(g0 + np.maximum(800, _lognormal(rng, 1_800, 0.1, F)).astype(np.int64))
    ops["stream"].append(np.full(F, OUTPUT_STREAM))

    api = {k: np.concatenate(v) for k, v in api.items()}
    ops = {k: np.concatenate(v) for k, v in ops.items()}
    # CUPTI numbers API calls in the order they are made, process-wide.
    order = np.lexsort((api["tid"], api["start"]))
    corr_of_call = np.empty(len(order), np.int64)
    corr_of_call[order] = np.arange(1, len(order) + 1)
    api = {k: v[order] for k, v in api.items()}
    api["corr"] = np.arange(1, len(order) + 1)
    ops["corr"] = corr_of_call[ops["call"]]
    # Graph replays: nodes of the n-th replay get ids n*1000 + node.
    graph_rep = np.cumsum(ops["node"] == 1) if shape.graphs else np.zeros(len(ops["node"]), np.int64)
    ops["node"] = np.where(ops["node"] > 0, graph_rep * 1000 + ops["node"], -1)

    # NVTX: iterations, forwards, layers (main thread); schedule ranges (scheduler thread).
    iters = np.flatnonzero(first_in_iter)
    iter_last = np.flatnonzero(last_in_iter)
    nv = {"start": [], "end": [], "tid": [], "text": [], "textid": [], "payload": []}

    def add_ranges(start, end, tid, text=None, textid=None, payload=None):
        nv["start"].append(start)
        nv["end"].append(end)
        nv["tid"].append(np.full(len(start), tid, np.int64))
        nv["text"].append(np.full(len(start), -1) if text is None else text)
        nv["textid"].append(np.full(len(start), -1) if textid is None else textid)
        nv["payload"].append(np.full(len(start), -1) if payload is None else payload)

    iter_name = np.where(np.arange(len(iters)) == 0, s(WARMUP_RANGE), s(ITERATION_RANGE))
    add_ranges(fwd_start[iters] - 150_000, fwd_end[iter_last] + 30_000, MAIN_TID, textid=iter_name,
               payload=np.full(len(iters), shape.batch))
    tokens = np.where(first_in_iter, shape.batch * shape.prompt_len, shape.batch)
    add_ranges(fwd_start, fwd_end, MAIN_TID, textid=np.full(F, s(FORWARD_RANGE)), payload=tokens)
    texts = [SCHEDULE_RANGE] + [f"layer_{i}" for i in range(shape.layers)]
    for b in blocks.values():
        origin = fwd_start[b.rows][:, None]
        nl = b.layer_start.shape[1]
        if nl and shape.layer_ranges:
            add_ranges((b.layer_start + origin).ravel(), (b.layer_end + origin).ravel(), MAIN_TID,
                       text=np.tile(np.arange(1, nl + 1), len(b.rows)))
    add_ranges(slot_start + 3_000, fwd_start - 3_000, SCHED_TID, text=np.zeros(F, np.int64))
    nv = {k: np.concatenate(v) for k, v in nv.items()}
    nv_order = np.lexsort((-nv["end"], nv["start"]))
    nv = {k: v[nv_order] for k, v in nv.items()}

    for key in KERNEL_KEYS:
        s(KERNELS[key][0])
        s(KERNELS[key][1])
    for t_name in ("python3", "scheduler", "async_output"):
        s(t_name)
    return {"api": api, "ops": ops, "nvtx": nv, "nvtx_texts": texts, "strings": s.ids,
            "end": int(max(api["end"].max(), ops["end"].max(), nv["end"].max()))}


# -- writing ------------------------------------------------------------------------------------------------------
CHUNK = 250_000


def _insert(conn, sql: str, columns: list, n: int) -> None:
    for lo in range(0, n, CHUNK):
        parts = [c[lo:lo + CHUNK] for c in columns]
        lists = [p.tolist() if isinstance(p, np.ndarray) else p for p in parts]
        conn.executemany(sql, zip(*lists))


def _nullable(values: np.ndarray) -> list:
    """-1 → None (SQL NULL)."""
    return [None if v < 0 else v for v in values.tolist()]


def _empty_export(path: Path, *, with_enums: bool) -> tuple[sqlite3.Connection, Path]:
    """A new export at a temporary path beside `path` (renamed onto it by the caller once written): every table of the
    real 2022.4 fixture export created empty, the COPIED tables (and the ENUM_ tables, `with_enums`) filled from it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.unlink(missing_ok=True)
    src = sqlite3.connect(f"file:{SCHEMA_SOURCE}?mode=ro", uri=True)
    conn = sqlite3.connect(tmp)
    conn.execute("PRAGMA journal_mode=OFF")
    conn.execute("PRAGMA synchronous=OFF")
    for (sql,) in src.execute("SELECT sql FROM sqlite_master WHERE type='table' AND sql IS NOT NULL ORDER BY rowid"):
        conn.execute(sql)
    enum_sql = "SELECT name FROM sqlite_master WHERE type='table' AND name LIKE 'ENUM_%'"
    enum_tables = [r[0] for r in src.execute(enum_sql)] if with_enums else []
    for table in (*COPIED, *enum_tables):
        rows = src.execute(f'SELECT * FROM "{table}"').fetchall()
        if rows:
            conn.executemany(f'INSERT INTO "{table}" VALUES ({",".join("?" * len(rows[0]))})', rows)
    src.close()
    return conn, tmp


def write(shape: Shape, path: Path, *, quiet: bool = False) -> Path:
    """Generate `shape` into `path` (replaced if present); returns `path`."""
    t0 = time.perf_counter()
    d = build(shape)
    conn, tmp = _empty_export(path, with_enums=True)
    conn.executemany("INSERT OR REPLACE INTO ENUM_CUDA_MEMCPY_OPER VALUES (?, ?, ?)", MEMCPY_OPER)
    conn.execute("UPDATE EXPORT_META_DATA SET value = ? WHERE name IN ('EXPORT_OUTUPT_FILE')", (path.name,))
    stop = d["end"] + 1_000_000
    conn.execute("INSERT INTO ANALYSIS_DETAILS VALUES (?, ?, 0, ?)", (1 << 48, stop, stop))

    strings = d["strings"]
    conn.executemany("INSERT INTO StringIds VALUES (?, ?)", [(i, v) for v, i in strings.items()])
    conn.execute("INSERT INTO PROCESSES VALUES (?, ?, ?)", (GLOBAL_PID, PID, "python3"))
    conn.executemany("INSERT INTO ThreadNames VALUES (?, ?, ?)",
                     [(strings["python3"], 10, MAIN_TID), (strings["scheduler"], 10, SCHED_TID),
                      (strings["async_output"], 10, OUTPUT_TID)])
    conn.execute("INSERT INTO TARGET_INFO_GPU (vmId, id, name, busLocation, isDiscrete, totalMemory, smCount, "
                 "chipName, cuDevice, computeMajor, computeMinor) VALUES (0, 0, 'NVIDIA H100 80GB HBM3', "
                 "'0000:19:00.0', 1, 85031714816, 132, 'GH100', 0, 9, 0)")

    api = d["api"]
    _insert(conn, "INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (?, ?, ?, ?, ?, ?, 0, NULL)",
            [api["start"], api["end"], api["cls"], api["tid"], api["corr"], api["name"]], len(api["start"]))

    ops = d["ops"]
    k = np.flatnonzero(ops["kind"] == 0)
    k = k[np.argsort(ops["start"][k], kind="stable")]
    cat = np.array([KERNELS[x][2:6] for x in KERNEL_KEYS], np.int64)  # grid, block, regs, smem
    short = np.array([strings[KERNELS[x][0]] for x in KERNEL_KEYS])
    dem = np.array([strings[KERNELS[x][1]] for x in KERNEL_KEYS])
    key = ops["key"][k]
    _insert(
        conn,
        f"INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (?, ?, 0, 1, {COMPUTE_STREAM}, ?, {GLOBAL_PID}, ?, ?, NULL, "
        "0, 0, ?, ?, 1, 1, ?, 1, 1, ?, 0, 0, 0, ?, 0, ?, 0)",
        [ops["start"][k], ops["end"][k], ops["corr"][k], dem[key], short[key], cat[key, 2], cat[key, 0],
         cat[key, 1], cat[key, 3], np.arange(1, len(k) + 1), _nullable(ops["node"][k])],
        len(k),
    )
    m = np.flatnonzero(ops["kind"] == 1)
    m = m[np.argsort(ops["start"][m], kind="stable")]
    copy = ops["copy"][m]
    _insert(
        conn,
        "INSERT INTO CUPTI_ACTIVITY_KIND_MEMCPY VALUES (?, ?, 0, 1, ?, ?, ?, ?, ?, NULL, ?, ?, 0, 1, 0, 1, NULL, NULL, "
        "NULL)",
        [ops["start"][m], ops["end"][m], ops["stream"][m], ops["corr"][m], np.full(len(m), GLOBAL_PID),
         np.where(copy == HTOD, 4096, 64), copy, np.where(copy == HTOD, 1, 2), np.where(copy == HTOD, 2, 1)],
        len(m),
    )
    z = np.flatnonzero(ops["kind"] == 2)
    _insert(
        conn,
        f"INSERT INTO CUPTI_ACTIVITY_KIND_MEMSET VALUES (?, ?, 0, 1, {COMPUTE_STREAM}, ?, {GLOBAL_PID}, 0, 2048, "
        "NULL, 2)",
        [ops["start"][z], ops["end"][z], ops["corr"][z]],
        len(z),
    )

    nv = d["nvtx"]
    texts = d["nvtx_texts"]
    text = [None if i < 0 else texts[i] for i in nv["text"].tolist()]
    _insert(
        conn,
        "INSERT INTO NVTX_EVENTS (start, end, eventType, color, text, globalTid, textId, domainId, int64Value) "
        "VALUES (?, ?, 59, ?, ?, ?, ?, 0, ?)",
        [nv["start"], nv["end"], [255 if t >= 0 else None for t in nv["textid"].tolist()], text, nv["tid"],
         _nullable(nv["textid"]), _nullable(nv["payload"])],
        len(nv["start"]),
    )
    conn.commit()
    conn.close()
    tmp.replace(path)
    if not quiet:
        print(f"wrote {path} ({path.stat().st_size / 2**20:.0f} MiB: {len(k):,} kernels, {len(api['start']):,} API "
              f"calls, {len(nv['start']):,} NVTX ranges) in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    return path


# -- the NVTX-heavy shape (issue 15): no CUDA, three ranges per forward ------------------------------------------
NVTX_HEAVY_VERSION = 1


def nvtx_heavy_name(forwards: int, seed: int = 0) -> str:
    return f"nvtx_{_human(forwards)}fwd_s{seed}_v{NVTX_HEAVY_VERSION}.sqlite"


def nvtx_heavy_rows(forwards: int, seed: int = 0, warmup: int = 5) -> dict:
    """The rows `benchmarks/nvtx_heavy.c` makes nsys write, for `forwards` iterations: per iteration an
    `nsys_cc:iteration` push/pop range (the first `warmup`: `nsys_cc:warmup`; payload 8) around a
    `model_executable()` range (registered string, payload 1024 for every 16th forward, a prefill, else 8) and
    a `sample` range (inline text) beside it, all on one thread. Columns in NVTX_EVENTS row order."""
    rng = np.random.default_rng(seed)
    n = forwards
    prefill = np.arange(n) % 16 == 0
    lead = rng.integers(300, 900, n)  # iteration start → forward start
    fwd = np.where(prefill, 4_000, 900) + rng.integers(0, 300, n)
    gap = rng.integers(150, 400, n)  # forward end → sample start
    smp = rng.integers(150, 350, n)
    tail = rng.integers(100, 300, n)  # sample end → iteration end
    between = rng.integers(100, 300, n)  # iteration end → next iteration start
    length = lead + fwd + gap + smp + tail
    it_start = 40_000_000 + np.cumsum(length + between) - (length + between)
    f_start = it_start + lead
    f_end = f_start + fwd
    s_start = f_end + gap
    s_end = s_start + smp
    it_end = s_end + tail
    strings = {"model_executable()": 120, "nsys_cc:iteration": 121, "nsys_cc:warmup": 122}
    start = np.stack([it_start, f_start, s_start], axis=1).ravel()
    end = np.stack([it_end, f_end, s_end], axis=1).ravel()
    it_name = np.where(np.arange(n) < warmup, strings["nsys_cc:warmup"], strings["nsys_cc:iteration"])
    text_id = np.stack([it_name, np.full(n, strings["model_executable()"]), np.full(n, -1)], axis=1).ravel()
    payload = np.stack([np.full(n, 8), np.where(prefill, 1024, 8), np.full(n, -1)], axis=1).ravel()
    return {"start": start, "end": end, "text_id": text_id, "payload": payload, "strings": strings,
            "end_of_trace": int(it_end[-1]) + 1_000_000}


def write_nvtx_heavy(forwards: int, path: Path, seed: int = 0, *, quiet: bool = False) -> Path:
    """The NVTX-heavy export (`nvtx_heavy_rows`) in the schema of the real export (as `write`)."""
    t0 = time.perf_counter()
    d = nvtx_heavy_rows(forwards, seed)
    conn, tmp = _empty_export(path, with_enums=False)
    conn.execute("INSERT INTO ANALYSIS_DETAILS VALUES (?, ?, 0, ?)", (1 << 48, d["end_of_trace"], d["end_of_trace"]))
    conn.executemany("INSERT INTO StringIds VALUES (?, ?)", [(i, v) for v, i in d["strings"].items()])
    conn.execute("INSERT INTO PROCESSES VALUES (?, ?, ?)", (GLOBAL_PID, PID, "nvtx_heavy"))
    n = len(d["start"])
    text = np.where(d["text_id"] < 0, "sample", None)
    _insert(
        conn,
        f"INSERT INTO NVTX_EVENTS (start, end, eventType, text, globalTid, textId, domainId, int64Value) "
        f"VALUES (?, ?, 59, ?, {MAIN_TID}, ?, 0, ?)",
        [d["start"], d["end"], text, _nullable(d["text_id"]), _nullable(d["payload"])],
        n,
    )
    conn.commit()
    conn.close()
    tmp.replace(path)
    if not quiet:
        print(f"wrote {path} ({path.stat().st_size / 2**20:.0f} MiB: {n:,} NVTX ranges, {forwards:,} forwards) in "
              f"{time.perf_counter() - t0:.1f} s", file=sys.stderr)
    return path


def ensure_nvtx_heavy(forwards: int, seed: int = 0, data_dir: Path = DATA, *, quiet: bool = False) -> Path:
    """The NVTX-heavy export of `forwards` forwards under `data_dir`, generated once."""
    path = data_dir / nvtx_heavy_name(forwards, seed)
    if not path.exists():
        write_nvtx_heavy(forwards, path, seed, quiet=quiet)
    return path


def ensure(shape: Shape, data_dir: Path = DATA, *, quiet: bool = False) -> Path:
    """The export for `shape` under `data_dir`, generated once (the file name encodes every argument)."""
    path = data_dir / shape.file_name()
    if not path.exists():
        write(shape, path, quiet=quiet)
    return path


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--kernels", type=int, default=0, help="number of kernels (rounded up to whole forwards)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--graphs", action="store_true", help="decode forwards replay CUDA graphs (node-level trace)")
    p.add_argument("--layers", type=int, default=4, help="layers per forward (10 kernels each, plus 10)")
    p.add_argument("--layer-ranges", action="store_true",
                   help="an NVTX range around each layer's launches (7 ranges per 50 kernels instead of 2)")
    p.add_argument("--duration-scale", type=float, default=1.0, help="scale kernel durations (a smaller model)")
    p.add_argument("-o", "--output", type=Path, help=f"output file (default: {DATA}/<name from the arguments>)")
    p.add_argument("--nvtx-forwards", type=int,
                   help="instead: the NVTX-heavy shape of issue 15 (no CUDA, 3 ranges per forward) with this many "
                        "forwards (16 M ranges: 5333334); --kernels is then ignored")
    a = p.parse_args(argv)
    if a.nvtx_forwards:
        if a.output:
            write_nvtx_heavy(a.nvtx_forwards, a.output, a.seed)
        else:
            print(ensure_nvtx_heavy(a.nvtx_forwards, a.seed))
        return
    shape = Shape(a.kernels, a.seed, a.graphs, a.layers, duration_scale=a.duration_scale, layer_ranges=a.layer_ranges)
    if a.output:
        write(shape, a.output)
    else:
        print(ensure(shape))


if __name__ == "__main__":
    main()
