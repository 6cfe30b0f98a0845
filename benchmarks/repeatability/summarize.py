"""Summaries of probe runs (docs/REPEATABILITY.md): per process and model, decode forward medians by iteration
window, c per process, spread across processes.

    python benchmarks/repeatability/summarize.py DIR [--warmup W]
"""
from __future__ import annotations

import argparse
import glob
import json
import os
from collections import defaultdict

import numpy as np


def load(path):
    d = json.load(open(path))
    by = defaultdict(lambda: defaultdict(list))
    for r in d["forwards"]:
        if r["tokens"] == 1:
            by[os.path.basename(r["model"])][r["iteration"]].append(r["dur_ns"] / 1e6)
    return d, by


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("--warmup", type=int, default=5)
    a = ap.parse_args()
    rows = []
    for path in sorted(glob.glob(os.path.join(a.dir, "*.json")),
                       key=lambda p: (int(os.path.basename(p).split("-")[0]), p)):
        d, by = load(path)
        name = os.path.basename(path)[:-5]
        for model, iters in by.items():
            keep = np.concatenate([v for i, v in iters.items() if i >= a.warmup])
            per_iter = [np.median(iters[i]) for i in sorted(iters)]
            rows.append((name, model, len(keep), float(np.median(keep)), per_iter, d["load_before"][0],
                         d["load_after"][0]))
            print(f"{name:10s} {model:20s} n={len(keep):4d} median={np.median(keep):.3f} ms  "
                  f"iter medians: {' '.join(f'{x:.2f}' for x in per_iter)}  "
                  f"load {d['load_before'][0]:.1f}->{d['load_after'][0]:.1f}")
    # c per process (pairing): separate = k-t with k-d; together = k-both
    med = {(r[0], r[1]): r[3] for r in rows}
    ks = sorted({int(r[0].split("-")[0]) for r in rows})
    sep, tog = [], []
    for k in ks:
        t, d = med.get((f"{k}-t", "tiny-llama-target")), med.get((f"{k}-d", "tiny-llama-draft-xs"))
        if t and d:
            sep.append(d / t)
        t, d = med.get((f"{k}-both", "tiny-llama-target")), med.get((f"{k}-both", "tiny-llama-draft-xs"))
        if t and d:
            tog.append(d / t)
    for name, cs in (("separate processes", sep), ("one process, alternating", tog)):
        if cs:
            cs = np.array(cs)
            print(f"c {name}: {' '.join(f'{x:.3f}' for x in cs)}  median {np.median(cs):.3f} "
                  f"spread (max-min)/median {(cs.max()-cs.min())/np.median(cs):.0%}  "
                  f"cv {cs.std(ddof=1)/cs.mean() if len(cs)>1 else 0:.1%}")


if __name__ == "__main__":
    main()
