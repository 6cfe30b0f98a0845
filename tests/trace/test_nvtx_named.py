"""`Trace.nvtx_ranges(names=…, prefixes=…, nesting=…)`: a read that SQLite narrows to the ranges asked for must give
exactly the rows, values and nesting that picking them out of the whole table gives — on every real export here
(the project's fixtures and the public GPU traces), with both read engines and with the tables split over threads."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pandas as pd
import pytest

from conftest import FIXTURES, PUBLIC, one_per_family
from nsys_cc.errors import NsysCCWarning
from nsys_cc.trace import bulk, nvtx, open_trace


def _files() -> list[Path]:
    """Every real export here that holds NVTX ranges (three public traces have none: nothing to narrow there)."""
    files = sorted(p for p in FIXTURES.rglob("*.sqlite"))
    if PUBLIC.is_dir():
        files += sorted(PUBLIC.glob("*.sqlite"))
    return [f for f in files if _has_ranges(f)]


def _has_ranges(path: Path) -> bool:
    con = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)
    try:
        tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        return "NVTX_EVENTS" in tables and con.execute(
            "SELECT 1 FROM NVTX_EVENTS WHERE eventType IN (59, 60, 70, 71) LIMIT 1").fetchone() is not None
    finally:
        con.close()


def _queries(full: pd.DataFrame) -> list[list[str]]:
    """Names as a user asks for them: each of a few qualified names, its plain name, with a leading ":", two at once,
    a name that no range has."""
    counts = full["qualified_name"].astype(object).value_counts()
    picked = list(counts.index[:3]) + list(counts.index[-2:])
    out: list[list[str]] = [["no such range"]]
    for q in dict.fromkeys(picked):
        plain = full.loc[full["qualified_name"].astype(object) == q, "name"].astype(object).iloc[0]
        out += [[q], [plain], [":" + plain]]
    if len(picked) >= 2:
        out.append(picked[:2])
    return out


def _expected(full: pd.DataFrame, names, prefixes=()) -> pd.DataFrame:
    """The definition, by brute force on the whole table: name or qualified name equal, or name's prefix."""
    wanted = {n[1:] if n.startswith(":") and not n.startswith("::") else n for n in names}
    name = full["name"].astype(object)
    hit = name.isin(wanted) | full["qualified_name"].astype(object).isin(wanted)
    for p in prefixes:
        hit |= name.str.startswith(p, na=False)
    return full[hit.to_numpy(dtype=bool)].reset_index(drop=True)


def _same(got: pd.DataFrame, want: pd.DataFrame, what: str) -> None:
    assert len(got) == len(want), what
    for col in want.columns:
        if isinstance(want[col].dtype, pd.CategoricalDtype):
            assert got[col].astype(object).equals(want[col].astype(object)), (what, col)
        else:
            pd.testing.assert_series_equal(got[col], want[col], check_names=False, obj=f"{what}: {col}")


# in `make check`: the NVTX edge cases, a vLLM plugin export, two processes (tp), interleaved engines, a speculative
# run with heads, a real GPU export; the other families (the same plugin's ranges in other fixture folders, 10 more
# reads of ~0.5 s) in `make test`
NAMED_FAMILIES = ("fixtures/nvtx", "fixtures/vllm", "fixtures/tp", "fixtures/interleaved/spec", "fixtures/spec/heads",
                  "public")


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::nsys_cc.errors.NsysCCWarning")  # the queries ask for a name that is not there
@pytest.mark.parametrize("path", one_per_family(_files(), NAMED_FAMILIES))
def test_a_named_read_is_the_whole_table_picked(path):
    with open_trace(path) as trace:
        full = trace.nvtx_ranges()
    assert not full.empty
    for names in _queries(full):
        want = _expected(full, names)
        with open_trace(path) as trace:  # a fresh Trace: the narrowed SQL read, not the cached table
            _same(trace.nvtx_ranges(names=names), want, f"{path.name} {names}")
            without = trace.nvtx_ranges(names=names, nesting=False)
        assert without["level"].isna().all() and without["parent_id"].isna().all()
        _same(without.drop(columns=["level", "parent_id"]), want.drop(columns=["level", "parent_id"]),
              f"{path.name} {names} nesting=False")


@pytest.mark.parametrize("path", _files()[:6], ids=lambda p: p.name)
def test_prefixes_pick_names_that_start_with_them(path):
    with open_trace(path) as trace:
        full = trace.nvtx_ranges()
        named = full["name"].dropna().astype(object)
        prefix = str(named.iloc[len(named) // 2])[:3]
    with open_trace(path) as trace:
        _same(trace.nvtx_ranges(prefixes=[prefix]), _expected(full, [], [prefix]), f"{path.name} prefix {prefix!r}")


def test_a_named_read_after_the_whole_table_picks_from_it(nvtx_fixture, monkeypatch):
    with open_trace(nvtx_fixture) as trace:
        full = trace.nvtx_ranges()
        reads = []
        monkeypatch.setattr(nvtx, "read_columns", lambda *a, **k: reads.append(a) or [])
        got = trace.nvtx_ranges(names=["outer"], nesting=False)
    assert reads == []  # no second read of the file
    _same(got.drop(columns=["level", "parent_id"]),
          _expected(full, ["outer"]).drop(columns=["level", "parent_id"]), "from the cached table")
    assert str(got["level"].dtype) == "Int64" and got["level"].isna().all()


# the stdlib engine's split named reads in `make test` (~100 split reads a case); in `make check` the arrow
# engine's here, and test_trace_bulk's split-across-threads test compares the two engines
@pytest.mark.filterwarnings("ignore::nsys_cc.errors.NsysCCWarning")  # the queries ask for a name that is not there
@pytest.mark.parametrize("engine", ["arrow", pytest.param("stdlib", marks=pytest.mark.slow)])
def test_both_engines_and_split_reads_give_the_same_named_ranges(nvtx_fixture, monkeypatch, engine):
    with open_trace(nvtx_fixture) as trace:
        full = trace.nvtx_ranges()
    monkeypatch.setenv(bulk.ENGINE_ENV, engine)
    monkeypatch.setattr(bulk, "PART_ROWS", 7)
    monkeypatch.setattr(bulk, "_workers", lambda: 3)
    for names in _queries(full):
        with open_trace(nvtx_fixture) as trace:
            _same(trace.nvtx_ranges(names=names), _expected(full, names), f"{engine} {names}")


def test_a_name_with_a_quote_is_one_sql_literal(tmp_path):
    """Names reach the SQL as literals: a quote in one must neither break the query nor widen it."""
    with open_trace(FIXTURES / "nvtx" / "nvtx_cases.sqlite") as trace:
        with pytest.warns(NsysCCWarning, match="no NVTX range named"):  # nothing, and said
            assert trace.nvtx_ranges(names=["it's'; DROP TABLE NVTX_EVENTS; --"]).empty
        assert len(trace.nvtx_ranges(names=["outer"])) > 0


def test_the_sql_filter_narrows_the_rows_read(nvtx_fixture, monkeypatch):
    """The point of a named read: rows that cannot match stay in SQLite."""
    rows_read = []
    real = bulk.read_columns

    def counting(*args, **kwargs):
        columns = real(*args, **kwargs)
        rows_read.append(len(columns[0]))
        return columns

    monkeypatch.setattr(nvtx, "read_columns", counting)
    with open_trace(nvtx_fixture) as trace:
        n_all = trace.rows("NVTX_EVENTS")
        picked = trace.nvtx_ranges(names=["outer"], nesting=False)
    assert rows_read and len(picked) <= rows_read[0] < n_all
    assert len(picked) > 0 and (picked["name"].astype(object) == "outer").all()
