"""The forward-share check on the committed vLLM fixtures, against sums computed in SQL here."""

from __future__ import annotations

import json
import shutil
import sqlite3
import statistics
from pathlib import Path

import pytest

from nsys_cc.analysis.coefficient import load_model
from nsys_cc.errors import InputError
from nsys_cc.launch import check

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "vllm"
MODELS = ["tiny-llama-target", "tiny-llama-draft-s", "tiny-llama-draft-xs"]

PER_ITERATION_SQL = """
WITH r AS (SELECT e.start AS s, e."end" AS e, coalesce(e.text, n.value) AS name
           FROM NVTX_EVENTS e LEFT JOIN StringIds n ON n.id = e.textId WHERE e.eventType = 59)
SELECT it.e - it.s,
       (SELECT count(*) FROM r f WHERE f.name = 'model_executable()' AND f.s BETWEEN it.s AND it.e),
       (SELECT total(f.e - f.s) FROM r f WHERE f.name = 'model_executable()' AND f.s BETWEEN it.s AND it.e)
FROM r it WHERE it.name = 'nsys_cc:iteration' ORDER BY it.s
"""


@pytest.mark.parametrize("model", MODELS)
def test_forward_share_matches_sql_sums_and_the_bench_latencies(model):
    sqlite, bench = FIXTURES / f"{model}.sqlite", FIXTURES / f"{model}.bench.json"
    with sqlite3.connect(f"file:{sqlite}?mode=ro", uri=True) as conn:
        rows = conn.execute(PER_ITERATION_SQL).fetchall()
    latencies = json.loads(bench.read_text())["latencies"]
    assert len(rows) == len(latencies) == 3
    shares = [fwd / 1e9 / lat for (_, _, fwd), lat in zip(rows, latencies)]
    got = check.forward_share([(load_model(sqlite, name=model, role="target"), bench)]).iloc[0]
    assert got["model"] == model and got["iterations"] == 3
    assert got["forwards_per_iteration"] == statistics.median(r[1] for r in rows) == 4
    assert got["forward_ms"] == pytest.approx(statistics.median(r[2] for r in rows) / 1e6, abs=1e-3)
    assert got["latency_ms"] == pytest.approx(statistics.median(latencies) * 1e3, abs=1e-3)
    assert got["nvtx_iteration_ms"] == pytest.approx(statistics.median(r[0] for r in rows) / 1e6, abs=1e-3)
    assert got["forward_share"] == pytest.approx(statistics.median(shares), abs=1e-3)
    assert (got["share_min"], got["share_max"]) == pytest.approx((min(shares), max(shares)), abs=1e-3)
    assert model in check.share_note(got) and "median of 3" in check.share_note(got)


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
    scopes = load_model(FIXTURES / "vllm_scopes.sqlite", name="scopes", role="target",
                        range_name="gpu_model_runner: forward", output_len=2)
    row = check.forward_share([(scopes, FIXTURES / "vllm_scopes.bench.json")]).iloc[0]
    assert row["iterations"] == 0
    assert "no measured iteration ranges" in check.share_note(row)


def test_unreadable_inputs_are_input_errors(tmp_path):
    bad = tmp_path / "x.sqlite"
    bad.write_text("not a database")
    with pytest.raises(InputError):
        check.forward_range(bad)
    (tmp_path / "b.json").write_text('{"avg_latency": 1}')
    with pytest.raises(InputError, match="not a vLLM latency --output-json"):
        check.forward_share([(load_model(FIXTURES / "tiny-llama-target.sqlite", name="x", role="target"),
                              tmp_path / "b.json")])
