"""Forwards across tensor-parallel ranks, on the real CPU TP=2 fixture (fixtures/tp) and on small synthetic inputs.

Every expected number on the fixture is recomputed here from the raw NVTX rows with the stdlib and numpy: forward
ranges per process (pid from globalTid), the k-th range of each process in start order is step k, a step's wall is
first start → last end, warm-up by the `nsys_cc:warmup` windows, phase by payload ÷ the iteration's batch.
"""

from __future__ import annotations

import json
import shutil
import sqlite3

import numpy as np
import pytest
from click.testing import CliRunner

from conftest import FIXTURES, raw_sql, unchanged
from nsys_cc import cost_coefficient
from nsys_cc.analysis.forwards.ranks import forward_bounds, match
from nsys_cc.cli import cli

TP = FIXTURES / "tp"
TARGET = TP / "tiny-llama-target.tp2.sqlite"
DRAFT = FIXTURES / "vllm" / "tiny-llama-draft-s.sqlite"

RANGES_SQL = """
SELECT e.start, e.end, e.int64Value, coalesce(e.text, s.value), (e.globalTid >> 24) & 16777215, e.globalTid
FROM NVTX_EVENTS e LEFT JOIN StringIds s ON s.id = e.textId
WHERE e.eventType IN (59, 60)
"""


def raw_steps(path) -> dict:
    """Steps from the raw rows: per process the forwards in start order, zipped; warm-up and phase per step."""
    rows = raw_sql(path, RANGES_SQL)
    # A range still open when the capture ended: nsys's exporter closes it at the trace's last ns.
    ((trace_end,),) = raw_sql(path, "SELECT duration FROM ANALYSIS_DETAILS")
    per_pid: dict[int, list] = {}
    for r in sorted((r for r in rows if r[3] == "model_executable()"), key=lambda r: r[0]):
        per_pid.setdefault(r[4], []).append(r)
    pids = sorted(per_pid)
    warm = [(r[0], r[1]) for r in rows if r[3] == "nsys_cc:warmup"]
    iters = [(r[0], r[1], r[2]) for r in rows if r[3] in ("nsys_cc:warmup", "nsys_cc:iteration")]
    reduces = [r for r in rows if r[3] == "nsys_cc:all_reduce"]

    def all_reduce_ms(f) -> float:
        """The all-reduce ranges inside forward range `f` on its thread."""
        return sum(r[1] - r[0] for r in reduces if r[5] == f[5] and f[0] <= r[0] and r[1] <= f[1]) / 1e6

    steps = []
    for ranks in zip(*(per_pid[p] for p in pids)):
        start, end = min(r[0] for r in ranks), max(r[1] for r in ranks)
        ends = [r[1] for r in ranks]
        (batch,) = [b for s, e, b in iters if s <= start <= e]
        steps.append({
            "wall_ms": (end - start) / 1e6, "warm": any(ws <= start <= we for ws, we in warm),
            "open": any(r[1] == trace_end for r in ranks), "start": start, "end": end,
            "phase": "prefill" if ranks[0][2] / batch > 1 else "decode",
            "last": int(np.argmax(ends)), "lag_ms": [(e - min(ends)) / 1e6 for e in ends],
            "own_ms": [(r[1] - r[0]) / 1e6 for r in ranks], "payloads": {r[2] for r in ranks},
            "all_reduce_ms": [all_reduce_ms(r) for r in ranks], "ranges": [(r[0], r[1]) for r in ranks],
        })
    for st in steps:
        st["kept"] = not st["warm"] and not st["open"]
    return {"pids": pids, "counts": [len(per_pid[p]) for p in pids], "steps": steps, "all_reduces": len(reduces)}


@pytest.fixture(scope="module")
def raw():
    return raw_steps(TARGET)


@pytest.fixture(scope="module")
def result():
    with unchanged(TP, DRAFT):
        return cost_coefficient(str(TARGET), [str(DRAFT)])


def test_fixture_is_two_ranks_with_one_range_per_step(raw):
    assert len(raw["pids"]) == 2 and raw["counts"][0] == raw["counts"][1] > 10
    # A rank's k-th forward and the other's run at the same time (each waits for the other's all-reduce): the k-th
    # ranges of the two ranks overlap, and neither overlaps the other rank's (k+1)-th.
    for k, s in enumerate(raw["steps"]):
        (a0, a1), (b0, b1) = s["ranges"]
        assert max(a0, b0) < min(a1, b1), k
        if k + 1 < len(raw["steps"]):
            nxt = raw["steps"][k + 1]["ranges"]
            assert a1 <= nxt[1][0] and b1 <= nxt[0][0], k
    assert all(len(s["payloads"]) == 1 for s in raw["steps"])  # and they process the same tokens


def test_steps_counts_and_phases_from_raw_rows(result, raw):
    m = result.target
    assert m.ranks is not None and m.ranks.count == 2
    assert list(m.ranks.processes["pid"]) == raw["pids"]
    assert len(m.forwards) == len(raw["steps"])
    kept = [s for s in raw["steps"] if s["kept"]]
    assert int(m.forwards["kept"].sum()) == len(kept) > 0
    assert int(m.forwards["open_at_end"].sum()) == sum(s["open"] for s in raw["steps"])
    for phase in ("prefill", "decode"):
        assert len(m.phase_rows(phase)) == sum(s["phase"] == phase for s in kept) > 0


@pytest.mark.parametrize("phase", ["all", "prefill", "decode"])
def test_step_wall_is_first_start_to_last_end(result, raw, phase):
    walls = [s["wall_ms"] for s in raw["steps"] if s["kept"] and phase in ("all", s["phase"])]
    row = result.summary[(result.summary["model"] == result.target.name) & (result.summary["phase"] == phase)
                         & (result.summary["metric"] == "wall")].iloc[0]
    assert row["count"] == len(walls)
    assert row["median_ms"] == pytest.approx(np.median(walls), abs=1e-6)
    assert row["p90_ms"] == pytest.approx(np.percentile(walls, 90), abs=1e-6)


def test_c_is_draft_over_the_step(result, raw):
    decode = [s["wall_ms"] for s in raw["steps"] if s["kept"] and s["phase"] == "decode"]
    rows = raw_sql(DRAFT, RANGES_SQL)
    warm = [(r[0], r[1]) for r in rows if r[3] == "nsys_cc:warmup"]
    draft = [(r[1] - r[0]) / 1e6 for r in rows
             if r[3] == "model_executable()" and r[2] == 2 and not any(ws <= r[0] <= we for ws, we in warm)]
    c = result.coefficients.set_index(["phase", "metric"]).loc[("decode", "wall"), "c"]
    assert c == pytest.approx(np.median(draft) / np.median(decode), rel=1e-9)


@pytest.mark.parametrize("phase", ["all", "decode"])
def test_rank_table_last_rank_lag_and_own_time(result, raw, phase):
    kept = [s for s in raw["steps"] if s["kept"] and phase in ("all", s["phase"])]
    table = result.ranks[result.ranks["phase"] == phase].set_index("rank")
    assert list(table.index) == [0, 1] and list(table["pid"]) == raw["pids"]
    for r in (0, 1):
        assert table.at[r, "forwards"] == len(kept)
        assert table.at[r, "last_forwards"] == sum(s["last"] == r for s in kept)
        assert table.at[r, "lag_ms"] == pytest.approx(np.median([s["lag_ms"][r] for s in kept]), abs=1e-6)
        assert table.at[r, "wall_ms"] == pytest.approx(np.median([s["own_ms"][r] for s in kept]), abs=1e-6)
    assert table["last_forwards"].sum() == len(kept)
    # A CPU trace: no GPU time, no communication kernels; the all-reduce is CPU time inside the forward.
    assert table["comm_mean_ms"].isna().all() and table["gpu_busy_ms"].isna().all()
    for r in (0, 1):
        reduce_ms = [s["all_reduce_ms"][r] for s in kept]
        assert table.at[r, "allreduce_ms"] == pytest.approx(np.median(reduce_ms), abs=1e-6)
        assert table.at[r, "allreduce_share"] == pytest.approx(sum(reduce_ms) / sum(s["own_ms"][r] for s in kept))


def test_every_forward_holds_its_all_reduces(raw):
    """The plugin's all-reduce ranges: several in every measured forward of every rank (4 layers × 2 at least)."""
    assert raw["all_reduces"] > 0
    assert all(min(s["all_reduce_ms"]) > 0 for s in raw["steps"] if s["kept"])


def test_skew_note_names_the_last_rank(result, raw):
    kept = [s for s in raw["steps"] if s["kept"]]
    last = np.bincount([s["last"] for s in kept], minlength=2)
    skew = [max(s["lag_ms"]) for s in kept]
    (note,) = [n for n in result.notes if "tensor-parallel ranks" in n]
    assert f"rank {int(np.argmax(last))} finishes last in {last.max()} of {len(kept)} kept forwards" in note
    assert f"median {np.median(skew):.3f} ms" in note
    assert not [n for n in result.notes if "disagree" in n or "do not overlap" in n]


def test_json_has_ranks_on_each_model():
    out = CliRunner().invoke(cli, ["analyze", str(TARGET), str(DRAFT), "--format", "json"])
    assert out.exit_code == 0, out.output
    doc = json.loads(out.stdout)
    target, draft = doc["models"]
    assert (target["ranks"], draft["ranks"]) == (2, 1)
    assert "per_rank" not in draft
    assert {(r["phase"], r["rank"]) for r in target["per_rank"]} == {
        (p, r) for p in ("all", "prefill", "decode") for r in (0, 1)}
    for row in target["per_rank"]:  # each rank's figures against the raw rows
        kept = [s for s in raw_steps(TARGET)["steps"] if s["kept"] and row["phase"] in ("all", s["phase"])]
        r = row["rank"]
        assert row["forwards"] == len(kept) and row["last_forwards"] == sum(s["last"] == r for s in kept)
        assert row["wall_ms"] == pytest.approx(np.median([s["own_ms"][r] for s in kept]), abs=1e-6)
        assert row["lag_ms"] == pytest.approx(np.median([s["lag_ms"][r] for s in kept]), abs=1e-6)
        assert row["allreduce_ms"] == pytest.approx(np.median([s["all_reduce_ms"][r] for s in kept]), abs=1e-6)


def test_text_table_shows_the_ranks(raw):
    out = CliRunner().invoke(cli, ["analyze", str(TARGET), str(DRAFT)])
    assert out.exit_code == 0, out.output
    assert "Ranks:" in out.stdout and "Lag (ms)" in out.stdout
    for phase in ("all", "prefill", "decode"):
        kept = [s for s in raw["steps"] if s["kept"] and phase in ("all", s["phase"])]
        for r in (0, 1):
            last = sum(s["last"] == r for s in kept)
            cells = [TARGET.stem, phase, str(r), str(raw["pids"][r]), str(len(kept)),
                     f"{np.median([s['own_ms'][r] for s in kept]):.3f}",
                     f"{np.median([s['all_reduce_ms'][r] for s in kept]):.3f}",
                     f"{last} ({last / len(kept):.0%})", f"{np.median([s['lag_ms'][r] for s in kept]):.3f}"]
            rows = [line.split() for line in out.stdout.splitlines() if line.startswith(f"{TARGET.stem} ")]
            want = [c for cell in cells for c in cell.split()]
            assert any(_in_order(want, row) for row in rows), (want, rows)


def _in_order(want: list[str], row: list[str]) -> bool:
    """Whether the cells `want` appear in `row` in that order (other columns may lie between them)."""
    it = iter(row)
    return all(any(cell == got for got in it) for cell in want)


def test_forward_share_counts_each_forward_once(result, raw):
    # the analysis's own check, from tiny-llama-target.tp2.bench.json beside the trace
    share = result.forward_share.set_index("model").loc[result.target.name]
    iters = sorted((r[0], r[1]) for r in raw_sql(TARGET, RANGES_SQL) if r[3] == "nsys_cc:iteration")
    steps = [(s["start"], s["end"]) for s in raw["steps"] if not s["open"]]
    sums = [sum(e - s for s, e in steps if a <= s <= b) / 1e6 for a, b in iters]
    assert share["forward_ms"] == pytest.approx(np.median(sums), abs=1e-3)
    assert share["share_max"] < 1


def test_a_rank_missing_its_first_range_is_reported_and_matched_in_time(tmp_path, raw):
    """A copy of the fixture where rank 1 lost its first forward range: 1 step fewer, the note says so, and every
    remaining step still pairs ranges that overlap in time."""
    copy = tmp_path / "cut.sqlite"
    shutil.copyfile(TARGET, copy)
    with sqlite3.connect(copy) as con:
        con.execute(
            "DELETE FROM NVTX_EVENTS WHERE rowid = (SELECT e.rowid FROM NVTX_EVENTS e JOIN StringIds s "
            "ON s.id = e.textId WHERE s.value = 'model_executable()' AND (e.globalTid >> 24) & 16777215 = ? "
            "ORDER BY e.start LIMIT 1)", (raw["pids"][1],))
    res = cost_coefficient(str(copy), [str(DRAFT)])
    m = res.target
    assert len(m.forwards) == len(raw["steps"]) - 1
    (note,) = [n for n in res.notes if "disagree" in n]
    n = raw["counts"][0]
    assert f"rank 0 (pid {raw['pids'][0]}) {n}, rank 1 (pid {raw['pids'][1]}) {n - 1}" in note
    assert "left out 1 range(s) of rank 0" in note
    assert not [x for x in res.notes if "do not overlap" in x]
    assert m.forwards["wall_ns"].to_numpy() == pytest.approx([s["wall_ms"] * 1e6 for s in raw["steps"][1:]])


def test_match_pairs_neighbours_when_counts_differ():
    # Rank 0 steps every 10 from 0; rank 1 has two extra steps before (−20, −10) and misses the last one.
    s0 = np.arange(0, 100, 10)
    s1 = np.arange(-20, 90, 10) + 1
    process = np.r_[np.full(len(s0), 7), np.full(len(s1), 3)]  # rank 0 is the lower process id: 3
    start = np.r_[s0, s1]
    m = match(process, start, start + 5)
    assert m.counts == [len(s1), len(s0)] and m.offsets == [0, -2]
    steps = m.forward.reshape(-1)
    rank0 = steps[len(s0):]  # process 3 = rank 0 (s1)
    assert list(rank0) == [-1, -1, *range(9)]
    assert list(steps[:len(s0)]) == [*range(9), -1]
    assert m.overlapping.all()


def test_match_flags_steps_that_do_not_overlap():
    start = np.array([0, 100, 30, 130])
    end = np.array([10, 110, 40, 140])
    m = match(np.array([1, 1, 2, 2]), start, end)
    assert list(m.forward) == [0, 1, 0, 1] and not m.overlapping.any()


def test_forward_bounds_in_one_process_are_the_ranges():
    start, end = np.array([5, 1]), np.array([6, 3])
    s, e = forward_bounds(np.array([9, 9]), start, end)
    assert list(s) == [5, 1] and list(e) == [6, 3]
    s, e = forward_bounds(np.array([1, 2, 1, 2]), np.array([0, 2, 10, 11]), np.array([5, 4, 15, 19]))
    assert list(s) == [0, 10] and list(e) == [5, 19]


@pytest.mark.slow
def test_rank_lag_plot_draws_each_ranks_lag_per_kept_step(result, raw):
    from nsys_cc.report.figure_files import make_figures

    fig = make_figures(result)["rank_lag"]
    (ax,) = fig.axes
    kept = [s for s in raw["steps"] if s["kept"]]
    lines = ax.get_lines()
    assert len(lines) == 2
    for r, line in enumerate(lines):
        assert list(line.get_ydata()) == pytest.approx([s["lag_ms"][r] for s in kept], abs=1e-6)


@pytest.mark.slow
def test_no_rank_plot_for_one_process_models():
    from nsys_cc.report.figure_files import make_figures

    res = cost_coefficient(str(FIXTURES / "vllm" / "tiny-llama-target.sqlite"), [str(DRAFT)])
    assert res.target.ranks is None and res.ranks.empty
    assert "rank_lag" not in make_figures(res)


def test_ranks_with_different_payloads_are_noted(tmp_path, raw):
    """A copy of the fixture where rank 1's last forward carries another token count: phases follow rank 0, and the
    note counts the step."""
    copy = tmp_path / "payload.sqlite"
    shutil.copyfile(TARGET, copy)
    with sqlite3.connect(copy) as con:
        con.execute(
            "UPDATE NVTX_EVENTS SET int64Value = int64Value + 1000 WHERE rowid = (SELECT e.rowid FROM NVTX_EVENTS e "
            "JOIN StringIds s ON s.id = e.textId WHERE s.value = 'model_executable()' "
            "AND (e.globalTid >> 24) & 16777215 = ? ORDER BY e.start DESC LIMIT 1)", (raw["pids"][1],))
    res = cost_coefficient(str(copy), [str(DRAFT)])
    (note,) = [n for n in res.notes if "payloads" in n]
    assert f"1 of {len(raw['steps'])} forwards have ranks with different token-count payloads" in note
    kept = [s for s in raw["steps"] if s["kept"]]
    assert len(res.target.phase_rows("decode")) == sum(s["phase"] == "decode" for s in kept)
