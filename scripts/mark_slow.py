#!/usr/bin/env python3
"""Keep `make check` (the edit–test loop, goal ≤ 60 s on 2 cores) to its quick tests: mark the slow ones `slow`.

The loop runs every test that needs neither nsys nor vLLM and is not marked `slow`; `make test` runs them all. A test
function whose slowest case took over THRESHOLD seconds (setup included) in a run of the loop gets
`@pytest.mark.slow` above its definition (the whole function: every case of it). Feed it the junit XML of a run of the
loop's own selection, e.g.

    .venv/bin/python -m pytest -n 2 --dist loadscope -q -m "not vllm and not nsys and not slow" \\
        --junitxml=out/check-junit.xml
    python scripts/mark_slow.py out/check-junit.xml 0.3 [--dry]

and rerun: the first user of a module's or session's fixture pays for building it, so after its users are marked the
next one pays (a second pass finds it). A function with many cheap cases and one that built a shared fixture is worth
keeping in the loop: look at `--dry`'s listing (cases, total, slowest) first. Which threshold the loop uses, and why,
is in docs/PERFORMANCE.md ("`make check` ≤ 60 s on 2 cores").
"""

from __future__ import annotations

import argparse
import ast
import collections
import re
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def case_seconds(junit: Path) -> dict[tuple[str, str], list[float]]:
    """{(dotted module[.Class], function): every case's seconds} of a junit XML file."""
    cases: dict[tuple[str, str], list[float]] = collections.defaultdict(list)
    for case in ET.parse(junit).getroot().iter("testcase"):
        if case.find("skipped") is not None:
            continue
        cases[(case.get("classname", ""), re.sub(r"\[.*", "", case.get("name", "")))].append(float(case.get("time", 0)))
    return cases


def locate(dotted: str, root: Path = ROOT) -> tuple[Path, list[str]] | None:
    """The test file of a junit class name and the classes in it: `tests.a.test_b.TestC` → (tests/a/test_b.py, [C])."""
    parts = dotted.split(".")
    for k in range(len(parts), 0, -1):
        path = root.joinpath(*parts[:k]).with_suffix(".py")
        if path.is_file():
            return path, parts[k:]
    return None


def mark(path: Path, targets: list[tuple[list[str], str, list[float]]], dry: bool, root: Path = ROOT) -> int:
    """Add `@pytest.mark.slow` to each (classes, function, its cases' seconds) of `path` not marked yet (listed with
    `dry`, not written); the number added."""
    text = path.read_text(encoding="utf-8")
    tree = ast.parse(text)
    lines = text.splitlines(keepends=True)
    where: list[tuple[int, str]] = []
    for scope, name, seconds in targets:
        body = tree.body
        for cls in scope:
            body = next(n for n in body if isinstance(n, ast.ClassDef) and n.name == cls).body
        node = next((n for n in body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) and n.name == name), None)
        if node is None or any(ast.unparse(d) == "pytest.mark.slow" for d in node.decorator_list):
            continue
        if dry:
            print(f"{len(seconds):4d} cases {sum(seconds):6.2f} s, slowest {max(seconds):5.2f} s  "
                  f"{path.relative_to(root)}::{'.'.join([*scope, name])}")
        first = min([d.lineno for d in node.decorator_list] + [node.lineno])
        where.append((first, re.match(r"\s*", lines[first - 1]).group(0)))  # type: ignore[union-attr]
    for first, indent in sorted(where, reverse=True):
        lines.insert(first - 1, f"{indent}@pytest.mark.slow\n")
    if where and not dry:
        if not re.search(r"^import pytest$", text, re.M):
            print(f"{path.relative_to(root)}: add `import pytest`", file=sys.stderr)
        path.write_text("".join(lines), encoding="utf-8")
    return len(where)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("junit", type=Path)
    parser.add_argument("threshold", type=float, help="seconds: a function whose slowest case took longer is marked")
    parser.add_argument("--dry", action="store_true", help="list what would be marked, change nothing")
    parser.add_argument("--root", type=Path, default=ROOT, help="the checkout the junit's test names are under")
    args = parser.parse_args(argv)
    by_file: dict[Path, list[tuple[list[str], str, list[float]]]] = collections.defaultdict(list)
    for (dotted, name), seconds in sorted(case_seconds(args.junit).items()):
        found = locate(dotted, args.root)
        if found is None or max(seconds) <= args.threshold:
            continue
        by_file[found[0]].append((found[1], name, seconds))
    total = sum(mark(path, targets, args.dry, args.root) for path, targets in sorted(by_file.items()))
    print(f"{'would mark' if args.dry else 'marked'} {total} test function(s) slow")
    return 0


if __name__ == "__main__":
    sys.exit(main())
