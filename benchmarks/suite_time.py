"""The full suite's time beside CI's limit: read a junit XML that a `make test` run wrote, print (or record) it.

`make test` writes `out/test-junit.xml` (pytest `--junitxml`); this script reads that file, it never runs the suite
(20 minutes on two cores). Printed: the run's wall time (the `time` of the testsuite element: pytest's own clock,
collection included; with xdist workers it is the wall time, not the sum), the sum of the tests' times, the counts,
the 10 slowest tests, and CI's limit (90 min). `--write-docs` replaces the section between the markers
`<!-- suite-time -->` and `<!-- /suite-time -->` of docs/PERFORMANCE.md with the table.

Usage: `python benchmarks/suite_time.py --junit out/test-junit.xml [--top 10] [--machine TEXT] [--write-docs]`.
"""

from __future__ import annotations

import argparse
import os
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs" / "PERFORMANCE.md"
CI_LIMIT_S = 90 * 60
START, END = "<!-- suite-time -->", "<!-- /suite-time -->"


class JunitError(Exception):
    pass


def read_junit(path: Path) -> dict:
    """Totals and per-test times of a pytest junit XML (one <testsuite>, or <testsuites> around them)."""
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError) as exc:
        raise JunitError(f"cannot read {path} as junit XML: {exc}") from None
    suites = [root] if root.tag == "testsuite" else root.findall("testsuite")
    if not suites:
        raise JunitError(f"{path} has no <testsuite> element")
    tests = []
    counts = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    wall = 0.0
    stamp = ""
    for suite in suites:
        wall += float(suite.get("time", 0) or 0)
        stamp = stamp or suite.get("timestamp", "")
        for key in counts:
            counts[key] += int(suite.get(key, 0) or 0)
        for case in suite.iter("testcase"):
            classname = case.get("classname", "")  # pytest: "tests.test_x" or "tests.test_x.TestClass"
            name = f"{classname}::{case.get('name', '')}" if classname else case.get("name", "")
            tests.append((float(case.get("time", 0) or 0), name))
    tests.sort(reverse=True)
    return {"wall_s": wall, "sum_s": sum(t for t, _ in tests), "timestamp": stamp, **counts, "tests_by_time": tests}


def minutes(seconds: float) -> str:
    return f"{int(seconds // 60)} min {int(round(seconds % 60)):02d} s"


def markdown(result: dict, top: int, machine: str, source: str) -> str:
    passed = result["tests"] - result["failures"] - result["errors"] - result["skipped"]
    share = result["wall_s"] / CI_LIMIT_S
    lines = [
        f"`make test` ({source}, {result['timestamp'] or 'time not recorded'}; {machine}): "
        f"**{minutes(result['wall_s'])}** of wall time beside CI's limit of 90 min ({share:.0%} of it); "
        f"{passed} passed, {result['failures']} failed, {result['errors']} errors, {result['skipped']} skipped; "
        f"the tests' own times add up to {minutes(result['sum_s'])} (over the parallel workers).",
        "",
        f"The {top} slowest tests:",
        "",
        "| test | seconds |",
        "|---|---:|",
    ]
    lines += [f"| `{name}` | {seconds:.1f} |" for seconds, name in result["tests_by_time"][:top]]
    return "\n".join(lines)


def write_docs(text: str, docs: Path = DOCS) -> None:
    page = docs.read_text()
    if START not in page or END not in page:
        raise JunitError(f"{docs} has no {START} … {END} section to replace")
    head, rest = page.split(START, 1)
    _, tail = rest.split(END, 1)
    docs.write_text(f"{head}{START}\n{text}\n{END}{tail}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--junit", type=Path, default=ROOT / "out" / "test-junit.xml")
    ap.add_argument("--top", type=int, default=10)
    ap.add_argument("--machine", default=f"{os.cpu_count()} cores",
                    help="the machine the run was made on, as the docs should name it")
    ap.add_argument("--write-docs", action="store_true", help="replace the suite-time section of docs/PERFORMANCE.md")
    args = ap.parse_args(argv)
    try:
        result = read_junit(args.junit)
        text = markdown(result, args.top, args.machine, f"read from {args.junit.name}")
        print(text)
        if args.write_docs:
            write_docs(text)
            print(f"written into {DOCS.relative_to(ROOT)}")
    except JunitError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0 if result["wall_s"] <= CI_LIMIT_S else 1


if __name__ == "__main__":
    sys.exit(main())
