"""Interleaved runs: one process holding every model, several runs, c pooled with an interval across runs.

The fixtures are three real interleaved runs (fixtures/interleaved/README.md); every expectation is computed here with
raw SQL on the exports and the driver's own JSON, never read back from nsys_cc.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from conftest import FIXTURES, decode_tokens_ms, named_ranges
from nsys_cc.analysis.coefficient.measure import cost_coefficient
from nsys_cc.analysis.coefficient.model import load_model
from nsys_cc.analysis.coefficient.over_runs import cost_coefficient_runs
from nsys_cc.analysis.forwards.engines import InterleavedTraceError
from nsys_cc.errors import RangeNotFoundError

RUNS = [FIXTURES / "interleaved" / f"run-{k}" for k in (1, 2, 3)]
LABELS = ["tiny-llama-target", "tiny-llama-draft-s", "tiny-llama-draft-xs"]
BATCH = 2


def _decode_ms(run, label: str, token: bool = True) -> np.ndarray:
    """The decode tokens (or, `token=False`, forwards) of engine `label` in `run`, ms: the raw-SQL oracle."""
    return decode_tokens_ms(run / "trace.sqlite", label, BATCH, token=token)


def test_the_fixture_holds_two_engines_of_each_model_per_run():
    for run in RUNS:
        doc = json.loads((run / "interleaved.json").read_text())
        assert [e["label"] for e in doc["engines"]] == LABELS * 2
        assert all(e["error"] is None and len(e["latencies"]) == 2 for e in doc["engines"])
        for label in LABELS:
            assert len(named_ranges(run / "trace.sqlite", f"nsys_cc:engine {label}")) == 6
            assert len(_decode_ms(run, label)) == 2 * 2 * 3  # engines × measured iterations × decodes


def test_one_run_read_per_model_by_scope_matches_raw_sql():
    run = RUNS[0]
    sqlite = str(run / "trace.sqlite")
    result = cost_coefficient(sqlite, [sqlite, sqlite], names=LABELS, engines=LABELS)
    coef = result.coefficients.set_index(["draft", "phase", "metric"])
    t = _decode_ms(run, LABELS[0])
    for label in LABELS[1:]:
        d = _decode_ms(run, label)
        row = coef.loc[(label, "decode", "wall")]
        assert row["c"] == pytest.approx(np.median(d) / np.median(t))
        forward = np.median(_decode_ms(run, label, token=False)) / np.median(_decode_ms(run, LABELS[0], token=False))
        assert row["basis"] == "token" and row["c_forward"] == pytest.approx(forward)
        assert (row["n_draft"], row["n_target"], row["runs"]) == (len(d), len(t), 1)
    assert any("rest on the forwards of one run" in n for n in result.notes)
    assert result.runs.empty


def test_without_a_scope_the_models_of_one_process_are_not_mixed():
    # read whole, a trace of three engines gave one model of every engine's forwards (c 0.98–1.03
    # where each engine's own gives 0.30–0.33); now it is refused, naming the engines and the calls that read it
    sqlite = str(RUNS[0] / "trace.sqlite")
    with pytest.raises(InterleavedTraceError, match="3 engines: tiny-llama-target") as err:
        load_model(sqlite, name="all", role="target")
    assert err.value.param == "engines" and "cost_coefficient_runs" in str(err.value)
    alone = load_model(sqlite, name="t", role="target", engine=LABELS[0])
    assert len(alone.phase_rows("decode")) == len(_decode_ms(RUNS[0], LABELS[0], token=False))


def test_an_unknown_scope_names_the_engines_the_trace_has():
    sqlite = str(RUNS[0] / "trace.sqlite")
    with pytest.raises(RangeNotFoundError, match="no 'nsys_cc:engine nope' ranges.*tiny-llama-target") as err:
        load_model(sqlite, name="x", role="target", engine="nope")
    assert err.value.param == "engines"


@pytest.mark.slow
def test_runs_pool_into_one_c_with_c_per_run_beside_it():
    result = cost_coefficient_runs([[r / "trace.sqlite"] * 3 for r in RUNS], names=LABELS,
                                               engines=[LABELS] * 3)
    t = [_decode_ms(r, LABELS[0]) for r in RUNS]
    for label in LABELS[1:]:
        d = [_decode_ms(r, label) for r in RUNS]
        row = result.coefficients.set_index(["draft", "phase", "metric"]).loc[(label, "decode", "wall")]
        # pooled: each run's c (its own medians), then their geometric mean and the t-interval of their logs
        cs = np.log([np.median(di) / np.median(ti) for di, ti in zip(d, t)])
        half = 4.303 * cs.std(ddof=1) / np.sqrt(3)  # t(0.975, 2 degrees of freedom)
        assert row["c"] == pytest.approx(np.exp(cs.mean()))
        assert [row["ci_low"], row["ci_high"]] == pytest.approx([np.exp(cs.mean() - half), np.exp(cs.mean() + half)],
                                                                rel=1e-3)
        assert row["runs"] == 3 and row["n_draft"] == sum(map(len, d))
        assert np.exp(cs.min()) <= row["c"] <= np.exp(cs.max()) and 0 < row["ci_low"] < row["c"] < row["ci_high"]
        # the pooled medians beside it: each run's median, their geometric mean; c is their ratio
        assert row["target_median_ms"] == pytest.approx(np.exp(np.mean(np.log([np.median(ti) for ti in t]))))
        assert row["c"] == pytest.approx(row["draft_median_ms"] / row["target_median_ms"])
        per_run = result.runs[(result.runs["draft"] == label) & (result.runs["phase"] == "decode")
                              & (result.runs["metric"] == "wall")].sort_values("run")
        assert list(per_run["run"]) == [1, 2, 3]
        assert per_run["c"].to_numpy() == pytest.approx([np.median(di) / np.median(ti) for di, ti in zip(d, t)])
        assert per_run["target_median_ms"].to_numpy() == pytest.approx([np.median(ti) for ti in t])
        ft = [_decode_ms(r, LABELS[0], token=False) for r in RUNS]
        fd = [_decode_ms(r, label, token=False) for r in RUNS]
        assert per_run["c_forward"].to_numpy() == pytest.approx([np.median(a) / np.median(b) for a, b in zip(fd, ft)])
        assert row["c_forward"] == pytest.approx(np.exp(np.mean(np.log([np.median(a) / np.median(b)
                                                                         for a, b in zip(fd, ft)]))))
    forwards = result.forwards
    assert sorted(forwards["run"].unique()) == [1, 2, 3]
    assert any("c pools 3 runs" in n and "geometric mean" in n for n in result.notes)


@pytest.mark.slow  # 4 s or more on 2 cores: in `make test`, not the edit-test loop (`make check` ≤ 60 s)
def test_the_runs_are_reported_in_every_format(tmp_path):
    result = cost_coefficient_runs([[r / "trace.sqlite"] * 3 for r in RUNS], names=LABELS,
                                               engines=[LABELS] * 3)
    text = result.render("table")
    runs_part = text[text.index("c per run"):]
    assert runs_part.split("\n\n")[1].count("tiny-llama-draft-xs  decode") == 3  # one row per run
    assert runs_part.split("\n\n")[1].count(" 12/12") == 6  # counts stay counts through the token's rows (not 12.0)
    doc = json.loads(result.render("json"))
    assert {(r["draft"], r["run"]) for r in doc["runs"] if r["phase"] == "decode"} == {
        (label, k) for label in LABELS[1:] for k in (1, 2, 3)}
    report = result.write_report(tmp_path)
    assert (tmp_path / "plots" / "runs.png").is_file() and (tmp_path / "runs.csv").is_file()
    assert "c per run" in report.read_text()


def test_one_run_through_the_runs_function_keeps_the_one_run_interval():
    one = cost_coefficient_runs([[RUNS[1] / "trace.sqlite"] * 3], names=LABELS, engines=[LABELS])
    row = one.coefficients.set_index(["draft", "phase", "metric"]).loc[(LABELS[2], "decode", "wall")]
    assert math.isfinite(row["ci_low"]) and row["runs"] == 1 and one.runs.empty


def test_runs_must_hold_the_same_models():
    from nsys_cc.errors import InputError

    with pytest.raises(InputError, match="same models"):
        cost_coefficient_runs([[RUNS[0] / "trace.sqlite"] * 3, [RUNS[1] / "trace.sqlite"] * 2],
                                          names=LABELS)


def test_the_forward_share_reads_each_models_part_of_the_trace():
    run = RUNS[0]
    trace = run / "trace.sqlite"
    share = cost_coefficient(trace, [trace] * (len(LABELS) - 1), engines=LABELS).forward_share
    assert list(share["model"]) == LABELS
    latencies = {label: json.loads((run / f"{label}.bench.json").read_text())["latencies"] for label in LABELS}
    assert list(share["iterations"]) == [len(latencies[label]) for label in LABELS] == [4, 4, 4]
    assert list(share["forwards_per_iteration"]) == [4.0, 4.0, 4.0]
    assert list(share["latency_ms"]) == pytest.approx([round(np.median(latencies[x]) * 1e3, 3) for x in LABELS])
