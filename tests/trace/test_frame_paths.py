"""A Python frame's module path (`nsys_cc.trace.frame_paths`): one rule for every form an install gives a frame's file,
used by every frame pattern and by the selection of frames by name or prefix.

The expected module paths are written by hand per install form; the real public traces (vLLM's trimmed names, SGLang's
absolute `/sgl-workspace/…` ones) are read from their raw JSON."""

from __future__ import annotations

import gzip
import json
import re

import gpu_shaped_kineto as gsk
import numpy as np
import pandas as pd
import pytest

from conftest import PUBLIC
from nsys_cc import contract
from nsys_cc.trace import frame_paths
from nsys_cc.trace.nvtx import matches

EAGLE = "vllm/v1/spec_decode/eagle.py(237): propose"


@pytest.mark.parametrize("name, want", [
    # pip / site-packages, trimmed by torch
    (EAGLE, EAGLE),
    # source checkout, editable install
    ("/home/u/code/vllm/vllm/v1/spec_decode/eagle.py(237): propose", EAGLE),
    ("/home/u/src/vllm-dev/vllm/v1/spec_decode/eagle.py(237): propose", EAGLE),
    # a container image's dist-packages, conda and venv site-packages not trimmed
    ("/usr/local/lib/python3.12/dist-packages/vllm/v1/spec_decode/eagle.py(237): propose", EAGLE),
    ("/opt/conda/envs/serve/lib/python3.11/site-packages/vllm/v1/spec_decode/eagle.py(237): propose", EAGLE),
    ("/home/u/.venv/lib/python3.12/site-packages/vllm/v1/spec_decode/eagle.py(237): propose", EAGLE),
    # SGLang's dev image: the repository's python/ folder holds the package
    ("/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py(2919): _run_batch_inner",
     "sglang/srt/managers/scheduler.py(2919): _run_batch_inner"),
    # a checkout under a folder named after the engine, twice
    ("/home/vllm/vllm/vllm/v1/worker/gpu_model_runner.py(4303): sample_tokens",
     "vllm/v1/worker/gpu_model_runner.py(4303): sample_tokens"),
    # the outermost engine package wins over a folder of another engine's name inside it
    ("/sgl-workspace/sglang/python/sglang/srt/layers/vllm/ops.py(3): f", "sglang/srt/layers/vllm/ops.py(3): f"),
    # a Windows venv
    ("C:\\Users\\u\\venv\\Lib\\site-packages\\vllm\\v1\\engine\\core.py(9): step", "vllm/v1/engine/core.py(9): step"),
    # not an engine's: unchanged (whole folder names only)
    ("/home/u/myproj/vllm_utils/spec_decode/eagle.py(3): propose",
     "/home/u/myproj/vllm_utils/spec_decode/eagle.py(3): propose"),
    ("threading.py(973): _bootstrap", "threading.py(973): _bootstrap"),
    ("<built-in method copy_ of Tensor object at 0x7ed6e00c44a0>",
     "<built-in method copy_ of Tensor object at 0x7ed6e00c44a0>"),
    ("<string>(2): dynamic_func", "<string>(2): dynamic_func"),
    ("nn.Module: Sampler_0", "nn.Module: Sampler_0"),
])
def test_a_frames_module_name_is_its_file_from_the_packages_root(name, want):
    assert frame_paths.module_name(name) == want


PATTERNS = {"sample": contract.VLLM_SAMPLE_FRAME_RE, "propose": contract.VLLM_PROPOSE_FRAME_RE,
            "engine": contract.VLLM_ENGINE_STEP_FRAME_RE}


@pytest.mark.parametrize("form", sorted(gsk.INSTALL_FORMS))
@pytest.mark.parametrize("name, pattern", [
    ("vllm/v1/worker/gpu_model_runner.py(4303): sample_tokens", "sample"),
    ("vllm/v1/worker/gpu/model_runner.py(811): sample_tokens", "sample"),  # V2's runner
    ("vllm/v1/spec_decode/eagle.py(237): propose", "propose"),  # early 2026
    ("vllm/v1/spec_decode/llm_base_proposer.py(402): propose", "propose"),  # later
    ("vllm/v1/worker/gpu/spec_decode/eagle.py(120): propose", "propose"),  # V2's runner
    ("vllm/v1/engine/core.py(391): step", "engine"),
])
def test_every_frame_pattern_matches_every_install_form(form, name, pattern):
    written = gsk.INSTALL_FORMS[form].format(name)
    for key, regex in PATTERNS.items():
        hit = frame_paths.hits([written], re.compile(regex))
        assert hit.tolist() == [key == pattern], (form, key)


@pytest.mark.parametrize("name", [
    "/home/u/myproj/vllm_utils/spec_decode/eagle.py(3): propose",  # a user's own module of a look-alike name
    "/home/u/.venv/lib/python3.12/site-packages/myproj/vllm/v1/spec_decode/eagle.py(3): propose",  # inside a package
    "myproj/vllm/v1/spec_decode/eagle.py(3): propose",
    "/home/u/bench/vllm_run.py(12): propose",
    "vllm/v1/spec_decode/eagle.py(237): propose_tree",  # another function of the module
])
def test_a_look_alike_is_no_engine_frame(name):
    assert not frame_paths.hits([name], re.compile(contract.VLLM_PROPOSE_FRAME_RE)).any()


def _frames(names: list[str]) -> pd.DataFrame:
    return pd.DataFrame({"name": pd.Categorical(names),
                         "qualified_name": pd.Categorical([f"python_function:{n}" for n in names])})


def test_frames_are_selected_by_module_path_whatever_the_prefix():
    names = [gsk.INSTALL_FORMS[f].format(EAGLE) for f in sorted(gsk.INSTALL_FORMS)] + [
        "/home/u/myproj/vllm_utils/x.py(1): f", "model_executable()", "vllm/v1/worker/gpu_model_runner.py(1): f"]
    frames = _frames(names)
    by_prefix = matches(frames, (), ("vllm/v1/spec_decode/",))
    assert by_prefix.tolist() == [True] * len(gsk.INSTALL_FORMS) + [False, False, False]
    # a frame asked for by its full name from one install is the same frame from any other
    for asked in (EAGLE, "/usr/local/lib/python3.12/dist-packages/" + EAGLE):
        assert matches(frames, (asked,)).tolist() == [True] * len(gsk.INSTALL_FORMS) + [False, False, False]
    # a prefix given with an install path reads as its module path too
    assert matches(frames, (), ("/opt/conda/lib/python3.11/site-packages/vllm/v1/spec_decode/",)).sum() == \
        len(gsk.INSTALL_FORMS)
    # and a plain NVTX range name is compared as it is
    assert matches(frames, ("model_executable()",)).tolist() == [False] * (len(names) - 2) + [True, False]


def _raw_frames(path) -> list[str]:
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        doc = json.load(fh)
    return sorted({e["name"] for e in doc["traceEvents"] if e.get("cat") == "python_function"})


SGLANG = PUBLIC / "AMD-AGI__TraceLens__inference_sglang_decode__sglang_Qwen3-8B_decode.json.gz"
VLLM = PUBLIC / "AMD-AGI__TraceLens__inference_vllm_decode_full__graph_execution.json.gz"


@pytest.mark.skipif(not SGLANG.exists(), reason="the public traces are not here (../shared/traces/public)")
def test_the_public_traces_frames_read_from_their_packages_root():
    sglang = _raw_frames(SGLANG)
    absolute = [n for n in sglang if n.startswith("/sgl-workspace/sglang/python/sglang/")]
    assert len(absolute) > 50
    for n in absolute:
        assert frame_paths.module_name(n) == n[len("/sgl-workspace/sglang/python/"):]
    # the triton runtime of the same image is no engine's: its absolute path is kept
    triton = [n for n in sglang if n.startswith("/sgl-workspace/triton-custom/")]
    assert triton and all(frame_paths.module_name(n) == n for n in triton)
    vllm = [n for n in _raw_frames(VLLM) if n.startswith("vllm/")]
    assert vllm and all(frame_paths.module_name(n) == n for n in vllm)  # trimmed by torch already
    hit = frame_paths.hits(pd.Series(vllm), re.compile(r"^vllm/v1/worker/gpu_model_runner\.py\(\d+\): "))
    assert np.count_nonzero(hit) == sum(n.startswith("vllm/v1/worker/gpu_model_runner.py(") for n in vllm) > 0
