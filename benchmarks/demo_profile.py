"""Benchmark: `make demo`'s profile, its time and its quality beside the goals.

Goals (issue 33), on a 2-core machine: the profile ≤ 3 min of wall time; every draft's decode c interval within ±10 %
(the larger of c − low and high − c, over c: what `--precision` stops on); and the interval covering the runs'
spread: how many runs' own decode c lie inside the pooled interval is printed, and most must (the interval is the
pooled c's, not a prediction interval for one run: a run caught in a slow spell may lie outside).

The command is the demo's own (`make -s print-demo-profile`: the Makefile holds it once), run whole with its output
sent to a fresh directory (`--out`, default out/bench-demo, removed first), so a resume never shortens it. Printed
beside the results: the machine (CPU model, cores) and the load average before and after; the profile's own progress
lines go to stderr as it runs. `--analyze-only DIR` skips the profile and judges an existing output directory (e.g.
`fixtures/interleaved`, or an `out/demo` made earlier). Results go to `benchmarks/results/demo-<time>.json`
(git-ignored; the runs docs/PERFORMANCE.md cites are kept in `benchmarks/records/`).

Usage: `python benchmarks/demo_profile.py [--out out/bench-demo] [--analyze-only DIR] [--check]`
(part of `make bench`).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shlex
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

GOAL_S = 180.0
GOAL_HALF_WIDTH = 0.10


def demo_command(out: Path) -> list[str]:
    """The demo's profile command as the Makefile has it, writing to `out` instead of out/demo."""
    text = subprocess.run(["make", "-s", "--no-print-directory", "print-demo-profile"], cwd=ROOT, check=True,
                          capture_output=True, text=True).stdout.strip()
    cmd = shlex.split(text)
    if "-o" in cmd:
        cmd[cmd.index("-o") + 1] = str(out)
    else:
        cmd += ["-o", str(out)]
    return cmd


def judge(out: Path) -> dict:
    """Per draft: pooled decode c [low–high], half-width, the runs' own c and whether each lies inside."""
    import nsys_cc

    res = nsys_cc.analyze(str(out))
    coef, runs = res.coefficients, res.runs
    drafts = {}
    for _, row in coef[(coef["metric"] == "wall") & (coef["phase"] == "decode")].iterrows():
        c, low, high = float(row["c"]), float(row["ci_low"]), float(row["ci_high"])
        per_run = runs[(runs["draft"] == row["draft"]) & (runs["metric"] == "wall") & (runs["phase"] == "decode")]
        run_c = [float(x) for x in per_run.sort_values("run")["c"]] if not per_run.empty else []
        drafts[row["draft"]] = {
            "c": c, "ci_low": low, "ci_high": high, "half_width": max(c - low, high - c) / c,
            "runs": int(row["runs"]), "run_c": run_c, "inside": sum(low <= x <= high for x in run_c),
            "forwards": int(row["n_draft"])}
    return drafts


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=ROOT / "out" / "bench-demo")
    ap.add_argument("--analyze-only", type=Path, metavar="DIR", help="judge an existing profile output directory")
    ap.add_argument("--check", action="store_true", help="exit 1 when a goal is missed")
    args = ap.parse_args(argv)

    info = machine()
    print(f"machine: {info['cpu']}, {info['cores']} cores, {info['system']}, Python {info['python']}")
    record: dict = {"when": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"), "machine": info}
    met = True
    if args.analyze_only:
        out = args.analyze_only
    else:
        out = args.out
        shutil.rmtree(out, ignore_errors=True)
        cmd = demo_command(out)
        print("profile: " + " ".join(shlex.quote(str(c)) for c in cmd), flush=True)
        before = os.getloadavg()[0]
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, cwd=ROOT, stdout=subprocess.DEVNULL)
        seconds = time.perf_counter() - t0
        after = os.getloadavg()[0]
        if proc.returncode != 0:
            print(f"the demo's profile failed (exit {proc.returncode}) after {seconds:.0f} s", file=sys.stderr)
            return 1
        status = json.loads((out / "status.json").read_text())
        record.update(command=cmd, seconds=seconds, load_before=before, load_after=after,
                      stopped_by=status.get("stopped_by"), run_seconds=[r["seconds"] for r in status["runs"]])
        time_met = seconds <= GOAL_S
        met &= time_met
        print(f"profile: {seconds:.0f} s ({seconds / 60:.1f} min) beside the goal ≤ {GOAL_S / 60:.0f} min: "
              f"{'met' if time_met else 'MISSED'}; {len(status['runs'])} runs "
              f"({', '.join(f'{s:.0f}' for s in record['run_seconds'])} s), stopped by {status.get('stopped_by')}; "
              f"load average {before:.1f} → {after:.1f} on {info['cores']} cores")
    drafts = judge(out)
    record["drafts"] = drafts
    for name, d in drafts.items():
        # The interval is the pooled c's (its across-run bootstrap widened to Student's t), not a prediction interval
        # for one more run: a run caught in a slow spell may lie outside it. Coverage is reported, the goal is the
        # half-width and a majority of the runs inside.
        ok = d["half_width"] <= GOAL_HALF_WIDTH and 2 * d["inside"] > len(d["run_c"])
        met &= ok
        runs = " ".join(f"{x:.3f}" for x in d["run_c"])
        print(f"{name}: decode c {d['c']:.3f} [{d['ci_low']:.3f}–{d['ci_high']:.3f}], ±{d['half_width']:.1%} beside "
              f"±{GOAL_HALF_WIDTH:.0%}; runs' c {runs}: {d['inside']} of {len(d['run_c'])} inside; "
              f"{d['forwards']} decode tokens over {d['runs']} runs: {'met' if ok else 'MISSED'}")
    print("goals: " + ("met" if met else "MISSED"))
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"demo-{dt.datetime.now(dt.timezone.utc):%Y%m%d-%H%M%S}.json"
    path.write_text(json.dumps(record, indent=2, default=str) + "\n")
    print(f"results: {path.relative_to(ROOT)}")
    return 1 if args.check and not met else 0


if __name__ == "__main__":
    sys.exit(main())
