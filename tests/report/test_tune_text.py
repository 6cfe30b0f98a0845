"""`report.tune_text`: the words `nsys-cc tune` prints (and report.md holds), on fits of cells written from a known
cost model (tests/analysis/tune/test_model.py's): which batch sizes the table shows, each number as the result holds
it, the held-out cells by their key, the NOT RECOMMENDED paragraph exactly when the schedule is not trusted. The
real fixtures' text is compared byte for byte before and after every change (scripts/output_snapshot.py)."""

from __future__ import annotations

import dataclasses
import json
import math

from conftest import room_module
from nsys_cc.analysis.tune import schedule as tune_schedule
from nsys_cc.analysis.tune.keys import CellKey
from nsys_cc.report.tune_text import UNTRUSTED_EXIT, render_text

model_tests = room_module("analysis/tune/test_model.py")


def _fit(held_out=(), **kw):
    stats = model_tests._stats(200, [180, 160, 140])
    fitted = [model_tests._cell(b, g, stats) for b, g in model_tests.DESIGN]
    return tune_schedule.fit_schedule(fitted, list(held_out), draws=50, max_batch_size=16, **kw)


def _table_rows(text: str) -> dict[int, list[str]]:
    """The forecast table's rows by batch size: the lines between its header and the blank line after it."""
    lines = text.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.lstrip().startswith("B  best γ"))
    rows = {}
    for ln in lines[start + 1:]:
        if not ln.strip():
            break
        rows[int(ln.split()[0])] = ln.split()
    return rows


def test_the_table_shows_the_first_the_last_every_boundary_and_every_measured_batch_size():
    held = dataclasses.replace(model_tests._cell(4, 2, model_tests._stats(200, [180, 160])), measured_speedup=1.2)
    r = _fit([held])
    rows = _table_rows(render_text(r))
    boundaries = {start for start, _, _ in r.schedule}
    assert set(rows) == {1, 16, 4, 8} | boundaries
    by = {(f["batch_size"], f["gamma"]): f for f in r.forecast}
    for b, row in rows.items():
        g = next(gg for s, e, gg in r.schedule if s <= b <= e)
        assert int(row[1]) == g
        if g:  # the best γ's speedup and its interval, to 3 significant figures
            f = by[(b, g)]
            assert row[2] == f"{f['speedup']:.3g}×"
            assert row[3] == f"[{f['speedup_ci_low']:.3g}–{f['speedup_ci_high']:.3g}]"


def test_a_held_out_cell_is_named_by_its_key_and_checked_in_words():
    held = dataclasses.replace(model_tests._cell(4, 2, model_tests._stats(200, [180, 160])), measured_speedup=1.2)
    r = _fit([held])
    c = r.checks[0]
    line = next(ln for ln in render_text(r).splitlines() if ln.startswith("  B=4 γ=2: forecast"))
    assert f"vs measured 1.2× ({c['error']:+.1%}" in line
    assert ("within 10 %" if abs(c["error"]) <= 0.1 else "outside 10 %") in line
    # a cell read from a sweep's bs4-in128/ keeps its prompt length, and says it
    keyed = dataclasses.replace(held, key=CellKey(4, 128))
    text = render_text(_fit([keyed]))
    assert "  B=4 L=128 γ=2: forecast" in text and "  B=4 γ=2:" not in text
    assert "B=4 L=128: benchmark γ=" in text  # its schedule check row too


def test_no_held_out_cell_says_how_to_add_some():
    text = render_text(_fit())
    assert "  none measured: add --check B:γ (e.g. 4:2,16:3) to profile some" in text


def test_an_untrusted_schedule_is_printed_for_inspection_only_with_no_config():
    # measured far below its forecast: the model is refuted at B = 4
    held = dataclasses.replace(model_tests._cell(4, 2, model_tests._stats(200, [180, 160])), measured_speedup=0.3)
    r = _fit([held])
    assert not r.trusted
    text = render_text(r, ["the workflow's note"])
    assert f"NOT RECOMMENDED: {r.trust_reason}." in text and f"Measure next: {r.next_steps}." in text
    assert f"no --speculative-config is given (exit code {UNTRUSTED_EXIT})" in text
    assert f"num_speculative_tokens_per_batch_size (server workload, fitted, not recommended): " \
           f"{json.dumps(r.schedule)}" in text
    assert "--speculative-config: none (not recommended: see above)" in text and "--speculative-config '" not in text
    assert text.endswith("note: the workflow's note\n")  # the result's notes, then the caller's


def test_a_trusted_schedule_gives_its_whole_config():
    r = _fit()
    if not r.trusted:  # no held-out cell, cells with intervals: nothing refutes it
        raise AssertionError(r.trust_reason)
    text = render_text(r)
    assert "NOT RECOMMENDED" not in text
    config = r.speculative_config()
    assert config is None or f"--speculative-config '{config}'" in text
    assert json.loads(config or "{}").get("num_speculative_tokens_per_batch_size", r.schedule) == r.schedule


def test_a_forecast_without_interval_says_so():
    r = _fit()
    nan_rows = [dict(f, speedup_ci_low=math.nan, speedup_ci_high=math.nan) for f in r.forecast]
    text = render_text(dataclasses.replace(r, forecast=nan_rows))
    rows = _table_rows(text)
    assert all(row[3:5] == ["(no", "interval)"] for b, row in rows.items() if int(row[1]))
