"""Sweep cells, manifests and the tidy table's shape: the pure parts, no nsys, no vLLM, no Dask."""

from __future__ import annotations

import json
import os
import sys
from io import StringIO
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner

from conftest import REPO
from nsys_cc.cli import cli
from nsys_cc.errors import InputError
from nsys_cc.launch.commands import BenchOptions
from nsys_cc.sweep import table as table_mod
from nsys_cc.sweep.grid import Cell, CellSpec, SweepSpec, cells
from nsys_cc.sweep.manifest import (
    TraceSet,
    is_many,
    read_manifest,
    trace_sets,
    write_manifest,
)


def nsys_cc(*args: str):
    """`nsys-cc ARGS` in this process (the console script's own process is tested in tests/cli/test_inspect.py)."""
    return CliRunner().invoke(cli, list(args))


def test_cells_cover_the_grid_in_order_with_readable_names():
    grid = cells([1, 4, 16], [128, 1024])
    assert [c.name for c in grid] == ["bs1-in128", "bs1-in1024", "bs4-in128", "bs4-in1024", "bs16-in128",
                                      "bs16-in1024"]
    assert [c.name for c in cells([2], [8], [1, 2])] == ["bs2-in8-tp1", "bs2-in8-tp2"]
    assert cells([1, 1], [8]) == [Cell(1, 8)]


@pytest.mark.parametrize("bs, lens, tps, word", [([0], [8], None, "batch_sizes"), ([1], [-3], None, "input_lens"),
                                                  ([1], [8], [0], "target_tps"), ([], [8], None, "at least one")])
def test_bad_grids_are_refused_by_parameter_name(bs, lens, tps, word):
    with pytest.raises(InputError, match=word):
        cells(bs, lens, tps)


def test_a_cell_spec_sets_its_batch_and_length_and_round_trips_through_json(tmp_path):
    spec = SweepSpec("t", ("d1", "d2"), str(tmp_path / "rel"), BenchOptions(output_len=7, vllm_args=("--x",)),
                     speculate=(1, 3), nsys_args=("--sample=none",))
    cs = spec.cell(Cell(4, 1024, 2))
    assert cs.dir == tmp_path / "rel" / "bs4-in1024-tp2"
    assert (cs.options.batch_size, cs.options.input_len, cs.options.output_len) == (4, 1024, 7)
    kwargs = cs.profile_kwargs()
    assert kwargs["speculate"] == [1, 3] and kwargs["target_tp"] == 2
    back = CellSpec.from_dict(json.loads(json.dumps(cs.to_dict())))
    assert back == cs and back.fingerprint() == cs.fingerprint()
    plain = SweepSpec("t", ("d",), str(tmp_path)).cell(Cell(1, 8))
    assert "speculate" not in plain.profile_kwargs() and "target_tp" not in plain.profile_kwargs()


def test_the_fingerprint_changes_with_what_the_cell_measures_not_with_force(tmp_path):
    base = SweepSpec("t", ("d",), str(tmp_path))
    one = base.cell(Cell(1, 8)).fingerprint()
    assert SweepSpec("t", ("d",), str(tmp_path), force=True).cell(Cell(1, 8)).fingerprint() == one
    assert SweepSpec("t", ("d",), str(tmp_path), BenchOptions(iters=9)).cell(Cell(1, 8)).fingerprint() != one
    assert base.cell(Cell(2, 8)).fingerprint() != one


def test_the_fingerprint_says_how_the_models_ran(tmp_path):
    # interleaved (the default) and one process per model are different measurements: a cell made one way is not kept
    # by a rerun asking for the other; a cell in separate processes keeps the fingerprint older sweeps wrote
    base = SweepSpec("t", ("d",), str(tmp_path))
    one = base.cell(Cell(1, 8)).fingerprint()
    assert one["interleaved"] == {"repeat": 6, "replicas": 2, "precision": None, "max_repeat": None}
    separate = SweepSpec("t", ("d",), str(tmp_path), separate=True).cell(Cell(1, 8)).fingerprint()
    assert "interleaved" not in separate and separate == {k: v for k, v in one.items() if k != "interleaved"}
    assert SweepSpec("t", ("d",), str(tmp_path), repeat=3).cell(Cell(1, 8)).fingerprint() != one
    assert SweepSpec("t", ("d",), str(tmp_path), repeat=6, seed=4).cell(Cell(1, 8)).fingerprint() == one
    assert "interleaved" not in base.cell(Cell(1, 8, 2)).fingerprint()  # two ranks: separate processes


def test_a_manifest_names_profile_directories_as_sets(tmp_path):
    doc = [{"name": "a", "profile": "cells/bs1-in8", "batch_size": 1, "input_len": 8, "output_len": 2},
           {"name": "b", "profile": "/abs/bs2", "range_name": "fwd"}]
    path = tmp_path / "m.json"
    path.write_text(json.dumps(doc))
    a, b = read_manifest(path)
    assert a == TraceSet("a", profile=str(tmp_path / "cells" / "bs1-in8"), batch_size=1, input_len=8, output_len=2,
                         range_name=None)  # no range given: the one `profile` decided
    assert b.profile == "/abs/bs2" and b.range_name == "fwd" and not b.target and not b.drafts
    again = write_manifest([a, b], tmp_path / "copy.json")
    assert json.loads(again.read_text())["trace_sets"][0] == {"name": "a", "profile": "cells/bs1-in8", "batch_size": 1,
                                                              "input_len": 8, "output_len": 2}
    assert read_manifest(again) == [a, b]
    (tmp_path / "m.csv").write_text("name,profile,target,drafts\nc,cells/x,,\nd,,t.sqlite,d.sqlite\n")
    c, d = read_manifest(tmp_path / "m.csv")
    assert c.profile == str(tmp_path / "cells" / "x") and d.profile is None and d.target == str(tmp_path / "t.sqlite")
    path.write_text(json.dumps([{"profile": "p", "drafts": ["d.sqlite"]}]))
    with pytest.raises(InputError, match="gives a profile directory and drafts"):
        read_manifest(path)
    with pytest.raises(InputError, match="not both"):
        TraceSet("x", "t.sqlite", ("d.sqlite",), profile="p")


@pytest.mark.slow
def test_a_profile_set_is_analysed_as_analyze_reads_its_directory():
    # what nsys_cc.analyze(DIR) gives: the interleaved fixture's three runs pooled, by engine
    import nsys_cc as lib

    runs = REPO / "fixtures" / "interleaved"
    rows = table_mod.analyze_set(TraceSet("runs", profile=str(runs), batch_size=2, input_len=64, output_len=4,
                                          range_name=None))
    want = table_mod.from_result(lib.analyze(runs, output_len=4), cell="runs", batch_size=2, input_len=64,
                                 target_tp=None, attempts=1)
    pd.testing.assert_frame_equal(rows, want)
    assert set(rows["draft"]) == {"tiny-llama-draft-s", "tiny-llama-draft-xs"} and rows["gamma"].isna().all()


def test_a_json_manifest_resolves_paths_against_its_own_directory(tmp_path):
    (tmp_path / "runs").mkdir()
    doc = [{"name": "a", "target": "runs/t.sqlite", "drafts": ["runs/d.sqlite", "/abs/e.sqlite"], "batch_size": 4,
            "input_len": 64, "output_len": 2, "range_name": "fwd"},
           {"target": "t2.sqlite", "drafts": ["d2.sqlite"]}]
    path = tmp_path / "runs" / "m.json"
    path.write_text(json.dumps(doc))
    a, b = read_manifest(path)
    assert a == TraceSet("a", str(tmp_path / "runs" / "runs/t.sqlite"),
                         (str(tmp_path / "runs" / "runs/d.sqlite"), "/abs/e.sqlite"), batch_size=4, input_len=64,
                         output_len=2, range_name="fwd")
    assert b.name == "set-2" and b.batch_size is None and b.range_name == "model_executable()"
    # Written back relative to the new manifest's directory, it reads back to the same sets.
    again = write_manifest([a, b], tmp_path / "copy.json")
    assert read_manifest(again) == [a, b]
    assert json.loads(again.read_text())["trace_sets"][0]["range_name"] == "fwd"
    doc[0]["range"] = doc[0].pop("range_name")  # the key's name before 0.1.0: no longer read
    path.write_text(json.dumps(doc))
    with pytest.raises(InputError, match=r"entry 1 has unknown key\(s\) range "):
        read_manifest(path)
    assert json.loads(again.read_text())["trace_sets"][0]["target"] == "runs/runs/t.sqlite"


def test_a_csv_manifest_lists_drafts_with_semicolons(tmp_path):
    path = tmp_path / "m.csv"
    path.write_text("name,target,drafts,names,batch_size,input_len\n"
                    "x,t.sqlite,d1.sqlite;d2.sqlite,T;D1;D2,2,\n")
    (s,) = read_manifest(path)
    assert s.drafts == (str(tmp_path / "d1.sqlite"), str(tmp_path / "d2.sqlite"))
    assert s.names == ("T", "D1", "D2") and s.batch_size == 2 and s.input_len is None


@pytest.mark.parametrize("doc, word", [
    ([{"target": "t", "drafts": ["d"], "batchsize": 2}], "unknown key"),
    ([{"target": "t"}], "needs a target and at least one draft"),
    ([{"target": "t", "drafts": ["d"], "batch_size": "four"}], "whole number"),
    ([{"target": "t", "drafts": ["d"], "input_len": 0}], "≥ 1"),
    ([{"name": "a", "target": "t", "drafts": ["d"]}, {"name": "a", "target": "u", "drafts": ["e"]}], "twice"),
    ([], "no trace sets"),
    ({"sets": []}, "list of objects"),
])
def test_bad_manifests_say_what_is_wrong(tmp_path, doc, word):
    path = tmp_path / "m.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(InputError, match=word):
        read_manifest(path)


def test_a_directory_without_a_manifest_is_refused(tmp_path):
    assert is_many(tmp_path) and is_many(tmp_path / "x.json") and not is_many(tmp_path / "x.sqlite")
    with pytest.raises(InputError, match="manifest.json"):
        trace_sets(tmp_path)


def test_the_table_has_the_documented_columns_and_empty_gamma_for_plain_runs():
    coef = pd.DataFrame({"draft": ["d", "d"], "phase": ["prefill", "decode"], "metric": ["wall", "wall"],
                         "c": [0.1, 0.2], "ci_low": [0.05, 0.1], "ci_high": [0.2, 0.3], "draft_median_ms": [1, 2]})
    t = table_mod.from_coefficients(coef, cell="bs2-in8", batch_size=2, input_len=8, target_tp=None, attempts=1)
    assert list(t.columns)[:9] == ["draft", "phase", "metric", "batch_size", "input_len", "gamma", "c", "ci_low",
                                   "ci_high"]
    assert t["gamma"].isna().all() and t["target_tp"].isna().all()
    assert t["c"].tolist() == [0.1, 0.2] and t["batch_size"].tolist() == [2, 2]


def test_cli_names_a_bad_manifest_key_as_the_manifest_spells_it(tmp_path):
    (tmp_path / "m.json").write_text(json.dumps([{"target": "t", "drafts": ["d"], "output_len": 0}]))
    done = nsys_cc("analyze", str(tmp_path / "m.json"))
    assert done.exit_code == 2
    assert done.stderr.strip() == f"nsys-cc: error: {tmp_path / 'm.json'}: entry 1: output_len must be ≥ 1, not 0"


def test_cli_bad_lists_get_one_error_line():
    done = nsys_cc("sweep", "--target", "t", "--draft", "d", "--input-len", "128,0")
    assert done.exit_code == 2
    assert done.stderr.strip() == "nsys-cc: error: --input-len must be whole numbers ≥ 1, not '0'"
    done = nsys_cc("sweep", "--target", "t", "--draft", "d", "--speculate", "2,x")
    assert done.exit_code == 2
    assert done.stderr.strip() == "nsys-cc: error: --speculate must be whole numbers ≥ 1, not 'x'"

    done = nsys_cc("analyze", "nowhere.json")
    assert done.exit_code == 2 and done.stderr.startswith("nsys-cc: error: ") and "nowhere.json" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def in_place_c_by_hand(path: Path, gamma: int) -> float:
    """Median draft forward inside the verify steps ÷ median verify forward, outside warm-up, from the raw rows: a
    verify step is an `nsys_cc:step` range of payload γ + 1 (batch 1), its forwards the ranges that start in it."""
    import sqlite3
    import statistics

    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
        rows = db.execute("SELECT coalesce(e.text, s.value), e.start, e.end, e.int64Value FROM NVTX_EVENTS e "
                          "LEFT JOIN StringIds s ON s.id = e.textId WHERE e.eventType = 59").fetchall()
    warm = [(a, b) for n, a, b, _ in rows if n == "nsys_cc:warmup"]
    steps = [(a, b) for n, a, b, p in rows if n == "nsys_cc:step" and p == gamma + 1
             and not any(w0 <= a <= w1 for w0, w1 in warm)]

    def inside(name):
        return [(b - a) / 1e6 for n, a, b, _ in rows if n == name and any(s0 <= a <= s1 for s0, s1 in steps)]

    return statistics.median(inside("draft_model_executable()")) / statistics.median(inside("model_executable()"))


@pytest.mark.slow
def test_speculative_traces_in_a_manifest_are_analysed_in_place(tmp_path):
    spec = REPO / "fixtures" / "spec"
    rel = Path(os.path.relpath(spec, tmp_path))
    path = tmp_path / "m.json"
    path.write_text(json.dumps([{"name": "s", "target": str(rel / "tiny-llama-target.sqlite"),
                                 "drafts": [str(rel / "tiny-llama-draft-xs.sqlite")],
                                 "speculative": f"{rel}/tiny-llama-draft-xs.spec-g1.sqlite; "
                                                f"{rel}/tiny-llama-draft-xs.spec-g3.sqlite"}]))
    (s,) = read_manifest(path)
    assert s.speculative == tuple(str(spec / f"tiny-llama-draft-xs.spec-g{g}.sqlite") for g in (1, 3))
    assert read_manifest(write_manifest([s], tmp_path / "again.json")) == [s]
    done = nsys_cc("analyze", str(path), "--format", "csv")
    assert done.exit_code == 0, done.stderr
    table = pd.read_csv(StringIO(done.stdout))
    assert (table["cell"] == "s").all()
    rows = table[table["gamma"].notna()].set_index("gamma")
    assert sorted(rows.index) == [1, 3]  # one row per speculative run of the manifest
    for g in (1, 3):
        r = rows.loc[g]
        assert (r["draft"], r["phase"], r["metric"]) == ("tiny-llama-draft-xs", "decode", "wall")
        want = in_place_c_by_hand(spec / f"tiny-llama-draft-xs.spec-g{g}.sqlite", g)
        assert r["c"] == pytest.approx(want, rel=1e-6)  # the CSV writes six significant digits or more
        assert r["ci_low"] <= r["c"] <= r["ci_high"]
    assert not table[table["gamma"].isna()].empty  # the plain rows beside them


def test_without_a_scheduler_nothing_imports_dask_and_with_one_a_missing_dask_is_one_line(tmp_path, monkeypatch):
    """`distributed` made unimportable: many-set analysis still runs locally; --scheduler says what to install."""
    for name in ("distributed", "dask"):  # None in sys.modules: any import of it raises ImportError
        monkeypatch.setitem(sys.modules, name, None)
    vllm = REPO / "fixtures" / "vllm"
    (tmp_path / "m.json").write_text(json.dumps([{"target": str(vllm / "tiny-llama-target.sqlite"),
                                                  "drafts": [str(vllm / "tiny-llama-draft-xs.sqlite")]}]))
    here = nsys_cc("analyze", str(tmp_path / "m.json"), "--format", "csv")
    assert here.exit_code == 0, here.stderr
    assert "tiny-llama-draft-xs,decode,wall" in here.stdout
    there = nsys_cc("analyze", str(tmp_path / "m.json"), "--scheduler", "tcp://127.0.0.1:1")
    assert there.exit_code == 2
    assert there.stderr.strip() == ("nsys-cc: error: --scheduler (a Dask cluster's address) needs Dask's distributed "
                                    "package: pip install 'nsys_cc[dask]'")


def test_a_control_character_at_the_end_of_a_long_path_stays_in_the_error(tmp_path):
    # CI checks out under a longer directory than a laptop: the message used to cut the path before its NUL
    deep = tmp_path / ("d" * 120) / "draft.sqlite"
    path = tmp_path / "m.csv"
    path.write_text(f"target,drafts\nt.sqlite,{deep}\0x\n")
    with pytest.raises(InputError, match=r"drafts '….*/draft\.sqlite\\x00x' holds a control character"):
        read_manifest(path)
