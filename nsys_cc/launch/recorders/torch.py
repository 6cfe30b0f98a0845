"""vLLM's torch profiler as a profile's recorder (`--profiler torch`): the benchmark driver under plain Python, with
`NSYS_CC_TORCH_RANGES=1` (the plugin's ranges as torch.profiler ranges) and
`NSYS_CC_TORCH_TRACE=<base>.pt.trace.json.gz` (the driver runs the torch profiler and writes its Kineto trace there:
`nsys_cc.vllm.torch_profiler`), and no export. vLLM's engine then runs in the driver's process
(`VLLM_ENABLE_V1_MULTIPROCESSING=0` on the GPU too), where the profiler is; the user's environment wins. What it records
is `NSYS_CC_TORCH_SETTINGS`'s (checked before the runs).
"""

from __future__ import annotations

import importlib.metadata
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from ...contract import ENV_TORCH_RANGES, ENV_TORCH_SETTINGS, ENV_TORCH_TRACE, TORCH_TRACE_SUFFIX
from ...errors import InputError
from .base import Commands, Recorder

# The torch route: the torch profiler runs in the driver's process, so vLLM's engine must run there too.
ENV = {"VLLM_ENABLE_V1_MULTIPROCESSING": "0"}


def env(trace: Path, environ: Mapping[str, str] = os.environ) -> dict[str, str]:
    """The torch route's additions to a run's environment: the plugin's ranges as torch.profiler ranges, the trace's
    path for the driver's profiler, and vLLM's engine in the driver's process (the user's environment wins)."""
    out = {ENV_TORCH_RANGES: "1", ENV_TORCH_TRACE: str(trace)}
    out.update({k: v for k, v in ENV.items() if k not in environ})
    return out


class Torch(Recorder):
    """The torch profiler, run by the benchmark driver in its own process: a Kineto trace, no export."""

    name = "torch"
    under = "the torch profiler"
    trace_suffix = TORCH_TRACE_SUFFIX
    recorded_suffix = TORCH_TRACE_SUFFIX
    suffixes = (TORCH_TRACE_SUFFIX,)
    runs_in_process = "the torch profiler runs in the benchmark's process and sees only an engine that runs there"

    def version(self, binary: str) -> str | None:
        try:
            return importlib.metadata.version("torch")
        except importlib.metadata.PackageNotFoundError:
            return None

    def commands(self, binary: str, program: Sequence[str], base: Path, *, gpu: bool, trace: str | None = None,
                 extra: Sequence[str] = (), tp: int = 1, environ: Mapping[str, str] | None = None) -> Commands:
        return Commands(list(program), [], env(Path(f"{base}{self.trace_suffix}"),
                                               os.environ if environ is None else environ))

    def refuse(self, *, target_tp: int = 1, draft_tp: int = 1, trace: str | None = None,
               nsys_args: Sequence[str] = ()) -> None:
        """Tensor-parallel models (their ranks run in vLLM's worker processes, out of reach of the profiler that runs
        in the benchmark's process) and nsys's own options."""
        for param, tp in (("target_tp", target_tp), ("draft_tp", draft_tp)):
            if tp != 1:
                raise InputError(f"profiler {self.name} with {param} {tp}: the torch profiler runs in the benchmark's "
                                 "process and does not see vLLM's tensor-parallel workers; profile tensor-parallel "
                                 "models with profiler nsys", param=param)
        if trace is not None or list(nsys_args):
            which = "trace" if trace is not None else "nsys_args"
            raise InputError(f"{which} is an nsys option, which the torch route does not take ({ENV_TORCH_SETTINGS} "
                             "chooses what its profiler records)", param=which)

    def check_environment(self, environ: Mapping[str, str]) -> None:
        from ...vllm.torch_profiler import settings_of

        try:
            settings_of(environ.get(ENV_TORCH_SETTINGS, ""))
        except ValueError as exc:
            raise InputError(str(exc)) from None


TORCH = Torch()
