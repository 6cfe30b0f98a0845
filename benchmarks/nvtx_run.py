"""Benchmark for NVTX-heavy exports (issue 15): nsys_cc against a stdlib scan and `nsys stats`, same run.

Exports, each cached under `benchmarks/data/` (git-ignored):
- `--program SIZES`: the C program `benchmarks/nvtx_heavy.c`, built here against the NVTX3 headers of the nsys
  install and run under real `nsys profile -t nvtx`, then `nsys export --type sqlite` (both timed: the
  `.nsys-rep` goal compares the analysis with the export). SIZES are forwards: 3 NVTX ranges each (iteration,
  forward, `sample` beside it).
- `--generated SIZES`: the same shape written by `benchmarks/generate.py --nvtx-forwards` (16 M ranges: 5333334
  forwards, i.e. `--generated 5333334`).
Contenders, each in a fresh process, interleaved, page cache warm (`benchmarks/contenders.py`):
- `nvtx_raw`: stdlib `fetchall` of NVTX_EVENTS' start, end, text, textId, globalTid, eventType (the floor);
- `ranges`: `nsys-cc ranges EXPORT --range "model_executable()" --format csv` (to /dev/null);
- `analyze`: `cost_coefficient(EXPORT, [DRAFT])` (DRAFT: the same shape at 10k forwards);
- `nsys stats -r nvtxsum` (whole process), whose per-name counts and totals are checked against nsys_cc's.
Times: the work itself (after imports) for the Python contenders, the whole process for nsys. Peak RSS: VmHWM.

Usage: `python benchmarks/nvtx_run.py [--program 2M,5M] [--generated 5333334] [--repeat 1] [--nsys-timeout 900]
[--markdown FILE]`; `--quick`: `--program 20k,200k --generated 100k` (a few minutes, for checking the benchmark).
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

import generate  # noqa: E402
from run import contender, find_nsys, fmt_s, machine, parse_size, run_process, warm_cache  # noqa: E402

RESULTS = HERE / "results"
CONTENDERS = ("nvtx_raw", "ranges", "analyze")
DRAFT_FORWARDS = 10_000


def nvtx_include(nsys: str) -> Path:
    """The NVTX3 headers shipped with the nsys install (target-linux-x64/nvtx/include)."""
    root = Path(nsys).resolve().parent.parent
    for cand in [root, *root.parents][:4]:
        hits = sorted(cand.glob("**/target-linux-x64/nvtx/include/nvtx3/nvToolsExt.h"))
        if hits:
            return hits[0].parent.parent
    raise SystemExit(f"no NVTX3 headers (target-linux-x64/nvtx/include) found near {nsys}")


def build_program(nsys: str) -> Path:
    exe = generate.DATA / "nvtx_heavy"
    src = HERE / "nvtx_heavy.c"
    if not exe.exists() or exe.stat().st_mtime < src.stat().st_mtime:
        generate.DATA.mkdir(parents=True, exist_ok=True)
        cc = os.environ.get("CC", "cc")
        subprocess.run([cc, "-O2", "-Wall", f"-I{nvtx_include(nsys)}", str(src), "-ldl", "-o", str(exe)], check=True)
    return exe


def profiled(nsys: str, forwards: int, timeout: float) -> tuple[Path, dict]:
    """The program's export at `forwards` (profiled and exported once; the times of both are kept beside it)."""
    exe = build_program(nsys)
    stem = generate.DATA / f"nvtx_program_{generate._human(forwards)}fwd"
    sqlite, rep, times = stem.with_suffix(".sqlite"), stem.with_suffix(".nsys-rep"), stem.with_suffix(".json")
    if sqlite.exists() and times.exists():
        return sqlite, json.loads(times.read_text())
    print(f"[nvtx-bench] nsys profile: {forwards:,} forwards …", file=sys.stderr, flush=True)
    r = run_process([nsys, "profile", "-t", "nvtx", "-s", "none", "--cpuctxsw=none", "-f", "true", "-o", str(stem),
                     str(exe), str(forwards)], timeout)
    if r["rc"] != 0 or not rep.exists():
        raise SystemExit(f"nsys profile failed (rc {r['rc']}): {r['stderr'][-800:]}")
    print(f"[nvtx-bench] nsys export: {forwards:,} forwards …", file=sys.stderr, flush=True)
    sqlite.unlink(missing_ok=True)
    e = run_process([nsys, "export", "--type", "sqlite", "-f", "true", "-o", str(sqlite), str(rep)], timeout)
    if e["rc"] != 0 or not sqlite.exists():
        raise SystemExit(f"nsys export failed (rc {e['rc']}): {e['stderr'][-800:]}")
    info = {"profile_s": r["wall"], "export_s": e["wall"], "export_rss_mib": e["rss_mib"],
            "rep_mib": rep.stat().st_size / 2**20}
    times.write_text(json.dumps(info))
    return sqlite, info


def nvtxsum(nsys: str, path: Path, timeout: float) -> dict:
    prefix = RESULTS / f"nsys-{path.stem}"
    out = Path(f"{prefix}_nvtxsum.csv")
    out.unlink(missing_ok=True)
    r = run_process([nsys, "stats", "-q", "-r", "nvtxsum", "-f", "csv", "-o", str(prefix), str(path)], timeout)
    res = {"seconds": r["wall"], "rss_mib": r["rss_mib"], "timed_out": r["timed_out"], "rc": r["rc"]}
    if r["rc"] == 0 and out.exists():
        res["csv"] = str(out)
    elif not r["timed_out"]:
        res["error"] = (r["stderr"] + r["stdout"])[-500:]
    return res


def check_nvtxsum(path: Path, csv_path: str) -> dict:
    """nsys's per-name instances and total time against nsys_cc's ranges (unnamed ranges included)."""
    from nsys_cc.trace import open_trace

    with open(csv_path, newline="") as fh:
        theirs = {(r["Range"] or ""): (int(r["Instances"]), int(r["Total Time (ns)"])) for r in csv.DictReader(fh)}
    with open_trace(path) as trace:
        r = trace.nvtx_ranges()
        names = r["qualified_name"].astype(object).fillna("")
        g = r.groupby(names)["duration_ns"].agg(["count", "sum"])
    ours = {str(k): (int(v["count"]), int(v["sum"])) for k, v in g.iterrows()}
    return {"names": len(theirs), "equal": ours == theirs, "ranges": int(sum(c for c, _ in ours.values()))}


def export_again(nsys: str, path: Path, timeout: float) -> dict:
    """`nsys export` of the report beside `path` once more, timed now (the export of the first run was made whenever
    the report was profiled, maybe on a busy machine): the `.nsys-rep` goal compares the analysis with it."""
    rep = path.with_suffix(".nsys-rep")
    out = path.with_name(path.stem + ".retimed.sqlite")
    out.unlink(missing_ok=True)
    try:
        e = run_process([nsys, "export", "--type", "sqlite", "-f", "true", "-o", str(out), str(rep)], timeout)
    finally:
        out.unlink(missing_ok=True)
    if e["rc"] != 0:
        raise SystemExit(f"nsys export failed (rc {e['rc']}): {e['stderr'][-800:]}")
    return {"export_s": e["wall"], "export_rss_mib": e["rss_mib"]}


def measure(label: str, path: Path, draft: Path, args, nsys: str | None, extra: dict) -> dict:
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    conn_rows = conn.execute("SELECT count(*) FROM NVTX_EVENTS").fetchone()[0]
    conn.close()
    entry = {"source": label, "file": path.name, "mib": path.stat().st_size / 2**20, "nvtx_rows": conn_rows, **extra}
    warm_cache(path)
    warm_cache(draft)
    runs = {n: [] for n in CONTENDERS}
    for i in range(args.repeat):
        for name in CONTENDERS:
            runs[name].append(contender(name, path, draft))
            print(f"[nvtx-bench] {label} {path.name}: {name} run {i + 1}: {runs[name][-1]['seconds']:.2f} s, "
                  f"{runs[name][-1]['rss_mib']:.0f} MiB", file=sys.stderr, flush=True)
    for name, rs in runs.items():
        entry[name] = {"seconds": float(np.median([r["seconds"] for r in rs])), "runs": [r["seconds"] for r in rs],
                       "rss_mib": float(np.median([r["rss_mib"] for r in rs])), "info": rs[-1]["info"]}
    if nsys and "export_s" in extra:
        print(f"[nvtx-bench] {path.name}: nsys export (timed again) …", file=sys.stderr, flush=True)
        entry.update(export_again(nsys, path, args.nsys_timeout))
    if nsys and not args.no_nsys:
        print(f"[nvtx-bench] {path.name}: nsys stats -r nvtxsum …", file=sys.stderr, flush=True)
        entry["nsys"] = nvtxsum(nsys, path, args.nsys_timeout)
        if "csv" in entry["nsys"]:
            entry["check"] = check_nvtxsum(path, entry["nsys"]["csv"])
    return entry


def several_traces(results: list[dict]) -> dict | None:
    """`analyze` of the two biggest exports and the small draft at once: its peak RSS against the biggest alone."""
    big = sorted((r for r in results if r["source"].startswith("C program")), key=lambda r: -r["nvtx_rows"])[:2]
    if len(big) < 2:
        return None
    paths = [generate.DATA / r["file"] for r in big]
    draft = paths[0].with_name(f"nvtx_program_{generate._human(DRAFT_FORWARDS)}fwd.sqlite")
    print("[nvtx-bench] analyze of several traces at once …", file=sys.stderr, flush=True)
    got = contender("analyze_many", paths[0], paths[1], draft)
    one = big[0]["analyze"]["rss_mib"]
    line = (f"- Several traces in one `analyze` ({paths[0].name} as the target, {paths[1].name} and {draft.name} as "
            f"drafts): peak RSS {got['rss_mib']:.0f} MiB, {got['rss_mib'] / one:.2f}× the {one:.0f} MiB of "
            f"the biggest alone (goal: about one trace); {got['seconds']:.1f} s.")
    return {"seconds": got["seconds"], "rss_mib": got["rss_mib"], "one_rss_mib": one, "line": line}


def markdown(results: list[dict], info: dict, args) -> str:
    v = info["versions"]
    lines = [
        f"Machine: {info['cpu']}, {info['cores']} cores, {info['memory']}; {info['os']}. Date: {info['date']}"
        f"{' (taken under load: ' + args.load_note + ')' if args.load_note else ''}.",
        "Versions: " + ", ".join(f"{k} {val}" for k, val in v.items()) + ".",
        f"Median of {args.repeat} run(s) per contender.",
        "",
        "| source | NVTX ranges | export | stdlib fetchall | ranges (CSV) | analyze | nsys stats nvtxsum | "
        "RSS fetchall | RSS ranges | RSS analyze | RSS nsys | ranges ÷ fetchall | analyze ÷ fetchall | "
        "nsys export |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        raw = r["nvtx_raw"]
        rss = [f"{r[k]['rss_mib']:.0f} MiB" if k in r and r[k].get("rss_mib") == r[k].get("rss_mib") else "–"
               for k in (*CONTENDERS, "nsys")]
        ratio = [f"{r[k]['seconds'] / raw['seconds']:.2f}× / {r[k]['rss_mib'] / raw['rss_mib']:.2f}×"
                 for k in ("ranges", "analyze")]
        export = f"{r['export_s']:.1f} s" if "export_s" in r else "–"
        lines.append(f"| {r['source']} | {r['nvtx_rows']:,} | {r['mib']:.0f} MiB | {fmt_s(raw)} | "
                     f"{fmt_s(r['ranges'])} | {fmt_s(r['analyze'])} | {fmt_s(r.get('nsys'))} | " + " | ".join(rss)
                     + " | " + " | ".join(ratio) + f" | {export} |")
    lines.append("")
    lines.append("Ratios are time / peak RSS against the stdlib fetchall of the same export (goal ≤ 1.0× / ≤ 1.5×).")
    load = info.get("load")
    if load:
        lines.append(f"Load average (1 min) {load[0]:.2f} before, {load[1]:.2f} after: the ratios are of contenders "
                     "run interleaved in the same conditions.")
    for r in results:
        for k in ("analyze", "ranges"):
            ratio = r[k]["seconds"] / r["nvtx_raw"]["seconds"]
            runs, raw = (", ".join(f"{t:.2f}" for t in x[k2]["runs"]) for x, k2 in ((r, k), (r, "nvtx_raw")))
            lines.append(f"- {r['source']}: `{k}` ÷ fetchall {ratio:.2f}× (goal ≤ 1.0×: "
                         f"{'met' if ratio <= 1.0 else '**not met**'}); runs {runs} s against {raw} s.")
    for r in results:
        if "export_s" in r:
            lines.append(f"- {r['source']}: `nsys export` {r['export_s']:.1f} s; analyze after it "
                         f"{r['analyze']['seconds']:.1f} s = {r['analyze']['seconds'] / r['export_s']:.2f}× the export "
                         f"(goal ≤ 0.5×); `nsys profile` took {r['profile_s']:.0f} s.")
        if r.get("check"):
            c = r["check"]
            lines.append(f"- {r['source']}: nvtxsum per name (count, total) equal to nsys_cc's: {c['equal']} "
                         f"({c['names']} names, {c['ranges']:,} ranges).")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--program", default="2M,5M", help="forwards of the nsys-profiled C program (comma-separated)")
    p.add_argument("--generated", default="5333334", help="forwards of generated exports (5333334 = 16 M ranges)")
    p.add_argument("--quick", action="store_true", help="--program 20k,200k --generated 100k")
    p.add_argument("--repeat", type=int, default=1)
    p.add_argument("--no-nsys", action="store_true", help="skip nsys stats")
    p.add_argument("--nsys-timeout", type=float, default=1800.0, help="seconds for each nsys profile/export/stats")
    p.add_argument("--load-note", default="", help="say in the table that the machine was loaded (e.g. 'load 6')")
    p.add_argument("--markdown", type=Path)
    args = p.parse_args(argv)
    if args.quick:
        args.program, args.generated = "20k,200k", "100k"
    nsys = find_nsys()
    if nsys is None and args.program:
        raise SystemExit("nsys not found (set $NSYS): the C program cannot be profiled")
    info = machine(nsys)
    load_before = os.getloadavg()[0]
    RESULTS.mkdir(exist_ok=True)
    results = []
    sizes = [parse_size(s) for s in args.program.split(",") if s]
    if sizes:
        draft, _ = profiled(nsys, DRAFT_FORWARDS, args.nsys_timeout)
        for n in sizes:
            path, times = profiled(nsys, n, args.nsys_timeout)
            results.append(measure(f"C program, {n:,} forwards", path, draft, args, nsys, times))
    gen = [parse_size(s) for s in args.generated.split(",") if s]
    if gen:
        draft = generate.ensure_nvtx_heavy(DRAFT_FORWARDS)
        for n in gen:
            path = generate.ensure_nvtx_heavy(n)
            results.append(measure(f"generated, {n:,} forwards", path, draft, args, nsys, {}))
    many = several_traces(results)
    info["load"] = (load_before, os.getloadavg()[0])
    text = markdown(results, info, args) + (f"\n{many['line']}" if many else "")
    out = RESULTS / f"nvtx-bench-{dt.datetime.now():%Y%m%d-%H%M%S}.json"
    out.write_text(json.dumps({"machine": info, "args": {k: str(v) for k, v in vars(args).items()},
                               "results": results, "several_traces": many}, indent=1))
    if args.markdown:
        args.markdown.write_text(text + "\n")
    print(text)
    print(f"\n(results: {out.relative_to(ROOT)})", file=sys.stderr)
    bad = [r for r in results if r.get("check") and not r["check"]["equal"]]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
