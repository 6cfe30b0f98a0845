"""GPU-true measurement on GPU-shaped traces: real CPU traces with asynchronous GPU work added by
`gpu_shaped`, each forward's GPU work known exactly. They are not GPU traces; they check what a GPU trace would give.

- the projection finds exactly the GPU work each forward launched, also when it runs past the range's end;
- c on the GPU metrics is the ratio of the known medians;
- forwards outside every benchmark iteration (vLLM's own warm-up) are dropped, with a note;
- lost CUDA data is said loudly, naming the range;
- graphs recorded whole give no kernel metrics rather than 0.
"""

from __future__ import annotations

import json
import sqlite3

import numpy as np
import pytest
from click.testing import CliRunner
from gpu_shaped import DRAFT, FORWARD, Launch, add_gpu_work, read_ranges, steady

from conftest import FIXTURES, raw_sql, unchanged
from nsys_cc.analysis.coefficient.measure import cost_coefficient
from nsys_cc.analysis.coefficient.model import load_model
from nsys_cc.analysis.forwards.projection import project
from nsys_cc.cli import cli
from nsys_cc.trace import open_trace

SPEC = FIXTURES / "spec" / "tiny-llama-draft-xs.spec-g3.sqlite"
TARGET = FIXTURES / "spec" / "tiny-llama-target.sqlite"
DRAFT_PLAIN = FIXTURES / "spec" / "tiny-llama-draft-xs.sqlite"


def _projected(path, names=(FORWARD, DRAFT)):
    with open_trace(str(path)) as trace:
        ranges = trace.nvtx_ranges()
        ranges = ranges[ranges["name"].astype(str).isin(names)].sort_values("start_ns")
        return project(trace, ranges)


def _known(work, attr):
    return np.array([np.nan if getattr(w, attr) is None else getattr(w, attr) for w in work], dtype=float)


@pytest.mark.parametrize("graph", [None, "node"])
def test_projection_finds_each_forwards_asynchronous_gpu_work(tmp_path, graph):
    with unchanged(SPEC):
        shaped = add_gpu_work(SPEC, tmp_path / "gpu.sqlite", steady(1.5, graph=graph))
    # The GPU work of every forward outlasts its range (asynchronous launches), often into the next one.
    assert all(w.gpu_end > w.range.end for w in shaped.work)
    got = _projected(shaped.path)
    assert len(got) == len(shaped.work) == 512
    for column, attr in [("proj_duration_ns", "span_ns"), ("kernel_sum_ns", "kernel_sum_ns"),
                         ("gpu_busy_ns", "busy_ns"), ("kernels", "kernels"), ("gpu_ops", "launches"),
                         ("launch_api_ns", "api_ns")]:
        assert got[column].to_numpy(dtype=float).tolist() == _known(shaped.work, attr).tolist(), column


def test_gpu_shaped_trace_reads_as_a_gpu_trace_to_nsys_stats(tmp_path, nsys_bin):
    """NVIDIA's own projection (`nsys stats -r nvtxgpuproj`) of a GPU-shaped trace finds the known work: the helper
    writes what nsys itself takes for CUDA activity."""
    import subprocess

    shaped = add_gpu_work(TARGET, tmp_path / "gpu.sqlite", steady(1.2, names=(FORWARD,)), names=(FORWARD,))
    out = tmp_path / "stats"
    subprocess.run([nsys_bin, "stats", "-q", "-r", "nvtxgpuproj", "-f", "csv", "-o", str(out), str(shaped.path)],
                   check=True, capture_output=True, timeout=300)
    import csv

    with open(f"{out}_nvtxgpuproj.csv") as fh:
        rows = [r for r in csv.DictReader(fh) if r["Name"] == FORWARD]
    by_start = {int(r["Orig Start (ns)"]): (int(r["Projected Duration (ns)"]), int(r["NumGPUOps"])) for r in rows}
    assert by_start == {w.range.start: (w.span_ns, w.launches) for w in shaped.work}


def invoke_cli(args):
    return CliRunner().invoke(cli, args, env={"NSYS_CC_QUIET": "1"})


def _medians(work, kept_starts, payload, attr):
    vals = [getattr(w, attr) for w in work if w.range.start in kept_starts and w.range.payload == payload]
    return float(np.median(np.array(vals, dtype=float)))


def _iteration_starts(path, name=FORWARD):
    """Forwards inside measured iterations (the oracle for warm-up dropping), by raw SQL."""
    rows = raw_sql(path, "SELECT f.start FROM NVTX_EVENTS f LEFT JOIN StringIds s ON s.id = f.textId "
                         "JOIN NVTX_EVENTS i LEFT JOIN StringIds si ON si.id = i.textId "
                         "WHERE f.eventType = 59 AND coalesce(f.text, s.value) = ? AND i.eventType = 59 "
                         "AND coalesce(i.text, si.value) = 'nsys_cc:iteration' "
                         "AND f.start BETWEEN i.start AND i.\"end\"",
                   (name,))
    return {r[0] for r in rows}


@pytest.mark.slow
def test_standalone_c_on_gpu_metrics_is_the_ratio_of_the_known_medians(tmp_path):
    target = add_gpu_work(TARGET, tmp_path / "target.sqlite", steady(1.5, names=(FORWARD,)), names=(FORWARD,))
    draft = add_gpu_work(DRAFT_PLAIN, tmp_path / "draft.sqlite", steady(0.7, launches=2, names=(FORWARD,)),
                         names=(FORWARD,))
    result = cost_coefficient(target.path, [draft.path], names=["t", "d"])
    c = result.coefficients.set_index(["phase", "metric"])["c"]
    t_kept, d_kept = _iteration_starts(target.path), _iteration_starts(draft.path)
    for metric, attr in [("gpu_span", "span_ns"), ("kernel_sum", "kernel_sum_ns"), ("gpu_busy", "busy_ns")]:
        expected = _medians(draft.work, d_kept, 1, attr) / _medians(target.work, t_kept, 1, attr)
        assert c[("decode", metric)] == pytest.approx(expected, rel=1e-12), metric
    assert not [n for n in result.notes if "GPU" in n and "not available" in n]


def _with_early_forwards(src, dst, count):
    """A copy of `src` with `count` extra forward ranges (payloads 128, 1, 1, …) before its first benchmark
    iteration, on the forwards' thread: what vLLM's own warm-up (`compile_or_warm_up_model`) leaves in a trace."""
    import shutil

    shutil.copyfile(src, dst)
    con = sqlite3.connect(dst)
    first = con.execute("SELECT min(e.start) FROM NVTX_EVENTS e LEFT JOIN StringIds s ON s.id = e.textId "
                        "WHERE coalesce(e.text, s.value) IN ('nsys_cc:warmup', 'nsys_cc:iteration')").fetchone()[0]
    text_id, tid = con.execute("SELECT e.textId, e.globalTid FROM NVTX_EVENTS e JOIN StringIds s ON s.id = e.textId "
                               "WHERE s.value = ? LIMIT 1", (FORWARD,)).fetchone()
    for i in range(count):
        start = first - (count - i) * 2_000_000
        con.execute("INSERT INTO NVTX_EVENTS (start, \"end\", eventType, globalTid, textId, int64Value) "
                    "VALUES (?, ?, 59, ?, ?, ?)", (start, start + 1_000_000, tid, text_id, 128 if i == 0 else 1))
    con.commit()
    con.close()
    return dst


def test_vllm_warmup_forwards_outside_every_iteration_are_dropped_with_a_note(tmp_path):
    early = _with_early_forwards(TARGET, tmp_path / "early.sqlite", 3)
    model = load_model(early, name="t", role="target")
    kept = set(model.forwards.loc[model.forwards["kept"], "start_ns"].tolist())
    assert kept == _iteration_starts(early)
    assert "3 that ran outside every 'nsys_cc:iteration' range" in model.warmup_note
    # The same trace without them keeps the same forwards.
    plain = load_model(TARGET, name="t", role="target")
    assert set(plain.forwards.loc[plain.forwards["kept"], "start_ns"].tolist()) == kept


def _analyze_json(paths, *extra):
    result = invoke_cli(["analyze", *map(str, paths), "--format", "json", *extra])
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)


def test_cuda_calls_without_gpu_activity_are_said_loudly(tmp_path):
    """CUPTI lost the GPU activity (API calls recorded, no kernel rows): a note says so and names the range."""
    target = add_gpu_work(TARGET, tmp_path / "t.sqlite", steady(1.5, names=(FORWARD,)), names=(FORWARD,),
                          gpu_rows=False)
    draft = add_gpu_work(DRAFT_PLAIN, tmp_path / "d.sqlite", steady(1.0, names=(FORWARD,)), names=(FORWARD,))
    doc = _analyze_json([target.path, draft.path])
    note = next(n for n in doc["notes"] if n.startswith("t:") or "CUDA API calls but no GPU activity" in n)
    assert "CUDA API calls but no GPU activity" in note and "'model_executable()'" in note and "CUPTI" in note
    assert {c["metric"] for c in doc["coefficients"]} == {"wall"}


def test_kernels_launched_from_another_thread_are_said_loudly(tmp_path):
    ranges = read_ranges(TARGET, (FORWARD,))
    other = ranges[0].global_tid + 1  # same process, another thread
    target = add_gpu_work(TARGET, tmp_path / "t.sqlite", steady(1.5, names=(FORWARD,), thread=other),
                          names=(FORWARD,))
    assert not any(w.ops for w in target.work)  # nothing belongs to the ranges: the oracle agrees
    model = load_model(target.path, name="t", role="target")
    assert not model.has_cuda
    assert "none of its" in model.gpu_note and "'model_executable()'" in model.gpu_note
    assert "another thread" in model.gpu_note


def _graph_plan(mode):
    """Prefill forwards launch kernels one by one (eager); decode forwards replay one CUDA graph."""
    eager, graphs = steady(1.5), steady(1.2, graph=mode)

    def plan(rng):
        return eager(rng) if (rng.payload or 0) > 1 else graphs(rng)

    return plan


def _summary(result):
    return result.summary.set_index(["model", "phase", "metric"])


@pytest.mark.slow
def test_graphs_recorded_whole_give_no_kernel_metrics_rather_than_zero(tmp_path):
    target = add_gpu_work(TARGET, tmp_path / "t.sqlite", _graph_plan("whole"), names=(FORWARD,))
    draft = add_gpu_work(DRAFT_PLAIN, tmp_path / "d.sqlite", _graph_plan("whole"), names=(FORWARD,))
    # Every decode forward replayed one graph recorded whole: one GRAPH_TRACE row each, no kernel row.
    assert raw_sql(target.path, "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_GRAPH_TRACE")[0][0] == sum(
        w.range.payload == 1 for w in target.work)
    result = cost_coefficient(target.path, [draft.path], names=["t", "d"])
    summary = _summary(result)
    assert summary.loc[("t", "decode", "kernel_sum"), "count"] == 0
    assert np.isnan(summary.loc[("t", "decode", "kernel_sum"), "median_ms"])
    # GPU span and busy time include the graphs: exact against the known work.
    kept = _iteration_starts(target.path)
    assert summary.loc[("t", "decode", "gpu_busy"), "median_ms"] == pytest.approx(
        _medians(target.work, kept, 1, "busy_ns") / 1e6)
    # Prefill ran kernels one by one: its kernel metrics are there and exact.
    assert summary.loc[("t", "prefill", "kernel_sum"), "median_ms"] == pytest.approx(
        _medians(target.work, kept, 128, "kernel_sum_ns") / 1e6)
    assert any("recorded whole" in n and "kernel metrics" in n and "--cuda-graph-trace=node" in n
               for n in result.notes)
    doc = _analyze_json([target.path, draft.path])
    coef = {(c["draft"], c["phase"], c["metric"]): c for c in doc["coefficients"]}
    assert coef[("d", "decode", "kernel_sum")]["c"] is None and coef[("d", "decode", "gpu_span")]["c"] is not None
    assert doc["models"][0]["phases"]["decode"]["kernel_sum_ms"]["median"] is None
    table = invoke_cli(["analyze", str(target.path), str(draft.path)])
    decode_row = next(line for line in table.stdout.splitlines() if line.startswith("t ") and " decode " in line)
    assert "n/a" in decode_row


@pytest.mark.slow
def test_graphs_traced_node_by_node_give_exact_kernel_metrics(tmp_path):
    target = add_gpu_work(TARGET, tmp_path / "t.sqlite", _graph_plan("node"), names=(FORWARD,))
    draft = add_gpu_work(DRAFT_PLAIN, tmp_path / "d.sqlite", _graph_plan("node"), names=(FORWARD,))
    result = cost_coefficient(target.path, [draft.path], names=["t", "d"])
    kept = _iteration_starts(target.path)
    assert _summary(result).loc[("t", "decode", "kernel_sum"), "median_ms"] == pytest.approx(
        _medians(target.work, kept, 1, "kernel_sum_ns") / 1e6)
    assert not any("recorded whole" in n for n in result.notes)


def test_a_range_with_a_whole_graph_among_kernels_has_unknown_kernel_metrics(tmp_path):
    def plan(rng):
        return [Launch(0, 1_000, (50_000,)), Launch(rng.duration // 2, 1_000, (30_000, 20_000), graph="whole")]

    shaped = add_gpu_work(TARGET, tmp_path / "t.sqlite", plan, names=(FORWARD,))
    got = _projected(shaped.path, (FORWARD,))
    assert got["kernel_sum_ns"].isna().all() and got["kernels"].isna().all()
    assert got["gpu_busy_ns"].to_numpy(dtype=float).tolist() == _known(shaped.work, "busy_ns").tolist()


@pytest.mark.slow
def test_a_trace_labelled_speculative_without_draft_ranges_is_an_error_not_a_plain_report(tmp_path):
    """A speculative run whose drafts the plugin did not record (a full-graph speculator left unwrapped) would
    otherwise be measured as a plain draft with a wrong c."""
    import shutil

    spec = shutil.copyfile(DRAFT_PLAIN, tmp_path / "tiny-llama-draft-xs.spec-g3.sqlite")
    with unchanged(spec):
        res = invoke_cli(["analyze", str(TARGET), str(DRAFT_PLAIN), str(spec)])
    lines = res.stderr.strip().splitlines()
    assert res.exit_code == 2 and len(lines) == 1 and res.stdout == ""
    assert lines[0].startswith("nsys-cc: error: ") and "labelled as a speculative run" in lines[0]
    assert "no draft-model forward ranges" in lines[0] and "'draft_model_executable()'" in lines[0]
    # A plain draft with a spec-decode metrics dump beside it (a speculative run's): the same error.
    other = shutil.copyfile(DRAFT_PLAIN, tmp_path / "run.sqlite")
    shutil.copyfile(FIXTURES / "spec" / "tiny-llama-draft-xs.spec-g3.metrics.json", tmp_path / "run.metrics.json")
    with pytest.raises(Exception, match="metrics dump beside it"):
        cost_coefficient(TARGET, [other])
    # The real speculative fixture, with its draft ranges, is measured in place as before.
    assert cost_coefficient(TARGET, [DRAFT_PLAIN, SPEC]).speculative is not None


@pytest.mark.slow
def test_the_kernel_breakdown_counts_the_named_kernels_each_forward_launched(tmp_path):
    """Kernel names given by the plan reach the per-phase breakdown: calls and time per forward of each name, from the
    kept decode forwards' known work."""
    def plan(rng):
        return [Launch(0, 1_000, (40_000, 10_000), graph="node", names=("gemm", "attention")),
                Launch(rng.duration // 3, 1_000, (5_000,), names=("sampler",))]

    target = add_gpu_work(TARGET, tmp_path / "t.sqlite", plan, names=(FORWARD,))
    draft = add_gpu_work(DRAFT_PLAIN, tmp_path / "d.sqlite", plan, names=(FORWARD,))
    result = cost_coefficient(target.path, [draft.path], names=["t", "d"])
    rows = result.kernel_summary[(result.kernel_summary["model"] == "t")
                                 & (result.kernel_summary["phase"] == "decode")].set_index("name")
    kept = _iteration_starts(target.path)
    decode = [w for w in target.work if w.range.start in kept and w.range.payload == 1]
    for name in ("gemm", "attention", "sampler"):
        durations = [o[1] - o[0] for w in decode for o in w.ops if o[3] == name]
        assert rows.loc[name, "calls_per_forward"] == pytest.approx(len(durations) / len(decode))
        assert rows.loc[name, "time_per_forward_ms"] == pytest.approx(sum(durations) / len(decode) / 1e6)
