"""The forward-share check on the committed vLLM fixtures, against sums computed in SQL here: the analysis's own
(`CostCoefficientResult.forward_share`, `nsys_cc.analysis.profile_dir.forward_share`), made whenever vLLM's latencies
sit beside a trace; and `profile`'s check of a fresh export (`launch.check`)."""

from __future__ import annotations

import json
import shutil
import sqlite3
import statistics

import pytest

import nsys_cc
from conftest import REPO
from nsys_cc.errors import InputError
from nsys_cc.launch import check

FIXTURES = REPO / "fixtures" / "vllm"
MODELS = ["tiny-llama-target", "tiny-llama-draft-s", "tiny-llama-draft-xs"]

PER_ITERATION_SQL = """
WITH r AS (SELECT e.start AS s, e."end" AS e, coalesce(e.text, n.value) AS name
           FROM NVTX_EVENTS e LEFT JOIN StringIds n ON n.id = e.textId WHERE e.eventType = 59)
SELECT it.e - it.s,
       (SELECT count(*) FROM r f WHERE f.name = 'model_executable()' AND f.s BETWEEN it.s AND it.e),
       (SELECT total(f.e - f.s) FROM r f WHERE f.name = 'model_executable()' AND f.s BETWEEN it.s AND it.e)
FROM r it WHERE it.name = 'nsys_cc:iteration' ORDER BY it.s
"""


@pytest.fixture(scope="module")
def analysed():
    return nsys_cc.cost_coefficient(FIXTURES / f"{MODELS[0]}.sqlite", [FIXTURES / f"{m}.sqlite" for m in MODELS[1:]])


@pytest.mark.parametrize("model", MODELS)
def test_forward_share_matches_sql_sums_and_the_bench_latencies(model, analysed):
    sqlite, bench = FIXTURES / f"{model}.sqlite", FIXTURES / f"{model}.bench.json"
    with sqlite3.connect(f"file:{sqlite}?mode=ro", uri=True) as conn:
        rows = conn.execute(PER_ITERATION_SQL).fetchall()
    latencies = json.loads(bench.read_text())["latencies"]
    assert len(rows) == len(latencies) == 3
    shares = [fwd / 1e9 / lat for (_, _, fwd), lat in zip(rows, latencies)]
    table = analysed.forward_share
    assert list(table["model"]) == MODELS and list(table["run"]) == [1] * 3
    got = table[table["model"] == model].iloc[0]
    assert got["iterations"] == 3
    assert got["forwards_per_iteration"] == statistics.median(r[1] for r in rows) == 4
    assert got["forward_ms"] == pytest.approx(statistics.median(r[2] for r in rows) / 1e6, abs=1e-3)
    assert got["latency_ms"] == pytest.approx(statistics.median(latencies) * 1e3, abs=1e-3)
    assert got["nvtx_iteration_ms"] == pytest.approx(statistics.median(r[0] for r in rows) / 1e6, abs=1e-3)
    assert got["forward_share"] == pytest.approx(statistics.median(shares), abs=1e-3)
    assert (got["share_min"], got["share_max"]) == pytest.approx((min(shares), max(shares)), abs=1e-3)
    (note,) = [n for n in analysed.notes if n.startswith(f"{model}: forward ranges cover")]
    assert "median of 3" in note and f"{statistics.median(shares):.0%}" in note


def test_forward_range_is_the_plugins_else_vllms_own_scope(tmp_path):
    assert check.forward_range(FIXTURES / "tiny-llama-target.sqlite") == ("model_executable()", 20)
    assert check.forward_range(FIXTURES / "vllm_scopes.sqlite") == ("gpu_model_runner: forward", 20)
    bare = tmp_path / "no-forwards.sqlite"
    shutil.copy(FIXTURES / "tiny-llama-target.sqlite", bare)
    with sqlite3.connect(bare) as conn:
        conn.execute("DELETE FROM NVTX_EVENTS WHERE textId IN "
                     "(SELECT id FROM StringIds WHERE value = 'model_executable()')")
    assert check.forward_range(bare) == ("model_executable()", 0)


def test_a_trace_without_iteration_ranges_has_no_share():
    res = nsys_cc.cost_coefficient(FIXTURES / "vllm_scopes.sqlite", FIXTURES / "tiny-llama-draft-xs.sqlite",
                                   output_len=4)
    row = res.forward_share.iloc[0]
    assert row["model"] == "vllm_scopes" and row["iterations"] == 0
    assert "vllm_scopes: no measured iteration ranges in the trace, so no forward share" in res.notes


def test_unreadable_inputs_are_input_errors_or_said(tmp_path):
    bad = tmp_path / "x.sqlite"
    bad.write_text("not a database")
    with pytest.raises(InputError):
        check.forward_range(bad)
    # a latency file that is not vLLM's: the analysis stands, the share is left out with the reason
    shutil.copy(FIXTURES / "tiny-llama-target.sqlite", tmp_path / "t.sqlite")
    (tmp_path / "t.bench.json").write_text('{"avg_latency": 1}')
    res = nsys_cc.cost_coefficient(tmp_path / "t.sqlite", FIXTURES / "tiny-llama-draft-xs.sqlite")
    assert list(res.forward_share["model"]) == ["tiny-llama-draft-xs"]
    assert any(n.startswith("t: ") and "not a vLLM latency --output-json" in n and n.endswith("no forward share")
               for n in res.notes)
