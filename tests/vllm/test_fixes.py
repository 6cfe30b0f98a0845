"""The correction to vLLM's CPU `expand` kernel: the bug it corrects is there, and the correction expands like the
Triton kernel does (one value per token, `replace_from` → `replace_to`), for every dtype."""

from __future__ import annotations

import pytest

from nsys_cc.vllm import fixes as vllm_fixes

# vLLM (and torch) are imported by the fixtures, not at collection: asking for `vllm_module` marks these tests `vllm`
# (conftest), and `make check` does not pay seconds of vLLM import in every worker.


@pytest.fixture(scope="module")
def cpu_tl(vllm_module):
    module = pytest.importorskip("vllm.utils.cpu_triton_utils")  # vLLM's CPU build only
    _load_vllm_ops()
    return module


def _load_vllm_ops() -> None:
    """Register torch.ops._C, the C++ ops the CPU kernels call, the way vLLM does: its platform picks the build the CPU
    runs (`vllm._C` needs AVX-512 with BF16, `_C_AVX512` AVX-512, `_C_AVX2` the rest), where importing `vllm._C`
    directly dies with SIGILL on an AVX2-only CPU and takes the test worker with it."""
    from vllm.platforms import current_platform

    if not hasattr(current_platform, "import_kernels"):
        pytest.skip("this vLLM's platform has no import_kernels (not the CPU build)")
    current_platform.import_kernels()


@pytest.fixture(scope="module")
def original(cpu_tl):
    """The kernel as vLLM ships it (before any correction this process installed)."""
    return getattr(cpu_tl._expand_kernel_impl, "__nsys_cc_original__", cpu_tl._expand_kernel_impl)


def _expand(impl, values, dtype):
    import torch

    dtype = getattr(torch, dtype)
    out = torch.full((6,), -7, dtype=dtype)  # what is left unwritten stays -7
    impl(out, torch.tensor(values, dtype=dtype), torch.tensor([2, 5, 6], dtype=torch.int32), 0, 9)
    return out.tolist()


def test_vllms_cpu_expand_leaves_float_outputs_unwritten(original):
    assert _expand(original, [1.5, 0.0, 2.0], "float32") == [-7.0] * 6
    assert _expand(original, [1, 0, 2], "int64") == [1, 1, 9, 9, 9, 2]


@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "int64"])
def test_fixed_expand_writes_every_dtype(dtype, original):
    fixed = vllm_fixes.fixed_expand(original)
    assert _expand(fixed, [1, 0, 2], dtype) == [1, 1, 9, 9, 9, 2]


def test_the_patch_is_installed_once_and_can_be_turned_off(monkeypatch):
    def original(*args):  # a stand-in kernel: patching is bookkeeping, no vLLM needed
        raise AssertionError("not called")

    class Module:
        _expand_kernel_impl = staticmethod(original)

    vllm_fixes.patch_cpu_triton_utils(Module)
    first = Module._expand_kernel_impl
    assert first.__nsys_cc_original__ is original
    vllm_fixes.patch_cpu_triton_utils(Module)
    assert Module._expand_kernel_impl is first

    class Untouched:
        _expand_kernel_impl = staticmethod(original)

    monkeypatch.setenv(vllm_fixes.ENV_VLLM_FIXES, "0")
    vllm_fixes.patch_cpu_triton_utils(Untouched)
    assert Untouched._expand_kernel_impl is original


def test_install_corrects_the_cpu_module_in_this_process(monkeypatch, cpu_tl, original):
    monkeypatch.setattr(cpu_tl, "_expand_kernel_impl", original)
    vllm_fixes.install()
    assert _expand(cpu_tl._expand_kernel_impl, [1.5, 0.0, 2.0], "float32") == [1.5, 1.5, 9.0, 9.0, 9.0, 2.0]


AVX2_ONLY = """
import torch
torch.cpu._is_avx512_supported = lambda: False  # vLLM's platform now takes the CPU for an AVX2-only one
torch.cpu._is_avx512_bf16_supported = lambda: False
import sys
sys.path.insert(0, {tests!r})
import test_fixes as t
t._load_vllm_ops()
import vllm
loaded = sorted({line.rsplit("/", 1)[-1].strip() for line in open("/proc/self/maps") if "/vllm/_C" in line})
print(loaded)
"""


def test_the_ops_load_as_on_an_avx2_only_cpu(vllm_module):
    """The fixture's op loading on the path vLLM takes on an AVX2-only CPU (`make test` once died there with
    `Illegal instruction`): with AVX-512 reported absent, vLLM's AVX2 build is the one loaded and `vllm._C` is not."""
    import os
    import subprocess
    import sys

    code = AVX2_ONLY.replace("{tests!r}", repr(os.path.dirname(__file__)))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "['_C_AVX2.abi3.so']", done.stdout
