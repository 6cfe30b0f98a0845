"""The registry of trace formats (`nsys_cc.trace.registry`): one rule tells a file's format by its content, whatever its
name; a trace's label is its file name without its format's suffix; and nothing above `nsys_cc.trace` asks which
format a trace is (an AST walk of the package, like `tests/test_layers.py`'s).

Oracles: a file's first bytes read here (SQLite's magic, gzip's, Kineto's top-level keys), never the registry's rule.
"""

from __future__ import annotations

import ast
import csv
import gzip
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import FIXTURES, PACKAGE, REPO, nodes, room_module
from nsys_cc.errors import InputError
from nsys_cc.sweep.manifest import is_many, read_manifest
from nsys_cc.trace import Trace, open_trace, registry
from nsys_cc.trace.registry import FORMATS, format_named, reader_of, recognised, trace_named, trace_stem, traces_in

EXPORT = FIXTURES / "vllm" / "tiny-llama-target.sqlite"
REPORT = FIXTURES / "nvtx" / "nvtx_cases.nsys-rep"
KINETO = FIXTURES / "torch" / "tiny-llama-target.pt.trace.json.gz"
BENCH = FIXTURES / "vllm" / "tiny-llama-target.bench.json"
SQLITE_MAGIC = b"SQLite format 3\x00"


def _name_of_content(path: Path) -> str | None:
    """The oracle: what the first bytes say ("nsys": SQLite's or a report's magic; "kineto": Kineto's first keys in
    the text, gzip-decompressed when it is gzip), None for neither."""
    raw = path.read_bytes()[:1 << 16]
    if raw.startswith(SQLITE_MAGIC) or raw.startswith(b"NVIDIA Tegra Profiler Report"):
        return "nsys"
    text = gzip.decompress(path.read_bytes())[:1 << 16] if raw.startswith(b"\x1f\x8b") else raw
    return "kineto" if b'"traceEvents"' in text or b'"schemaVersion"' in text else None


@pytest.fixture()
def disguised(tmp_path) -> dict[str, Path]:
    """The fixtures' traces under other formats' names (and one without compression), as a user may have them."""
    plain = tmp_path / "plain.txt"
    plain.write_bytes(gzip.decompress(KINETO.read_bytes()))
    return {"export.json": shutil.copyfile(EXPORT, tmp_path / "export.json"),
            "kineto.sqlite": shutil.copyfile(KINETO, tmp_path / "kineto.sqlite"),
            "report.csv": shutil.copyfile(REPORT, tmp_path / "report.csv"), "plain.txt": plain}


def test_a_file_is_told_by_its_content_whatever_its_name(disguised):
    for name, path in disguised.items():
        fmt = recognised(path)
        assert fmt is not None and fmt.name == _name_of_content(path), name
        assert reader_of(path) is fmt
    for name in ("export.json", "kineto.sqlite", "plain.txt"):  # (the report would be exported: nsys)
        with open_trace(disguised[name]) as trace:
            assert trace.format == _name_of_content(disguised[name]), name


def test_a_manifest_or_a_benchmark_record_is_no_trace(tmp_path):
    listed = tmp_path / "sets.json"
    listed.write_text(json.dumps([{"name": "a", "target": str(EXPORT), "drafts": [str(EXPORT)]}]))
    wrapped = tmp_path / "wrapped.json"
    wrapped.write_text(json.dumps({"trace_sets": [{"name": "a", "profile": "runs/a"}]}))
    table = tmp_path / "sets.csv"
    with table.open("w", newline="") as fh:
        csv.writer(fh).writerows([["name", "target", "drafts"], ["a", str(EXPORT), str(EXPORT)]])
    for path in (listed, wrapped, table, BENCH):
        assert _name_of_content(path) is None and recognised(path) is None, path.name
    # JSON that is no trace still goes to the Kineto reader when opened, which says what it lacks
    assert reader_of(BENCH) is format_named("kineto") and reader_of(table) is None
    assert len(read_manifest(listed)) == len(read_manifest(table)) == 1


def test_many_trace_sets_are_told_by_content_not_by_the_name(tmp_path, disguised):
    manifest = tmp_path / "m.csv"
    manifest.write_text(f"name,target,drafts\na,{EXPORT},{EXPORT}\n")
    assert is_many(manifest) and is_many(tmp_path) and is_many(tmp_path / "missing.json")
    # a trace named like a manifest is one trace (a .csv was taken for a manifest whatever it held)
    export_csv = shutil.copyfile(EXPORT, tmp_path / "export.csv")
    kineto_json = tmp_path / "kineto.json"
    kineto_json.write_bytes(gzip.decompress(KINETO.read_bytes()))
    assert not is_many(export_csv) and not is_many(kineto_json) and not is_many(disguised["export.json"])
    assert not is_many(EXPORT) and not is_many(KINETO)


def test_what_no_format_reads_is_said_in_one_line(tmp_path):
    empty = tmp_path / "empty.sqlite"
    empty.write_bytes(b"")
    with pytest.raises(InputError, match=r"empty\.sqlite is empty \(0 bytes\)"):
        open_trace(empty)
    packed = tmp_path / "t.sqlite.gz"
    packed.write_bytes(gzip.compress(EXPORT.read_bytes()))  # gzip of an export: no format reads it
    with pytest.raises(InputError) as err:
        open_trace(packed)
    words = str(err.value)
    assert words.startswith(f"{packed} is neither ") and "\n" not in words
    for fmt in FORMATS:  # every registered format is named
        assert all(kind in words for kind in fmt.kinds), fmt.name


@pytest.mark.parametrize("sample", [EXPORT, KINETO], ids=lambda p: p.name)
def test_a_reader_is_its_formats(sample):
    fmt = recognised(sample)
    assert fmt is not None and format_named(fmt.name) is fmt
    with open_trace(sample) as trace:
        assert isinstance(trace, Trace)
        assert trace.format == fmt.name and trace.capabilities is fmt.capabilities
    with fmt.open_file(sample) as trace:
        assert trace.format == fmt.name
    with pytest.raises(ValueError, match="no trace format is named 'otf2'"):
        format_named("otf2")


def test_a_label_is_the_file_name_without_its_formats_suffix():
    for fmt in FORMATS:
        for suffix in fmt.suffixes:
            assert trace_stem(f"runs/a/tiny-llama.spec-g3{suffix}") == "runs/a/tiny-llama.spec-g3", suffix
    assert trace_stem("rank0.17.pt.trace.json.gz") == "rank0.17"
    assert trace_stem("X.bench") == "X.bench" and trace_stem(".sqlite") == ".sqlite"  # a suffix alone names nothing
    assert set(registry.suffixes()) >= {".sqlite", ".nsys-rep", ".qdrep", ".pt.trace.json.gz", ".json.gz", ".json"}


def test_a_folders_traces_are_named_by_their_suffix_and_json_by_its_content(tmp_path):
    shutil.copyfile(EXPORT, tmp_path / "target.sqlite")
    shutil.copyfile(REPORT, tmp_path / "target.nsys-rep")  # its report beside it: the export is read
    shutil.copyfile(REPORT, tmp_path / "other.nsys-rep")  # a report alone
    shutil.copyfile(KINETO, tmp_path / "draft.pt.trace.json.gz")
    shutil.copyfile(BENCH, tmp_path / "draft.bench.json")  # JSON beside it, no trace
    (tmp_path / "plain.json").write_bytes(gzip.decompress(KINETO.read_bytes()))  # JSON that is one
    (tmp_path / "damaged.sqlite").write_bytes(b"not a database")  # a trace by its name: its reader says what is wrong
    (tmp_path / "draft.sqlite.d").mkdir()
    assert traces_in(tmp_path) == {"damaged": str(tmp_path / "damaged.sqlite"),
                                   "draft": str(tmp_path / "draft.pt.trace.json.gz"),
                                   "other": str(tmp_path / "other.nsys-rep"), "plain": str(tmp_path / "plain.json"),
                                   "target": str(tmp_path / "target.sqlite")}


def test_a_runs_trace_is_the_first_suffix_found(tmp_path):
    assert trace_named(tmp_path, "trace") is None
    shutil.copyfile(KINETO, tmp_path / "trace.pt.trace.json.gz")
    assert trace_named(tmp_path, "trace") == tmp_path / "trace.pt.trace.json.gz"
    shutil.copyfile(EXPORT, tmp_path / "trace.sqlite")
    assert trace_named(tmp_path, "trace") == tmp_path / "trace.sqlite"


def test_telling_a_format_loads_no_reader():
    # the sweep asks the registry about manifests: no pandas, no reader, no SQL for that
    code = ("import sys, nsys_cc.trace.registry as r, nsys_cc.sweep.manifest as m; "
            f"r.recognised({str(EXPORT)!r}); m.is_many({str(KINETO)!r}); "
            "print(sorted(x for x in ('pandas', 'numpy', 'sqlite3', 'nsys_cc.trace.reader', 'nsys_cc.trace.kineto') "
            "if x in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO)
    assert out.stdout.strip() == "[]"


# ---- no format is named above nsys_cc.trace --------------------------------------------------------------------------
# A format's name compared ("kineto" anywhere; any constant against a `.format`), a suffix of a trace format tested
# (compared, `endswith`, `removesuffix`: the registry's `trace_stem`, `traces_in`, `recognised` say it), a reader
# imported or tested with isinstance: each is a question only `nsys_cc.trace` answers. A literal ".json" is left out:
# it also names every JSON file nsys-cc reads and writes (manifests, status.json, bench.json), no trace format.
LAYERS = room_module("test_layers.py")
FORMAT_NAMES = {fmt.name for fmt in FORMATS} - {"nsys"}  # "nsys" is also the profiler and the program
SUFFIXES = set(registry.suffixes()) - {".json"}
READER_MODULES = {f"nsys_cc.trace{fmt.reader}" for fmt in FORMATS} | {f"nsys_cc.trace.format_{fmt.name}"
                                                                        for fmt in FORMATS}
READER_CLASSES = {"ExportTrace", "KinetoTrace"}
SUFFIX_TESTS = {"endswith", "removesuffix"}
# The launcher names the files each profiler writes (its report, the export, the torch trace, nsys's .qdstrm) until the
# recorder of each profiler owns those names (the house's next step): its tests of them are the recorders', not a
# reader's. A format's name tested there is still caught.
RECORDERS = "nsys_cc.launch."


def _strings(node: ast.AST) -> list[str]:
    """The string constants `node` is, or holds as a tuple, list or set of constants."""
    items = node.elts if isinstance(node, (ast.Tuple, ast.List, ast.Set)) else [node]
    return [i.value for i in items if isinstance(i, ast.Constant) and isinstance(i.value, str)]


def _is_format(node: ast.AST) -> bool:
    """`x.format`, or `getattr(x, "format", …)`."""
    if isinstance(node, ast.Attribute):
        return node.attr == "format"
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "getattr"
            and len(node.args) >= 2 and _strings(node.args[1]) == ["format"])


def _offence(node: ast.AST, suffixes: set[str]) -> str | None:
    if isinstance(node, ast.Compare):
        sides = [node.left, *node.comparators]
        words = [w for side in sides for w in _strings(side)]
        if (set(words) & (FORMAT_NAMES | suffixes)) or (words and any(_is_format(s) for s in sides)):
            return f"compares {ast.unparse(node)}"
    elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in SUFFIX_TESTS:
        if {w for a in node.args for w in _strings(a)} & suffixes:
            return f"tests a suffix: {ast.unparse(node)}"
    elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "isinstance":
        if len(node.args) == 2 and READER_CLASSES & {n.id for n in ast.walk(node.args[1]) if isinstance(n, ast.Name)}:
            return f"tests a reader's class: {ast.unparse(node)}"
    elif isinstance(node, ast.ImportFrom) and READER_CLASSES & {a.name for a in node.names}:
        return f"imports a reader: {ast.unparse(node)}"
    return None


def format_tests(root: Path) -> list[str]:
    """Every place of the package outside `<root>/trace/` that asks which format a trace is (the list above)."""
    out = []
    graph = LAYERS.imports(root)
    for module, path in LAYERS.modules(root).items():
        if module.split(".")[1:2] == ["trace"]:
            continue
        for target in sorted(graph.get(module, ()) & {m.replace("nsys_cc", root.name, 1) for m in READER_MODULES}):
            out.append(f"{module}: imports {target}")
        suffixes = set() if module.startswith(RECORDERS.replace("nsys_cc", root.name, 1)) else SUFFIXES
        for node in nodes(path):
            said = _offence(node, suffixes)
            if said:
                out.append(f"{module}:{node.lineno}: {said}")
    return sorted(out)


@pytest.mark.slow
def test_no_format_is_named_above_the_trace_room():
    assert format_tests(PACKAGE) == []


def test_the_format_check_finds_each_way_of_asking(tmp_path):
    pkg = tmp_path / "nsys_cc"
    for sub in ("trace", "analysis", "cli", "launch"):
        (pkg / sub).mkdir(parents=True)
        (pkg / sub / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "trace" / "kineto.py").write_text("class KinetoTrace:\n    format = 'kineto'\n")
    (pkg / "trace" / "registry.py").write_text("def stem(n):\n    return n.removesuffix('.sqlite')\n")  # trace's own
    (pkg / "analysis" / "a.py").write_text(
        "def f(trace, name, profiler):\n"
        "    if trace.format == 'nsys' or getattr(trace, 'format', None) != 'x':\n"
        "        return 1\n"
        "    if name.endswith(('.nsys-rep', '.sqlite')) or name.removesuffix('.pt.trace.json.gz'):\n"
        "        return 2\n"
        "    if profiler == 'nsys' or name.endswith('.json') or name.suffix in ('.json', '.csv'):\n"  # allowed
        "        return 3\n"
        "    return 'kineto' in name\n")
    (pkg / "cli" / "b.py").write_text("def g(t):\n    from ..trace.kineto import KinetoTrace\n"
                                      "    return isinstance(t, (KinetoTrace, int))\n")
    (pkg / "cli" / "c.py").write_text("from ..trace import kineto\n")
    (pkg / "launch" / "d.py").write_text("def h(rel, trace):\n    return rel.endswith('.nsys-rep') or "
                                         "trace.format == 'kineto'\n")  # a recorder's own names; not a format
    found = format_tests(pkg)
    assert [f.split(": ", 1)[0] for f in found] == [
        "nsys_cc.analysis.a:2", "nsys_cc.analysis.a:2", "nsys_cc.analysis.a:4", "nsys_cc.analysis.a:4",
        "nsys_cc.analysis.a:8", "nsys_cc.cli.b", "nsys_cc.cli.b:2", "nsys_cc.cli.b:3", "nsys_cc.cli.c",
        "nsys_cc.launch.d:2"], found
