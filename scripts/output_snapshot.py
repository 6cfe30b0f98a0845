#!/usr/bin/env python3
"""What nsys-cc prints and writes on the fixtures, saved so that two versions of the code can be compared byte for byte.

A refactoring (modules moved, names changed) must not change a single output. This script runs the user-facing verbs
(`analyze` in every format, `-o` report directories, `kernels`, `ranges`, `info`, `tune`, `speedup`) on the committed
fixtures, each in a fresh process of the checkout's `nsys-cc`, and writes every stdout, stderr, exit status and
report file under OUT (the checkout's absolute path replaced by `<ROOT>`, so two checkouts compare):

    python scripts/output_snapshot.py OUT            # snapshot of this checkout
    python scripts/output_snapshot.py --compare A B  # exit 1 and name every file that differs

Run it before a change into one folder and after it into another, then `--compare` them (docs/development.md).
"""

from __future__ import annotations

import argparse
import filecmp
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
F = "fixtures"

TRACE_SETS = {
    "vllm": [f"{F}/vllm/tiny-llama-target.sqlite", f"{F}/vllm/tiny-llama-draft-s.sqlite",
             f"{F}/vllm/tiny-llama-draft-xs.sqlite"],
    "spec": [f"{F}/spec/tiny-llama-target.sqlite", f"{F}/spec/tiny-llama-draft-xs.sqlite",
             *(f"{F}/spec/tiny-llama-draft-xs.spec-g{g}.sqlite" for g in (1, 2, 3))],
    "pair-a50": [f"{F}/spec/pair-a50/pair-target-a50.sqlite", f"{F}/spec/pair-a50/pair-draft.sqlite",
                 *(f"{F}/spec/pair-a50/pair-draft.spec-g{g}.sqlite" for g in (1, 2, 3))],
    "batch4": [f"{F}/spec/batch4/tiny-llama-target.sqlite", f"{F}/spec/batch4/tiny-llama-draft-xs.sqlite",
               f"{F}/spec/batch4/tiny-llama-draft-xs.spec-g1.sqlite",
               f"{F}/spec/batch4/tiny-llama-draft-xs.spec-g3.sqlite"],
    "heads": [f"{F}/spec/heads/tiny-llama-target.sqlite", f"{F}/spec/heads/tiny-llama-eagle.spec-g1.sqlite",
              f"{F}/spec/heads/tiny-llama-eagle.spec-g3.sqlite"],
    "ngram": [f"{F}/spec/ngram/pair-target.sqlite", f"{F}/spec/ngram/ngram.spec-g3.sqlite"],
    "interleaved-spec": [f"{F}/interleaved/spec"],
    "tune-bs1": [f"{F}/tune/a99/bs1"],
    "tp": [f"{F}/tp/tiny-llama-target.tp2.sqlite", f"{F}/vllm/tiny-llama-draft-xs.sqlite"],
    "torch": [f"{F}/torch/tiny-llama-target.pt.trace.json.gz", f"{F}/torch/tiny-llama-draft-xs.pt.trace.json.gz",
              f"{F}/torch/tiny-llama-draft-xs.spec-g2.pt.trace.json.gz"],
}
FORMATS = ("table", "json", "csv", "markdown")


def commands() -> list[tuple[str, list[str]]]:
    """(name, argv after `nsys-cc`) for every output the snapshot holds; `{OUT}` is the command's own folder."""
    out: list[tuple[str, list[str]]] = []
    for name, paths in TRACE_SETS.items():
        for fmt in FORMATS:
            out.append((f"analyze-{name}-{fmt}", ["analyze", *paths, "--format", fmt]))
    for name in ("vllm", "pair-a50", "interleaved-spec"):
        out.append((f"analyze-{name}-report", ["analyze", *TRACE_SETS[name], "-o", "{OUT}/report"]))
    out.append(("analyze-runs-1-3", ["analyze", *(f"{F}/interleaved/run-{k}/trace.sqlite" for k in (1, 2, 3))]))
    for fmt in ("table", "json"):
        out.append((f"tune-a99-design-{fmt}", ["tune", f"{F}/tune/a99-design", "--format", fmt]))
        out.append((f"tune-a99-{fmt}", ["tune", f"{F}/tune/a99", "--format", fmt]))
    out.append(("tune-a99-design-report", ["tune", f"{F}/tune/a99-design", "-o", "{OUT}/report"]))
    out.extend(_tune_cases())
    for trace in (f"{F}/vllm/tiny-llama-target.sqlite", f"{F}/nvtx/nvtx_cases.sqlite",
                  f"{F}/tp/tiny-llama-target.tp2.sqlite", f"{F}/torch/tiny-llama-draft-xs.spec-g2.pt.trace.json.gz"):
        stem = f"{Path(trace).parent.name}-{Path(trace).name.split('.')[0]}"
        out.append((f"info-{stem}", ["info", trace, "--format", "json"]))
        out.append((f"ranges-{stem}", ["ranges", trace, "--format", "csv"]))
    out.append(("kernels-vllm", ["kernels", *TRACE_SETS["vllm"][::2]]))
    out.append(("speedup-table", ["speedup", "--c", "0.2", "--acceptance", "0.6"]))
    out.append(("speedup-json", ["speedup", "--c", "0.2", "--acceptance", "0.6", "--gamma", "3", "--format", "json"]))
    return out


def _tune_cases() -> list[tuple[str, list[str]]]:
    """`tune` read back beyond its defaults: an older tune's bs<B>/ directories with a design (fitted and held-out
    cells), a round directory itself, the other workload, a smaller grid, a report of the older layout, and the bad
    input it refuses (one line each)."""
    design = ["--batch-size", "1,8", "--speculate", "1,3"]
    return [
        ("tune-a50-table", ["tune", f"{F}/tune/a50", *design]),
        ("tune-a50-json", ["tune", f"{F}/tune/a50", *design, "--format", "json"]),
        ("tune-a99-design-round1", ["tune", f"{F}/tune/a99-design/round-1", *design]),
        ("tune-a99-design-benchmark", ["tune", f"{F}/tune/a99-design", "--workload", "benchmark", "--format",
                                       "json"]),
        ("tune-a99-small-grid", ["tune", f"{F}/tune/a99", *design, "--max-batch-size", "12", "--max-gamma", "4"]),
        ("tune-a99-report", ["tune", f"{F}/tune/a99", *design, "-o", "{OUT}/report", "--no-plot"]),
        ("tune-bad-design", ["tune", f"{F}/tune/a99", "--batch-size", "3"]),
        ("tune-bad-check", ["tune", f"{F}/tune/a99-design", "--check", "4:x"]),
        ("tune-bad-grid", ["tune", f"{F}/tune/a99-design", "--max-batch-size", "9000"]),
        ("tune-no-draft", ["tune", "--target", "pair-target"]),
        ("tune-not-a-dir", ["tune", f"{F}/tune/README.md"]),
    ]


# When a report was written (report.md's "generated:" line, report.json's "generated" key): not an output of the code.
_GENERATED = re.compile(rb"(generated\"?:\s*\"?)\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d[^\"\s]*")
# The report directory's own bookkeeping (its lock, the manifest of the files it wrote with their hashes): the files
# themselves are compared.
_BOOKKEEPING = {".nsys_cc.lock", ".nsys_cc_report.json"}
_STORE = ".nsys_cc_report"  # the hidden folder of a report's generations (nsys_cc.files.publishing.publish)


def _normalise(data: bytes, out: Path) -> bytes:
    data = data.replace(str(out).encode(), b"<OUT>").replace(str(ROOT).encode(), b"<ROOT>")
    return _GENERATED.sub(rb"\1<TIME>", data)


def run_one(name: str, argv: list[str], out: Path, nsys_cc: str) -> None:
    folder = out / name
    folder.mkdir(parents=True)
    argv = [a.replace("{OUT}", str(folder)) for a in argv]
    env = dict(os.environ, MPLBACKEND="Agg", PYTHONHASHSEED="0", COLUMNS="200")
    with tempfile.TemporaryDirectory() as cache:  # a fresh export cache: nothing carried between commands
        env["XDG_CACHE_HOME"] = cache
        p = subprocess.run([nsys_cc, *argv], cwd=ROOT, env=env, capture_output=True, timeout=900)
    (folder / "exit").write_text(f"{p.returncode}\n")
    (folder / "stdout").write_bytes(_normalise(p.stdout, out))
    (folder / "stderr").write_bytes(_normalise(p.stderr, out))
    # text files of a report normalised like the streams; PNGs by their hash (matplotlib's output is deterministic)
    for f in sorted(folder.rglob("*")):
        if any(part.startswith(_STORE) for part in f.relative_to(folder).parts):
            continue  # a report's generations: its names in the folder (links into them) are what is compared
        if f.is_symlink():  # a report name: the file it shows, as a reader sees it
            data = f.read_bytes()
            f.unlink()
            f.write_bytes(data)
        if f.is_file() and f.name in _BOOKKEEPING:
            f.unlink()
        elif f.is_file() and f.suffix in {".md", ".json", ".csv", ".txt", ".html"}:
            f.write_bytes(_normalise(f.read_bytes(), out))
        elif f.is_file() and f.suffix == ".png":
            f.with_suffix(".png.sha256").write_text(hashlib.sha256(f.read_bytes()).hexdigest() + "\n")
            f.unlink()
    _drop_stores(folder)


def _drop_stores(folder: Path) -> None:
    for store in sorted(folder.rglob(_STORE + "*"), reverse=True):
        if store.is_dir() and not store.is_symlink():
            shutil.rmtree(store)
        else:
            store.unlink()


def snapshot(out: Path, jobs: int) -> None:
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    nsys_cc = shutil.which("nsys-cc") or str(Path(sys.executable).with_name("nsys-cc"))
    cmds = commands()
    with ThreadPoolExecutor(jobs) as pool:
        for i, _ in enumerate(pool.map(lambda c: run_one(c[0], c[1], out, nsys_cc), cmds), 1):
            print(f"\r[snapshot] {i}/{len(cmds)} commands", end="", file=sys.stderr, flush=True)
    print(f"\n[snapshot] {len(cmds)} outputs under {out}", file=sys.stderr)


def compare(a: Path, b: Path) -> int:
    differ: list[str] = []

    def walk(cmp: filecmp.dircmp, rel: str) -> None:
        for n in cmp.left_only:
            differ.append(f"only in {a.name}: {rel}{n}")
        for n in cmp.right_only:
            differ.append(f"only in {b.name}: {rel}{n}")
        _, mismatch, errors = filecmp.cmpfiles(cmp.left, cmp.right, cmp.common_files, shallow=False)
        differ.extend(f"differs: {rel}{n}" for n in [*mismatch, *errors])
        for n, sub in cmp.subdirs.items():
            walk(sub, f"{rel}{n}/")

    walk(filecmp.dircmp(a, b), "")
    for line in differ:
        print(line)
    print(f"{len(differ)} difference(s)" if differ else "identical")
    return 1 if differ else 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", nargs="?", type=Path, help="folder for the snapshot (replaced)")
    ap.add_argument("--compare", nargs=2, type=Path, metavar=("A", "B"), help="compare two snapshots")
    ap.add_argument("--jobs", type=int, default=2, help="commands run at once")
    args = ap.parse_args()
    if args.compare:
        return compare(*args.compare)
    if args.out is None:
        ap.error("give OUT or --compare A B")
    snapshot(args.out, args.jobs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
