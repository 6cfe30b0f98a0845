"""Within-process drift (docs/REPEATABILITY.md): c per block of B iterations of one process holding both models,
against the spread of c between processes.

    python benchmarks/repeatability/blocks.py DIR [--block 10] [--skip 2]
"""
from __future__ import annotations

import argparse
import glob
import json
import os

import numpy as np

T, D = "tiny-llama-target", "tiny-llama-draft-xs"


def decode(d, model, lo, hi):
    return np.array([r["dur_ns"] / 1e6 for r in d["forwards"] if r["tokens"] == 1 and lo <= r["iteration"] < hi
                     and os.path.basename(r["model"]) == model])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("--block", type=int, default=10)
    ap.add_argument("--skip", type=int, default=2)
    a = ap.parse_args()
    per_kind: dict[str, list[float]] = {}
    for path in sorted(glob.glob(os.path.join(a.dir, "*.json"))):
        d = json.load(open(path))
        n = d["args"]["iters"] + d["args"]["warmup"]
        t, dr = decode(d, T, a.skip, n), decode(d, D, a.skip, n)
        c = np.median(dr) / np.median(t)
        blocks = []
        for lo in range(a.skip, n, a.block):
            bt, bd = decode(d, T, lo, lo + a.block), decode(d, D, lo, lo + a.block)
            if len(bt) and len(bd):
                blocks.append(np.median(bd) / np.median(bt))
        blocks = np.array(blocks)
        kind = os.path.basename(path)[:-5].split("-", 1)[1]
        per_kind.setdefault(kind, []).append(c)
        print(f"{os.path.basename(path):14s} c={c:.4f} (T {np.median(t):.3f} ms, D {np.median(dr):.3f} ms, n={len(t)}) "
              f"blocks of {a.block}: {' '.join(f'{x:.3f}' for x in blocks)}  "
              f"block cv {blocks.std(ddof=1)/blocks.mean():.1%} "
              f"load {d['load_before'][0]:.1f}->{d['load_after'][0]:.1f}")
    for kind, cs in per_kind.items():
        cs = np.array(cs)
        print(f"{kind}: c per process {' '.join(f'{x:.4f}' for x in cs)}; cv {cs.std(ddof=1)/cs.mean():.1%}, "
              f"(max-min)/median {(cs.max()-cs.min())/np.median(cs):.1%}")


if __name__ == "__main__":
    main()
