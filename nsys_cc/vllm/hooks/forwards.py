"""The forwards: `model_executable()` around each forward of the target model (payload: the tokens scheduled in it),
`draft_model_executable()` around each draft-model forward (payload: the tokens in its input), eager (module hooks),
piecewise and full CUDA graphs alike; vLLM's own dummy, profile and capture forwards silenced; nested forwards one
range, the outermost. Also the step's token count (the runner's `execute_model`) and the all-reduces of vLLM's CPU
build inside a forward (`nsys_cc:all_reduce`, payload: bytes reduced)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ...contract import ALL_REDUCE_RANGE, DRAFT_FORWARD_RANGE, FORWARD_RANGE
from ...live import channel as _live_channel
from . import drafts, ranges, sampling

MODULE_TAG = "_nsys_cc_range"  # on a hooked torch module: the name of its range
GRAPH_FORWARDS = "_nsys_cc_graph_forwards"  # on a CUDA-graph manager: batch descriptor → forwards its graph runs


def as_target_forward(original: Callable) -> Callable:
    def forward(self, *args, **kwargs):
        ranges.enter(FORWARD_RANGE, ranges.scheduled_tokens, kwargs)
        try:
            return original(self, *args, **kwargs)
        finally:
            ranges.leave()

    return forward


def with_scheduled_tokens(original: Callable) -> Callable:
    """execute_model(scheduler_output, …) of either runner: remember the step's token count; dummy runs get no range.
    The runner's model gets its logits range here, before the step runs (`sampling.hook_logits`: the CPU runner
    overrides `load_model`, so the model is found here; after the first step, a check of one attribute); with the live
    timing on, the step's live record opens here and its output carries the records completed so far."""

    def execute_model(self, *args, **kwargs):
        model = getattr(self, "model", None)
        if model is not None:
            sampling.hook_logits(model)
        scheduler_output = args[0] if args else kwargs.get("scheduler_output")
        previous = ranges.state.tokens
        ranges.state.tokens = getattr(scheduler_output, "total_num_scheduled_tokens", None)
        dummy = bool(kwargs.get("dummy_run"))
        if ranges.live_on and not dummy:
            _live_channel.step_begin(scheduler_output)
        try:
            output = ranges.call_quietly(dummy, original, (self, *args), kwargs)
        finally:
            ranges.state.tokens = previous
        return _live_channel.attach(output) if ranges.live_on else output

    return execute_model


def hook_module(module: Any, name: str, *, scheduled: bool) -> bool:
    """Open range `name` around every call of the torch module (forward hooks), once per module.

    scheduled: payload from the step's scheduled tokens (target) instead of the input's size (draft).
    False when `module` is not an `nn.Module` (a graph wrapper, say), which then gets no range.
    """
    if getattr(module, MODULE_TAG, None):
        return True
    if not hasattr(module, "register_forward_pre_hook"):
        return False
    count = ranges.scheduled_tokens if scheduled else ranges.input_tokens

    def before(mod, args, kwargs):
        ranges.enter(name, count, kwargs if kwargs or not args else {"input_ids": args[0]})

    def after(mod, args, kwargs, output):
        ranges.leave()

    module.register_forward_pre_hook(before, with_kwargs=True)
    module.register_forward_hook(after, with_kwargs=True, always_call=True)
    setattr(module, MODULE_TAG, name)
    return True


def hooking_loaded_model(name: str, *, scheduled: bool, quiet: tuple[str, ...] = (),
                          also: tuple[tuple[str, Callable[[Callable], Callable]], ...] = (),
                          model_logits: bool = False) -> Callable[[Callable], Callable]:
    """load_model: hook the loaded `self.model`; then silence the methods `quiet` (dummy runs) and wrap each method
    of `also` with its maker where the instance's own class defines them (a subclass overriding the base's method
    would escape a wrapper put on the base). `model_logits`: the loaded model's own logits methods give draft-logits
    ranges (`drafts.hook_draft_logits`)."""

    def make(original: Callable) -> Callable:
        def load_model(self, *args, **kwargs):
            result = original(self, *args, **kwargs)
            hook_module(getattr(self, "model", None), name, scheduled=scheduled)
            for attr, maker in (*((a, ranges.silenced) for a in quiet), *also):
                owner = next((c for c in type(self).__mro__ if attr in vars(c)), None)
                if owner is not None:
                    ranges.wrap(owner, attr, maker)
            if model_logits:
                drafts.hook_draft_logits(getattr(self, "model", None))
            return result

        return load_model

    return make


def as_pw_graph(original: Callable) -> Callable:
    def run_pw_graph(self, model, model_inputs, *args, **kwargs):
        name = getattr(model, MODULE_TAG, None) or FORWARD_RANGE
        ranges.enter(name, ranges.scheduled_tokens if name == FORWARD_RANGE else ranges.input_tokens, model_inputs)
        try:
            return original(self, model, model_inputs, *args, **kwargs)
        finally:
            ranges.leave()

    return run_pw_graph


def as_fullgraph(target_manager: type) -> Callable[[Callable], Callable]:
    """run_fullgraph(desc): a FULL CUDA-graph replay, which calls no module. Named for the model whose graph it is:
    a `target_manager` (V2's ModelCudaGraphManager) replays the target, any other manager (a speculator's) a draft.
    Payload: the target's scheduled tokens (the batch descriptor's padded size without a step); for a draft, the
    descriptor's tokens × the forwards the graph ran when captured (`counting_capture`: a fused multi-step draft
    graph replays γ − 1 forwards in one range)."""

    def make(original: Callable) -> Callable:
        def run_fullgraph(self, desc, *args, **kwargs):
            tokens = getattr(desc, "num_tokens", 0) or 0
            if isinstance(self, target_manager):
                ranges.enter(FORWARD_RANGE, lambda _: ranges.state.tokens or tokens, {})
            else:
                forwards = getattr(self, GRAPH_FORWARDS, {}).get(desc, 1) or 1
                ranges.enter(DRAFT_FORWARD_RANGE, lambda _: tokens * forwards, {})
            try:
                return original(self, desc, *args, **kwargs)
            finally:
                ranges.leave()

        return run_fullgraph

    return make


def counting_capture(original: Callable) -> Callable:
    """CudaGraphManager.capture(create_forward_fn, …): remember, per batch descriptor, how many outermost forwards
    the captured function ran (kept on the manager), so that a replay's range can say how many forwards it holds."""

    def capture(self, create_forward_fn, *args, **kwargs):
        counts = self.__dict__.setdefault(GRAPH_FORWARDS, {})

        def counting_create(desc, *c_args, **c_kwargs):
            forward_fn = create_forward_fn(desc, *c_args, **c_kwargs)

            def counted(*f_args, **f_kwargs):
                state = ranges.state
                outer, state.counted = state.counted, 0
                try:
                    return forward_fn(*f_args, **f_kwargs)
                finally:
                    counts[desc] = state.counted
                    state.counted = outer

            return counted

        return original(self, counting_create, *args, **kwargs)

    return capture


def as_graph_wrapper_call(original: Callable) -> Callable:
    """A CUDA-graph wrapper's `__call__` (vLLM's BreakableCUDAGraphWrapper around a V1 draft model): a replay calls
    no module, so the wrapper opens the range of the model it wraps (when that model is hooked; inside an open forward
    it is nested and adds nothing)."""

    def call(self, *args, **kwargs):
        name = getattr(getattr(self, "runnable", None), MODULE_TAG, None)
        if not name:
            return original(self, *args, **kwargs)
        ranges.enter(name, ranges.scheduled_tokens if name == FORWARD_RANGE else ranges.input_tokens, kwargs)
        try:
            return original(self, *args, **kwargs)
        finally:
            ranges.leave()

    return call


def as_all_reduce(original: Callable) -> Callable:
    def all_reduce(self, input_, *args, **kwargs):
        if not ranges.state.pushed:
            return original(self, input_, *args, **kwargs)
        ranges.backend.push(ALL_REDUCE_RANGE, int(input_.numel() * input_.element_size()))
        try:
            return original(self, input_, *args, **kwargs)
        finally:
            ranges.backend.pop()

    return all_reduce
