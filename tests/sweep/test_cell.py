"""A sweep's cells with a stand-in for the runs: resume, retry, attempts, unsupported options, the written table; the
choice between interleaved runs and separate processes (`profile`'s); a cell's rows as `nsys_cc.analyze(cell_dir)`
gives them; sweep directories of the old layout (one process per model) still read.

The stand-in takes the launch orchestrator's place (`launch.orchestrator.run`), records each call — the strategy the
profile workflow chose and the request it holds — and answers like the runs (a ProfileOutcome-shaped value); real
profiles are in test_cluster.py.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest

import nsys_cc
from conftest import REPO
from nsys_cc.errors import InputError
from nsys_cc.formats import attempts_json
from nsys_cc.launch import interleaved, orchestrator, separate
from nsys_cc.request import BenchOptions
from nsys_cc.sweep import table as table_mod
from nsys_cc.sweep.cell import read_outcome, run_cell
from nsys_cc.sweep.grid import Cell, SweepSpec, cells
from nsys_cc.sweep.manifest import read_manifest
from nsys_cc.sweep.run import sweep
from nsys_cc.workflows import profile as profile_mod

# Reports are written without their PNGs here (conftest `no_figures`): these tests check what runs and analyses
# wrote, and drawing the figures was most of their time; tests/report/test_result_plots.py and the plots/ tests draw
# them.
pytestmark = pytest.mark.usefixtures("no_figures")

FIXTURES = REPO / "fixtures"


class FakeProfile:
    """Answers like the runs (`orchestrator.run` with either strategy): c = batch_size / 100 (prefill) and
    input_len / 10000 (decode). `finish`, the cell's analysis of its directory, is recorded, not called: this stand-in
    answers with its result."""

    def __init__(self, fail: set[str] = frozenset()):
        self.calls: list[dict] = []
        self.fail = set(fail)

    def __call__(self, strategy, *, finish=None):
        request = strategy.request
        out = Path(request.out_dir)
        runs = {"repeat": strategy.repeat, "replicas": strategy.replicas} if strategy.name == "interleaved" else {}
        self.calls.append({**request.to_dict(), "cell": out.name, "path": strategy.name, **runs, "finish": finish,
                           "measure": getattr(strategy, "measure", None)})
        target, drafts, options = request.target, request.drafts, request.options

        def run(role, label, ok):
            return SimpleNamespace(role=role, ok=ok, status="done" if ok else "failed",
                                   reason="" if ok else "exploded", range_name="model_executable()",
                                   model=SimpleNamespace(label=label),
                                   files=SimpleNamespace(sqlite=out / f"{label}.sqlite"))

        if out.name in self.fail:
            runs = [run("target", target, False), *[run("draft", d, True) for d in drafts]]
            return SimpleNamespace(runs=runs, failed=runs[:1], result=None, notes=["target: FAILED: exploded"])
        coef = pd.DataFrame([{"draft": d, "phase": p, "metric": "wall", "c": v, "ci_low": v / 2, "ci_high": v * 2}
                             for d in drafts for p, v in (("prefill", options.batch_size / 100),
                                                          ("decode", options.input_len / 10000))])
        runs = [run("target", target, True), *[run("draft", d, True) for d in drafts]]
        return SimpleNamespace(runs=runs, failed=[], result=SimpleNamespace(coefficients=coef, speculative=None),
                               notes=[])


def runs_by(monkeypatch, fake) -> None:
    """`fake` as the orchestrator of both ways `workflows.profile.profile` runs the models (its strategies made as the
    workflow makes them, without their models: "T" and "D" are no models), each call saying which it took."""
    monkeypatch.setattr(interleaved, "profile_engines", lambda request, gpu, replicas=1: [])
    monkeypatch.setattr(separate, "plan", lambda request, *, binary, gpu: [])
    monkeypatch.setattr("nsys_cc.trace.nsys.require_nsys", lambda: "/opt/nsys/bin/nsys")
    monkeypatch.setattr(orchestrator, "run", fake)


def interrupted_on_the_second_cell(monkeypatch) -> None:
    """The runs as `FakeProfile` answers them, but a Ctrl-C arrives while the second cell runs."""
    fake = FakeProfile()

    def interrupted_on_the_second(*args, **kwargs):
        if len(fake.calls) == 1:
            fake.calls.append({})
            raise KeyboardInterrupt
        return fake(*args, **kwargs)

    runs_by(monkeypatch, interrupted_on_the_second)


@pytest.fixture()
def fake(monkeypatch):
    fake = FakeProfile()
    runs_by(monkeypatch, fake)
    return fake


@pytest.mark.slow
@pytest.mark.figures  # it checks the sweep's two plots
def test_every_cell_is_one_profile_in_its_own_directory_and_the_table_says_which(tmp_path, fake):
    spec = SweepSpec("T", ("D1", "D2"), str(tmp_path / "sw"), BenchOptions(output_len=3))
    result = sweep(spec, cells([1, 4], [128, 1024]))
    assert [c["cell"] for c in fake.calls] == ["bs1-in128", "bs1-in1024", "bs4-in128", "bs4-in1024"]
    assert [(c["batch_size"], c["input_len"]) for c in fake.calls] == [(1, 128), (1, 1024), (4, 128), (4, 1024)]
    t = pd.read_csv(tmp_path / "sw" / "sweep.csv")
    assert len(t) == 4 * 2 * 2
    decode = t[(t["phase"] == "decode") & (t["draft"] == "D2")]
    assert decode["c"].tolist() == pytest.approx([0.0128, 0.1024, 0.0128, 0.1024])
    prefill = t[t["phase"] == "prefill"]
    assert (prefill["c"] == prefill["batch_size"] / 100).all()
    assert t["gamma"].isna().all() and (t["attempts"] == 1).all()
    assert pd.read_parquet(tmp_path / "sw" / "sweep.parquet").shape == t.shape
    assert {p.name for p in (tmp_path / "sw" / "plots").iterdir()} == {"c_vs_batch_size.png", "c_vs_input_len.png"}
    sets = read_manifest(tmp_path / "sw" / "manifest.json")
    assert [s.name for s in sets] == ["bs1-in128", "bs1-in1024", "bs4-in128", "bs4-in1024"]
    # each set is its cell's directory, a profile directory (read as `nsys-cc analyze CELL_DIR` reads it)
    assert sets[2].profile == str(tmp_path / "sw" / "bs4-in128") and sets[2].output_len == 3
    assert not sets[2].target and not sets[2].drafts and sets[2].range_name is None
    assert not result.failed and result.notes == []


def test_a_rerun_keeps_done_cells_and_retries_failed_ones(tmp_path, monkeypatch):
    spec = SweepSpec("T", ("D",), str(tmp_path / "sw"))
    first = FakeProfile(fail={"bs2-in8"})
    runs_by(monkeypatch, first)
    result = sweep(spec, cells([1, 2], [8]))
    assert [c.status for c in result.cells] == ["done", "failed"]
    assert any("bs2-in8" in n and "FAILED" in n and "exploded" in n for n in result.notes)
    assert set(pd.read_csv(tmp_path / "sw" / "sweep.csv")["cell"]) == {"bs1-in8"}

    second = FakeProfile()
    runs_by(monkeypatch, second)
    result = sweep(spec, cells([1, 2], [8]))
    assert [c["cell"] for c in second.calls] == ["bs2-in8"]
    assert [c.status for c in result.cells] == ["resumed", "done"]
    t = pd.read_csv(tmp_path / "sw" / "sweep.csv")
    assert t.groupby("cell")["attempts"].first().to_dict() == {"bs1-in8": 1, "bs2-in8": 2}
    assert any("bs2-in8" in n and "attempt 2" in n for n in result.notes)
    starts = json.loads((tmp_path / "sw" / "bs2-in8" / attempts_json.NAME).read_text())["starts"]
    assert len(starts) == 2 and starts[0]["run_id"] != starts[1]["run_id"]

    # Different benchmark settings: the kept cells are not what is asked for any more.
    third = FakeProfile()
    runs_by(monkeypatch, third)
    sweep(SweepSpec("T", ("D",), str(tmp_path / "sw"), BenchOptions(iters=9)), cells([1, 2], [8]))
    assert [c["cell"] for c in third.calls] == ["bs1-in8", "bs2-in8"]


def test_force_redoes_a_cell_once_per_sweep_not_on_its_retry(tmp_path, fake):
    spec = SweepSpec("T", ("D",), str(tmp_path / "sw"), force=True, run_id="run-1")
    run_cell(spec.cell(Cell(1, 8)))
    run_cell(spec.cell(Cell(1, 8)))  # the same sweep retrying the cell (its worker was lost)
    run_cell(SweepSpec("T", ("D",), str(tmp_path / "sw"), force=True, run_id="run-2").cell(Cell(1, 8)))
    assert [c["force"] for c in fake.calls] == [True, False, True]


def test_a_cells_profile_goes_through_the_main_paths_choice(tmp_path, fake):
    # a cell is profiled as nsys_cc.profile profiles (the workflow's choice): interleaved runs by default,
    # one process per model when asked (separate) or needed (the target on two ranks); its runs' arguments reach them
    sweep(SweepSpec("T", ("D",), str(tmp_path / "a")), [Cell(1, 8)])
    sweep(SweepSpec("T", ("D",), str(tmp_path / "b"), separate=True), [Cell(1, 8)])
    sweep(SweepSpec("T", ("D",), str(tmp_path / "c")), [Cell(1, 8, 2)])
    sweep(SweepSpec("T", ("D",), str(tmp_path / "d"), repeat=3, replicas=1, precision=0.1, max_repeat=5), [Cell(1, 8)])
    assert [c["path"] for c in fake.calls] == ["interleaved", "separate", "separate", "interleaved"]
    assert (fake.calls[0]["repeat"], fake.calls[0]["replicas"], fake.calls[0]["precision"]) == (6, 2, None)
    assert fake.calls[2]["target_tp"] == 2
    assert {k: fake.calls[3][k] for k in ("repeat", "replicas", "precision", "max_repeat")} == {
        "repeat": 3, "replicas": 1, "precision": 0.1, "max_repeat": 5}
    # the analysis handed down is the front door's own: its finish, and its precision measure, with the sweep's seed
    for call in fake.calls:
        assert call["finish"].func is profile_mod.finish and call["finish"].keywords["request"].seed == 0
    assert fake.calls[3]["measure"].keywords["seed"] == 0
    # a sweep's own default benchmark: a profile's, but 2 output tokens (as `nsys-cc sweep --output-len`)
    assert fake.calls[3]["finish"].keywords["request"].output_len == 2 != BenchOptions().output_len


def test_runs_a_cell_cannot_make_are_refused_before_any_cell_runs(tmp_path, fake):
    with pytest.raises(InputError, match="repeat"):
        sweep(SweepSpec("T", ("D",), str(tmp_path / "a"), separate=True, repeat=3), cells([1, 2], [8]))
    with pytest.raises(InputError, match="repeat"):  # the second cell needs separate processes
        sweep(SweepSpec("T", ("D",), str(tmp_path / "b"), repeat=3), cells([1], [8], [1, 2]))
    with pytest.raises(InputError, match="replicas"):
        sweep(SweepSpec("T", ("D",), str(tmp_path / "c"), replicas=0), cells([1], [8]))
    assert fake.calls == [] and not any(tmp_path.iterdir())


def _a_profile_from_the_fixture(strategy, *, finish):
    """Stands in for the interleaved runs: the speculative interleaved fixture's two runs and status.json are what
    they wrote; then the analysis handed down (`finish`), as the real runs end."""
    from nsys_cc.launch.results import ProfileOutcome

    out = Path(strategy.request.out_dir)
    for part in ("run-1", "run-2"):
        shutil.copytree(FIXTURES / "interleaved" / "spec" / part, out / part)
    shutil.copy(FIXTURES / "interleaved" / "spec" / "status.json", out / "status.json")
    return finish(ProfileOutcome(out, [], analysable=True))


# three analyses of the speculative interleaved fixture (~4.5 s): in `make test`; the loop keeps a set's
# rows as analyze gives them (test_grid.py::test_a_profile_set_is_analysed_as_analyze_reads_its_directory)
# and a sweep's cells, table and manifest (test_every_cell_is_one_profile_in_its_own_directory_and_the_table_says_which)
@pytest.mark.slow
def test_a_cells_rows_are_what_analyze_gives_its_directory(tmp_path, monkeypatch):
    # the cell's directory is a profile directory: the sweep's table, the manifest's set and nsys_cc.analyze of the
    # cell's directory all give the same rows (plain c pooled over the runs, in-place c per γ)
    monkeypatch.setattr(orchestrator, "run", _a_profile_from_the_fixture)
    spec = SweepSpec("tiny-llama-target", ("tiny-llama-draft-xs",), str(tmp_path / "sw"), BenchOptions(output_len=6),
                     speculate=(1, 2, 3))
    result = sweep(spec, [Cell(1, 64)])
    assert [c.status for c in result.cells] == ["done"]
    cell_dir = tmp_path / "sw" / "bs1-in64"
    direct = nsys_cc.analyze(cell_dir, output_len=6)
    want = table_mod.from_result(direct, cell="bs1-in64", batch_size=1, input_len=64, target_tp=None, attempts=1)
    pd.testing.assert_frame_equal(result.table, want)
    assert sorted(result.table["gamma"].dropna()) == [1, 2, 3]
    assert (cell_dir / "report.md").is_file()  # the front door's report, written by the same finish
    (entry,) = json.loads((tmp_path / "sw" / "manifest.json").read_text())["trace_sets"]
    assert entry == {"name": "bs1-in64", "profile": "bs1-in64", "batch_size": 1, "input_len": 64, "output_len": 6}
    again = nsys_cc.analyze(tmp_path / "sw")
    assert again.failures == []
    pd.testing.assert_frame_equal(again.table, want)
    assert read_outcome(spec.cell(Cell(1, 64))).trace_set.profile == str(cell_dir)


# A sweep directory as sweeps wrote it before cells made interleaved runs: one process per model, one trace each, the
# cell's trace set its traces, the parameters without the runs' (written out by hand, as that code wrote them).
OLD_OPTIONS = {"input_len": 128, "output_len": 2, "batch_size": 1, "warmup_iters": 5, "iters": 5,
               "enforce_eager": False, "vllm_args": []}


def _old_sweep(root: Path) -> Path:
    vllm = FIXTURES / "vllm"
    cell = root / "bs1-in128"
    cell.mkdir(parents=True)
    traces = {m: cell / f"{m}.sqlite" for m in ("tiny-llama-target", "tiny-llama-draft-xs")}
    for m, p in traces.items():
        shutil.copy(vllm / f"{m}.sqlite", p)
    coef = nsys_cc.cost_coefficient(str(traces["tiny-llama-target"]), [str(traces["tiny-llama-draft-xs"])])
    rows = table_mod.from_result(coef, cell="bs1-in128", batch_size=1, input_len=128, target_tp=None, attempts=1)
    rows.to_parquet(cell / "cell.parquet", index=False)
    trace_set = {"name": "bs1-in128", "target": str(traces["tiny-llama-target"]),
                 "drafts": [str(traces["tiny-llama-draft-xs"])], "names": ["tiny-llama-target", "tiny-llama-draft-xs"],
                 "batch_size": 1, "input_len": 128, "output_len": 2, "range_name": "model_executable()",
                 "speculative": []}
    (cell / "cell.json").write_text(json.dumps({
        "cell": "bs1-in128", "status": "done", "reason": "", "attempts": 1, "seconds": 12.5, "rows": len(rows),
        "parameters": {"target": "tiny-llama-target", "drafts": ["tiny-llama-draft-xs"], "options": OLD_OPTIONS,
                       "device": "auto", "timeout": 1800.0, "trace": None, "nsys_args": []},
        "trace_set": trace_set}))
    (root / "manifest.json").write_text(json.dumps({"trace_sets": [{
        **{k: v for k, v in trace_set.items() if k != "speculative"}, "target": "bs1-in128/tiny-llama-target.sqlite",
        "drafts": ["bs1-in128/tiny-llama-draft-xs.sqlite"]}]}))
    return root


@pytest.mark.slow
def test_an_old_sweep_directory_is_still_read_and_kept_by_a_separate_rerun(tmp_path, fake):
    root = _old_sweep(tmp_path / "old")
    target, draft = (str(root / "bs1-in128" / f"{m}.sqlite") for m in ("tiny-llama-target", "tiny-llama-draft-xs"))
    # analysed as it is: the manifest's traces, as cost_coefficient reads them
    coef = nsys_cc.cost_coefficient(target, [draft]).coefficients
    table = nsys_cc.analyze(root).table
    cols = ["draft", "phase", "metric", "c", "ci_low", "ci_high"]
    pd.testing.assert_frame_equal(table[cols], coef[cols], check_dtype=False)
    spec = SweepSpec("tiny-llama-target", ("tiny-llama-draft-xs",), str(root), separate=True)
    outcome = read_outcome(spec.cell(Cell(1, 128)))
    assert outcome.trace_set.target == target and outcome.trace_set.drafts == (draft,)
    # a rerun that asks for what made it (one process per model) keeps the cell; the default (interleaved) redoes it
    kept = sweep(spec, [Cell(1, 128)])
    assert [c.status for c in kept.cells] == ["resumed"] and fake.calls == []
    pd.testing.assert_frame_equal(kept.table[cols], coef[cols], check_dtype=False)
    redone = sweep(SweepSpec("tiny-llama-target", ("tiny-llama-draft-xs",), str(root)), [Cell(1, 128)])
    assert [c["path"] for c in fake.calls] == ["interleaved"] and [c.status for c in redone.cells] == ["done"]


class FakeSpeculativeProfile(FakeProfile):
    """`profile` with `speculate`: besides the plain c, an in-place c per γ (0.3 + γ / 100) as the speculative
    analysis gives it (`result.speculative.table`: draft, gamma, c_in_place, c_in_place_ci_low, c_in_place_ci_high)."""

    def __call__(self, strategy, *, finish=None):
        run = super().__call__(strategy, finish=finish)
        drafts, speculate = strategy.request.drafts, strategy.request.gammas
        spec = pd.DataFrame([{"draft": d, "gamma": g, "c_in_place": 0.3 + g / 100, "c_in_place_ci_low": 0.2,
                              "c_in_place_ci_high": 0.5, "verify_ms": 9.0} for d in drafts for g in speculate])
        run.result.speculative = SimpleNamespace(table=spec)
        return run


def test_speculative_runs_give_rows_with_their_gamma_and_in_place_c(tmp_path, monkeypatch):
    fake = FakeSpeculativeProfile()
    runs_by(monkeypatch, fake)
    result = sweep(SweepSpec("T", ("D",), str(tmp_path / "sw"), speculate=(3, 1)), cells([2], [8]))
    assert fake.calls[0]["speculate"] == [1, 3]  # the request's γ values, ascending
    t = pd.read_csv(tmp_path / "sw" / "sweep.csv")
    plain, spec = t[t["gamma"].isna()], t[t["gamma"].notna()]
    assert len(plain) == 2 and sorted(spec["gamma"]) == [1, 3]
    assert spec.set_index("gamma")["c"].to_dict() == pytest.approx({3: 0.33, 1: 0.31})
    assert (spec["phase"] == "decode").all() and (spec["metric"] == "wall").all()
    assert (spec["ci_low"] == 0.2).all() and (spec["ci_high"] == 0.5).all() and (spec["batch_size"] == 2).all()
    assert not any("no rows with a gamma" in n for n in result.notes)


def test_ctrl_c_writes_the_table_of_the_cells_completed_then_stops(tmp_path, monkeypatch):
    interrupted_on_the_second_cell(monkeypatch)
    with pytest.raises(KeyboardInterrupt):
        sweep(SweepSpec("T", ("D",), str(tmp_path / "sw")), cells([1, 2, 4], [8]))
    assert set(pd.read_csv(tmp_path / "sw" / "sweep.csv")["cell"]) == {"bs1-in8"}
    status = {c["cell"]: c["status"] for c in json.loads((tmp_path / "sw" / "cells.json").read_text())["cells"]}
    assert status == {"bs1-in8": "done", "bs2-in8": "interrupted", "bs4-in8": "not run"}
    assert json.loads((tmp_path / "sw" / "bs2-in8" / "cell.json").read_text())["status"] == "interrupted"


def test_a_complete_sweep_rerun_with_a_scheduler_needs_no_cluster(tmp_path, fake):
    spec = SweepSpec("T", ("D",), str(tmp_path / "sw"))
    sweep(spec, cells([1, 2], [8]))
    # Nothing listens on port 1: reaching for the cluster would fail; every cell is kept without it.
    result = sweep(spec, cells([1, 2], [8]), scheduler="tcp://127.0.0.1:1")
    assert [c.status for c in result.cells] == ["resumed", "resumed"] and len(fake.calls) == 2


def test_the_sweep_cli_exits_130_on_ctrl_c_after_writing_the_completed_cells(tmp_path, monkeypatch):
    from click.testing import CliRunner

    from nsys_cc.cli import cli

    interrupted_on_the_second_cell(monkeypatch)
    out = tmp_path / "sw"
    done = CliRunner().invoke(cli, ["sweep", "--target", "T", "--draft", "D", "--batch-size", "1,2,4", "--input-len",
                                    "8", "-o", str(out)])
    assert done.exit_code == 130
    assert done.stderr.strip().splitlines()[-1] == "nsys-cc: interrupted"
    assert set(pd.read_csv(out / "sweep.csv")["cell"]) == {"bs1-in8"}
    status = {c["cell"]: c["status"] for c in json.loads((out / "cells.json").read_text())["cells"]}
    assert status == {"bs1-in8": "done", "bs2-in8": "interrupted", "bs4-in8": "not run"}


def test_the_sweep_dry_run_shows_each_cells_ranks_and_speculative_runs(tmp_path):
    from click.testing import CliRunner

    from nsys_cc.cli import cli

    def blocks(*args):
        done = CliRunner().invoke(cli, ["sweep", "--target", "tiny-llama-target", "--draft", "tiny-llama-draft-xs",
                                        "--device", "cpu", "--dry-run", "-o", str(tmp_path / "sw"), *args])
        assert done.exit_code == 0, done.output
        cells_out = {}
        for part in done.stdout.split("## cell ")[1:]:
            cells_out[part.split(":")[0]] = part
        return cells_out

    # the choice `profile` makes, per cell: the target on one rank interleaved, on two ranks one process per model
    ranks = blocks("--target-tp", "1,2")
    assert set(ranks) == {"bs1-in128-tp1", "bs1-in128-tp2"}
    assert "--tensor-parallel-size" not in ranks["bs1-in128-tp1"]
    assert "# interleaved run 1 of 6: tiny-llama-target + tiny-llama-draft-xs in one process" in ranks["bs1-in128-tp1"]
    assert "# target tiny-llama-target.tp2 (CPU)" in ranks["bs1-in128-tp2"]
    assert "--tensor-parallel-size 2 --distributed-executor-backend mp" in ranks["bs1-in128-tp2"]
    # speculative engines join the interleaved runs (one engine per γ), with the runs asked for
    (spec,) = blocks("--speculate", "1,3", "--repeat", "2", "--replicas", "1").values()
    assert ("# interleaved run 1 of 2: tiny-llama-target + tiny-llama-draft-xs + tiny-llama-draft-xs.spec-g1 + "
            "tiny-llama-draft-xs.spec-g3 in one process") in spec
    for g in (1, 3):
        assert f'"num_speculative_tokens":{g}' in spec
    assert spec.count("--engine tiny-llama-target ") == 1  # one replica
    (separate,) = blocks("--speculate", "1", "--separate-processes").values()
    assert "# speculative tiny-llama-draft-xs.spec-g1" in separate and "interleaved" not in separate
    assert not (tmp_path / "sw").exists()  # a dry run creates nothing
