"""The repeatability bar of docs/REPEATABILITY.md: N default profiles, one after another, then whether they agree.

Usage:

    python benchmarks/repeatability.py [OUT] [--profiles 3] [--target T] [--draft D] [--speculate]
                                       [--check-only] [-- PROFILE_ARGS …]

Each profile is `nsys-cc profile --target T --draft D -o OUT/profile-<k> --format json` with the defaults (the
arguments after `--` are added to every profile, e.g. `-- --repeat 4` or `-- --separate-processes`), run with the
real nsys and vLLM's CPU build: about 3 minutes a profile on 2 cores, 5 with `--speculate`.

The bar, plain: every profile rests on ≥ 100 decode forwards per model, every profile's decode c interval holds the
median of the N decode c, and the N decode c spread (max − min, over the median) ≤ 10 %. With `--speculate`
(`--speculate 1,2,3` added to each profile): in every profile the forecast fitted on γ 1 and 3 is within 10 % of the
held-out γ = 2 run (the plain c's agreement is printed beside it). c is read on the result's headline metric.

Writes, under OUT (default `out/repeatability/<UTC time>`; git-ignored): `profile-<k>/` (each profile's output
directory), `profile-<k>.json` (its `--format json` answer), `profile-<k>.err` (its progress lines and errors) and
`summary.json` (per profile: seconds, load average before and after, decode c and interval, forwards; the verdict).
Prints one line per profile and `BAR MET` or `BAR NOT MET`. `--check-only` runs nothing and judges the
`profile-<k>.json` already in OUT. Exit status: 0 met, 1 not met, 2 a profile failed or its answer is missing.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SPREAD = 0.10  # the N decode c within 10 % of their median (max − min)
FORECAST = 0.10  # the held-out γ = 2 forecast within 10 %
MIN_FORWARDS = 100  # decode forwards per model and profile


def nsys_cc() -> list[str]:
    """The `nsys-cc` of the running environment (beside this Python), else the one on PATH."""
    here = Path(sys.executable).with_name("nsys-cc")
    found = str(here) if here.exists() else shutil.which("nsys-cc")
    if not found:
        raise SystemExit("repeatability: error: no nsys-cc beside this Python or on PATH (run `make setup`)")
    return [found]


def run_profiles(out: Path, args: argparse.Namespace, extra: list[str]) -> list[dict]:
    runs = []
    for k in range(1, args.profiles + 1):
        cmd = [*nsys_cc(), "profile", "--target", args.target, "--draft", args.draft, "-o", str(out / f"profile-{k}"),
               "--format", "json", *(["--speculate", "1,2,3"] if args.speculate else []), *extra]
        before = os.getloadavg()[0]
        print(f"{dt.datetime.now():%H:%M:%S} profile {k} of {args.profiles}, load {before:.1f}", flush=True)
        t0 = time.perf_counter()
        with open(out / f"profile-{k}.json", "w") as stdout, open(out / f"profile-{k}.err", "w") as stderr:
            rc = subprocess.run(cmd, cwd=ROOT, stdout=stdout, stderr=stderr).returncode
        seconds, after = time.perf_counter() - t0, os.getloadavg()[0]
        print(f"{dt.datetime.now():%H:%M:%S} profile {k}: exit {rc}, {seconds:.0f} s, load {after:.1f}", flush=True)
        runs.append({"profile": k, "command": cmd, "exit": rc, "seconds": seconds, "load_before": before,
                     "load_after": after})
    return runs


def plain(docs: list[dict], draft: str) -> tuple[bool, list[dict]]:
    """Each profile's decode c of `draft` on its headline metric, its interval and forwards; whether the plain bar
    is met."""
    rows = []
    for doc in docs:
        metric = doc.get("headline_metric") or "wall"
        coef = next(c for c in doc["coefficients"]
                    if c["draft"] == draft and c["phase"] == "decode" and c["metric"] == metric)
        counts = {m["name"]: m["phases"]["decode"]["count"] for m in doc["models"]}
        rows.append({"metric": metric, "c": coef["c"], "ci95": coef["ci95"], "forwards": counts})
    median = statistics.median(r["c"] for r in rows)
    for r in rows:
        low, high = r["ci95"]
        r["holds_median"] = low is not None and high is not None and low <= median <= high
    cs = [r["c"] for r in rows]
    spread = (max(cs) - min(cs)) / median
    for k, r in enumerate(rows, 1):
        low, high = r["ci95"]
        interval = f"[{low:.4f}–{high:.4f}]" if low is not None and high is not None else "[no interval]"
        print(f"profile {k}: decode c {r['c']:.4f} {interval} ({r['metric']}); decode forwards {r['forwards']}; "
              f"holds the median {median:.4f}: {r['holds_median']}")
    print(f"spread (max − min) / median = {spread:.1%} (bar ≤ {SPREAD:.0%}); fewest decode forwards of a model "
          f"{min(min(r['forwards'].values()) for r in rows)} (bar ≥ {MIN_FORWARDS})")
    met = (spread <= SPREAD and all(r["holds_median"] for r in rows)
           and all(min(r["forwards"].values()) >= MIN_FORWARDS for r in rows))
    return met, rows


def speculative(docs: list[dict]) -> tuple[bool, list[dict]]:
    """Each profile's held-out γ = 2 run against the forecast fitted on γ 1 and 3; whether every one is within 10 %."""
    rows = []
    for k, doc in enumerate(docs, 1):
        for row in doc.get("speculative") or []:
            if row["gamma"] != 2:
                continue
            p = row["predicted_speedup"]
            low, high = row["measured_speedup_ci95"]
            interval = f"[{low:.3f}–{high:.3f}]" if low is not None and high is not None else "[no interval]"
            rows.append({"profile": k, "measured_speedup": row["measured_speedup"], "interval": [low, high],
                         "forecast": p["cost_model_held_out"], "fitted_on": p["held_out_fit_gammas"],
                         "error": row["forecast_error"], "tolerance": row["forecast_tolerance"]})
            print(f"profile {k}: γ = 2 measured {row['measured_speedup']:.3f}× {interval}, forecast (fitted on γ "
                  f"{p['held_out_fit_gammas']}) {p['cost_model_held_out']:.3f}×: error {row['forecast_error']:+.1%} "
                  f"(runs' own ±{row['forecast_tolerance']:.1%}); α = {row['alpha']:.3g}; problem: "
                  f"{row.get('measurement_problem') or 'none'}")
    met = bool(rows) and all(r["error"] is not None and abs(r["error"]) <= FORECAST for r in rows)
    return met, rows


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    extra = argv[argv.index("--") + 1:] if "--" in argv else []
    own = argv[:argv.index("--")] if "--" in argv else argv
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", nargs="?", type=Path, help="folder of the profiles (default out/repeatability/<time>)")
    ap.add_argument("--profiles", type=int, default=3, help="how many profiles, one after another (default 3)")
    ap.add_argument("--target", default="tiny-llama-target")
    ap.add_argument("--draft", default="tiny-llama-draft-xs")
    ap.add_argument("--speculate", action="store_true", help="profile γ = 1, 2, 3 too; the bar is the forecast's")
    ap.add_argument("--check-only", action="store_true", help="run nothing: judge the profile-<k>.json in OUT")
    args = ap.parse_args(own)
    if args.profiles < 2:
        ap.error("--profiles: at least 2 profiles to compare")
    out = args.out or ROOT / "out" / "repeatability" / f"{dt.datetime.now(dt.timezone.utc):%Y%m%d-%H%M%S}"
    if args.check_only and not out.is_dir():
        ap.error(f"--check-only: {out} is not a folder of profiles")
    out.mkdir(parents=True, exist_ok=True)
    runs = [] if args.check_only else run_profiles(out, args, extra)
    try:
        docs = [json.loads((out / f"profile-{k}.json").read_text()) for k in range(1, args.profiles + 1)]
    except (OSError, ValueError) as exc:
        print(f"repeatability: a profile left no answer ({exc}); see {out}/profile-<k>.err", file=sys.stderr)
        return 2
    try:
        plain_met, plain_rows = plain(docs, args.draft)
    except StopIteration:
        print(f"repeatability: a profile has no decode c of {args.draft}", file=sys.stderr)
        return 2
    spec_met, spec_rows = speculative(docs) if args.speculate else (None, [])
    met = spec_met if args.speculate else plain_met
    print("BAR MET" if met else "BAR NOT MET")
    summary = {"when": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"), "profiles": runs,
               "plain": {"met": plain_met, "rows": plain_rows},
               "speculative": {"met": spec_met, "rows": spec_rows} if args.speculate else None, "met": met}
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    print(f"results: {out}")
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
