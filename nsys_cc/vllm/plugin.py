"""vLLM general plugin: NVTX ranges around every model forward, its logits and sampling, and every benchmark iteration
(no vLLM edits).

Activation: vLLM calls `register()` in every process through the `vllm.general_plugins` entry point; it does
nothing unless `NSYS_CC_PLUGIN=1`, so installing nsys_cc changes no other vLLM run. `register()` is
re-entrant: a second call, or a second process-level load, patches nothing twice. nsys_cc's benchmark driver
also calls it directly, so a `VLLM_PLUGINS` allow-list that omits `nsys_cc` does not switch it off there.

Ranges (NVTX push/pop, default domain; binding chosen by `nvtx_backend`, the `nvtx` package when importable):

- `model_executable()` around each forward of the target model. Payload = tokens scheduled in that forward,
  summed over requests (`scheduler_output.total_num_scheduled_tokens`; the input's token count when the
  runner gives no scheduler output). With `--input-len L --batch-size B`: L×B for prefill, B for decode.
- `draft_model_executable()` around each forward of a draft model when a speculative config is used
  (a different name, so target and draft forwards of one run are never mixed). Payload = tokens in that
  forward's input (it can include CUDA-graph padding). A draft CUDA graph replayed whole is one range however many
  forwards it holds (a fused multi-step draft graph holds γ − 1, a multi-module MTP graph γ): its payload is then
  the tokens of all of them (the graph's padded batch × the forwards counted when it was captured).
- `nsys_cc:logits` and `nsys_cc:sample` after each target forward, on its thread (issue 29: a token costs its
  forward, its logits and its sampling): the logits are the target model's `compute_logits` (the LM head and vLLM's
  LogitsProcessor; `compute_logits_local` under V2's batch-sharded sampling), wrapped on the runner's model instance
  (found in `execute_model`, under vLLM's CUDA-graph wrapper), so a draft of the same class keeps its own; the
  sampling is the sampler with its logits processors (penalties, temperature, top-k/p, min-p, the draw, logprobs), or
  the rejection sampler in a speculative step. Payload of both = rows: positions whose logits are computed and
  sampled — a decode forward's requests, a verify forward's (γ + 1) per request (then the forward's own payload), a
  prefill's one per request. The analysis ties each to the target forward that ended last before it on its thread
  (no other forward in between). vLLM computes the logits in `execute_model` and samples in `sample_tokens` (V1),
  or both in `GPUModelRunner.sample` (V2); prompt logprobs, when asked for, compute logits again: another
  `nsys_cc:logits` range of the same forward.
- `nsys_cc:step` around each engine step, on the thread that runs it: from the moment the scheduler has
  scheduled the step to the end of the step (target forward, sampling, rejection, proposing with its draft
  forwards, the engine's output processing when the engine runs in-process). Payload = tokens scheduled for the
  target in the step, summed over requests (`total_num_scheduled_tokens`). The range opens when scheduling
  returns, because an NVTX payload is fixed when the range opens; scheduling itself (about 0.07 ms of an 11 ms
  speculative step on the CPU build) is therefore left out. A step that schedules nothing (vLLM then runs no
  model: a request waiting, a batch-queue step that only collects an earlier batch) gets no range; payload 0
  means a scheduler output without a token count.
- `nsys_cc:warmup` / `nsys_cc:iteration` around each `LLM.generate` call: the first N calls in the process
  are warm-up, where N = env `NSYS_CC_WARMUP_ITERS` (default 0). Payload = number of prompts in the call
  (the batch size). The analysis drops forwards that start inside a warm-up range, by time, so this works
  when the engine (and its forwards) run in another process.
- `nsys_cc:draft_logits` / `nsys_cc:draft_sample` after each draft forward: the proposer's logits (V1: the loaded
  draft model's `compute_logits`, or `get_top_tokens` with local argmax reduction, called by `_sample_draft_tokens` /
  `_greedy_sample`; V2: `compute_draft_logits` / `get_draft_top_tokens` inside `sample_draft`), then its argmax or
  sampling, from the end of the logits to the end of the sampling call (the two never nest). Payload = rows of the
  hidden states: requests × the positions drafted at once (1 for a proposer drafting one position per forward, γ for
  parallel drafting), so the analysis can attribute them per token. Logits computed inside a forward range (a CUDA
  graph replayed whole holds them) get no range of their own: they are in that range.
- `nsys_cc:propose` around a model-free proposer's `propose` (V1 `NgramProposer`, `NgramProposerGPU`,
  `SuffixDecodingProposer`; V2 `NgramGPUSpeculator`): its CPU work outside any forward. Payload = requests it proposes
  for (the draft tokens it proposed are known only when it returns; the next verify forward's tokens say how many).
- `nsys_cc:all_reduce` around each all-reduce of vLLM's CPU build (`CpuCommunicator.all_reduce`: gloo or its
  shared-memory all-reduce, tensor parallel on the CPU) made inside a forward range: on the CPU the communication is
  no GPU kernel, so this range is what shows it. Payload = bytes reduced.

Forwards run by vLLM itself outside scheduled steps (profile runs, dummy runs, CUDA-graph capture) get no
range; V2's kernel warm-up (`compile_or_warm_up_model` → `warmup_kernels`, real steps through `execute_model`) does,
before the benchmark's first iteration, and the analysis drops it (outside every `nsys_cc:iteration`). Nested forwards
(a graph runner that calls the model) give one range, the outermost.

Where the ranges go, by runner (patched when vLLM imports the module, so no process imports more of vLLM
than it would anyway):

- V1 runner (`vllm.v1.worker.gpu_model_runner.GPUModelRunner`, also the CPU runner): `_model_forward` (eager,
  piecewise and full graphs alike: the runner calls it for every step); logits: the model's `compute_logits` (hooked
  in `execute_model`); sampling: `_sample` (the sampler or the rejection sampler; the structured-output bitmask,
  applied before it in `sample_tokens`, is outside); `_dummy_run`, `profile_run`, `capture_model` and
  `_dummy_sampler_run` are silenced.
- V2 runner (`vllm.v1.worker.gpu.model_runner`, vLLM's GPU default when Triton is present): eager `self.model(...)`
  through forward hooks on the loaded model, piecewise graphs `CudaGraphManager.run_pw_graph` (compiled or
  breakable), full graphs `ModelCudaGraphManager.run_fullgraph`; logits: the model's `compute_logits` inside
  `GPUModelRunner.sample`; sampling: from the logits' end to `sample`'s return (the grammar bitmask, the runner's
  sampler or rejection sampler whatever its class, the gather across ranks); `_dummy_run`, `profile_run`,
  `capture_model` and `_dummy_sampler_run` silenced.
- Drafts, V1: forward hooks on the model loaded by `SpecDecodeBaseProposer` (EAGLE, draft model, DFlash, …; its
  piecewise graphs call the module) or `MedusaProposer`; a draft replayed through vLLM's
  `BreakableCUDAGraphWrapper` opens its range in the wrapper. Their `dummy_run`s are silenced, also where a
  subclass overrides it. Draft logits: the loaded draft model's `compute_logits` (and `get_top_tokens`), on that
  instance; draft sampling: `_sample_draft_tokens` and `_greedy_sample` (also where a subclass overrides them).
- Drafts, V2: forward hooks on the model loaded by `DraftModelSpeculator` (every speculator with a model:
  standalone draft model, EAGLE/EAGLE3, MTP, multi-module MTP, Gemma4, DFlash, DSpark, …) for eager forwards,
  `run_pw_graph` for piecewise ones (named for the model it runs), and the base `CudaGraphManager.run_fullgraph` for
  their full-graph replays (named by the manager: the runner's `ModelCudaGraphManager` is the target, any other a
  speculator's). `CudaGraphManager.capture` is wrapped to count the forwards each graph runs. Draft logits:
  `compute_draft_logits` / `get_draft_top_tokens`, sampling `sample_draft` (the instance's own overrides too).
- Model-free proposers: `propose` of V1's `NgramProposer`, `NgramProposerGPU`, `SuffixDecodingProposer` and V2's
  `NgramGPUSpeculator` (optional: a vLLM without them loses only these ranges).
- Not covered: V2's dual-batch overlap (`UBatchRunner`, microbatches run in threads of their own) gives one range
  per microbatch thread.
- Steps (`vllm.v1.engine`): `LLMEngine.step` when its engine core is in-process (`InprocClient`, i.e.
  `VLLM_ENABLE_V1_MULTIPROCESSING=0`; the step then includes output processing), `InprocClient.get_output`,
  and `EngineCoreProc._process_engine_step` (the engine-core process's busy loop, `step_fn` + `post_step`). Nested
  step calls give one range, the outermost's. The range is pushed by a wrapper of the engine core's
  `scheduler.schedule` (wrapped on the instance, so any scheduler class works) when it returns inside a step.

Live timing (`NSYS_CC_LIVE=1`, independent of `NSYS_CC_PLUGIN`): the same hooks also time each forward, its logits
and sampling (`part_begin` / `part_end`), and each engine step for `nsys_cc.live` (the runner's `execute_model`
opens a step, `sample_tokens` hands the finished records on), and `nsys_cc.live.PATCHES` carry them to vLLM's stat
loggers; with `NSYS_CC_PLUGIN` unset no NVTX range is pushed.

One correction, not a range: on vLLM's CPU build the rejection sampler's `expand` kernel leaves float outputs
unwritten, which breaks speculative decoding with sampling (`nsys_cc.vllm.fixes`; `NSYS_CC_VLLM_FIXES=0`
turns it off).

A runner module whose layout is not the one above (another vLLM version) gets a warning, once, and vLLM's own
NVTX scopes are switched on instead (`VLLM_NVTX_SCOPES_FOR_PROFILING=1`: analyse with
`--range "gpu_model_runner: forward"`).
"""

from __future__ import annotations

import functools
import importlib.abc
import os
import sys
import threading
from collections.abc import Callable
from typing import Any

from .. import live as _live
from ..contract import (  # the names this plugin writes and reads, spelled once for the plugin and the analysis
    ALL_REDUCE_RANGE,
    DRAFT_FORWARD_RANGE,
    DRAFT_LOGITS_RANGE,
    DRAFT_SAMPLE_RANGE,
    ENV_PLUGIN as ENV_ENABLE,
    ENV_WARMUP_ITERS as ENV_WARMUP,
    FORWARD_RANGE,
    ITERATION_RANGE,
    LOGITS_RANGE,
    PROPOSE_RANGE,
    SAMPLE_RANGE,
    SCOPES_FORWARD,
    STEP_RANGE,
    VLLM_SCOPES_ENV,
    WARMUP_RANGE,
)
from ..live import channel as _live_channel
from . import nvtx_backend

_ORIGINAL = "__nsys_cc_original__"
_MODULE_TAG = "_nsys_cc_range"
_GRAPH_FORWARDS = "_nsys_cc_graph_forwards"  # on a CUDA-graph manager: batch descriptor → forwards its graph runs
_LOGITS_TAG = "_nsys_cc_logits"  # on a model whose compute_logits opens a part range: the range's name


class _State(threading.local):
    """Per thread: `depth` of open forwards, `pushed` whether the outermost one pushed a range, `quiet` > 0 inside
    vLLM's own dummy/profile/capture forwards, `tokens` scheduled in the step being executed (None outside);
    `steps` nested engine-step calls, `step_pushed` whether the outermost step's range is open; `counted` the forwards
    a CUDA graph being captured runs (`_counting_capture`); `part` whether a part range (logits, sampling) is open,
    `sampling` > 0 inside V2's `GPUModelRunner.sample`, `sample_open` whether its sample range is open;
    `draft_sampling` > 0 inside a proposer's sampling call, `draft_sample_open` whether its draft-sample range is
    open."""

    depth = 0
    pushed = False
    quiet = 0
    tokens: int | None = None
    steps = 0
    step_pushed = False
    counted: int | None = None  # outermost forwards seen while a CUDA graph is captured (None: not counting)
    part = False
    sampling = 0
    sample_open = False
    draft_sampling = 0  # nested draft-sampling calls (`_draft_sampling`)
    draft_sample_open = False  # whether the outermost one's DRAFT_SAMPLE_RANGE is open


_state = _State()
_backend: nvtx_backend.Backend = nvtx_backend.NONE
_registered = False
_warned = False
_generate_calls = 0
_live_on = False


def enabled() -> bool:
    """Whether the environment asks for the plugin (`NSYS_CC_PLUGIN` set and not "0")."""
    return os.environ.get(ENV_ENABLE, "") not in ("", "0")


def warmup_iterations() -> int:
    """N from `NSYS_CC_WARMUP_ITERS` (first N `LLM.generate` calls are warm-up); 0 when unset or invalid."""
    try:
        return max(0, int(os.environ.get(ENV_WARMUP, "0")))
    except ValueError:
        return 0


def register() -> None:
    """vLLM's plugin hook: when enabled, patch vLLM's runners now or as soon as vLLM imports them."""
    global _registered, _backend, _live_on
    if _registered or not (enabled() or _live.enabled()):
        return
    _registered = True
    if enabled():
        _backend = nvtx_backend.choose()
        if _backend.name == "none":
            _warn("no NVTX binding (pip install nvtx==0.2.11): no ranges will be recorded")
    if _live.enabled():
        # Live timing (nsys_cc.live) rides on the same hooks; NVTX stays off unless NSYS_CC_PLUGIN asks for it.
        _live_on = True
        _PATCHES.update({name: _with_wrap(patch) for name, patch in _live.PATCHES.items()})
    for name in list(_PATCHES):
        if name in sys.modules:
            _apply(name, sys.modules[name])
    if not any(isinstance(f, _PatchOnImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _PatchOnImport())


def _with_wrap(patch: Callable[[Any, Callable], bool]) -> Callable[[Any], bool]:
    return lambda module: patch(module, _wrap)


# ---- ranges -------------------------------------------------------------------------------------------


# Wrappers call _enter/_exit in try/finally rather than through context managers: this runs on every forward.
def _enter(name: str, count: Callable[[dict], int], kwargs: dict) -> None:
    state = _state
    state.depth += 1
    if state.depth != 1:
        return
    if state.counted is not None:
        state.counted += 1
    if not state.quiet:
        _backend.push(name, count(kwargs))
        state.pushed = True
        if _live_on:
            _live_channel.forward_begin(draft=name == DRAFT_FORWARD_RANGE)


def _exit() -> None:
    state = _state
    state.depth -= 1
    if state.depth == 0 and state.pushed:
        state.pushed = False
        if _live_on:
            _live_channel.forward_end()
        _backend.pop()


def _call_quietly(quiet: bool, original: Callable, args: tuple, kwargs: dict):
    if not quiet:
        return original(*args, **kwargs)
    _state.quiet += 1
    try:
        return original(*args, **kwargs)
    finally:
        _state.quiet -= 1


def _input_tokens(kwargs: dict[str, Any]) -> int:
    """Token count of a forward's input: positions' last axis (M-RoPE gives 3×N), else input_ids or embeds."""
    for key, axis in (("positions", -1), ("input_ids", 0), ("inputs_embeds", 0)):
        value = kwargs.get(key)
        shape = getattr(value, "shape", None)
        if shape:
            return int(shape[axis])
    return 0


def _scheduled_tokens(kwargs: dict[str, Any]) -> int:
    scheduled = _state.tokens
    return int(scheduled) if scheduled is not None else _input_tokens(kwargs)


# ---- wrappers -----------------------------------------------------------------------------------------


def _wrap(cls: type, attr: str, make: Callable[[Callable], Callable]) -> bool:
    """Replace `cls.attr` by `make(original)`, once; False when `cls` has no such attribute."""
    original = getattr(cls, attr, None)
    if original is None:
        return False
    if getattr(original, _ORIGINAL, None) is not None:
        return True
    wrapper = functools.wraps(original)(make(original))
    setattr(wrapper, _ORIGINAL, original)
    setattr(cls, attr, wrapper)
    return True


def _as_target_forward(original: Callable) -> Callable:
    def forward(self, *args, **kwargs):
        _enter(FORWARD_RANGE, _scheduled_tokens, kwargs)
        try:
            return original(self, *args, **kwargs)
        finally:
            _exit()

    return forward


def _with_scheduled_tokens(original: Callable) -> Callable:
    """execute_model(scheduler_output, …) of either runner: remember the step's token count; dummy runs get no range.
    The runner's model gets its logits range here, before the step runs (`hook_logits`: the CPU runner overrides
    `load_model`, so the model is found here; after the first step, a check of one attribute)."""

    def execute_model(self, *args, **kwargs):
        model = getattr(self, "model", None)
        if model is not None:
            hook_logits(model)
        scheduler_output = args[0] if args else kwargs.get("scheduler_output")
        previous = _state.tokens
        _state.tokens = getattr(scheduler_output, "total_num_scheduled_tokens", None)
        dummy = bool(kwargs.get("dummy_run"))
        if _live_on and not dummy:
            _live_channel.step_begin(scheduler_output)
        try:
            output = _call_quietly(dummy, original, (self, *args), kwargs)
        finally:
            _state.tokens = previous
        return _live_channel.attach(output) if _live_on else output

    return execute_model


def _attaching_live_records(original: Callable) -> Callable:
    """sample_tokens(…): the step's output carries the live step records completed so far."""

    def sample_tokens(self, *args, **kwargs):
        return _live_channel.attach(original(self, *args, **kwargs))

    return sample_tokens


def _silenced(original: Callable) -> Callable:
    def silenced(self, *args, **kwargs):
        return _call_quietly(True, original, (self, *args), kwargs)

    return silenced


def _silenced_if_dummy(original: Callable) -> Callable:
    def maybe_silenced(self, *args, **kwargs):
        return _call_quietly(bool(kwargs.get("dummy_run")), original, (self, *args), kwargs)

    return maybe_silenced


def hook_module(module: Any, name: str, *, scheduled: bool) -> bool:
    """Open range `name` around every call of the torch module (forward hooks), once per module.

    scheduled: payload from the step's scheduled tokens (target) instead of the input's size (draft).
    False when `module` is not an `nn.Module` (a graph wrapper, say), which then gets no range.
    """
    if getattr(module, _MODULE_TAG, None):
        return True
    if not hasattr(module, "register_forward_pre_hook"):
        return False
    count = _scheduled_tokens if scheduled else _input_tokens

    def before(mod, args, kwargs):
        _enter(name, count, kwargs if kwargs or not args else {"input_ids": args[0]})

    def after(mod, args, kwargs, output):
        _exit()

    module.register_forward_pre_hook(before, with_kwargs=True)
    module.register_forward_hook(after, with_kwargs=True, always_call=True)
    setattr(module, _MODULE_TAG, name)
    return True


def _hooking_loaded_model(name: str, *, scheduled: bool, quiet: tuple[str, ...] = (),
                          also: tuple[tuple[str, Callable[[Callable], Callable]], ...] = (),
                          model_logits: bool = False) -> Callable[[Callable], Callable]:
    """load_model: hook the loaded `self.model`; then silence the methods `quiet` (dummy runs) and wrap each method
    of `also` with its maker where the instance's own class defines them (a subclass overriding the base's method
    would escape a wrapper put on the base). `model_logits`: the loaded model's own logits methods give draft-logits
    ranges (`_hook_draft_logits`)."""

    def make(original: Callable) -> Callable:
        def load_model(self, *args, **kwargs):
            result = original(self, *args, **kwargs)
            hook_module(getattr(self, "model", None), name, scheduled=scheduled)
            for attr, maker in (*((a, _silenced) for a in quiet), *also):
                owner = next((c for c in type(self).__mro__ if attr in vars(c)), None)
                if owner is not None:
                    _wrap(owner, attr, maker)
            if model_logits:
                _hook_draft_logits(getattr(self, "model", None))
            return result

        return load_model

    return make


def _as_pw_graph(original: Callable) -> Callable:
    def run_pw_graph(self, model, model_inputs, *args, **kwargs):
        name = getattr(model, _MODULE_TAG, None) or FORWARD_RANGE
        _enter(name, _scheduled_tokens if name == FORWARD_RANGE else _input_tokens, model_inputs)
        try:
            return original(self, model, model_inputs, *args, **kwargs)
        finally:
            _exit()

    return run_pw_graph


def _as_fullgraph(target_manager: type) -> Callable[[Callable], Callable]:
    """run_fullgraph(desc): a FULL CUDA-graph replay, which calls no module. Named for the model whose graph it is:
    a `target_manager` (V2's ModelCudaGraphManager) replays the target, any other manager (a speculator's) a draft.
    Payload: the target's scheduled tokens (the batch descriptor's padded size without a step); for a draft, the
    descriptor's tokens × the forwards the graph ran when captured (`_counting_capture`: a fused multi-step draft
    graph replays γ − 1 forwards in one range)."""

    def make(original: Callable) -> Callable:
        def run_fullgraph(self, desc, *args, **kwargs):
            tokens = getattr(desc, "num_tokens", 0) or 0
            if isinstance(self, target_manager):
                _enter(FORWARD_RANGE, lambda _: _state.tokens or tokens, {})
            else:
                forwards = getattr(self, _GRAPH_FORWARDS, {}).get(desc, 1) or 1
                _enter(DRAFT_FORWARD_RANGE, lambda _: tokens * forwards, {})
            try:
                return original(self, desc, *args, **kwargs)
            finally:
                _exit()

        return run_fullgraph

    return make


def _counting_capture(original: Callable) -> Callable:
    """CudaGraphManager.capture(create_forward_fn, …): remember, per batch descriptor, how many outermost forwards
    the captured function ran (kept on the manager), so that a replay's range can say how many forwards it holds."""

    def capture(self, create_forward_fn, *args, **kwargs):
        counts = self.__dict__.setdefault(_GRAPH_FORWARDS, {})

        def counting_create(desc, *c_args, **c_kwargs):
            forward_fn = create_forward_fn(desc, *c_args, **c_kwargs)

            def counted(*f_args, **f_kwargs):
                state = _state
                outer, state.counted = state.counted, 0
                try:
                    return forward_fn(*f_args, **f_kwargs)
                finally:
                    counts[desc] = state.counted
                    state.counted = outer

            return counted

        return original(self, counting_create, *args, **kwargs)

    return capture


def _as_graph_wrapper_call(original: Callable) -> Callable:
    """A CUDA-graph wrapper's `__call__` (vLLM's BreakableCUDAGraphWrapper around a V1 draft model): a replay calls
    no module, so the wrapper opens the range of the model it wraps (when that model is hooked; inside an open forward
    it is nested and adds nothing)."""

    def call(self, *args, **kwargs):
        name = getattr(getattr(self, "runnable", None), _MODULE_TAG, None)
        if not name:
            return original(self, *args, **kwargs)
        _enter(name, _scheduled_tokens if name == FORWARD_RANGE else _input_tokens, kwargs)
        try:
            return original(self, *args, **kwargs)
        finally:
            _exit()

    return call


# ---- the rest of a draft's token: its logits and sampling; a model-free proposer's proposing ----------------------
#
# A proposer computes a draft token's logits after the draft forward (V1: `self.model.compute_logits(h)` inside its
# `_sample_draft_tokens` / `_greedy_sample`; V2: `compute_draft_logits` inside `sample_draft`) and then takes their
# argmax (or samples). DRAFT_LOGITS_RANGE is the logits call (a part range, `part_begin`); DRAFT_SAMPLE_RANGE runs from
# the end of the logits to the end of the sampling call, so the two never nest and together are the whole of the
# proposer's sampling call. Both carry the rows (positions) of the hidden states: one per request per drafted
# position (γ × requests when a proposer computes the logits of γ positions at once). Inside a forward range (a CUDA
# graph replayed whole holds its logits) or a silenced dummy/capture call, nothing is written.


def _first_tensor(args: tuple, kwargs: dict) -> Any:
    return next((a for a in (*args, *kwargs.values()) if getattr(a, "shape", None) is not None), None)


def _draft_logits_method(original: Callable) -> Callable:
    """A V2 speculator's logits method (`compute_draft_logits(hidden, step)`, `get_draft_top_tokens`): the draft-logits
    range around it (the draft model's own compute_logits inside it adds nothing: one part range at a time); inside a
    sampling call the draft-sample range opens when it returns."""

    def logits(self, *args, **kwargs):
        rows = _rows(_first_tensor(args, kwargs))
        pushed = part_begin(DRAFT_LOGITS_RANGE, rows, draft=True)
        try:
            out = original(self, *args, **kwargs)
        finally:
            if pushed:
                part_end()
        state = _state
        if pushed and state.draft_sampling and not state.draft_sample_open:
            state.draft_sample_open = part_begin(DRAFT_SAMPLE_RANGE, _rows(out) or rows, draft=True)
        return out

    return logits


def _draft_sampling(original: Callable) -> Callable:
    """A proposer's sampling call (V1 `_sample_draft_tokens`, `_greedy_sample`; V2 `sample_draft`): the
    draft-sample range its logits opened closes when the outermost call returns."""

    def sample(self, *args, **kwargs):
        state = _state
        state.draft_sampling += 1
        try:
            return original(self, *args, **kwargs)
        finally:
            state.draft_sampling -= 1
            if state.draft_sampling == 0 and state.draft_sample_open:
                state.draft_sample_open = False
                part_end()

    return sample


def _hook_draft_logits(model: Any) -> None:
    """The loaded draft model's logits (`hook_logits` with the draft's name, on the instance: its class may be the
    target's), and `get_top_tokens` (local argmax reduction: the logits with their argmax fused in) the same way."""
    if model is None or not hook_logits(model, DRAFT_LOGITS_RANGE, draft=True):
        return
    inner = _unwrapped(model)
    top = getattr(inner, "get_top_tokens", None)
    if callable(top) and getattr(top, _ORIGINAL, None) is None:
        wrapper = functools.wraps(top)(_as_logits(top, DRAFT_LOGITS_RANGE, True))
        setattr(wrapper, _ORIGINAL, top)
        object.__setattr__(inner, "get_top_tokens", wrapper)


def _proposed_rows(args: tuple, kwargs: dict) -> int:
    """Requests a model-free proposer proposes for: its sampled tokens' list (n-gram, suffix), else the input batch's
    requests, else the first tensor's rows."""
    sampled = kwargs.get("sampled_token_ids")
    if sampled is None:
        sampled = next((a for a in args if isinstance(a, list)), None)
    if isinstance(sampled, list):
        return len(sampled)
    reqs = getattr(kwargs.get("input_batch", args[0] if args else None), "num_reqs", None)
    if isinstance(reqs, int):
        return reqs
    return _rows(_first_tensor(args, kwargs))


def _as_proposing(original: Callable) -> Callable:
    """A model-free proposer's `propose` (n-gram, suffix decoding): PROPOSE_RANGE around it, payload the requests it
    proposes for (how many tokens it proposed is known only when it returns; the next verify forward's tokens say
    it). Dummy proposals (`dummy_run=True`) get no range."""

    def propose(self, *args, **kwargs):
        state = _state
        if state.quiet or state.depth or kwargs.get("dummy_run"):
            return original(self, *args, **kwargs)
        _backend.push(PROPOSE_RANGE, _proposed_rows(args, kwargs))
        try:
            return original(self, *args, **kwargs)
        finally:
            _backend.pop()

    return propose


def _as_iteration(original: Callable) -> Callable:
    def generate(self, *args, **kwargs):
        global _generate_calls
        prompts = args[0] if args else kwargs.get("prompts")
        batch = len(prompts) if isinstance(prompts, (list, tuple)) else 1
        name = WARMUP_RANGE if _generate_calls < warmup_iterations() else ITERATION_RANGE
        _generate_calls += 1
        _backend.push(name, batch)
        try:
            return original(self, *args, **kwargs)
        finally:
            _backend.pop()

    return generate


def _as_step(core_of: Callable[[Any], Any]) -> Callable[[Callable], Callable]:
    """An engine-step method: the outermost call on a thread owns the `nsys_cc:step` range that the engine core's
    scheduler opens (see `_hook_scheduler`); `core_of(self)` is that engine core (None: not a step here)."""

    def make(original: Callable) -> Callable:
        def step(self, *args, **kwargs):
            core = core_of(self)
            if core is None:
                return original(self, *args, **kwargs)
            _hook_scheduler(core)
            state = _state
            state.steps += 1
            try:
                return original(self, *args, **kwargs)
            finally:
                state.steps -= 1
                if state.steps == 0 and state.step_pushed:
                    state.step_pushed = False
                    _backend.pop()

        return step

    return make


def _hook_scheduler(core: Any) -> None:
    """Wrap `core.scheduler.schedule` on the instance, once: when it returns inside a step, open the step's range."""
    scheduler = getattr(core, "scheduler", None)
    schedule = getattr(scheduler, "schedule", None)
    if scheduler is None or schedule is None or getattr(schedule, _ORIGINAL, None) is not None:
        return

    def scheduled(*args, **kwargs):
        output = schedule(*args, **kwargs)
        state = _state
        tokens = getattr(output, "total_num_scheduled_tokens", None)
        if state.steps and not state.step_pushed and not state.quiet and tokens != 0:
            _backend.push(STEP_RANGE, tokens or 0)
            state.step_pushed = True
        return output

    setattr(scheduled, _ORIGINAL, schedule)
    try:
        scheduler.schedule = scheduled
    except AttributeError:  # a scheduler with __slots__: no step ranges rather than a failed run
        pass


def _inproc_core(engine: Any) -> Any:
    """The in-process engine core behind an `LLMEngine` (None when the engine core runs in another process)."""
    return getattr(getattr(engine, "engine_core", None), "engine_core", None)


# ---- the rest of a token's work: logits and sampling after each target forward (issue 29) -------------------


def part_begin(name: str, rows: int, *, draft: bool = False) -> bool:
    """Open part range `name` (the logits or the sampling of a forward; payload `rows`) on this thread: True when it
    was opened, and then `part_end()` must close it. Nothing is opened inside vLLM's dummy runs, inside a forward
    (a model that computes logits in its forward: they are the forward's) or inside another part range. `draft`:
    a draft's part (the live timing adds it to the draft forward before it)."""
    state = _state
    if state.quiet or state.depth or state.part:
        return False
    state.part = True
    _backend.push(name, rows)
    if _live_on:
        _live_channel.part_begin(draft=draft)
    return True


def part_end() -> None:
    """Close the part range `part_begin` opened."""
    _state.part = False
    if _live_on:
        _live_channel.part_end()
    _backend.pop()


def _rows(tensor: Any) -> int:
    """Rows of a tensor (its first axis): the positions whose logits are computed, or sampled."""
    shape = getattr(tensor, "shape", None)
    return int(shape[0]) if shape else 0


def _unwrapped(model: Any) -> Any:
    """The model under vLLM's CUDA-graph wrapper (`unwrap()`), else `model` itself."""
    unwrap = getattr(type(model), "unwrap", None)
    return unwrap(model) if callable(unwrap) else model


def hook_logits(model: Any, name: str = LOGITS_RANGE, *, draft: bool = False) -> bool:
    """Open range `name` around every call of the model's `compute_logits` (and `compute_logits_local`, V2's
    batch-sharded sampling), payload = rows computed; wrapped on the instance (under vLLM's graph wrapper), so that
    another model of the same class (a draft of the target's architecture) is not touched. Once per model; False
    when the model has no `compute_logits`. A target's logits opened inside V2's `GPUModelRunner.sample` open its
    sample range when they end (`_as_v2_sample`)."""
    inner = _unwrapped(model)
    if inner is None or not callable(getattr(inner, "compute_logits", None)):
        return False
    if getattr(inner, _LOGITS_TAG, None):
        return True
    for attr in ("compute_logits", "compute_logits_local"):
        original = getattr(inner, attr, None)
        if callable(original):
            object.__setattr__(inner, attr, functools.wraps(original)(_as_logits(original, name, draft)))
    object.__setattr__(inner, _LOGITS_TAG, name)
    return True


def _as_logits(original: Callable, name: str, draft: bool) -> Callable:
    def compute_logits(*args, **kwargs):
        hidden = args[0] if args else kwargs.get("hidden_states")
        rows = _rows(hidden)
        pushed = part_begin(name, rows, draft=draft)
        try:
            logits = original(*args, **kwargs)
        finally:
            if pushed:
                part_end()
        state = _state
        if pushed and name == LOGITS_RANGE and state.sampling and not state.sample_open:
            state.sample_open = part_begin(SAMPLE_RANGE, _rows(logits) or rows)
        elif pushed and name == DRAFT_LOGITS_RANGE and state.draft_sampling and not state.draft_sample_open:
            state.draft_sample_open = part_begin(DRAFT_SAMPLE_RANGE, _rows(logits) or rows, draft=True)
        return logits

    return compute_logits


def _as_v1_sample(original: Callable) -> Callable:
    """V1's `GPUModelRunner._sample(logits, spec_decode_metadata)`: the sampler, or the rejection sampler in a
    speculative step, in the sample range; payload = rows of the logits sampled."""

    def sample(self, logits, *args, **kwargs):
        pushed = part_begin(SAMPLE_RANGE, _rows(logits))
        try:
            return original(self, logits, *args, **kwargs)
        finally:
            if pushed:
                part_end()

    return sample


def _as_v2_sample(original: Callable) -> Callable:
    """V2's `GPUModelRunner.sample(hidden_states, input_batch, grammar_output)`: compute_logits, the grammar bitmask,
    the sampler (or the rejection sampler), the gather across ranks. The sample range opens when the logits range
    closes (`_as_logits`) and closes when `sample` returns, so that any sampler class the runner holds is inside."""

    def sample(self, *args, **kwargs):
        state = _state
        state.sampling += 1
        try:
            return original(self, *args, **kwargs)
        finally:
            state.sampling -= 1
            if state.sampling == 0 and state.sample_open:
                state.sample_open = False
                part_end()

    return sample


# ---- what is patched where ----------------------------------------------------------------------------


def _patch_v1_runner(module: Any) -> bool:
    cls = getattr(module, "GPUModelRunner", None)
    if cls is None or not hasattr(cls, "_model_forward"):
        return False
    if _live_on:
        _wrap(cls, "sample_tokens", _attaching_live_records)
    # vLLM's own forwards outside the scheduled steps (memory profiling, CUDA-graph capture, DP padding runs), and
    # the sampler's warm-up after them (`_dummy_sampler_run`, called by the worker on its own).
    for attr in ("_dummy_run", "profile_run", "capture_model", "_dummy_sampler_run"):
        _wrap(cls, attr, _silenced)
    # The sample range (V1 samples in `_sample`; its logits come from the model's compute_logits, `hook_logits`);
    # optional: a runner laid out otherwise loses the sample range only.
    _wrap(cls, "_sample", _as_v1_sample)
    return _wrap(cls, "execute_model", _with_scheduled_tokens) and _wrap(cls, "_model_forward", _as_target_forward)


def _patch_v2_runner(module: Any) -> bool:
    cls = getattr(module, "GPUModelRunner", None)
    if cls is None:
        return False
    ok = _wrap(cls, "execute_model", _with_scheduled_tokens)
    if _live_on:
        _wrap(cls, "sample_tokens", _attaching_live_records)
    ok = _wrap(cls, "load_model", _hooking_loaded_model(FORWARD_RANGE, scheduled=True)) and ok
    _wrap(cls, "sample", _as_v2_sample)  # optional: a runner laid out otherwise loses the sample range only
    for attr in ("_dummy_run", "profile_run", "capture_model", "_dummy_sampler_run"):
        _wrap(cls, attr, _silenced)
    return ok


def _patch_v2_cudagraphs(module: Any) -> bool:
    base = getattr(module, "CudaGraphManager", None)
    model = getattr(module, "ModelCudaGraphManager", None)
    if base is None or model is None:
        return False
    _wrap(base, "capture", _counting_capture)
    # The base's run_fullgraph replays the speculators' graphs (EAGLE, MTP, DFlash, fused multi-step drafts); the
    # target's manager overrides it (and calls it: nested, one range).
    return (_wrap(base, "run_pw_graph", _as_pw_graph) and _wrap(base, "run_fullgraph", _as_fullgraph(model))
            and _wrap(model, "run_fullgraph", _as_fullgraph(model)))


# V1 proposers' sampling calls (their logits are the loaded model's, `_hook_draft_logits`).
_V1_SAMPLING = ("_sample_draft_tokens", "_greedy_sample")


def _patch_v1_drafter(module: Any) -> bool:
    cls = getattr(module, "SpecDecodeBaseProposer", None)
    if cls is None:
        return False
    _wrap(cls, "dummy_run", _silenced)
    for attr in _V1_SAMPLING:
        _wrap(cls, attr, _draft_sampling)
    return _wrap(cls, "load_model", _hooking_loaded_model(
        DRAFT_FORWARD_RANGE, scheduled=False, quiet=("dummy_run",),
        also=tuple((a, _draft_sampling) for a in _V1_SAMPLING), model_logits=True))


def _patch_v1_medusa(module: Any) -> bool:
    """Optional: V1's Medusa proposer is no SpecDecodeBaseProposer (always True: a vLLM without it loses nothing)."""
    cls = getattr(module, "MedusaProposer", None)
    if cls is not None:
        _wrap(cls, "dummy_run", _silenced)
        _wrap(cls, "load_model", _hooking_loaded_model(DRAFT_FORWARD_RANGE, scheduled=False, model_logits=True))
    return True


def _patch_graph_wrapper(module: Any) -> bool:
    """Optional: a V1 draft replayed through vLLM's breakable CUDA graphs (always True)."""
    cls = getattr(module, "BreakableCUDAGraphWrapper", None)
    if cls is not None:
        _wrap(cls, "__call__", _as_graph_wrapper_call)
    return True


def _patch_v2_drafter(module: Any) -> bool:
    cls = getattr(module, "DraftModelSpeculator", None)
    if cls is None:
        return False
    _wrap(cls, "capture", _silenced)
    _wrap(cls, "propose", _silenced_if_dummy)
    for attr, maker in _V2_TOKEN:
        _wrap(cls, attr, maker)
    # Speculators override capture and propose: the loaded instance's own ones are silenced too (dummy proposals);
    # their own logits and sampling methods (multi-module MTP's per-module logits) are wrapped as the base's.
    return _wrap(cls, "load_model", _hooking_loaded_model(DRAFT_FORWARD_RANGE, scheduled=False,
                                                          quiet=("capture",), also=_V2_TOKEN))


# V2 speculators' logits and sampling methods (`DraftModelSpeculator.sample_draft` calls the logits).
_V2_TOKEN = (("compute_draft_logits", _draft_logits_method), ("get_draft_top_tokens", _draft_logits_method),
             ("sample_draft", _draft_sampling))


def _patching_proposer(module_class: str) -> Callable[[Any], bool]:
    """Optional: a model-free proposer's `propose` gets PROPOSE_RANGE (always True: a vLLM without the class loses
    only these ranges)."""

    def patch(module: Any) -> bool:
        cls = getattr(module, module_class, None)
        if cls is not None:
            _wrap(cls, "propose", _as_proposing)
        return True

    return patch


def _as_all_reduce(original: Callable) -> Callable:
    def all_reduce(self, input_, *args, **kwargs):
        if not _state.pushed:
            return original(self, input_, *args, **kwargs)
        _backend.push(ALL_REDUCE_RANGE, int(input_.numel() * input_.element_size()))
        try:
            return original(self, input_, *args, **kwargs)
        finally:
            _backend.pop()

    return all_reduce


def _patch_cpu_communicator(module: Any) -> bool:
    """Optional: a vLLM laid out otherwise loses only the all-reduce ranges, never the forwards (always True)."""
    cls = getattr(module, "CpuCommunicator", None)
    if cls is not None:
        _wrap(cls, "all_reduce", _as_all_reduce)
    return True


def _patch_llm(module: Any) -> bool:
    cls = getattr(module, "LLM", None)
    return cls is not None and _wrap(cls, "generate", _as_iteration)


def _patch_llm_engine(module: Any) -> bool:
    cls = getattr(module, "LLMEngine", None)
    return cls is not None and _wrap(cls, "step", _as_step(_inproc_core))


def _patch_engine_core(module: Any) -> bool:
    cls = getattr(module, "EngineCoreProc", None)
    return cls is not None and _wrap(cls, "_process_engine_step", _as_step(lambda core: core))


def _patch_core_client(module: Any) -> bool:
    cls = getattr(module, "InprocClient", None)
    return cls is not None and _wrap(cls, "get_output", _as_step(lambda client: getattr(client, "engine_core", None)))


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
