"""`nsys_cc.analysis.forwards.ranges`: selecting ranges by name, counting names, "closest names" hints — on the NVTX
fixture, expectations from raw SQL."""

from __future__ import annotations

import pytest

from conftest import raw_sql
from nsys_cc.analysis.forwards.ranges import closest_names, name_counts, range_table, select
from nsys_cc.errors import RangeNotFoundError
from nsys_cc.trace import open_trace


@pytest.fixture(scope="module")
def trace(nvtx_fixture):
    with open_trace(nvtx_fixture) as t:
        yield t


def rowids(path, where: str, params=()) -> list[int]:
    return [r[0] for r in raw_sql(path, f"SELECT rowid FROM NVTX_EVENTS WHERE {where} ORDER BY rowid", params)]


@pytest.mark.parametrize("query", ["outer", ":outer"])
def test_select_plain_name(trace, nvtx_fixture, query):
    picked = select(trace.nvtx_ranges(), query)
    assert picked["range_id"].tolist() == rowids(nvtx_fixture, "text = 'outer' AND eventType = 59")
    assert list(picked.columns) == list(trace.nvtx_ranges().columns)


def test_select_registered_name_with_or_without_domain(trace, nvtx_fixture):
    (sid,), = raw_sql(nvtx_fixture, "SELECT id FROM StringIds WHERE value = 'registered_outer'")
    expected = rowids(nvtx_fixture, "textId = ?", (sid,))
    ranges = trace.nvtx_ranges()
    assert select(ranges, "registered_outer")["range_id"].tolist() == expected
    assert select(ranges, "nsys_cc.fixture:registered_outer")["range_id"].tolist() == expected
    assert select(ranges, "other.domain:registered_outer").empty
    assert select(ranges, "outer ").empty  # exact match only


def test_name_counts(trace, nvtx_fixture):
    counts = name_counts(trace.nvtx_ranges())
    rows = raw_sql(
        nvtx_fixture,
        """SELECT coalesce(d.text || ':', '') || coalesce(s.value, e.text) AS n, count(*) FROM NVTX_EVENTS e
           LEFT JOIN StringIds s ON s.id = e.textId
           LEFT JOIN (SELECT domainId, text FROM NVTX_EVENTS WHERE eventType = 75) d ON d.domainId = e.domainId
           WHERE e.eventType IN (59, 60) GROUP BY n""",
    )
    assert counts.to_dict() == dict(rows)
    assert list(counts.values) == sorted(counts.values, reverse=True)


def test_closest_names(trace):
    ranges = trace.nvtx_ranges()
    assert closest_names(ranges, "innr")[0] == "inner"
    assert "worker_middle" in closest_names(ranges, "worker_midle")
    assert "nsys_cc.fixture:registered_span" in closest_names(ranges, "registered_span", n=3)
    assert closest_names(ranges.iloc[:0], "inner") == []


def test_range_table_unknown_name(trace):
    with pytest.raises(RangeNotFoundError, match=r"no NVTX range named 'innr'; closest names: 'inner'"):
        range_table(trace, "innr")


@pytest.mark.parametrize(("query", "where"), [
    ("nsys_cc.fixture:outer", "0"),  # `outer` lies in the default domain only: a `domain:outer` is none of them
    ("nsys_cc.fixture:domain_inline", "text = 'domain_inline'"),
    ("outer", "text = 'outer'"),
])
def test_a_name_in_a_domain_is_read_from_domains_only(trace, nvtx_fixture, query, where):
    """The narrowed read's SQL (`nvtx._name_filter`) leaves out the default domain's ranges named like the part after
    a query's ':' (`nsys_cc:sample` once read every `sample` range of an NVTX-heavy program, a third of its
    rows): the rows SQLite returns for it, against plain SQL; and the read itself."""
    from nsys_cc.trace.nvtx import _WHERE, _name_filter

    got = rowids(nvtx_fixture, f"{_WHERE} AND {_name_filter(trace, [query], ())}")
    assert got == rowids(nvtx_fixture, f"{_WHERE} AND ({where})")
    assert trace.nvtx_ranges(names=[query], warn=False)["range_id"].tolist() == got  # none found: said elsewhere
