"""Opening exports and reports: read-only access, one-line errors, the .nsys-rep export cache, finding nsys."""

from __future__ import annotations

import json
import os
import re
import shutil
import sqlite3
import subprocess
import tempfile
import threading
from pathlib import Path

import pytest

from conftest import raw_sql, sha256_tree, unchanged
from nsys_cc.errors import ExportError, InputError, NsysNotFoundError
from nsys_cc.trace import export as export_mod, nsys as nsys_mod, open_trace
from nsys_cc.trace.export import content_hash


@pytest.fixture()
def report(fixtures_dir, tmp_path) -> Path:
    """The fixture report alone in a folder of its own: beside it in fixtures/ sits its export, which open_trace
    reads instead of exporting (test_a_report_with_its_export_beside_it_is_not_exported_again)."""
    path = fixtures_dir / "nvtx" / "nvtx_cases.nsys-rep"
    assert path.is_file(), "fixtures/nvtx/nvtx_cases.nsys-rep is missing: run `make fixtures`"
    alone = tmp_path / "report" / path.name
    alone.parent.mkdir()
    shutil.copy2(path, alone)
    return alone


def one_line(exc: pytest.ExceptionInfo) -> str:
    text = str(exc.value)
    assert "\n" not in text and text
    return text


# -- SQLite exports ------------------------------------------------------------------------------------------
def test_sqlite_is_read_without_writing_anything(nvtx_fixture, tmp_path):
    folder = tmp_path / "in"
    folder.mkdir()
    copy = folder / "trace.sqlite"
    shutil.copyfile(nvtx_fixture, copy)
    with unchanged(folder):
        with open_trace(copy) as t:
            t.nvtx_ranges(), t.gpu_ops(), t.cuda_api()
        assert sorted(os.listdir(folder)) == ["trace.sqlite"]


def test_writes_through_the_engine_are_refused(nvtx_fixture):
    with unchanged(nvtx_fixture), open_trace(nvtx_fixture) as t:
        with t.engine.connect() as conn, pytest.raises(Exception, match="readonly|read-only"):
            conn.exec_driver_sql("CREATE INDEX nsys_cc_probe ON NVTX_EVENTS(start)")


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda p: p, "no such file"),
        (lambda p: (p.mkdir(), p)[1], "is not a file"),
        (lambda p: (p.write_bytes(b""), p)[1], "empty"),
        (lambda p: (p.write_text("hello\n"), p)[1], "neither an Nsight Systems SQLite export"),
    ],
)
def test_bad_paths_give_one_line(tmp_path, make, message):
    path = make(tmp_path / "x.sqlite")
    with pytest.raises(InputError) as exc:
        open_trace(path)
    assert message in one_line(exc)


def test_sqlite_that_is_not_an_export(tmp_path):
    path = tmp_path / "other.sqlite"
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE notes (x INTEGER)")
    con.commit()
    con.close()
    with pytest.raises(InputError) as exc:
        open_trace(path)
    assert "is not an Nsight Systems SQLite export: no EXPORT_META_DATA/META_DATA_EXPORT" in one_line(exc)


def test_truncated_export(nvtx_fixture, tmp_path):
    path = tmp_path / "cut.sqlite"
    data = nvtx_fixture.read_bytes()
    path.write_bytes(data[: len(data) // 3])
    with pytest.raises(InputError) as exc:
        with open_trace(path) as t:
            t.nvtx_ranges()
    assert "corrupt or truncated" in one_line(exc)


# -- .nsys-rep reports ----------------------------------------------------------------------------------------
def test_report_is_exported_once_and_reused(report, nvtx_fixture, cache_dir, monkeypatch, nsys_bin):
    with unchanged(report):
        with open_trace(report) as t:
            first = t.sqlite_path
            ranges = t.nvtx_ranges()
        assert first == cache_dir / f"{content_hash(report)}.sqlite"
        assert content_hash(report) == sha256_tree(report)[report.name]
        rows = raw_sql(first, "SELECT rowid, coalesce(text, '') FROM NVTX_EVENTS WHERE eventType IN (59, 60) "
                              "ORDER BY rowid")
        assert ranges["range_id"].tolist() == [r[0] for r in rows]
        count = "SELECT count(*) FROM NVTX_EVENTS WHERE eventType IN (59, 60)"
        assert len(ranges) == raw_sql(nvtx_fixture, count)[0][0]
        mtime = first.stat().st_mtime_ns

        def no_nsys(*args, **kwargs):
            raise AssertionError("nsys ran again although the export is cached")

        monkeypatch.setattr(export_mod.subprocess, "run", no_nsys)
        monkeypatch.setattr(export_mod.subprocess, "Popen", no_nsys)
        with open_trace(report) as t:
            assert t.sqlite_path == first and len(t.nvtx_ranges()) == len(ranges)
        assert first.stat().st_mtime_ns == mtime
        # the export and the record beside it of what it was made from
        assert sorted(p.name for p in cache_dir.iterdir()) == [first.with_suffix(".json").name, first.name]


def test_concurrent_exports_of_one_report(report, cache_dir, nsys_bin):
    results, errors = [], []

    def work():
        try:
            results.append(export_mod.export_report(report, cache_dir=cache_dir))
        except Exception as exc:  # collected, then asserted empty
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and len(set(results)) == 1
    assert sorted(p.name for p in cache_dir.iterdir()) == [results[0].with_suffix(".json").name, results[0].name]
    assert raw_sql(results[0], "SELECT count(*) FROM NVTX_EVENTS")[0][0] > 0


def test_temporaries_left_by_killed_exports_are_cleaned_up(report, cache_dir, nsys_bin):
    """A process killed mid-export leaves its hidden temporary, recorded in the cache's ledger; the next export removes
    it once it is a day old, and leaves a fresh one (another process may be writing it right now) alone. A file the
    ledger never recorded — a user's, in a folder named by NSYS_CC_CACHE — is never touched, however old."""
    cache_dir.mkdir(parents=True, exist_ok=True)
    stale = cache_dir / ".0123456789abcdef-killed.sqlite"
    fresh = cache_dir / ".0123456789abcdef-running.sqlite"
    foreign = cache_dir / ".0123456789abcdef-users.sqlite"
    for leftover in (stale, fresh, foreign):
        leftover.write_bytes(b"partial")
    # What the killed and the running exports wrote before their nsys started: their names in the ledger.
    (cache_dir / export_mod.LEDGER).write_text(json.dumps({"temporaries": [stale.name, fresh.name]}))
    day = 24 * 3600
    for old in (stale, foreign):
        os.utime(old, (old.stat().st_atime - day - 60, old.stat().st_mtime - day - 60))
    out = export_mod.export_report(report, cache_dir=cache_dir)
    assert not stale.exists()
    assert fresh.read_bytes() == b"partial" and foreign.read_bytes() == b"partial"
    names = sorted(p.name for p in cache_dir.iterdir())
    assert names == sorted([out.name, out.with_suffix(".json").name, fresh.name, foreign.name, export_mod.LEDGER])
    # The ledger still holds the running export (its owner removes it when done), no longer the removed one.
    assert json.loads((cache_dir / export_mod.LEDGER).read_text())["temporaries"] == [fresh.name]


def test_old_public_report_exports(public_dir, cache_dir, nsys_bin):
    rep = public_dir / "MohanadOdema__DLProf__nsys_profile.nsys-rep"
    published = public_dir / "MohanadOdema__DLProf__nsys_profile.sqlite"
    with unchanged(rep), open_trace(rep) as t:
        assert t.nsys_version == nsys_mod.nsys_version(nsys_bin)
        assert len(t.kernels()) == raw_sql(published, "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL")[0][0]
        assert sorted(t.nvtx_ranges()["start_ns"]) == [
            r[0] for r in raw_sql(published, "SELECT start FROM NVTX_EVENTS WHERE eventType = 59 ORDER BY start")
        ]


def test_report_newer_than_nsys(public_dir, cache_dir, nsys_bin):
    rep = public_dir / "NVIDIA__Fuser__report1@8fa9ec2.nsys-rep"
    with unchanged(rep), pytest.raises(ExportError) as exc:
        open_trace(rep)
    text = one_line(exc)
    installed = nsys_mod.nsys_version(nsys_bin)
    assert f"written by nsys 2024.6.2, installed nsys is {installed}" in text
    assert "nsys ≥ 2024.6" in text and "--type sqlite" in text
    assert list(cache_dir.iterdir()) == []


def test_empty_and_broken_reports(report, tmp_path, cache_dir, nsys_bin):
    empty = tmp_path / "empty.nsys-rep"
    empty.write_bytes(b"")
    with pytest.raises(InputError) as exc:
        open_trace(empty)
    assert "empty" in one_line(exc)
    cut = tmp_path / "cut.nsys-rep"
    cut.write_bytes(report.read_bytes()[:3000])
    with pytest.raises(ExportError) as exc:
        open_trace(cut)
    assert "could not export" in one_line(exc)
    assert list(cache_dir.iterdir()) == []


def test_report_without_nsys(report, cache_dir, monkeypatch):
    monkeypatch.setattr(export_mod, "find_nsys", lambda: None)
    with pytest.raises(NsysNotFoundError) as exc:
        open_trace(report)
    assert "needs nsys to export: run `make nsys` or pass an existing .sqlite" in one_line(exc)


def test_unwritable_cache_falls_back_to_temp(report, tmp_path, monkeypatch, nsys_bin):
    blocker = tmp_path / "a_file"
    blocker.write_text("not a directory")
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    with open_trace(report, cache_dir=blocker / "cache") as t:
        assert t.sqlite_path.parent == tmp_path / "tmp" / f"nsys_cc-exports-{os.getuid()}"
        assert len(t.nvtx_ranges()) > 0


# -- finding nsys -------------------------------------------------------------------------------------------
def test_nsys_version_is_the_one_that_made_the_fixture(nsys_bin, nvtx_fixture):
    version = nsys_mod.nsys_version(nsys_bin)
    assert re.fullmatch(r"\d{4}\.\d+\.\d+(\.\d+)?", version)
    meta = dict(raw_sql(nvtx_fixture, "SELECT name, value FROM EXPORT_META_DATA"))
    assert meta["EXPORT_PRODUCT_VERSION"] == version
    out = subprocess.run([nsys_bin, "--version"], capture_output=True, text=True).stdout
    assert version in out


def _fake_nsys(path: Path) -> str:
    """An executable file: what find_nsys looks for (it does not run it)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\necho 'NVIDIA Nsight Systems version 2022.4.2.1'\n")
    path.chmod(0o755)
    return str(path)


def test_find_nsys_search_order(tmp_path, monkeypatch):
    nsys_bin = _fake_nsys(tmp_path / "real" / "nsys")
    monkeypatch.delenv("NSYS", raising=False)
    monkeypatch.delenv("NSYS_CC_NSYS_PREFIX", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(nsys_mod, "ENV_BIN_DIR", tmp_path / "env-bin")
    assert nsys_mod.find_nsys() is None
    with pytest.raises(NsysNotFoundError) as exc:
        nsys_mod.require_nsys()
    assert "make nsys" in one_line(exc) and "NSYS=" in one_line(exc)

    (tmp_path / "env-bin").mkdir()
    (tmp_path / "env-bin" / "nsys").symlink_to(nsys_bin)  # as `make nsys` links the project-local install
    assert nsys_mod.find_nsys() == str(tmp_path / "env-bin" / "nsys")
    prefix = tmp_path / "prefix"
    (prefix / nsys_mod.BIN_IN_PREFIX).parent.mkdir(parents=True)
    os.symlink(nsys_bin, prefix / nsys_mod.BIN_IN_PREFIX)
    monkeypatch.setenv("NSYS_CC_NSYS_PREFIX", str(prefix))
    assert nsys_mod.find_nsys() == str(prefix / nsys_mod.BIN_IN_PREFIX)
    (tmp_path / "nsys").symlink_to(nsys_bin)
    assert nsys_mod.find_nsys() == str(tmp_path / "nsys")
    monkeypatch.setenv("NSYS", nsys_bin)
    assert nsys_mod.find_nsys() == nsys_bin
