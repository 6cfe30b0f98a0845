"""Benchmark: a CLI that answers at once. `nsys-cc` against the bare imports of the libraries it stands on.

Timed side by side, in the same run, each a whole fresh process (start-up, imports, work, exit), hyperfine-style:
- `python -c "import click"` and `nsys-cc --help` (goal: help ≤ 3× the bare click import);
- `nsys-cc speedup --c 0.0662 --acceptance 0.8` (a verb that needs neither pandas nor SQLAlchemy; against click too);
- `python -c "import pandas"` and `nsys-cc analyze` of two small fixture traces (fixtures/vllm, 20 forwards each;
  goal: analyze ≤ 1.6× the bare pandas import), and `nsys-cc analyze spec` of a small speculative trace
  (fixtures/spec/vllm_scopes.spec-g3.sqlite, vLLM's own scopes) with a draft (same goal);
- `python -c "pass"`: the interpreter alone, for reference.
nsys_cc is byte-compiled first (`compileall`), as `pip install` does: an editable install under
`PYTHONDONTWRITEBYTECODE=1` (this project's machines) would otherwise compile every module in every process, which
no installed library pays (`--no-compile` to measure that). Every command runs `--warmup` times first (page cache),
then `--runs` rounds; in each round every command runs once, in a fresh random order (a noisy machine's drift falls
on all of them alike). Reported per
command: median, min, and the interquartile range in ms; the goals are ratios of medians measured in the same run.
The machine's load average before and after is printed beside them: on a shared machine the absolute times move,
the ratios much less.

Usage: `python benchmarks/cli_startup.py [--runs 21] [--warmup 3] [--no-compile] [--markdown FILE] [--check]`
(`make bench-cli`; also part of `make bench`). `--check`: exit 1 when a goal is missed. Results go to
`benchmarks/results/cli-<time>.json` (git-ignored); the Markdown table is the one kept in docs/PERFORMANCE.md.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
RESULTS = HERE / "results"
FIXTURES = ROOT / "fixtures" / "vllm"
SPEC = ROOT / "fixtures" / "spec"
PYTHON = sys.executable
NSYS_CC_SCRIPT = str(Path(sys.executable).with_name("nsys-cc"))
# The console script run by this interpreter, not through its `#!` line: the same process, and a venv whose
# shebang names a moved or removed interpreter (a copied or shared .venv) still measures.
NSYS_CC = [PYTHON, NSYS_CC_SCRIPT]

COMMANDS: dict[str, list[str]] = {
    "python": [PYTHON, "-c", "pass"],
    "import click": [PYTHON, "-c", "import click"],
    "nsys-cc --help": [*NSYS_CC, "--help"],
    "nsys-cc speedup": [*NSYS_CC, "speedup", "--c", "0.0662", "--acceptance", "0.8"],
    "import pandas": [PYTHON, "-c", "import pandas"],
    "nsys-cc analyze": [*NSYS_CC, "analyze", str(FIXTURES / "tiny-llama-target.sqlite"),
                        str(FIXTURES / "tiny-llama-draft-s.sqlite")],
    # A small speculative trace (vLLM's own scopes, γ = 3: the token parts, the scope fallback) and a draft.
    "nsys-cc analyze spec": [*NSYS_CC, "analyze", str(SPEC / "vllm_scopes.spec-g3.sqlite"),
                             str(FIXTURES / "tiny-llama-draft-s.sqlite")],
}
# (command, baseline, largest ratio of medians allowed)
GOALS = [("nsys-cc --help", "import click", 3.0), ("nsys-cc analyze", "import pandas", 1.6),
         ("nsys-cc analyze spec", "import pandas", 1.6)]
# Reported beside the goals, without one.
RATIOS = GOALS + [("nsys-cc speedup", "import click", None)]


def run_once(cmd: list[str]) -> float:
    """Seconds of one fresh process, start to exit; its output is discarded, a failure stops the benchmark."""
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=ROOT)
    elapsed = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}): {proc.stderr.decode()[-500:]}")
    return elapsed


def compile_package() -> str:
    """Byte-compile the nsys_cc that PYTHON imports (as an install does); its directory."""
    where = subprocess.run([PYTHON, "-c", "import os, nsys_cc; print(os.path.dirname(nsys_cc.__file__))"],
                           capture_output=True, text=True, check=True, cwd="/").stdout.strip()
    subprocess.run([PYTHON, "-m", "compileall", "-q", where], check=True)
    return where


def measure(runs: int, warmup: int, seed: int) -> dict[str, list[float]]:
    for cmd in COMMANDS.values():
        for _ in range(warmup):
            run_once(cmd)
    rng = random.Random(seed)
    times: dict[str, list[float]] = {name: [] for name in COMMANDS}
    for _ in range(runs):
        order = list(COMMANDS)
        rng.shuffle(order)
        for name in order:
            times[name].append(run_once(COMMANDS[name]))
    return times


def summary(times: dict[str, list[float]]) -> dict[str, dict[str, float]]:
    out = {}
    for name, ts in times.items():
        q1, _, q3 = statistics.quantiles(ts, n=4) if len(ts) >= 2 else (ts[0], ts[0], ts[0])
        out[name] = {"median_ms": statistics.median(ts) * 1e3, "min_ms": min(ts) * 1e3, "q1_ms": q1 * 1e3,
                     "q3_ms": q3 * 1e3, "runs": len(ts)}
    return out


def machine() -> dict:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"cpu": cpu, "cores": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()}


def markdown(result: dict) -> str:
    m, stats = result["machine"], result["summary"]
    lines = [f"{result['date']}, {m['cpu']}, {m['cores']} cores, Python {m['python']}; load average "
             f"{result['load_before'][0]:.2f} before, {result['load_after'][0]:.2f} after; {result['runs']} rounds "
             f"after {result['warmup']} warm-up runs each; nsys_cc "
             f"{'byte-compiled first' if result['compiled'] else 'not byte-compiled'}.", "",
             "| command | median (ms) | min (ms) | IQR (ms) |", "|---|---|---|---|"]
    for name, s in stats.items():
        lines.append(f"| `{name}` | {s['median_ms']:.0f} | {s['min_ms']:.0f} | {s['q1_ms']:.0f}–{s['q3_ms']:.0f} |")
    lines += ["", "| ratio of medians | measured | goal | met |", "|---|---|---|---|"]
    for r in result["ratios"]:
        goal = "–" if r["goal"] is None else f"≤ {r['goal']:g}×"
        met = "–" if r["goal"] is None else ("yes" if r["met"] else "**no**")
        lines.append(f"| `{r['command']}` ÷ `{r['baseline']}` | {r['ratio']:.2f}× | {goal} | {met} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=21, help="rounds (every command once per round, median reported)")
    p.add_argument("--warmup", type=int, default=3, help="unmeasured runs of each command first")
    p.add_argument("--seed", type=int, default=0, help="seed of the order within rounds")
    p.add_argument("--no-compile", action="store_true", help="do not byte-compile nsys_cc first")
    p.add_argument("--markdown", type=Path, help="also write the Markdown summary to this file")
    p.add_argument("--check", action="store_true", help="exit 1 when a goal is missed")
    args = p.parse_args(argv)
    if not Path(NSYS_CC_SCRIPT).exists():
        raise SystemExit(f"{NSYS_CC_SCRIPT} not found: run `make setup` (the benchmark times the installed console "
                         "script)")
    package = None if args.no_compile else compile_package()
    load_before = os.getloadavg()
    times = measure(args.runs, args.warmup, args.seed)
    stats = summary(times)
    ratios = []
    for command, baseline, goal in RATIOS:
        ratio = stats[command]["median_ms"] / stats[baseline]["median_ms"]
        ratios.append({"command": command, "baseline": baseline, "ratio": ratio, "goal": goal,
                       "met": None if goal is None else ratio <= goal})
    result = {"date": dt.datetime.now().astimezone().isoformat(timespec="seconds"), "machine": machine(),
              "load_before": load_before, "load_after": os.getloadavg(), "runs": args.runs, "warmup": args.warmup,
              "compiled": package,
              "commands": {k: v for k, v in COMMANDS.items()}, "summary": stats, "ratios": ratios, "times_s": times}
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / f"cli-{dt.datetime.now():%Y%m%d-%H%M%S}.json"
    out.write_text(json.dumps(result, indent=2))
    text = markdown(result)
    print(text, end="")
    print(f"results: {out}", file=sys.stderr)
    if args.markdown:
        args.markdown.write_text(text)
    missed = [r for r in ratios if r["met"] is False]
    return 1 if args.check and missed else 0


if __name__ == "__main__":
    sys.exit(main())
