"""vLLM general plugin: NVTX ranges around every model forward, its logits and sampling, every engine step and every
benchmark iteration, with no vLLM edits (docs/plugin.md lists every range and every hook, by vLLM runner).

vLLM calls `register()` in every process (the `vllm.general_plugins` entry point, `nsys_cc.vllm.plugin:register`); it
does nothing unless `NSYS_CC_PLUGIN=1` (NVTX ranges) or `NSYS_CC_LIVE=1` (live c, `nsys_cc.live`), so installing
nsys_cc changes no other vLLM run. It is re-entrant: a second call, or a second process-level load, patches nothing
twice; nsys_cc's benchmark drivers call it too, so a `VLLM_PLUGINS` allow-list that omits `nsys_cc` does not switch
it off there. Registering imports nothing of vLLM: each vLLM module of `_PATCHES` is patched when vLLM imports it.

`_PATCHES` is the spine: vLLM module → the function that puts the wrappers of `nsys_cc.vllm.hooks` on its classes
(`forwards`, `sampling`, `drafts`, `steps`, `live`). A module not laid out as expected (another vLLM version) gets a
warning, once, and vLLM's own NVTX scopes are switched on instead (`VLLM_NVTX_SCOPES_FOR_PROFILING=1`: analyse with
`range_name="gpu_model_runner: forward"`). One correction, not a range: vLLM's CPU build's rejection-sampler kernel
(`nsys_cc.vllm.fixes`).
"""

from __future__ import annotations

import importlib.abc
import os
import sys
from collections.abc import Callable
from typing import Any

from .. import live as _live
from ..contract import (  # the names this plugin reads, spelled once for the plugin and the analysis
    DRAFT_FORWARD_RANGE,
    ENV_PLUGIN,
    FORWARD_RANGE,
    SCOPES_FORWARD,
    VLLM_SCOPES_ENV,
)
from . import nvtx_backend
from .hooks import drafts, forwards, live, ranges, sampling, steps
from .hooks.ranges import silenced, silenced_if_dummy, wrap

_registered = False
_warned = False


def enabled() -> bool:
    """Whether the environment asks for the plugin (`NSYS_CC_PLUGIN` set and not "0")."""
    return os.environ.get(ENV_PLUGIN, "") not in ("", "0")


def register() -> None:
    """vLLM's plugin hook: when enabled, patch vLLM's runners now or as soon as vLLM imports them."""
    global _registered
    if _registered or not (enabled() or _live.enabled()):
        return
    _registered = True
    if enabled():
        ranges.backend = nvtx_backend.choose()
        if ranges.backend.name == "none":
            _warn("no NVTX binding (pip install nvtx==0.2.11): no ranges will be recorded")
    if _live.enabled():
        # Live timing (nsys_cc.live) rides on the same hooks; NVTX stays off unless NSYS_CC_PLUGIN asks for it.
        ranges.live_on = True
        _PATCHES.update(live.patches(_live.PATCHES))
    for name in list(_PATCHES):
        if name in sys.modules:
            _apply(name, sys.modules[name])
    if not any(isinstance(f, _PatchOnImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _PatchOnImport())


# ---- what is patched where: one function per vLLM module, then the table ------------------------------------------


def _patch_v1_runner(module: Any) -> bool:
    cls = getattr(module, "GPUModelRunner", None)
    if cls is None or not hasattr(cls, "_model_forward"):
        return False
    if ranges.live_on:
        wrap(cls, "sample_tokens", live.attaching_live_records)
    # vLLM's own forwards outside the scheduled steps (memory profiling, CUDA-graph capture, DP padding runs), and
    # the sampler's warm-up after them (`_dummy_sampler_run`, called by the worker on its own).
    for attr in ("_dummy_run", "profile_run", "capture_model", "_dummy_sampler_run"):
        wrap(cls, attr, silenced)
    # The sample range (V1 samples in `_sample`; its logits come from the model's compute_logits,
    # `sampling.hook_logits`); optional: a runner laid out otherwise loses the sample range only.
    wrap(cls, "_sample", sampling.as_v1_sample)
    return (wrap(cls, "execute_model", forwards.with_scheduled_tokens)
            and wrap(cls, "_model_forward", forwards.as_target_forward))


def _patch_v2_runner(module: Any) -> bool:
    cls = getattr(module, "GPUModelRunner", None)
    if cls is None:
        return False
    ok = wrap(cls, "execute_model", forwards.with_scheduled_tokens)
    if ranges.live_on:
        wrap(cls, "sample_tokens", live.attaching_live_records)
    ok = wrap(cls, "load_model", forwards.hooking_loaded_model(FORWARD_RANGE, scheduled=True)) and ok
    wrap(cls, "sample", sampling.as_v2_sample)  # optional: a runner laid out otherwise loses the sample range only
    for attr in ("_dummy_run", "profile_run", "capture_model", "_dummy_sampler_run"):
        wrap(cls, attr, silenced)
    return ok


def _patch_v2_cudagraphs(module: Any) -> bool:
    base = getattr(module, "CudaGraphManager", None)
    model = getattr(module, "ModelCudaGraphManager", None)
    if base is None or model is None:
        return False
    wrap(base, "capture", forwards.counting_capture)
    # The base's run_fullgraph replays the speculators' graphs (EAGLE, MTP, DFlash, fused multi-step drafts); the
    # target's manager overrides it (and calls it: nested, one range).
    return (wrap(base, "run_pw_graph", forwards.as_pw_graph)
            and wrap(base, "run_fullgraph", forwards.as_fullgraph(model))
            and wrap(model, "run_fullgraph", forwards.as_fullgraph(model)))


def _patch_v1_drafter(module: Any) -> bool:
    cls = getattr(module, "SpecDecodeBaseProposer", None)
    if cls is None:
        return False
    wrap(cls, "dummy_run", silenced)
    for attr in drafts.V1_SAMPLING:
        wrap(cls, attr, drafts.draft_sampling)
    return wrap(cls, "load_model", forwards.hooking_loaded_model(
        DRAFT_FORWARD_RANGE, scheduled=False, quiet=("dummy_run",),
        also=tuple((a, drafts.draft_sampling) for a in drafts.V1_SAMPLING), model_logits=True))


def _patch_v1_medusa(module: Any) -> bool:
    """Optional: V1's Medusa proposer is no SpecDecodeBaseProposer (always True: a vLLM without it loses nothing)."""
    cls = getattr(module, "MedusaProposer", None)
    if cls is not None:
        wrap(cls, "dummy_run", silenced)
        wrap(cls, "load_model", forwards.hooking_loaded_model(DRAFT_FORWARD_RANGE, scheduled=False, model_logits=True))
    return True


def _patch_graph_wrapper(module: Any) -> bool:
    """Optional: a V1 draft replayed through vLLM's breakable CUDA graphs (always True)."""
    cls = getattr(module, "BreakableCUDAGraphWrapper", None)
    if cls is not None:
        wrap(cls, "__call__", forwards.as_graph_wrapper_call)
    return True


def _patch_v2_drafter(module: Any) -> bool:
    cls = getattr(module, "DraftModelSpeculator", None)
    if cls is None:
        return False
    wrap(cls, "capture", silenced)
    wrap(cls, "propose", silenced_if_dummy)
    for attr, maker in drafts.V2_TOKEN:
        wrap(cls, attr, maker)
    # Speculators override capture and propose: the loaded instance's own ones are silenced too (dummy proposals);
    # their own logits and sampling methods (multi-module MTP's per-module logits) are wrapped as the base's.
    return wrap(cls, "load_model", forwards.hooking_loaded_model(DRAFT_FORWARD_RANGE, scheduled=False,
                                                          quiet=("capture",), also=drafts.V2_TOKEN))


def _patching_proposer(module_class: str) -> Callable[[Any], bool]:
    """Optional: a model-free proposer's `propose` gets PROPOSE_RANGE (always True: a vLLM without the class loses
    only these ranges)."""

    def patch(module: Any) -> bool:
        cls = getattr(module, module_class, None)
        if cls is not None:
            wrap(cls, "propose", drafts.as_proposing)
        return True

    return patch


def _patch_cpu_communicator(module: Any) -> bool:
    """Optional: a vLLM laid out otherwise loses only the all-reduce ranges, never the forwards (always True)."""
    cls = getattr(module, "CpuCommunicator", None)
    if cls is not None:
        wrap(cls, "all_reduce", forwards.as_all_reduce)
    return True


def _patch_llm(module: Any) -> bool:
    cls = getattr(module, "LLM", None)
    return cls is not None and wrap(cls, "generate", steps.as_iteration)


def _patch_llm_engine(module: Any) -> bool:
    cls = getattr(module, "LLMEngine", None)
    return cls is not None and wrap(cls, "step", steps.as_step(steps.inproc_core))


def _patch_engine_core(module: Any) -> bool:
    cls = getattr(module, "EngineCoreProc", None)
    return cls is not None and wrap(cls, "_process_engine_step", steps.as_step(lambda core: core))


def _patch_core_client(module: Any) -> bool:
    cls = getattr(module, "InprocClient", None)
    return cls is not None and wrap(cls, "get_output",
                                    steps.as_step(lambda client: getattr(client, "engine_core", None)))


def _patch_cpu_kernels(module: Any) -> bool:
    from . import fixes as vllm_fixes

    return vllm_fixes.patch_cpu_triton_utils(module)


_PATCHES: dict[str, Callable[[Any], bool]] = {
    "vllm.v1.worker.gpu_model_runner": _patch_v1_runner,
    "vllm.v1.worker.gpu.model_runner": _patch_v2_runner,
    "vllm.v1.worker.gpu.cudagraph_utils": _patch_v2_cudagraphs,
    "vllm.v1.spec_decode.llm_base_proposer": _patch_v1_drafter,
    "vllm.v1.spec_decode.medusa": _patch_v1_medusa,
    "vllm.compilation.breakable_cudagraph": _patch_graph_wrapper,
    "vllm.v1.worker.gpu.spec_decode.speculator": _patch_v2_drafter,
    "vllm.v1.spec_decode.ngram_proposer": _patching_proposer("NgramProposer"),
    "vllm.v1.spec_decode.ngram_proposer_gpu": _patching_proposer("NgramProposerGPU"),
    "vllm.v1.spec_decode.suffix_decoding": _patching_proposer("SuffixDecodingProposer"),
    "vllm.v1.worker.gpu.spec_decode.ngram.speculator": _patching_proposer("NgramGPUSpeculator"),
    "vllm.entrypoints.llm": _patch_llm,
    "vllm.distributed.device_communicators.cpu_communicator": _patch_cpu_communicator,
    "vllm.v1.engine.llm_engine": _patch_llm_engine,
    "vllm.v1.engine.core": _patch_engine_core,
    "vllm.v1.engine.core_client": _patch_core_client,
    "vllm.utils.cpu_triton_utils": _patch_cpu_kernels,
}


def _apply(name: str, module: Any) -> None:
    if name in _live.PATCHES:
        if not _PATCHES[name](module):
            _warn(f"vLLM's {name} is not laid out as nsys_cc expects (another vLLM version?): no live metrics")
        return
    if not _PATCHES[name](module):
        _warn(
            f"vLLM's {name} is not laid out as nsys_cc expects (another vLLM version?): "
            f"falling back to vLLM's own NVTX scopes (analyse with range_name='{SCOPES_FORWARD}')"
        )
        os.environ[VLLM_SCOPES_ENV] = "1"


def _warn(message: str) -> None:
    global _warned
    if not _warned:
        _warned = True
        print(f"[nsys-cc] warning: {message}", file=sys.stderr, flush=True)


class _PatchOnImport(importlib.abc.MetaPathFinder):
    """Patches a vLLM module right after it is first executed, so registering imports nothing of vLLM."""

    def find_spec(self, fullname, path, target=None):
        if fullname not in _PATCHES:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                break
        else:
            return None
        if spec.loader is None:
            return spec
        exec_module = spec.loader.exec_module

        def exec_and_patch(module):
            exec_module(module)
            _apply(fullname, module)

        spec.loader.exec_module = exec_and_patch  # type: ignore[method-assign]
        return spec
