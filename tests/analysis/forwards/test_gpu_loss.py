"""Partial CUDA loss is said, not silent, on GPU-shaped traces (`gpu_shaped`: real CPU traces with
CUDA activity added whose every forward's GPU work is known; they are not GPU traces).

A launch record that CUPTI dropped is modelled by deleting the CUDA API rows of some forwards: their kernels then
find no launch (they are in no range's metrics) and those forwards launched nothing (they leave the GPU medians).
The oracle is the work written and raw SQL on the trace.
"""

from __future__ import annotations

import sqlite3

import pytest
from gpu_shaped import FORWARD, add_gpu_work, steady

from conftest import FIXTURES, raw_sql
from nsys_cc.analysis.coefficient.measure import cost_coefficient
from nsys_cc.analysis.forwards.gpu_loss import WARN_SHARE

TARGET = FIXTURES / "spec" / "tiny-llama-target.sqlite"
DRAFT = FIXTURES / "spec" / "tiny-llama-draft-xs.sqlite"


def _drop_launches(path, works) -> int:
    """Delete the CUDA API rows inside the given forwards (on their thread); the number of GPU ops they launched."""
    con = sqlite3.connect(path)
    try:
        for w in works:
            con.execute("DELETE FROM CUPTI_ACTIVITY_KIND_RUNTIME WHERE globalTid = ? AND start >= ? AND end <= ?",
                        (w.range.global_tid, w.range.start, w.range.end))
        con.commit()
    finally:
        con.close()
    return sum(len(w.ops) for w in works)


def _shaped(tmp_path, dropped_every: int | None):
    target = add_gpu_work(TARGET, tmp_path / "t.sqlite", steady(1.5, names=(FORWARD,)), names=(FORWARD,))
    draft = add_gpu_work(DRAFT, tmp_path / "d.sqlite", steady(1.5, names=(FORWARD,)), names=(FORWARD,))
    lost = target.work[1::dropped_every] if dropped_every else []
    return target, draft, lost, _drop_launches(target.path, lost)


@pytest.mark.slow
@pytest.mark.parametrize("every", [7, None])
def test_gpu_ops_without_launch_and_forwards_without_gpu_work_are_counted(tmp_path, every):
    target, draft, lost, lost_ops = _shaped(tmp_path, every)
    total_ops = raw_sql(target.path, "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL")[0][0]
    result = cost_coefficient(str(target.path), [str(draft.path)], names=["t", "d"])
    loss = result.models[0].gpu_loss
    assert loss.ops == total_ops and loss.unlaunched == lost_ops
    kept = result.models[0].kept
    lost_kept = sum(w.range.start in set(kept["start_ns"]) for w in lost)
    assert loss.forwards == len(kept) and loss.without_gpu == lost_kept
    # The forwards left: the GPU medians count only those with GPU work (wall counts all).
    assert result.summary.query("model == 't' and phase == 'all' and metric == 'gpu_busy'")["count"].item() == \
        len(kept) - lost_kept
    assert result.models[1].gpu_loss.unlaunched == 0 and result.models[1].gpu_loss.without_gpu == 0
    doc = result.to_dict()["models"][0]["gpu_loss"]
    assert doc["gpu_ops_without_launch"] == lost_ops and doc["forwards_without_gpu_work"] == lost_kept
    warned = [n for n in result.notes if n.startswith("t: ") and "warning:" in n]
    if every:
        assert lost_ops / total_ops > WARN_SHARE and lost_kept / len(kept) > WARN_SHARE
        (note,) = warned
        assert f"{lost_ops / total_ops:.1%} of the trace's GPU ops ({lost_ops:,} of {total_ops:,})" in note
        assert f"{lost_kept:,} of its {len(kept):,} kept 'model_executable()' ranges" in note
    else:
        assert lost_ops == 0 and warned == []
        assert doc["gpu_ops_without_launch_share"] == 0.0


@pytest.mark.slow
def test_a_loss_below_the_threshold_is_reported_without_a_warning(tmp_path):
    target = add_gpu_work(TARGET, tmp_path / "t.sqlite", steady(1.5, names=(FORWARD,)), names=(FORWARD,))
    draft = add_gpu_work(DRAFT, tmp_path / "d.sqlite", steady(1.5, names=(FORWARD,)), names=(FORWARD,))
    con = sqlite3.connect(target.path)
    con.execute("DELETE FROM CUPTI_ACTIVITY_KIND_RUNTIME WHERE rowid = (SELECT min(rowid) FROM "
                "CUPTI_ACTIVITY_KIND_RUNTIME)")  # one launch record of thousands
    con.commit()
    con.close()
    result = cost_coefficient(str(target.path), [str(draft.path)], names=["t", "d"])
    loss = result.models[0].gpu_loss
    assert loss.unlaunched == 1 and 0 < loss.unlaunched_share < WARN_SHARE
    assert not any("warning:" in n for n in result.notes)
