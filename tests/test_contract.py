"""The NVTX contract (`nsys_cc.contract`): every name the vLLM plugin writes and the analysis reads, and every
environment variable the launcher sets for the code inside vLLM, is spelled in that one module. The package's code
is read as Python (its syntax trees): a string in code that holds one of the names, anywhere but in the contract,
fails; docstrings and comments may quote them."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from conftest import nodes, parsed
from nsys_cc import contract
from nsys_cc.trace.nvtx import matches

PACKAGE = Path(__file__).resolve().parents[1] / "nsys_cc"


def contract_names() -> dict[str, str]:
    """Every string the contract defines (its upper-case constants; tuples are made of these)."""
    return {k: v for k, v in vars(contract).items() if k.isupper() and isinstance(v, str)}


def _docstrings(tree: ast.AST) -> set[int]:
    """ids of the string constants that are docstrings or bare string statements (documentation, not code)."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            out.add(id(node.value))
    return out


def spelled_outside(root: Path) -> list[str]:
    """`path:line: 'name'` for each code string under `root` (not the contract) that holds a contract name as a
    whole word (so `draft_model_executable()` does not hold `model_executable()`, nor `nsys_cc:step_seconds`
    `nsys_cc:step`)."""
    patterns = {v: re.compile(rf"(?<![\w.]){re.escape(v)}(?![\w.])") for v in contract_names().values()}
    hits = []
    for path in sorted(root.rglob("*.py")):
        if path.name == "contract.py" and path.parent == root:
            continue
        docs = _docstrings(parsed(path))
        for node in nodes(path):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
                for name, pattern in patterns.items():
                    if pattern.search(node.value):
                        hits.append(f"{path.relative_to(root.parent)}:{node.lineno}: {name!r}")
    return hits


@pytest.mark.slow
def test_no_contract_name_is_spelled_outside_the_contract():
    assert spelled_outside(PACKAGE) == []


def test_the_check_finds_a_name_spelled_twice(tmp_path):
    # the check itself: a module that spells a range name in code (not in its docstring) is caught, whole words only
    pkg = tmp_path / "nsys_cc"
    pkg.mkdir()
    (pkg / "contract.py").write_text('FORWARD_RANGE = "model_executable()"\n')
    (pkg / "a.py").write_text('"""Docs may say model_executable() and nsys_cc:step."""\n'
                              'X = "model_executable()"\nY = f"no \'nsys_cc:warmup\' ranges"\n'
                              'Z = "draft_model_executable()"\nW = "nsys_cc:step_outside_forward_seconds"\n')
    assert sorted(spelled_outside(pkg)) == ["nsys_cc/a.py:2: 'model_executable()'", "nsys_cc/a.py:3: 'nsys_cc:warmup'",
                                            "nsys_cc/a.py:4: 'draft_model_executable()'"]


def test_the_contract_imports_nothing():
    tree = ast.parse((PACKAGE / "contract.py").read_text())
    assert not [n for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))]
    # and loads nothing when imported on its own (the vLLM plugin imports it in every vLLM process)
    code = "import sys, nsys_cc; before = set(sys.modules); import nsys_cc.contract; " \
           "print(sorted(m for m in set(sys.modules) - before if not m.startswith('nsys_cc')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_writer_and_readers_share_the_names():
    from nsys_cc.analysis.forwards import phases, ranges, ranks
    from nsys_cc.launch import commands
    from nsys_cc.sweep import manifest
    from nsys_cc.vllm import plugin as vllm_plugin
    from nsys_cc.vllm.hooks import forwards, steps

    assert vllm_plugin.FORWARD_RANGE == contract.FORWARD_RANGE == manifest.FORWARD_RANGE
    assert vllm_plugin.DRAFT_FORWARD_RANGE in contract.DRAFT_RANGES
    # the one read of a trace (`ranges.marked_ranges`) asks for every marker the plugin writes
    assert {steps.WARMUP_RANGE, steps.ITERATION_RANGE, steps.STEP_RANGE,
            forwards.ALL_REDUCE_RANGE, vllm_plugin.DRAFT_FORWARD_RANGE} <= set(ranges.MARKERS)
    assert ranks.ALL_REDUCE_RANGE == forwards.ALL_REDUCE_RANGE
    assert phases.WARMUP_RANGE == steps.WARMUP_RANGE
    env = commands.bench_env(commands.BenchOptions(warmup_iters=3), gpu=False, environ={})
    assert env[vllm_plugin.ENV_PLUGIN] == "1" and env[steps.ENV_WARMUP_ITERS] == "3"


@pytest.mark.parametrize("written", ["nsys_cc:warmup", ":nsys_cc:warmup"])
def test_one_matching_rule_for_markers(written):
    # a marker written in the default domain by a newer nsys (":name") is the same marker for every reader
    from nsys_cc.analysis.forwards.phases import markers

    ranges = pd.DataFrame({"name": pd.Categorical([written.lstrip(":"), "model_executable()"]),
                           "qualified_name": pd.Categorical([written.lstrip(":"), "model_executable()"]),
                           "start_ns": [0, 5], "end_ns": [10, 7], "payload": [1.0, 2.0]})
    assert matches(ranges, (written,)).tolist() == [True, False]
    assert markers(ranges, (written,))["start_ns"].tolist() == [0]
