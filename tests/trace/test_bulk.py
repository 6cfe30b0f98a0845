"""The two bulk-read engines (Arrow through ADBC's SQLite driver, and the stdlib cursor) give identical frames.

Oracles: the stdlib engine (the reader's original path, itself checked against raw SQL and nsys stats in the other
tests) on every real fixture and public trace, plus a generated export with CUDA graphs, read whole and split into
rowid ranges on parallel threads; and odd values the Arrow engine refuses (it must fall back, not fail).
"""

from __future__ import annotations

import shutil
import sqlite3
import sys
from pathlib import Path

import pandas as pd
import pytest

from conftest import FIXTURES, PUBLIC, REPO, one_per_family
from nsys_cc.analysis.forwards.projection import op_totals, project, range_ops
from nsys_cc.trace import bulk, open_trace

sys.path.insert(0, str(REPO / "benchmarks"))
import generate  # noqa: E402

ACCESSORS = ("nvtx_ranges", "cuda_api", "kernels", "memops", "graph_launches", "gpu_ops")


def _files() -> list[Path]:
    files = sorted(FIXTURES.glob("*/*.sqlite"))
    if PUBLIC.is_dir():
        files += sorted(PUBLIC.glob("*.sqlite"))
    return files


@pytest.fixture(scope="module")
def graphs_export(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("bulk") / "graphs.sqlite"
    return generate.write(generate.Shape(kernels=3_000, seed=5, graphs=True, layer_ranges=True), path, quiet=True)


def test_the_arrow_engine_is_installed_and_the_default(monkeypatch):
    """pyarrow and adbc-driver-sqlite are dependencies: without them every comparison here would compare the stdlib
    engine with itself, so their absence fails rather than skips."""
    monkeypatch.delenv(bulk.ENGINE_ENV, raising=False)
    assert bulk.arrow_available(), "pyarrow / adbc-driver-sqlite do not import: `pip install -e .` installs them"
    assert bulk.engine() == "arrow"


def _frames(path: Path, monkeypatch, engine: str) -> dict[str, pd.DataFrame]:
    monkeypatch.setenv(bulk.ENGINE_ENV, engine)
    assert bulk.engine() == engine
    with open_trace(path) as trace:
        frames = {name: getattr(trace, name)() for name in ACCESSORS}
        frames["projection"] = project(trace)
    return frames


def _assert_same(path: Path, monkeypatch) -> None:
    arrow = _frames(path, monkeypatch, "arrow")
    stdlib = _frames(path, monkeypatch, "stdlib")
    for name in arrow:
        pd.testing.assert_frame_equal(arrow[name], stdlib[name], check_categorical=False, obj=f"{path.name}: {name}")
        for col in arrow[name].select_dtypes("category"):  # same labels row by row, whatever the category order
            assert arrow[name][col].astype(object).equals(stdlib[name][col].astype(object)), (path.name, name, col)


@pytest.mark.parametrize("path", one_per_family(_files()))  # one export of each kind in `make check`
def test_engines_agree_on_real_exports(path, monkeypatch):
    _assert_same(path, monkeypatch)


@pytest.mark.slow
def test_engines_agree_when_tables_are_split_across_threads(graphs_export, monkeypatch):
    monkeypatch.setattr(bulk, "PART_ROWS", 50)
    monkeypatch.setattr(bulk, "_workers", lambda: 3)
    queries = []
    batches = bulk._arrow_batches
    monkeypatch.setattr(bulk, "_arrow_batches", lambda uri, sql: queries.append(sql) or batches(uri, sql))
    _assert_same(graphs_export, monkeypatch)
    kernel_parts = [q for q in queries if 'FROM "CUPTI_ACTIVITY_KIND_KERNEL" WHERE rowid >=' in q]  # names quoted
    nvtx_parts = [q for q in queries if 'FROM "NVTX_EVENTS" WHERE rowid >=' in q]
    assert len(kernel_parts) >= 3 and len(kernel_parts) % 3 == 0
    assert len(nvtx_parts) >= 3 and len(nvtx_parts) % 3 == 0  # ranges with names and a WHERE, split too


def test_values_of_another_type_fall_back_to_the_stdlib_cursor(tmp_path, monkeypatch):
    """The Arrow driver types a column from its first rows and refuses a later REAL or TEXT value; the read must
    then give what the stdlib cursor gives, not an error."""
    path = tmp_path / "odd.sqlite"
    shutil.copy(FIXTURES / "vllm" / "tiny-llama-target.sqlite", path)
    con = sqlite3.connect(path)
    last = con.execute("SELECT max(rowid) FROM NVTX_EVENTS WHERE eventType = 59").fetchone()[0]
    con.execute("UPDATE NVTX_EVENTS SET category = 2.5, text = 'inline' WHERE rowid = ?", (last,))
    con.commit()
    con.close()
    _assert_same(path, monkeypatch)
    monkeypatch.setenv(bulk.ENGINE_ENV, "arrow")
    with open_trace(path) as trace:
        assert trace.nvtx_ranges()["category"].iloc[-1] == 2  # the stdlib cursor's reading of 2.5 as int64


def test_op_totals_match_range_ops(graphs_export):
    with open_trace(graphs_export) as trace:
        ranges = trace.nvtx_ranges()
        groups = ranges["name"].astype(object).to_numpy()
        totals = op_totals(trace, ranges, groups)
        rows = range_ops(trace, ranges)
    rows["group"] = rows["range_id"].map(dict(zip(ranges["range_id"], groups)))
    want = rows.groupby(["group", "kind", "name"], observed=True)["duration_ns"].agg(["count", "sum"])
    got = totals.set_index(["group", "kind", "name"])[["count", "duration_ns"]].rename(columns={"duration_ns": "sum"})
    pd.testing.assert_frame_equal(got.sort_index(), want.sort_index(), check_index_type=False, check_dtype=False)
    assert totals["count"].sum() == len(rows) > 3_000  # nested ranges count an op once per enclosing range


@pytest.mark.slow
def test_a_reader_engine_not_known_is_one_error_naming_the_variable(tmp_path):
    """`NSYS_CC_READER=sdtlib` (a typo) read with the default engine, silently: now one line naming the variable and
    the values it takes, and a non-zero exit, from the command line too."""
    import os
    import subprocess

    env = {**os.environ, "NSYS_CC_READER": "sdtlib"}
    nsys_cc = str(Path(sys.executable).with_name("nsys-cc"))
    run = subprocess.run([nsys_cc, "ranges", str(FIXTURES / "nvtx" / "nvtx_cases.sqlite")], capture_output=True,
                         text=True, env=env, timeout=300)
    assert run.returncode != 0 and "Traceback" not in run.stderr
    line = [x for x in run.stderr.splitlines() if not x.startswith("[nsys-cc] ")]
    assert line == ["nsys-cc: error: NSYS_CC_READER='sdtlib': set it to one of arrow, stdlib, or leave it unset "
                    "(Arrow for large tables when installed)"]
