"""What every wrapper shares: the per-thread state, the NVTX binding, opening and closing a forward's range or a part
range (the logits or the sampling after a forward), and wrapping a method once.

Wrappers call `enter` / `leave` in try/finally rather than through context managers: this runs on every forward.
The module's `state`, `backend` and `live_on` are looked up on each call (`ranges.state`), so that the plugin (and a
test) can set them.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import Any

from ...contract import DRAFT_FORWARD_RANGE
from ...live import channel as _live_channel
from .. import nvtx_backend

ORIGINAL = "__nsys_cc_original__"  # on a wrapper: the method it wraps


class State(threading.local):
    """Per thread: `depth` of open forwards, `pushed` whether the outermost one pushed a range, `quiet` > 0 inside
    vLLM's own dummy/profile/capture forwards, `tokens` scheduled in the step being executed (None outside);
    `steps` nested engine-step calls, `step_pushed` whether the outermost step's range is open; `counted` the forwards
    a CUDA graph being captured runs (`forwards.counting_capture`); `part` whether a part range (logits, sampling) is
    open, `sampling` > 0 inside V2's `GPUModelRunner.sample`, `sample_open` whether its sample range is open;
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
    draft_sampling = 0  # nested draft-sampling calls (`drafts.draft_sampling`)
    draft_sample_open = False  # whether the outermost one's DRAFT_SAMPLE_RANGE is open


state = State()
backend: nvtx_backend.Backend = nvtx_backend.NONE  # the NVTX binding (`nvtx_backend.choose()` when the plugin is on)
live_on = False  # whether the live timing rides on the hooks (`NSYS_CC_LIVE=1`)


def enter(name: str, count: Callable[[dict], int], kwargs: dict) -> None:
    """A forward begins: the outermost one on this thread pushes range `name` (payload `count(kwargs)`), unless
    inside vLLM's own dummy runs."""
    st = state
    st.depth += 1
    if st.depth != 1:
        return
    if st.counted is not None:
        st.counted += 1
    if not st.quiet:
        backend.push(name, count(kwargs))
        st.pushed = True
        if live_on:
            _live_channel.forward_begin(draft=name == DRAFT_FORWARD_RANGE)


def leave() -> None:
    """A forward ends: the outermost one pops the range `enter` pushed."""
    st = state
    st.depth -= 1
    if st.depth == 0 and st.pushed:
        st.pushed = False
        if live_on:
            _live_channel.forward_end()
        backend.pop()


def call_quietly(quiet: bool, original: Callable, args: tuple, kwargs: dict):
    if not quiet:
        return original(*args, **kwargs)
    state.quiet += 1
    try:
        return original(*args, **kwargs)
    finally:
        state.quiet -= 1


def input_tokens(kwargs: dict[str, Any]) -> int:
    """Token count of a forward's input: positions' last axis (M-RoPE gives 3×N), else input_ids or embeds."""
    for key, axis in (("positions", -1), ("input_ids", 0), ("inputs_embeds", 0)):
        value = kwargs.get(key)
        shape = getattr(value, "shape", None)
        if shape:
            return int(shape[axis])
    return 0


def scheduled_tokens(kwargs: dict[str, Any]) -> int:
    scheduled = state.tokens
    return int(scheduled) if scheduled is not None else input_tokens(kwargs)


def wrap(cls: type, attr: str, make: Callable[[Callable], Callable]) -> bool:
    """Replace `cls.attr` by `make(original)`, once; False when `cls` has no such attribute."""
    original = getattr(cls, attr, None)
    if original is None:
        return False
    if getattr(original, ORIGINAL, None) is not None:
        return True
    wrapper = functools.wraps(original)(make(original))
    setattr(wrapper, ORIGINAL, original)
    setattr(cls, attr, wrapper)
    return True


def silenced(original: Callable) -> Callable:
    def silenced(self, *args, **kwargs):
        return call_quietly(True, original, (self, *args), kwargs)

    return silenced


def silenced_if_dummy(original: Callable) -> Callable:
    def maybe_silenced(self, *args, **kwargs):
        return call_quietly(bool(kwargs.get("dummy_run")), original, (self, *args), kwargs)

    return maybe_silenced


def part_begin(name: str, rows: int, *, draft: bool = False) -> bool:
    """Open part range `name` (the logits or the sampling of a forward; payload `rows`) on this thread: True when it
    was opened, and then `part_end()` must close it. Nothing is opened inside vLLM's dummy runs, inside a forward
    (a model that computes logits in its forward: they are the forward's) or inside another part range. `draft`:
    a draft's part (the live timing adds it to the draft forward before it)."""
    st = state
    if st.quiet or st.depth or st.part:
        return False
    st.part = True
    backend.push(name, rows)
    if live_on:
        _live_channel.part_begin(draft=draft)
    return True


def part_end() -> None:
    """Close the part range `part_begin` opened."""
    state.part = False
    if live_on:
        _live_channel.part_end()
    backend.pop()


def rows(tensor: Any) -> int:
    """Rows of a tensor (its first axis): the positions whose logits are computed, or sampled."""
    shape = getattr(tensor, "shape", None)
    return int(shape[0]) if shape else 0


def unwrapped(model: Any) -> Any:
    """The model under vLLM's CUDA-graph wrapper (`unwrap()`), else `model` itself."""
    unwrap = getattr(type(model), "unwrap", None)
    return unwrap(model) if callable(unwrap) else model


def first_tensor(args: tuple, kwargs: dict) -> Any:
    return next((a for a in (*args, *kwargs.values()) if getattr(a, "shape", None) is not None), None)
