"""NVTX push/pop ranges with an integer payload, from whichever NVTX binding this process has.

Choice of binding, in order:

1. The `nvtx` package (`nvtx.push_range(name, payload=n)`): the only Python binding that carries a payload,
   which is how a forward range says how many tokens it processed. Under nsys 2022.4 only `nvtx` 0.2.10 and
   0.2.11 are recorded (0.2.12–0.2.17 emit nothing there; newer nsys records them); the launcher warns about
   that combination.
2. `torch.cuda.nvtx.range_push(name)` on CUDA builds of torch: recorded by every nsys, but without a payload,
   so phases (prefill/decode) cannot be read from the trace. Used only when `nvtx` is not importable.
3. Nothing: ranges become no-ops, and `backend()` says so.

On the torch route (`profile --profiler torch`, `NSYS_CC_TORCH_RANGES=1`) the ranges are torch.profiler ranges
instead (`torch_backend`), with their payload in their name.

Ranges are in NVTX's default domain with the registered-string name given, so the trace shows exactly that
name (2022.4 exports put it in `StringIds` through `textId`; newer ones may prefix `:` for the default domain).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import NamedTuple

from ..contract import ENV_TORCH_RANGES


class Backend(NamedTuple):
    """A way to open and close NVTX push/pop ranges on the calling thread.

    name: "nvtx", "torch.cuda.nvtx" or "none". payload: whether `push` records its integer payload.
    """

    name: str
    payload: bool
    push: Callable[[str, int], None]
    pop: Callable[[], None]


NONE = Backend("none", False, lambda name, payload: None, lambda: None)


def _nvtx_backend() -> Backend | None:
    try:
        import nvtx
    except ImportError:
        return None

    def push(name: str, payload: int) -> None:
        # `int(...)`: a numpy or tensor integer would be recorded as a double, or refused.
        nvtx.push_range(name, payload=int(payload))

    return Backend("nvtx", True, push, lambda: nvtx.pop_range())


def _torch_backend() -> Backend | None:
    try:
        import torch
    except ImportError:
        return None
    if not (torch.version.cuda and torch.cuda.is_available()):
        return None
    rng = torch.cuda.nvtx
    return Backend("torch.cuda.nvtx", False, lambda name, payload: rng.range_push(name), lambda: rng.range_pop())


def choose() -> Backend:
    """The binding of this process: the torch.profiler ranges of the torch route when the launcher asks for them
    (`NSYS_CC_TORCH_RANGES=1`, `torch_backend`), else the best NVTX binding importable (see the module docstring for
    the order)."""
    if os.environ.get(ENV_TORCH_RANGES, "") not in ("", "0"):
        from . import torch_backend

        return Backend(torch_backend.NAME, True, *torch_backend.functions())
    return _nvtx_backend() or _torch_backend() or NONE
