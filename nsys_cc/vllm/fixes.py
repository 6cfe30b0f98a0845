"""A correction to vLLM 0.32's CPU build that speculative decoding with sampling needs (applied by the plugin).

vLLM's CPU platform replaces the Triton kernel `expand_kernel` of `vllm.v1.sample.rejection_sampler` (which
repeats a per-request value once per draft token) by `vllm.utils.cpu_triton_utils._expand_kernel_impl`, a C++ op
that takes int64 tensors: it converts the output to int64 first, so for any other dtype it writes into a temporary
copy and the real output (allocated with `new_empty`) stays uninitialised. The rejection sampler expands the
requests' float32 temperatures this way, so at temperature > 0 every draft position is judged with a garbage
temperature (NaN probabilities were observed): acceptance far below what the models give, and recovered tokens the
target would never sample. Greedy requests never expand and are unaffected, which is why it goes unnoticed.

`fixed_expand(original)` returns an implementation that keeps the C++ op for int64 outputs and expands other
dtypes with torch, writing into the output itself. It is installed only where the CPU module exists and only over
its own `_expand_kernel_impl` (the platform registers the kernels after the module is imported, so it picks up the
fixed one): by the plugin when vLLM imports the module, and by `install()` in nsys_cc's benchmark driver. Set
`NSYS_CC_VLLM_FIXES=0` to run vLLM unchanged.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from ..contract import ENV_VLLM_FIXES


def enabled() -> bool:
    return os.environ.get(ENV_VLLM_FIXES, "1") != "0"


def fixed_expand(original: Callable) -> Callable:
    """`_expand_kernel_impl` that also fills outputs that are not int64 (see the module docstring)."""

    def expand(output, input_val, cu_num_tokens, replace_from, replace_to, MAX_NUM_TOKENS=None):
        import torch

        if output.dtype == torch.int64:
            return original(output, input_val, cu_num_tokens, replace_from, replace_to, MAX_NUM_TOKENS)
        ends = cu_num_tokens.to(torch.int64)
        counts = torch.diff(ends, prepend=ends.new_zeros(1))
        values = torch.where(input_val == replace_from, torch.full_like(input_val, replace_to), input_val)
        expanded = values.repeat_interleave(counts)
        output[: expanded.numel()] = expanded.to(output.dtype)
        return None

    setattr(expand, "__nsys_cc_original__", original)  # noqa: B010 (a function attribute mypy does not know)
    return expand


def install() -> None:
    """Correct vLLM's CPU module now, when it exists (the benchmark driver calls this before vLLM builds an engine)."""
    import importlib

    try:
        module = importlib.import_module("vllm.utils.cpu_triton_utils")
    except ImportError:
        return
    patch_cpu_triton_utils(module)


def patch_cpu_triton_utils(module: Any) -> bool:
    """Install `fixed_expand` over the CPU module's `_expand_kernel_impl`, once."""
    original = getattr(module, "_expand_kernel_impl", None)
    if original is None:
        return True  # another layout: nothing to correct here
    if enabled() and getattr(original, "__nsys_cc_original__", None) is None:
        module._expand_kernel_impl = fixed_expand(original)
    return True
