"""Which way of combining runs repeats best (docs/REPEATABILITY.md): from real interleaved runs (profile directories
with run-*/trace.sqlite), draw profiles of R runs and triples of such profiles, and count how often the three agree
within 10 % for each estimator of c.

    python benchmarks/repeatability/estimators.py DIR [DIR …] [--repeat 4] [--draws 4000]
"""
from __future__ import annotations

import argparse
import glob

import numpy as np
from instances import per_instance


def runs_of(dirs):
    out = []
    for root in dirs:
        for p in sorted(glob.glob(root + "/run-*/trace.sqlite"), key=lambda p: int(p.split("run-")[1].split("/")[0])):
            inst = per_instance(p)
            t = np.concatenate([v for k, v in inst.items() if "target" in k[0]])
            d = np.concatenate([v for k, v in inst.items() if "target" not in k[0]])
            out.append((d, t))
    return out


ESTIMATORS = {
    "pooled ratio of medians": lambda rs: np.median(np.concatenate([d for d, _ in rs]))
    / np.median(np.concatenate([t for _, t in rs])),
    "median of the runs' c": lambda rs: float(np.median([np.median(d) / np.median(t) for d, t in rs])),
    "geometric mean of the runs' c": lambda rs: float(np.exp(np.mean([np.log(np.median(d) / np.median(t))
                                                                      for d, t in rs]))),
    "pooled ratio of lower quartiles": lambda rs: np.percentile(np.concatenate([d for d, _ in rs]), 25)
    / np.percentile(np.concatenate([t for _, t in rs]), 25),
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dirs", nargs="+")
    ap.add_argument("--repeat", type=int, default=4)
    ap.add_argument("--draws", type=int, default=4000)
    a = ap.parse_args()
    runs = runs_of(a.dirs)
    print(f"{len(runs)} runs; c per run: {' '.join(f'{np.median(d) / np.median(t):.3f}' for d, t in runs)}")
    rng = np.random.default_rng(0)
    for name, est in ESTIMATORS.items():
        ok, spreads = 0, []
        for _ in range(a.draws):
            pick = rng.choice(len(runs), size=3 * a.repeat, replace=False)
            cs = [est([runs[i] for i in pick[k * a.repeat:(k + 1) * a.repeat]]) for k in range(3)]
            spread = (max(cs) - min(cs)) / np.median(cs)
            spreads.append(spread)
            ok += spread <= 0.10
        print(f"{name:34s} R={a.repeat}: three profiles within 10 %: {ok / a.draws:.0%}; median spread "
              f"{np.median(spreads):.1%}, 90th percentile {np.percentile(spreads, 90):.1%}")


if __name__ == "__main__":
    main()
