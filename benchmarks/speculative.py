"""Does the step cost model forecast speculative runs it was not fitted on? (issue 12's 10 % goal)

Usage: `.venv/bin/python benchmarks/speculative.py [-o DIR] [--reuse] [--iters 5]`

Profiles for real, with vLLM's CPU build under nsys (`nsys-cc profile --speculate 1,2,3`, 128 prompt + 32 output
tokens, batch 1):
1. the tiny demo pair (`tiny-llama-target`, `tiny-llama-draft-xs`, dummy weights: α ≈ 0), γ = 1, 2, 3;
2. the known-α pair (`pair-target-a50`, `pair-draft`: α ≈ 0.5), γ = 1, 2, 3, and the pair's other knob
   (`pair-target`: the same shapes, so the same costs, α ≈ 0.99), γ = 2 (models: `nsys_cc.launch.pair`), as in
   fixtures/spec.
Then, per pair, it fits the `StepCostModel` on the γ = 1 and γ = 3 runs only and forecasts every run it was not
fitted on: γ = 2 at that run's measured α, and the knob's γ = 2 run at its own α (same cost, other α; against its
own plain target run's decode step, as its measured speedup is). The
table gives, per run: α, the measured speedup with its 95 % interval, the forecast and its error, Thm 3.8 from the
standalone c and its error. `--reuse` analyses an earlier `-o DIR` without profiling again.

Timings depend on the machine's load: run it on a quiet machine for the record in docs/PERFORMANCE.md.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from nsys_cc.analysis.speculative import forecast  # noqa: E402

BENCH = ["--input-len", "128", "--output-len", "32", "--batch-size", "1", "--device", "cpu"]
# One profile each: (output folder, target, draft, γ list, the pair it belongs to). Each pair's model is fitted on the
# γ = 1 and γ = 3 runs of its first profile; every other run of the pair is forecast with it.
PROFILES = [
    ("tiny", "tiny-llama-target", "tiny-llama-draft-xs", "1,2,3", "tiny"),
    ("pair-a50", "pair-target-a50", "pair-draft", "1,2,3", "known-α"),
    # the other knob: the same shapes (so the same costs), one live copy per group in the target: α ≈ 0.99
    ("pair-a99", "pair-target", "pair-draft", "2", "known-α"),
]


def nsys_cc(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    cmd = [sys.executable, "-c", "import sys; from nsys_cc.cli import main; main(sys.argv[1:])", *args]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)


def profile(out: Path, target: str, draft: str, gammas: str, iters: int) -> None:
    r = nsys_cc("profile", "--target", target, "--draft", draft, "--speculate", gammas, *BENCH,
                "--num-iters", str(iters), "--num-iters-warmup", "2", "-o", str(out), "--format", "json")
    if r.returncode not in (0, 1):
        raise SystemExit(f"profile {target} {draft} failed:\n{r.stderr[-2000:]}")


def analyze(out: Path) -> dict:
    """`nsys-cc analyze` of every trace in `out`: the plain target first, then drafts, then speculative runs."""
    status = json.loads((out / "status.json").read_text())
    runs = status["runs"] if isinstance(status, dict) and "runs" in status else status
    done = [r for r in runs if (out / f"{r['label']}.sqlite").exists()]
    order = {"target": 0, "draft": 1, "speculative": 2}
    done.sort(key=lambda r: order.get(r.get("role", "draft"), 1))
    r = nsys_cc("analyze", *[str(out / f"{x['label']}.sqlite") for x in done], "--format", "json")
    if r.returncode != 0:
        raise SystemExit(f"analyze {out} failed:\n{r.stderr[-2000:]}")
    return json.loads(r.stdout)


def fitted_model(entries: list[dict], draft: str) -> forecast.StepCostModel:
    """The StepCostModel fitted on the γ = 1 and γ = 3 runs of `draft` only (from the JSON medians)."""
    fit = [e for e in entries if e["draft"] == draft and e["gamma"] in (1, 3)]
    if len(fit) != 2:
        raise SystemExit(f"{draft}: need its γ = 1 and γ = 3 runs, have γ {[e['gamma'] for e in fit]}")
    g = [e["gamma"] for e in fit]
    return forecast.fit(fit[0]["decode_step_ms"], g, [e["draft_step_ms"] / e["gamma"] for e in fit],
                        [e["verify_ms"] for e in fit], [e["other_ms"] for e in fit], draft_weights=g)


def rows(entries: list[dict], pair: str, folder: str, model: forecast.StepCostModel,
         fitted: set[tuple[str, int]]) -> list[dict]:
    out = []
    for e in entries:
        # each run's speedup is against its own plain target run: the forecast's step over that run's decode step
        pred = float(model.speedup(e["alpha"], e["gamma"])) * e["decode_step_ms"] / model.decode_step_ms
        lev = e["predicted_speedup"]["leviathan"]
        m = e["measured_speedup"]
        out.append({
            "pair": pair, "run": f"{folder}/{e['name']}", "alpha": e["alpha"], "measured": m,
            "ci": e["measured_speedup_ci95"], "bench": e.get("bench_speedup"), "forecast": pred,
            "forecast_err": pred / m - 1, "held_out": (folder, e["gamma"]) not in fitted, "leviathan": lev,
            "leviathan_err": (lev / m - 1) if lev is not None else math.nan,
        })
    return out


def table(all_rows: list[dict]) -> str:
    head = ("| pair | run | α | measured [95 %] | vLLM latency | forecast (fit γ 1,3) | error | Thm 3.8 | error |\n"
            "|---|---|---|---|---|---|---|---|---|")
    lines = [head]
    for r in all_rows:
        tag = "" if r["held_out"] else " (fitted)"
        bench = "–" if r["bench"] is None else f"{r['bench']:.3f}×"
        lev = "–" if r["leviathan"] is None else f"{r['leviathan']:.3f}×"
        lev_err = "–" if r["leviathan"] is None else f"{r['leviathan_err']:+.1%}"
        lines.append(f"| {r['pair']} | {r['run']}{tag} | {r['alpha']:.3f} | {r['measured']:.3f}× "
                     f"[{r['ci'][0]:.3f}–{r['ci'][1]:.3f}] | {bench} | {r['forecast']:.3f}× | "
                     f"{r['forecast_err']:+.1%} | {lev} | {lev_err} |")
    held = [r for r in all_rows if r["held_out"]]
    worst = max((abs(r["forecast_err"]) for r in held), default=math.nan)
    lines.append("")
    lines.append(f"Runs not fitted on: {len(held)}; largest forecast error {worst:.1%} (goal: within 10 %).")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-o", "--out", type=Path, default=None, help="work directory (default: a temporary one)")
    ap.add_argument("--reuse", action="store_true", help="analyse an earlier -o DIR, do not profile")
    ap.add_argument("--iters", type=int, default=5, help="measured iterations per run")
    ap.add_argument("--only", choices=sorted({p[4] for p in PROFILES}), default=None, help="one pair only")
    args = ap.parse_args(argv)
    work = args.out or Path(tempfile.mkdtemp(prefix="nsys_cc_spec_bench_"))
    docs: dict[str, list[tuple[str, str, list[dict]]]] = {}
    for folder, target, draft, gammas, pair in PROFILES:
        if args.only and pair != args.only:
            continue
        out = work / folder
        if not args.reuse:
            print(f"[bench] {pair}: profiling {target} + {draft}, γ = {gammas} …", file=sys.stderr, flush=True)
            profile(out, target, draft, gammas, args.iters)
        docs.setdefault(pair, []).append((draft, folder, analyze(out)["speculative"]))
    all_rows = []
    for pair, profiles in docs.items():
        draft, first_folder, first = profiles[0]
        model = fitted_model(first, draft)
        fitted = {(first_folder, e["gamma"]) for e in first if e["gamma"] in (1, 3)}
        for _, folder, entries in profiles:
            all_rows += rows(entries, pair, folder, model, fitted)
    print(table(all_rows))
    print(f"\n(traces in {work})", file=sys.stderr)


if __name__ == "__main__":
    main()
