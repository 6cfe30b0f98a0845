"""The rest of a draft's token — its logits and sampling — and a model-free proposer's proposing.

A proposer computes a draft token's logits after the draft forward (V1: `self.model.compute_logits(h)` inside its
`_sample_draft_tokens` / `_greedy_sample`; V2: `compute_draft_logits` inside `sample_draft`) and then takes their
argmax (or samples). DRAFT_LOGITS_RANGE is the logits call (a part range, `ranges.part_begin`); DRAFT_SAMPLE_RANGE
runs from the end of the logits to the end of the sampling call, so the two never nest and together are the whole of
the proposer's sampling call. Both carry the rows (positions) of the hidden states: one per request per drafted
position (γ × requests when a proposer computes the logits of γ positions at once). Inside a forward range (a CUDA
graph replayed whole holds its logits) or a silenced dummy/capture call, nothing is written. A model-free proposer's
`propose` (n-gram, suffix decoding) is PROPOSE_RANGE: its CPU work outside any forward.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from ...contract import DRAFT_LOGITS_RANGE, DRAFT_SAMPLE_RANGE, PROPOSE_RANGE
from . import ranges, sampling


def draft_logits_method(original: Callable) -> Callable:
    """A V2 speculator's logits method (`compute_draft_logits(hidden, step)`, `get_draft_top_tokens`): the draft-logits
    range around it (the draft model's own compute_logits inside it adds nothing: one part range at a time); inside a
    sampling call the draft-sample range opens when it returns."""

    def logits(self, *args, **kwargs):
        rows = ranges.rows(ranges.first_tensor(args, kwargs))
        pushed = ranges.part_begin(DRAFT_LOGITS_RANGE, rows, draft=True)
        try:
            out = original(self, *args, **kwargs)
        finally:
            if pushed:
                ranges.part_end()
        state = ranges.state
        if pushed and state.draft_sampling and not state.draft_sample_open:
            state.draft_sample_open = ranges.part_begin(DRAFT_SAMPLE_RANGE, ranges.rows(out) or rows, draft=True)
        return out

    return logits


def draft_sampling(original: Callable) -> Callable:
    """A proposer's sampling call (V1 `_sample_draft_tokens`, `_greedy_sample`; V2 `sample_draft`): the
    draft-sample range its logits opened closes when the outermost call returns."""

    def sample(self, *args, **kwargs):
        state = ranges.state
        state.draft_sampling += 1
        try:
            return original(self, *args, **kwargs)
        finally:
            state.draft_sampling -= 1
            if state.draft_sampling == 0 and state.draft_sample_open:
                state.draft_sample_open = False
                ranges.part_end()

    return sample


def hook_draft_logits(model: Any) -> None:
    """The loaded draft model's logits (`sampling.hook_logits` with the draft's name, on the instance: its class may be
    the target's), and `get_top_tokens` (local argmax reduction: the logits with their argmax fused in) the same way."""
    if model is None or not sampling.hook_logits(model, DRAFT_LOGITS_RANGE, draft=True):
        return
    inner = ranges.unwrapped(model)
    top = getattr(inner, "get_top_tokens", None)
    if callable(top) and getattr(top, ranges.ORIGINAL, None) is None:
        wrapper = functools.wraps(top)(sampling.as_logits(top, DRAFT_LOGITS_RANGE, True))
        setattr(wrapper, ranges.ORIGINAL, top)
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
    return ranges.rows(ranges.first_tensor(args, kwargs))


def as_proposing(original: Callable) -> Callable:
    """A model-free proposer's `propose` (n-gram, suffix decoding): PROPOSE_RANGE around it, payload the requests it
    proposes for (how many tokens it proposed is known only when it returns; the next verify forward's tokens say
    it). Dummy proposals (`dummy_run=True`) get no range."""

    def propose(self, *args, **kwargs):
        state = ranges.state
        if state.quiet or state.depth or kwargs.get("dummy_run"):
            return original(self, *args, **kwargs)
        ranges.backend.push(PROPOSE_RANGE, _proposed_rows(args, kwargs))
        try:
            return original(self, *args, **kwargs)
        finally:
            ranges.backend.pop()

    return propose


# V1 proposers' sampling calls (their logits are the loaded model's, `hook_draft_logits`).
V1_SAMPLING = ("_sample_draft_tokens", "_greedy_sample")
# V2 speculators' logits and sampling methods (`DraftModelSpeculator.sample_draft` calls the logits).
V2_TOKEN = (("compute_draft_logits", draft_logits_method), ("get_draft_top_tokens", draft_logits_method),
            ("sample_draft", draft_sampling))
