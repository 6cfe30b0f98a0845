"""Sweeps and many-trace analyses on a real Dask distributed cluster started here (two worker processes, each with
the resource GPU=1, on 127.0.0.1), against the same work done locally.

- The analysis of the same traces (the project's vLLM fixtures) on the cluster and in the local process pool gives
  identical tables, and both equal `cost_coefficient` run on each trace set directly.
- A real CPU sweep of two cells (vLLM + nsys, tiny models, minimal iterations; each cell two interleaved runs, as
  `profile` makes them) locally with `nsys-cc sweep` (and its rerun, which profiles nothing), then on the cluster
  with the worker running one cell killed (SIGKILL) while that cell's vLLM runs: the cluster's table is still
  complete, has the local table's cells and columns, says the killed cell took two attempts, no process of the lost
  attempt is left running, and each cell's rows are those `nsys_cc.analyze` gives its directory.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from io import StringIO
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest
from click.testing import CliRunner

import nsys_cc
from conftest import REPO, processes_mentioning
from nsys_cc.analysis.coefficient.measure import cost_coefficient
from nsys_cc.cli import cli
from nsys_cc.formats import attempts_json
from nsys_cc.launch.commands import BenchOptions
from nsys_cc.sweep import table as table_mod
from nsys_cc.sweep.grid import SweepSpec, cells
from nsys_cc.sweep.manifest import read_manifest
from nsys_cc.sweep.run import analyze_many, sweep

# A real cluster (worker processes started and stopped here) is an end-to-end check: `make test` runs it, the edit-test
# loop (`make check`) leaves it out; the Dask-free paths (no import without a scheduler, the one-line error without
# Dask, a complete rerun needing no cluster) are checked there by test_grid.py and test_cell.py.
pytestmark = pytest.mark.slow

REPO = REPO
VLLM_FIXTURES = REPO / "fixtures" / "vllm"
NSYS_CC = str(Path(sys.executable).parent / "nsys-cc")
TARGET, DRAFT = "tiny-llama-target", "tiny-llama-draft-xs"
BENCH = BenchOptions(output_len=2, warmup_iters=1, iters=2)
RUNS = {"repeat": 2, "replicas": 1}  # the least that pools runs (two give no interval: docs/definitions.md)


@pytest.fixture(scope="module")
def cluster():
    """Two worker processes with one GPU resource each, loopback only, no dashboard."""
    # Dask is installed by `make setup` (the dask extra): a missing one fails here, it is not skipped. Imported here,
    # not at collection, where every test worker would pay for it.
    import distributed

    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, resources={"GPU": 1},
                                  host="127.0.0.1", dashboard_address=None) as c:
        yield c


@pytest.fixture()
def manifest(tmp_path) -> Path:
    """Three trace sets of the vLLM fixtures, one of them with two drafts, relative paths, a CSV manifest."""
    rel = os.path.relpath(VLLM_FIXTURES, tmp_path)
    path = tmp_path / "sets.csv"
    path.write_text(
        "name,target,drafts,batch_size,input_len\n"
        f"both,{rel}/{TARGET}.sqlite,{rel}/tiny-llama-draft-s.sqlite;{rel}/{DRAFT}.sqlite,1,128\n"
        f"xs,{rel}/{TARGET}.sqlite,{rel}/{DRAFT}.sqlite,1,128\n"
        f"s-as-target,{rel}/tiny-llama-draft-s.sqlite,{rel}/{DRAFT}.sqlite,,\n")
    return path


def test_analysis_on_the_cluster_equals_the_local_pool_and_each_set_alone(cluster, manifest):
    sets = read_manifest(manifest)
    local = analyze_many(sets, jobs=2)
    remote = analyze_many(sets, scheduler=cluster.scheduler_address)
    assert local.failures == [] and remote.failures == []
    pd.testing.assert_frame_equal(remote.table, local.table)
    assert list(local.table["cell"].unique()) == ["both", "xs", "s-as-target"]
    for s in sets:
        direct = cost_coefficient(s.target, list(s.drafts)).coefficients
        rows = local.table[local.table["cell"] == s.name]
        cols = ["draft", "phase", "metric", "c", "ci_low", "ci_high"]
        pd.testing.assert_frame_equal(rows[cols].reset_index(drop=True), direct[cols], check_dtype=False,
                                      check_exact=True)
    assert local.table.loc[local.table["cell"] == "s-as-target", "batch_size"].isna().all()


def test_the_cli_prints_the_same_table_from_the_cluster(cluster, manifest, tmp_path):
    # in this process (the console script's own process is tested in tests/cli/test_inspect.py); the work runs on the
    # cluster
    here = CliRunner().invoke(cli, ["analyze", str(manifest), "--format", "csv", "--jobs", "1"])
    there = CliRunner().invoke(cli, ["analyze", str(manifest), "--format", "csv", "--scheduler",
                                     cluster.scheduler_address, "-o", str(tmp_path / "out")])
    assert here.exit_code == 0 and there.exit_code == 0, here.stderr + there.stderr
    assert here.stdout == there.stdout
    assert (tmp_path / "out" / "sweep.csv").read_text() == here.stdout
    assert "[set 3/3]" in there.stderr


def test_a_set_that_cannot_be_read_is_reported_and_the_others_kept(cluster, tmp_path):
    rel = os.path.relpath(VLLM_FIXTURES, tmp_path)
    (tmp_path / "m.json").write_text(json.dumps([
        {"name": "good", "target": f"{rel}/{TARGET}.sqlite", "drafts": [f"{rel}/{DRAFT}.sqlite"]},
        {"name": "gone", "target": "missing.sqlite", "drafts": [f"{rel}/{DRAFT}.sqlite"]}]))
    done = CliRunner().invoke(cli, ["analyze", str(tmp_path / "m.json"), "--scheduler", cluster.scheduler_address])
    assert done.exit_code == 1
    assert "gone: FAILED" in done.stdout and "missing.sqlite" in done.stdout
    assert "good" in done.stdout



def _parent(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def _kill_the_worker_of_a_running_cell(out: Path, stop: threading.Event) -> dict:
    """Wait until a cell's interleaved run executes under nsys, then SIGKILL the Dask worker process running it."""
    while not stop.is_set():
        for cell_dir in sorted(out.glob("bs*")):
            logs = list(cell_dir.glob("run-*.attempt*/log"))  # run-<k>.attempt.<id>/: the run being made
            attempts = cell_dir / attempts_json.NAME
            if not (logs and attempts.is_file() and "$ " in logs[0].read_text(errors="replace")):
                continue
            time.sleep(3.0)  # vLLM is starting up inside nsys
            runner = json.loads(attempts.read_text())["starts"][-1]["pid"]
            worker = _parent(runner)
            os.kill(worker, signal.SIGKILL)
            return {"cell": cell_dir.name, "worker": worker, "runner": runner}
        time.sleep(0.5)
    return {}


@pytest.mark.vllm
@pytest.mark.nsys
def test_a_sweep_on_the_cluster_survives_a_killed_worker_and_matches_the_local_sweep(cluster, tmp_path, nsys_bin):
    grid = cells([1, 2], [16])
    # The local run through the command line, then its rerun, which keeps both cells without profiling anything.
    cli = [NSYS_CC, "sweep", "--target", TARGET, "--draft", DRAFT, "--batch-size", "1,2", "--input-len", "16",
           "--output-len", str(BENCH.output_len), "--num-iters-warmup", str(BENCH.warmup_iters), "--num-iters",
           str(BENCH.iters), "--repeat", str(RUNS["repeat"]), "--replicas", str(RUNS["replicas"]), "--device", "cpu",
           "-o", str(tmp_path / "local"), "--format", "json"]
    first = subprocess.run(cli, capture_output=True, text=True, timeout=1800)
    assert first.returncode == 0, first.stderr[-3000:]
    assert "[cell 1/2] bs1-in16: done" in first.stderr and "[cell 2/2] bs2-in16: done" in first.stderr
    traces = sorted((tmp_path / "local").glob("*/run-*/trace.sqlite"))  # each cell a profile directory
    mtimes = [t.stat().st_mtime_ns for t in traces]
    again = subprocess.run(cli, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr[-3000:]
    assert again.stderr.count("already complete (kept; attempts 1)") == 2 and "profiling" not in again.stderr
    assert [t.stat().st_mtime_ns for t in traces] == mtimes and len(traces) == 4
    assert json.loads(again.stdout)["rows"] == json.loads(first.stdout)["rows"]

    out = tmp_path / "cluster"
    stop, killed = threading.Event(), {}
    killer = threading.Thread(target=lambda: killed.update(_kill_the_worker_of_a_running_cell(out, stop)))
    killer.start()
    try:
        remote = sweep(SweepSpec(TARGET, (DRAFT,), str(out), BENCH, device="cpu", **RUNS), grid,
                       scheduler=cluster.scheduler_address)
    finally:
        stop.set()
        killer.join()
    assert killed, "no cell was seen running"
    assert [c.status for c in remote.cells] == ["done", "done"], remote.notes

    table = table_mod.normalise(pd.read_parquet(out / "sweep.parquet"))
    ref = table_mod.normalise(pd.read_parquet(tmp_path / "local" / "sweep.parquet"))
    assert list(table.columns) == list(ref.columns)
    key = ["cell", "draft", "phase", "metric", "batch_size", "input_len"]
    assert table[key].equals(ref[key])
    # every cell pooled from its two runs, without an interval (two runs support none), the same on the cluster
    assert table["c"].notna().all() and table[["ci_low", "ci_high"]].isna().all().all()
    attempts = table.groupby("cell")["attempts"].first().to_dict()
    assert attempts[killed["cell"]] == 2 and set(attempts.values()) <= {1, 2}
    assert sum(v == 1 for v in attempts.values()) == 1
    starts = json.loads((out / killed["cell"] / attempts_json.NAME).read_text())["starts"]
    assert starts[0]["pid"] == killed["runner"] and starts[1]["pid"] != killed["runner"]
    assert any(killed["cell"] in n and "attempt 2" in n for n in remote.notes)
    # The lost attempt's runner, nsys and vLLM were stopped with their worker: nothing of them is left running.
    assert processes_mentioning(out) == []
    assert not Path(f"/proc/{killed['runner']}").exists()
    # The traces stayed where the workers wrote them and analyse to the table the cluster returned: each cell's
    # directory as nsys_cc.analyze reads a profile directory.
    reread = analyze_many(read_manifest(out / "manifest.json"), jobs=1).table
    assert reread.drop(columns="attempts").equals(table.drop(columns="attempts"))
    for name in ("bs1-in16", "bs2-in16"):
        coef = nsys_cc.analyze(out / name, output_len=BENCH.output_len).coefficients
        rows = table[table["cell"] == name].reset_index(drop=True)
        cols = ["draft", "phase", "metric", "c", "ci_low", "ci_high"]
        pd.testing.assert_frame_equal(rows[cols], coef[cols], check_dtype=False)


# ---- the GPU=1 resource, the sweep CLI's --scheduler, and a worker lost while analysing ---------------------------


@pytest.fixture()
def threads_cluster():
    """Two in-process workers with two threads and one GPU resource each: a stand-in cell task (monkeypatched here)
    runs on them; what the test checks is where and when the scheduler runs the cells."""
    import distributed

    with distributed.LocalCluster(n_workers=2, threads_per_worker=2, processes=False, resources={"GPU": 1},
                                  dashboard_address=None) as c:
        yield c


def _recording_cell_task(log: Path, hold_s: float):
    """A cell task that runs the cell here with the test_sweep_cell stand-in for `profile`, after holding its slot
    for `hold_s`; appends (cell, worker, start, end) to the JSON-lines file `log` (the task is pickled to the worker,
    so it reports through a file)."""
    def task(spec_doc: dict):
        from distributed import get_worker
        from test_cell import FakeProfile

        from nsys_cc.sweep.cell import run_cell
        from nsys_cc.sweep.grid import CellSpec

        spec = CellSpec.from_dict(spec_doc)
        start = time.monotonic()
        time.sleep(hold_s)
        fake = FakeProfile()  # answers as the orchestrator does, given the strategy the workflow would make

        def profile(request):
            return fake(SimpleNamespace(request=request, name="interleaved", repeat=request.repeat,
                                        replicas=request.replicas))

        outcome = run_cell(spec, profile=profile)
        with open(log, "a") as fh:
            fh.write(json.dumps([spec.name, get_worker().address, start, time.monotonic()]) + "\n")
        return outcome

    return task


def _seen(log: Path) -> list:
    return [tuple(json.loads(line)) for line in log.read_text().splitlines()] if log.is_file() else []


def test_the_gpu_resource_keeps_two_profiles_off_one_gpu(threads_cluster, tmp_path, monkeypatch):
    """Each worker has two threads but one GPU: it never runs two cells at once; the workers share the cells."""
    from nsys_cc.sweep import cluster as cluster_mod

    log = tmp_path / "cells.jsonl"
    monkeypatch.setattr(cluster_mod, "profile_cell_task", _recording_cell_task(log, 1.0))
    result = sweep(SweepSpec("T", ("D",), str(tmp_path / "sw")), cells([1, 2, 4, 8], [8]),
                   scheduler=threads_cluster.scheduler_address)
    seen = _seen(log)
    assert [c.status for c in result.cells] == ["done"] * 4
    assert sorted(name for name, *_ in seen) == ["bs1-in8", "bs2-in8", "bs4-in8", "bs8-in8"]
    for worker in {w for _, w, *_ in seen}:
        spans = sorted((s, e) for _, w, s, e in seen if w == worker)
        assert all(e <= s2 for (_, e), (s2, _) in zip(spans, spans[1:])), (worker, spans)  # one cell at a time
    assert len({w for _, w, *_ in seen}) == 2  # and both GPUs were used


def test_the_sweep_cli_runs_its_cells_on_the_scheduler(threads_cluster, tmp_path, monkeypatch):
    from nsys_cc.sweep import cluster as cluster_mod

    log = tmp_path / "cells.jsonl"
    monkeypatch.setattr(cluster_mod, "profile_cell_task", _recording_cell_task(log, 0.0))
    out = tmp_path / "sw"
    done = CliRunner().invoke(cli, ["sweep", "--target", "T", "--draft", "D", "--batch-size", "1,4", "--input-len",
                                    "8", "-o", str(out), "--scheduler", threads_cluster.scheduler_address,
                                    "--format", "csv"])
    assert done.exit_code == 0, done.output
    assert "2 cells sent to the Dask scheduler" in done.stderr
    workers = set(threads_cluster.scheduler_info["workers"])
    seen = _seen(log)
    assert sorted(name for name, *_ in seen) == ["bs1-in8", "bs4-in8"] and {w for _, w, *_ in seen} <= workers
    table = pd.read_csv(out / "sweep.csv")
    # the stand-in's c: batch size / 100 in prefill, input length / 10000 in decode
    assert sorted(table.loc[table["phase"] == "prefill", "c"]) == pytest.approx([0.01, 0.04])
    assert (table.loc[table["phase"] == "decode", "c"] == 0.0008).all()
    assert (out / "bs4-in8" / "cell.json").is_file()


def _slow_down_sets_named_slow():
    """Run on each worker: the analysis of a set whose name starts with "slow" first sleeps 6 s (time to lose its
    worker mid-task); any other set is analysed as usual."""
    import time as _time

    from nsys_cc.sweep import table as _table

    if getattr(_table, "_slowed_for_test", False):
        return
    original = _table.analyze_set

    def analyze_set(trace_set, *args, **kwargs):
        if trace_set.name.startswith("slow"):
            _time.sleep(6.0)
        return original(trace_set, *args, **kwargs)

    _table.analyze_set = analyze_set
    _table._slowed_for_test = True


def test_a_worker_lost_during_analyze_scheduler_reruns_its_set(cluster, tmp_path):
    import distributed

    rel = os.path.relpath(VLLM_FIXTURES, tmp_path)
    path = tmp_path / "sets.csv"
    path.write_text("name,target,drafts\n"
                    f"slow-xs,{rel}/{TARGET}.sqlite,{rel}/{DRAFT}.sqlite\n"
                    f"s,{rel}/{TARGET}.sqlite,{rel}/tiny-llama-draft-s.sqlite\n")
    killed: dict = {}
    with distributed.Client(cluster.scheduler_address) as client:
        client.run(_slow_down_sets_named_slow)
        pids = client.run(os.getpid)

        def kill_the_worker_analysing_the_slow_set():
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                for worker, keys in client.processing().items():
                    if any("nsys-cc-analyze-slow-xs" in str(k) for k in keys):
                        time.sleep(1.0)  # inside its 6 s
                        os.kill(pids[worker], signal.SIGKILL)
                        killed.update(worker=worker, pid=pids[worker])
                        return
                time.sleep(0.1)

        killer = threading.Thread(target=kill_the_worker_analysing_the_slow_set)
        killer.start()
        try:
            done = CliRunner().invoke(cli, ["analyze", str(path), "--format", "csv", "--scheduler",
                                            cluster.scheduler_address])
        finally:
            killer.join()
    assert killed, "the slow set was never seen running"
    assert done.exit_code == 0, done.output
    table = pd.read_csv(StringIO(done.stdout))
    attempts = table.groupby("cell")["attempts"].first().to_dict()
    assert attempts == {"slow-xs": 2, "s": 1}  # the lost attempt is counted, the other set's is not
    local = analyze_many(read_manifest(path), jobs=1).table
    cols = ["cell", "draft", "phase", "metric", "c", "ci_low", "ci_high"]
    pd.testing.assert_frame_equal(table[cols], local[cols], check_dtype=False, rtol=1e-6)
