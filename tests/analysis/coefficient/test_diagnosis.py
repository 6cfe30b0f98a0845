"""The diagnosis from evidence, on GPU-shaped traces: the project's real CPU spec fixtures with GPU
work of known shape added by `gpu_shaped` (NOT GPU traces). The oracle is the work written (`Work`: each forward's
span, busy union, kernels and launching calls), the kept forwards chosen here by raw SQL (inside a measured
`nsys_cc:iteration`, decode payload).

- a draft replayed as a CUDA graph (96 % of its kernels from one `cudaGraphLaunch`) whose GPU is busy most of its span
  is GPU-bound and is never told to use CUDA graphs; the gap between its two c's comes from the target's launch time
  (the target's GPU work runs 3× past its launches), and the diagnosis says so;
- launch-bound means the GPU idles between launches (busy share of the GPU span, not of the launch time): an eager
  draft whose ten tiny kernels leave the GPU idle gets the graph advice; a draft that idles between graph replays
  does not.
"""

from __future__ import annotations

import statistics

import pytest
from gpu_shaped import FORWARD, Launch, add_gpu_work

from conftest import FIXTURES, raw_sql, unchanged
from nsys_cc.analysis.coefficient.measure import cost_coefficient
from nsys_cc.report.sentence_text import diagnosis_text

TARGET = FIXTURES / "spec" / "tiny-llama-target.sqlite"
DRAFT = FIXTURES / "spec" / "tiny-llama-draft-xs.sqlite"
GRAPH_ADVICE = "CUDA graphs or fewer, fused kernels would lower"


def target_plan(rng):
    """GPU-bound, replayed as one graph of 20 kernels whose work takes 3× the range's launch time."""
    total = 3 * rng.duration
    return [Launch(rng.duration // 10, 5_000, (total // 20,) * 20, graph="node")]


def graph_draft_plan(rng):
    """One graph launch of 24 kernels (80 % of the range's time), then one kernel after a short idle gap: 24 of 25
    kernels come from the graph, and the GPU works most of its span."""
    d = rng.duration
    return [Launch(d // 20, 2_000, (d * 8 // 10 // 24,) * 24, graph="node"),
            Launch(d * 92 // 100, 1_000, (d // 20,))]


def eager_draft_plan(rng):
    """Ten one-kernel launches spread over 90 % of the range, each kernel 0.5 % of it: the GPU idles between them."""
    d = rng.duration
    return [Launch(i * d * 9 // 100, 1_000, (max(d // 200, 1),)) for i in range(10)]


def idle_graphs_plan(rng):
    """Four graph launches of three tiny kernels each, spread over the range: graph replays with idle gaps between."""
    d = rng.duration
    return [Launch(i * d // 5, 1_500, (max(d // 300, 1),) * 3, graph="node") for i in range(4)]


def kept_decode(path) -> set[int]:
    """Starts of the decode forwards (payload 1: batch 1, one token) inside a measured iteration — raw SQL."""
    sql = ("SELECT f.start, f.int64Value FROM NVTX_EVENTS f LEFT JOIN StringIds s ON s.id = f.textId "
           "JOIN NVTX_EVENTS i LEFT JOIN StringIds si ON si.id = i.textId "
           "WHERE f.eventType = 59 AND coalesce(f.text, s.value) = ? AND i.eventType = 59 "
           "AND coalesce(i.text, si.value) = 'nsys_cc:iteration' AND f.start BETWEEN i.start AND i.\"end\"")
    return {start for start, payload in raw_sql(path, sql, (FORWARD,)) if payload == 1}


def medians(shaped) -> dict[str, float]:
    work = [w for w in shaped.of(FORWARD) if w.range.start in kept_decode(shaped.path)]
    assert len(work) > 10
    return {"busy": statistics.median(w.busy_ns for w in work), "span": statistics.median(w.span_ns for w in work),
            "wall": statistics.median(w.range.duration for w in work),
            "kernels": statistics.median(w.kernels for w in work),
            "launches": statistics.median(w.launches for w in work)}


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    out = tmp_path_factory.mktemp("diagnosis")
    with unchanged(TARGET, DRAFT):
        target = add_gpu_work(TARGET, out / "t.sqlite", target_plan, names=(FORWARD,))
        drafts = {name: add_gpu_work(DRAFT, out / f"{name}.sqlite", plan, names=(FORWARD,))
                  for name, plan in (("graph", graph_draft_plan), ("eager", eager_draft_plan),
                                     ("idle-graphs", idle_graphs_plan))}
    result = cost_coefficient(target.path, [d.path for d in drafts.values()], names=["t", *drafts])
    return target, drafts, result


def row_of(result, name):
    (row,) = [r for r in result.diagnosis.itertuples() if r.draft == name]
    return row


@pytest.mark.slow
def test_a_graph_replayed_gpu_bound_draft_is_not_told_to_use_graphs(made):
    target, drafts, result = made
    row, known, t_known = row_of(result, "graph"), medians(drafts["graph"]), medians(target)
    share = known["busy"] / known["span"]
    assert 0.8 <= share < 1 and known["busy"] < known["wall"]  # GPU-bound, and below the launch time too
    assert row.busy_share == pytest.approx(share, rel=1e-12) and row.boundness == "GPU-bound"
    assert row.replayed_share == pytest.approx((known["kernels"] - known["launches"] + 1) / known["kernels"])
    assert row.replayed_share == pytest.approx(24 / 25) and row.graphs
    text = diagnosis_text(result, row)
    assert GRAPH_ADVICE not in text and "launch-bound" not in text and "dominated by CPU-side" not in text
    assert f"GPU busy {known['busy'] / 1e6:.3f} ms of its {known['span'] / 1e6:.3f} ms GPU span ({share:.0%})" in text
    assert "96% of its kernels are CUDA-graph replays (25 kernels from 2 launches per forward)" in text
    # the two c's disagree because the target's GPU work runs 3× past its launches: said, and whose
    c_launch, c_span = known["wall"] / t_known["wall"], known["span"] / t_known["span"]
    assert c_launch / c_span > 1.5 and row.launch_side == "target"
    assert row.target_launch_ratio == pytest.approx(t_known["wall"] / t_known["span"], rel=1e-12)
    assert "the gap comes from the target's launch time" in text
    assert f"its GPU work spans {t_known['span'] / t_known['wall']:.1f}× its launch time" in text


@pytest.mark.slow
def test_launch_bound_is_the_gpu_idling_between_launches(made):
    _, drafts, result = made
    row, known = row_of(result, "eager"), medians(drafts["eager"])
    share = known["busy"] / known["span"]
    assert share < 0.5 and row.busy_share == pytest.approx(share, rel=1e-12)
    assert row.boundness == "launch-bound" and row.launch_dominated and not row.graphs
    text = diagnosis_text(result, row)
    assert text.startswith("decode: launch-bound: ") and GRAPH_ADVICE in text
    assert "its kernels are launched one by one (10 kernels from 10 launches per forward)" in text


@pytest.mark.slow
def test_a_draft_idling_between_graph_replays_gets_no_graph_advice(made):
    _, drafts, result = made
    row, known = row_of(result, "idle-graphs"), medians(drafts["idle-graphs"])
    assert row.busy_share == pytest.approx(known["busy"] / known["span"], rel=1e-12) and row.busy_share < 0.5
    assert row.graphs and row.boundness == "launch-bound"
    text = diagnosis_text(result, row)
    assert GRAPH_ADVICE not in text and "although its kernels are replayed as CUDA graphs" in text


def test_the_target_side_is_diagnosed_too(made):
    target, _, result = made
    row, t_known = row_of(result, "graph"), medians(target)
    assert row.target_busy_share == pytest.approx(t_known["busy"] / t_known["span"], rel=1e-12)
    assert row.target_boundness == "GPU-bound" and row.target_graphs
