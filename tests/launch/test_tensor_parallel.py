"""`nsys-cc profile --target-tp N / --draft-tp N`: the commands, and one real CPU run on 2 ranks end to end.

The end-to-end expectations are computed here from the export with raw SQL and from the benchmark's own JSON.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from conftest import REPO, room_module
from nsys_cc.cli import cli
from nsys_cc.formats import status_json

NSYS_CC = str(Path(sys.executable).parent / "nsys-cc")


def _blocks(args: list[str]) -> dict[str, str]:
    res = CliRunner().invoke(cli, ["profile", "--target", "tiny-llama-target", "--draft", "tiny-llama-draft-s",
                                   "--dry-run", "-o", "/tmp/nsys-cc-tp-dry", *args])
    assert res.exit_code == 0, res.output
    blocks = res.output.strip().split("\n\n")
    return {b.splitlines()[0].split()[2]: b for b in blocks}


def test_target_tp_on_cpu_runs_the_mp_executor_under_fork_tracing():
    blocks = _blocks(["--target-tp", "2", "--device", "cpu"])
    assert set(blocks) == {"tiny-llama-target.tp2", "tiny-llama-draft-s"}
    target, draft = blocks["tiny-llama-target.tp2"], blocks["tiny-llama-draft-s"]
    assert "--tensor-parallel-size 2 --distributed-executor-backend mp" in target
    assert "--trace-fork-before-exec=true" in target
    assert "VLLM_ENABLE_V1_MULTIPROCESSING" not in target
    assert "-o /tmp/nsys-cc-tp-dry/tiny-llama-target.tp2 " in target
    assert "tiny-llama-target.tp2.sqlite" in target
    # The draft keeps the one-process settings.
    assert "--tensor-parallel-size" not in draft and "--trace-fork-before-exec" not in draft
    assert "VLLM_ENABLE_V1_MULTIPROCESSING=0" in draft


def test_draft_tp_on_gpu_uses_the_same_flags():
    blocks = _blocks(["--draft-tp", "4", "--device", "gpu"])
    draft = blocks["tiny-llama-draft-s.tp4"]
    assert "--tensor-parallel-size 4 --distributed-executor-backend mp" in draft
    assert draft.count("--trace-fork-before-exec=true") == 1
    assert "--tensor-parallel-size" not in blocks["tiny-llama-target"]


@pytest.mark.parametrize("flag", ["--target-tp", "--draft-tp"])
def test_tp_below_one_is_one_line_error(flag):
    res = CliRunner().invoke(cli, ["profile", "--target", "tiny-llama-target", "--draft", "tiny-llama-draft-s",
                                   flag, "0", "--dry-run", "--device", "cpu"])
    assert res.exit_code == 2
    assert res.output.strip().splitlines()[-1].startswith("nsys-cc: error:") and flag in res.output


INPUT_LEN, OUTPUT_LEN, WARMUP, ITERS = 32, 2, 1, 2


def _forwards(sqlite: Path) -> dict[int, list[tuple[int, int]]]:
    """(start, end) of the model_executable() ranges per process id, in time order."""
    with sqlite3.connect(f"file:{sqlite}?mode=ro", uri=True) as conn:
        rows = conn.execute(
            "SELECT (e.globalTid >> 24) & 16777215, e.start, e.\"end\" FROM NVTX_EVENTS e "
            "JOIN StringIds s ON s.id = e.textId WHERE s.value = 'model_executable()' ORDER BY e.start").fetchall()
    out: dict[int, list] = {}
    for pid, start, end in rows:
        out.setdefault(pid, []).append((start, end))
    return out


def _windows(sqlite: Path, name: str) -> list[tuple[int, int]]:
    with sqlite3.connect(f"file:{sqlite}?mode=ro", uri=True) as conn:
        return conn.execute("SELECT e.start, e.\"end\" FROM NVTX_EVENTS e JOIN StringIds s ON s.id = e.textId "
                            "WHERE s.value = ? ORDER BY e.start", (name,)).fetchall()


@pytest.mark.vllm
def test_profile_target_on_two_ranks_end_to_end(tmp_path):
    out = tmp_path / "out"
    cmd = [NSYS_CC, "profile", "--target", "tiny-llama-target", "--target-tp", "2", "--draft", "tiny-llama-draft-xs",
           "--input-len", str(INPUT_LEN), "--output-len", str(OUTPUT_LEN), "--batch-size", "1",
           "--num-iters-warmup", str(WARMUP), "--num-iters", str(ITERS), "--nsys-trace", "nvtx", "--device", "cpu",
           "-o", str(out), "--format", "json"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0, done.stderr[-3000:]
    sqlite = out / "tiny-llama-target.tp2.sqlite"
    # vLLM's workers were let exit on their own (killed ones lose their last ranges to nsys: SHUTDOWN_ENV)
    log = (out / "tiny-llama-target.tp2.log").read_text()
    assert "all workers exited gracefully" in log and "force killing" not in log
    per_pid = _forwards(sqlite)
    assert len(per_pid) == 2, per_pid.keys()
    a, b = per_pid.values()
    assert len(a) == len(b) >= (WARMUP + ITERS) * OUTPUT_LEN
    steps = [(min(x[0], y[0]), max(x[1], y[1])) for x, y in zip(a, b)]
    warm = _windows(sqlite, "nsys_cc:warmup")
    # A step still open when the capture ended (vLLM stopped its workers before nsys wrote their last events) has the
    # trace's end as its end and is dropped.
    with sqlite3.connect(f"file:{sqlite}?mode=ro", uri=True) as conn:
        ((trace_end,),) = conn.execute("SELECT duration FROM ANALYSIS_DETAILS").fetchall()
    closed = [e != trace_end for (_, e) in steps]
    kept = [(s, e) for (s, e), c in zip(steps, closed) if c and not any(ws <= s <= we for ws, we in warm)]

    doc = json.loads(done.stdout)
    target, draft = doc["models"]
    assert target["name"] == "tiny-llama-target.tp2" and (target["ranks"], draft["ranks"]) == (2, 1)
    assert target["ranges_matched"] == len(steps) and target["ranges_kept"] == len(kept)
    assert target["phases"]["all"]["wall_ms"]["median"] == pytest.approx(
        np.median([(e - s) / 1e6 for s, e in kept]), abs=1e-6)
    per_rank = [r for r in target["per_rank"] if r["phase"] == "all"]
    assert sorted(r["pid"] for r in per_rank) == sorted(per_pid)
    # The CPU all-reduce is visible: the plugin's ranges inside the forwards, time on every rank.
    assert len(_windows(sqlite, "nsys_cc:all_reduce")) >= 2 * len(steps)
    assert all(r["allreduce_ms"] > 0 and 0 < r["allreduce_share"] < 1 for r in per_rank)

    # The forward share counts each step once: below 1 on both ranks together.
    report = json.loads((out / "report.json").read_text())
    share = next(r for r in report["forward_share"] if r["model"] == "tiny-llama-target.tp2")
    latencies = json.loads((out / "tiny-llama-target.tp2.bench.json").read_text())["latencies"]
    iters = _windows(sqlite, "nsys_cc:iteration")
    closed_steps = [st for st, c in zip(steps, closed) if c]
    shares = [sum(e - s for s, e in closed_steps if a0 <= s <= a1) / 1e9 / lat
              for (a0, a1), lat in zip(iters, latencies)]
    assert share["forward_share"] == pytest.approx(np.median(shares), abs=1e-3)
    assert 0 < min(shares) and max(shares) < 1


# ---- the plugin's CPU all-reduce range, on a fake of vLLM's CpuCommunicator (no vLLM needed) ----


def _fakes():
    import torch  # here, not at collection: every test worker would pay its import

    class CpuCommunicator:
        def all_reduce(self, input_):
            return input_ * 2

    class GPUModelRunner:
        def execute_model(self, scheduler_output):
            return self._model_forward(positions=torch.zeros(3))

        def _model_forward(self, positions=None):
            return self.comm.all_reduce(torch.ones(4, dtype=torch.float16))

    return CpuCommunicator, GPUModelRunner


@pytest.mark.slow
def test_all_reduce_inside_a_forward_gets_its_range_with_bytes(events):
    from types import SimpleNamespace

    import torch

    from nsys_cc.vllm import plugin
    from nsys_cc.vllm.hooks import forwards

    comm_cls, runner_cls = _fakes()
    assert plugin._patch_cpu_communicator(SimpleNamespace(CpuCommunicator=comm_cls))
    assert plugin._patch_v1_runner(SimpleNamespace(GPUModelRunner=runner_cls))
    runner = runner_cls()
    runner.comm = comm_cls()
    out = runner.execute_model(SimpleNamespace(total_num_scheduled_tokens=3))
    assert out.tolist() == [2.0] * 4
    assert events == [(plugin.FORWARD_RANGE, 3), (forwards.ALL_REDUCE_RANGE, 8), "pop", "pop"]
    # Outside a forward (vLLM's start-up and warm-up collectives) no range is written.
    events.clear()
    comm_cls().all_reduce(torch.ones(2))
    assert events == []


@pytest.mark.slow
def test_a_vllm_without_cpu_communicator_keeps_the_forwards(events, monkeypatch):
    """A vLLM whose communicator module has no `CpuCommunicator` loses the all-reduce ranges only: no warning, no
    fall-back to vLLM's own scopes, and the forwards are still recorded (their all-reduces unmarked)."""
    from types import SimpleNamespace

    import torch

    from nsys_cc.vllm import plugin

    monkeypatch.setattr(plugin, "_warned", False)
    monkeypatch.delenv("VLLM_NVTX_SCOPES_FOR_PROFILING", raising=False)
    comm_cls, runner_cls = _fakes()
    plugin._apply("vllm.distributed.device_communicators.cpu_communicator", SimpleNamespace())
    plugin._apply("vllm.v1.worker.gpu_model_runner", SimpleNamespace(GPUModelRunner=runner_cls))
    assert not plugin._warned and "VLLM_NVTX_SCOPES_FOR_PROFILING" not in os.environ
    runner = runner_cls()
    runner.comm = comm_cls()  # never patched: this vLLM's communicator is laid out otherwise
    for tokens in (3, 1):
        out = runner.execute_model(SimpleNamespace(total_num_scheduled_tokens=tokens))
        assert out.tolist() == [2.0] * 4
    assert events == [(plugin.FORWARD_RANGE, 3), "pop", (plugin.FORWARD_RANGE, 1), "pop"]
    comm_cls().all_reduce(torch.ones(2))
    assert events[-1] == "pop" and len(events) == 4


# ---- --speculate with --target-tp: refused (the speculative runs are measured against a one-process plain target) ----


def test_speculate_with_a_target_on_several_ranks_is_refused_before_anything_runs(tmp_path):
    """Speculative runs keep the target on one process, and the in-place analysis compares them with the plain target's
    one-process decode steps: with --target-tp 2 the plain target's steps span two ranks and there is nothing to
    compare them with. `profile` refuses up front (nothing planned, nothing written) and says what to do instead."""
    out = tmp_path / "out"
    res = CliRunner().invoke(cli, ["profile", "--target", "tiny-llama-target", "--draft", "tiny-llama-draft-xs",
                                   "--speculate", "1,3", "--target-tp", "2", "--device", "cpu", "-o", str(out)])
    assert res.exit_code == 2
    assert res.stderr.strip() == (
        "nsys-cc: error: --speculate with --target-tp 2: speculative runs are measured against the plain target on one "
        "process; profile them with --target-tp 1 and the target's ranks in a profile without --speculate")
    assert not out.exists()
    dry = CliRunner().invoke(cli, ["profile", "--target", "tiny-llama-target", "--draft", "tiny-llama-draft-xs",
                                   "--speculate", "1", "--target-tp", "2", "--device", "cpu", "--dry-run"])
    assert dry.exit_code == 2 and "--speculate with --target-tp 2" in dry.stderr
    # --target-tp 1 is one process: allowed
    one = CliRunner().invoke(cli, ["profile", "--target", "tiny-llama-target", "--draft", "tiny-llama-draft-xs",
                                   "--speculate", "1", "--target-tp", "1", "--device", "cpu", "--dry-run"])
    assert one.exit_code == 0, one.output


def test_a_sweep_speculating_over_target_ranks_is_refused_before_any_cell(tmp_path):
    out = tmp_path / "sw"
    res = CliRunner().invoke(cli, ["sweep", "--target", "tiny-llama-target", "--draft", "tiny-llama-draft-xs",
                                   "--speculate", "2", "--target-tp", "1,2", "--device", "cpu", "-o", str(out)])
    assert res.exit_code == 2
    assert res.stderr.strip() == (
        "nsys-cc: error: --speculate with --target-tp 2: speculative runs are measured against the plain target on "
        "one process; sweep them with --target-tp 1 and the target's ranks in a sweep without --speculate")
    assert not any(out.glob("bs*"))  # no cell was started


def test_the_analysis_refuses_speculative_runs_against_a_target_on_several_ranks():
    spec = REPO / "fixtures" / "spec"
    target = REPO / "fixtures" / "tp" / "tiny-llama-target.tp2.sqlite"
    res = CliRunner().invoke(cli, ["analyze", str(target), str(spec / "tiny-llama-draft-xs.sqlite"),
                                   str(spec / "tiny-llama-draft-xs.spec-g1.sqlite")])
    assert res.exit_code == 2
    assert res.stderr.strip() == (
        "nsys-cc: error: tiny-llama-target.tp2 runs on 2 tensor-parallel ranks: speculative runs are measured in place "
        "against a plain target on one process (give one, or leave the speculative traces out)")


@pytest.mark.vllm
def test_a_sweep_hands_target_tp_to_a_real_profile(tmp_path, nsys_bin):
    """`sweep --target-tp 2`: the cell's real `profile` runs the target on two ranks (its forwards in two processes of
    the trace), and the sweep table's rows carry target_tp 2 with the c of those steps, recomputed from the exports."""
    raw_steps = room_module("analysis/forwards/test_ranks.py").raw_steps

    out = tmp_path / "sw"
    cmd = [NSYS_CC, "sweep", "--target", "tiny-llama-target", "--draft", "tiny-llama-draft-xs", "--target-tp", "2",
           "--batch-size", "1", "--input-len", str(INPUT_LEN), "--output-len", str(OUTPUT_LEN), "--num-iters-warmup",
           str(WARMUP), "--num-iters", str(ITERS), "--nsys-trace", "nvtx", "--device", "cpu", "-o", str(out),
           "--format", "csv"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    assert done.returncode == 0, done.stderr[-3000:]
    cell = out / f"bs1-in{INPUT_LEN}-tp2"
    sqlite = cell / "tiny-llama-target.tp2.sqlite"
    assert len(_forwards(sqlite)) == 2  # two ranks
    status = {s["label"]: s["status"] for s in status_json.models_of(json.loads((cell / "status.json").read_text()))}
    assert status == {"tiny-llama-target.tp2": "done", "tiny-llama-draft-xs": "done"}
    table = pd.read_csv(out / "sweep.csv")
    assert (table["target_tp"] == 2).all() and (table["cell"] == cell.name).all()
    steps = [s["wall_ms"] for s in raw_steps(sqlite)["steps"] if s["kept"] and s["phase"] == "decode"]
    with sqlite3.connect(f"file:{cell / 'tiny-llama-draft-xs.sqlite'}?mode=ro", uri=True) as conn:
        draft = [r[0] / 1e6 for r in conn.execute(
            "SELECT e.\"end\" - e.start FROM NVTX_EVENTS e JOIN StringIds s ON s.id = e.textId "
            "WHERE s.value = 'model_executable()' AND e.int64Value = 1 AND NOT EXISTS (SELECT 1 FROM NVTX_EVENTS w "
            "JOIN StringIds ws ON ws.id = w.textId WHERE ws.value = 'nsys_cc:warmup' AND e.start BETWEEN w.start "
            "AND w.\"end\")")]
    (c,) = table.loc[(table["phase"] == "decode") & (table["metric"] == "wall"), "c"]
    assert c == pytest.approx(np.median(draft) / np.median(steps), rel=1e-5)
