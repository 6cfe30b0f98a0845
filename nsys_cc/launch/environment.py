"""The environment a profile's runs inherit, checked once before the first run and cleaned for every run.

- `OWN`: the variables nsys-cc sets for each run itself (`contract`: the plugin's switch, the warm-up count, where
  the driver dumps vLLM's metrics and writes the torch trace, the torch ranges). One left in the user's environment
  (an earlier shell, a notebook) is never handed on: a leftover `NSYS_CC_TORCH_TRACE` made an nsys route's benchmark
  write a torch trace wherever it pointed, outside `-o`, a leftover `NSYS_CC_METRICS_OUT` a plain run dump metrics
  there, `NSYS_CC_TORCH_RANGES=1` an nsys run record no NVTX range ("plugin not loaded"). `child` is the environment
  of a run: the user's without them, then the run's own; `check` says which were found (a warning each).
- `check`: what would break the runs, refused before any runs with one line naming the variable: what the recorder
  refuses of the environment (`Recorder.check_environment`: a `NSYS_CC_TORCH_SETTINGS` that names no setting of the
  torch profiler — checked here, where the error names it, not in the driver's log, where a newline in it lost the
  name —, or set for the nsys route, to which it does not belong); and `VLLM_ENABLE_V1_MULTIPROCESSING` other than 0
  where the runs need vLLM's engine in the benchmark's process (a recorder that runs there, `runs_in_process`: the
  torch profiler; the CPU's one-rank runs, which nsys records without following vLLM's engine process) — such runs
  failed with "no model_executable() ranges (plugin not loaded…)" and no word of the variable.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from ..contract import ENV_METRICS_OUT, ENV_PLUGIN, ENV_TORCH_RANGES, ENV_TORCH_TRACE, ENV_WARMUP_ITERS
from ..errors import InputError
from .recorders.base import Recorder

OWN = (ENV_PLUGIN, ENV_WARMUP_ITERS, ENV_METRICS_OUT, ENV_TORCH_RANGES, ENV_TORCH_TRACE)
MULTIPROCESSING = "VLLM_ENABLE_V1_MULTIPROCESSING"


def child(run_env: Mapping[str, str], environ: Mapping[str, str] = os.environ) -> dict[str, str]:
    """The environment of one run: `environ` without the variables nsys-cc sets per run (`OWN`), then `run_env`."""
    return {**{k: v for k, v in environ.items() if k not in OWN}, **run_env}


def _shown(value: str) -> str:
    return repr(value if len(value) <= 80 else value[:79] + "…")


def check(recorder: Recorder, *, gpu: bool, tp: int = 1, environ: Mapping[str, str] = os.environ) -> list[str]:
    """InputError (naming the variable) for what in `environ` would break a profile's runs recorded by `recorder`
    (module docstring); else a warning for each of nsys-cc's own per-run variables found there, which the runs do not
    inherit."""
    recorder.check_environment(environ)
    multiprocessing = environ.get(MULTIPROCESSING)
    in_process = bool(recorder.runs_in_process) or (not gpu and tp == 1)
    if multiprocessing is not None and multiprocessing.strip() != "0" and in_process:
        why = recorder.runs_in_process or ("on the CPU nsys-cc runs vLLM's engine in the benchmark's process, where "
                                           "nsys records its ranges")
        raise InputError(f"{MULTIPROCESSING}={_shown(multiprocessing)} in the environment: {why}; unset it (nsys-cc "
                         "sets it to 0) or set it to 0")
    return [f"{name}={_shown(environ[name])} in the environment is nsys-cc's own, set for each run: ignored"
            for name in OWN if name in environ]
