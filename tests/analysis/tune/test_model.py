"""γ per batch size — the cost model across B, tokens per step from the per-position counters, the schedule
vLLM takes, the held-out checks; on hand-made cells (the oracle is the formula written out) and on fixtures/tune (real
interleaved runs at B 1, 4, 8, 16 made by `make fixtures`)."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest

from conftest import REPO, cli_in_process, unchanged
from nsys_cc.analysis.profile_dir.acceptance import AcceptanceStats
from nsys_cc.analysis.tune import directories as tune_dirs, model as tune_model, schedule as tune_schedule
from nsys_cc.analysis.tune.keys import CellKey
from nsys_cc.errors import InputError
from nsys_cc.formats import tune_json

FIX = REPO / "fixtures" / "tune"


def _stats(drafts: int, per_pos: list[int]) -> AcceptanceStats:
    acc = sum(per_pos)
    return AcceptanceStats(alpha=acc / (drafts * len(per_pos)), per_position=tuple(p / drafts for p in per_pos),
                           num_drafts=drafts, num_draft_tokens=drafts * len(per_pos), num_accepted=acc,
                           accepted_per_position=tuple(per_pos))


# A known cost model: every cell's medians written from it, so the fit must give these coefficients back.
TRUE = dict(p=(5.0, 0.5), d=(0.6, 0.1), v=(4.0, 0.2), o=(3.0, 0.5, 0.2))


def _ci5(x: float) -> tuple[float, float]:
    return (0.95 * x, 1.05 * x)


def _cell(b: int, g: int, stats: AcceptanceStats | None = None, speedup: float = 1.0) -> tune_model.Cell:
    p, d, v, o = TRUE["p"], TRUE["d"], TRUE["v"], TRUE["o"]
    draft, verify = d[0] + d[1] * b, v[0] + v[1] * b * (g + 1)
    other, decode = o[0] + o[1] * b + o[2] * b * g, p[0] + p[1] * b
    # each median ±5 %, as cells of three runs or more have (two runs give no interval: the forecast none either)
    return tune_model.Cell(key=CellKey(b), gamma=g, draft_forward_ms=draft, verify_ms=verify, other_ms=other,
                  decode_step_ms=decode, measured_speedup=speedup, measured_ci=_ci5(speedup), acceptance=stats,
                  draft_forward_ci=_ci5(draft), verify_ci=_ci5(verify), other_ci=_ci5(other),
                  decode_step_ci=_ci5(decode))


DESIGN = [(1, 1), (1, 3), (8, 1), (8, 3)]


def test_the_fit_gives_back_the_model_the_cells_were_made_from():
    m = tune_model.fit_cost([_cell(b, g) for b, g in DESIGN])
    assert m.decode == pytest.approx(TRUE["p"], abs=1e-9)
    assert m.draft == pytest.approx(TRUE["d"], abs=1e-9)
    assert m.verify == pytest.approx(TRUE["v"], abs=1e-9)
    assert m.other == pytest.approx(TRUE["o"], abs=1e-9)
    # step(B=16, γ=2) written out: 2·(0.6 + 1.6) + (4 + 0.2·48) + (3 + 8 + 6.4)
    assert float(m.step_ms(16, 2)) == pytest.approx(2 * 2.2 + 13.6 + 17.4)


def test_a_falling_slope_is_noise_and_is_fitted_flat():
    cells = [_cell(b, g) for b, g in DESIGN]
    # the draft forward measured faster at B = 8 than at B = 1 (load): no negative per-sequence cost
    cells = [tune_model.Cell(**{**c.__dict__, "draft_forward_ms": 1.0 if c.batch_size == 1 else 0.8}) for c in cells]
    m = tune_model.fit_cost(cells)
    assert m.draft == pytest.approx((0.9, 0.0))


def test_tokens_per_step_from_the_per_position_counters_with_the_iid_tail():
    # γ = 3: 100 drafts, first 1/2/3 accepted 50/25/12 times; γ = 1: 100 drafts, 48 accepted.
    tok = tune_model.tokens_model([_cell(1, 3, _stats(100, [50, 25, 12])), _cell(8, 1, _stats(100, [48]))])
    assert tok.rates == pytest.approx((98 / 200, 25 / 100, 12 / 100))
    # i.i.d. α: accepted ÷ (accepted + drafts that met a rejection) = (87 + 48) ÷ (135 + (100 − 12) + (100 − 48))
    alpha = 135 / (135 + 88 + 52)
    assert tok.alpha == pytest.approx(alpha)
    assert tok.expected(2) == pytest.approx(1 + 0.49 + 0.25)
    # past position 3 the rates go on i.i.d.: a_3 = a_2·α, a_4 = a_2·α²
    assert tok.expected(5) == pytest.approx(1 + 0.49 + 0.25 + 0.12 + 0.12 * alpha + 0.12 * alpha ** 2)
    assert tok.expected_iid(2) == pytest.approx(1 + alpha + alpha ** 2)


def test_rates_never_rise_with_the_position():
    tok = tune_model.tokens_model([_cell(1, 2, _stats(10, [3, 5]))])  # 5 of 10 accepted in full but only 3 first: noise
    assert tok.rates == pytest.approx((0.3, 0.3))


def test_the_schedule_takes_the_best_gamma_per_batch_size_and_0_where_none_pays():
    cells = [_cell(b, g, _stats(200, [180, 160, 140][:g])) for b, g in DESIGN]
    r = tune_schedule.fit_schedule(cells, max_batch_size=64, max_gamma=8, draws=30)
    by = {(f["batch_size"], f["gamma"]): f["speedup"] for f in r.forecast if f["gamma"] >= 1}
    assert len(r.forecast) == 64 * 9  # γ 0…8: γ = 0 is K = 0's price, NaN here (not measured)
    assert all(math.isnan(f["speedup"]) for f in r.forecast if f["gamma"] == 0)
    for b in range(1, 65):
        best = max(range(1, 9), key=lambda g: by[(b, g)])
        want = best if by[(b, best)] > 1 else 0
        got = next(g for s, e, g in r.schedule if s <= b <= e)
        assert got == want, b
    assert r.schedule[0][0] == 1 and r.schedule[-1][1] == 64
    for (_, e1, _), (s2, _, _) in zip(r.schedule, r.schedule[1:]):
        assert s2 == e1 + 1
    if r.no_gain_from is not None:
        assert all(g == 0 for s, e, g in r.schedule if e >= r.no_gain_from)
    # an interval around every forecast
    row = next(f for f in r.forecast if f["batch_size"] == 4 and f["gamma"] == 2)
    assert row["speedup_ci_low"] < row["speedup"] < row["speedup_ci_high"]


def test_held_out_cells_are_checked_against_their_measurement():
    fitted = [_cell(b, g, _stats(200, [100, 50, 25][:g])) for b, g in DESIGN]
    tok = tune_model.tokens_model(fitted)
    m = tune_model.fit_cost(fitted)
    truth = tok.expected(2) * float(m.decode_step_ms(4)) / float(m.step_ms(4, 2))
    held = [_cell(4, 2, None, speedup=truth * 1.2)]
    r = tune_schedule.fit_schedule(fitted, held, max_batch_size=8, draws=30)
    (c,) = r.checks
    assert c["forecast"] == pytest.approx(truth)
    assert c["error"] == pytest.approx(1 / 1.2 - 1)
    assert not c["within_10pct"]


def test_speculative_config_names_the_largest_gamma_and_the_schedule():
    r = tune_schedule.fit_schedule([_cell(b, g, _stats(200, [199, 198, 197][:g])) for b, g in DESIGN],
                                   max_batch_size=16, draws=10, draft="pair-draft")
    cfg = json.loads(r.speculative_config() or "{}")
    assert cfg["num_speculative_tokens_per_batch_size"] == r.schedule
    assert cfg["num_speculative_tokens"] == max(g for _, _, g in r.schedule) > 0
    assert cfg["model"] == "pair-draft" and cfg["method"] == "draft_model"


def test_schedule_ranges():
    assert tune_schedule.schedule_ranges([3, 3, 1, 1, 1, 0]) == [[1, 2, 3], [3, 5, 1], [6, 6, 0]]


def test_bad_input_is_one_line():
    with pytest.raises(InputError):
        tune_schedule.fit_schedule([], max_batch_size=4)


def test_schedule_passes_vllms_validator(vllm_module):
    from vllm.v1.spec_decode.dynamic.utils import (
        build_dynamic_sd_schedule_lookup,
        validate_and_normalize_dynamic_sd_schedule,
    )

    r = tune_schedule.fit_schedule([_cell(b, g, _stats(200, [190, 180, 170][:g])) for b, g in DESIGN],
                                   max_batch_size=32, draws=10)
    assert validate_and_normalize_dynamic_sd_schedule(r.schedule) == [tuple(x) for x in r.schedule]
    k = max(g for _, _, g in r.schedule)
    if k:
        dense = build_dynamic_sd_schedule_lookup(r.schedule, 32, k)
        for s, e, g in r.schedule:
            assert all(dense[b] == g for b in range(s, e + 1))


def test_replayed_counters_are_said_for_every_cell_or_cell_by_cell():
    # cells made by hand, each with a run whose counters replay another's (the fixture's runs do:
    # tests/analysis/speculative/test_runs.py); the note says it once when every cell has as many, else names the cells
    import dataclasses

    cells = [dataclasses.replace(_cell(b, g, _stats(200, [190, 180, 170][:g])), replayed_runs=1) for b, g in DESIGN]
    note = next(n for n in tune_schedule.fit_schedule(cells, draws=10, max_batch_size=8).notes if "replay another" in n)
    assert note.startswith("in every cell the spec-decode counters of 1 run(s) replay another run's exactly")
    mixed = [dataclasses.replace(c, replayed_runs=0) if (c.batch_size, c.gamma) == (1, 1) else c for c in cells]
    note = next(n for n in tune_schedule.fit_schedule(mixed, draws=10, max_batch_size=8).notes if "replay another" in n)
    assert "of 3 cell(s)" in note and "B=8 γ=3 (1 of its runs)" in note and "B=1 γ=1" not in note
    assert not any("replay another" in n for n in tune_schedule.fit_schedule(
        [dataclasses.replace(c, replayed_runs=0) for c in cells], draws=10, max_batch_size=8).notes)


# --- the fixtures: real interleaved runs ------------------------------------------------------------------------

def _cli(*args: str) -> subprocess.CompletedProcess:
    code = "import sys; from nsys_cc.cli import main; main(sys.argv[1:])"
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def a50_json(tmp_path_factory):
    if not (FIX / "a50").is_dir():
        pytest.fail("fixtures/tune/a50 missing: run make fixtures")
    out = tmp_path_factory.mktemp("tune")
    # in this process (`conftest.cli_in_process`: a real one costs ~1 s of CPU more); the real-process tune is
    # test_reading_leaves_the_fixtures_as_they_were's, in `make test`
    with unchanged(FIX / "a50"):  # the fixtures as they were after a read that writes a report (-o) elsewhere
        p = cli_in_process("tune", str(FIX / "a50"), "--batch-size", "1,8", "--speculate", "1,3",
                           "--max-batch-size", "16", "--format", "json", "-o", str(out))
    # two runs a cell: no interval on the cells' medians, so none on the forecast, and the schedule is not
    # recommended (exit code 3, the reasons in the JSON)
    assert p.returncode == 3, p.stderr
    return json.loads(p.stdout), out


@pytest.mark.slow
def test_fixture_counters_pooled_as_vllm_counted_them(a50_json):
    doc, _ = a50_json
    # oracle: the per-position counters summed from every run's metrics dump, by hand
    acc: dict[int, int] = {}
    drafts: dict[int, int] = {}
    for dump in sorted(FIX.glob("a50/bs*/run-*/*.spec-g*.metrics.json")):
        metrics = {m["name"]: m for m in json.loads(dump.read_text())["metrics"]}
        pp = metrics["vllm:spec_decode_num_accepted_tokens_per_pos"]["values"]
        n = metrics["vllm:spec_decode_num_drafts"]["value"]
        for i, a in enumerate(pp):
            acc[i] = acc.get(i, 0) + a
            drafts[i] = drafts.get(i, 0) + n
    raw = [acc[i] / drafts[i] for i in sorted(acc)]
    want = [min(raw[: i + 1]) for i in range(len(raw))]
    assert doc["tokens"]["per_position"] == pytest.approx(want)
    assert 0.4 < doc["tokens"]["alpha_iid"] < 0.6  # the pair's α ≈ 0.5 built in


@pytest.mark.slow
def test_fixture_json_holds_the_schedule_forecast_and_checks(a50_json):
    doc, out = a50_json
    assert {(c["batch_size"], c["gamma"]) for c in doc["fitted_cells"]} == set(DESIGN)
    assert {(c["batch_size"], c["gamma"]) for c in doc["checks"]} == {(4, 2), (16, 3)}
    keys = {(f["batch_size"], f["gamma"]) for f in doc["forecast"]}
    assert keys == {(b, g) for b in range(1, 17) for g in range(0, 9)}
    assert all(f["speedup"] is None for f in doc["forecast"] if f["gamma"] == 0)  # K = 0 not measured: no price
    for f in (f for f in doc["forecast"] if f["gamma"] >= 1):
        assert {"alpha", "speedup", "speedup_ci_low", "speedup_ci_high"} <= set(f)
        assert f["speedup"] > 0 and f["speedup_ci_low"] is None  # two runs a cell: no interval, never a negative one
    for c in doc["checks"]:
        assert c["error"] == pytest.approx(c["forecast"] / c["measured"] - 1)
    assert doc["trusted"] is False and "no usable interval" in doc["trust_reason"] and doc["next_steps"]
    assert doc["num_speculative_tokens_per_batch_size"] is None and doc["speculative_config"] is None
    sched = doc["fitted_num_speculative_tokens_per_batch_size"]
    assert sched[0][0] == 1 and sched[-1][1] == 16
    saved = tune_json.read_schedule(out)  # the tune's own files, read back through their format
    assert saved is not None and saved == json.loads((out / "schedule.json").read_text())
    record = json.loads((out / tune_json.NAME).read_text())
    assert {k: v for k, v in record.items() if k != "design"} == doc  # tune.json is what --format json printed
    assert saved["trusted"] is False and saved["num_speculative_tokens_per_batch_size"] is None
    assert saved["fitted_num_speculative_tokens_per_batch_size"] == sched and saved["speculative_config"] is None
    assert (out / "tune.png").stat().st_size > 10_000
    assert any("V1 runner" in n for n in doc["notes"])  # CPU runs: the schedule is checked, not run


@pytest.mark.slow
def test_fixture_measured_cells_are_the_analysis_figures(a50_json):
    import nsys_cc

    doc, _ = a50_json
    table = nsys_cc.analyze(str(FIX / "a50" / "bs8")).speculative.table.set_index("gamma")
    for c in doc["fitted_cells"]:
        if c["batch_size"] == 8:
            assert c["verify_ms"] == pytest.approx(table.loc[c["gamma"], "verify_ms"])
            assert c["measured_speedup"] == pytest.approx(table.loc[c["gamma"], "measured_speedup"])


# a50_json checks the same of its read in `make check`; this second real process (text output) is `make test`'s.
@pytest.mark.slow
def test_reading_leaves_the_fixtures_as_they_were():
    with unchanged(FIX / "a50"):
        p = _cli("tune", str(FIX / "a50"), "--max-batch-size", "4")
    assert p.returncode == 3, p.stderr  # two runs a cell: not recommended
    assert "num_speculative_tokens_per_batch_size" in p.stdout and "NOT RECOMMENDED" in p.stdout


@pytest.mark.parametrize("args", [["/nonexistent/dir"], [], ["--check", "4:x", str(FIX / "a50")],
                                  [str(FIX / "a50"), "--max-batch-size", "0"]])
def test_cli_bad_input_one_line(args):
    p = cli_in_process("tune", *args)  # the line is the CLI's (the real process: the slow test above)
    assert p.returncode == 2
    assert "Traceback" not in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr


def test_a_static_batch_of_n_tokens_steps_until_its_slowest_sequence_is_done():
    # every draft accepted: γ + 1 tokens a step, the last one cut short
    sure = tune_model.TokensModel((1.0, 1.0, 1.0), 1.0)
    assert sure.static_batch(2, 4, 7) == pytest.approx(7 / 3)
    assert sure.static_batch(3, 16, 31) == pytest.approx(31 / 8)
    never = tune_model.TokensModel((0.0,), 0.0)
    assert never.static_batch(1, 8, 7) == pytest.approx(1.0)
    half = tune_model.TokensModel((0.5,), 0.5)
    # one sequence, γ = 1: 1 or 2 tokens a step; a batch of 16 waits for the unluckiest: fewer tokens per step
    one, many = half.static_batch(1, 1, 31), half.static_batch(1, 16, 31)
    assert 1.0 < many < one < half.expected(1) + 0.02


_START = """
import json, sys
from vllm import LLM, SamplingParams
from nsys_cc.launch import pair
cfg = json.loads(sys.argv[1])
cfg["model"] = str(pair.path("pair-draft"))
llm = LLM(model=str(pair.path("pair-target-a50")), speculative_config=cfg, max_model_len=256,
          skip_tokenizer_init=True, gpu_memory_utilization=0.3)
out = llm.generate([{"prompt_token_ids": [1, 2, 3, 4]}] * 2, SamplingParams(max_tokens=8, detokenize=False))
sc = llm.llm_engine.vllm_config.speculative_config
print("SCHEDULE", json.dumps([list(x) for x in sc.num_speculative_tokens_per_batch_size]), len(out))
"""


@pytest.mark.vllm
@pytest.mark.slow
def test_vllms_cpu_build_starts_with_the_schedule():
    """vLLM's CPU build starts with tune's schedule in --speculative-config (it keeps the table
    in its config; its V1 runner does not act on it, docs/tune.md)."""
    r = tune_schedule.fit_schedule([_cell(b, g, _stats(200, [190, 180, 170][:g])) for b, g in DESIGN],
                                   max_batch_size=32, draws=10, draft="pair-draft")
    cfg = r.speculative_config()
    assert cfg is not None
    env = {**__import__("os").environ, "VLLM_ENABLE_V1_MULTIPROCESSING": "0", "VLLM_CPU_KVCACHE_SPACE": "1",
           "VLLM_CPU_OMP_THREADS_BIND": "nobind", "OMP_NUM_THREADS": "1"}
    p = subprocess.run([sys.executable, "-c", _START, cfg], capture_output=True, text=True, timeout=900, env=env)
    line = next((ln for ln in p.stdout.splitlines() if ln.startswith("SCHEDULE")), None)
    assert p.returncode == 0 and line, p.stderr[-2000:]
    assert json.loads(line.removeprefix("SCHEDULE ").rsplit(" ", 1)[0]) == r.schedule


# The profiling path (rounds of every cell in the same runs): tests/workflows/test_tune.py.

# The draft's forwards apart: a catch-up forward over B·(γ + 2) tokens (vLLM 0.32's draft proposer) and γ − 1 later
# forwards of B tokens, each cell's medians written from known lines.
SPLIT = dict(k=(0.9, 0.08), l=(0.7, 0.04))


def _split_cell(b: int, g: int) -> tune_model.Cell:
    k, lt = SPLIT["k"], SPLIT["l"]
    c = _cell(b, g)
    return tune_model.Cell(**{**c.__dict__, "draft_catchup_ms": k[0] + k[1] * b * (g + 2),
                              "draft_catchup_tokens": b * (g + 2),
                              "draft_later_ms": lt[0] + lt[1] * b if g >= 2 else float("nan")})


def test_the_catch_up_and_later_forwards_are_priced_apart_and_given_back():
    m = tune_model.fit_cost([_split_cell(b, g) for b, g in DESIGN])
    assert m.draft_rule == "catch-up and later"
    assert m.catchup == pytest.approx(SPLIT["k"], abs=1e-9)
    assert m.later == pytest.approx(SPLIT["l"], abs=1e-9)
    assert m.catchup_extra == pytest.approx(1.0)
    # step(B=8, γ=7) written out: catch-up 0.9 + 0.08·8·9, six later forwards 6·(0.7 + 0.32), verify 4 + 0.2·64,
    # outside 3 + 4 + 0.2·56
    assert float(m.step_ms(8, 7)) == pytest.approx((0.9 + 5.76) + 6 * 1.02 + (4 + 12.8) + (3 + 4 + 11.2))
    assert m.to_dict()["draft_catchup_ms"]["per_token"] == pytest.approx(0.08)
    assert "catch-up(0.9 + 0.08·B(γ+2))" in m.describe()


def test_one_price_per_draft_forward_misprices_gamma_away_from_the_design():
    # what the per-forward rule did: the median draft forward is the catch-up at γ = 1 and a later one at γ = 3, so
    # one line through them prices γ = 7 with neither (the case a check of long γ once missed)
    cells = [_split_cell(b, g) for b, g in DESIGN]
    cells = [tune_model.Cell(**{**c.__dict__,
                                "draft_forward_ms": c.draft_catchup_ms if c.gamma == 1 else c.draft_later_ms})
             for c in cells]
    split = tune_model.fit_cost(cells)
    one_price = tune_model.fit_cost([tune_model.Cell(**{**c.__dict__, "draft_catchup_ms": float("nan")})
                                     for c in cells])
    assert one_price.draft_rule == "per forward"
    true_drafts = (0.9 + 0.08 * 8 * 9) + 6 * (0.7 + 0.04 * 8)
    assert float(split.drafts_ms(8, 7)) == pytest.approx(true_drafts)
    assert abs(float(one_price.drafts_ms(8, 7)) / true_drafts - 1) > 0.03  # 13.44 against 12.78 ms


# another read of the a50 grid (~3.5 s): in `make test`; the loop keeps the payload's check on the design
# fixture (tests/workflows/test_tune.py::test_each_cell_is_its_own_batch_size_in_the_shared_engine) and the draft
# rule's on
# cells made by hand (test_the_catch_up_and_later_forwards_are_priced_apart_and_given_back above)
@pytest.mark.slow
def test_the_fixtures_catch_up_payload_is_the_tokens_just_verified_plus_one_a_sequence():
    # vLLM 0.32's draft proposer runs its first forward over B·(γ + 2) tokens; the plugin records the payload
    cells = {(c.batch_size, c.gamma): c for c in tune_dirs.read_cells(FIX / "a50")}
    for (b, g) in [(1, 1), (1, 3), (8, 1), (8, 3), (4, 2)]:
        assert cells[(b, g)].draft_catchup_tokens == b * (g + 2), (b, g)
        assert (cells[(b, g)].draft_later_ms > 0) == (g >= 2)
    fit, _ = tune_schedule.split_design(list(cells.values()), [CellKey(1), CellKey(8)], [1, 3])
    assert tune_model.fit_cost(fit).draft_rule == "catch-up and later"
