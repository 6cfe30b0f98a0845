"""The rest of a target token's work after its forward, on its thread: its logits (`nsys_cc:logits`, the model's
`compute_logits`: the LM head and vLLM's LogitsProcessor) and its sampling (`nsys_cc:sample`: the sampler with its
logits processors, or the rejection sampler in a speculative step). Payload of both: rows, one per position whose
logits are computed and sampled."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from ...contract import DRAFT_LOGITS_RANGE, DRAFT_SAMPLE_RANGE, LOGITS_RANGE, SAMPLE_RANGE
from . import ranges

LOGITS_TAG = "_nsys_cc_logits"  # on a model whose compute_logits opens a part range: the range's name


def hook_logits(model: Any, name: str = LOGITS_RANGE, *, draft: bool = False) -> bool:
    """Open range `name` around every call of the model's `compute_logits` (and `compute_logits_local`, V2's
    batch-sharded sampling), payload = rows computed; wrapped on the instance (under vLLM's graph wrapper), so that
    another model of the same class (a draft of the target's architecture) is not touched. Once per model; False
    when the model has no `compute_logits`. A target's logits opened inside V2's `GPUModelRunner.sample` open its
    sample range when they end (`as_v2_sample`)."""
    inner = ranges.unwrapped(model)
    if inner is None or not callable(getattr(inner, "compute_logits", None)):
        return False
    if getattr(inner, LOGITS_TAG, None):
        return True
    for attr in ("compute_logits", "compute_logits_local"):
        original = getattr(inner, attr, None)
        if callable(original):
            object.__setattr__(inner, attr, functools.wraps(original)(as_logits(original, name, draft)))
    object.__setattr__(inner, LOGITS_TAG, name)
    return True


def as_logits(original: Callable, name: str, draft: bool) -> Callable:
    def compute_logits(*args, **kwargs):
        hidden = args[0] if args else kwargs.get("hidden_states")
        rows = ranges.rows(hidden)
        pushed = ranges.part_begin(name, rows, draft=draft)
        try:
            logits = original(*args, **kwargs)
        finally:
            if pushed:
                ranges.part_end()
        state = ranges.state
        if pushed and name == LOGITS_RANGE and state.sampling and not state.sample_open:
            state.sample_open = ranges.part_begin(SAMPLE_RANGE, ranges.rows(logits) or rows)
        elif pushed and name == DRAFT_LOGITS_RANGE and state.draft_sampling and not state.draft_sample_open:
            state.draft_sample_open = ranges.part_begin(DRAFT_SAMPLE_RANGE, ranges.rows(logits) or rows, draft=True)
        return logits

    return compute_logits


def as_v1_sample(original: Callable) -> Callable:
    """V1's `GPUModelRunner._sample(logits, spec_decode_metadata)`: the sampler, or the rejection sampler in a
    speculative step, in the sample range; payload = rows of the logits sampled."""

    def sample(self, logits, *args, **kwargs):
        pushed = ranges.part_begin(SAMPLE_RANGE, ranges.rows(logits))
        try:
            return original(self, logits, *args, **kwargs)
        finally:
            if pushed:
                ranges.part_end()

    return sample


def as_v2_sample(original: Callable) -> Callable:
    """V2's `GPUModelRunner.sample(hidden_states, input_batch, grammar_output)`: compute_logits, the grammar bitmask,
    the sampler (or the rejection sampler), the gather across ranks. The sample range opens when the logits range
    closes (`as_logits`) and closes when `sample` returns, so that any sampler class the runner holds is inside."""

    def sample(self, *args, **kwargs):
        state = ranges.state
        state.sampling += 1
        try:
            return original(self, *args, **kwargs)
        finally:
            state.sampling -= 1
            if state.sampling == 0 and state.sample_open:
                state.sample_open = False
                ranges.part_end()

    return sample
