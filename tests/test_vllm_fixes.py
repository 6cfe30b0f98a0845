"""The correction to vLLM's CPU `expand` kernel: the bug it corrects is there, and the correction expands like the
Triton kernel does (one value per token, `replace_from` → `replace_to`), for every dtype."""

from __future__ import annotations

import pytest
import torch

from nsys_cc.launch import vllm_fixes

cpu_tl = pytest.importorskip("vllm.utils.cpu_triton_utils")  # vLLM's CPU build only
pytest.importorskip("vllm._C")  # registers torch.ops._C, the C++ ops the CPU kernels call
ORIGINAL = getattr(cpu_tl._expand_kernel_impl, "__nsys_cc_original__", cpu_tl._expand_kernel_impl)


def _expand(impl, values, dtype):
    out = torch.full((6,), -7, dtype=dtype)  # what is left unwritten stays -7
    impl(out, torch.tensor(values, dtype=dtype), torch.tensor([2, 5, 6], dtype=torch.int32), 0, 9)
    return out.tolist()


def test_vllms_cpu_expand_leaves_float_outputs_unwritten():
    assert _expand(ORIGINAL, [1.5, 0.0, 2.0], torch.float32) == [-7.0] * 6
    assert _expand(ORIGINAL, [1, 0, 2], torch.int64) == [1, 1, 9, 9, 9, 2]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int32, torch.int64])
def test_fixed_expand_writes_every_dtype(dtype):
    fixed = vllm_fixes.fixed_expand(ORIGINAL)
    assert _expand(fixed, [1, 0, 2], dtype) == [1, 1, 9, 9, 9, 2]


def test_the_patch_is_installed_once_and_can_be_turned_off(monkeypatch):
    class Module:
        _expand_kernel_impl = staticmethod(ORIGINAL)

    vllm_fixes.patch_cpu_triton_utils(Module)
    first = Module._expand_kernel_impl
    assert first.__nsys_cc_original__ is ORIGINAL
    vllm_fixes.patch_cpu_triton_utils(Module)
    assert Module._expand_kernel_impl is first

    class Untouched:
        _expand_kernel_impl = staticmethod(ORIGINAL)

    monkeypatch.setenv(vllm_fixes.ENV_FIXES, "0")
    vllm_fixes.patch_cpu_triton_utils(Untouched)
    assert Untouched._expand_kernel_impl is ORIGINAL
