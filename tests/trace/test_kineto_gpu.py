"""GPU figures of PyTorch-profiler (Kineto) traces: the projection of `user_annotation` ranges onto the GPU
is the nsys rule applied to the Kineto reader's frames, and it agrees with the field.

- On GPU-shaped traces (tests/gpu_shaped_kineto.py: real CPU torch fixtures with GPU work added, never GPU traces)
  every range's span, kernel sum, busy union, counts and launch time equal the figures the helper computed while
  writing the work, including a cudaGraphLaunch whose correlation id its kernels share, kernels that run past their
  range, work launched from another thread (in no range of this thread), and Kineto's own approximate
  `gpu_user_annotation` (not used).
- On those and on the public B200 trace of a vLLM prefill step, the projection equals an independent one computed in
  plain Python from the raw JSON (json.load; launches inside the range on its thread, GPU events by correlation id).
- The kernel breakdown of the B200 trace equals HTA's `get_gpu_kernel_breakdown` (ns rounding off, every kernel
  kept); its step range holds every GPU op, so the step's GPU total equals HTA's total.
- Per range name, count and CPU total equal torch's own `key_averages()` table: the one vLLM wrote beside its trace
  (fixtures/torch/*.key_averages.txt) and one made here by profiling a small CPU workload. On a CPU trace these are
  what both measure (the GPU columns need a GPU); the GPU totals are checked against HTA above.
"""

from __future__ import annotations

import gzip
import json
import re
from collections import defaultdict
from decimal import Decimal
from pathlib import Path

import gpu_shaped_kineto as gsk
import numpy as np
import pandas as pd
import pytest
from test_kineto import DRAFT, SPEC, TARGET, public_b200

from conftest import FIXTURES, union_length
from nsys_cc.analysis.forwards.launches import unlaunched_ops
from nsys_cc.analysis.forwards.projection import op_totals, project, range_ops
from nsys_cc.trace import open_trace

GPU_COLUMNS = ["proj_start_ns", "proj_end_ns", "proj_duration_ns", "gpu_ops", "kernels", "kernel_sum_ns",
               "gpu_busy_ns", "launch_api_ns", "api_calls"]


@pytest.fixture(scope="module")
def mixed(tmp_path_factory) -> gsk.GpuShapedKineto:
    return gsk.add_gpu_work(TARGET, tmp_path_factory.mktemp("mixed") / "mixed.pt.trace.json.gz",
                            gsk.mixed(other_thread=4242))


def figures(rows: pd.DataFrame) -> list[dict]:
    return [{c: (None if pd.isna(r[c]) else int(r[c])) for c in GPU_COLUMNS} for _, r in rows.iterrows()]


def expected(w: gsk.Work) -> dict:
    ops = bool(w.ops)
    return {"proj_start_ns": min(o[0] for o in w.ops) if ops else None, "proj_end_ns": w.gpu_end,
            "proj_duration_ns": w.span_ns, "gpu_ops": w.launches if ops else None,
            "kernels": w.kernels if ops else None, "kernel_sum_ns": w.kernel_sum_ns, "gpu_busy_ns": w.busy_ns,
            "launch_api_ns": w.api_ns if ops else None, "api_calls": w.api_calls}


# -- the known GPU work -----------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_projection_equals_the_known_gpu_work(mixed):
    with open_trace(mixed.path) as trace:
        proj = project(trace)
    by_id = proj.set_index("range_id")
    assert len(mixed.work) == len(proj) >= 6
    for w in mixed.work:
        assert figures(by_id.loc[[w.range.index]].reset_index()) == [expected(w)], w.range
    steps = mixed.of(gsk.STEP)
    assert steps and all(w.ops for w in steps)
    prefill = [w for w in mixed.work if not w.ops]
    assert prefill and by_id.loc[[w.range.index for w in prefill], "gpu_ops"].isna().all()


@pytest.mark.slow
def test_a_cuda_graph_counts_once_and_its_kernels_each(mixed):
    with open_trace(mixed.path) as trace:
        kernels = trace.kernels()
        proj = project(trace).set_index("range_id")
    graph = kernels[kernels["graph_node_id"].notna()]
    per_launch = graph.groupby("correlation_id")["graph_node_id"].apply(list)
    assert len(per_launch) == len(mixed.of(gsk.STEP)) and all(v == [1, 2, 3] for v in per_launch)
    for w in mixed.of(gsk.STEP):
        # 7 calls: 5 launching ones of its thread (a graph of 3 kernels and a copy among them), a call that launches
        # nothing, and one from another thread; kernels: 2 runtime + 1 driver + 3 of the graph = 6
        assert (proj.loc[w.range.index, "gpu_ops"], proj.loc[w.range.index, "kernels"]) == (5, 6)
        assert proj.loc[w.range.index, "api_calls"] == 6


@pytest.mark.slow
def test_work_from_another_thread_and_past_the_range_end(mixed):
    with open_trace(mixed.path) as trace:
        proj = project(trace).set_index("range_id")
        assert unlaunched_ops(trace) == (0, len(trace.gpu_ops()))  # every op has its launching call
    own = {(o[0], o[1]) for w in mixed.work for o in w.ops}
    elsewhere = [o for o in mixed.all_ops if (o[0], o[1]) not in own]
    assert len(elsewhere) == len(mixed.of(gsk.STEP))  # one kernel per step launched from another thread
    for w in mixed.of(gsk.STEP):
        assert proj.loc[w.range.index, "proj_end_ns"] > w.range.end  # the graph's last kernel runs past the step
    assert sum(int(proj.loc[w.range.index, "kernels"]) for w in mixed.work if w.ops) + len(elsewhere) == \
        sum(o[2] == "kernel" for o in mixed.all_ops)


@pytest.mark.slow
def test_kinetos_own_gpu_user_annotation_is_not_the_projection(mixed):
    events = json.loads(gzip.decompress(mixed.path.read_bytes()))["traceEvents"]
    theirs = {e["name"]: [] for e in events if e.get("cat") == "gpu_user_annotation"}
    for e in events:
        if e.get("cat") == "gpu_user_annotation":
            theirs[e["name"]].append(round(Decimal(str(e["ts"])) * 1000))
    with open_trace(mixed.path) as trace:
        proj = project(trace)
    ours = proj.loc[proj["name"] == gsk.STEP, "proj_start_ns"].astype("int64").tolist()
    assert len(ours) == len(theirs[gsk.STEP]) and all(a != b for a, b in zip(ours, theirs[gsk.STEP]))


@pytest.mark.parametrize("kind", ["kernel", "driver"])
def test_steady_work_of_runtime_and_driver_launches(kind, tmp_path):
    shaped = gsk.add_gpu_work(DRAFT, tmp_path / "draft.json", gsk.steady(gpu_factor=1.3, kind=kind), gzipped=False)
    with open_trace(shaped.path) as trace:
        proj = project(trace).set_index("range_id")
        assert set(trace.cuda_api()["api"].astype(str)) == {"runtime" if kind == "kernel" else "driver"}
    for w in shaped.work:
        assert figures(proj.loc[[w.range.index]].reset_index()) == [expected(w)]
        if w.ops:
            assert w.gpu_end > w.range.end  # 1.3 × the wall time: the GPU runs on after the step


@pytest.mark.slow
def test_kernel_totals_per_name_equal_the_known_work(mixed):
    with open_trace(mixed.path) as trace:
        ranges = trace.nvtx_ranges(names=[gsk.STEP])
        totals = op_totals(trace, ranges, ["step"] * len(ranges))
        rows = range_ops(trace, ranges)
    want: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0])
    for w in mixed.of(gsk.STEP):
        for start, end, kind, name in w.ops:
            want[(kind, name)][0] += 1
            want[(kind, name)][1] += end - start
    got = {(str(k), str(n)): [int(c), int(d)] for k, n, c, d in
           zip(totals["kind"], totals["name"], totals["count"], totals["duration_ns"])}
    assert got == dict(want)
    assert len(rows) == sum(len(w.ops) for w in mixed.of(gsk.STEP))


# -- an independent projection from the raw JSON ----------------------------------------------------------------------
def raw_projection(path: Path) -> list[dict]:
    """Every user_annotation's projection, by the rule in plain Python over json.load's events (µs → ns by
    Decimal): the CUDA calls that lie inside the range on its thread, the GPU events that carry their correlation
    ids."""
    opener = gzip.open if path.read_bytes()[:2] == b"\x1f\x8b" else open
    with opener(path, "rt") as fh:
        events = json.load(fh, parse_float=Decimal)["traceEvents"]

    def span(e):
        s = int(e["ts"] * 1000)
        return s, s + int(e["dur"] * 1000)

    calls = [e for e in events if e.get("ph") == "X" and e.get("cat") in ("cuda_runtime", "cuda_driver")]
    gpu: dict[int, list[tuple[int, int, str]]] = defaultdict(list)
    for e in events:
        if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset"):
            gpu[e["args"]["correlation"]].append((*span(e), e["cat"]))
    out = []
    for r in (e for e in events if e.get("ph") == "X" and e.get("cat") == "user_annotation"):
        rs, re_ = span(r)
        inside = [c for c in calls if (c["pid"], c["tid"]) == (r["pid"], r["tid"])
                  and rs <= span(c)[0] and span(c)[1] <= re_]
        launched = [c for c in inside if gpu.get(c["args"].get("correlation", 0))]
        ops = [o for c in launched for o in gpu[c["args"]["correlation"]]]
        kernels = [o for o in ops if o[2] == "kernel"]
        out.append({"proj_start_ns": min(o[0] for o in ops) if ops else None,
                    "proj_end_ns": max(o[1] for o in ops) if ops else None,
                    "proj_duration_ns": max(o[1] for o in ops) - min(o[0] for o in ops) if ops else None,
                    "gpu_ops": len(launched) if ops else None, "kernels": len(kernels) if ops else None,
                    "kernel_sum_ns": sum(o[1] - o[0] for o in kernels) if ops else None,
                    "gpu_busy_ns": union_length([(o[0], o[1]) for o in ops]) if ops else None,
                    "launch_api_ns": sum(span(c)[1] - span(c)[0] for c in launched) if ops else None,
                    "api_calls": len(inside)})
    return out


@pytest.mark.slow
@pytest.mark.parametrize("which", ["gpu-shaped", "public-b200"])
def test_projection_equals_a_plain_python_one_from_the_raw_json(which, mixed):
    path = mixed.path if which == "gpu-shaped" else public_b200()
    with open_trace(path) as trace:
        got = figures(project(trace))
    assert got == raw_projection(path)
    assert any(r["gpu_ops"] for r in got)


# -- the field: HTA and torch's key_averages --------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.filterwarnings("ignore")  # HTA's own pandas deprecation warnings
def test_b200_kernel_breakdown_equals_htas(tmp_path, monkeypatch):
    src = public_b200()
    folder = tmp_path / "hta"
    folder.mkdir()
    (folder / src.name).write_bytes(src.read_bytes())
    monkeypatch.setenv("HTA_DISABLE_NS_ROUNDING", "1")  # HTA rounds ns traces to whole µs unless told not to
    from hta.trace_analysis import TraceAnalysis

    analysis = TraceAnalysis(trace_dir=str(folder))
    _types, table = analysis.get_gpu_kernel_breakdown(visualize=False, duration_ratio=1.0, num_kernels=10**9,
                                                      include_memory_kernels=True)
    hta = {r["name"]: r for r in table.to_dict("records")}
    with open_trace(src) as trace:
        kernels, memops = trace.kernels(), trace.memops()
        step = trace.nvtx_ranges(names=["execute_context_1(888_788544)_generation_0(0)"])
        proj = project(trace, step)
        totals = op_totals(trace, step, ["step"])
    ours = kernels.groupby(kernels["name"].astype(str))["duration_ns"].agg(["sum", "count", "min", "max"])
    computing = {n: r for n, r in hta.items() if r["kernel_type"] != "MEMORY"}
    assert set(computing) == set(ours.index)
    # HTA takes every event with a stream for a GPU kernel (`stream != -1`): on this trace that includes one cpu_op,
    # Triton's launcher, whose args record the stream it launches on; its CPU time is in HTA's row of the kernel of
    # the same name. Read from the raw JSON, it is taken out of HTA's figures before they are compared.
    with gzip.open(src, "rt") as fh:
        events = json.load(fh, parse_float=Decimal)["traceEvents"]
    cpu = defaultdict(list)
    for e in events:
        if e.get("cat") not in ("kernel", "gpu_memcpy", "gpu_memset") and "stream" in (e.get("args") or {}):
            cpu[e["name"]].append(float(e["dur"]))
    assert sum(len(v) for v in cpu.values()) == 1 and set(cpu) <= set(computing)
    for name, r in computing.items():
        count = r["sum (us)"] / r["mean (us)"] - len(cpu[name])
        assert r["sum (us)"] - sum(cpu[name]) == pytest.approx(ours.loc[name, "sum"] / 1000, rel=1e-12, abs=1e-9)
        assert count == pytest.approx(ours.loc[name, "count"])
        if not cpu[name]:
            assert (r["min (us)"], r["max (us)"]) == pytest.approx((ours.loc[name, "min"] / 1000,
                                                                      ours.loc[name, "max"] / 1000))
    memory = sum(r["sum (us)"] for r in hta.values() if r["kernel_type"] == "MEMORY")
    assert memory == pytest.approx(memops["duration_ns"].sum() / 1000, rel=1e-12)
    # the step holds every GPU op: its GPU totals are HTA's totals
    assert int(proj["kernels"].iloc[0]) == len(kernels)
    hta_kernels = sum(r["sum (us)"] for r in computing.values()) - sum(map(sum, cpu.values()))
    assert int(proj["kernel_sum_ns"].iloc[0]) / 1000 == pytest.approx(hta_kernels, rel=1e-12)
    assert int(totals["duration_ns"].sum()) / 1000 == pytest.approx(hta_kernels + memory, rel=1e-12)


_UNITS = {"s": 1e6, "ms": 1e3, "us": 1.0}


def key_averages_table(path: Path) -> dict[str, tuple[float, float, int]]:
    """Rows of torch's printed key_averages table: name → (CPU total in µs, half its last printed digit, calls)."""
    rows = {}
    for line in path.read_text().splitlines():
        cells = re.split(r"\s{2,}", line.strip())
        if len(cells) == 7 and cells[-1].isdigit():
            value, unit = re.fullmatch(r"([\d.]+)(s|ms|us)", cells[4]).groups()
            rows[cells[0]] = (float(value) * _UNITS[unit], 0.5e-3 * _UNITS[unit], int(cells[-1]))
    return rows


@pytest.mark.parametrize("trace", [DRAFT, SPEC], ids=["draft", "spec"])
def test_range_totals_equal_the_key_averages_vllm_wrote(trace):
    table = key_averages_table(FIXTURES / "torch" / trace.name.replace(".pt.trace.json.gz", ".key_averages.txt"))
    with open_trace(trace) as t:
        ranges = t.nvtx_ranges()
    sums = ranges.groupby(ranges["name"].astype(str))["duration_ns"].agg(["sum", "count"])
    compared = [n for n in sums.index if n in table]
    assert compared  # the steps vLLM's table lists (it prints its top rows only)
    for name in compared:
        total_us, half_digit, calls = table[name]
        assert int(sums.loc[name, "count"]) == calls, name
        assert abs(sums.loc[name, "sum"] / 1000 - total_us) <= half_digit + 1e-9, name


@pytest.mark.slow
def test_range_totals_equal_key_averages_of_a_profiled_workload(tmp_path):
    import torch
    from torch.profiler import ProfilerActivity, profile, record_function

    x = torch.randn(48, 48)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(4):
            with record_function("step"):
                for _ in range(3):
                    with record_function("forward"):
                        torch.relu(x @ x)
    path = tmp_path / "workload.pt.trace.json"
    prof.export_chrome_trace(str(path))
    torch_view = {e.key: (e.count, e.cpu_time_total) for e in prof.key_averages() if e.key in ("step", "forward")}
    with open_trace(path) as trace:
        ranges = trace.nvtx_ranges()
    ours = ranges.groupby(ranges["name"].astype(str))["duration_ns"].agg(["count", "sum"])
    assert set(torch_view) == {"step", "forward"}
    for name, (count, total_us) in torch_view.items():
        assert int(ours.loc[name, "count"]) == count
        assert ours.loc[name, "sum"] / 1000 == pytest.approx(total_us, rel=1e-12, abs=1e-6)
    nested = ranges[ranges["name"] == "forward"]
    steps = set(ranges.loc[ranges["name"] == "step", "range_id"])
    assert set(nested["parent_id"].astype("int64")) <= steps and (nested["level"] == 1).all()
    assert np.all(nested["duration_ns"].to_numpy() > 0)
