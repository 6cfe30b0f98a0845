"""The plugin's ranges as PyTorch-profiler ranges (the torch route, `profile --profiler torch`): the push and pop of a
`nvtx_backend.Backend` like the NVTX ones (`nvtx_backend.choose` makes it), whose push opens a
`torch.profiler.record_function` range — a Kineto `user_annotation` — under the same name, and whose pop closes it.

The payload travels in the name (`contract.PAYLOAD_NAME`: `model_executable()#128`), since Kineto records no argument
of such a range; the Kineto reader splits it back (`nsys_cc.trace.payload_names`).

No cost when no profiler runs: a push first asks torch whether a profiler is on in this thread (a C call, ~50 ns) and
opens nothing when none is; only then does it pay for the range (torch's `record_function` op, ~13 µs a range on the
2-core development machine, most of it the op's dispatch, outside the range's own times). Each thread keeps the stack
of its open ranges, so that a range opened before the profiler started is closed as nothing, and one opened while it
ran is closed even after it stopped (tests/vllm/test_torch_backend.py). The route's whole cost against nsys:
`benchmarks/torch_vs_nsys.py` (docs/PERFORMANCE.md).

torch is imported when the functions are made (`functions()`), inside a vLLM process that has it already.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from ..contract import PAYLOAD_NAME

NAME = "torch.profiler"


class _Open(threading.local):
    stack: list

    def __init__(self) -> None:
        self.stack = []


def functions() -> tuple[Callable[[str, int], None], Callable[[], None]]:
    """(push, pop) of the torch.profiler ranges (payload in the name); `nvtx_backend.choose` makes the `Backend` of
    them (named `NAME`, with payloads)."""
    import torch
    from torch._C._autograd import _profiler_enabled

    enter = torch.ops.profiler._record_function_enter_new
    leave = torch.ops.profiler._record_function_exit._RecordFunction
    open_ = _Open()

    def push(name: str, payload: int) -> None:
        # `int(...)`: a numpy or tensor integer in the name would read as another number, or not at all
        open_.stack.append(enter(PAYLOAD_NAME.format(name=name, payload=int(payload)), None)
                           if _profiler_enabled() else None)

    def pop() -> None:
        stack = open_.stack
        handle = stack.pop() if stack else None
        if handle is not None:
            leave(handle)

    return push, pop
