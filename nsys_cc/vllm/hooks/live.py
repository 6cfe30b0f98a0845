"""The live timing's own hooks (`NSYS_CC_LIVE=1`, `nsys_cc.live`): a step's output carries the live step records
completed so far, and `nsys_cc.live.PATCHES` (its stat loggers in vLLM's API server) are applied with the same
wrapping. The forwards' and parts' live calls ride on the ranges (`ranges.live_on`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ...live import channel as _live_channel
from . import ranges


def attaching_live_records(original: Callable) -> Callable:
    """sample_tokens(…): the step's output carries the live step records completed so far."""

    def sample_tokens(self, *args, **kwargs):
        return _live_channel.attach(original(self, *args, **kwargs))

    return sample_tokens


def patches(live_patches: dict[str, Callable[[Any, Callable], bool]]) -> dict[str, Callable[[Any], bool]]:
    """`nsys_cc.live.PATCHES` (module name → patch(module, wrap)) as the plugin's patches (module → patch(module))."""
    return {name: _bound(patch) for name, patch in live_patches.items()}


def _bound(patch: Callable[[Any, Callable], bool]) -> Callable[[Any], bool]:
    return lambda module: patch(module, ranges.wrap)
