"""`analysis.profile_dir.outputs`: what a profile left in its output directory, read back — on the interleaved
fixture (its runs' `done.json` read here with `json`) and on status files written here by hand in the two layouts
`profile` writes (interleaved runs, one process per model)."""

from __future__ import annotations

import json
import os
import shutil

import pytest

from conftest import FIXTURES, unchanged
from nsys_cc.analysis.profile_dir.outputs import is_profile_output, read_output, run_engines, run_number
from nsys_cc.errors import InputError

INTERLEAVED = FIXTURES / "interleaved"


def test_run_folders_are_named_run_k_from_1():
    assert [run_number(n) for n in ("run-1", "run-12", "/x/run-3")] == [1, 12, 3]
    assert [run_number(n) for n in ("run-0", "run-01", "run-", "run-1a", "runs-1", "trace.sqlite")] == [None] * 6


def test_the_interleaved_fixture_is_read_from_its_runs_done_json():
    with unchanged(INTERLEAVED):
        out = read_output(INTERLEAVED)
    runs = sorted(INTERLEAVED.glob("run-*"), key=lambda p: int(p.name.split("-")[1]))
    engines = [json.loads((r / "done.json").read_text())["engines"] for r in runs]
    assert out.interleaved and out.stopped_by is None
    assert [(r.number, r.dir, r.trace) for r in out.runs] == [(k, r, r / "trace.sqlite")
                                                             for k, r in enumerate(runs, 1)]
    assert [m.label for m in out.models] == list(engines[0])  # the run's order, target first
    assert [m.role for m in out.models] == ["target"] + ["draft"] * (len(engines[0]) - 1)
    done = [label for label in engines[0] if all(e.get(label) == "done" for e in engines)]
    assert [m.label for m in out.done] == done
    assert run_engines(runs[0]) == engines[0]
    assert run_engines(INTERLEAVED) is None  # no done.json: not a run's folder


def _interleaved_status(folder, runs, models, **extra):
    folder.mkdir(exist_ok=True)
    (folder / "status.json").write_text(json.dumps({"runs": runs, "models": models, **extra}))


MODELS = [{"role": "target", "label": "t", "status": "done"}, {"role": "draft", "label": "d", "status": "done"},
          {"role": "speculative", "label": "d.spec-g3", "status": "failed", "reason": "out of memory"}]


def test_an_interleaved_status_gives_its_completed_runs_and_models(tmp_path):
    _interleaved_status(tmp_path, [{"run": 2, "status": "done"}, {"run": 1, "status": "failed"},
                                   {"run": 3, "status": "resumed"}], MODELS, stopped_by="precision")
    out = read_output(tmp_path)
    assert out.interleaved and out.stopped_by == "precision"
    assert [(r.number, r.dir) for r in out.runs] == [(2, tmp_path / "run-2"), (3, tmp_path / "run-3")]
    assert [(m.label, m.role, m.done) for m in out.models] == [("t", "target", True), ("d", "draft", True),
                                                               ("d.spec-g3", "speculative", False)]
    spec = out.models[2]
    assert (spec.draft, spec.gamma, spec.reason, spec.speculative) == ("d", 3, "out of memory", True)  # from its label
    assert is_profile_output(tmp_path)


def test_one_process_per_model_finds_each_trace_in_the_directory_itself(tmp_path):
    moved = tmp_path / "copied"
    moved.mkdir()
    (moved / "status.json").write_text(json.dumps([
        {"role": "target", "label": "t", "status": "done", "sqlite": "/where/it/ran/t.sqlite", "range": "fwd"},
        {"role": "draft", "label": "d", "status": "resumed"}]))
    out = read_output(moved)
    assert not out.interleaved and out.runs == ()
    assert [(m.label, m.trace, m.range_name, m.done) for m in out.models] == [
        ("t", moved / "t.sqlite", "fwd", True), ("d", moved / "d.sqlite", None, True)]


@pytest.mark.parametrize("doc, words", [
    ({"runs": [{"run": 1, "status": "done"}, {"run": 1, "status": "done"}], "models": MODELS}, "run 1 is listed twice"),
    ({"runs": [{"run": 0, "status": "done"}], "models": MODELS}, "a run entry is"),
    ({"runs": [], "models": [{"role": "target", "label": "../t"}]}, "is a path, not a name"),
    ({"runs": [], "models": [{"role": "boss", "label": "t"}]}, "has the role 'boss'"),
    ({"runs": [], "models": {"t": "target"}}, "its 'models' is not a list"),
    ({"models": MODELS}, "neither a list of models nor an object with its runs"),
])
def test_a_status_file_profile_never_writes_is_named(tmp_path, doc, words):
    (tmp_path / "status.json").write_text(json.dumps(doc))
    with pytest.raises(InputError, match=r"status\.json is not a profile's status file") as err:
        read_output(tmp_path)
    assert words in str(err.value)


def test_two_runs_sharing_one_trace_file_are_refused(tmp_path):
    for k in (1, 2):
        (tmp_path / f"run-{k}").mkdir()
        shutil.copy(INTERLEAVED / "run-1" / "done.json", tmp_path / f"run-{k}" / "done.json")
    (tmp_path / "run-1" / "trace.sqlite").write_bytes(b"x")
    os.link(tmp_path / "run-1" / "trace.sqlite", tmp_path / "run-2" / "trace.sqlite")
    with pytest.raises(InputError, match=r"is the same file as .* one run's trace would count as two runs"):
        read_output(tmp_path)


def test_what_is_a_profiles_output(tmp_path):
    (tmp_path / "empty").mkdir()
    (tmp_path / "file").write_text("x")
    (tmp_path / "no-models").mkdir()
    (tmp_path / "no-models" / "status.json").write_text("[]")
    (tmp_path / "runs" / "run-1").mkdir(parents=True)
    shutil.copy(INTERLEAVED / "run-1" / "done.json", tmp_path / "runs" / "run-1" / "done.json")
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "status.json").write_text("{not json")
    assert {p: is_profile_output(tmp_path / p) for p in ("empty", "file", "no-models", "runs", "broken", "nope")} == {
        "empty": False, "file": False, "no-models": False, "runs": True, "broken": True, "nope": False}
    with pytest.raises(InputError, match=r"holds no status\.json and no completed run-<k>/ folder"):
        read_output(tmp_path / "empty")
    with pytest.raises(InputError, match=r"is not a directory"):
        read_output(tmp_path / "file")
