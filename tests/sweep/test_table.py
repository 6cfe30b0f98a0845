"""A sweep's table on real speculative traces: one row per γ with the in-place c of that run (the table's gamma
column), beside the plain rows with an empty gamma. The in-place c itself is recomputed from raw NVTX rows in
tests/analysis/speculative/test_in_place.py; here the table must carry it for every run, with its interval, and nothing
else."""

from __future__ import annotations

import sqlite3
import statistics
from pathlib import Path

import pandas as pd
import pytest

import nsys_cc
from conftest import REPO
from nsys_cc.sweep import table as table_mod

SPEC = REPO / "fixtures" / "spec"
DRAFT = "tiny-llama-draft-xs"


def _median_ms(path: Path, name: str, max_payload: int, min_payload: int = 0) -> float:
    """Median duration (ms) of the `name` ranges with a payload of `min_payload`…`max_payload` tokens, outside
    warm-up, straight from the export."""
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
        rows = db.execute(
            "SELECT e.start, e.end FROM NVTX_EVENTS e JOIN StringIds s ON s.id = e.textId "
            "WHERE s.value = ? AND e.int64Value BETWEEN ? AND ? AND NOT EXISTS (SELECT 1 FROM NVTX_EVENTS w "
            "JOIN StringIds ws ON ws.id = w.textId WHERE ws.value = 'nsys_cc:warmup' AND e.start >= w.start "
            "AND e.start < w.end)", (name, min_payload, max_payload)).fetchall()
    return statistics.median((end - start) / 1e6 for start, end in rows)


@pytest.fixture(scope="module")
def table() -> pd.DataFrame:
    specs = [str(SPEC / f"{DRAFT}.spec-g{g}.sqlite") for g in (1, 2, 3)]
    result = nsys_cc.cost_coefficient(str(SPEC / "tiny-llama-target.sqlite"), [str(SPEC / f"{DRAFT}.sqlite"), *specs])
    return table_mod.from_result(result, cell="bs1-in128", batch_size=1, input_len=128, target_tp=1, attempts=1)


@pytest.mark.slow
def test_one_row_per_gamma_with_the_in_place_c(table):
    spec = table[table["gamma"].notna()].sort_values("gamma")
    assert list(spec["gamma"]) == [1, 2, 3]
    assert set(spec["phase"]) == {"decode"} and set(spec["metric"]) == {"wall"} and set(spec["draft"]) == {DRAFT}
    for row in spec.itertuples():
        trace = SPEC / f"{DRAFT}.spec-g{int(row.gamma)}.sqlite"
        # in-place c: median draft forward of the decode steps (payload γ + 2 for the first of a step, then 1; the
        # 129-token draft prefill left out) ÷ median verify forward (γ + 1 tokens, batch 1; the prefill left out)
        g = int(row.gamma)
        c = _median_ms(trace, "draft_model_executable()", g + 2) / _median_ms(trace, "model_executable()", g + 1)
        assert row.c == pytest.approx(c, rel=0.05)
        assert row.ci_low <= row.c <= row.ci_high


def test_plain_rows_keep_an_empty_gamma(table):
    plain = table[table["gamma"].isna()]
    assert not plain.empty and set(plain["phase"]) >= {"prefill", "decode"}
    assert (plain["cell"] == "bs1-in128").all() and (plain["batch_size"] == 1).all()
    # The plain c of the two separate runs (Def. 3.7): median draft forward ÷ median target forward of the phase
    # (batch 1: 128 prompt tokens in the prefill forward, 1 in a decode forward), straight from the exports.
    assert set(plain["draft"]) == {DRAFT} and set(plain["metric"]) == {"wall"}
    for phase, tokens in (("prefill", 128), ("decode", 1)):
        (c,) = plain.loc[plain["phase"] == phase, "c"]
        want = (_median_ms(SPEC / f"{DRAFT}.sqlite", "model_executable()", tokens, tokens)
                / _median_ms(SPEC / "tiny-llama-target.sqlite", "model_executable()", tokens, tokens))
        assert c == pytest.approx(want, rel=1e-9), phase
