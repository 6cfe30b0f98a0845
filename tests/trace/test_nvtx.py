"""The reader on the project's own NVTX fixture (fixtures/src/nvtx_cases.c profiled by the real nsys 2022.4).

Every expectation is computed from the same file with raw SQL through the stdlib sqlite3 (or from
nsys's own `nsys stats`), never from nsys_cc's output; the fixed names come from the C program.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from conftest import raw_sql, unchanged
from nsys_cc.trace import open_trace
from nsys_cc.trace.cuda import GPU_OP_COLUMNS
from nsys_cc.trace.nvtx import COLUMNS

RANGE_SQL = "eventType IN (59, 60, 70, 71)"


@pytest.fixture(scope="module")
def trace(nvtx_fixture):
    with unchanged(nvtx_fixture):
        with open_trace(nvtx_fixture) as t:
            t.nvtx_ranges()
            yield t


@pytest.fixture(scope="module")
def ranges(trace):
    return trace.nvtx_ranges().set_index("range_id", drop=False)


def by_name(ranges, name):
    rows = ranges[ranges["name"] == name]
    assert len(rows) >= 1, name
    return rows


def test_metadata_matches_export_meta_data(trace, nvtx_fixture):
    meta = dict(raw_sql(nvtx_fixture, "SELECT name, value FROM EXPORT_META_DATA"))
    assert trace.nsys_version == meta["EXPORT_PRODUCT_VERSION"]
    assert trace.schema_version == meta["EXPORT_SCHEMA_VERSION"]
    names = [r[0] for r in raw_sql(nvtx_fixture, "SELECT name FROM sqlite_master WHERE type='table'")]
    assert trace.tables == {n: raw_sql(nvtx_fixture, f'SELECT count(*) FROM "{n}"')[0][0] for n in names}
    assert trace.has_nvtx and not trace.has_cuda


def test_every_range_row_is_read_with_its_times(ranges, nvtx_fixture):
    sql = f"SELECT rowid, start, end, globalTid FROM NVTX_EVENTS WHERE {RANGE_SQL} ORDER BY rowid"
    rows = raw_sql(nvtx_fixture, sql)
    assert ranges["range_id"].tolist() == [r[0] for r in rows]
    assert ranges["start_ns"].tolist() == [r[1] for r in rows]
    assert ranges["end_ns"].tolist() == [r[2] for r in rows]
    assert (ranges["duration_ns"] == ranges["end_ns"] - ranges["start_ns"]).all()
    assert ranges["pid"].tolist() == [(r[3] >> 24) & 0xFFFFFF for r in rows]
    assert ranges["tid"].tolist() == [r[3] & 0xFFFFFF for r in rows]
    marks = raw_sql(nvtx_fixture, "SELECT rowid FROM NVTX_EVENTS WHERE eventType = 34 AND text = 'mark_here'")
    assert len(marks) == 1 and marks[0][0] not in set(ranges["range_id"])
    assert list(ranges.columns) == list(COLUMNS)


def test_names_inline_and_registered(ranges, nvtx_fixture):
    rows = raw_sql(
        nvtx_fixture,
        f"""SELECT e.rowid, coalesce(s.value, e.text), e.text IS NULL FROM NVTX_EVENTS e
            LEFT JOIN StringIds s ON s.id = e.textId WHERE {RANGE_SQL} ORDER BY e.rowid""",
    )
    assert ranges["name"].astype(str).tolist() == [r[1] for r in rows]
    registered = {r[1] for r in rows if r[2]}
    assert registered == {"registered_outer", "registered_span"}


def test_domain_and_qualified_name(ranges, nvtx_fixture):
    (domain_id, domain_name), = raw_sql(nvtx_fixture, "SELECT domainId, text FROM NVTX_EVENTS WHERE eventType = 75")
    assert domain_name == "nsys_cc.fixture"
    sql = f"SELECT rowid FROM NVTX_EVENTS WHERE {RANGE_SQL} AND domainId = ?"
    in_domain = {r[0] for r in raw_sql(nvtx_fixture, sql, (domain_id,))}
    assert len(in_domain) == 3
    for rid, row in ranges.iterrows():
        if rid in in_domain:
            assert row["domain"] == domain_name
            assert row["qualified_name"] == f"{domain_name}:{row['name']}"
        else:
            assert row["domain"] == ""
            assert row["qualified_name"] == row["name"]


def test_styles(ranges, nvtx_fixture):
    startend = {r[0] for r in raw_sql(nvtx_fixture, "SELECT rowid FROM NVTX_EVENTS WHERE eventType IN (60, 71)")}
    assert set(ranges.index[ranges["range_style"] == "start/end"]) == startend
    assert set(ranges.index[ranges["range_style"] == "push/pop"]) == set(ranges.index) - startend
    assert {"startend_same_thread", "cross_thread", "registered_span", "started_never_ended"} <= set(
        ranges.loc[list(startend), "name"]
    )


def _shortest_container(rows):
    """Brute force over raw rows (rowid, start, end, tid, other_thread): nvtxgpuproj's parent definition."""
    parent = {}
    for rid, s, e, tid, _other in rows:
        best = None
        for pid_, ps, pe, ptid, pother in rows:
            if pid_ == rid or pother or ptid != tid or not (ps <= s and e <= pe):
                continue
            if best is None or (pe - ps) < best[1]:
                best = (pid_, pe - ps)
        parent[rid] = best[0] if best else None
    return parent


def test_levels_and_parents(ranges, nvtx_fixture):
    trace_end = raw_sql(nvtx_fixture, "SELECT duration FROM ANALYSIS_DETAILS")[0][0]
    rows = raw_sql(
        nvtx_fixture,
        f"""SELECT rowid, start, coalesce(end, ?), globalTid, endGlobalTid IS NOT NULL FROM NVTX_EVENTS
            WHERE {RANGE_SQL}""",
        (trace_end,),
    )
    parent = _shortest_container(rows)
    level = {}
    for rid in sorted(parent, key=lambda r: [x[1] for x in rows if x[0] == r][0]):
        level[rid] = 0 if parent[rid] is None else level[parent[rid]] + 1
    ours_parent = {rid: (None if pd.isna(p) else int(p)) for rid, p in ranges["parent_id"].items()}
    assert ours_parent == parent
    assert ranges["level"].to_dict() == level
    # The C program's nesting, by name (≥ 3 levels on two threads).
    for thread_names in (["outer", "middle", "inner"], ["worker_outer", "worker_middle", "worker_inner"]):
        for depth, name in enumerate(thread_names):
            assert (by_name(ranges, name)["level"] == depth).all()
    assert by_name(ranges, "inner")["tid"].iloc[0] != by_name(ranges, "worker_inner")["tid"].iloc[0]
    # Partially overlapping start/end and push/pop ranges: neither is the other's parent.
    assert by_name(ranges, "overlapped")["parent_id"].isna().all()
    assert by_name(ranges, "domain_inline")["parent_id"].iloc[0] == by_name(ranges, "registered_outer").index[0]


def test_range_ending_on_another_thread(ranges, nvtx_fixture):
    cross = by_name(ranges, "cross_thread").iloc[0]
    sql = "SELECT endGlobalTid FROM NVTX_EVENTS WHERE rowid = ?"
    (end_gtid,), = raw_sql(nvtx_fixture, sql, (int(cross["range_id"]),))
    assert cross["end_global_tid"] == end_gtid and cross["ended_on_other_thread"]
    assert end_gtid & 0xFFFFFF == by_name(ranges, "worker_outer")["tid"].iloc[0]
    assert pd.isna(by_name(ranges, "startend_same_thread")["end_global_tid"].iloc[0])
    assert ranges["ended_on_other_thread"].sum() == 1


def test_payloads_and_category(ranges, nvtx_fixture):
    rows = raw_sql(
        nvtx_fixture,
        f"SELECT rowid, int64Value, doubleValue, category FROM NVTX_EVENTS WHERE {RANGE_SQL}",
    )
    for rid, i64, dbl, cat in rows:
        payload = ranges.at[rid, "payload"]
        expected = i64 if i64 is not None else dbl
        assert (math.isnan(payload) and expected is None) or payload == expected
        assert (pd.isna(ranges.at[rid, "category"]) and cat is None) or ranges.at[rid, "category"] == cat
    assert set(by_name(ranges, "outer")["payload"]) == {1.0}
    assert set(by_name(ranges, "middle")["payload"]) == {2.5}
    assert set(by_name(ranges, "registered_span")["payload"]) == {42.0}
    assert set(by_name(ranges, "inner")["category"]) == {7}
    assert raw_sql(nvtx_fixture, "SELECT text FROM NVTX_EVENTS WHERE eventType = 33 AND category = 7") == [
        ("fixture-category",)
    ]


def test_ranges_left_open_at_exit(ranges, nvtx_fixture):
    trace_end = raw_sql(nvtx_fixture, "SELECT duration FROM ANALYSIS_DETAILS")[0][0]
    open_rows = raw_sql(
        nvtx_fixture, f"SELECT rowid FROM NVTX_EVENTS WHERE {RANGE_SQL} AND (end IS NULL OR end = ?)", (trace_end,)
    )
    assert set(ranges.index[ranges["open_at_end"]]) == {r[0] for r in open_rows}
    assert set(ranges.loc[ranges["open_at_end"], "name"]) == {"left_open", "started_never_ended"}
    assert (ranges.loc[ranges["open_at_end"], "end_ns"] == trace_end).all()


def test_nvtxsum_of_nsys_stats_matches(trace, nsys_bin, nvtx_fixture, tmp_path):
    """nsys's own NVTX summary (run now) gives the same per-name totals as our ranges."""
    import subprocess

    copy = tmp_path / "fixture.sqlite"
    copy.write_bytes(nvtx_fixture.read_bytes())
    subprocess.run([nsys_bin, "stats", "-q", "-r", "nvtxsum", "-f", "csv", "-o", str(tmp_path / "s"), str(copy)],
                   check=True, capture_output=True)
    stats = pd.read_csv(tmp_path / "s_nvtxsum.csv")
    ours = trace.nvtx_ranges()
    style = ours["range_style"].map({"push/pop": "PushPop", "start/end": "StartEnd"}).astype(str)
    grouped = ours.groupby([ours["qualified_name"].astype(str), style])["duration_ns"]
    for row in stats.itertuples(index=False):
        d = grouped.get_group((row.Range, row.Style))
        assert (row[1], row[2], row[5], row[6]) == (d.sum(), len(d), d.min(), d.max())
        assert row[4] == pytest.approx(float(np.median(d)), abs=0.05)
    assert len(stats) == grouped.ngroups


def test_cuda_accessors_are_empty_with_columns(trace):
    assert list(trace.gpu_ops().columns) == GPU_OP_COLUMNS and trace.gpu_ops().empty
    assert trace.cuda_api().empty and {"start_ns", "correlation_id", "api", "tid"} <= set(trace.cuda_api().columns)
    assert trace.kernels().empty and {"demangled_name", "grid_x", "graph_node_id"} <= set(trace.kernels().columns)
    assert trace.memops().empty and {"kind", "bytes", "copy_kind"} <= set(trace.memops().columns)
    assert trace.graph_launches().empty and {"graph_id", "graph_exec_id"} <= set(trace.graph_launches().columns)


def test_full_export_has_every_table_and_reads_the_same(fixtures_dir, ranges):
    full = fixtures_dir / "nvtx" / "nvtx_cases_full.sqlite"
    with unchanged(full), open_trace(full) as t:
        assert t.has_table("CUPTI_ACTIVITY_KIND_KERNEL") and t.rows("CUPTI_ACTIVITY_KIND_KERNEL") == 0
        assert not t.has_cuda
        assert t.kernels().empty and t.gpu_ops().empty and t.cuda_api().empty
        pd.testing.assert_frame_equal(
            t.nvtx_ranges().drop(columns=["range_id", "parent_id"]).reset_index(drop=True),
            ranges.drop(columns=["range_id", "parent_id"]).reset_index(drop=True),
            check_categorical=False,
        )
