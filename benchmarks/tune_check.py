"""Does the γ-per-batch-size model forecast cells it was not fitted on, and is its schedule as good as the best fixed γ?
(issue 30's bars: held-out cells within 10 % of their measured speedup; at each measured batch size the schedule's γ
within 5 % of the best fixed γ measured there.)

Usage: `.venv/bin/python benchmarks/tune_check.py [-o DIR] [--tries 2] [--reuse] [--pairs a50,a99]`

Per known-acceptance pair (`pair-target-a50` with `pair-draft`: α ≈ 0.5; `pair-target`: α ≈ 1) and try:
`nsys-cc tune --target T --draft pair-draft --batch-size 1,8 --speculate 1,3 --check 4:2,16:3 --device cpu
--nsys-trace nvtx -o DIR/<pair>-try<k>` (defaults: 128 prompt + 32 output tokens, 2 warm-up + 5 measured iterations,
3 interleaved runs per batch size; tune then profiles the schedule's γ where it was not measured), then prints, per
held-out cell, the forecast, the measured speedup and the error against the 10 % bar, and per measured batch size the
schedule's γ against the best fixed γ and the 5 % bar, with each try's wall time and the machine's load.
`--reuse` reads earlier directories without profiling. Record quiet-machine results in docs/PERFORMANCE.md.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TARGETS = {"a50": "pair-target-a50", "a99": "pair-target"}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-o", "--out", default="out/tune-check")
    ap.add_argument("--tries", type=int, default=2)
    ap.add_argument("--pairs", default="a50,a99")
    ap.add_argument("--reuse", action="store_true")
    args = ap.parse_args(argv)
    nsys_cc = str(Path(sys.executable).with_name("nsys-cc"))
    ok = True
    for pair in args.pairs.split(","):
        for k in range(1, args.tries + 1):
            out = Path(args.out) / f"{pair}-try{k}"
            load = os.getloadavg()[0]
            t0 = time.monotonic()
            cmd = [nsys_cc, "tune", *( [str(out)] if args.reuse else
                   ["--target", TARGETS[pair], "--draft", "pair-draft", "--batch-size", "1,8", "--speculate", "1,3",
                    "--check", "4:2,16:3", "--device", "cpu", "--nsys-trace", "nvtx", "-o", str(out)]),
                   "--format", "json"]
            p = subprocess.run(cmd, capture_output=True, text=True)
            secs = time.monotonic() - t0
            if p.returncode != 0:
                print(f"{pair} try {k}: FAILED ({p.stderr.strip().splitlines()[-1:]})")
                ok = False
                continue
            doc = json.loads(p.stdout)
            print(f"\n{pair} try {k}: {secs:.0f} s, load {load:.1f} → {os.getloadavg()[0]:.1f} on "
                  f"{os.cpu_count()} CPUs; schedule {doc['num_speculative_tokens_per_batch_size']}")
            print(f"  {'cell':<10} {'forecast':>9} {'measured':>9} {'error':>8}  10 % bar")
            for c in doc["checks"]:
                bar = abs(c["error"]) <= 0.10
                ok &= bar
                print(f"  B={c['batch_size']:<3}γ={c['gamma']:<3} {c['forecast']:>8.3f}× {c['measured']:>8.3f}× "
                      f"{c['error']:>+7.1%}  {'met' if bar else 'MISSED'}")
            print(f"  {'B':<4} {'schedule γ':>10} {'measured':>9} {'best fixed γ':>12} {'measured':>9} {'gap':>7}"
                  "  5 % bar")
            for s in doc["schedule_check"]:
                m = s["schedule_measured"]
                bar = m is not None and s["within_5pct"]
                ok &= bar
                ms = f"{m:.3f}×" if m is not None else "n/a"
                gap = f"{s['gap']:+.1%}" if s["gap"] is not None else "n/a"
                print(f"  {s['batch_size']:<4} {s['schedule_gamma']:>10} {ms:>9} {s['best_fixed_gamma']:>12} "
                      f"{s['best_fixed_measured']:>8.3f}× {gap:>7}  {'met' if bar else 'MISSED'}")
    print("\nall bars met" if ok else "\nsome bar missed (see above)")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
