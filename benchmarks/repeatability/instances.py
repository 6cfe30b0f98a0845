"""Per-instance decode medians and c in interleaved runs (docs/REPEATABILITY.md, E7): which part of the spread is
between instances of one model in one process, which between runs.

    python benchmarks/repeatability/instances.py PROFILE_DIR
"""
from __future__ import annotations

import glob
import itertools
import os
import sys

import numpy as np

from nsys_cc.analysis.forwards.phases import _containing
from nsys_cc.trace import open_trace

PREFIX = "nsys_cc:engine "


def per_instance(sqlite: str) -> dict[tuple[str, int], np.ndarray]:
    with open_trace(sqlite) as t:
        r = t.nvtx_ranges(names=["model_executable()", "nsys_cc:warmup"], prefixes=[PREFIX], nesting=False)
    r = r.sort_values("start_ns")
    names = r["name"].astype(str)
    eng = r[names.str.startswith(PREFIX).to_numpy()]
    warm = r[(names == "nsys_cc:warmup").to_numpy()]
    fwd = r[(names == "model_executable()").to_numpy()]
    fwd = fwd[(fwd["payload"] == 1).to_numpy()]  # decode: one token
    starts = fwd["start_ns"].to_numpy()
    fwd = fwd[_containing(starts, warm) < 0]
    starts = fwd["start_ns"].to_numpy()
    which = _containing(starts, eng.reset_index(drop=True))
    labels = eng["name"].astype(str).str.removeprefix(PREFIX).to_numpy()
    index = eng["payload"].to_numpy()
    out: dict[tuple[str, int], list] = {}
    dur = (fwd["end_ns"] - fwd["start_ns"]).to_numpy() / 1e6
    for w, d in zip(which, dur):
        if w >= 0:
            out.setdefault((labels[w], int(index[w])), []).append(d)
    return {k: np.array(v) for k, v in out.items()}


def main(root: str) -> None:
    runs = sorted(glob.glob(os.path.join(root, "run-*/trace.sqlite")),
                  key=lambda p: int(p.split("run-")[1].split("/")[0]))
    per_run_c, inst_c = [], []
    for path in runs:
        inst = per_instance(path)
        targets = sorted(k for k in inst if "target" in k[0])
        drafts = sorted(k for k in inst if "target" not in k[0])
        t_all = np.concatenate([inst[k] for k in targets])
        d_all = np.concatenate([inst[k] for k in drafts])
        c = np.median(d_all) / np.median(t_all)
        per_run_c.append(c)
        pairs = [np.median(inst[d]) / np.median(inst[t]) for t, d in zip(targets, drafts)]
        inst_c.append(pairs)
        print(f"{path.split('/')[-2]}: pooled c {c:.4f}; target medians "
              f"{' '.join(f'{np.median(inst[k]):.3f}' for k in targets)}; draft medians "
              f"{' '.join(f'{np.median(inst[k]):.3f}' for k in drafts)}; c per instance pair "
              f"{' '.join(f'{x:.3f}' for x in pairs)}")
    cs = np.array(per_run_c)
    print(f"c per run: {' '.join(f'{x:.4f}' for x in cs)}; cv {cs.std(ddof=1) / cs.mean():.1%}; "
          f"(max-min)/median {(cs.max() - cs.min()) / np.median(cs):.1%}")
    flat = np.array(list(itertools.chain(*inst_c)))
    print(f"c per instance pair: cv {flat.std(ddof=1) / flat.mean():.1%}")
    # what one instance per run would have given (the first pair of each run)
    first = np.array([p[0] for p in inst_c])
    print(f"first pair only per run: cv {first.std(ddof=1) / first.mean():.1%}")


if __name__ == "__main__":
    main(sys.argv[1])
