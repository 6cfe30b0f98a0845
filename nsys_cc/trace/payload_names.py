"""Payloads carried in range names: what the torch route (`profile --profiler torch`) writes and the Kineto reader
reads back.

Kineto records no argument of a `torch.profiler.record_function` range (neither `args` nor with `record_shapes`), so
the vLLM plugin's torch backend (`nsys_cc.vllm.torch_backend`) names each of its ranges
`contract.PAYLOAD_NAME.format(name=…, payload=…)` — `model_executable()#128`: a forward of 128 tokens,
`nsys_cc:engine tiny-llama-target#2`: engine 2's generate call. `split_payloads` turns such names back into the
plugin's names and a payload column, as NVTX payloads are on an nsys export, so that every analysis sees the same
ranges and payloads on either route. Only the plugin's own ranges are split (`contract.PAYLOAD_RANGES` and the engine
ranges): any other annotation keeps its name whole, `#` and digits included.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from ..contract import ENGINE_RANGE_PREFIX, PAYLOAD_NAME_RE, PAYLOAD_RANGES

_RULE = re.compile(PAYLOAD_NAME_RE)
_OWN = frozenset(PAYLOAD_RANGES)


def split_name(name: str) -> tuple[str, float]:
    """(the range's name, its payload) of one annotation name: the plugin's name and payload when `name` is one of its
    ranges with a payload (`contract.PAYLOAD_NAME`), else (`name`, NaN)."""
    m = _RULE.match(name)
    if m is not None:
        base = m.group("name")
        if base in _OWN or (base.startswith(ENGINE_RANGE_PREFIX) and len(base) > len(ENGINE_RANGE_PREFIX)):
            return base, float(int(m.group("payload")))
    return name, np.nan


def split_payloads(names: list[str]) -> tuple[list[str], np.ndarray | None]:
    """The names with the plugin's payloads split off, and the payloads (float64, NaN where a name carries none);
    (`names`, None) when no name carries one. Each distinct name is parsed once."""
    if not names:
        return names, None
    codes, distinct = pd.factorize(np.asarray(names, dtype=object))
    parts = [split_name(n) for n in distinct]
    payloads = np.array([p for _, p in parts], dtype=np.float64)
    if np.isnan(payloads).all():
        return names, None
    bases = np.array([n for n, _ in parts], dtype=object)
    return bases[codes].tolist(), payloads[codes]
