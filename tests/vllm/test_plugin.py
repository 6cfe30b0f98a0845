"""The vLLM plugin's wrapping logic, on small fakes of vLLM's runner classes (no vLLM needed).

A recording NVTX backend stands in for nvtx: every push/pop is appended to a list, so each test states the
exact ranges a runner call must produce.
"""

from __future__ import annotations

import functools
import importlib
import sys
import types

import pytest

from conftest import LazyModule
from nsys_cc.vllm import plugin
from nsys_cc.vllm.hooks import forwards, ranges, steps

torch = LazyModule("torch")  # imported by the first test that uses it: not by every worker that collects this

FWD, DRAFT = plugin.FORWARD_RANGE, plugin.DRAFT_FORWARD_RANGE


class Sched:
    def __init__(self, tokens):
        self.total_num_scheduled_tokens = tokens


def _module(**classes):
    return types.SimpleNamespace(**classes)


def _v1_runner_class():
    class GPUModelRunner:
        def execute_model(self, scheduler_output, intermediate_tensors=None):
            # positions are padded (8) while 5 tokens are scheduled: the payload must be 5.
            return self._model_forward(input_ids=torch.zeros(8), positions=torch.zeros(8))

        def _model_forward(self, input_ids=None, positions=None, **kw):
            return "out"

        def _dummy_run(self, n):
            return self._model_forward(positions=torch.zeros(n))

    return GPUModelRunner


@pytest.mark.slow
def test_v1_forward_range_carries_scheduled_tokens(events):
    cls = _v1_runner_class()
    assert plugin._patch_v1_runner(_module(GPUModelRunner=cls))
    assert cls().execute_model(Sched(5)) == "out"
    assert events == [(FWD, 5), "pop"]


@pytest.mark.slow
def test_v1_forward_without_scheduler_output_counts_its_input(events):
    cls = _v1_runner_class()
    plugin._patch_v1_runner(_module(GPUModelRunner=cls))
    cls()._model_forward(positions=torch.zeros(3, 7))  # M-RoPE positions: 3 × tokens
    assert events == [(FWD, 7), "pop"]


@pytest.mark.slow
def test_patching_twice_wraps_once(events):
    cls = _v1_runner_class()
    mod = _module(GPUModelRunner=cls)
    plugin._patch_v1_runner(mod)
    first = cls._model_forward
    plugin._patch_v1_runner(mod)
    assert cls._model_forward is first
    cls().execute_model(Sched(4))
    assert events == [(FWD, 4), "pop"]


@pytest.mark.slow
def test_forward_range_pops_when_the_forward_raises(events):
    class GPUModelRunner:
        def execute_model(self, scheduler_output):
            return self._model_forward(positions=torch.zeros(2))

        def _model_forward(self, **kw):
            raise RuntimeError("boom")

    plugin._patch_v1_runner(_module(GPUModelRunner=GPUModelRunner))
    with pytest.raises(RuntimeError):
        GPUModelRunner().execute_model(Sched(2))
    assert events == [(FWD, 2), "pop"]
    assert ranges.state.depth == 0


@functools.cache
def _tiny_model_class():
    class TinyModel(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.calls = 0

        def forward(self, input_ids=None, positions=None):
            self.calls += 1
            return positions

    return TinyModel


def TinyModel():  # noqa: N802 — the fake model, made in a test (torch is imported there, not at collection)
    return _tiny_model_class()()


def _v2_classes():
    class CudaGraphManager:
        def run_pw_graph(self, model, model_inputs):
            return model(**model_inputs)  # compiled piecewise graphs still call the module

        def run_fullgraph(self, desc):
            return "replayed"

        def capture(self, create_forward_fn, progress_bar_desc="capturing"):
            return None

    class ModelCudaGraphManager(CudaGraphManager):
        def run_fullgraph(self, desc):
            return super().run_fullgraph(desc)

    class GPUModelRunner:
        def __init__(self):
            self.cudagraph_manager = ModelCudaGraphManager()

        def load_model(self):
            self.model = TinyModel()

        def execute_model(self, scheduler_output, dummy_run=False, mode="eager"):
            inputs = {"input_ids": torch.zeros(16), "positions": torch.zeros(16)}
            if mode == "full":
                return self.cudagraph_manager.run_fullgraph(types.SimpleNamespace(num_tokens=16))
            if mode == "piecewise":
                return self.cudagraph_manager.run_pw_graph(self.model, inputs)
            return self.model(**inputs)

        def _dummy_run(self, n):
            return self.execute_model(Sched(n), dummy_run=True)

        def capture_model(self):
            return self.cudagraph_manager.run_pw_graph(self.model, {"positions": torch.zeros(4)})

        def profile_run(self):
            return self.model(positions=torch.zeros(4))

    assert plugin._patch_v2_runner(_module(GPUModelRunner=GPUModelRunner))
    assert plugin._patch_v2_cudagraphs(_module(CudaGraphManager=CudaGraphManager,
                                               ModelCudaGraphManager=ModelCudaGraphManager))
    return GPUModelRunner


@pytest.mark.parametrize("mode", ["eager", "piecewise", "full"])
def test_v2_every_execution_mode_gives_one_range(events, mode):
    runner = _v2_classes()()
    runner.load_model()
    runner.execute_model(Sched(3), mode=mode)
    assert events == [(FWD, 3), "pop"]


def test_v2_dummy_profile_and_capture_forwards_get_no_range(events):
    runner = _v2_classes()()
    runner.load_model()
    runner._dummy_run(8)
    runner.capture_model()
    runner.profile_run()
    assert runner.model.calls == 3
    assert events == []
    runner.execute_model(Sched(1))
    assert events == [(FWD, 1), "pop"]


def test_v2_hooks_are_installed_once_per_model(events):
    runner = _v2_classes()()
    runner.load_model()
    assert forwards.hook_module(runner.model, FWD, scheduled=True)
    runner.execute_model(Sched(2))
    assert events == [(FWD, 2), "pop"]


def test_a_graph_wrapper_that_is_not_a_module_is_left_alone():
    assert not forwards.hook_module(object(), FWD, scheduled=True)


def test_v1_draft_forwards_are_named_apart_and_count_their_input(events):
    class SpecDecodeBaseProposer:
        def load_model(self, target_model):
            self.model = TinyModel()

        def propose(self, k):
            for _ in range(k):
                self.model(input_ids=torch.zeros(2), positions=torch.zeros(2))

        def dummy_run(self, n):
            self.model(positions=torch.zeros(n))

    cls = _v1_runner_class()
    plugin._patch_v1_runner(_module(GPUModelRunner=cls))
    assert plugin._patch_v1_drafter(_module(SpecDecodeBaseProposer=SpecDecodeBaseProposer))
    drafter = SpecDecodeBaseProposer()
    drafter.load_model(None)
    drafter.dummy_run(8)
    assert events == []
    cls().execute_model(Sched(6))
    drafter.propose(3)
    assert events == [(FWD, 6), "pop"] + [(DRAFT, 2), "pop"] * 3


def test_v2_draft_speculator(events):
    class DraftModelSpeculator:
        def load_model(self, target_model):
            self.model = TinyModel()

        def propose(self, n, dummy_run=False):
            self.model(positions=torch.zeros(n))

        def capture(self):
            self.model(positions=torch.zeros(1))

    assert plugin._patch_v2_drafter(_module(DraftModelSpeculator=DraftModelSpeculator))
    spec = DraftModelSpeculator()
    spec.load_model(None)
    spec.capture()
    spec.propose(4, dummy_run=True)
    spec.propose(3)
    assert events == [(DRAFT, 3), "pop"]


def test_generate_calls_are_marked_warmup_then_iteration(events, monkeypatch):
    monkeypatch.setenv(steps.ENV_WARMUP_ITERS, "2")

    class LLM:
        def generate(self, prompts, sampling_params=None, use_tqdm=True):
            return len(prompts) if isinstance(prompts, list) else 1

    assert plugin._patch_llm(_module(LLM=LLM))
    llm = LLM()
    for batch in (3, 3, 3):
        llm.generate([{"prompt_token_ids": [1]}] * batch)
    llm.generate(prompts={"prompt_token_ids": [1]})
    warm, it = steps.WARMUP_RANGE, steps.ITERATION_RANGE
    assert events == [(warm, 3), "pop", (warm, 3), "pop", (it, 3), "pop", (it, 1), "pop"]


@pytest.mark.parametrize("value, expected", [(None, 0), ("4", 4), ("-1", 0), ("x", 0)])
def test_warmup_iterations_from_the_environment(monkeypatch, value, expected):
    if value is None:
        monkeypatch.delenv(steps.ENV_WARMUP_ITERS, raising=False)
    else:
        monkeypatch.setenv(steps.ENV_WARMUP_ITERS, value)
    assert steps.warmup_iterations() == expected


@pytest.mark.parametrize("value", ["-1", "x", "2\nnsys-cc: error: forged"])
def test_a_warmup_count_that_is_no_count_is_said(monkeypatch, capsys, value):
    """`NSYS_CC_WARMUP_ITERS=x` (a user's own vLLM run with the plugin) marked no warm-up without a word."""
    monkeypatch.setenv(steps.ENV_WARMUP_ITERS, value)
    monkeypatch.setattr(steps, "_warned", set())
    assert steps.warmup_iterations() == 0 and steps.warmup_iterations() == 0
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("[nsys-cc] warning: NSYS_CC_WARMUP_ITERS=") and "no generate call" in line


def test_unknown_layout_warns_once_and_turns_on_vllms_scopes(monkeypatch, capsys):
    monkeypatch.setattr(plugin, "_warned", False)
    monkeypatch.delenv("VLLM_NVTX_SCOPES_FOR_PROFILING", raising=False)

    class GPUModelRunner:  # a future runner without _model_forward
        def execute_model(self, scheduler_output):
            return None

    plugin._apply("vllm.v1.worker.gpu_model_runner", _module(GPUModelRunner=GPUModelRunner))
    plugin._apply("vllm.v1.worker.gpu.model_runner", _module())
    err = capsys.readouterr().err
    assert err.count("warning") == 1 and "gpu_model_runner: forward" in err
    import os

    assert os.environ["VLLM_NVTX_SCOPES_FOR_PROFILING"] == "1"


def test_register_does_nothing_unless_enabled(monkeypatch):
    monkeypatch.delenv(plugin.ENV_PLUGIN, raising=False)
    monkeypatch.setattr(plugin, "_registered", False)
    before = list(sys.meta_path)
    plugin.register()
    assert sys.meta_path == before and not plugin._registered
    monkeypatch.setenv(plugin.ENV_PLUGIN, "0")
    plugin.register()
    assert sys.meta_path == before and not plugin._registered


def test_register_patches_modules_when_they_are_imported(monkeypatch, tmp_path, events):
    """The import hook patches a module right after it runs; registering twice installs one hook."""
    pkg = tmp_path / "fakevllm_nsyscc"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "runner.py").write_text(
        "class GPUModelRunner:\n"
        "    def execute_model(self, scheduler_output):\n"
        "        return self._model_forward(positions=[0])\n"
        "    def _model_forward(self, **kw):\n"
        "        return 'ran'\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(plugin._PATCHES, "fakevllm_nsyscc.runner", plugin._patch_v1_runner)
    monkeypatch.setenv(plugin.ENV_PLUGIN, "1")
    monkeypatch.setattr(plugin, "_registered", False)
    monkeypatch.setattr(sys, "meta_path", list(sys.meta_path))
    monkeypatch.setattr(plugin.nvtx_backend, "choose", lambda: ranges.backend)
    plugin.register()
    plugin._registered = False
    plugin.register()
    assert sum(isinstance(f, plugin._PatchOnImport) for f in sys.meta_path) == 1
    monkeypatch.delitem(sys.modules, "fakevllm_nsyscc.runner", raising=False)
    runner = importlib.import_module("fakevllm_nsyscc.runner")
    assert runner.GPUModelRunner().execute_model(Sched(9)) == "ran"
    assert events == [(FWD, 9), "pop"]
    sys.modules.pop("fakevllm_nsyscc.runner", None)
    sys.modules.pop("fakevllm_nsyscc", None)
