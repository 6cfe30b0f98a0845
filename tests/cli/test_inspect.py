"""`nsys-cc info` and `nsys-cc ranges`: output checked against raw SQL on the same file; bad input → exit 2, one
line."""

from __future__ import annotations

import io
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner

from conftest import REPO, raw_sql, unchanged
from nsys_cc.cli import cli

RANGE_SQL = "eventType IN (59, 60, 70, 71)"


def run(*args: str):
    result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    return result


def qualified_names(path: Path) -> list[str]:
    """Range names as nsys 2022.4 labels them ('domain:name'), straight from SQL."""
    rows = raw_sql(
        path,
        f"""SELECT coalesce(d.text || ':', '') || coalesce(s.value, e.text) FROM NVTX_EVENTS e
            LEFT JOIN StringIds s ON s.id = e.textId
            LEFT JOIN (SELECT domainId, text FROM NVTX_EVENTS WHERE eventType = 75) d ON d.domainId = e.domainId
            WHERE e.{RANGE_SQL} ORDER BY e.rowid""",
    )
    return [r[0] for r in rows]


def test_info_table(nvtx_fixture):
    with unchanged(nvtx_fixture):
        result = run("info", str(nvtx_fixture))
    assert result.exit_code == 0, result.output
    meta = dict(raw_sql(nvtx_fixture, "SELECT name, value FROM EXPORT_META_DATA"))
    assert f"nsys version    {meta['EXPORT_PRODUCT_VERSION']}" in result.stdout
    assert f"schema version  {meta['EXPORT_SCHEMA_VERSION']}" in result.stdout
    assert "CUDA data       no" in result.stdout and "NVTX data       yes" in result.stdout
    assert "ran on          CPU, engine not named (own code?)" in result.stdout  # a C NVTX program on the CPU
    out = result.stdout.splitlines()
    assert out[6] == "" and out[7].split() == ["table", "rows"]
    lines = {ln.split()[0]: ln.split()[-1] for ln in out[9:]}
    for (name,) in raw_sql(nvtx_fixture, "SELECT name FROM sqlite_master WHERE type='table'"):
        assert lines[name] == f"{raw_sql(nvtx_fixture, f'SELECT count(*) FROM {name}')[0][0]:,}"


def test_info_json(nvtx_fixture):
    result = run("info", str(nvtx_fixture), "--format", "json")
    data = json.loads(result.stdout)
    assert data["has_nvtx"] is True and data["has_cuda"] is False
    assert data["tables"]["NVTX_EVENTS"] == raw_sql(nvtx_fixture, "SELECT count(*) FROM NVTX_EVENTS")[0][0]


def test_trace_info_is_a_small_frozen_value(nvtx_fixture):
    import dataclasses

    from nsys_cc.trace import TraceInfo, open_trace

    with open_trace(nvtx_fixture) as t:
        info = t.info()
    meta = dict(raw_sql(nvtx_fixture, "SELECT name, value FROM EXPORT_META_DATA"))
    assert isinstance(info, TraceInfo)
    assert (info.nsys_version, info.schema_version) == (meta["EXPORT_PRODUCT_VERSION"], meta["EXPORT_SCHEMA_VERSION"])
    assert info.has_nvtx and not info.has_cuda and info.sqlite_path == info.path == str(nvtx_fixture)
    assert info.tables["NVTX_EVENTS"] == raw_sql(nvtx_fixture, "SELECT count(*) FROM NVTX_EVENTS")[0][0]
    with pytest.raises(dataclasses.FrozenInstanceError):
        info.has_cuda = True  # type: ignore[misc]
    with pytest.raises(TypeError):
        info.tables["NVTX_EVENTS"] = 0  # type: ignore[index]
    text = repr(info)
    assert len(text) < 300 and nvtx_fixture.name in text and meta["EXPORT_PRODUCT_VERSION"] in text
    assert "NVTX" in text and "CUDA" not in text
    # `nsys-cc info --format json` is exactly `.to_dict()`
    assert json.loads(run("info", str(nvtx_fixture), "--format", "json").stdout) == info.to_dict()


def test_ranges_csv_is_every_range(nvtx_fixture):
    result = run("ranges", str(nvtx_fixture), "--format", "csv")
    table = pd.read_csv(io.StringIO(result.stdout))
    rows = raw_sql(nvtx_fixture, f"SELECT rowid, start, end - start FROM NVTX_EVENTS WHERE {RANGE_SQL} ORDER BY rowid")
    assert table["range_id"].tolist() == [r[0] for r in rows]
    assert table["start_ns"].tolist() == [r[1] for r in rows]
    assert table["duration_ns"].tolist() == [r[2] for r in rows]
    assert table["name"].tolist() == qualified_names(nvtx_fixture)
    for col in ("proj_start_ns", "proj_duration_ns", "gpu_ops", "kernel_sum_ns", "gpu_busy_ns"):
        assert table[col].isna().all()  # no CUDA in this trace: empty cells
    assert table.loc[table["name"] == "inner", "level"].tolist() == [2, 2]


@pytest.mark.parametrize("name, count", [("inner", 2), (":outer", 2), ("domain_inline", 1),
                                         ("nsys_cc.fixture:domain_inline", 1)])
def test_ranges_by_name(nvtx_fixture, name, count):
    result = run("ranges", str(nvtx_fixture), "--range", name, "--format", "json")
    records = json.loads(result.stdout)
    assert len(records) == count
    assert all(r["name"].endswith(name.lstrip(":")) for r in records)


def test_ranges_table_format(nvtx_fixture):
    result = run("ranges", str(nvtx_fixture), "--range", "worker_inner")
    header, rule, row = result.stdout.splitlines()
    assert header.split()[:3] == ["range_id", "name", "range_style"] and set(rule) <= {"-", " "}
    (rid,), = raw_sql(nvtx_fixture, "SELECT rowid FROM NVTX_EVENTS WHERE text = 'worker_inner'")
    assert row.split()[0] == str(rid) and row.split()[1] == "worker_inner"


def test_ranges_projection_on_a_public_trace(public_dir, nsys_bin, tmp_path):
    src = public_dir / "NVIDIA__Fuser__report1@8fa9ec2.sqlite"
    copy = tmp_path / src.name
    copy.write_bytes(src.read_bytes())
    subprocess.run([nsys_bin, "stats", "-q", "-r", "nvtxgpuproj", "-f", "csv", "-o", str(tmp_path / "s"), str(copy)],
                   check=True, capture_output=True)
    proj = pd.read_csv(tmp_path / "s_nvtxgpuproj.csv").set_index("RangeId").sort_index()
    with unchanged(src):
        table = pd.read_csv(io.StringIO(run("ranges", str(src), "--format", "csv").stdout)).set_index("range_id")
    launched = table[table["gpu_ops"].notna()].sort_index()
    assert launched.index.tolist() == proj.index.tolist()
    assert launched["proj_start_ns"].astype("int64").tolist() == proj["Projected Start (ns)"].tolist()
    assert launched["proj_duration_ns"].astype("int64").tolist() == proj["Projected Duration (ns)"].tolist()
    assert launched["gpu_ops"].astype("int64").tolist() == proj["NumGPUOps"].tolist()


def _bad_inputs(tmp_path: Path, fixture: Path) -> list[tuple[list[str], str]]:
    empty = tmp_path / "empty.sqlite"
    empty.write_bytes(b"")
    text = tmp_path / "notes.txt"
    text.write_text("not a trace\n")
    return [
        (["info", str(tmp_path / "missing.sqlite")], "no such file"),
        (["info", str(empty)], "empty"),
        (["ranges", str(text)], "neither an Nsight Systems SQLite export"),
        (["ranges", str(fixture), "--range", "innr"], "closest names: 'inner'"),
    ]


def test_bad_inputs_exit_2_with_one_line(tmp_path, nvtx_fixture):
    for args, expected in _bad_inputs(tmp_path, nvtx_fixture):
        result = CliRunner().invoke(cli, args)
        assert result.exit_code == 2, (args, result.output)
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("nsys-cc: error: ") and expected in lines[0], lines
        assert "Traceback" not in result.output


def test_newer_report_exits_2(public_dir, tmp_path, monkeypatch, nsys_bin):
    monkeypatch.setenv("NSYS_CC_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("NSYS_CC_QUIET", "1")
    report = tmp_path / "NVIDIA__Fuser__report1@8fa9ec2.nsys-rep"  # alone: its export sits beside it in public/
    shutil.copy2(public_dir / report.name, report)
    result = CliRunner().invoke(cli, ["info", str(report)])
    assert result.exit_code == 2
    (line,) = result.stderr.strip().splitlines()
    assert "written by nsys 2024.6.2" in line and "export it with nsys ≥ 2024.6" in line


@pytest.mark.slow
def test_real_console_script(nvtx_fixture, tmp_path):
    exe = Path(sys.executable).with_name("nsys-cc")
    if not exe.exists():
        exe = REPO / ".venv" / "bin" / "nsys-cc"
    ok = subprocess.run([str(exe), "ranges", str(nvtx_fixture), "--format", "csv", "--range", "middle"],
                        capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr
    assert pd.read_csv(io.StringIO(ok.stdout))["name"].tolist() == ["middle", "middle"]
    bad = subprocess.run([str(exe), "info", str(tmp_path / "missing.sqlite")], capture_output=True, text=True)
    assert bad.returncode == 2 and bad.stdout == ""
    assert bad.stderr.strip().splitlines() == [f"nsys-cc: error: {tmp_path / 'missing.sqlite'}: no such file"]
