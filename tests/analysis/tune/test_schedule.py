"""The schedule check compares like with like (the measured cells are static-batch benchmarks,
so the benchmark workload's schedule is the one they check; a server's steady-state schedule is shown beside it),
and the static-batch forecast of steps per iteration against the steps the fixture traces hold (plain SQL)."""

from __future__ import annotations

import json
import math
import sqlite3
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import REPO
from nsys_cc.analysis.tune import directories as tune_dirs, model as tune_model, schedule as tune_schedule
from nsys_cc.analysis.tune.keys import CellKey
from nsys_cc.errors import InputError

FIX = REPO / "fixtures" / "tune"
DESIGN_B, DESIGN_G = [CellKey(1), CellKey(8)], [1, 3]


@pytest.fixture(scope="module")
def a99_cells():
    if not (FIX / "a99" / "bs1").is_dir():
        pytest.skip("fixtures/tune/a99 missing: make fixtures")
    return tune_dirs.read_cells(FIX / "a99")


def _steps_by_sql(cell_dir: Path, label: str) -> list[int]:
    """Target forwards after the prefill in each measured iteration of engine `label`: plain SQL on every run's trace
    (vLLM's `model_executable()` ranges inside the profile's `nsys_cc:iteration` ranges of that engine)."""
    out: list[int] = []
    q = """with r as (select e.start, e.end, s.value v from NVTX_EVENTS e join StringIds s on s.id = e.textId)
           select (select count(*) from r x where x.v = 'model_executable()' and x.start >= it.start
                   and x.end <= it.end)
           from r it join r eng on it.start >= eng.start and it.end <= eng.end
           where it.v = 'nsys_cc:iteration' and eng.v = 'nsys_cc:engine ' || ?"""
    for db in sorted(cell_dir.glob("run-*/trace.sqlite")):
        con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
        try:
            out += [n - 1 for (n,) in con.execute(q, (label,))]
        finally:
            con.close()
    return out


def _mc_steps(rates: list[float], gamma: int, batch: int, tokens: int, n: int = 20000, seed: int = 1) -> float:
    """Mean steps of a static batch, by brute-force simulation (not the exact sum the code uses): each sequence draws
    its accepted prefix per step from the per-position rates until it has `tokens` tokens; the batch steps until the
    slowest is done."""
    rng = np.random.default_rng(seed)
    p_ge = [1.0, *rates[:gamma], 0.0]
    p = np.array([p_ge[j] - p_ge[j + 1] for j in range(gamma + 1)])
    k = rng.choice(gamma + 1, size=(n, batch, tokens), p=p / p.sum()) + 1
    steps = (np.cumsum(k, axis=2) >= tokens).argmax(axis=2) + 1
    return float(steps.max(axis=1).mean())


@pytest.mark.slow
def test_forecast_steps_per_iteration_match_the_steps_in_the_fixture_traces(a99_cells):
    """α ≈ 1 pair, 8 output tokens (7 after the prefill): B=16 γ=3 needs 2 steps per sequence when every draft is
    accepted, but the trace shows 3 (a straggler); the forecast from the cell's own counters must say so. E(γ)
    alone (no straggler, no cut last step) would say 7 / E(3) ≈ 1.8 and fail this check."""
    seen = 0
    for c in a99_cells:
        measured = _steps_by_sql(Path(c.source), c.label)
        assert len(measured) >= 2, ((c.batch_size, c.gamma), measured)
        own = tune_model.tokens_model([c])  # this cell's own per-position counters: what its iterations drew
        n = c.output_len - 1
        assert n == 7
        forecast = n / own.static_batch(c.gamma, c.batch_size, n)
        assert forecast == pytest.approx(np.mean(measured), abs=0.5), ((c.batch_size, c.gamma), forecast, measured)
        # the exact sum agrees with a brute-force simulation of the same batch
        assert forecast == pytest.approx(_mc_steps(list(own.rates), c.gamma, c.batch_size, n), abs=0.03)
        seen += 1
    assert seen == 6
    big = next(c for c in a99_cells if (c.batch_size, c.gamma) == (16, 3))
    assert np.mean(_steps_by_sql(Path(big.source), big.label)) == 3
    assert 7 / tune_model.tokens_model([big]).expected(3) < 2.0  # what a steady-state count would have said


@pytest.fixture(scope="module")
def a99_result(a99_cells):
    fitted, held = tune_schedule.split_design(a99_cells, DESIGN_B, DESIGN_G)
    return tune_schedule.fit_schedule(fitted, held, draws=40), a99_cells


@pytest.mark.slow
def test_the_schedule_check_uses_the_benchmark_workloads_gamma(a99_result):
    r, cells = a99_result
    by = {(f["batch_size"], f["gamma"]): f for f in r.forecast}
    tokens = tune_model.tokens_model(cells)
    server_differs = 0
    for row in r.schedule_check:
        b = row["batch_size"]
        # the benchmark's choice, computed here: tokens per step of a static batch of 7 tokens by simulation,
        # times the model's step ratio; γ = 0 unless some γ forecasts more than 1
        s = {}
        for g in range(1, r.max_gamma + 1):
            ratio = by[(b, g)]["decode_step_ms"] / by[(b, g)]["step_ms"]
            s[g] = 7 / _mc_steps(list(tokens.rates) + [tokens.rate(i) for i in range(3, 8)], g, b, 7, n=4000) * ratio
        g_best = max(s, key=lambda g: s[g])
        want = g_best if s[g_best] > 1 else 0
        ranked = sorted(s.values())
        if len(ranked) > 1 and abs(ranked[-1] - ranked[-2]) < 0.01 * ranked[-1]:
            continue  # a near tie: the simulation's noise could pick either
        assert row["workload"] == "benchmark"
        assert row["schedule_gamma"] == want, (b, s)
        # the measured side: the cells' own measured speedups (γ = 0: the plain target, 1×)
        here = {c.gamma: c.measured_speedup for c in cells if c.batch_size == b} | {0: 1.0}
        assert row["best_fixed_measured"] == pytest.approx(max(here.values()))
        if want == 0:  # K = 0 is speculation proposing nothing, not the plain target: this design measured no price
            assert math.isnan(row["schedule_measured"]) and math.isnan(row["gap"])
        elif want in here:
            assert row["schedule_measured"] == pytest.approx(here[want])
            assert row["gap"] == pytest.approx(here[want] / max(here.values()) - 1)
        # the steady-state γ: highest steady-state forecast, shown beside
        steady = {g: by[(b, g)]["speedup"] for g in range(1, r.max_gamma + 1)}
        gs = max(steady, key=lambda g: steady[g])
        assert row["server_gamma"] == (gs if steady[gs] > 1 else 0)
        server_differs += row["server_gamma"] != row["schedule_gamma"]
    # on these 8-token cells the server's long γ is not what the benchmark's static batch wants: the old check
    # (the server's γ against the measured cells) would have compared unlike things here
    assert server_differs >= 1


@pytest.mark.slow
def test_both_schedules_are_given_and_workload_chooses_the_one_written(a99_cells):
    fitted, held = tune_schedule.split_design(a99_cells, DESIGN_B, DESIGN_G)
    server = tune_schedule.fit_schedule(fitted, held, draws=20)
    bench = tune_schedule.fit_schedule(fitted, held, draws=20, workload="benchmark")
    assert server.schedules == bench.schedules
    assert server.schedule == server.schedules["server"] != bench.schedule == bench.schedules["benchmark"]
    # each workload's table is its forecast's best γ per batch size
    for res, key in ((server, "speedup"), (bench, "speedup_benchmark")):
        best = []
        for b in range(1, res.max_batch_size + 1):
            row = {f["gamma"]: f[key] for f in res.forecast if f["batch_size"] == b and f["gamma"] >= 1}
            g = max(row, key=lambda k: row[k])
            best.append(g if row[g] > 1 else 0)
        assert res.schedule == tune_schedule.schedule_ranges(best)
    doc = bench.to_dict()
    assert doc["workload"] == "benchmark"
    # the fixture's cells are of two runs (no interval): not recommended, the fitted tables kept apart
    assert doc["trusted"] is False and doc["num_speculative_tokens_per_batch_size"] is None
    assert doc["fitted_num_speculative_tokens_per_batch_size"] == doc["schedules"]["benchmark"][
        "fitted_num_speculative_tokens_per_batch_size"] == bench.schedule
    assert doc["schedules"]["server"]["speculative_config"] is None
    assert json.loads(server.speculative_config(untrusted=True) or "{}")["num_speculative_tokens_per_batch_size"] \
        == server.schedule
    with pytest.raises(InputError):
        tune_schedule.fit_schedule(fitted, held, draws=5, workload="steady")


def _cli(*args: str) -> subprocess.CompletedProcess:
    code = "import sys; from nsys_cc.cli import main; main(sys.argv[1:])"
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=600)


# The CLI's end of the test above, in a real process reading the whole a99 grid again: `make test` only.
@pytest.mark.slow
def test_cli_workload(a99_cells):
    p = _cli("tune", str(FIX / "a99"), "--batch-size", "1,8", "--speculate", "1,3", "--workload", "benchmark",
             "--format", "json")
    assert p.returncode == 3, p.stderr  # two runs a cell: not recommended
    doc = json.loads(p.stdout)
    assert doc["workload"] == "benchmark"
    key = "fitted_num_speculative_tokens_per_batch_size"
    assert doc[key] == doc["schedules"]["benchmark"][key] != doc["schedules"]["server"][key]
    bad = _cli("tune", str(FIX / "a99"), "--workload", "steady")
    assert bad.returncode == 2 and "Traceback" not in bad.stderr


@pytest.mark.slow
def test_a_schedules_k0_is_priced_with_the_measured_overhead_never_as_the_plain_target(a99_cells):
    """A schedule's K = 0 keeps speculation on, proposing nothing: its speedup in the schedule check is the plain
    decode step measured at the cell ÷ (that step + the K = 0 overhead measured there), worked out here; the best fixed
    γ = 0 stays the plain target (1×). Without a measured overhead it is unknown, not 1×."""
    from nsys_cc.analysis.tune.verdict import K0Price

    keys = sorted({c.key for c in a99_cells})
    price = K0Price(tuple((k.batch_size, k.input_len, 2.5) for k in keys))
    everywhere_zero = [0] * 64
    priced = tune_schedule.schedule_check(a99_cells, everywhere_zero, k0=price)
    unpriced = tune_schedule.schedule_check(a99_cells, everywhere_zero)
    for row, bare in zip(priced, unpriced):
        key = CellKey.from_dict(row)
        decode = float(np.median([c.decode_step_ms for c in a99_cells if c.key == key]))
        assert row["schedule_gamma"] == 0 and row["schedule_measured"] == pytest.approx(decode / (decode + 2.5))
        assert row["schedule_measured"] < 1 and row["best_fixed_measured"] >= 1.0
        assert math.isnan(bare["schedule_measured"])
