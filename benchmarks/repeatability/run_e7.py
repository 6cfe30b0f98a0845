"""E7 of docs/REPEATABILITY.md: the real pipeline (nsys + the interleaved driver), R runs of `replicas` engines per
model; per-instance c is read afterwards from the engine ranges' payloads (benchmarks/repeatability/instances.py).

    python benchmarks/repeatability/run_e7.py OUT_DIR [--repeat 6] [--replicas 3] [--iters 10]
"""
import argparse
import time

from nsys_cc.launch import launcher
from nsys_cc.launch.commands import BenchOptions

ap = argparse.ArgumentParser()
ap.add_argument("out")
ap.add_argument("--repeat", type=int, default=6)
ap.add_argument("--replicas", type=int, default=3)
ap.add_argument("--iters", type=int, default=10)
ap.add_argument("--warmup", type=int, default=5)
ap.add_argument("--draft", default="tiny-llama-draft-xs")
a = ap.parse_args()
t0 = time.time()
r = launcher.profile_separately("tiny-llama-target", [a.draft], a.out, BenchOptions(output_len=32, iters=a.iters,
                     warmup_iters=a.warmup), device="cpu", repeat=a.repeat, replicas=a.replicas)
print(r.result.render() if r.result else r.notes)
print(f"wall {time.time() - t0:.0f} s")
