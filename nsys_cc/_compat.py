"""Every old name nsys_cc still answers to, in one place, with the version it goes in.

Each shim's body stays where its object lives (a method stays on its class), but its warning and its end come from
here: `SHIMS` lists them all (the old name, what to use instead, the version that removes it), and `warn` is the
one DeprecationWarning they give. An old name with no caller outside the tests is removed, not listed.
"""

from __future__ import annotations

import warnings

# old name -> (what to use, the version that removes it)
SHIMS: dict[str, tuple[str, str]] = {
    "Trace.summary()": ("Trace.info() (a TraceInfo; .to_dict() for this dict)", "0.2.0"),
    "TraceSet.range": ("TraceSet.range_name", "0.2.0"),
    # "scope" meant both an engine's window in an interleaved trace and vLLM's own NVTX scopes: the engine labels
    # are `engines` (issue 31)
    "scopes=": ("engines= (the engine label of each trace's model)", "0.2.0"),
    "--scope": ("--engine", "0.2.0"),
    # an import path, kept for environments whose vllm.general_plugins entry point names it (no warning: it is
    # imported inside vLLM's processes, where a warning would only be noise)
    "nsys_cc.launch.vllm_plugin": ("nsys_cc.vllm.plugin", "0.2.0"),
}


def renamed(old: str, old_value, new_value, new: str):
    """The value of a renamed keyword argument: `new_value`, else `old_value` given under its old name `old` (a key
    of `SHIMS`, warned), refused when both are given."""
    if old_value is None:
        return new_value
    if new_value is not None:
        from .errors import InputError

        raise InputError(f"give {new} only ({old.rstrip('=')} is its old name)", param=new)
    warn(old, stacklevel=4)
    return old_value


def warn(old: str, stacklevel: int = 3) -> None:
    """The DeprecationWarning of the shim `old` (a key of `SHIMS`): what to use instead and when it goes."""
    new, removed_in = SHIMS[old]
    warnings.warn(f"{old} is deprecated and goes in nsys_cc {removed_in}: use {new}", DeprecationWarning,
                  stacklevel=stacklevel)
