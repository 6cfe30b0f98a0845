"""nsys_cc: the cost coefficient c of speculative decoding, measured from Nsight Systems traces.

What a notebook needs, all here:
- `analyze(source, ...)`: the front door, what `nsys-cc analyze` takes — traces, a profile's output directory as it
  is (interleaved, speculative, tensor-parallel), a sweep directory or a manifest — and its result
  (`nsys_cc.front`);
- `cost_coefficient(target, drafts, ...)` → a `CostCoefficientResult`: `.summary`, `.coefficients`, `.forwards`,
  `.kernel_summary`, `.kernel_diff`, `.categories`, `.diagnosis`, `.verdicts`, `.speculative`, `.notes`;
  `.render(fmt)`, `.figures()`, `.write_report(dir)` (its tables are yours to change; results compare by value);
  `cost_coefficient_runs(runs, ...)` the same over several runs of every model (`.runs`);
- `kernels(trace, range_name=, phase=)` → the GPU ops per forward range of a trace, one row per kernel name;
  `kernel_diff(a, b, ...)` → two traces (a target and a draft), or two ranges of one trace, kernel by kernel: where
  the draft saves time (`nsys_cc.analysis.kernels.per_kernel`, `nsys_cc.analysis.kernels.compare`);
- `profile(target, drafts, out_dir, repeat=, precision=, max_repeat=, ...)`, or `profile(ProfileRequest(...))`:
  profile with vLLM under nsys, then the above (what `nsys-cc profile` does; `nsys_cc.front.profile`: the profile
  workflow, `nsys_cc.workflows.profile`); `ProfileRequest`, the request its arguments make, stored in the records;
- `open_trace(path)` → a `Trace` whose tables are pandas DataFrames (`help(Trace.kernels)` lists the columns) and
  whose `.info()` is a `TraceInfo` (paths, versions, tables → rows); `project(trace, ranges)` → NVTX ranges with
  their GPU projection;
- `speedup` (the speculative-decoding speedup model, Leviathan et al. 2023 Thm 3.8: `best_gamma`,
  `walltime_factor`, `judge`, …) and `dsi` (the DSI simulation, Timor et al. 2024);
- `write_report`, `render`, `make_figures`, and the plot modules `plots` and `speedup_plots`;
- `forecast` / `StepCostModel`: the step cost model fitted on speculative runs measured in place
  (`CostCoefficientResult.speculative`, `nsys_cc.analysis.speculative.in_place`);
- `NsysCCError`: the base of every error a user can cause.

The names are imported on first use (PEP 562), not when `nsys_cc` is: the vLLM plugin (`nsys_cc.vllm.plugin`)
imports this package inside every vLLM process, where pandas, SQLAlchemy and matplotlib must not be loaded for
nothing (measured: `import nsys_cc` peaks at 12 MB; importing the analysis and the report eagerly, at 190 MB and
seconds of start-up, per process). `dir(nsys_cc)` and tab completion list them and nothing else (`__all__`: the
functions, classes and modules above; the package's layers — `nsys_cc.trace`, `.analysis`, `.report`, … — stay
importable by name, but are not the facade), and editors and type checkers see them through the `TYPE_CHECKING`
imports below.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from . import report as _report  # noqa: F401  (binds a result's views, `nsys_cc.result_views`; loads nothing heavy)
from .version import __version__ as __version__  # (in __all__)

# name → (module, attribute); attribute None: the module itself.
_LAZY: dict[str, tuple[str, str | None]] = {
    "analyze": ("nsys_cc.front", "analyze"),
    "cost_coefficient": ("nsys_cc.analysis.coefficient.measure", "cost_coefficient"),
    "cost_coefficient_runs": ("nsys_cc.analysis.coefficient.over_runs", "cost_coefficient_runs"),
    "profile": ("nsys_cc.front", "profile"),
    "ProfileRequest": ("nsys_cc.request", "ProfileRequest"),
    "kernels": ("nsys_cc.analysis.kernels.per_kernel", "kernels"),
    "kernel_diff": ("nsys_cc.analysis.kernels.compare", "kernel_diff"),
    "CostCoefficientResult": ("nsys_cc.analysis.coefficient.result", "CostCoefficientResult"),
    "ModelForwards": ("nsys_cc.analysis.coefficient.result", "ModelForwards"),
    "open_trace": ("nsys_cc.trace", "open_trace"),
    "Trace": ("nsys_cc.trace", "Trace"),
    "TraceInfo": ("nsys_cc.trace", "TraceInfo"),
    "project": ("nsys_cc.analysis.forwards.projection", "project"),
    "speedup": ("nsys_cc.analysis.theory.speedup", None),
    "dsi": ("nsys_cc.analysis.theory.dsi", None),
    "acceptance": ("nsys_cc.analysis.profile_dir.acceptance", None),
    "metrics": ("nsys_cc.analysis.metrics", None),
    "forecast": ("nsys_cc.analysis.speculative.forecast", None),
    "StepCostModel": ("nsys_cc.analysis.speculative.forecast", "StepCostModel"),
    "write_report": ("nsys_cc.report", "write_report"),
    "render": ("nsys_cc.report", "render"),
    "make_figures": ("nsys_cc.report", "make_figures"),
    "plots": ("nsys_cc.report.result_plots", None),
    "speedup_plots": ("nsys_cc.report.speedup_plots", None),
    "NsysCCError": ("nsys_cc.errors", "NsysCCError"),
    "tune": ("nsys_cc.workflows.tune", "tune"),
    "TuneRequest": ("nsys_cc.workflows.tune_request", "TuneRequest"),
}

# The public API: every lazy name, and the version.
__all__ = sorted([*_LAZY, "__version__"])

if TYPE_CHECKING:  # the names of _LAZY for editors and type checkers (`X as X`: a re-export)
    from .analysis import metrics as metrics
    from .analysis.coefficient.measure import cost_coefficient as cost_coefficient
    from .analysis.coefficient.over_runs import cost_coefficient_runs as cost_coefficient_runs
    from .analysis.coefficient.result import (
        CostCoefficientResult as CostCoefficientResult,
        ModelForwards as ModelForwards,
    )
    from .analysis.forwards.projection import project as project
    from .analysis.kernels.compare import kernel_diff as kernel_diff
    from .analysis.kernels.per_kernel import kernels as kernels
    from .analysis.profile_dir import acceptance as acceptance
    from .analysis.speculative import forecast as forecast
    from .analysis.speculative.forecast import StepCostModel as StepCostModel
    from .analysis.theory import dsi as dsi, speedup as speedup
    from .errors import NsysCCError as NsysCCError
    from .front import analyze as analyze, profile as profile
    from .report import (
        make_figures as make_figures,
        render as render,
        result_plots as plots,  # noqa: F401 (a re-export under its public name)
        speedup_plots as speedup_plots,
        write_report as write_report,
    )
    from .request import ProfileRequest as ProfileRequest
    from .trace import Trace as Trace, TraceInfo as TraceInfo, open_trace as open_trace
    from .workflows.tune import tune as tune
    from .workflows.tune_request import TuneRequest as TuneRequest


def __getattr__(name: str):
    if name not in _LAZY:
        raise AttributeError(f"module 'nsys_cc' has no attribute {name!r}")
    module, attr = _LAZY[name]
    mod = importlib.import_module(module)
    value = mod if attr is None else getattr(mod, attr)
    globals()[name] = value  # later look-ups skip __getattr__
    return value


def __dir__() -> list[str]:
    return list(__all__)
