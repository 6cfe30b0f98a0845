"""Cost of live timing (`NSYS_CC_LIVE=1`) on vLLM's engine step.

Usage: `.venv/bin/python benchmarks/live_overhead.py [--batch 1,8,64,256] [--gamma 3] [--runs 3] [--no-vllm]`

Three measurements:
1. Per step, in the worker (the engine's path): the plugin's wrappers and the live hooks around a fake V1 runner
   whose `execute_model`, `_model_forward` and `sample_tokens` do nothing and a draft `torch.nn.Module` that returns
   its input — one step = execute_model (one target forward) + sample_tokens (γ draft forwards, the records of the
   previous step drained onto the output) — unpatched vs patched with `NSYS_CC_LIVE=1` and NVTX off, for a scheduler
   output of B requests verifying γ + 1 tokens each. Median of 7 timings of 2,000 steps; the difference is what
   live timing adds to every step (CPU clock; on a GPU each mark is a CUDA event record instead).
2. Per step, in the API server (not on the engine's path: the front end runs in another process): the stat
   logger's `record` for one step's stats, and the window estimate it refreshes at most once a second.
3. End to end (skipped with `--no-vllm`): vLLM's offline `LLM` with a draft model (CPU build, tiny models), the time
   per generated token of a batch, `--runs` times with live timing off and on, alternating which goes first; the
   step period that live timing itself reports gives the cost of 1. as a share of a real step.
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

from nsys_cc.launch.models import MODELS_DIR  # noqa: E402

STEPS = 2000


def scheduler_output(batch: int, gamma: int):
    reqs = [f"r{i}" for i in range(batch)]
    return types.SimpleNamespace(
        num_scheduled_tokens={r: gamma + 1 for r in reqs}, total_num_scheduled_tokens=batch * (gamma + 1),
        scheduled_spec_decode_tokens={r: [1] * gamma for r in reqs}, scheduled_new_reqs=[],
        scheduled_cached_reqs=types.SimpleNamespace(req_ids=reqs),
    )


def fake_runner_classes(gamma: int):
    import torch

    class Draft(torch.nn.Module):
        def forward(self, input_ids=None, positions=None):
            return input_ids

    class Runner:
        def __init__(self):
            self.drafter = Draft()

        def execute_model(self, scheduler_output, intermediate_tensors=None):
            self._model_forward(input_ids=None, positions=None)

        def _model_forward(self, input_ids=None, positions=None):
            return None

        def sample_tokens(self, grammar_output):
            for _ in range(gamma):
                self.drafter(input_ids=None, positions=None)
            return types.SimpleNamespace(req_ids=["r0"])

    return Runner


def per_step_worker(batch: int, gamma: int) -> dict:
    """µs per step: plain fake runner vs the same with the plugin's wrappers and live hooks."""
    os.environ["NSYS_CC_LIVE"] = "1"
    os.environ.pop("NSYS_CC_PLUGIN", None)
    from nsys_cc.live import channel
    from nsys_cc.vllm import plugin as vllm_plugin
    from nsys_cc.vllm.hooks import forwards, ranges

    so = scheduler_output(batch, gamma)
    plain_cls = fake_runner_classes(gamma)
    live_cls = fake_runner_classes(gamma)
    ranges.live_on = True
    vllm_plugin._patch_v1_runner(types.SimpleNamespace(GPUModelRunner=live_cls))
    plain, live = plain_cls(), live_cls()
    forwards.hook_module(live.drafter, vllm_plugin.DRAFT_FORWARD_RANGE, scheduled=False)
    channel._timer = None

    def step(runner):
        def run():
            runner.execute_model(so)
            runner.sample_tokens(None)
        return run

    out = {}
    for name, runner in (("plain", plain), ("live", live)):
        times = timeit.repeat(step(runner), number=STEPS, repeat=7)
        out[name] = statistics.median(times) / STEPS * 1e6
    out["added_us"] = out["live"] - out["plain"]
    return out


def per_step_front_end(gamma: int, window: int = 256) -> dict:
    """µs per step of the API server's stat logger, and ms per window estimate."""
    from nsys_cc.analysis.tune.live import estimate
    from nsys_cc.live import channel
    from nsys_cc.live.stat_logger import LiveStatLogger
    from nsys_cc.live.timing import VERIFY, StepRecord

    record = StepRecord(VERIFY, gamma + 1.0, 0.02, 0.009, [0.0007] * gamma)
    stats = types.SimpleNamespace(spec_decoding_stats=None)
    setattr(stats, channel.FIELD, channel.encode([record]))
    config = types.SimpleNamespace(model_config=types.SimpleNamespace(served_model_name="bench"))
    logger = LiveStatLogger(config, 0)
    logger._refreshed = float("inf")  # time the per-step path alone
    t = timeit.repeat(lambda: logger.record(stats, None), number=STEPS, repeat=5)
    records = [record] * window
    e = timeit.repeat(lambda: estimate(records, 0.5), number=20, repeat=5)
    return {"record_us": statistics.median(t) / STEPS * 1e6, "estimate_ms": statistics.median(e) / 20 * 1e3}


DRIVER = """
import json, os, sys, time
if __name__ == "__main__":
    from nsys_cc.vllm import plugin as vllm_plugin
    vllm_plugin.register()
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt
    target, draft, gamma, batch, tokens = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
    llm = LLM(model=target, load_format="dummy", skip_tokenizer_init=True, enforce_eager=True,
              gpu_memory_utilization=0.3, disable_log_stats=False, max_model_len=512,
              speculative_config={"method": "draft_model", "model": draft, "num_speculative_tokens": gamma})
    params = SamplingParams(max_tokens=tokens, ignore_eos=True, detokenize=False)
    prompts = [TokensPrompt(prompt_token_ids=list(range(1 + i, 33 + i))) for i in range(batch)]
    llm.generate(prompts, params, use_tqdm=False)
    start = time.perf_counter()
    llm.generate(prompts, params, use_tqdm=False)
    elapsed = time.perf_counter() - start
    out = {"s_per_token": elapsed / tokens}
    for m in llm.get_metrics():
        if m.name == "nsys_cc:step_outside_forward_seconds":
            out["outside_count"] = m.count
        if m.name == "nsys_cc:verify_forward_seconds":
            out["verify_sum"], out["verify_count"] = m.sum, m.count
    print("RESULT " + json.dumps(out))
"""


def end_to_end(runs: int, gamma: int, batch: int, tokens: int) -> dict:
    results: dict[str, list[float]] = {"off": [], "on": []}
    with tempfile.TemporaryDirectory() as tmp:
        driver = Path(tmp) / "driver.py"
        driver.write_text(DRIVER)
        for r in range(runs):
            for live in ((False, True) if r % 2 == 0 else (True, False)):
                # The engine core in its own process, as a server runs it (the stats reach this process the same way).
                env = {**os.environ, "PYTHONPATH": str(REPO), "VLLM_CPU_KVCACHE_SPACE": "1",
                       "NSYS_CC_LIVE": "1" if live else "0"}
                env.pop("NSYS_CC_PLUGIN", None)
                done = subprocess.run(
                    [sys.executable, str(driver), str(MODELS_DIR / "tiny-llama-target"),
                     str(MODELS_DIR / "tiny-llama-draft-xs"), str(gamma), str(batch), str(tokens)],
                    env=env, capture_output=True, text=True)
                lines = [x for x in done.stdout.splitlines() if x.startswith("RESULT ")]
                if done.returncode != 0 or not lines:
                    sys.exit(f"vLLM run failed:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
                res = json.loads(lines[-1][7:])
                results["on" if live else "off"].append(res["s_per_token"] * 1e3)
                print(f"  run {r + 1}/{runs} live {'on ' if live else 'off'}: {res['s_per_token'] * 1e3:.3f} ms/token",
                      flush=True)
    off, on = statistics.median(results["off"]), statistics.median(results["on"])
    return {"ms_per_token": results, "median_off": off, "median_on": on, "overhead": (on - off) / off}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", default="1,8,64,256", help="requests per step, comma-separated")
    ap.add_argument("--gamma", type=int, default=3)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--tokens", type=int, default=64, help="tokens per request in the end-to-end runs")
    ap.add_argument("--no-vllm", action="store_true", help="skip the end-to-end vLLM runs")
    args = ap.parse_args()
    load = os.getloadavg()[0]
    print(f"load average {load:.2f} on {os.cpu_count()} CPUs{' (busy: timings taken under load)' if load > 1 else ''}")
    report: dict = {"load_average": load, "gamma": args.gamma, "worker": {}}
    print(f"1. worker, per engine step (γ = {args.gamma}):")
    for b in (int(x) for x in args.batch.split(",")):
        r = per_step_worker(b, args.gamma)
        report["worker"][b] = r
        print(f"   B = {b:4d}: plain {r['plain']:.2f} µs, live {r['live']:.2f} µs, added {r['added_us']:.2f} µs")
    fe = per_step_front_end(args.gamma)
    report["front_end"] = fe
    print(f"2. API server: record {fe['record_us']:.2f} µs per step, window estimate {fe['estimate_ms']:.3f} ms "
          "(at most once a second)")
    if not args.no_vllm:
        print(f"3. end to end, offline LLM, batch 1, {args.tokens} tokens, live off/on × {args.runs}:")
        e2e = end_to_end(args.runs, args.gamma, 1, args.tokens)
        report["end_to_end"] = e2e
        added = report["worker"].get(1, next(iter(report["worker"].values())))["added_us"]
        print(f"   median ms/token off {e2e['median_off']:.3f}, on {e2e['median_on']:.3f}: "
              f"{e2e['overhead'] * 100:+.2f} % (run-to-run noise included)")
        share = added / (e2e["median_off"] * 1e3) * 100
        print(f"   live hooks (B = 1) ÷ a step of {e2e['median_off']:.2f} ms: {share:.3f} %")
    print(json.dumps(report))


if __name__ == "__main__":
    main()
