"""The metric registry's rule (`analysis/metrics.py`: "every module that names a metric reads it here"): a metric's
name (`wall`, `gpu_span`, …) or its per-forward column (`wall_ns`, …) written as a string literal anywhere in the
package outside the registry is a second spelling of it. About ten modules once spelled them; any
not moved yet are listed by name with how many literals they hold, and the list only shrinks (a module that gains
one, or a new module that spells one, fails; so does an entry whose count went down and was not lowered here).
Docstrings and f-strings do not count: only a constant that is exactly a metric's name or column."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from conftest import REPO, nodes
from nsys_cc.analysis.metrics import METRICS

PACKAGE = REPO / "nsys_cc"
SPELLINGS = {m.name for m in METRICS} | {m.column for m in METRICS}

# module → metric literals it still holds. Empty: every module reads the names from the registry
# (projection's own output columns `kernel_sum_ns`, `gpu_busy_ns`, `launch_api_ns` are the metrics' columns, so
# projection.py and ranges.py read them there too, as `KERNEL_SUM_NS`, …). An entry may come back only with a reason.
NOT_MOVED_YET: dict[str, int] = {}


def metric_literals(path: Path, spellings: set[str] = SPELLINGS) -> int:
    """String constants in the module at `path` that are exactly a metric's name or column (docstrings left out)."""
    walked = nodes(path)
    docstrings = {id(node.body[0].value) for node in walked
                  if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                  and node.body and isinstance(node.body[0], ast.Expr)
                  and isinstance(node.body[0].value, ast.Constant)}
    return sum(1 for node in walked if isinstance(node, ast.Constant) and isinstance(node.value, str)
               and node.value in spellings and id(node) not in docstrings)


@pytest.mark.slow
def test_no_module_spells_a_metric_the_registry_names():
    found = {p.relative_to(PACKAGE).as_posix(): n for p in sorted(PACKAGE.rglob("*.py"))
             if p.name != "metrics.py" or p.parent.name != "analysis"
             if (n := metric_literals(p))}
    assert found == NOT_MOVED_YET


def test_the_walker_counts_literals_not_docstrings_or_other_strings(tmp_path):
    code = '''"""wall"""
def f(df, metric="wall"):
    """gpu_span"""
    return df["gpu_span_ns"], f"{metric}_ns", "walls", "wall-clock"
'''
    (tmp_path / "m.py").write_text(code)
    assert metric_literals(tmp_path / "m.py") == 2
