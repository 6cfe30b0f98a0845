"""Benchmark: the torch route (`nsys-cc profile --profiler torch`) against the nsys route, on the same models.

Both routes profile the tiny pair (tiny-llama-target + tiny-llama-draft-xs) on vLLM's CPU build with the same
interleaved runs, one after the other; then, for each route, the draft's decode c (wall clock, pooled over the runs,
with its interval) and each model's decode token time (median ms, the analysis' own). The torch route is run twice:
with its default settings (the plugin's ranges only: Kineto's user scope, no operators, no Python frames) and with
`NSYS_CC_TORCH_SETTINGS=ops,stack` (every aten operator and the Python frames, as vLLM's own `--profile` records),
so that what the profiler's settings cost shows beside what the route itself costs.

Printed: per route c and its interval, each model's token time and its overhead against the nsys route
(torch ms ÷ nsys ms − 1, per model: it need not be proportional, and where it is not, c moves), whether each torch c
interval overlaps the nsys one, the machine and its load. Results go to `benchmarks/results/torch_vs_nsys-<time>.json`
(git-ignored); docs/PERFORMANCE.md keeps the latest numbers.

Usage: `python benchmarks/torch_vs_nsys.py [--repeat 3] [--out out/bench-torch-vs-nsys]` (part of `make bench`;
about 5 minutes on 2 cores).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
RESULTS = HERE / "results"
sys.path.insert(0, str(HERE))
from check_loop import machine  # noqa: E402

TARGET, DRAFT = "tiny-llama-target", "tiny-llama-draft-xs"
ROUTES = (("nsys", "nsys", ""), ("torch", "torch", ""), ("torch ops,stack", "torch", "ops,stack"))


def profile(route: str, settings: str, out: Path, repeat: int) -> tuple[dict, float]:
    """One `nsys-cc profile` of the pair by `route`; (report.json, wall seconds)."""
    shutil.rmtree(out, ignore_errors=True)
    cmd = [str(Path(sys.executable).parent / "nsys-cc"), "profile", "--profiler", route, "--target", TARGET,
           "--draft", DRAFT, "--repeat", str(repeat), "--replicas", "1", "--input-len", "32", "--output-len", "16",
           "--num-iters-warmup", "1", "--num-iters", "3", "--device", "cpu", "-o", str(out), "--format", "json"]
    env = dict(os.environ)
    env.pop("NSYS_CC_TORCH_SETTINGS", None)
    if settings:
        env["NSYS_CC_TORCH_SETTINGS"] = settings
    t0 = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, env=env)
    seconds = time.perf_counter() - t0
    if done.returncode != 0:
        sys.exit(f"{route} {settings}: exit {done.returncode}\n{done.stderr[-3000:]}")
    return json.loads((out / "report.json").read_text()), seconds


def decode(report: dict) -> dict:
    """The draft's decode c on wall, its interval, and each model's decode token time (ms)."""
    (row,) = [r for r in report["coefficients"]
              if r["draft"] == DRAFT and r["phase"] == "decode" and r["metric"] == "wall"]
    lo, hi = row.get("ci95") or (None, None)
    return {"c": row["c"], "low": lo, "high": hi, "target_ms": row["target_median_ms"],
            "draft_ms": row["draft_median_ms"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--out", default="out/bench-torch-vs-nsys")
    args = parser.parse_args()
    load_before = os.getloadavg()[0]
    rows = {}
    for name, route, settings in ROUTES:
        report, seconds = profile(route, settings, Path(args.out) / name.replace(" ", "-").replace(",", "-"),
                                  args.repeat)
        rows[name] = {**decode(report), "seconds": round(seconds, 1)}
        print(f"{name}: done in {seconds:.0f} s", file=sys.stderr, flush=True)
    base = rows["nsys"]
    print(f"{'route':<16} {'decode c':>9} {'interval':>17} {'target ms':>10} {'draft ms':>9} "
          f"{'target +':>9} {'draft +':>8} {'overlap':>8} {'wall s':>7}")
    for name, r in rows.items():
        interval = f"[{r['low']:.3f}–{r['high']:.3f}]" if r["low"] is not None else "–"
        overlap = (r["low"] is not None and base["low"] is not None and r["low"] <= base["high"]
                   and base["low"] <= r["high"])
        r["target_overhead"] = r["target_ms"] / base["target_ms"] - 1
        r["draft_overhead"] = r["draft_ms"] / base["draft_ms"] - 1
        r["overlaps_nsys"] = bool(overlap) if name != "nsys" else None
        print(f"{name:<16} {r['c']:>9.3f} {interval:>17} {r['target_ms']:>10.3f} {r['draft_ms']:>9.3f} "
              f"{r['target_overhead']:>+9.0%} {r['draft_overhead']:>+8.0%} "
              f"{'–' if name == 'nsys' else ('yes' if overlap else 'NO'):>8} {r['seconds']:>7.0f}")
    load_after = os.getloadavg()[0]
    info = machine()
    print(f"machine: {info}; load {load_before:.1f} before, {load_after:.1f} after")
    RESULTS.mkdir(exist_ok=True)
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    path = RESULTS / f"torch_vs_nsys-{stamp}.json"
    path.write_text(json.dumps({"machine": info, "load": [load_before, load_after], "repeat": args.repeat,
                                "routes": rows}, indent=2) + "\n")
    print(f"results: {path}")


if __name__ == "__main__":
    main()
