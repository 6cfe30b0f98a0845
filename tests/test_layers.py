"""The package's layers: no import runs from a lower layer to a higher one, and no import circle exists.

Every import of the package's own modules counts, wherever it is written (module level, inside a function, under
`TYPE_CHECKING`): each one is an arrow a reader has to follow. The layers, lowest first:

- base: `contract` (the NVTX and environment names), `errors`, `progress`, `version`, `result_views` (a result's
  views, bound from above), `files` (files written whole, through one writer), `formats` (the files nsys-cc writes
  and reads back, one module per format), `inputs` (files read without waiting), `arguments` (how the public API
  reads a list-like argument), `request` (one profile's request, as data), `keeper` (the keeper every command
  nsys-cc runs is started under) — import nothing above them;
- `trace`: reading Nsight Systems exports;
- `analysis`: the measurements, as data (a result binds its views from above: `report` registers them), in rooms
  by question, ordered too (`ANALYSIS_ROOMS`, lowest first): its top modules (`metrics`, `stats`, `result_values`),
  then `profile_dir` (what a profile left beside its traces), `theory` (the speedup model, DSI), `forwards` (one
  model's forwards in one trace), `speculative` (runs measured in place), `coefficient` (c, the result), `kernels`,
  `tune` — a module imports only its own room, the rooms below it and the top modules;
- `report`: every rendering of a result (text, files, figures);
- `live`: live c inside a vLLM server (its timing in the worker, its stat logger in the API server), on top of the
  analysis (the estimate) and the report (its log line);
- `vllm`: what runs inside vLLM's processes (the plugin, which carries the live timing; vLLM fixes; the NVTX binding;
  the benchmark driver) — nothing below imports it, and it imports nothing of the host side above;
- `launch`: the host side of `profile` (plans, commands, processes, the checks of a fresh export);
- `workflows`: a verb from its arguments to its report, one module each (`tune`: profile a design, fit, write);
- `sweep`: many profiles and many analyses, locally or on Dask, on top of `launch`;
- `front`: the library's front door (`nsys_cc.analyze`: one call for every source `analyze` takes);
- `cli`: the click verbs;
- the facade (`nsys_cc/__init__.py`), which names everything.

And the size of a job: no module over 600 lines, no function or method over 100 (a long function hides under the
module limit just as a long module would).
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import nodes, parsed

PACKAGE = Path(__file__).resolve().parents[1] / "nsys_cc"
LAYERS = [
    ("base", {"contract", "errors", "progress", "version", "result_views", "files", "formats", "inputs", "arguments",
              "request", "keeper"}),
    ("trace", {"trace"}),
    ("analysis", {"analysis"}),
    ("report", {"report"}),
    ("live", {"live"}),
    ("vllm", {"vllm"}),
    ("launch", {"launch"}),
    ("workflows", {"workflows"}),
    ("sweep", {"sweep"}),
    ("front", {"front"}),
    ("cli", {"cli"}),
]


def module_name(root: Path, path: Path) -> str:
    parts = [root.name, *path.relative_to(root).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules(root: Path) -> dict[str, Path]:
    return {module_name(root, p): p for p in sorted(root.rglob("*.py"))}


def imports(root: Path) -> dict[str, set[str]]:
    """Each module of the package → the package's modules it imports anywhere in its code. `from P import x` is an
    arrow to `P.x` when that is a module, else to `P` (a name of P's `__init__`)."""
    mods = modules(root)
    graph: dict[str, set[str]] = {}
    for name, path in mods.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        out: set[str] = set()
        for node in nodes(path):
            if isinstance(node, ast.Import):
                out |= {a.name for a in node.names if a.name.split(".")[0] == root.name}
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                    target = ".".join(base + ([node.module] if node.module else []))
                else:
                    target = node.module or ""
                if target.split(".")[0] != root.name:
                    continue
                for alias in node.names:
                    out.add(f"{target}.{alias.name}" if f"{target}.{alias.name}" in mods else target)
        graph[name] = out - {name}
    return graph


def layer(root: Path, module: str) -> int:
    """Position of `module` in LAYERS; the facade (the package itself) is above them all."""
    parts = module.split(".")
    if len(parts) == 1:
        return len(LAYERS)
    for i, (_, members) in enumerate(LAYERS):
        if parts[1] in members:
            return i
    raise AssertionError(f"{module} belongs to no layer: add it to LAYERS in {Path(__file__).name}")


def upward(root: Path) -> list[str]:
    return sorted(f"{a} → {b} ({LAYERS[layer(root, a)][0]} → "
                  f"{LAYERS[layer(root, b)][0] if layer(root, b) < len(LAYERS) else 'facade'})"
                  for a, targets in imports(root).items() for b in targets if layer(root, b) > layer(root, a))


def circles(root: Path) -> list[list[str]]:
    """The import circles: strongly connected groups of more than one module (Tarjan)."""
    graph = imports(root)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                out.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


@pytest.mark.slow
def test_no_import_runs_upward():
    assert upward(PACKAGE) == []


# The rooms inside analysis/, lowest first; None: the analysis's top modules (ANALYSIS_TOP), below every room.
ANALYSIS_TOP = {"metrics", "stats", "result_values"}
ANALYSIS_ROOMS = [None, "profile_dir", "theory", "forwards", "speculative", "coefficient", "kernels", "tune"]


def analysis_room(module: str) -> int:
    """Position of an analysis module's room in ANALYSIS_ROOMS (the package `nsys_cc.analysis` itself: its top)."""
    parts = module.split(".")
    if len(parts) == 2 or (len(parts) == 3 and parts[2] in ANALYSIS_TOP):
        return 0
    if parts[2] in ANALYSIS_ROOMS:
        return ANALYSIS_ROOMS.index(parts[2])
    raise AssertionError(f"{module} belongs to no room of the analysis: add it to ANALYSIS_ROOMS or ANALYSIS_TOP in "
                         f"{Path(__file__).name}")


def upward_in_analysis(root: Path) -> list[str]:
    """The imports inside analysis/ that run from a room to one above it (or from a top module to any room)."""
    def name(i: int) -> str:
        return ANALYSIS_ROOMS[i] or "top"

    inside = f"{root.name}.analysis"
    out = []
    for a, targets in imports(root).items():
        if a != inside and not a.startswith(inside + "."):
            continue
        for b in targets:
            if (b == inside or b.startswith(inside + ".")) and analysis_room(b) > analysis_room(a):
                out.append(f"{a} → {b} ({name(analysis_room(a))} → {name(analysis_room(b))})")
    return sorted(out)


@pytest.mark.slow
def test_no_import_runs_upward_inside_the_analysis():
    assert upward_in_analysis(PACKAGE) == []


def test_every_analysis_module_has_a_room():
    for name in modules(PACKAGE):
        if name.startswith("nsys_cc.analysis."):
            analysis_room(name)


def test_the_top_of_the_analysis_stays_small():
    # at most 8 modules at analysis/'s top (its __init__ included): the rest is in rooms by question
    top = sorted(p.name for p in (PACKAGE / "analysis").glob("*.py"))
    assert len(top) <= 8, top
    assert set(top) == {"__init__.py", *(f"{m}.py" for m in ANALYSIS_TOP)}


def test_the_room_check_finds_an_arrow_up_the_analysis(tmp_path):
    pkg = tmp_path / "nsys_cc"
    for sub in ("analysis", "analysis/forwards", "analysis/coefficient"):
        (pkg / sub).mkdir(parents=True)
        (pkg / sub / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "analysis" / "stats.py").write_text("def f():\n    from .forwards.ranges import x\n")
    (pkg / "analysis" / "forwards" / "ranges.py").write_text("from ..coefficient import result\nx = 1\n")
    (pkg / "analysis" / "coefficient" / "result.py").write_text("from ..forwards.ranges import x\n"
                                                                "from .. import stats\n")
    assert upward_in_analysis(pkg) == [
        "nsys_cc.analysis.forwards.ranges → nsys_cc.analysis.coefficient.result (forwards → coefficient)",
        "nsys_cc.analysis.stats → nsys_cc.analysis.forwards.ranges (top → forwards)"]


@pytest.mark.slow
def test_no_import_circle():
    assert circles(PACKAGE) == []


def test_every_module_has_a_layer():
    for name in modules(PACKAGE):
        layer(PACKAGE, name)


def test_the_checks_find_an_upward_arrow_and_a_circle(tmp_path):
    # the checks themselves, on a small package: a lazy import inside a function is an arrow too
    pkg = tmp_path / "nsys_cc"
    for sub in ("analysis", "report"):
        (pkg / sub).mkdir(parents=True)
        (pkg / sub / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "analysis" / "result.py").write_text("def render():\n    from ..report.formats import render\n")
    (pkg / "report" / "formats.py").write_text("from ..analysis.result import render\n")
    (pkg / "report" / "a.py").write_text("from . import b\n")
    (pkg / "report" / "b.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from . import a\n")
    assert upward(pkg) == ["nsys_cc.analysis.result → nsys_cc.report.formats (analysis → report)"]
    assert circles(pkg) == [["nsys_cc.analysis.result", "nsys_cc.report.formats"],
                            ["nsys_cc.report.a", "nsys_cc.report.b"]]


@pytest.mark.slow
def test_a_results_views_are_bound_from_above():
    # the analysis computes without the report loaded; a notebook user's res.render(), res._repr_html_(),
    # res.to_dict() and res.figures() still work, through the views nsys_cc.report binds when nsys_cc is imported
    code = """
import sys
from nsys_cc.analysis.coefficient.measure import cost_coefficient
fixtures = sys.argv[1]
res = cost_coefficient(f"{fixtures}/tiny-llama-target.sqlite", f"{fixtures}/tiny-llama-draft-s.sqlite")
print(sorted(m for m in sys.modules if m.startswith("nsys_cc.report.")))
print("tiny-llama-draft-s" in res.render("markdown"), "<table" in res._repr_html_(),
      res.to_dict()["coefficients"][0]["draft"], "coefficients" in res.figures())
"""
    fixtures = PACKAGE.parent / "fixtures" / "vllm"
    out = subprocess.run([sys.executable, "-c", code, str(fixtures)], capture_output=True, text=True, check=True)
    loaded, views = out.stdout.splitlines()
    assert loaded == "[]"
    assert views == "True True tiny-llama-draft-s True"


# ---- the analysis is built in the analysis floor, called from the front door --------------------------------------
# What builds an analysis or its report directory: a module under launch/ or cli/ that imports one of these builds an
# analysis itself instead of calling the front door (`nsys_cc.analyze`; `analysis.coefficient.source_kinds` below it).
# The CLI may write the report directory of a result it was handed (rendering): `write_report` counts for launch/ only.
BUILDERS = {"cost_coefficient", "cost_coefficient_runs", "analyze_profile", "analyze_source", "write_report"}
RENDERERS = {"write_report"}
# Modules under launch/ or cli/ allowed a builder: none (`profile` hands the analysis of its directory down from the
# front door as `finish`, the precision loop's c as `measure`).
NOT_MOVED_YET: dict[str, set[str]] = {}


def builders_imported(root: Path, rooms: tuple[str, ...] = ("launch", "cli")) -> dict[str, set[str]]:
    """Each module under `rooms` → the analysis builders (`BUILDERS`) it imports, anywhere in its code, by name
    (`from … import cost_coefficient`) or as a module's attribute it calls (`coefficient.cost_coefficient(…)`)."""
    out: dict[str, set[str]] = {}
    for name, path in modules(root).items():
        room = name.split(".")[1] if "." in name else ""
        if room not in rooms:
            continue
        builders = BUILDERS - (RENDERERS if room == "cli" else set())
        found: set[str] = set()
        for node in nodes(path):
            if isinstance(node, ast.ImportFrom):
                found |= {a.name for a in node.names} & builders
            elif isinstance(node, ast.Attribute) and node.attr in builders:
                found.add(node.attr)
        if found:
            out[name] = found
    return out


def test_no_module_of_launch_or_cli_imports_an_analysis_builder():
    assert builders_imported(PACKAGE) == NOT_MOVED_YET


def test_the_builder_check_finds_an_import_and_a_call(tmp_path):
    pkg = tmp_path / "nsys_cc"
    for sub in ("launch", "cli", "front"):
        (pkg / sub).mkdir(parents=True)
        (pkg / sub / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "launch" / "a.py").write_text("def f(out):\n    from ..analysis.sources import analyze_profile\n"
                                         "    return analyze_profile(out)\n")
    (pkg / "launch" / "b.py").write_text("from ..analysis import coefficient\nx = coefficient.cost_coefficient_runs\n")
    (pkg / "cli" / "c.py").write_text("from ..report.report_files import write_report\n")  # rendering: the CLI's own
    (pkg / "front" / "d.py").write_text("from ..analysis.coefficient import cost_coefficient\n")  # the front door
    assert builders_imported(pkg) == {"nsys_cc.launch.a": {"analyze_profile"},
                                      "nsys_cc.launch.b": {"cost_coefficient_runs"}}


# ---- one workflow, one place -------------------------------------------------------------------------------------
def definitions(root: Path, name: str) -> list[str]:
    """The modules of the package that define a function called `name` (at any depth, methods included)."""
    return sorted(mod for mod, path in modules(root).items() for node in nodes(path)
                  if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name)


@pytest.mark.parametrize("name", ["analyze", "tune"])
def test_a_workflow_is_defined_once(name):
    # the facade names it lazily (`nsys_cc.__init__._LAZY`), the workflow defines it: one definition, no second
    # `tune()` or `analyze()` of another signature beside it (the click commands are `<verb>_command`)
    assert len(definitions(PACKAGE, name)) == 1, definitions(PACKAGE, name)


@pytest.mark.parametrize("name", ["profile", "analyze", "tune"])
def test_a_verb_has_at_most_two_definitions_in_the_package(name):
    # at most the public door (`front`: a docstring and one call) and the workflow that does the work
    assert len(definitions(PACKAGE, name)) <= 2, definitions(PACKAGE, name)


def private_imports(root: Path, room: str) -> list[str]:
    """`from X import _name` in the modules of `room`: a private name of another module used from outside it."""
    return sorted(f"{mod}: {alias.name}" for mod, path in modules(root).items() if mod.split(".")[1:2] == [room]
                  for node in nodes(path) if isinstance(node, ast.ImportFrom)
                  for alias in node.names if alias.name.startswith("_") and not alias.name.startswith("__"))


def test_the_cli_imports_no_private_name():
    assert private_imports(PACKAGE, "cli") == []


def test_the_workflow_checks_find_a_second_definition_and_a_private_import(tmp_path):
    pkg = tmp_path / "nsys_cc"
    (pkg / "cli").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "cli" / "__init__.py").write_text("")
    (pkg / "tuning.py").write_text("def tune():\n    def tune():\n        pass\n")
    (pkg / "cli" / "tune.py").write_text("from ..tuning import _finite, tune\n")
    assert definitions(pkg, "tune") == ["nsys_cc.tuning", "nsys_cc.tuning"]
    assert private_imports(pkg, "cli") == ["nsys_cc.cli.tune: _finite"]


# ---- modules of one job -------------------------------------------------------------------------------------------
MAX_LINES = 600


def long_modules(root: Path, limit: int = MAX_LINES) -> dict[str, int]:
    """The modules of the package (every room, `__init__` included) longer than `limit` lines, with their length."""
    out = {}
    for name, path in modules(root).items():
        n = len(path.read_text().splitlines())
        if n > limit:
            out[name] = n
    return out


def test_no_module_of_the_package_is_over_600_lines():
    assert len(modules(PACKAGE)) > 100, "the package was not found"
    assert long_modules(PACKAGE) == {}


def test_the_length_check_counts_lines_in_every_room(tmp_path):
    pkg = tmp_path / "nsys_cc"
    (pkg / "vllm" / "hooks").mkdir(parents=True)
    (pkg / "__init__.py").write_text("x = 1\n" * 700)
    (pkg / "vllm" / "__init__.py").write_text("")
    (pkg / "vllm" / "hooks" / "big.py").write_text("x = 1\n" * 601)
    (pkg / "vllm" / "fine.py").write_text("x = 1\n" * 600)
    assert long_modules(pkg) == {"nsys_cc": 700, "nsys_cc.vllm.hooks.big": 601}


# ---- functions of one job ----------------------------------------------------------------------------------------
MAX_FUNCTION_LINES = 100
# The functions still over the limit, in modules being split in other work: each at its length today, exactly, so
# that the test fails when one grows, and when one shrinks or goes (then edit it here: the list only gets shorter).
LONG_FUNCTIONS: dict[str, int] = {}


def long_functions(root: Path, limit: int = MAX_FUNCTION_LINES) -> dict[str, int]:
    """Every function and method of the package (nested ones too) longer than `limit` lines — from its `def` line to
    its last, its decorators aside —, by qualified name (`module.Class.method`, `module.outer.inner`)."""
    out: dict[str, int] = {}

    def walk(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            name = prefix
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = f"{prefix}.{child.name}"
                lines = (child.end_lineno or child.lineno) - child.lineno + 1
                if not isinstance(child, ast.ClassDef) and lines > limit:
                    out[name] = lines
            walk(child, name)

    for module, path in modules(root).items():
        walk(parsed(path), module)
    return out


@pytest.mark.slow
def test_no_function_of_the_package_is_over_100_lines():
    found = long_functions(PACKAGE)
    assert {f: n for f, n in found.items() if f not in LONG_FUNCTIONS} == {}, \
        f"split these functions (at most {MAX_FUNCTION_LINES} lines each)"
    assert {f: found.get(f) for f in LONG_FUNCTIONS} == LONG_FUNCTIONS, \
        "a function of the allow-list changed length: lower LONG_FUNCTIONS (or drop it when it is split)"


def test_the_function_check_finds_long_methods_and_nested_functions(tmp_path):
    pkg = tmp_path / "nsys_cc"
    (pkg / "report").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    body = "    x = 1\n"
    (pkg / "report" / "text.py").write_text(
        "@decorated\ndef short():\n" + body * 99                        # 100 lines with its def: allowed
        + "class Table:\n    def render(self):\n" + body.replace("    ", "        ") * 100  # 101
        + "def outer():\n    def inner():\n" + body.replace("    ", "        ") * 101 + "    return inner\n")
    assert long_functions(pkg) == {"nsys_cc.report.text.Table.render": 101, "nsys_cc.report.text.outer": 104,
                                   "nsys_cc.report.text.outer.inner": 102}
