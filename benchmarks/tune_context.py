"""The batch × context tune's bar, timed: `nsys-cc tune` over 3 batch sizes × 2 prompt lengths of the tiny
known-α pair on the CPU build — the surface and its held-out error beside the token-only model's, the held-out
(B, L) cell against its
forecast (10 % bar), K = 0 measured and priced, every schedule form written. Prints the wall time, the machine's load
and a Markdown row for docs/PERFORMANCE.md.

Usage: `.venv/bin/python benchmarks/tune_context.py [-o DIR] [--repeat 3]`.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("-o", "--out", default="out/tune-context")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--output-len", type=int, default=16)
    args = ap.parse_args()
    cmd = [str(Path(sys.executable).with_name("nsys-cc")), "tune", "--target", "pair-target-a50",
           "--draft", "pair-draft",
           "--batch-size", "1,2,4", "--speculate", "1,3", "--input-len", "32,256", "--check", "2@256:2",
           "--output-len", str(args.output_len), "--num-iters-warmup", "1", "--num-iters", "2",
           "--repeat", str(args.repeat),
           "--device", "cpu", "--nsys-trace", "nvtx", "--no-confirm", "-o", args.out, "--format", "json"]
    load = os.getloadavg()[0]
    t0 = time.monotonic()
    done = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.monotonic() - t0
    if done.returncode not in (0, 3, 4):
        print(done.stderr[-3000:], file=sys.stderr)
        return done.returncode
    doc = json.loads(done.stdout)
    for part, s in doc["surfaces"].items():
        print(f"{part}: terms {s['terms']}, held-out RMSE {s['held_out_rmse_ms']} ms vs token-only "
              f"{s['token_only_held_out_rmse_ms']} ms")
    for c in doc["checks"]:
        print(f"check B={c['batch_size']} L={c.get('input_len')} γ={c['gamma']}: forecast {c['forecast']:.3f} vs "
              f"measured {c['measured']:.3f} ({c['error']:+.1%}, {c['verdict']})")
    forms = sorted(p.name for p in Path(args.out).glob("schedule.*.json"))
    print(f"forms: {forms}; K = 0 priced: {doc['k0_priced']}; exit {done.returncode}")
    print(f"| tune 3 B × 2 L (pair a50, output {args.output_len}, repeat {args.repeat}) | {wall / 60:.1f} min "
          f"| load {load:.1f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
