"""A serving trace's steps grouped by kind, batch and context (`analysis.forwards.step_groups`, `result.by_step`): a
`vllm bench serve --profile`-shaped trace built whole (`gpu_shaped_kineto.serve_trace`: NOT a real run — vLLM's server
is not profiled on a GPU here) of 24 requests of varying prompts and outputs, most steps mixed, every step's GPU work
known. The oracle: the schedule the builder wrote, each step's GPU span from the work written, and the bins worked
out here by hand."""

from __future__ import annotations

import re
import statistics

import gpu_shaped_kineto as gsk
import pytest

import nsys_cc
from conftest import cli_in_process

DETAILED = re.compile(r"^execute_(\d+)_context_(\d+)\(sq(\d+)sk(\d+)sqsq\d+sqsk\d+\)"
                      r"_generation_(\d+)\(sq(\d+)sk(\d+)sqsq\d+sqsk\d+\)$")


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    built = gsk.serve_trace(tmp_path_factory.mktemp("serve") / "serve.pt.trace.json.gz")
    return built, nsys_cc.analyze(built.made.path)


def bins(value: int, first: int) -> tuple[int, int]:
    """Powers of two, by hand: batch 1, 2, 3–4, 5–8, …; context 0–1023, 1024–2047, …"""
    if first == 1:
        lo, hi = 1, 1
        while hi < value:
            lo, hi = hi + 1, hi * 2
        return lo, hi
    lo, hi = 0, first - 1
    while value > hi:
        lo, hi = hi + 1, 2 * hi + 1
    return lo, hi


@pytest.mark.slow
def test_every_step_is_read_with_its_kind_batch_and_context(served):
    built, res = served
    (model,) = res.models
    kept = model.forwards[model.forwards["kept"]].sort_values("start_ns")
    want = [s for s in built.steps if s["kind"] != "empty"]
    assert len(kept) == len(want) and {s["kind"] for s in want} == {"prefill", "decode", "mixed"}
    for row, step in zip(kept.itertuples(), want):
        m = DETAILED.match(step["name"])
        total, c_req, c_sq, c_sk, g_req, g_sq, g_sk = map(int, m.groups())
        assert row.start_ns == step["start"]
        assert row.step_kind == step["kind"] == row.phase
        assert row.batch == c_req + g_req == step["batch"]
        assert row.step_tokens == total == step["tokens"]
        assert row.context == c_sk + g_sk == step["context"]
    # the empty steps are dropped, said
    assert sum(s["kind"] == "empty" for s in built.steps) == 3
    assert any("3 of its 95 vLLM steps schedule no tokens" in n for n in res.notes)
    # mixed steps are a phase of their own, measured
    assert model.phase_count("mixed") == sum(s["kind"] == "mixed" for s in built.steps) > 20


def test_the_steps_by_kind_batch_and_context_are_the_known_work(served):
    built, res = served
    work = {w.range.start: w for w in built.made.work if w.range.name.startswith("execute_")}
    groups: dict[tuple, list] = {}
    for s in built.steps:
        if s["kind"] == "empty":
            continue
        key = (s["kind"], *bins(s["batch"], 1), *bins(s["context"], 1024))
        groups.setdefault(key, []).append(s)
    table = res.by_step
    assert len(table) == len(groups)
    assert list(table.columns[:10]) == ["model", "kind", "batch", "batch_lo", "batch_hi", "context", "context_lo",
                                        "context_hi", "steps", "tokens_median"]
    for row in table.itertuples():
        steps = groups[(row.kind, row.batch_lo, row.batch_hi, row.context_lo, row.context_hi)]
        assert row.steps == len(steps)
        # labelled by what its steps held, within the bin: "3", not the bin "3–4", when every step had batch 3
        b, c = [s["batch"] for s in steps], [s["context"] for s in steps]
        assert row.batch == (f"{min(b):,}" if min(b) == max(b) else f"{min(b):,}–{max(b):,}")
        assert row.context == (f"{min(c):,}" if min(c) == max(c) else f"{min(c):,}–{max(c):,}")
        assert row.tokens_median == statistics.median(s["tokens"] for s in steps)
        assert row.gpu_span_ms == pytest.approx(statistics.median(work[s["start"]].span_ns for s in steps) / 1e6,
                                                rel=1e-12)
        assert row.kernel_sum_ms == pytest.approx(
            statistics.median(work[s["start"]].kernel_sum_ns for s in steps) / 1e6, rel=1e-12)
        assert row.wall_ms == pytest.approx(statistics.median(s["end"] - s["start"] for s in steps) / 1e6, rel=1e-12)
    assert table["kind"].tolist() == sorted(table["kind"], key=["prefill", "decode", "verify", "mixed"].index)


@pytest.mark.slow
def test_the_text_output_shows_the_steps_by_kind_batch_and_context(served):
    built, res = served
    result = cli_in_process("analyze", str(built.made.path))
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "Steps by kind, batch and context" in out
    header = next(ln for ln in out.splitlines() if ln.startswith("Model") and "Context (tokens)" in ln)
    assert header.split()[:6] == ["Model", "Kind", "Batch", "Context", "(tokens)", "Steps"]
    first = res.by_step.iloc[0]
    assert any(ln.split()[:3] == ["serve", first["kind"], first["batch"]] for ln in out.splitlines())
