"""The whole tune design in the same interleaved runs. One vLLM engine per model serves every batch size
(the driver's `--share-batch-sizes`), each (model, batch size) one label of it with its own windows, latencies and
counters; `fixtures/tune/a99-design/` is such a directory, made by `make fixtures` (scripts/make_tune_fixtures.sh).
Expectations are written by hand or read from the fixture's files and trace with plain SQL."""

from __future__ import annotations

import json
import shutil
import sqlite3
import statistics
from pathlib import Path
from types import SimpleNamespace

import pytest

from conftest import REPO, cli_in_process
from nsys_cc.analysis.tune import directories as tune_dirs, schedule as tune_schedule
from nsys_cc.analysis.tune.keys import CellKey
from nsys_cc.vllm.interleave import SHARE_FLAG, count_spec_decoding, shared_engines

FIX = REPO / "fixtures" / "tune" / "a99-design"
CELLS = {(1, 1), (1, 3), (8, 1), (8, 3), (4, 2), (16, 3)}


def _group(label: str, b: int, *extra: str) -> tuple[str, list[str]]:
    return label, ["--model", "/m/target", "--batch-size", str(b), "--num-iters", "2", *extra]


def test_one_engine_per_model_serves_every_batch_size():
    g1 = ("--speculative-config", '{"num_speculative_tokens":1}')
    g3 = ("--speculative-config", '{"num_speculative_tokens":3}')
    groups = [_group("bs1.t", 1), _group("bs1.t.spec-g1", 1, *g1), _group("bs1.t.spec-g3", 1, *g3),
              _group("bs8.t", 8), _group("bs8.t.spec-g1", 8, *g1), _group("bs4.t.spec-g3", 4, *g3)]
    # by hand: the plain target built by group 0, γ = 1 by group 1, γ = 3 by group 2
    assert shared_engines(groups) == [0, 1, 2, 0, 1, 2]


def test_replicas_of_one_batch_size_stay_apart_and_pair_up_across_batch_sizes():
    groups = [_group("bs1.t", 1), _group("bs8.t", 8), _group("bs1.t", 1), _group("bs8.t", 8)]
    assert shared_engines(groups) == [0, 0, 2, 2]  # the second instance at B = 1 is a second engine
    assert shared_engines([_group("t", 1), _group("t", 1)]) == [0, 1]  # a profile's replicas: never shared
    eq = [("a", ["--model", "m", "--batch-size=1"]), ("b", ["--model", "m", "--batch-size", "4"])]
    assert shared_engines(eq) == [0, 0]  # --batch-size=N is the same option


def test_a_shared_engine_counts_into_the_label_running():
    recorded = []
    manager = SimpleNamespace(record=lambda *a, **k: recorded.append(1))
    llm = SimpleNamespace(llm_engine=SimpleNamespace(logger_manager=manager))
    a: dict = {}
    b: dict = {}
    current = [a]
    assert count_spec_decoding(llm, lambda: current[0])

    def step(drafts: int, accepted: list[int]):
        spec = SimpleNamespace(num_drafts=drafts, num_draft_tokens=drafts * len(accepted),
                               num_accepted_tokens=sum(accepted), num_accepted_tokens_per_pos=accepted)
        manager.record(scheduler_stats=SimpleNamespace(spec_decoding_stats=spec))

    step(1, [1, 0])
    current[0] = b
    step(4, [3, 2])
    step(4, [1, 1])
    current[0] = a
    step(1, [1, 1])
    assert a == {"num_drafts": 2, "num_draft_tokens": 4, "num_accepted_tokens": 3, "per_pos": [2, 1]}
    assert b == {"num_drafts": 8, "num_draft_tokens": 16, "num_accepted_tokens": 7, "per_pos": [4, 3]}
    assert len(recorded) == 4  # vLLM's own loggers still get every step


def test_design_engines_label_each_cell_and_differ_only_in_the_batch_size():
    from nsys_cc.launch import interleaved
    from nsys_cc.launch.commands import BenchOptions

    engines = interleaved.design_engines("tiny-llama-target", "tiny-llama-draft-xs", {1: [1, 3], 8: [1, 3], 4: [2]},
                                         BenchOptions(output_len=8), gpu=False)
    labels = [e.label for e in engines]
    assert labels == ["bs1.tiny-llama-target", "bs1.tiny-llama-draft-xs.spec-g1", "bs1.tiny-llama-draft-xs.spec-g3",
                      "bs4.tiny-llama-target", "bs4.tiny-llama-draft-xs.spec-g2",
                      "bs8.tiny-llama-target", "bs8.tiny-llama-draft-xs.spec-g1", "bs8.tiny-llama-draft-xs.spec-g3"]
    assert [e.batch_size for e in engines] == [1, 1, 1, 4, 4, 8, 8, 8]
    assert [e.gamma for e in engines if e.speculative] == [1, 3, 2, 1, 3]
    # the driver builds one engine per model: the target once, each γ once
    owners = shared_engines([(e.label, list(e.options)) for e in engines])
    assert owners == [0, 1, 2, 0, 4, 0, 1, 2]
    cmds = interleaved.run_commands("nsys", Path("/o"), 1, engines, BenchOptions(output_len=8), gpu=False)
    assert SHARE_FLAG in cmds.profile
    plain = interleaved.run_commands("nsys", Path("/o"), 1, [interleaved.Engine("target", engines[0].model,
                                                                                 engines[0].options)],
                                     BenchOptions(output_len=8), gpu=False)
    assert SHARE_FLAG not in plain.profile  # a profile's engines are never shared


def test_a_design_builds_its_pair_draft_before_vllm_starts(monkeypatch, tmp_path):
    """A fresh machine's tune of the known-α pair: the design has no plain draft engine (whose own model is what had
    built a pair model's weights), yet every speculative engine loads pair-draft's folder. They must be built with
    the target's before the first run, or vLLM fails every speculative engine with "Invalid repository ID"."""
    from nsys_cc.launch import interleaved, orchestrator, plan, process
    from nsys_cc.request import BenchOptions, ProfileRequest
    from nsys_cc.trace import nsys as trace_nsys

    monkeypatch.setenv("NSYS_CC_MODELS", str(tmp_path / "models"))
    engines = interleaved.design_engines("pair-target", "pair-draft", {1: [1, 3], 8: [1]}, BenchOptions(output_len=8),
                                         gpu=False)
    assert [m.spec for e in engines for m in plan.config_models(e.options)] == ["pair-draft"] * 3
    assert plan.config_models(engines[0].options) == []  # the plain target loads no draft

    class Prepared(Exception):
        pass

    def prepare(out, models):
        raise Prepared(sorted({m.spec for m in models}))

    monkeypatch.setattr(trace_nsys, "require_nsys", lambda: "nsys")
    monkeypatch.setattr(process, "preflight", lambda recorder, binary: [])
    monkeypatch.setattr(process, "prepare", prepare)
    request = ProfileRequest("pair-target", ["pair-draft"], tmp_path / "out", output_len=8, repeat=2, timeout=0)
    with pytest.raises(Prepared) as got:
        orchestrator.run(interleaved.Interleaved(request, engines, gpu=False))
    assert got.value.args[0] == ["pair-draft", "pair-target"]


def test_a_design_whose_speculative_engines_all_failed_says_why_in_one_line(monkeypatch, tmp_path):
    """Every speculative engine failing (on a fresh machine: vLLM could not find the draft) is said with the first
    one's reason, not as "no cell directory" after a read of rounds that measured nothing."""
    from nsys_cc.errors import InputError
    from nsys_cc.launch import orchestrator
    from nsys_cc.workflows import tune as tuning

    why = "its engine could not be built: ValidationError: Invalid repository ID"
    runs = [SimpleNamespace(role="target", ok=True, model=SimpleNamespace(label="bs1.pair-target"), reason=""),
            SimpleNamespace(role="speculative", ok=False, model=SimpleNamespace(label="bs1.pair-draft.spec-g1"),
                            reason=why)]
    monkeypatch.setattr(orchestrator, "run",
                        lambda *a, **k: SimpleNamespace(interleaved=[SimpleNamespace(ok=True)], runs=runs))
    with pytest.raises(InputError) as got:
        tuning.tune(target="pair-target", draft="pair-draft", out_dir=tmp_path / "tune", plot=False, confirm=False)
    assert str(got.value).startswith("round-1: no speculative engine has forwards in its runs; "
                                     f"bs1.pair-draft.spec-g1: {why}"), got.value


# --- the fixture: a real design directory ------------------------------------------------------------------------

@pytest.fixture(scope="module")
def cells():
    if not (FIX / "round-1" / "status.json").is_file():
        pytest.fail("fixtures/tune/a99-design missing: run make fixtures")
    return {(c.batch_size, c.gamma): c for c in tune_dirs.read_cells(FIX / "round-1")}


@pytest.mark.slow
def test_every_cell_of_the_design_and_the_checks_is_read_from_the_one_round(cells):
    assert set(cells) == CELLS
    assert {c.label for c in cells.values()} == {f"pair-draft.spec-g{g}" for g in (1, 2, 3)}  # bs<B>. taken off
    assert all(c.source.startswith(str(FIX / "round-1")) for c in cells.values())
    labels = tune_dirs.design_labels(FIX / "round-1")
    assert labels is not None and sorted(labels) == [CellKey(1), CellKey(4), CellKey(8), CellKey(16)]
    assert labels[CellKey(8)] == ("bs8.pair-target", ["bs8.pair-draft.spec-g1", "bs8.pair-draft.spec-g3"])


# a second read of the fixture (~3.5 s): the loop keeps tune's read of the last round
# (`test_tune_reads_a_design_directory_and_checks_the_held_out_cells`: its cells are round-2's)
@pytest.mark.slow
def test_a_tune_directory_is_read_at_its_last_round():
    # the tune directory: its last round, round-2 (every cell again, the schedule run)
    latest = tune_dirs.read_cells(FIX)
    assert {(c.batch_size, c.gamma) for c in latest} == CELLS
    assert all(c.source.startswith(str(FIX / "round-2")) for c in latest)


@pytest.mark.slow
def test_each_cell_is_its_own_batch_size_in_the_shared_engine(cells):
    # the plugin's payload of each step's first draft forward: the tokens just verified, B·(γ + 2) in vLLM 0.32 — a
    # cell read with another batch size's windows would carry that batch size's payload
    for (b, g), c in cells.items():
        assert c.draft_catchup_tokens == b * (g + 2), (b, g)
    # one plain target per batch size: every cell of a batch size has its decode step, and a batch of 16 costs more
    by_b = {b: {c.decode_step_ms for (bb, _), c in cells.items() if bb == b} for b in (1, 8)}
    assert all(len(v) == 1 for v in by_b.values())
    assert cells[(16, 3)].decode_step_ms > cells[(1, 1)].decode_step_ms


@pytest.mark.slow
def test_the_counters_are_each_labels_own(cells):
    # oracle: the metrics dumps of the runs, by hand (vLLM seeds every run alike: runs that replay one another's
    # counters exactly count once, `spec_runs.pool_stats`)
    for (b, g), c in cells.items():
        dumps = []
        for path in sorted((FIX / "round-1").glob(f"run-*/bs{b}.pair-draft.spec-g{g}.metrics.json")):
            metrics = {m["name"]: m for m in json.loads(path.read_text())["metrics"]}
            dumps.append((metrics["vllm:spec_decode_num_drafts"]["value"],
                          tuple(metrics["vllm:spec_decode_num_accepted_tokens_per_pos"]["values"])))
        assert len(dumps) == 2
        assert all(len(pp) == g for _, pp in dumps)
        unique = list(dict.fromkeys(dumps))
        assert c.acceptance is not None
        assert c.acceptance.num_drafts == sum(n for n, _ in unique)
        assert list(c.acceptance.accepted_per_position) == [sum(pp[i] for _, pp in unique) for i in range(g)]
    # drafts per label: B sequences × (warm-up + measured iterations) × steps, so a batch of 8 drafts more than one
    assert cells[(8, 1)].acceptance.num_drafts > cells[(1, 1)].acceptance.num_drafts


def test_the_plain_targets_iterations_are_its_own_batch_sizes():
    # plain SQL on run 1: each bs<B>.pair-target window holds that engine's iterations; their latencies in
    # bs<B>.pair-target.bench.json are the driver's timing of those generate calls (the windows' length)
    run = FIX / "round-1" / "run-1"
    con = sqlite3.connect(f"file:{run / 'trace.sqlite'}?mode=ro", uri=True)
    try:
        rows = con.execute("SELECT COALESCE(e.text, s.value), e.end - e.start FROM NVTX_EVENTS e LEFT JOIN StringIds s "
                           "ON e.textId = s.id WHERE COALESCE(e.text, s.value) LIKE 'nsys_cc:engine bs%.pair-target'"
                           ).fetchall()
    finally:
        con.close()
    windows: dict[str, list[float]] = {}
    for name, ns in rows:
        windows.setdefault(name.removeprefix("nsys_cc:engine "), []).append(ns / 1e9)
    assert sorted(windows) == [f"bs{b}.pair-target" for b in (1, 16, 4, 8)]
    for label, seconds in windows.items():
        bench = json.loads((run / f"{label}.bench.json").read_text())["latencies"]
        measured = seconds[-len(bench):]  # the warm-up iteration first
        assert len(seconds) == len(bench) + 1
        assert statistics.median(measured) == pytest.approx(statistics.median(bench), rel=0.02)


@pytest.fixture(scope="module")
def tuned(tmp_path_factory):
    """`nsys_cc.tune` reading a copy of the fixture (its last round: every cell again and the schedule run)."""
    import nsys_cc

    src = tmp_path_factory.mktemp("design") / "tune"
    shutil.copytree(FIX, src)
    return nsys_cc.tune(src, max_batch_size=16, draws=20, plot=False)


@pytest.mark.slow
def test_tune_reads_a_design_directory_and_checks_the_held_out_cells(tuned):
    rep = tuned
    # the fixture's tune.json design
    assert {(c.batch_size, c.gamma) for c in rep.result.fitted} == {(1, 1), (1, 3), (8, 1), (8, 3)}
    assert {(c["batch_size"], c["gamma"]) for c in rep.result.checks} == {(4, 2), (16, 3)}
    assert {s["batch_size"] for s in rep.result.schedule_check} == {1, 4, 8, 16}
    # the tune directory read at its last round: every cell is round-2's (round-1's are the `cells` above)
    cells = rep.result.fitted + rep.result.held_out
    assert cells and all(Path(c.source.rsplit(":", 1)[0]).parts[-2:] == ("tune", "round-2") for c in cells)


def _schedule_table() -> tuple[int, list[list[int]]]:
    """The table the fixture's schedule engines ran, from round-2's record of the command (by hand)."""
    import shlex

    argv = shlex.split(json.loads((FIX / "round-2" / "run-1" / "done.json").read_text())["commands"])
    config = json.loads(next(argv[i + 1] for i, a in enumerate(argv[:-1]) if a == "--speculative-config"
                             and "per_batch_size" in argv[i + 1]))
    return config["num_speculative_tokens"], config["num_speculative_tokens_per_batch_size"]


# a third read of the fixture's last round (~3.5 s): the loop keeps tune's read of the schedule runs
# (`test_tune_reads_a_design_directory_and_checks_the_held_out_cells`: a schedule check at every batch size)
@pytest.mark.slow
def test_the_schedule_run_is_no_cell_and_ran_what_its_table_gives_at_each_batch_size():
    k, table = _schedule_table()
    runs = [c for c in tune_dirs.read_cells(FIX / "round-2", schedule_runs=True) if c.schedule_run]
    assert sorted(c.batch_size for c in runs) == [1, 4, 8, 16]
    assert {c.label for c in runs} == {f"pair-draft.schedule.spec-g{k}"} and all(c.gamma == k for c in runs)
    # vLLM's own counters: draft tokens per draft = the table's K at each measured batch size (by hand: the first
    # range holding B; the fixture's batch sizes all lie in its first range, whose K is k)
    for b in (1, 4, 8, 16):
        want = next(g for lo, hi, g in table if lo <= b <= hi)
        for dump in sorted((FIX / "round-2").glob(f"run-*/bs{b}.pair-draft.schedule.spec-g{k}.metrics.json")):
            m = {x["name"]: x for x in json.loads(dump.read_text())["metrics"]}
            assert m["vllm:spec_decode_num_draft_tokens"]["value"] == want * m["vllm:spec_decode_num_drafts"]["value"]


MIXED_SCHEDULE = [[1, 2, 3], [3, 256, 0]]  # K = 3 at B = 1 and 2, K = 0 from B = 3 on


@pytest.mark.vllm
@pytest.mark.nsys
def test_the_cpu_runner_runs_the_schedules_k_at_each_batch_size(tmp_path):
    """vLLM 0.32's V1 runner (the CPU build's) applies the table: one engine running `MIXED_SCHEDULE` verifies
    1 + 3 tokens per sequence at B = 1 and 1 at B = 4 (K = 0: nothing proposed), and drafts 3 forwards a step at B = 1
    against 1 (the catch-up) at B = 4 — read from the trace's raw NVTX rows, not from vLLM's counters (a K = 0 step
    counts nothing there). An engine ignoring the table would verify 1 + 3 at both."""
    from nsys_cc.launch import interleaved, orchestrator
    from nsys_cc.request import ProfileRequest

    target, draft, out_len = "tiny-llama-target", "tiny-llama-draft-xs", 5
    config = json.dumps({"method": "draft_model", "model": draft, "num_speculative_tokens": 3,
                         "num_speculative_tokens_per_batch_size": MIXED_SCHEDULE})
    request = ProfileRequest(target, (draft,), tmp_path / "out", input_len=32, output_len=out_len, warmup_iters=1,
                             iters=1, repeat=1, replicas=1, device="cpu", trace="nvtx", timeout=0)
    engines = interleaved.design_engines(target, draft, {1: [1], 4: [1]}, request.options, False, schedule=config)
    done = orchestrator.run(interleaved.Interleaved(request, engines, gpu=False))
    assert all(r.ok for r in done.interleaved), [r.reason for r in done.interleaved]
    with sqlite3.connect(f"file:{tmp_path / 'out' / 'run-1' / 'trace.sqlite'}?mode=ro", uri=True) as conn:
        rows = conn.execute(
            "SELECT coalesce(e.text, s.value), e.start, e.\"end\", e.int64Value FROM NVTX_EVENTS e "
            "LEFT JOIN StringIds s ON s.id = e.textId WHERE e.eventType = 59 ORDER BY e.start").fetchall()
    for b, k in ((1, 3), (4, 0)):
        label = f"bs{b}.{draft}.schedule.spec-g3"
        (start, end) = [(s, e) for n, s, e, _ in rows if n == f"nsys_cc:engine {label}"][-1]  # the measured one
        inside = [(n, p) for n, s, _, p in rows if start <= s <= end]
        target_tokens = [p for n, p in inside if n == "model_executable()"]
        assert target_tokens[0] == 32 * b  # the prefill
        assert target_tokens[1] == b * (1 + k), (b, target_tokens)  # the first step after it verifies K per sequence
        steps = [i for i, (n, _) in enumerate(inside) if n == "model_executable()"]
        drafts = [sum(1 for n, _ in inside[i + 1:j] if n == "draft_model_executable()")
                  for i, j in zip(steps[1:], steps[2:])]
        assert drafts and set(drafts) == {max(k, 1)}, (b, drafts)  # K forwards; K = 0: the catch-up alone


@pytest.mark.slow  # the oracle reads two batch sizes' engines again: the loop keeps the tune of the fixture
def test_the_schedule_check_shows_vllm_running_the_whole_schedule(tuned):
    import nsys_cc

    rep = tuned
    k, table = _schedule_table()
    runs = sorted(str(p) for p in (FIX / "round-2").glob("run-*/trace.sqlite"))
    assert {row["batch_size"] for row in rep.result.schedule_check if "schedule_run_measured" in row} == {1, 4, 8, 16}
    for row in rep.result.schedule_check:
        b = row["batch_size"]
        if b not in (1, 16):  # the oracle's reads: the smallest and the largest batch size
            continue
        # oracle: that engine against its batch size's plain target of the same runs, read by hand
        res = nsys_cc.cost_coefficient_runs([[r, r] for r in runs], engines=[[
            f"bs{b}.pair-target", f"bs{b}.pair-draft.schedule.spec-g{k}"]] * len(runs))
        assert row["schedule_run_measured"] == pytest.approx(float(res.speculative.table["measured_speedup"].iloc[0]))
        fixed = {c.gamma: c.measured_speedup for c in rep.result.fitted + rep.result.held_out if c.batch_size == b}
        assert row["schedule_run_gap"] == pytest.approx(row["schedule_run_measured"] / max([1.0, *fixed.values()]) - 1)
        assert row["schedule_run_table"] == table
        assert "V1 runner ran the table" in row["schedule_run_note"]
    from nsys_cc.report.tune_text import render_text

    assert "vLLM running the whole schedule" in render_text(rep.result, rep.notes)


@pytest.mark.slow  # two tunes of the fixture: in `make test`
def test_schedule_rounds_measure_every_cell_again_with_the_new_ones(tmp_path, monkeypatch):
    """The profiling path without vLLM: round 1 lays down the fixture; round 2 must ask for every cell of round 1
    and the schedule's γ where it was not measured, in one round (laid down as the same fixture: it measures
    nothing new, so the rounds stop and the note names what is still unmeasured)."""
    from nsys_cc.workflows import tune as tuning

    calls: list[tuple[str, dict[int, list[int]]]] = []

    def fake(request, out, cells, **kw):
        calls.append((out.name, {k.batch_size: list(g) for k, g in cells.items()}))
        shutil.copytree(FIX / "round-1", out, dirs_exist_ok=True)  # `tune` made the round folder

    monkeypatch.setattr(tuning, "_profile_round", fake)
    out = tmp_path / "tune"
    # the fixture's benchmark (its README), as the tune record says: the rounds laid down were profiled with it
    rep = tuning.tune(target="pair-target", draft="pair-draft", check="4:2,16:3", out_dir=out, max_batch_size=16,
                      draws=20, plot=False, input_len=32, output_len=8)
    assert calls[0] == ("round-1", {1: [1, 3], 8: [1, 3], 4: [2], 16: [3]})
    first = tune_schedule.fit_schedule(*tune_schedule.split_design(tune_dirs.read_cells(FIX), [CellKey(1), CellKey(8)],
                                                                   [1, 3]), max_batch_size=16, draws=20)
    todo = {s["batch_size"]: s["schedule_gamma"] for s in first.schedule_check
            if s["schedule_gamma"] > 0 and s["schedule_gamma"] not in s["measured_gammas"]}
    assert todo, "the α ≈ 1 fixture chooses a γ that was not measured: round 2 has work"
    # and at every measured batch size the schedule's γ and the γ beside it, by hand
    beside = {s["batch_size"]: {x for x in (s["schedule_gamma"] - 1, s["schedule_gamma"], s["schedule_gamma"] + 1)
                                if 1 <= x <= 8} for s in first.schedule_check}
    assert all(todo[b] in beside[b] for b in todo)
    assert calls[1][0] == "round-2"
    assert calls[1][1] == {b: sorted({*calls[0][1][b], *beside[b]}) for b in calls[0][1]}
    assert len(calls) == 2  # round 2 measured nothing new: another round would do the same
    assert any(n.startswith("the schedule's γ still not measured after") for n in rep.notes), rep.notes
    assert tune_dirs.latest_round(out) == out / "round-2"


@pytest.mark.slow  # two reads of the fixture's rounds: in `make test`
def test_the_tune_record_holds_the_request_and_the_table_each_schedule_round_ran(tmp_path, monkeypatch):
    """A profiling tune records what it was asked (device, prompt and output lengths) and, before a schedule round,
    the table that round runs: reading the directory takes them from there, not from the runs' command lines (the
    fixture's round 2 ran another table, which its commands record)."""
    from nsys_cc.workflows import tune as tuning

    calls: list[tuple[str, str | None]] = []

    def fake(request, out, cells, *, schedule=None):
        calls.append((out.name, schedule))
        shutil.copytree(FIX / ("round-2" if schedule else "round-1"), out, dirs_exist_ok=True)

    monkeypatch.setattr(tuning, "_profile_round", fake)
    out = tmp_path / "tune"
    rep = tuning.tune(target="pair-target", draft="pair-draft", check="4:2,16:3", out_dir=out, max_batch_size=16,
                      draws=20, plot=False, confirm=False, run_schedule=True, device="cpu", input_len=32,
                      output_len=8)
    assert [name for name, _ in calls] == ["round-1", "round-2"] and calls[1][1] is not None
    table = json.loads(calls[1][1])["num_speculative_tokens_per_batch_size"]
    assert table != _schedule_table()[1], "the fixture ran this very table: the record would not be told apart"
    design = json.loads((out / "tune.json").read_text())["design"]
    assert design["schedule_runs"] == {"round-2": table}
    assert (design["device"], design["input_len"], design["output_len"]) == ("cpu", 32, 8)
    rows = [row for row in rep.result.schedule_check if "schedule_run_table" in row]
    assert rows and all(row["schedule_run_table"] == table for row in rows)
    again = tuning.tune(out, max_batch_size=16, draws=20, plot=False)  # read back: the same record
    assert [row["schedule_run_table"] for row in again.result.schedule_check] == [table] * len(rows)


@pytest.mark.slow
def test_analyze_refuses_a_design_directory_instead_of_measuring_every_cell_against_batch_1(cells):
    import nsys_cc
    from nsys_cc.errors import InputError

    with pytest.raises(InputError, match="tune design"):
        nsys_cc.analyze(str(FIX / "round-1"))
    with pytest.raises(InputError, match="tune design"):  # the same read without the front door
        nsys_cc.cost_coefficient_runs(str(FIX / "round-1"))
    # the CLI's line (its real process: tests/reliability/test_bad_input.py)
    p = cli_in_process("analyze", str(FIX / "round-1"))
    assert p.returncode == 2 and "Traceback" not in p.stderr
    assert len(p.stderr.strip().splitlines()) == 1 and "nsys-cc tune" in p.stderr, p.stderr
    # one batch size's engines, given by hand, read as any interleaved run's
    runs = sorted(str(p) for p in (FIX / "round-1").glob("run-*/trace.sqlite"))
    res = nsys_cc.cost_coefficient_runs([[r, r] for r in runs],
                                        engines=[["bs8.pair-target", "bs8.pair-draft.spec-g3"]] * len(runs))
    row = res.speculative.table.set_index("gamma").loc[3]
    assert row["verify_ms"] == pytest.approx(cells[(8, 3)].verify_ms)


def test_a_designs_rounds_are_shuffled_so_no_label_always_follows_the_same_one():
    from nsys_cc.vllm.interleave import round_order

    labels = [f"l{i}" for i in range(12)]
    # a profile's engines: rotated by one each round (target, draft, then draft, target, …)
    assert round_order(["t", "d"], 0) == ["t", "d"] and round_order(["t", "d"], 1) == ["d", "t"]
    orders = [round_order(labels, i, shuffle=True) for i in range(7)]
    assert all(sorted(o) == sorted(labels) for o in orders)  # every label once a round
    assert orders == [round_order(labels, i, shuffle=True) for i in range(7)]  # the same in every run
    before = {lab: {o[o.index(lab) - 1] for o in orders if o.index(lab)} for lab in labels}
    assert sum(len(v) > 1 for v in before.values()) >= 10  # rotated, each would have one predecessor only
    rotated = [round_order(labels, i) for i in range(7)]
    assert all(len({o[o.index(lab) - 1] for o in rotated if o.index(lab)}) == 1 for lab in labels)
