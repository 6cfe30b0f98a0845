"""`tune` writes through the same writer, manifest and lock as every other command.

Each data-safety case plants a hostile shape (a link out of `-o`, the user's own report.md or tune.json, a
`round-1` link, a full disk, another writer holding the lock) and hashes every file outside `-o` (the `outside`
folder: the links' targets) before and after. The fixture's cells are read once (`cells`): what is under test is
what `tune` writes, not the read (tests/workflows/test_tune.py reads). Profiling is faked (`_profile_round` lays down
the fixture's round), so nothing waits on vLLM.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import FIXTURES, REPO, cli_in_process, lock_held, sha256_tree, unchanged
from nsys_cc.errors import InputError
from nsys_cc.files import publishing
from nsys_cc.workflows import tune as tuning

FIX = FIXTURES / "tune" / "a99-design"
PACKAGE = REPO / "nsys_cc"
QUICK = dict(max_batch_size=16, draws=20)


@pytest.fixture(scope="module")
def cells():
    return tuning._read(FIX, 0)


@pytest.fixture
def read_once(cells, monkeypatch):
    """`tune` reads the fixture's cells from memory (the read itself is the design tests')."""
    monkeypatch.setattr(tuning, "_read", lambda root, seed: cells)


@pytest.fixture
def outside(tmp_path):
    d = tmp_path / "outside"
    d.mkdir()
    (d / "victim.txt").write_text("the user's file outside -o\n")
    (d / "notes").mkdir()
    (d / "notes" / "a.txt").write_text("more of the user's\n")
    return d


@pytest.fixture
def fake_rounds(monkeypatch):
    """Profiling without vLLM: each round lays down the fixture's round-1 in the folder `tune` made for it."""
    calls = []

    def fake(request, out, cells, **kw):
        calls.append(out)
        assert out.is_dir() and not out.is_symlink()  # `tune` made the round folder through the writer
        shutil.copytree(FIX / "round-1", out, dirs_exist_ok=True)

    monkeypatch.setattr(tuning, "_profile_round", fake)
    return calls


def _profile(out, **kw):
    return tuning.tune(target="pair-target", draft="pair-draft", check="4:2,16:3", out_dir=out, confirm=False,
                       run_schedule=False, plot=False, **{**QUICK, **kw})


# -- data loss and writes outside -o -----------------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("name", ["forecast.csv", "checks.csv", "tune.png", "report.md", "schedule.json",
                                  "tune.json"])
def test_a_link_where_tune_writes_is_replaced_never_written_through(tmp_path, outside, read_once, name):
    out = tmp_path / "O"
    out.mkdir()
    (out / name).symlink_to(outside / "victim.txt")
    with unchanged(outside, FIX):
        rep = tuning.tune(FIX, out_dir=out, plot=name == "tune.png", **QUICK)
    target = Path(os.path.realpath(out / name))
    assert target.is_relative_to(out.resolve()) and rep.files  # the report's own link, into -o
    assert (out / "forecast.csv").read_text().startswith("batch_size,gamma,")


@pytest.mark.slow
def test_a_round_link_is_refused_before_anything_is_profiled(tmp_path, outside, read_once, fake_rounds):
    """`round-1` → a folder elsewhere: its run-1/, status.json and lock went there."""
    out = tmp_path / "O"
    out.mkdir()
    (out / "round-1").symlink_to(outside, target_is_directory=True)
    with unchanged(outside), pytest.raises(InputError, match=r"round-1 is a link or a file where nsys-cc needs a "
                                                             r"folder of its own"):
        _profile(out)
    assert fake_rounds == []


@pytest.mark.slow
@pytest.mark.parametrize("name", ["report.md", "tune.json", "forecast.csv"])
def test_the_users_own_file_is_refused_before_profiling(tmp_path, outside, read_once, fake_rounds, name):
    out = tmp_path / "O"
    out.mkdir()
    (out / name).write_text("my own notes, not nsys-cc's\n")
    with unchanged(out / name, outside), pytest.raises(InputError, match=rf"{name} is in the way: nsys-cc did not "
                                                                       "write it"):
        _profile(out)
    assert sorted(p.name for p in out.iterdir()) == [".nsys_cc.lock", name]  # the -o lock alone was added
    assert fake_rounds == []  # refused now, not after hours of profiling


@pytest.mark.slow
def test_the_users_own_report_is_refused_when_reading_too(tmp_path, outside, read_once):
    out = tmp_path / "O"
    out.mkdir()
    (out / "report.md").write_text("my own notes\n")
    with unchanged(out, outside), pytest.raises(InputError, match=r"report\.md is in the way"):
        tuning.tune(FIX, out_dir=out, plot=False, **QUICK)


@pytest.mark.slow
def test_a_profiling_tune_writes_through_the_writer_and_rereads_its_design(tmp_path, outside, read_once, fake_rounds):
    out = tmp_path / "O"
    with unchanged(outside):
        rep = _profile(out)
    assert [p.name for p in fake_rounds] == ["round-1"]
    doc = json.loads((out / "tune.json").read_text())
    assert doc["design"]["batch_sizes"] == [1, 8] and doc["design"]["check"] == [[4, 2], [16, 3]]
    manifest = json.loads((out / ".nsys_cc_report.json").read_text())["files"]
    assert set(manifest) == {"tune.json", "schedule.json", "forecast.csv", "checks.csv", "report.md",
                             *(f"schedule.{k}.json" for k in ("vllm-0.32", "vllm-pr48944", "tensorrt-llm", "sglang"))}
    assert all(publishing.sha256(out / n) == d for n, d in manifest.items())
    assert set(rep.files) == {"json", "schedule", "forecast", "checks", "report",
                              *(f"form {k}" for k in ("vllm-0.32", "vllm-pr48944", "tensorrt-llm", "sglang"))}
    again = _profile(out)  # a rerun replaces its own report (the rounds are its own too)
    assert again.files["report"] == out / "report.md"


@pytest.mark.slow
def test_a_full_disk_mid_write_leaves_the_earlier_report_whole(tmp_path, outside, read_once, monkeypatch):
    """forecast.csv cut mid-line while tune.json was new and checks.csv and report.md the old run's: now the write
    fails as a whole, naming the file, and the earlier report stays byte for byte."""
    import pandas as pd

    out = tmp_path / "O"
    tuning.tune(FIX, out_dir=out, plot=False, **QUICK)
    before = sha256_tree(out)
    real = pd.DataFrame.to_csv

    def full(self, path=None, *a, **kw):
        if path is not None and Path(path).name == "forecast.csv":
            Path(path).write_text("batch_size,gam")
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(self, path, *a, **kw)

    monkeypatch.setattr(pd.DataFrame, "to_csv", full)
    with unchanged(outside), pytest.raises(InputError, match=rf"cannot write {out}/forecast\.csv: No space left on "
                                                             rf"device; nothing in {out} was changed"):
        tuning.tune(FIX, out_dir=out, plot=False, max_batch_size=8, draws=20)
    assert sha256_tree(out) == before


@pytest.mark.slow  # a holder process (~1 s to start) and two tunes
def test_tune_waits_for_the_lock_another_writer_holds_then_refuses(tmp_path, read_once, fake_rounds, monkeypatch):
    out = tmp_path / "O"
    out.mkdir()
    with lock_held(out) as holder:
        monkeypatch.setenv("NSYS_CC_LOCK_WAIT", "0")
        before = sha256_tree(out)
        for call in (lambda: tuning.tune(FIX, out_dir=out, plot=False, **QUICK), lambda: _profile(out)):
            with pytest.raises(InputError, match=rf"another nsys-cc \(pid {holder.pid}\) is writing {out}"):
                call()
            assert sha256_tree(out) == before
        assert fake_rounds == []  # nothing profiled while another writer holds the folder
    _profile(out)  # the lock died with its holder


def test_a_profiling_tune_holds_the_lock_while_it_profiles(tmp_path, read_once, monkeypatch):
    """While the rounds run, a second writer of the same -o is refused (it waits NSYS_CC_LOCK_WAIT = 0 s)."""
    out = tmp_path / "O"
    seen = []

    def fake(request, round_dir, cells, **kw):
        shutil.copytree(FIX / "round-1", round_dir, dirs_exist_ok=True)
        probe = subprocess.run([sys.executable, "-c", (
            "from nsys_cc.files.folder import Folder\n"
            f"with Folder({str(out)!r}).lock(): print('got it')")], capture_output=True, text=True,
            env={**os.environ, "PYTHONPATH": str(PACKAGE.parent), "NSYS_CC_LOCK_WAIT": "0"})
        seen.append(probe.stderr)

    monkeypatch.setattr(tuning, "_profile_round", fake)
    _profile(out)
    assert seen and f"another nsys-cc (pid {os.getpid()}) is writing {out}" in seen[0]


# -- one line, never a traceback ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("args", [["--batch-size", "²"], ["--speculate", "1,³"], ["--check", "²:1"],
                                  ["--max-batch-size", "40000"], ["--max-gamma", "3000"], ["-o", ""]])
def test_bad_arguments_are_one_line(tmp_path, args):
    done = cli_in_process("tune", str(FIX), *args)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1 and lines[0].startswith("nsys-cc: error: "), done.stderr


def test_a_forecast_too_big_names_its_bound():
    with pytest.raises(InputError, match=r"max_batch_size × max_gamma = 40000 × 8 = 320000 forecast cells: at most "
                                         r"8192 \(e\.g\. max_batch_size 1024 with max_gamma 8\)"):
        tuning.tune(FIX, max_batch_size=40000)


@pytest.mark.parametrize("value", ["ab", [None, 8], {"a": 1}, 2.5])
def test_a_tampered_design_is_one_line_naming_tune_json(tmp_path, read_once, value):
    d = tmp_path / "T"
    d.mkdir()
    (d / "tune.json").write_text(json.dumps({"design": {"batch_sizes": value, "speculate": [1, 3]}}))
    done = cli_in_process("tune", str(d), "--max-batch-size", "16")
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1, done.stderr
    assert lines[0].startswith(f"nsys-cc: error: {d / 'tune.json'}: its design's batch sizes "), lines[0]


def test_a_design_of_one_number_is_that_batch_size(tmp_path, read_once):
    d = tmp_path / "T"
    d.mkdir()
    (d / "tune.json").write_text(json.dumps({"design": {"batch_sizes": 8, "speculate": [1, 3]}}))
    rep = tuning.tune(d, plot=False, **QUICK)
    assert {c.batch_size for c in rep.result.fitted} == {8}


@pytest.mark.slow
def test_a_read_only_output_is_one_line(tmp_path, read_once, fake_rounds, monkeypatch):
    """`tune -o` on a read-only file system: the raw OSError; `analyze` said one line."""
    real = os.mkdir

    def read_only(path, *a, **kw):
        if str(path).startswith(str(tmp_path / "ro")):
            raise OSError(errno.EROFS, "Read-only file system", str(path))
        return real(path, *a, **kw)

    monkeypatch.setattr(os, "mkdir", read_only)
    for args in (["--target", "pair-target", "--draft", "pair-draft"], [str(FIX)]):
        done = cli_in_process("tune", *args, "-o", str(tmp_path / "ro" / "O"), "--max-batch-size", "16")
        errors = [ln for ln in done.stderr.splitlines() if not ln.startswith("[nsys-cc] ")]  # progress aside
        assert done.returncode == 2 and len(errors) == 1 and "Read-only file system" in errors[0], done.stderr
        assert errors[0].startswith("nsys-cc: error: cannot ") and "Traceback" not in done.stderr


@pytest.mark.parametrize("kw,match", [
    (dict(batch_sizes=1.5), r"^batch_sizes: give whole numbers"),  # the parameter's own name
    (dict(speculate=b"1,3"), r"speculate: give whole numbers"),
    (dict(draws=0), r"draws must be a whole number ≥ 1"),
    (dict(out_dir=""), r"out_dir is empty"),
    (dict(out_dir=b"O"), r"out_dir: give the directory's path as text"),
])
def test_library_calls_raise_the_projects_errors(kw, match):
    with pytest.raises(InputError, match=match):
        tuning.tune(FIX, **kw)


def test_a_bytes_source_is_named():
    with pytest.raises(InputError, match=r"source: give a tune or sweep directory's path, not bytes"):
        tuning.tune(os.fsencode(FIX))


def test_the_documented_check_pairs_are_taken(tmp_path, read_once, fake_rounds):
    """`check=[(4, 2), (16, 3)]` (docs/library.md) was refused as "'(4' is not BATCH:GAMMA"."""
    rep = tuning.tune(target="pair-target", draft="pair-draft", check=[(4, 2), (16, 3)], out_dir=tmp_path / "O",
                      confirm=False, run_schedule=False, plot=False, **QUICK)
    assert {(c["batch_size"], c["gamma"]) for c in rep.result.checks} == {(4, 2), (16, 3)}


@pytest.mark.slow
def test_a_newline_in_the_output_name_forges_no_error_line(tmp_path, read_once):
    out = tmp_path / "O\nnsys-cc: error: forged"
    done = cli_in_process("tune", str(FIX), "-o", str(out), "--max-batch-size", "16", "--no-plot")
    assert done.returncode == 3, done.stderr  # the fixture's schedule is not recommended (a held-out cell misses)
    assert not [ln for ln in done.stderr.splitlines() if ln.startswith("nsys-cc: error")], done.stderr
    assert "report: " + str(tmp_path) + "/O\\nnsys-cc: error: forged" in done.stderr


# -- tune pools its cells through the same reader ---------------------------------------------------------------------
@pytest.mark.parametrize("damage", ["run_twice", "linked_trace"])
def test_a_rounds_run_counted_twice_is_refused_when_tuning(tmp_path, damage):
    """A round whose status.json lists run 1 twice, or whose run-2 trace is run-1's (a hard link), was pooled as
    two runs by `tune` too."""
    src = tmp_path / "tune"
    shutil.copytree(FIX, src)
    last = src / "round-2"
    if damage == "run_twice":
        doc = json.loads((last / "status.json").read_text())
        doc["runs"] = [doc["runs"][0], *doc["runs"]]
        (last / "status.json").write_text(json.dumps(doc))
        match = r"status\.json is not a profile's status file \(run 1 is listed twice\)"
    else:
        (last / "run-2" / "trace.sqlite").unlink()
        os.link(last / "run-1" / "trace.sqlite", last / "run-2" / "trace.sqlite")
        match = r"run-2/trace\.sqlite is the same file as .*run-1/trace\.sqlite \(a link\)"
    with unchanged(src), pytest.raises(InputError, match=match):
        tuning.tune(src, plot=False, **QUICK)
