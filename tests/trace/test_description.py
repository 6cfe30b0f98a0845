"""Where a trace ran, as it says (`Trace.describe()`, `nsys_cc.trace.description`), against the raw
files: a Kineto trace's `deviceProperties` (the GPUs its GPU ops ran on), runtime versions and `distributedInfo`
read from the raw JSON here; an export's `TARGET_INFO_GPU` rows of the devices its kernels ran on, by raw SQL."""

from __future__ import annotations

import gzip
import json
import sqlite3

import pytest

from conftest import FIXTURES, PUBLIC, unchanged
from nsys_cc.cli import cli
from nsys_cc.trace import open_trace
from nsys_cc.trace.description import TraceDescription, cuda_version, device_name, engine_of, hip_version

B200 = "AMD-AGI__TraceLens__b200_eager_trace.pt.trace.json.gz"
KINETO = [B200, "AMD-AGI__TraceLens__inference_sglang_decode__sglang_Qwen3-8B_decode.json.gz",
          "AMD-AGI__TraceLens__inference_vllm_decode_full__graph_execution.json.gz",
          "AMD-AGI__TraceLens__inference_vllm_prefilldecode_piecewise__graph_execution.json.gz"]
EXPORTS = ["GindaChen__nsys-ai__mock.sqlite", "MohanadOdema__DLProf__nsys_profile.sqlite",
           "NVIDIA__Fuser__report1@64ee035.sqlite", "Young768__profiling___report2@3a07009.sqlite",
           "hpcgroup__pipit__perlmutter-cloverleaf-cuda.sqlite", "GindaChen__nsys-ai__h100_2gpu_1s.sqlite"]


def _raw_json(path):
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        return json.load(fh)


@pytest.mark.slow
@pytest.mark.parametrize("name", KINETO)
def test_a_kineto_trace_says_its_gpus_runtime_engine_and_rank(public_dir, name):
    doc = _raw_json(public_dir / name)
    used = {e["args"]["device"] for e in doc["traceEvents"] if e.get("cat") == "kernel"}
    listed = doc["deviceProperties"]
    props = [d for d in listed if d["id"] in used] or (listed if len(listed) == len(used) else [])
    with unchanged(public_dir / name), open_trace(public_dir / name) as t:
        d = t.describe()
    rocm = "hip_runtime_version" in doc or "roctracer_version" in doc
    assert d.platform == ("ROCm" if rocm else "CUDA")
    assert d.devices == tuple(p["name"] or f"GPU (compute {p['computeMajor']}.{p['computeMinor']}, {p['numSms']} SMs)"
                              for p in props)
    assert (d.rank, d.world_size) == (doc["distributedInfo"]["rank"], doc["distributedInfo"]["world_size"])
    assert d.engine == ("SGLang" if "sglang" in name else "vLLM")
    if rocm and "hip_runtime_version" in doc:
        v = doc["hip_runtime_version"]
        assert d.runtime == f"HIP {v // 10**7}.{v // 10**5 % 100}.{v % 10**5}"


@pytest.mark.slow
def test_the_b200_trace_in_words(public_dir):
    with open_trace(public_dir / B200) as t:
        d = t.describe()
    assert str(d) == "NVIDIA B200 (CUDA 12.9), vLLM, rank 0 of 8"
    assert d.to_dict() == {"platform": "CUDA", "device": "NVIDIA B200", "devices": ["NVIDIA B200"],
                           "runtime": "CUDA 12.9", "engine": "vLLM", "engine_version": None, "rank": 0,
                           "world_size": 8}


@pytest.mark.parametrize("name", EXPORTS)
def test_an_export_says_the_gpus_its_kernels_ran_on(public_dir, name):
    con = sqlite3.connect(f"file:{public_dir / name}?mode=ro", uri=True)
    try:
        used = {r[0] for r in con.execute("SELECT DISTINCT deviceId FROM CUPTI_ACTIVITY_KIND_KERNEL")}
        has_gpu_table = con.execute("SELECT 1 FROM sqlite_master WHERE name = 'TARGET_INFO_GPU'").fetchone()
        gpus = dict(con.execute("SELECT id, name FROM TARGET_INFO_GPU").fetchall()) if has_gpu_table else {}
        driver = con.execute("SELECT value FROM TARGET_INFO_SYSTEM_ENV WHERE name = 'CudaDriverVersion'").fetchone()
    finally:
        con.close()
    with open_trace(public_dir / name) as t:
        d = t.describe()
    assert d.platform == "CUDA" and d.rank is None
    assert d.devices == tuple(gpus[i] for i in sorted(used) if i in gpus)
    if driver:
        v = int(driver[0])
        assert d.runtime == f"CUDA driver {v // 1000}.{v % 1000 // 10}"
    assert d.engine is None  # none of them is an engine's trace
    if not gpus:  # a cut trace without TARGET_INFO_GPU: no name guessed
        assert d.device is None and "the trace names no GPU" in str(d)


def test_the_cpu_fixtures_say_cpu_and_vllm():
    torch_target = FIXTURES / "torch" / "tiny-llama-target.pt.trace.json.gz"
    for path in (FIXTURES / "spec" / "tiny-llama-target.sqlite", torch_target):
        with open_trace(path) as t:
            d = t.describe()
        assert d.platform == "CPU" and d.device == "CPU" and d.devices == () and d.engine == "vLLM"
    with open_trace(torch_target) as t:
        assert t.describe().engine_version == _raw_json(torch_target)["vllm_version"] == "0.32.0"


def test_the_helpers():
    assert cuda_version(12090) == "12.9" and cuda_version(13000) == "13.0" and cuda_version("12") is None
    assert hip_version(70051831) == "7.0.51831" and hip_version(True) is None
    assert device_name("", 9, 4, 304) == "GPU (compute 9.4, 304 SMs)" and device_name(None) == "GPU (unnamed)"
    assert engine_of(["python", "VLLM::EngineCore"]) == "vLLM"
    assert engine_of(["/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py(1): run"]) == "SGLang"
    assert engine_of(["/usr/local/lib/python3.12/dist-packages/vllm/v1/worker/gpu_model_runner.py(9): x"]) == "vLLM"
    assert engine_of(["step[DECODE bs=32]", "execute_32_context_0(sq0)"]) == "SGLang"  # SGLang writes both
    assert engine_of(["void vllm::rms_norm_kernel<c10::BFloat16>", "python3"]) is None  # a kernel is no engine
    two = TraceDescription("CUDA", ("NVIDIA A100-SXM4-80GB",) * 2, "CUDA driver 12.2", None)
    assert two.device == "2 × NVIDIA A100-SXM4-80GB" and "engine not named" in str(two)


@pytest.mark.slow
def test_info_says_where_it_ran(public_dir):
    from click.testing import CliRunner

    r = CliRunner().invoke(cli, ["info", str(PUBLIC / B200)])
    assert r.exit_code == 0 and "ran on          NVIDIA B200 (CUDA 12.9), vLLM, rank 0 of 8" in r.stdout
    r = CliRunner().invoke(cli, ["info", str(PUBLIC / EXPORTS[0]), "--format", "json"])
    assert r.exit_code == 0 and json.loads(r.stdout)["description"]["device"] == "NVIDIA GeForce RTX 3080"
