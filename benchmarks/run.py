"""Benchmark: nsys_cc on big exports against the cost of merely reading them, and against `nsys stats`.

For each size (kernels), one generated export (`benchmarks/generate.py`, cached under `benchmarks/data/`) and in
the same run, each in a fresh process:
- `raw`: a plain stdlib `sqlite3` scan of the columns the analysis needs, into NumPy (the floor);
- `reader`: nsys_cc's reader alone (the reads `analyze` makes);
- `analyze`: nsys_cc's full analyze path (`cost_coefficient`: ranges, projection, phases, kernels, c);
- `nsys`: `nsys stats -r nvtxgpuproj` (NVIDIA's projection), bounded by `--nsys-timeout`.
Reported: the work's own time (median of `--repeat` runs; process start and imports excluded for the Python
contenders, whole process for nsys) and the peak RSS of the process (largest, with its children for nsys).
Where nsys finished, a seeded sample of its rows is compared with nsys_cc's projection of the same ranges.

Usage: `python benchmarks/run.py [--quick] [--sizes 100k,1M,5M] [--repeat 3] [--nsys-timeout 300] [--no-nsys]
[--graphs] [--layer-ranges] [--markdown FILE]` (`make bench` runs it with the defaults: ~15 min on 2 cores, most of
it nsys; `--quick`: 100k and 1M, one run each, nsys at 100k only, ~4 min). Results go to
`benchmarks/results/bench-<time>.json` (git-ignored) and a Markdown table is printed (the one kept in
docs/PERFORMANCE.md).
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import json
import os
import platform
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

import generate  # noqa: E402

RESULTS = HERE / "results"
CONTENDERS = ("raw", "reader", "analyze")
DRAFT = generate.Shape(kernels=4_000, seed=1, layers=1, duration_scale=0.3)


def parse_size(text: str) -> int:
    text = text.strip().lower()
    mult = {"k": 1_000, "m": 1_000_000}.get(text[-1], 1)
    return int(float(text.rstrip("km")) * mult)


def find_nsys() -> str | None:
    for cand in (os.environ.get("NSYS"), str(ROOT / ".nsys/usr/lib/nsight-systems/bin/nsys")):
        if cand and os.access(cand, os.X_OK):
            return cand
    from shutil import which

    return which("nsys")


def _tree(pid: int) -> list[int]:
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        try:
            for task in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{task}/children") as fh:
                    todo += [int(c) for c in fh.read().split()]
        except OSError:
            pass
    return out


def _vmhwm_mib(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def run_process(cmd: list[str], timeout: float) -> dict:
    """Run `cmd` in its own process group: wall time, stdout/stderr, whether it was killed at `timeout`, and the
    largest peak RSS (VmHWM, MiB) seen among the process and its descendants, sampled every 0.2 s (Python
    contenders report their own exactly; this is for nsys, which runs its work in child processes)."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        p = subprocess.Popen(cmd, stdout=out, stderr=err, start_new_session=True, cwd=ROOT)
        timed_out = False
        peak: dict[int, float] = {}
        last_sample = 0.0
        while True:
            pid, status, _ = os.wait4(p.pid, os.WNOHANG)
            if pid:
                break
            now = time.perf_counter()
            if now - last_sample > 0.2:
                for q in _tree(p.pid):
                    peak[q] = max(peak.get(q, 0.0), _vmhwm_mib(q))
                last_sample = now
            if now - t0 > timeout:
                os.killpg(p.pid, signal.SIGKILL)
                os.wait4(p.pid, 0)
                status, timed_out = 0, True
                break
            time.sleep(0.01)
        wall = time.perf_counter() - t0
        p.returncode = -9 if timed_out else os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        return {"wall": wall, "rss_mib": max(peak.values(), default=float("nan")),
                "stdout": out.read().decode(errors="replace"), "stderr": err.read().decode(errors="replace")[-2000:],
                "rc": p.returncode, "timed_out": timed_out}


def contender(name: str, path: Path, *drafts: Path) -> dict:
    """One contender of `contenders.py` on `path` (and the drafts it takes) in a fresh process."""
    cmd = [sys.executable, str(HERE / "contenders.py"), name, str(path), *map(str, drafts)]
    r = run_process(cmd, timeout=3600)
    if r["rc"] != 0:
        raise RuntimeError(f"{name} on {path.name} failed (rc {r['rc']}):\n{r['stderr']}")
    info = json.loads(r["stdout"].strip().splitlines()[-1])
    return {"seconds": info.pop("seconds"), "wall": r["wall"], "rss_mib": info.pop("peak_rss_mib"),
            "imports_rss_mib": info.pop("imports_rss_mib"), "info": info}


def nsys_stats(nsys: str, path: Path, timeout: float, workdir: Path) -> dict:
    """nsys stats on `path`; its CSV is kept in `workdir` (benchmarks/results/)."""
    prefix = workdir / f"nsys-{path.stem}"
    csv_path = Path(f"{prefix}_nvtxgpuproj.csv")
    csv_path.unlink(missing_ok=True)  # nsys stats refuses to overwrite a report
    cmd = [nsys, "stats", "--report", "nvtxgpuproj", "--format", "csv", "--output", str(prefix), str(path)]
    r = run_process(cmd, timeout)
    result = {"seconds": r["wall"], "wall": r["wall"], "rss_mib": r["rss_mib"], "timed_out": r["timed_out"],
              "rc": r["rc"]}
    if not r["timed_out"] and r["rc"] == 0 and csv_path.exists():
        result["csv"] = str(csv_path)
    elif not r["timed_out"]:
        result["error"] = (r["stderr"] + r["stdout"])[-500:]
        print(f"nsys stats failed (rc {r['rc']}): {result['error']}", file=sys.stderr)
    return result


def compare_with_nsys(path: Path, csv_path: str, sample: int, seed: int) -> dict:
    """nsys's nvtxgpuproj rows against nsys_cc's projection: same projected ranges, and on a seeded sample of them
    the same projected start, duration, op count, level and parent."""
    import pandas as pd

    from nsys_cc.analysis.forwards.projection import project
    from nsys_cc.trace import open_trace

    with open(csv_path, newline="") as fh:
        # Headers carry units in 2022.4 ("Projected Start (ns)"); ParentId is "None" for a root.
        rows = [{k.split(" (")[0]: v for k, v in row.items()} for row in csv.DictReader(fh)]
    with open_trace(path) as trace:
        ours = project(trace).set_index("range_id")
    projected = set(ours.index[ours["gpu_ops"].fillna(0).to_numpy() > 0].tolist())
    theirs = {int(r["RangeId"]): r for r in rows}
    rng = np.random.default_rng(seed)
    ids = sorted(theirs)
    picked = rng.choice(ids, size=min(sample, len(ids)), replace=False) if ids else []
    mismatches = []
    for rid in picked:
        r, o = theirs[int(rid)], ours.loc[int(rid)]
        want = {
            "proj_start_ns": int(r["Projected Start"]),
            "proj_duration_ns": int(r["Projected Duration"]),
            "gpu_ops": int(r["NumGPUOps"]),
            "level": int(r["Lvl"]),
            "parent_id": int(r["ParentId"]) if r["ParentId"] not in ("", "None", None) else None,
        }
        got = {k: None if pd.isna(o[k]) else int(o[k]) for k in want}
        if got != want:
            mismatches.append({"range_id": int(rid), "nsys": want, "nsys_cc": got})
    return {
        "nsys_rows": len(rows),
        "same_projected_ranges": projected == set(theirs),
        "only_nsys": len(set(theirs) - projected),
        "only_nsys_cc": len(projected - set(theirs)),
        "sampled": len(picked),
        "mismatches": mismatches[:5],
        "mismatch_count": len(mismatches),
    }


def table_counts(path: Path) -> dict:
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    names = {"kernels": "CUPTI_ACTIVITY_KIND_KERNEL", "api": "CUPTI_ACTIVITY_KIND_RUNTIME", "nvtx": "NVTX_EVENTS",
             "memcpy": "CUPTI_ACTIVITY_KIND_MEMCPY", "memset": "CUPTI_ACTIVITY_KIND_MEMSET"}
    out = {k: conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for k, t in names.items()}
    conn.close()
    return out


def machine(nsys: str | None) -> dict:
    import pandas
    import sqlalchemy

    cpu = "?"
    try:
        cpu = next(line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    mem = "?"
    try:
        mem = f"{int(open('/proc/meminfo').readline().split()[1]) / 2**20:.0f} GiB"
    except (OSError, ValueError, IndexError):
        pass
    versions = {"python": platform.python_version(), "sqlite": sqlite3.sqlite_version, "numpy": np.__version__,
                "pandas": pandas.__version__, "sqlalchemy": sqlalchemy.__version__}
    for mod in ("pyarrow", "adbc_driver_sqlite", "apsw"):
        try:
            versions[mod] = __import__(mod).__version__
        except (ImportError, AttributeError):
            pass
    if nsys:
        try:
            versions["nsys"] = subprocess.run([nsys, "--version"], capture_output=True, text=True,
                                              timeout=60).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            pass
    return {"date": dt.datetime.now().isoformat(timespec="seconds"), "cpu": cpu, "cores": os.cpu_count(),
            "memory": mem, "os": platform.platform(), "versions": versions}


def warm_cache(path: Path) -> None:
    with open(path, "rb") as fh:
        while fh.read(1 << 24):
            pass


def summarise(results: list[dict]) -> dict:
    ok = [r for r in results if "analyze" in r]
    goals = {}
    if not ok:
        return goals
    big = max(ok, key=lambda r: r["kernels"])
    goals["largest_kernels"] = big["kernels"]
    goals["analyze_over_raw"] = big["analyze"]["seconds"] / big["raw"]["seconds"]
    goals["reader_over_raw"] = big["reader"]["seconds"] / big["raw"]["seconds"]
    goals["rss_analyze_over_raw"] = big["analyze"]["rss_mib"] / big["raw"]["rss_mib"]
    goals["rss_imports"] = {n: big[n]["imports_rss_mib"] for n in CONTENDERS}
    small = min(ok, key=lambda r: r["kernels"])
    if "nsys" in small and "error" not in small["nsys"]:
        n = small["nsys"]
        goals["nsys_kernels"] = small["kernels"]
        goals["nsys_over_analyze"] = n["seconds"] / small["analyze"]["seconds"]
        goals["nsys_over_analyze_process"] = n["seconds"] / small["analyze"]["wall"]
        goals["nsys_timed_out"] = n.get("timed_out", False)
    if len(ok) >= 2:
        k = np.log([r["kernels"] for r in ok])
        a, b = sorted(ok, key=lambda r: r["kernels"])[-2:]
        for name in CONTENDERS:
            goals[f"exponent_{name}"] = float(np.polyfit(k, np.log([r[name]["seconds"] for r in ok]), 1)[0])
            # Between the two largest sizes: fixed costs (the draft, imports' lazy parts) no longer weigh.
            goals[f"exponent_top_{name}"] = float(np.log(b[name]["seconds"] / a[name]["seconds"])
                                                  / np.log(b["kernels"] / a["kernels"]))
        goals["top_sizes"] = [a["kernels"], b["kernels"]]
    return goals


def fmt_s(entry: dict | None) -> str:
    """A contender's time for the table, with its unit; "–" when it did not run."""
    if not entry:
        return "–"
    if entry.get("skipped"):
        return f"not run (> {entry['seconds']:.0f} s at a smaller size)"
    if entry.get("timed_out"):
        return f"> {entry['seconds']:.0f} s (stopped)"
    if entry.get("error"):
        return "failed"
    return f"{entry['seconds']:.2f} s" if entry["seconds"] < 100 else f"{entry['seconds']:.0f} s"


def markdown(results: list[dict], goals: dict, info: dict, args) -> str:
    v = info["versions"]
    lines = [
        f"Machine: {info['cpu']}, {info['cores']} cores, {info['memory']}; {info['os']}. Date: {info['date']}.",
        "Versions: " + ", ".join(f"{k} {val}" for k, val in v.items()) + ".",
        f"Exports: `benchmarks/generate.py` seed {args.seed}{', CUDA graphs' if args.graphs else ''}"
        f"{', layer ranges' if args.layer_ranges else ''}; "
        f"median of {args.repeat} run(s) per contender; nsys bounded by {args.nsys_timeout:.0f} s.",
        "",
        "| kernels | API calls | NVTX ranges | export | raw scan | reader | analyze | nsys stats | RSS raw | "
        "RSS reader | RSS analyze | RSS nsys |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        c = r["counts"]
        rss = [f"{r[k]['rss_mib']:.0f} MiB" if k in r and r[k]["rss_mib"] == r[k]["rss_mib"] else "–"
               for k in (*CONTENDERS, "nsys")]
        lines.append(
            f"| {r['kernels']:,} | {c['api']:,} | {c['nvtx']:,} | {r['mib']:.0f} MiB | {fmt_s(r.get('raw'))} | "
            f"{fmt_s(r.get('reader'))} | {fmt_s(r.get('analyze'))} | {fmt_s(r.get('nsys'))} | "
            + " | ".join(rss) + " |"
        )
    lines.append("")
    if goals:
        lines.append(f"- analyze ÷ raw scan at {goals['largest_kernels']:,} kernels: "
                     f"**{goals['analyze_over_raw']:.2f}×** (goal ≤ 1.3×); "
                     f"reader ÷ raw scan: {goals['reader_over_raw']:.2f}×.")
        imp = goals["rss_imports"]
        lines.append(f"- peak RSS analyze ÷ raw scan at {goals['largest_kernels']:,} kernels: "
                     f"**{goals['rss_analyze_over_raw']:.2f}×** (goal ≤ 2×); of which after the imports alone: "
                     f"raw {imp['raw']:.0f} MiB, analyze {imp['analyze']:.0f} MiB "
                     "(NumPy vs pandas, pyarrow, SQLAlchemy).")
        if "nsys_over_analyze" in goals:
            more = " (nsys timed out: the ratio is a lower bound)" if goals["nsys_timed_out"] else ""
            lines.append(f"- nsys stats ÷ analyze at {goals['nsys_kernels']:,} kernels: "
                         f"**{goals['nsys_over_analyze']:.0f}×** (goal ≥ 100×); "
                         "against analyze's whole process (interpreter, imports): "
                         f"{goals['nsys_over_analyze_process']:.0f}×{more}.")
        if "exponent_analyze" in goals:
            lo, hi = goals["top_sizes"]
            lines.append("- time ∝ kernels^k, fitted over all sizes: "
                         + ", ".join(f"{n} k = {goals[f'exponent_{n}']:.2f}" for n in CONTENDERS)
                         + f"; from {lo:,} to {hi:,} kernels: "
                         + ", ".join(f"{n} k = {goals[f'exponent_top_{n}']:.2f}" for n in CONTENDERS)
                         + " (1 = linear).")
    for r in results:
        chk = r.get("check")
        if chk and "error" in chk:
            lines.append(f"- check at {r['kernels']:,} kernels failed: {chk['error']}")
        elif chk:
            lines.append(
                f"- check at {r['kernels']:,} kernels: {chk['nsys_rows']:,} nsys rows; same set of projected ranges: "
                f"{chk['same_projected_ranges']}; {chk['sampled']} sampled rows, {chk['mismatch_count']} mismatches.")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", default="100k,1M,5M", help="kernels per export, comma-separated (default 100k,1M,5M)")
    p.add_argument("--quick", action="store_true", help="100k and 1M kernels, one run each, nsys at 100k only")
    p.add_argument("--repeat", type=int, default=3, help="runs per contender and size (median reported)")
    p.add_argument("--nsys-timeout", type=float, default=300.0,
                   help="seconds before nsys stats is stopped (bigger sizes are then not run)")
    p.add_argument("--no-nsys", action="store_true", help="skip nsys stats")
    p.add_argument("--nsys-sizes", default=None, help="sizes at which to run nsys (default: all)")
    p.add_argument("--graphs", action="store_true", help="exports whose decode forwards replay CUDA graphs")
    p.add_argument("--layer-ranges", action="store_true", help="exports with an NVTX range per layer too")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--check-rows", type=int, default=300, help="nsys rows compared with nsys_cc (sample)")
    p.add_argument("--markdown", type=Path, help="also write the Markdown summary to this file")
    args = p.parse_args(argv)
    if args.quick:
        args.sizes, args.repeat, args.nsys_sizes = "100k,1M", 1, args.nsys_sizes or "100k"
    sizes = [parse_size(s) for s in args.sizes.split(",")]
    nsys_sizes = set(sizes if args.nsys_sizes is None else [parse_size(s) for s in args.nsys_sizes.split(",")])
    nsys = None if args.no_nsys else find_nsys()
    if not args.no_nsys and nsys is None:
        print("nsys not found (set $NSYS or run `make nsys`): nsys stats is skipped", file=sys.stderr)
    info = machine(nsys)
    draft = generate.ensure(DRAFT)
    results = []
    nsys_stopped_at = None
    RESULTS.mkdir(exist_ok=True)
    for n in sizes:
        path = generate.ensure(generate.Shape(kernels=n, seed=args.seed, graphs=args.graphs,
                                              layer_ranges=args.layer_ranges))
        entry = {"kernels": n, "file": path.name, "mib": path.stat().st_size / 2**20, "counts": table_counts(path)}
        warm_cache(path)
        warm_cache(draft)
        runs = {name: [] for name in CONTENDERS}
        for i in range(args.repeat):
            for name in CONTENDERS:  # interleaved, so slow phases of a noisy machine hit every contender
                runs[name].append(contender(name, path, draft))
                print(f"[bench] {n:,} kernels, {name} run {i + 1}: {runs[name][-1]['seconds']:.2f} s, "
                      f"{runs[name][-1]['rss_mib']:.0f} MiB", file=sys.stderr, flush=True)
        for name, rs in runs.items():
            entry[name] = {
                "seconds": float(np.median([r["seconds"] for r in rs])),
                "best": min(r["seconds"] for r in rs),
                "wall": float(np.median([r["wall"] for r in rs])),
                "rss_mib": float(np.median([r["rss_mib"] for r in rs])),
                "imports_rss_mib": float(np.median([r["imports_rss_mib"] for r in rs])),
                "runs": [r["seconds"] for r in rs],
                "info": rs[-1]["info"],
            }
        if nsys and n in nsys_sizes and nsys_stopped_at is not None:
            # nsys's cost grows faster than the export (its parent query is quadratic in NVTX ranges): a bigger
            # export cannot finish in the time a smaller one did not.
            entry["nsys"] = {"seconds": args.nsys_timeout, "timed_out": True, "skipped": True,
                             "rss_mib": float("nan"), "note": f"not run: timed out at {nsys_stopped_at:,} kernels"}
        elif nsys and n in nsys_sizes:
            print(f"[bench] {n:,} kernels, nsys stats (up to {args.nsys_timeout:.0f} s) …", file=sys.stderr, flush=True)
            entry["nsys"] = nsys_stats(nsys, path, args.nsys_timeout, RESULTS)
            if entry["nsys"]["timed_out"]:
                nsys_stopped_at = n
            print(f"[bench] {n:,} kernels, nsys stats: {fmt_s(entry['nsys'])}", file=sys.stderr, flush=True)
            if "csv" in entry["nsys"]:
                try:
                    entry["check"] = compare_with_nsys(path, entry["nsys"]["csv"], args.check_rows, args.seed)
                except Exception as exc:  # noqa: BLE001 — report it, keep the timings
                    entry["check"] = {"error": repr(exc)}
        results.append(entry)
    goals = summarise(results)
    text = markdown(results, goals, info, args)
    out = RESULTS / f"bench-{dt.datetime.now():%Y%m%d-%H%M%S}.json"
    out.write_text(json.dumps({"machine": info, "args": vars(args) | {"markdown": str(args.markdown)},
                               "results": results, "goals": goals}, indent=1))
    if args.markdown:
        args.markdown.write_text(text + "\n")
    print(text)
    print(f"\n(results: {out.relative_to(ROOT)})", file=sys.stderr)
    bad = [r for r in results if r.get("check") and ("error" in r["check"] or r["check"]["mismatch_count"]
                                                    or not r["check"]["same_projected_ranges"])]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
