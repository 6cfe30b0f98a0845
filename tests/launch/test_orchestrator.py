"""`launch.orchestrator`: both ways of running engines (interleaved runs; one process per model) made by the one
orchestrator, with each run's recording replaced by a copy of a real one (the committed fixtures) so that everything
else — the attempt folders, the checks, the records, resume, the status — is the package's own. What is checked is
what the strategies share: one status layout, the request and the recorder stored in every record and read back by the
reader of profile directories, the same resume rule, the same dry run."""

from __future__ import annotations

import json
import shutil

import pytest

from conftest import FIXTURES
from nsys_cc.analysis.profile_dir.outputs import read_output
from nsys_cc.formats import done_json
from nsys_cc.launch import orchestrator, process, recorders
from nsys_cc.request import ProfileRequest
from nsys_cc.workflows import profile as workflow

MODELS = ["tiny-llama-target", "tiny-llama-draft-s"]
NSYS = "/opt/nsys/bin/nsys"


@pytest.fixture
def recorded(monkeypatch):
    """Each run's recording (`process.profile_and_export`) replaced by copies of real ones: an interleaved run gets
    the committed run-1's trace and driver record, one model its fixture trace and latencies. Returns the list of the
    files each call was made for."""
    made = []

    def copy(cmds, log_path, **kw):
        files = cmds.files
        made.append(files.label)
        if files.label == "trace":  # an interleaved run
            for name in ("trace.sqlite", "interleaved.json"):
                shutil.copy(FIXTURES / "interleaved" / "run-1" / name, files.out_dir / name)
        else:
            shutil.copy(FIXTURES / "vllm" / f"{files.label}.sqlite", files.trace)
            shutil.copy(FIXTURES / "vllm" / f"{files.label}.bench.json", files.bench_json)
        log_path.write_text("# nsys-cc profile: a copy\n")
        return ""

    monkeypatch.setattr(process, "profile_and_export", copy)
    monkeypatch.setattr(process, "preflight", lambda recorder, binary: [])
    monkeypatch.setattr("nsys_cc.trace.nsys.require_nsys", lambda: NSYS)
    return made


def _request(out, separate: bool, **fields) -> ProfileRequest:
    return ProfileRequest(MODELS[0], MODELS[1:], out, device="cpu", repeat=None if separate else 1,
                          replicas=None if separate else 1, separate=separate, **fields)


@pytest.mark.parametrize("separate", [False, True], ids=["interleaved", "separate"])
def test_both_strategies_store_the_request_and_recorder_in_one_status_layout_and_every_record(tmp_path, recorded,
                                                                                              separate):
    request = _request(tmp_path / "o", separate, output_len=4, seed=7)
    outcome = orchestrator.run(workflow.strategy(request))
    out = outcome.out_dir
    assert [r.ok for r in outcome.runs] == [True, True]
    status = json.loads((out / "status.json").read_text())
    stored = {"recorder": {"name": "nsys", "version": None}, "device": "cpu", "request": request.to_dict()}
    assert {k: status[k] for k in stored} == stored  # (a stand-in nsys: no version to tell)
    assert status["format"] == "nsys_cc.status" and status["strategy"] == ("separate" if separate else "interleaved")
    assert [m["label"] for m in status["models"]] == MODELS and all(r["status"] == "done" for r in status["runs"])
    records = sorted(out.glob("*.done.json")) if separate else [out / "run-1" / "done.json"]
    assert len(records) == (2 if separate else 1)
    for path in records:
        record = json.loads(path.read_text())
        assert {k: record[k] for k in stored} == stored
        assert (path.parent / record["trace"]).is_file() and record["trace"].endswith(".sqlite")
        assert [m["label"] for m in record["models"]] == ([path.name.removesuffix(".done.json")] if separate
                                                          else MODELS)
        back = done_json.load_run(path.parent) if not separate else done_json.load_model(path)
        assert done_json.output_len(back) == 4 and done_json.request_of(back) == request
    # the reader of profile directories takes the request, the recorder and the traces from the records
    read = read_output(out)
    assert read.request == request and read.recorder == stored["recorder"] and read.interleaved == (not separate)
    traces = [m.trace for m in read.models] if separate else [r.trace for r in read.runs]
    assert traces == ([out / f"{m}.sqlite" for m in MODELS] if separate else [out / "run-1" / "trace.sqlite"])


@pytest.mark.parametrize("separate", [False, True], ids=["interleaved", "separate"])
def test_both_strategies_keep_a_run_whose_record_names_the_same_commands(tmp_path, recorded, separate):
    request = _request(tmp_path / "o", separate)
    orchestrator.run(workflow.strategy(request))
    made = len(recorded)
    again = orchestrator.run(workflow.strategy(request))
    assert len(recorded) == made and {r.status for r in again.runs} == {"done" if not separate else "resumed"}
    status = json.loads((again.out_dir / "status.json").read_text())
    assert {r["status"] for r in status["runs"]} == {"resumed"}
    orchestrator.run(workflow.strategy(request.replace(force=True)))
    assert len(recorded) == 2 * made
    orchestrator.run(workflow.strategy(request.replace(output_len=3)))  # other commands: made again
    assert len(recorded) == 3 * made


@pytest.mark.parametrize("separate", [False, True], ids=["interleaved", "separate"])
def test_a_ctrl_c_writes_the_status_and_hands_what_completed_to_finish(tmp_path, recorded, monkeypatch, separate):
    request = _request(tmp_path / "o", separate)
    done = []

    def stop(*a, **kw):
        raise KeyboardInterrupt

    monkeypatch.setattr(process, "profile_and_export", stop)
    with pytest.raises(KeyboardInterrupt):
        orchestrator.run(workflow.strategy(request), finish=lambda run: done.append(run) or run)
    status = json.loads((tmp_path / "o" / "status.json").read_text())
    assert status["runs"][0]["status"] == "interrupted" and done == []  # nothing completed: nothing to analyse
    assert status["stopped_by"] == (None if separate else "interrupted")
    assert [m["status"] for m in status["models"]][-1] in ("not run", "failed")


@pytest.mark.parametrize("separate", [False, True], ids=["interleaved", "separate"])
def test_a_dry_run_shows_the_recorders_commands_and_writes_nothing(tmp_path, separate, monkeypatch):
    monkeypatch.setattr("nsys_cc.trace.nsys.find_nsys", lambda: None)  # shown as plain nsys, never required
    out = tmp_path / "o"
    for recorder in recorders.RECORDERS:
        text = orchestrator.dry_run(workflow.strategy(_request(out, separate, profiler=recorder.name), dry=True))
        lines = [line for line in text.splitlines() if line and not line.startswith("#")]
        exports = [line for line in lines if line.startswith("nsys export")]
        runs = len(MODELS) if separate else 1
        assert len(lines) == runs * (2 if recorder is recorders.NSYS else 1) and len(exports) == len(lines) - runs
        assert text.count(recorder.trace_suffix) == runs, text  # each run's trace, named by its recorder
    assert not out.exists()
