"""Round 5's reading cases that crashed or changed numbers: a trace in a folder the user may not search,
GPU ops whose correlation id no launch carries, and a GPU op that starts before the launch call carrying its
correlation id — each through the verbs a user runs, the oracle the raw events.
"""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from decimal import Decimal
from pathlib import Path

import gpu_shaped_kineto as gsk
import pytest

from conftest import FIXTURES, REPO, cli_in_process
from nsys_cc.trace import open_trace
from nsys_cc.trace.cuda import dropped_note

TORCH = FIXTURES / "torch"
DRAFT = TORCH / "tiny-llama-draft-xs.pt.trace.json.gz"
SQLITE = FIXTURES / "vllm" / "tiny-llama-draft-xs.sqlite"
VERBS = (["info"], ["ranges"], ["kernels"], ["analyze"])

# The verbs run once on readable copies (every import they make done), then — as root — as the user nobody: a root
# process searches any folder, so the check needs someone it does not let in.
_UNPRIVILEGED = """
import json, os, sys
from click.testing import CliRunner
from nsys_cc.cli import cli
verbs = json.loads(sys.argv[1])
readable, locked = sys.argv[2:4], sys.argv[4:6]
runner = CliRunner()
for verb in verbs:
    for path in readable:
        runner.invoke(cli, [*verb, path])
if os.geteuid() == 0:
    os.setgroups([])
    os.setgid(65534)
    os.setuid(65534)
for verb in verbs:
    for path in locked:
        r = runner.invoke(cli, [*verb, path])
        print(json.dumps([verb, path, r.exit_code, r.stderr, None if r.exit_code in (0, 2) else repr(r.exception)]))
"""


@pytest.mark.slow
def test_a_trace_in_a_folder_the_user_may_not_search_is_one_line_for_every_verb(tmp_path):
    readable = [tmp_path / DRAFT.name, tmp_path / SQLITE.name]
    for src, dst in zip((DRAFT, SQLITE), readable):
        dst.write_bytes(src.read_bytes())
    locked_dir = tmp_path / "locked"
    locked_dir.mkdir()
    locked = [locked_dir / p.name for p in readable]
    for src, dst in zip(readable, locked):
        dst.write_bytes(src.read_bytes())
    locked_dir.chmod(0)
    try:
        proc = subprocess.run([sys.executable, "-c", _UNPRIVILEGED, json.dumps(VERBS), *map(str, readable),
                               *map(str, locked)], capture_output=True, text=True, timeout=300,
                              env={**os.environ, "PYTHONPATH": str(REPO), "NSYS_CC_QUIET": "1"})
    finally:
        locked_dir.chmod(0o700)
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = [json.loads(ln) for ln in proc.stdout.splitlines() if ln.startswith("[")]
    assert len(results) == len(VERBS) * 2
    for verb, path, status, stderr, exc in results:
        lines = stderr.strip().splitlines()
        assert status == 2 and exc is None and len(lines) == 1, (verb, path, status, stderr, exc)
        assert lines[0].startswith("nsys-cc: error: ") and "Permission denied" in lines[0] and path in lines[0], lines


def _doc(events: list[dict]) -> str:
    return gsk._dumps({"schemaVersion": 1, "traceEvents": events})


def _x(cat: str, name: str, ts: str, dur: str, pid=7, tid=7, **args) -> dict:
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": gsk._Raw(ts), "dur": gsk._Raw(dur),
            **({"args": args} if args else {})}


@pytest.mark.parametrize("case", ["hta-large-integer", "correlation-0", "launch-not-recorded"])
def test_gpu_ops_that_no_launch_carries_stay_on_their_device(tmp_path, case):
    if case == "hta-large-integer":  # HTA's tests/data/large_integer_trace, as published (the field crash)
        events = [{"ph": "X", "cat": "kernel", "name": "ncclKernel_AllReduce", "pid": 0, "tid": 0, "ts": 100,
                   "dur": 50},
                  {"ph": "X", "cat": "cpu_op", "name": "record_param_comms", "pid": 0, "tid": 1, "ts": 200,
                   "dur": 100, "args": {"Comms Id": 10159970886766084423}}]
        want = [(0, 0, 0, 100_000, 50_000)]
    else:
        corr = 0 if case == "correlation-0" else 5
        events = [_x("user_annotation", "step", "1.000", "50.000"),
                  _x("cuda_runtime", "cudaLaunchKernel", "2.000", "1.000", correlation=0 if corr == 0 else 4),
                  _x("kernel", "k", "10.000", "2.000", pid=3, tid=9, device=3, stream=9, correlation=corr)]
        want = [(3, 3, 9, 10_000, 2_000)]
    path = tmp_path / f"{case}.pt.trace.json"
    path.write_text(_doc(events) if case != "hta-large-integer" else json.dumps({"schemaVersion": 1,
                                                                                 "traceEvents": events}))
    with open_trace(path) as trace:
        k = trace.kernels()
        got = list(zip(k["pid"], k["device_id"], k["stream_id"], k["start_ns"], k["duration_ns"]))
    assert got == want  # the device's own pseudo-process (no launch to take one from), times as written
    for verb in ("info", "ranges", "kernels", "analyze"):
        result = cli_in_process(verb, str(path))
        assert result.returncode in (0, 2) and "Traceback" not in result.stderr, (verb, result.stderr)
        assert result.returncode == 0 or result.stderr.startswith("nsys-cc: error: "), (verb, result.stderr)


def _early_kernel(src: Path, dst: Path, lead_ns: int) -> int:
    """`src` (a GPU-shaped torch trace) with its first kernel moved to start `lead_ns` before its launch call; the
    kernel's start as it was (ns)."""
    doc = json.loads(gzip.decompress(src.read_bytes()) if src.suffix == ".gz" else src.read_bytes(),
                     parse_float=gsk._Raw)
    events = doc["traceEvents"]
    launches = {e["args"]["correlation"]: e for e in events if e.get("cat") == "cuda_runtime"}
    kernel = next(e for e in events if e.get("cat") == "kernel")
    launch = launches[kernel["args"]["correlation"]]
    was = int(Decimal(kernel["ts"]) * 1000)
    kernel["ts"] = gsk._Raw(gsk.us(int(Decimal(launch["ts"]) * 1000) - lead_ns))
    dst.write_text(gsk._dumps(doc))
    return was


@pytest.mark.slow
def test_a_gpu_op_that_starts_before_its_launch_is_left_out_and_said(tmp_path, gpu_shaped):
    damaged = tmp_path / "early.pt.trace.json"
    was = _early_kernel(gpu_shaped.path, damaged, 20_000)
    with open_trace(gpu_shaped.path) as trace:
        whole = trace.kernels()
    with open_trace(damaged) as trace:
        kept = trace.kernels()
        note = dropped_note(trace)
        ops = trace.gpu_ops()
    # the moved kernel is gone from every table, the others are as written
    starts = whole["start_ns"].tolist()
    starts.remove(was)
    assert sorted(kept["start_ns"]) == sorted(starts) and len(ops) == len(kept) + int((ops["kind"] != "kernel").sum())
    assert "dropped 1 GPU op(s) that start before the launch call carrying their correlation id" in note
    assert "20.000 µs before its 'cudaLaunchKernel'" in note and "the trace is damaged" in note
    for verb in ("ranges", "analyze"):  # said where the numbers are
        result = cli_in_process(verb, str(damaged))
        said = result.stdout + result.stderr  # ranges: a note on stderr (its csv/json stay data); analyze: its notes
        assert result.returncode == 0 and "start before the launch call" in said, (verb, said)


def test_a_gpu_op_that_starts_after_its_launch_is_kept(tmp_path, gpu_shaped):
    # the same move to 1 ns after its launch call starts (before the call returns, as real kernels do)
    later = tmp_path / "later.pt.trace.json"
    _early_kernel(gpu_shaped.path, later, -1)
    with open_trace(later) as trace, open_trace(gpu_shaped.path) as whole:
        assert len(trace.kernels()) == len(whole.kernels()) and dropped_note(trace) == ""


@pytest.fixture
def gpu_shaped(tmp_path):
    """A GPU-shaped copy of the draft's torch trace (tests/gpu_shaped_kineto.py): steps launch kernels on a stream."""
    return gsk.add_gpu_work(DRAFT, tmp_path / "gpu.pt.trace.json", gsk.vllm_plan(), frames=gsk.vllm_frame)
