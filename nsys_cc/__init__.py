"""nsys_cc: the cost coefficient c of speculative decoding, measured from Nsight Systems traces.

Notebook entry points (imported lazily, so the vLLM plugin loads no pandas into vLLM's processes):
- `open_trace(path)` → a `Trace` whose tables are pandas DataFrames;
- `project(trace, ranges)` → NVTX ranges with their GPU projection;
- `cost_coefficient(target, drafts, ...)` → a `CostCoefficientResult` (`.summary`, `.coefficients`, `.kernels`, …);
- `speedup` → the speculative-decoding speedup model (Leviathan et al. 2023, Thm 3.8);
- `forecast` / `StepCostModel` → the step cost model fitted on speculative runs measured in place.
"""

from __future__ import annotations

import importlib

__version__ = "0.1.0"

_LAZY = {
    "open_trace": ("nsys_cc.trace", "open_trace"),
    "Trace": ("nsys_cc.trace", "Trace"),
    "project": ("nsys_cc.analysis.projection", "project"),
    "cost_coefficient": ("nsys_cc.analysis.coefficient", "cost_coefficient"),
    "CostCoefficientResult": ("nsys_cc.analysis.coefficient", "CostCoefficientResult"),
    "speedup": ("nsys_cc.analysis.speedup", None),
    "forecast": ("nsys_cc.analysis.forecast", None),
    "StepCostModel": ("nsys_cc.analysis.forecast", "StepCostModel"),
    "write_report": ("nsys_cc.report", "write_report"),
    "render": ("nsys_cc.report", "render"),
}

__all__ = [*_LAZY, "__version__"]


def __getattr__(name: str):
    if name not in _LAZY:
        raise AttributeError(f"module 'nsys_cc' has no attribute {name!r}")
    module, attr = _LAZY[name]
    mod = importlib.import_module(module)
    return mod if attr is None else getattr(mod, attr)
