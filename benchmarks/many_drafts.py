"""`nsys-cc analyze TARGET DRAFT×N -o DIR` with many drafts: time, peak memory, and the plots written.

Usage: `.venv/bin/python benchmarks/many_drafts.py [--drafts 300] [--acceptance 0.7]`

The drafts are copies of the two fixture drafts (fixtures/vllm, made by `make fixtures`), alternating, in a temporary
folder; each run is a real `nsys-cc` process timed from outside (`/usr/bin/time`-style: wall time and the peak RSS
of the process from `resource.getrusage(RUSAGE_CHILDREN)`). Reported: the analysis alone (no `-o`), the analysis with
the report, and the report's PNG count and size. Issue 25 measured 305 PNGs, some 100 000 px wide, in 136 s for
300 drafts; the report now plots the target and the 8 drafts of lowest c (`nsys_cc.report.figure_files.plotted`).
"""

from __future__ import annotations

import argparse
import json
import platform
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
VLLM = REPO / "fixtures" / "vllm"
NSYS_CC = Path(sys.executable).with_name("nsys-cc")


def timed(cmd: list[str]) -> tuple[float, float]:
    """Wall seconds and peak RSS (MiB) of one child process."""
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, env={"NSYS_CC_QUIET": "1", "PATH": "/usr/bin:/bin"})
    wall = time.perf_counter() - t0
    return wall, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--drafts", type=int, default=300)
    ap.add_argument("--acceptance", default="0.7")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="nsys_cc-many-") as tmp:
        work = Path(tmp)
        drafts = []
        for i in range(args.drafts):
            src = VLLM / ("tiny-llama-draft-s.sqlite" if i % 2 else "tiny-llama-draft-xs.sqlite")
            drafts.append(str(shutil.copyfile(src, work / f"d{i + 1}.sqlite")))
        base = [str(NSYS_CC), "analyze", str(VLLM / "tiny-llama-target.sqlite"), *drafts,
                "--acceptance", args.acceptance]
        analysis_s, _ = timed(base)
        report_s, rss = timed([*base, "-o", str(work / "out")])
        pngs = list((work / "out" / "plots").glob("*.png"))
        result = {"drafts": args.drafts, "analysis_s": round(analysis_s, 1), "with_report_s": round(report_s, 1),
                  "report_only_s": round(report_s - analysis_s, 1), "peak_rss_mib": round(rss),
                  "pngs": len(pngs), "png_mib": round(sum(p.stat().st_size for p in pngs) / 2**20, 1),
                  "machine": f"{platform.machine()}, {__import__('os').cpu_count()} CPUs",
                  "date": datetime.now(timezone.utc).isoformat(timespec="minutes")}
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
