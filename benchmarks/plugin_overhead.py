"""Overhead of the nsys_cc vLLM plugin: vLLM's benchmark latency with the plugin off and on, several runs.

Usage: `.venv/bin/python benchmarks/plugin_overhead.py [--runs 3] [--model tiny-llama-target] [--no-nsys]`

Two measurements:
1. End to end: `python -m nsys_cc.vllm.bench` (vLLM's latency benchmark) on one model, `--runs` times with
   `NSYS_CC_PLUGIN=0` and `--runs` times with `NSYS_CC_PLUGIN=1`, alternating which goes first in each round so
   that drift on a shared machine hits both alike; by default under `nsys profile -t nvtx` as `nsys-cc profile`
   runs it (`--no-nsys`: plain). Reported per setting: the median over runs of vLLM's `avg_latency` (ms per
   iteration, measured iterations only) and every run's value; overhead = (on − off) ÷ off of those medians,
   and the same for the fastest run of each setting (on a shared machine the least disturbed one).
2. Per forward: the cost the wrapper adds to one call of a do-nothing `_model_forward` (a fake V1 runner),
   median of 7 timings of 20,000 calls, unpatched vs patched, in this process (no NVTX tool attached, so it
   is the Python cost of the wrapping and the NVTX call without recording).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import timeit
import types
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from nsys_cc.launch import commands, models  # noqa: E402
from nsys_cc.trace.nsys import require_nsys  # noqa: E402
from nsys_cc.vllm import nvtx_backend, plugin as vllm_plugin  # noqa: E402
from nsys_cc.vllm.hooks import ranges  # noqa: E402


def bench_once(model: str, plugin: bool, opts: commands.BenchOptions, under_nsys: bool, work: Path) -> float:
    """vLLM's avg_latency (s) of one benchmark run with the plugin on or off."""
    out = work / f"run-{plugin}-{len(list(work.iterdir()))}"
    args = commands.bench_args(model, out.with_suffix(".json"), opts, gpu=False)
    env = {**os.environ, **commands.bench_env(opts, gpu=False), vllm_plugin.ENV_PLUGIN: "1" if plugin else "0"}
    if under_nsys:
        args = [require_nsys(), "profile", "-t", "nvtx", "-s", "none", "--cpuctxsw=none", "-f", "true",
                "-o", str(out), *args]
    done = subprocess.run(args, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"benchmark failed:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    return json.loads(out.with_suffix(".json").read_text())["avg_latency"]


def end_to_end(model: str, runs: int, opts: commands.BenchOptions, under_nsys: bool) -> dict:
    results = {"off": [], "on": []}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(runs):
            for plugin in ((False, True) if r % 2 == 0 else (True, False)):
                latency = bench_once(model, plugin, opts, under_nsys, Path(tmp))
                results["on" if plugin else "off"].append(latency * 1e3)
                print(f"  run {r + 1}/{runs} plugin {'on ' if plugin else 'off'}: {latency * 1e3:.3f} ms", flush=True)
    off, on = statistics.median(results["off"]), statistics.median(results["on"])
    best_off, best_on = min(results["off"]), min(results["on"])
    return {"off_ms": results["off"], "on_ms": results["on"], "median_off_ms": off, "median_on_ms": on,
            "overhead": (on - off) / off, "min_off_ms": best_off, "min_on_ms": best_on,
            "overhead_of_minimums": (best_on - best_off) / best_off}


def per_forward() -> dict:
    """ns added per forward call by the wrapper (see the module docstring)."""

    class Runner:
        def _model_forward(self, input_ids=None, positions=None):
            return None

        def execute_model(self, scheduler_output):
            return self._model_forward(positions=None)

    sched = types.SimpleNamespace(total_num_scheduled_tokens=1)
    runner = Runner()
    plain = min(timeit.repeat(lambda: runner.execute_model(sched), number=20_000, repeat=7)) / 20_000
    ranges.backend = nvtx_backend.choose()
    vllm_plugin._patch_v1_runner(types.SimpleNamespace(GPUModelRunner=Runner))
    wrapped = min(timeit.repeat(lambda: runner.execute_model(sched), number=20_000, repeat=7)) / 20_000
    return {"backend": ranges.backend.name, "plain_ns": plain * 1e9, "wrapped_ns": wrapped * 1e9,
            "added_ns": (wrapped - plain) * 1e9}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="tiny-llama-target")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--no-nsys", action="store_true", help="run the benchmark without nsys")
    ap.add_argument("--json", type=Path, help="also write the results here")
    a = ap.parse_args()
    opts = commands.BenchOptions(input_len=128, output_len=8, batch_size=1, warmup_iters=3, iters=10)
    model = models.resolve(a.model).path
    print(f"plugin overhead on {a.model} ({'plain' if a.no_nsys else 'under nsys -t nvtx'}), "
          f"{a.runs} runs per setting, input 128, output 8, 10 measured iterations", flush=True)
    e2e = end_to_end(model, a.runs, opts, not a.no_nsys)
    fwd = per_forward()
    print(f"vLLM avg latency per iteration: plugin off {e2e['median_off_ms']:.3f} ms, on {e2e['median_on_ms']:.3f} ms "
          f"(medians of {a.runs}); overhead {e2e['overhead']:+.1%}")
    print(f"  fastest runs (least disturbed by other work on the machine): off {e2e['min_off_ms']:.3f} ms, "
          f"on {e2e['min_on_ms']:.3f} ms; overhead {e2e['overhead_of_minimums']:+.1%}")
    print(f"per forward ({fwd['backend']} backend, no tool attached): {fwd['plain_ns']:.0f} ns plain, "
          f"{fwd['wrapped_ns']:.0f} ns wrapped: +{fwd['added_ns']:.0f} ns")
    if a.json:
        a.json.write_text(json.dumps({"end_to_end": e2e, "per_forward": fwd}, indent=2) + "\n")


if __name__ == "__main__":
    main()
