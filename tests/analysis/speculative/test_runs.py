"""Speculative runs pooled over interleaved runs: step tables and counters of several runs made into
one, checked against values worked out by hand here."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from nsys_cc.analysis.forwards import steps
from nsys_cc.analysis.profile_dir.acceptance import AcceptanceStats
from nsys_cc.analysis.speculative import pooled as spec_runs


def _table(step_ms, iteration, drafts_in, latencies, kind="verify"):
    n = len(step_ms)
    frame = pd.DataFrame({"step": np.arange(n), "iteration": iteration, "kind": [kind] * n, "start_ns": np.arange(n),
                          "step_ms": step_ms, "target_ms": np.full(n, 2.0), "tokens": np.full(n, 2.0),
                          "draft_ms": np.full(n, 0.5), "draft_forwards": np.ones(n),
                          "other_ms": np.asarray(step_ms) - 2.5})[steps.STEP_COLUMNS]
    drafts = pd.DataFrame({"step": drafts_in, "wall_ms": np.full(len(drafts_in), 0.5),
                           "payload": np.ones(len(drafts_in))})
    return steps.StepTable(frame, drafts, "step ranges", "", int(np.max(iteration)) + 1, 3.0, 1, ("a note",),
                                 np.asarray(latencies))


def test_pooled_step_tables_keep_each_runs_steps_and_iterations_apart():
    a = _table([10.0, 11.0, 12.0], [0, 0, 1], [0, 1, 2, 3], [0.1, 0.2])  # a draft forward in a step left out (3)
    b = _table([20.0, 21.0], [0, 1], [0, 1], [0.3])
    pooled = spec_runs.pool_tables([a, b])
    assert list(pooled.steps["step"]) == [0, 1, 2, 4, 5]  # b's steps start after a's highest step id (3)
    assert list(pooled.steps["iteration"]) == [0, 0, 1, 2, 3]
    assert list(pooled.steps["run"]) == [1, 1, 1, 2, 2]  # runs counted 1 … N, as everywhere
    assert list(pooled.draft_forwards["step"]) == [0, 1, 2, 3, 4, 5]
    assert pooled.iterations == 4 and list(pooled.latencies_s) == [0.1, 0.2, 0.3]
    assert pooled.notes == ("a note",)
    assert list(pooled.of_kind("verify")["step_ms"]) == [10.0, 11.0, 12.0, 20.0, 21.0]


def test_counters_of_several_runs_add_up():
    one = AcceptanceStats(alpha=0.25, per_position=(), num_drafts=10, num_draft_tokens=20, num_accepted=5,
                          accepted_per_position=(4, 1))
    two = AcceptanceStats(alpha=0.5, per_position=(), num_drafts=10, num_draft_tokens=20, num_accepted=10,
                          accepted_per_position=(7, 3))
    both = spec_runs.pool_stats([one, two])
    assert (both.num_drafts, both.num_draft_tokens, both.num_accepted) == (20, 40, 15)
    assert both.accepted_per_position == (11, 4) and both.alpha == pytest.approx(15 / 40)
    assert both.alpha_iid == pytest.approx(15 / (15 + 20 - 4))
    assert spec_runs.pool_stats([one, None]) is None  # a run without counters: α from the steps instead


def test_a_run_that_replays_another_runs_counters_is_counted_once():
    one = AcceptanceStats(alpha=0.25, per_position=(), num_drafts=10, num_draft_tokens=20, num_accepted=5,
                          accepted_per_position=(4, 1))
    two = AcceptanceStats(alpha=0.5, per_position=(), num_drafts=10, num_draft_tokens=20, num_accepted=10,
                          accepted_per_position=(7, 3))
    again = AcceptanceStats(**{**one.__dict__})
    pooled = spec_runs.pool_stats([one, again, two])
    assert (pooled.num_drafts, pooled.num_accepted, pooled.accepted_per_position) == (20, 15, (11, 4))
    assert spec_runs.replayed_runs([one, again, two]) == 1 and spec_runs.replayed_runs([one, two]) == 0


def test_the_fixture_runs_replay_each_others_counters_and_tune_counts_them_once():
    # fixtures/tune: the two interleaved runs of a cell, one process each, seeded alike by vLLM's benchmark
    import json

    from nsys_cc.analysis.tune import directories as tune

    cell = FIXTURES / "tune" / "a50" / "bs8"
    docs = [json.loads((cell / f"run-{k}" / "pair-draft.spec-g3.metrics.json").read_text()) for k in (1, 2)]
    drafts = [next(m["value"] for m in d["metrics"] if m["name"] == "vllm:spec_decode_num_drafts") for d in docs]
    assert docs[0]["metrics"] == docs[1]["metrics"]
    pooled, replayed = tune._counters(cell, "pair-draft.spec-g3")  # what read_cells gives the B = 8 γ = 3 cell
    assert pooled is not None and pooled.num_drafts == drafts[0]  # once, not 2 × drafts[0]
    assert replayed == 1


# a read of the whole a50 grid (~2.5 s): in `make test`; the loop keeps the counters counted once above and
# tune's notes on hand-made cells
# (tests/analysis/tune/test_model.py::test_replayed_counters_are_said_for_every_cell_or_cell_by_cell)
@pytest.mark.slow
def test_tune_says_which_cells_of_the_fixture_runs_replay_their_counters():
    from nsys_cc.analysis.tune import directories as tune_dirs, schedule as tune_schedule

    cells = [c for c in tune_dirs.read_cells(FIXTURES / "tune" / "a50")
             if (c.batch_size, c.gamma) in ((8, 3), (1, 1), (1, 3), (8, 1))]
    result = tune_schedule.fit_schedule(cells, draws=10, max_batch_size=8)
    note = next(n for n in result.notes if "replay another run's exactly" in n)
    assert note.startswith("in every cell the spec-decode counters of 1 run(s) replay")  # both runs alike, each cell
    # a cell without a replay among them: the cells that replay are named
    import dataclasses

    mixed = [dataclasses.replace(c, replayed_runs=0) if (c.batch_size, c.gamma) == (1, 1) else c for c in cells]
    note = next(n for n in tune_schedule.fit_schedule(mixed, draws=10, max_batch_size=8).notes if "replay another" in n)
    assert "of 3 cell(s)" in note and "B=8 γ=3 (1 of its runs)" in note and "B=1 γ=1" not in note


# ---- real interleaved runs with speculative engines (fixtures/interleaved/spec) ------------------------------------

import json  # noqa: E402
import math  # noqa: E402
import sqlite3  # noqa: E402
import statistics  # noqa: E402

from conftest import FIXTURES  # noqa: E402

SPEC = FIXTURES / "interleaved" / "spec"
TARGET, DRAFT, OUTPUT_LEN = "tiny-llama-target", "tiny-llama-draft-xs", 6
ENGINES = [spec_runs.SpecEngine(f"{DRAFT}.spec-g{g}", DRAFT, g) for g in (1, 2, 3)]


def _raw(sqlite):
    with sqlite3.connect(f"file:{sqlite}?mode=ro", uri=True) as conn:
        return conn.execute(
            "SELECT coalesce(e.text, s.value), e.start, e.\"end\", e.int64Value FROM NVTX_EVENTS e "
            "LEFT JOIN StringIds s ON s.id = e.textId WHERE e.eventType = 59 ORDER BY e.start").fetchall()


def _steps(sqlite, label: str) -> list[tuple[str, float, int]]:
    """(kind, step ms, iteration start) of the measured steps of engine `label`, from the raw rows: a step is an
    `nsys_cc:step` range inside the engine's ranges and inside a measured iteration; its kind is its target forward's
    (one token: decode, more: verify)."""
    rows = _raw(sqlite)
    windows = [(s, e) for n, s, e, _ in rows if n == f"nsys_cc:engine {label}"]
    iters = [(s, e) for n, s, e, _ in rows if n == "nsys_cc:iteration" and any(a <= s <= b for a, b in windows)]
    fwd = [(s, p) for n, s, e, p in rows if n == "model_executable()"]
    out = []
    for n, s, e, _ in rows:
        it = next((a for a, b in iters if a <= s <= b), None)
        if n != "nsys_cc:step" or it is None:
            continue
        tokens = [p for fs, p in fwd if s <= fs <= e]
        if len(tokens) == 1 and tokens[0] <= 4:
            out.append(("decode" if tokens[0] == 1 else "verify", (e - s) / 1e6, it))
    return out


@pytest.mark.slow
def test_speculative_engines_of_interleaved_runs_are_measured_against_the_same_runs_plain_target():
    runs = [(SPEC / f"run-{k}" / "trace.sqlite", SPEC / f"run-{k}") for k in (1, 2)]
    analysis = spec_runs.analyze_runs(runs, TARGET, ENGINES, output_len=OUTPUT_LEN)
    table = analysis.table.set_index("name")
    plain = {sqlite: [ms for kind, ms, _ in _steps(sqlite, TARGET) if kind == "decode"] for sqlite, _ in runs}
    for e in ENGINES:
        per_run = {sqlite: [(ms, it) for kind, ms, it in _steps(sqlite, e.label) if kind == "verify"]
                   for sqlite, _ in runs}
        steps = [x for sqlite, _ in runs for x in per_run[sqlite]]
        per_iter = statistics.mean([sum(1 for _, it in steps if it == i) for i in {it for _, it in steps}])
        tps = (OUTPUT_LEN - 1) / per_iter
        row = table.loc[e.label]
        assert row["tokens_per_step"] == pytest.approx(tps)
        # pooled: each run's step ratio (its own plain decode steps against its own verify steps), then their
        # geometric mean, which lies between the runs'
        ratios = [statistics.median(plain[sqlite]) / statistics.median([ms for ms, _ in per_run[sqlite]])
                  for sqlite, _ in runs]
        assert row["measured_speedup"] == pytest.approx(tps * math.sqrt(ratios[0] * ratios[1]))
        assert tps * min(ratios) <= row["measured_speedup"] <= tps * max(ratios)
        # two runs: no interval, each run's own value in `runs`
        assert math.isnan(row["measured_speedup_ci_low"]) and math.isnan(row["measured_speedup_ci_high"])
        mine = analysis.runs[(analysis.runs["name"] == e.label) & (analysis.runs["figure"] == "measured_speedup")]
        assert sorted(mine["value"]) == pytest.approx(sorted(tps * r for r in ratios))
        # the counters: each engine's own, both runs summed
        dumps = [json.loads((SPEC / f"run-{k}" / f"{e.label}.metrics.json").read_text()) for k in (1, 2)]
        drafts = sum(next(m["value"] for m in d["metrics"] if m["name"] == "vllm:spec_decode_num_drafts")
                     for d in dumps)
        tokens = sum(next(m["value"] for m in d["metrics"] if m["name"] == "vllm:spec_decode_num_draft_tokens")
                     for d in dumps)
        assert tokens == e.gamma * drafts  # this engine proposed γ tokens a step: the counters are its own
        accepted = sum(next(m["value"] for m in d["metrics"] if m["name"] == "vllm:spec_decode_num_accepted_tokens")
                       for d in dumps)
        full = sum(next(m["values"] for m in d["metrics"]
                        if m["name"] == "vllm:spec_decode_num_accepted_tokens_per_pos")[-1] for d in dumps)
        assert row["alpha"] == pytest.approx(accepted / (accepted + drafts - full))  # i.i.d. α of the summed counts
        possible = row["measured_speedup"] <= tps and not (row["alpha"] == 0 and row["measured_speedup"] > 1)
        assert (row["measurement_problem"] == "") == possible
    assert any("2 runs give no interval" in n for n in analysis.notes)
    assert table.loc[f"{DRAFT}.spec-g2", "held_out_fit_gammas"] == "1,3"
    assert math.isfinite(table.loc[f"{DRAFT}.spec-g2", "forecast_tolerance"])


# the CLI's JSON of the directory against spec_runs' reader (~2 s): in `make test`; the loop keeps the chain
# link by link: the CLI's numbers = analyze's of the directory
# (test_front.py::test_interleaved_speculative_runs_give_the_numbers_the_cli_prints), a directory of interleaved runs =
# its runs written out
# (tests/e2e/test_notebook_calls.py::test_a_profile_directory_of_interleaved_runs_is_read_as_it_is) and those =
# spec_runs' reader
# (tests/e2e/test_notebook_calls.py::test_interleaved_runs_with_speculative_engines_pool_them_as_the_cli_does)
@pytest.mark.slow
def test_analyze_reads_a_speculative_profile_directory():
    from click.testing import CliRunner

    from nsys_cc.cli import cli

    res = CliRunner().invoke(cli, ["analyze", str(SPEC), "--format", "json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    runs = [(SPEC / f"run-{k}" / "trace.sqlite", SPEC / f"run-{k}") for k in (1, 2)]
    direct = spec_runs.analyze_runs(runs, TARGET, ENGINES, output_len=None)
    assert [r["name"] for r in doc["speculative"]] == [e.label for e in ENGINES]
    assert [r["measured_speedup"] for r in doc["speculative"]] == pytest.approx(
        list(direct.table["measured_speedup"]))


# ---- tokens per step and α from whole requests' lives, the last step censored ---------------------------------------
import random  # noqa: E402

from nsys_cc.analysis.speculative import runs as runs_mod  # noqa: E402


def _simulate(alpha: float, gamma: int, tokens: int, requests: int, seed: int) -> list[int]:
    """Each request's verify steps to make `tokens` tokens: a step makes 1 + the drafts accepted in a row (each with
    chance α, at most γ), the last step cut to what is left."""
    rnd = random.Random(seed)
    lives = []
    for _ in range(requests):
        left, n = tokens, 0
        while left > 0:
            k = 1
            while k <= gamma and rnd.random() < alpha:
                k += 1
            left -= min(k, left)
            n += 1
        lives.append(n)
    return lives


@pytest.mark.parametrize("alpha, gamma, tokens", [(0.7, 3, 11), (0.5, 4, 30), (0.9, 5, 20), (0.3, 2, 7)])
def test_the_censored_alpha_finds_the_acceptance_the_naive_ratio_misses(alpha, gamma, tokens):
    lives = _simulate(alpha, gamma, tokens, 600, seed=11)
    got = runs_mod.censored_alpha(lives, tokens, gamma)
    assert got == pytest.approx(alpha, abs=0.04)
    naive = tokens * len(lives) / sum(lives)  # output tokens ÷ steps: the cut last steps read as rejections
    true_e = (1 - alpha ** (gamma + 1)) / (1 - alpha)
    assert naive < true_e  # what the old figure said: too low


def test_no_alpha_explains_impossible_step_counts():
    assert math.isnan(runs_mod.censored_alpha([3], 20, 4))  # 3 steps of at most 5 tokens cannot make 20
    assert math.isnan(runs_mod.censored_alpha([12], 10, 4))  # each step makes a token at least


def _lives_steps(rows: list[tuple[str, float]]) -> pd.DataFrame:
    return pd.DataFrame({"kind": [k for k, _ in rows], "batch": [b for _, b in rows],
                         "start_ns": list(range(len(rows)))})


def test_a_requests_life_is_read_from_its_shrinking_batch():
    lives, _ = runs_mod.request_lives(_lives_steps([("prefill", 3), ("verify", 3), ("verify", 2), ("verify", 2),
                                              ("verify", 1), ("prefill", 1), ("verify", 1)]))
    assert sorted(lives) == [1, 1, 3, 4]
    for rows, why in (([("verify", 2), ("verify", 2)], "no prefill"),
                      ([("prefill", 1), ("verify", 1), ("verify", 3)], "join without a prefill"),
                      ([("prefill", 2), ("mixed", 3)], "mixed step"),
                      ([("verify", 1), ("prefill", 1), ("verify", 1)], "first step is no prefill")):
        lives, said = runs_mod.request_lives(_lives_steps(rows))
        assert lives is None and why in said
