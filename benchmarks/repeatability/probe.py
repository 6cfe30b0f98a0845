"""Probe for issue 22: per-forward wall times of vLLM's CPU build, one or several models in ONE process, no nsys.

    python benchmarks/repeatability/probe.py --model DIR [--model DIR2 ...] --output-len 32 --iters 5 --warmup 5 \
        [--alternate] --out FILE.json

Each model gets its own `LLM` engine (in-process: VLLM_ENABLE_V1_MULTIPROCESSING=0, the settings `nsys-cc profile`
uses on the CPU). `--alternate`: iterations of the models interleave (m1, m2, m1, m2, ...); `--alternate-steps`:
engine steps interleave (one request per model per iteration, m1 step, m2 step, ...); otherwise each model's
iterations run back to back. Every forward's wall time is taken with perf_counter_ns around the V1 runner's
`_model_forward` (the place of the plugin's `model_executable()` range). Output: JSON with per-forward rows
(model, iteration, warmup, tokens, start_ns, dur_ns) and the load average before/after.
"""
from __future__ import annotations

import argparse
import json
import os
import time

for k, v in {"VLLM_ENABLE_V1_MULTIPROCESSING": "0", "VLLM_CPU_KVCACHE_SPACE": "1",
             "VLLM_CPU_OMP_THREADS_BIND": "nobind", "OMP_NUM_THREADS": "1"}.items():
    os.environ.setdefault(k, v)

ROWS: list[dict] = []
CURRENT = {"model": None, "iteration": -1, "warmup": False}


def patch() -> None:
    from vllm.v1.worker import gpu_model_runner as g

    original = g.GPUModelRunner._model_forward

    def timed(self, *args, **kwargs):
        pos = kwargs.get("positions")
        tokens = int(pos.shape[-1]) if pos is not None else -1
        t0 = time.perf_counter_ns()
        try:
            return original(self, *args, **kwargs)
        finally:
            t1 = time.perf_counter_ns()
            ROWS.append({"model": CURRENT["model"], "iteration": CURRENT["iteration"], "warmup": CURRENT["warmup"],
                         "tokens": tokens, "start_ns": t0, "dur_ns": t1 - t0})

    g.GPUModelRunner._model_forward = timed


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", action="append", required=True)
    ap.add_argument("--input-len", type=int, default=128)
    ap.add_argument("--output-len", type=int, default=32)
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--alternate", action="store_true")
    ap.add_argument("--alternate-steps", action="store_true",
                    help="each iteration: one request per model, engine steps alternate model by model")
    ap.add_argument("--mem", type=float, default=0.3)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    load0 = os.getloadavg()
    t_start = time.time()
    import numpy as np
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    patch()
    engines = {}
    names = [m if a.model.count(m) == 1 else f"{m}#{a.model[:i + 1].count(m)}" for i, m in enumerate(a.model)]
    for name, m in zip(names, a.model):
        engines[name] = LLM(model=m, load_format="dummy", skip_tokenizer_init=True, enforce_eager=True,
                         gpu_memory_utilization=a.mem, max_model_len=1024)
    sp = SamplingParams(n=1, temperature=1.0, top_p=1.0, ignore_eos=True, max_tokens=a.output_len, detokenize=False)
    prompt = [TokensPrompt(prompt_token_ids=np.random.randint(10000, size=a.input_len).tolist())]
    order = []
    total = a.warmup + a.iters
    if a.alternate:
        order = [(i, m) for i in range(total) for m in names]
    else:
        order = [(i, m) for m in names for i in range(total)]
    lat = []
    if a.alternate_steps:
        for i in range(total):
            live = []
            for m in names:
                engines[m].llm_engine.add_request(f"{i}-{m}", prompt[0], sp)
                live.append(m)
            t0 = time.perf_counter()
            while live:
                for m in list(live):
                    CURRENT.update(model=m, iteration=i, warmup=i < a.warmup)
                    eng = engines[m].llm_engine
                    eng.step()
                    if not eng.has_unfinished_requests():
                        live.remove(m)
            lat.append({"model": "all", "iteration": i, "latency_s": time.perf_counter() - t0})
        order = []
    for i, m in order:
        CURRENT.update(model=m, iteration=i, warmup=i < a.warmup)
        t0 = time.perf_counter()
        engines[m].generate(prompt, sampling_params=sp, use_tqdm=False)
        lat.append({"model": m, "iteration": i, "latency_s": time.perf_counter() - t0})
    huge = next((int(line.split()[1]) for line in open("/proc/self/smaps_rollup")
                 if line.startswith("AnonHugePages")), -1)
    with open(a.out, "w") as fh:
        json.dump({"args": vars(a), "anon_huge_kb": huge, "load_before": load0, "load_after": os.getloadavg(),
                   "cpus": os.cpu_count(),
                   "wall_s": time.time() - t_start, "latencies": lat, "forwards": ROWS}, fh)


if __name__ == "__main__":
    main()
