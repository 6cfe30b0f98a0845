"""The plugin on vLLM's GPU model runner (Model Runner V2) and its speculators, against the real vLLM 0.32 classes
the CPU build ships (`vllm.v1.worker.gpu…`): what a GPU run of vLLM takes.

The CPU build never runs V2 (it falls back to V1), so the real methods are called here with stand-ins where a GPU
would be needed: a captured graph is an object whose `replay()` is recorded, `torch.cuda.graph` / `CUDAGraph` and
vLLM's graph-capture context are no-ops, configs are namespaces holding what the methods read. Everything else —
vLLM's `run_fullgraph`, `run_pw_graph`, `capture`, `DraftModelSpeculator.load_model`, EAGLE's
`_fused_multi_step_decode`, the breakable-graph wrapper's `__call__` — is vLLM's own code, wrapped by the plugin as
in a real run. NVTX calls go to a recording backend; one child process runs every scenario (the test process's
imports and vLLM's classes stay untouched) and prints what each recorded.
"""

from __future__ import annotations

import textwrap

import pytest

from conftest import scenario_result

pytestmark = pytest.mark.vllm

SCENARIOS = textwrap.dedent('''
    import contextlib, importlib, inspect, json, types
    import torch
    from nsys_cc.vllm import plugin as p
    from nsys_cc.vllm.hooks import forwards, ranges
    from nsys_cc.vllm import nvtx_backend

    log = []
    ranges.backend = nvtx_backend.Backend("record", True, lambda n, v: log.append([n, v]), lambda: log.append("pop"))
    for name in ("vllm.v1.worker.gpu.cudagraph_utils", "vllm.v1.worker.gpu.spec_decode.speculator",
                 "vllm.v1.worker.gpu.model_runner", "vllm.v1.spec_decode.llm_base_proposer",
                 "vllm.compilation.breakable_cudagraph"):
        assert p._PATCHES[name](importlib.import_module(name)), name
    from vllm.config.compilation import CUDAGraphMode
    from vllm.v1.worker.gpu import cudagraph_utils as cg
    from vllm.v1.worker.gpu.model_runner import GPUModelRunner
    from vllm.v1.worker.gpu.spec_decode.dflash.cudagraph import DFlashCudaGraphManager
    from vllm.v1.worker.gpu.spec_decode.dflash.speculator import DFlashSpeculator
    from vllm.v1.worker.gpu.spec_decode.eagle.speculator import EagleSpeculator
    from vllm.v1.worker.gpu.spec_decode.multi_module_mtp.speculator import MultiModuleMTPSpeculator
    from vllm.v1.worker.gpu.spec_decode.standalone_ar.speculator import StandaloneARSpeculator
    from vllm.v1.worker.gpu.spec_decode.target_dependent_ar.cudagraph_utils import SpeculatorCudaGraphManager
    from vllm.v1.worker.gpu.spec_decode.target_dependent_ar.speculator import TargetDependentARSpeculator
    from vllm.v1.spec_decode.dflash import DFlashProposer
    from vllm.compilation import breakable_cudagraph as bcg

    out = {}

    class Graph:  # a captured CUDA graph: replaying it calls no module
        def __init__(self, *a, **k):
            pass
        def replay(self):
            log.append("replay")

    class Tiny(torch.nn.Module):  # stands for a loaded model
        def forward(self, input_ids=None, positions=None, **kw):
            log.append("module")
            return torch.zeros(positions.shape[0] if positions is not None else 1, 4)

    def take():
        got = list(log)
        log.clear()
        return got

    def full(n, reqs=None):
        return cg.BatchExecutionDescriptor(cg_mode=CUDAGraphMode.FULL, num_tokens=n, num_reqs=reqs or n)

    def manager(cls, graphs=None):
        m = object.__new__(cls)
        m.graphs = dict(graphs or {})
        m.use_breakable_cg = False
        return m

    def in_step(tokens, fn):
        """Inside the runner's execute_model for a step scheduling `tokens` (what the plugin's wrapper sets)."""
        sched = types.SimpleNamespace(total_num_scheduled_tokens=tokens)
        return forwards.with_scheduled_tokens(lambda self, so: fn())(None, sched)

    # --- target (ModelCudaGraphManager): full graph replay, piecewise, eager ---
    target = Tiny()
    forwards.hook_module(target, p.FORWARD_RANGE, scheduled=True)
    d = full(8)
    m = manager(cg.ModelCudaGraphManager, {d: Graph()})
    m.is_last_pp_rank, m.use_aux_hidden_state_outputs, m.hidden_states = True, False, torch.zeros(16, 4)
    in_step(5, lambda: m.run_fullgraph(d))
    out["target_full"] = take()
    in_step(5, lambda: m.run_pw_graph(target, {"input_ids": torch.zeros(8), "positions": torch.zeros(8)}))
    out["target_piecewise"] = take()
    in_step(5, lambda: target(input_ids=torch.zeros(8), positions=torch.zeros(8)))
    out["target_eager"] = take()

    # --- a draft model loaded by the real DraftModelSpeculator.load_model (stand-in config and loader) ---
    def speculator(cls):
        s = object.__new__(cls)
        s.vllm_config = types.SimpleNamespace(
            compilation_config=types.SimpleNamespace(static_forward_context={}),
            model_config=types.SimpleNamespace(supports_multimodal_inputs=False))
        s.load_draft_model = lambda target_model, names: Tiny()
        s.use_local_argmax_reduction = False
        s.use_acceptance_estimator = False
        s.speculative_config = types.SimpleNamespace(draft_sample_method="greedy")
        return s

    eagle = speculator(EagleSpeculator)
    eagle.load_model(target)
    out["draft_tag"] = getattr(eagle.model, forwards.MODULE_TAG, None)
    out["capture_silenced"] = [c.__name__ for c in (TargetDependentARSpeculator,)
                               if hasattr(vars(c)["capture"], ranges.ORIGINAL)]
    eagle.model(input_ids=torch.zeros(3), positions=torch.zeros(3))
    out["draft_eager"] = take()

    # --- capture (real CudaGraphManager.capture, GPU parts stood in) counts the forwards each graph runs ---
    torch.cuda.CUDAGraph = Graph
    torch.cuda.graph = lambda graph, pool=None, stream=None: contextlib.nullcontext()
    cg.graph_capture = lambda device=None: contextlib.nullcontext()
    cg.capture_pool = lambda pool, config: contextlib.nullcontext(pool)
    cg.is_global_first_rank = lambda: False
    cg.current_stream = lambda: None

    def captured(cls, descs, forwards):
        mgr = manager(cls)
        mgr._capture_descs = {CUDAGraphMode.FULL: list(descs)}
        mgr._max_full_descs_to_capture = mgr._capture_mem_samples = mgr.ubatch_runner = None
        mgr.pool = mgr.vllm_config = mgr.device = None

        def create_forward_fn(desc, warmup):
            def forward_fn(cg_mode):  # like EAGLE's _generate_fused_drafts: several draft forwards in one graph
                for _ in range(forwards):
                    eagle.model(input_ids=torch.zeros(desc.num_tokens), positions=torch.zeros(desc.num_tokens))
            return forward_fn

        # As in a real run: the runner's capture_model is silenced, and the speculator's manager calls the base's
        # capture (SpeculatorCudaGraphManager.capture → super().capture(create_forward_fn, …)).
        ranges.call_quietly(True, cg.CudaGraphManager.capture, (mgr, create_forward_fn, "capturing"), {})
        return mgr

    gamma = 3
    decode = full(4)
    fused = captured(SpeculatorCudaGraphManager, [decode], gamma - 1)
    out["capture_ranges"] = [e for e in take() if e != "module"]
    out["captured_forwards"] = fused.__dict__.get(forwards.GRAPH_FORWARDS, {}).get(decode)

    # --- EAGLE's real fused multi-step decode replaying its full graph: one draft range for γ − 1 forwards ---
    eagle.decode_cudagraph_manager = fused
    eagle.attn_groups = []
    eagle.input_buffers = types.SimpleNamespace(positions=torch.zeros(8), query_start_loc=torch.zeros(9))
    eagle.idx_mapping = torch.zeros(8)
    in_step(4 * (gamma + 1), lambda: eagle._fused_multi_step_decode(4, False, decode, None, None, gamma))
    out["eagle_fused"] = take()

    # --- the managers of MTP (SpeculatorCudaGraphManager) and DFlash replay through the base run_fullgraph ---
    mtp = captured(SpeculatorCudaGraphManager, [full(8, 2)], gamma)  # multi-module MTP: γ modules in one graph
    take()
    in_step(8, lambda: mtp.run_fullgraph(full(8, 2)))
    out["mtp_full"] = take()
    dflash = manager(DFlashCudaGraphManager, {full(16, 4): Graph()})
    in_step(16, lambda: dflash.run_fullgraph(full(16, 4)))
    out["dflash_full"] = take()
    out["managers"] = {c.__name__: [issubclass(c, cg.CudaGraphManager), issubclass(c, cg.ModelCudaGraphManager),
                                    "run_fullgraph" in vars(c)]
                       for c in (SpeculatorCudaGraphManager, DFlashCudaGraphManager)}
    out["full_graph_calls"] = {
        f"{c.__name__}.{f}": ".run_fullgraph(" in inspect.getsource(getattr(c, f))
        for c, f in ((TargetDependentARSpeculator, "propose"), (TargetDependentARSpeculator, "_multi_step_decode"),
                     (TargetDependentARSpeculator, "_fused_multi_step_decode"), (MultiModuleMTPSpeculator, "propose"),
                     (DFlashSpeculator, "propose"))}

    # --- a draft's piecewise graph: compiled (calls the module) and breakable (replays without it) ---
    pw = manager(SpeculatorCudaGraphManager)
    in_step(4, lambda: pw.run_pw_graph(eagle.model, {"input_ids": torch.zeros(4), "positions": torch.zeros(4)}))
    out["draft_piecewise"] = take()
    pw.use_breakable_cg = True
    pw.breakable_cg_runner = lambda **kw: log.append("replay")
    in_step(4, lambda: pw.run_pw_graph(eagle.model, {"input_ids": torch.zeros(4), "positions": torch.zeros(4)}))
    out["draft_breakable"] = take()

    # --- a V1 draft replayed by vLLM's BreakableCUDAGraphWrapper (its real __call__; the replay stood in) ---
    wrapper = object.__new__(bcg.BreakableCUDAGraphWrapper)
    wrapper.runnable, wrapper.runtime_mode = eagle.model, None
    wrapper.entries = {"b": types.SimpleNamespace(capture=object())}
    wrapper._replay = lambda entry, args, kwargs: log.append("replay")
    bcg.is_forward_context_available = lambda: True
    bcg.get_forward_context = lambda: types.SimpleNamespace(batch_descriptor="b",
                                                            cudagraph_runtime_mode=CUDAGraphMode.PIECEWISE)
    wrapper(input_ids=torch.zeros(2), positions=torch.zeros(2))
    out["v1_breakable"] = take()

    # --- V1: a proposer subclass that overrides dummy_run (DFlash) has it silenced once a model is loaded ---
    load = forwards.hooking_loaded_model(p.DRAFT_FORWARD_RANGE, scheduled=False, quiet=("dummy_run",))(
        lambda self, target_model: setattr(self, "model", Tiny()))
    load(object.__new__(DFlashProposer), target)
    out["v1_dflash_dummy_silenced"] = hasattr(vars(DFlashProposer)["dummy_run"], ranges.ORIGINAL)

    # --- the V2 runner's own dummy, profile and capture forwards are silenced ---
    out["runner_silenced"] = {f: hasattr(vars(GPUModelRunner)[f], ranges.ORIGINAL)
                              for f in ("_dummy_run", "profile_run", "capture_model")}
    print("RESULT " + json.dumps(out))
''')

FWD, DRAFT = "model_executable()", "draft_model_executable()"


@pytest.fixture(scope="module")
def recorded():
    return scenario_result(SCENARIOS)


def test_target_forwards_get_one_range_in_every_execution_mode(recorded):
    # Payload: the step's scheduled tokens (5), not the graph's padded batch (8).
    assert recorded["target_full"] == [[FWD, 5], "replay", "pop"]
    assert recorded["target_piecewise"] == [[FWD, 5], "module", "pop"]
    assert recorded["target_eager"] == [[FWD, 5], "module", "pop"]


def test_a_draft_model_loaded_by_the_real_speculator_is_hooked_as_a_draft(recorded):
    assert recorded["draft_tag"] == DRAFT
    assert recorded["draft_eager"] == [[DRAFT, 3], "module", "pop"]
    assert recorded["capture_silenced"] == ["TargetDependentARSpeculator"]


def test_capture_records_no_range_and_counts_the_graphs_forwards(recorded):
    assert recorded["capture_ranges"] == []
    assert recorded["captured_forwards"] == 2  # γ − 1 = 2 draft forwards in EAGLE's fused decode graph


def test_speculators_full_graph_replays_are_draft_ranges(recorded):
    # EAGLE's fused multi-step decode: one replay, one range, payload 4 requests × 2 forwards.
    assert recorded["eagle_fused"] == [[DRAFT, 8], "replay", "pop"]
    assert recorded["mtp_full"] == [[DRAFT, 8 * 3], "replay", "pop"]  # multi-module MTP graph: γ = 3 forwards
    assert recorded["dflash_full"] == [[DRAFT, 16], "replay", "pop"]  # not captured here: one forward assumed


def test_speculators_graph_managers_replay_through_the_wrapped_base_method(recorded):
    """The layout the draft ranges rely on: the speculators' managers are CudaGraphManagers that are not the
    target's, do not override run_fullgraph, and the speculators replay full graphs through it."""
    assert recorded["managers"] == {"SpeculatorCudaGraphManager": [True, False, False],
                                    "DFlashCudaGraphManager": [True, False, False]}
    assert all(recorded["full_graph_calls"].values()), recorded["full_graph_calls"]


def test_draft_piecewise_graphs_are_draft_ranges(recorded):
    assert recorded["draft_piecewise"] == [[DRAFT, 4], "module", "pop"]
    assert recorded["draft_breakable"] == [[DRAFT, 4], "replay", "pop"]
    assert recorded["v1_breakable"] == [[DRAFT, 2], "replay", "pop"]


def test_vllms_own_dummy_forwards_are_silenced(recorded):
    assert recorded["v1_dflash_dummy_silenced"] is True
    assert recorded["runner_silenced"] == {"_dummy_run": True, "profile_run": True, "capture_model": True}
