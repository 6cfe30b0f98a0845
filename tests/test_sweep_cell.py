"""A sweep's cells with a stand-in for `profile`: resume, retry, attempts, unsupported options, the written table.

The stand-in records each call and answers like `launcher.profile` (a ProfileRun-shaped value); real profiles are
in test_sweep_dask.py.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest

from nsys_cc.launch import launcher
from nsys_cc.launch.commands import BenchOptions
from nsys_cc.sweep.cell import ATTEMPTS_FILE, run_cell
from nsys_cc.sweep.grid import Cell, SweepSpec, cells
from nsys_cc.sweep.manifest import read_manifest
from nsys_cc.sweep.run import sweep


class FakeProfile:
    """Answers like `launcher.profile`: c = batch_size / 100 (prefill) and input_len / 10000 (decode)."""

    def __init__(self, fail: set[str] = frozenset()):
        self.calls: list[dict] = []
        self.fail = set(fail)

    def __call__(self, target, drafts, out_dir, options, *, device="auto", timeout=None, force=False, trace=None,
                 nsys_args=(), acceptance=(), seed=0, speculate=(), speculative_config=None, target_tp=1,
                 draft_tp=1, finish=None):  # launcher.profile's: `launch.profile.profile` passes each of them
        # (`finish`, the cell's analysis of its directory, is left out: this stand-in answers with its result)
        out = Path(out_dir)
        self.calls.append({"cell": out.name, "force": force, "batch_size": options.batch_size,
                           "input_len": options.input_len})

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


@pytest.fixture()
def fake(monkeypatch):
    fake = FakeProfile()
    monkeypatch.setattr(launcher, "profile", fake)
    return fake


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
    assert sets[2].target == str(tmp_path / "sw" / "bs4-in128" / "T.sqlite") and sets[2].output_len == 3
    assert not result.failed and result.notes == []


def test_a_rerun_keeps_done_cells_and_retries_failed_ones(tmp_path, monkeypatch):
    spec = SweepSpec("T", ("D",), str(tmp_path / "sw"))
    first = FakeProfile(fail={"bs2-in8"})
    monkeypatch.setattr(launcher, "profile", first)
    result = sweep(spec, cells([1, 2], [8]))
    assert [c.status for c in result.cells] == ["done", "failed"]
    assert any("bs2-in8" in n and "FAILED" in n and "exploded" in n for n in result.notes)
    assert set(pd.read_csv(tmp_path / "sw" / "sweep.csv")["cell"]) == {"bs1-in8"}

    second = FakeProfile()
    monkeypatch.setattr(launcher, "profile", second)
    result = sweep(spec, cells([1, 2], [8]))
    assert [c["cell"] for c in second.calls] == ["bs2-in8"]
    assert [c.status for c in result.cells] == ["resumed", "done"]
    t = pd.read_csv(tmp_path / "sw" / "sweep.csv")
    assert t.groupby("cell")["attempts"].first().to_dict() == {"bs1-in8": 1, "bs2-in8": 2}
    assert any("bs2-in8" in n and "attempt 2" in n for n in result.notes)
    starts = json.loads((tmp_path / "sw" / "bs2-in8" / ATTEMPTS_FILE).read_text())["starts"]
    assert len(starts) == 2 and starts[0]["run_id"] != starts[1]["run_id"]

    # Different benchmark settings: the kept cells are not what is asked for any more.
    third = FakeProfile()
    monkeypatch.setattr(launcher, "profile", third)
    sweep(SweepSpec("T", ("D",), str(tmp_path / "sw"), BenchOptions(iters=9)), cells([1, 2], [8]))
    assert [c["cell"] for c in third.calls] == ["bs1-in8", "bs2-in8"]


def test_force_redoes_a_cell_once_per_sweep_not_on_its_retry(tmp_path, fake):
    spec = SweepSpec("T", ("D",), str(tmp_path / "sw"), force=True, run_id="run-1")
    run_cell(spec.cell(Cell(1, 8)))
    run_cell(spec.cell(Cell(1, 8)))  # the same sweep retrying the cell (its worker was lost)
    run_cell(SweepSpec("T", ("D",), str(tmp_path / "sw"), force=True, run_id="run-2").cell(Cell(1, 8)))
    assert [c["force"] for c in fake.calls] == [True, False, True]


def test_a_cells_profile_goes_through_the_main_paths_choice(tmp_path, fake, monkeypatch):
    # a cell is profiled by `launch.profile.profile` (one process per model: a cell's trace set is one trace per
    # model), not by the one-process-per-model launcher directly, so what that choice checks holds for cells too
    from nsys_cc.launch import profile as profile_mod

    chosen = []
    real = profile_mod.profile
    monkeypatch.setattr(profile_mod, "profile", lambda *a, **k: chosen.append(k.get("separate")) or real(*a, **k))
    sweep(SweepSpec("T", ("D",), str(tmp_path / "sw")), [Cell(1, 8)])
    assert chosen == [True] and len(fake.calls) == 1


class FakeSpeculativeProfile(FakeProfile):
    """`profile` with `speculate`: besides the plain c, an in-place c per γ (0.3 + γ / 100) as the speculative
    analysis gives it (`result.speculative.table`: draft, gamma, c_in_place, c_in_place_ci_low, c_in_place_ci_high)."""

    def __call__(self, target, drafts, out_dir, options, *, speculate=(), **kwargs):
        run = super().__call__(target, drafts, out_dir, options, **kwargs)
        self.calls[-1]["speculate"] = list(speculate)
        spec = pd.DataFrame([{"draft": d, "gamma": g, "c_in_place": 0.3 + g / 100, "c_in_place_ci_low": 0.2,
                              "c_in_place_ci_high": 0.5, "verify_ms": 9.0} for d in drafts for g in speculate])
        run.result.speculative = SimpleNamespace(table=spec)
        return run


def test_speculative_runs_give_rows_with_their_gamma_and_in_place_c(tmp_path, monkeypatch):
    fake = FakeSpeculativeProfile()
    monkeypatch.setattr(launcher, "profile", fake)
    result = sweep(SweepSpec("T", ("D",), str(tmp_path / "sw"), speculate=(3, 1)), cells([2], [8]))
    assert fake.calls[0]["speculate"] == [3, 1]
    t = pd.read_csv(tmp_path / "sw" / "sweep.csv")
    plain, spec = t[t["gamma"].isna()], t[t["gamma"].notna()]
    assert len(plain) == 2 and sorted(spec["gamma"]) == [1, 3]
    assert spec.set_index("gamma")["c"].to_dict() == pytest.approx({3: 0.33, 1: 0.31})
    assert (spec["phase"] == "decode").all() and (spec["metric"] == "wall").all()
    assert (spec["ci_low"] == 0.2).all() and (spec["ci_high"] == 0.5).all() and (spec["batch_size"] == 2).all()
    assert not any("no rows with a gamma" in n for n in result.notes)


def test_ctrl_c_writes_the_table_of_the_cells_completed_then_stops(tmp_path, monkeypatch):
    fake = FakeProfile()

    def interrupted_on_the_second(*args, **kwargs):
        if len(fake.calls) == 1:
            fake.calls.append({})
            raise KeyboardInterrupt
        return fake(*args, **kwargs)

    monkeypatch.setattr(launcher, "profile", interrupted_on_the_second)
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

    fake = FakeProfile()

    def interrupted_on_the_second(*args, **kwargs):
        if len(fake.calls) == 1:
            fake.calls.append({})
            raise KeyboardInterrupt
        return fake(*args, **kwargs)

    monkeypatch.setattr(launcher, "profile", interrupted_on_the_second)
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

    ranks = blocks("--target-tp", "1,2")
    assert set(ranks) == {"bs1-in128-tp1", "bs1-in128-tp2"}
    assert "--tensor-parallel-size" not in ranks["bs1-in128-tp1"]
    assert "# target tiny-llama-target.tp2 (CPU)" in ranks["bs1-in128-tp2"]
    assert "--tensor-parallel-size 2 --distributed-executor-backend mp" in ranks["bs1-in128-tp2"]
    (spec,) = blocks("--speculate", "1,3").values()
    for g in (1, 3):
        assert f"# speculative tiny-llama-draft-xs.spec-g{g}" in spec
        assert f'"num_speculative_tokens":{g}' in spec
    assert not (tmp_path / "sw").exists()  # a dry run creates nothing
