"""How a tune's cells were profiled, from the records beside them (`analysis.tune.records`): the tune record and a
sweep cell's record first, as data; the runs' machine state for the device; the recorded command line only for
records that hold nothing else (the committed fixtures). Expectations by hand: the fixtures' README gives their
benchmark (`--output-len 8`, CPU), the schedule's table is the one fixtures/tune/a99-design's round 2 ran."""

from __future__ import annotations

import json
import shutil

import pytest

from conftest import FIXTURES
from nsys_cc.analysis.tune import records

TUNE = FIXTURES / "tune"
DESIGN = TUNE / "a99-design"
TABLE = [[1, 23, 6], [24, 32, 2]]  # round-2's schedule engines' num_speculative_tokens_per_batch_size


def _run(root, k: int = 1, *, machine: dict | None = None, commands: str | None = None):
    """A run record copied from the fixture's round 1 into `root/run-<k>/`, its machine state or commands changed."""
    doc = json.loads((DESIGN / "round-1" / "run-1" / "done.json").read_text())
    if machine is not None:
        doc["machine"] = machine
    if commands is not None:
        doc["commands"] = commands
    run = root / f"run-{k}"
    run.mkdir(parents=True)
    (run / "done.json").write_text(json.dumps(doc))
    return doc


def test_the_fixtures_old_records_give_their_output_length_from_the_command_line():
    # no tune record with it, no sweep cell record: the recorded commands (the fallback) — the README's 8
    for cell in (TUNE / "a99" / "bs1", TUNE / "a50" / "bs16", DESIGN / "round-1", DESIGN / "round-2"):
        assert records.output_len(cell) == 8, cell


def test_the_tune_record_and_a_sweep_cells_record_come_first(tmp_path):
    tune = tmp_path / "tune"
    _run(tune / "round-1")  # its commands say 8
    (tune / "tune.json").write_text(json.dumps({"design": {"batch_sizes": [1], "output_len": 16}}))
    assert records.output_len(tune / "round-1") == 16  # a round reads its tune's record
    cell = tmp_path / "sweep" / "bs4-in128"
    _run(cell)
    (cell / "cell.json").write_text(json.dumps({"cell": "bs4-in128", "status": "done",
                                                "parameters": {"options": {"output_len": 12, "input_len": 128}}}))
    assert records.output_len(cell) == 12
    (cell / "cell.json").write_text(json.dumps({"cell": "bs4-in128", "status": "done", "parameters": [1]}))
    assert records.output_len(cell) == 8  # a record of another shape says nothing: the commands


@pytest.mark.parametrize("commands,expected", [
    ("python -m nsys_cc.vllm.interleave --output-len=24 --batch-size 1", 24),
    ("python -m x --output-len 7 --engine b --output-len 9", 7),  # the first engine's
    ("python -m x --output-len", 0), ("python -m x --output-len 'eight'", 0), ("python -m x 'unclosed", 0),
])
def test_the_fallback_reads_the_recorded_words_not_a_pattern(tmp_path, commands, expected):
    _run(tmp_path, commands=commands)
    assert records.output_len(tmp_path) == expected


def test_no_record_is_an_unknown_length(tmp_path):
    assert records.output_len(tmp_path) == 0
    (tmp_path / "run-1").mkdir()
    (tmp_path / "run-1" / "done.json").write_text("not json")
    assert records.output_len(tmp_path) == 0


def test_the_device_is_the_runs_machine_state_not_the_command_line(tmp_path):
    """A CPU design whose user set VLLM_CPU_OMP_THREADS_BIND themselves: their variable is not in the record, nor
    (on a GPU run) the KV cache bytes; the command line misread such runs. The machine state of a GPU run holds the
    GPU's clocks (`launch.machine.machine_state`), a CPU run's does not."""
    cpu = {"before": {"load_1m": 1.0, "cpus": 2}, "after": {"load_1m": 1.0, "cpus": 2}}
    doc = _run(tmp_path / "a" / "round-1", machine=cpu)
    bare = doc["commands"].replace("VLLM_CPU_OMP_THREADS_BIND=nobind ", "").replace(
        " --kv-cache-memory-bytes 268435456", "")
    assert "VLLM_CPU_" not in bare and "--kv-cache-memory-bytes" not in bare
    _run(tmp_path / "b" / "round-1", machine=cpu, commands=bare)
    gpu = {"before": {"load_1m": 1.0, "gpu_clocks": "GPU 0: SM 1980/1980 MHz"}, "after": {"gpu_clocks": None}}
    _run(tmp_path / "c" / "round-1", machine=gpu)
    assert [records.device(tmp_path / x) for x in "abc"] == ["cpu", "cpu", "gpu"]
    assert records.device(tmp_path / "c" / "round-1") == "gpu"  # a round read itself
    (tmp_path / "c" / "tune.json").write_text(json.dumps({"design": {"device": "cpu"}}))
    assert records.device(tmp_path / "c") == "cpu"  # the tune record says what was asked
    assert records.device(tmp_path / "none") == "cpu" and records.device(DESIGN) == "cpu"
    assert records.device(TUNE / "a99") == "cpu"  # an older tune's bs<B>/ runs


def test_the_schedules_table_from_the_tune_record_else_the_recorded_config(tmp_path):
    assert records.schedule_table(DESIGN / "round-2") == TABLE
    assert records.schedule_table(DESIGN / "round-1") == []  # no schedule engine there
    tune = tmp_path / "tune"
    shutil.copytree(DESIGN / "round-2" / "run-1", tune / "round-2" / "run-1")
    (tune / "tune.json").write_text(json.dumps({"design": {"schedule_runs": {"round-2": [[1, 32, 3]]}}}))
    assert records.schedule_table(tune / "round-2") == [[1, 32, 3]]
    (tune / "tune.json").write_text(json.dumps({"design": {"schedule_runs": {"round-3": [[1, 32, 3]]}}}))
    assert records.schedule_table(tune / "round-2") == TABLE  # another round's record: the run's own


def test_a_round_reads_its_tunes_record_and_a_tune_its_own(tmp_path):
    (tmp_path / "round-1").mkdir()
    (tmp_path / "tune.json").write_text(json.dumps({"design": {"batch_sizes": [1, 8]}}))
    assert records.tune_record(tmp_path)["batch_sizes"] == [1, 8]
    assert records.tune_record(tmp_path / "round-1")["batch_sizes"] == [1, 8]
    (tmp_path / "bs1").mkdir()
    assert records.tune_record(tmp_path / "bs1") == {}  # not a round: no tune of its own
