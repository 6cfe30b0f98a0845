"""Kernel categories (`kernel_tables.categorise`) against names written by hand.

The oracle is `kernel_categories.tsv` beside this file: every GPU-op name of the real traces in ../shared/traces/public
as the analysis sees it (a Kineto event's name, an export's shortName), each with the category written by reading the
name — never derived from the rules under test. A second test collects the names again from the raw files (JSON
events, SQL on the exports) and fails on a name the list does not hold, so a new public trace cannot slip by
uncategorised. Names of today's stacks that no public trace holds (ROCm's skinny GEMMs and runtime copies, vLLM's
custom all-reduce and MoE kernels, FlashInfer's sampling) are listed below with their categories, by hand too.
"""

from __future__ import annotations

import gzip
import json
import sqlite3
from pathlib import Path

import pytest

from nsys_cc.analysis.forwards.kernel_tables import CATEGORIES, categorise

LISTED = Path(__file__).with_name("kernel_categories.tsv")


def _listed() -> list[tuple[str, str, str]]:
    rows = []
    for line in LISTED.read_text(encoding="utf-8").splitlines():
        if line and not line.startswith("#"):
            category, kind, name = line.split("\t")
            rows.append((category, kind, name))
    return rows


def test_every_listed_name_has_its_hand_written_category():
    rows = _listed()
    assert len(rows) >= 148
    wrong = [(name[:90], category, categorise(name, kind)) for category, kind, name in rows
             if categorise(name, kind) != category]
    assert not wrong, wrong


def test_the_issues_misfiled_kernels_are_filed_where_they_belong():
    """The names a real session met (a B200 GPT-OSS trace): MoE block-scaled batched GEMMs are GEMM, not
    activation/other; TRT-LLM's quantiser is quantisation, not attention; the MoE router is routing, not
    normalisation."""
    by_name = {name: category for category, _, name in _listed()}
    bmm = [n for n in by_name
           if n.startswith(("bmm_MxE4m3_MxE2m1MxE4m3_Fp32_t128x16x256", "bmm_Bfloat16_MxE2m1MxE4m3"))]
    quant = [n for n in by_name if "tensorrt_llm::kernels::quantize_with_block_size" in n]
    routing = [n for n in by_name if n.startswith("void moe::dev::routing::")]
    assert len(bmm) == 2 and len(quant) == 1 and len(routing) == 3
    assert {categorise(n) for n in bmm} == {"GEMM"}
    assert {categorise(n) for n in quant} == {"quantisation"}
    assert {categorise(n) for n in routing} == {"MoE routing"}


def _names_in(path: Path) -> set[tuple[str, str]]:
    """(kind, name) of every GPU op of a public trace, read from the raw file: a Kineto trace's kernel, copy and
    set events; an export's kernel shortNames (memcpy/memset rows carry no name there)."""
    out: set[tuple[str, str]] = set()
    if path.name.endswith(".json.gz"):
        with gzip.open(path, "rt", encoding="utf-8") as fh:
            doc = json.load(fh)
        kinds = {"kernel": "kernel", "gpu_memcpy": "memcpy", "gpu_memset": "memset"}
        out |= {(kinds[e["cat"]], e["name"]) for e in doc["traceEvents"]
                if e.get("ph") == "X" and e.get("cat") in kinds and kinds[e["cat"]] == "kernel"}
        return out
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        if con.execute("SELECT 1 FROM sqlite_master WHERE name = 'CUPTI_ACTIVITY_KIND_KERNEL'").fetchone():
            out |= {("kernel", n) for (n,) in con.execute(
                "SELECT DISTINCT s.value FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s ON s.id = k.shortName")}
    finally:
        con.close()
    return out


@pytest.mark.slow
def test_every_kernel_name_of_the_public_traces_is_listed(public_dir):
    listed = {(kind, name) for _, kind, name in _listed()}
    traces = sorted(p for p in public_dir.iterdir() if p.name.endswith((".sqlite", ".json.gz")))
    assert traces
    missing = {}
    for path in traces:
        for _kind, name in _names_in(path) - listed:
            missing.setdefault(path.name, []).append(name[:90])
    assert not missing, f"names without a hand-written category in {LISTED.name}: {missing}"


# Names of today's stacks no public trace holds, with their category by hand (vLLM, SGLang, ROCm/aiter, FlashInfer).
TODAY = [
    ("wvSplitK_hf_sml_<__hip_bfloat16, 64, 2, 16, 8, 2, 1>", "GEMM"),  # vLLM ROCm skinny GEMM
    ("__amd_rocclr_copyBuffer", "memcpy/memset"),
    ("__amd_rocclr_fillBufferAligned", "memcpy/memset"),
    ("void vllm::cross_device_reduce_1stage<__nv_bfloat16, 8>(vllm::RankData*, vllm::RankSignals, int)",
     "communication"),
    ("quickreduce::allreduce_prototype_twoshot<quickreduce::CodecFP>", "communication"),
    ("void ck::kernel_gemm_xdl_cshuffle_v3<ck::GridwiseGemm_xdl_cshuffle_v3<>>", "GEMM"),
    ("void vllm::moe::topkGatingSoftmax<4, 128, 4, 16, 32, int>(float const*, bool const*, float*)", "MoE routing"),
    ("void vllm::moe::moe_align_block_size_kernel<int>(int const*, int*, int*, int*, int, int)", "MoE routing"),
    ("void vllm::moe::moe_sum_kernel<c10::BFloat16, 8>(c10::BFloat16*, c10::BFloat16 const*, int)", "MoE routing"),
    ("fused_moe_kernel", "GEMM"),  # vLLM's Triton MoE: the expert GEMMs
    ("void flashinfer::sampling::TopKTopPSamplingFromProbKernel<1024u, (cub::BlockScanAlgorithm)0>",
     "embedding/sampling"),
    ("void vllm::act_and_mul_kernel<cutlass::half_t, &vllm::silu_kernel<cutlass::half_t>, true>",
     "activation/elementwise"),
    ("cutlass3x_sm90_tensorop_s64x128x16gemm_bf16_bf16_f32_bf16_bf16_128x128x64_1x1x1_0_tnn_align8_warpspecialized",
     "GEMM"),
    ("void cutlass::device_kernel<cutlass::gemm::kernel::GemmUniversal<cute::tuple<int, int, int, int>>>", "GEMM"),
    ("void flash::flash_fwd_splitkv_kernel<Flash_fwd_kernel_traits<128, 64, 128, 4>, false, true>", "attention"),
    ("void vllm::concat_and_cache_mla_kernel<__nv_bfloat16, __nv_bfloat16, (vllm::Fp8KVCacheDataType)0>",
     "attention"),
    ("void vllm::dynamic_per_token_scaled_fp8_quant_kernel<c10::BFloat16, c10::Float8_e4m3fn>", "quantisation"),
    ("_per_token_group_quant_fp8", "quantisation"),
    ("void vllm::silu_and_mul_kernel<c10::BFloat16>(c10::BFloat16*, c10::BFloat16 const*, int)",
     "activation/elementwise"),
    ("void at::native::sbtopk::gatherTopK<float, unsigned int, 2, false>", "embedding/sampling"),
    ("_fwd_kernel_ep_scatter_1", "MoE routing"),  # SGLang's expert-parallel token scatter
    ("nvjet_sm100_tst_128x256_64x4_2x1_2cta_v_bz_TNT", "GEMM"),
    ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off", "GEMM"),
]


@pytest.mark.parametrize(("name", "category"), TODAY, ids=[n[:40] for n, _ in TODAY])
def test_todays_kernels_not_in_any_public_trace(name, category):
    assert categorise(name) == category


def test_copies_fills_and_graphs_are_told_by_their_kind_and_every_category_is_known():
    assert categorise("anything", "memcpy") == categorise("", "memset") == "memcpy/memset"
    assert categorise("[CUDA graph 3]", "graph") == "CUDA graph"
    assert {c for c, _, _ in _listed()} | {c for _, c in TODAY} <= set(CATEGORIES)
