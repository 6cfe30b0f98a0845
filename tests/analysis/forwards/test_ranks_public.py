"""Ranks on the public 2-GPU exports (`../shared/traces/public`, GindaChen/nsys-ai), against `nsys stats` per process.

What these traces hold: PyTorch training on 2 H100s (one process per GPU), a 1-second window cut from each run.
Their op-level ranges carry an op id in the name (`aten::mul, seq = 46174, op_id = 993406`), so no forward-like range
repeats by name. What repeats once per rank per communication round in the two `mfu_2gpu_*` traces are NCCL's own
ranges: `ncclGroupStart`, `ncclSend`, `ncclRecv`, `ncclGroupEnd` (the kernel `ncclDevKernel_SendRecv` is launched
inside `ncclGroupEnd`). So the rank grouping is tested on `ncclGroupEnd`: per-process projection against nsys's
own `nvtxgpuproj` rows of that process, the step's wall and GPU span recomputed from those rows, the step's GPU busy
and kernel sum and the NCCL share from raw SQL, and the skew. These are CPU-asynchronous enqueue calls, not forwards:
the two ranks' ranges do not overlap in time, and the analysis says so. In `mfu_2gpu_before` the window cut leaves
32 rounds in one process and 34 in the other: the note reports it. `h100_2gpu_1s` has no NCCL kernels and no
repeated name at all (checked below), so nothing there forms steps.
"""

from __future__ import annotations

import shutil
import subprocess

import numpy as np
import pandas as pd
import pytest

from conftest import PUBLIC, raw_sql, unchanged, union_length
from nsys_cc import cost_coefficient
from nsys_cc.analysis.forwards.kernel_tables import categorise

pytestmark = [pytest.mark.public, pytest.mark.nsys]

PREFIX = "GindaChen__nsys-ai__"
RANGE = "ncclGroupEnd"

OPS_SQL = """
SELECT o.start, o.end, o.kind, o.name FROM CUPTI_ACTIVITY_KIND_RUNTIME a JOIN (
  SELECT k.start, k.end, k.correlationId, k.globalPid, 'kernel' AS kind, s.value AS name
    FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s ON s.id = k.shortName
  UNION ALL SELECT start, end, correlationId, globalPid, 'memcpy', '' FROM CUPTI_ACTIVITY_KIND_MEMCPY
  UNION ALL SELECT start, end, correlationId, globalPid, 'memset', '' FROM CUPTI_ACTIVITY_KIND_MEMSET
) o ON o.correlationId = a.correlationId AND o.globalPid = (a.globalTid >> 24) << 24
WHERE a.globalTid = ? AND a.start >= ? AND a.end <= ?
"""


def _nvtxgpuproj(path, nsys: str, work) -> pd.DataFrame:
    copy = work / path.name
    with unchanged(path):
        shutil.copyfile(path, copy)
    subprocess.run([nsys, "stats", "-q", "-r", "nvtxgpuproj", "-f", "csv", "-o", str(work / "s"), str(copy)],
                   check=True, capture_output=True, timeout=600)
    return pd.read_csv(work / "s_nvtxgpuproj.csv")


@pytest.fixture(scope="module", params=["mfu_2gpu_after", "mfu_2gpu_before"])
def case(request, public_dir, nsys_bin, tmp_path_factory):
    path = public_dir / f"{PREFIX}{request.param}.sqlite"
    stats = _nvtxgpuproj(path, nsys_bin, tmp_path_factory.mktemp(request.param))
    # analyze needs a draft: the other mfu trace (same range).
    other_name = "mfu_2gpu_before" if request.param == "mfu_2gpu_after" else "mfu_2gpu_after"
    other = public_dir / f"{PREFIX}{other_name}.sqlite"
    with unchanged(path, other):
        res = cost_coefficient(str(path), [str(other)], range_name=RANGE, names=["tp", "other"])
    # nsys_cc's range name is the plain name; nsys 2022.4 prints it the same for the default domain.
    rows = stats[stats["Name"] == RANGE]
    return request.param, path, rows, res


def _pairs(rows: pd.DataFrame) -> list[tuple[pd.Series, pd.Series]]:
    """Each of rank 0's (lower PID) rows paired with the other process's row whose projected GPU interval overlaps
    it most: the two halves of one send/recv round run together on the two GPUs (each waits for the other), so GPU
    overlap says which ranges are one round, independently of the order the analysis matches by."""
    pids = sorted(rows["PID"].unique())
    assert len(pids) == 2
    r0 = rows[rows["PID"] == pids[0]].sort_values("Orig Start (ns)")
    r1 = rows[rows["PID"] == pids[1]].sort_values("Orig Start (ns)")
    b0 = r1["Projected Start (ns)"].to_numpy()
    b1 = b0 + r1["Projected Duration (ns)"].to_numpy()
    out = []
    for _, a in r0.iterrows():
        overlap = np.minimum(a["Projected Start (ns)"] + a["Projected Duration (ns)"], b1) - np.maximum(
            a["Projected Start (ns)"], b0)
        j = int(np.argmax(overlap))
        assert overlap[j] > 0
        out.append((a, r1.iloc[j]))
    assert len({b["RangeId"] for _, b in out}) == len(out)
    return out


def test_per_process_projection_equals_nvtxgpuproj(case):
    _, _, rows, res = case
    m = res.target
    assert m.ranks is not None and m.ranks.count == 2
    ranges = m.ranks.ranges.set_index("range_id")
    assert sorted(rows["PID"].unique()) == list(m.ranks.processes["pid"])
    for pid, grp in rows.groupby("PID"):
        mine = ranges[ranges["pid"] == pid]
        assert sorted(mine.index[mine["gpu_ops"].notna()]) == sorted(grp["RangeId"])
        mine = mine.loc[grp["RangeId"]]
        assert (mine["proj_start_ns"].to_numpy() == grp["Projected Start (ns)"].to_numpy()).all()
        assert (mine["proj_duration_ns"].to_numpy() == grp["Projected Duration (ns)"].to_numpy()).all()
        assert (mine["gpu_ops"].to_numpy() == grp["NumGPUOps"].to_numpy()).all()


def test_forwards_pair_the_ranges_whose_gpu_work_overlaps(case):
    _, _, rows, res = case
    steps = res.target.forwards.sort_values("start_ns")
    pairs = _pairs(rows)
    assert len(steps) == len(pairs)
    ranges = res.target.ranks.ranges.set_index("range_id")
    for (a, b), step in zip(pairs, steps.itertuples()):
        assert set(ranges.loc[[a["RangeId"], b["RangeId"]], "forward"]) == {step.forward}
        start = min(a["Orig Start (ns)"], b["Orig Start (ns)"])
        end = max(a["Orig Start (ns)"] + a["Orig Duration (ns)"], b["Orig Start (ns)"] + b["Orig Duration (ns)"])
        assert step.wall_ns == end - start
        first = min(a["Projected Start (ns)"], b["Projected Start (ns)"])
        last = max(x["Projected Start (ns)"] + x["Projected Duration (ns)"] for x in (a, b))
        assert step.gpu_span_ns == last - first
    # The ranges left out (the window cut them) are those without GPU work of their own: no round to pair.
    left = ranges[ranges["forward"] < 0]
    assert left["gpu_ops"].isna().all()
    assert len(left) == len(ranges) - 2 * len(steps)


def test_busy_is_the_union_over_ranks_and_kernel_sums_add(case):
    _, path, _, res = case
    ranges = res.target.ranks.ranges
    matched = ranges[ranges["forward"] >= 0]
    steps = res.target.forwards.set_index("forward")
    for step, grp in matched.groupby("forward"):
        ops = [op for r in grp.itertuples() for op in raw_sql(path, OPS_SQL, (r.global_tid, r.start_ns, r.end_ns))]
        assert steps.at[step, "gpu_busy_ns"] == union_length([(s, e) for s, e, _, _ in ops])
        assert steps.at[step, "kernel_sum_ns"] == sum(e - s for s, e, kind, _ in ops if kind == "kernel")


def test_nccl_is_the_communication_category_per_rank_and_forward(case):
    _, path, _, res = case
    ranges = res.target.ranks.ranges
    kept_steps = set(res.target.phase_rows("all")["forward"])
    table = res.ranks[(res.ranks["model"] == "tp") & (res.ranks["phase"] == "all")].set_index("rank")
    comm_total = all_total = 0
    for rank, grp in ranges[ranges["forward"].isin(kept_steps)].groupby("rank"):
        ops = [op for r in grp.itertuples() for op in raw_sql(path, OPS_SQL, (r.global_tid, r.start_ns, r.end_ns))]
        names = {n for _, _, kind, n in ops if kind == "kernel"}
        assert names and all(n.startswith("nccl") and categorise(n) == "communication" for n in names)
        comm = sum(e - s for s, e, kind, n in ops if kind == "kernel" and n.startswith("nccl"))
        total = sum(e - s for s, e, _, _ in ops)
        assert table.at[rank, "comm_mean_ms"] == pytest.approx(comm / len(grp) / 1e6, rel=1e-12)
        assert table.at[rank, "comm_share"] == pytest.approx(comm / total, rel=1e-12)
        comm_total, all_total = comm_total + comm, all_total + total
    cats = res.categories[(res.categories["model"] == "tp") & (res.categories["phase"] == "all")]
    share = cats.set_index("category")["share"]
    assert share["communication"] == pytest.approx(comm_total / all_total, rel=1e-12)


def test_skew_from_nsys_rows_and_notes(case):
    name, path, rows, res = case
    pairs = _pairs(rows)
    pids = sorted(rows["PID"].unique())
    ends = np.array([[x["Orig Start (ns)"] + x["Orig Duration (ns)"] for x in p] for p in pairs])
    table = res.ranks[(res.ranks["model"] == "tp") & (res.ranks["phase"] == "all")].set_index("rank")
    last = np.argmax(ends, axis=1)
    for r in (0, 1):
        assert table.at[r, "last_forwards"] == int((last == r).sum())
        assert table.at[r, "lag_ms"] == pytest.approx(np.median(ends[:, r] - ends.min(axis=1)) / 1e6, abs=1e-9)
    # Every ncclGroupEnd range per process (nvtxgpuproj lists only those that launched GPU work).
    counts = dict(raw_sql(path, "SELECT (e.globalTid >> 24) & 16777215, count(*) FROM NVTX_EVENTS e JOIN StringIds s "
                                "ON s.id = e.textId WHERE s.value = ? GROUP BY 1", (RANGE,)))
    assert sorted(counts) == pids
    notes = [n for n in res.notes if n.startswith("tp:")]
    disagree = [n for n in notes if "disagree" in n]
    if counts[pids[0]] != counts[pids[1]]:
        assert name == "mfu_2gpu_before"
        (note,) = disagree
        assert f"rank 0 (pid {pids[0]}) {counts[pids[0]]}, rank 1 (pid {pids[1]}) {counts[pids[1]]}" in note
    else:
        assert not disagree
    # Asynchronous NCCL enqueue calls: the two ranks' ranges do not overlap; said, not hidden.
    assert any("do not overlap in time" in n for n in notes)


def test_h100_trace_has_no_name_repeated_in_a_process():
    if not PUBLIC.is_dir():
        pytest.skip("public traces absent")
    path = PUBLIC / f"{PREFIX}h100_2gpu_1s.sqlite"
    rows = raw_sql(path, "SELECT coalesce(e.text, s.value), (e.globalTid >> 24) & 16777215, count(*) "
                         "FROM NVTX_EVENTS e LEFT JOIN StringIds s ON s.id = e.textId WHERE e.eventType = 59 "
                         "GROUP BY 1, 2")
    assert len({pid for _, pid, _ in rows}) == 2
    assert max(n for _, _, n in rows) == 1
    kernels = raw_sql(path, "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s ON s.id = k.shortName "
                            "WHERE s.value LIKE 'nccl%'")
    assert kernels == [(0,)]
