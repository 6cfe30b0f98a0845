"""The price of speculation at K = 0 (`analysis.tune.k0`), end to end on the CPU: a tune design with its K = 0 engine
profiled for real (vLLM's CPU build under nsys, through `nsys_cc.launch` as a tune round profiles), then read.

Oracles: the trace's raw NVTX rows read with SQL (the K = 0 engine's draft forwards per step and the tokens of its
target forwards), the benchmark's arithmetic for Σ context (a step of a batch of B prompts of L tokens, after g tokens
generated per sequence, reads B × (L + g) tokens of K/V), and vLLM's own validator for the schedule."""

from __future__ import annotations

import sqlite3

import numpy as np
import pytest

from nsys_cc.analysis.tune import k0
from nsys_cc.analysis.tune.keys import CellKey
from nsys_cc.errors import InputError

TARGET, DRAFT = "tiny-llama-target", "tiny-llama-draft-xs"
CELLS = {CellKey(1, 32): [2], CellKey(2, 64): [2]}  # 2 batch sizes, 2 prompt lengths
OUTPUT_LEN, WARMUP, ITERS = 6, 1, 3


def test_cells_pair_their_plain_target_with_their_k0_engine_and_nothing_else():
    labels = ["bs1-in32.t", "bs1-in32.d.spec-g2", "bs1-in32.d.k0.spec-g2", "bs1-in32.d.schedule.spec-g2",
              "bs2-in64.t", "bs2-in64.d.spec-g2", "bs4.t", "bs4.d.k0.spec-g3", "bs8.d.k0.spec-g3", "t"]
    assert k0.design_pairs(labels) == {CellKey(1, 32): ("bs1-in32.t", "bs1-in32.d.k0.spec-g2"),
                                       CellKey(4): ("bs4.t", "bs4.d.k0.spec-g3")}


def test_a_directory_that_is_no_profile_is_refused_in_one_line(tmp_path):
    with pytest.raises(InputError, match="not a profile directory"):
        k0.overhead(tmp_path)


@pytest.fixture(scope="module")
def design(tmp_path_factory):
    from nsys_cc.launch import interleaved, orchestrator
    from nsys_cc.request import ProfileRequest

    out = tmp_path_factory.mktemp("k0") / "round-1"
    request = ProfileRequest(TARGET, (DRAFT,), out, output_len=OUTPUT_LEN, warmup_iters=WARMUP, iters=ITERS,
                             repeat=1, replicas=1, device="cpu", trace="nvtx", timeout=0)
    engines = interleaved.design_engines(TARGET, DRAFT, CELLS, request.options, False, k0=True)
    done = orchestrator.run(interleaved.Interleaved(request, engines, gpu=False))
    assert all(r.ok for r in done.interleaved), [r.reason for r in done.interleaved]
    return out, engines


def _rows(sqlite) -> list[tuple[str, int, int, int | None]]:
    with sqlite3.connect(f"file:{sqlite}?mode=ro", uri=True) as conn:
        return conn.execute(
            "SELECT coalesce(e.text, s.value), e.start, e.\"end\", e.int64Value FROM NVTX_EVENTS e "
            "LEFT JOIN StringIds s ON s.id = e.textId WHERE e.eventType = 59 ORDER BY e.start").fetchall()


@pytest.mark.vllm
@pytest.mark.nsys
def test_k0_costs_more_than_plain_decoding_and_drafts_nothing(design):
    out, engines = design
    table = k0.overhead(out)
    assert [(r.batch_size, r.input_len) for r in table.itertuples()] == [(1, 32), (2, 64)]
    assert (table["metric"] == "wall").all()  # a CPU-only trace
    assert (table["gamma"] == 2).all()
    assert (table["overhead_ms"] > 0).all(), table[["batch_size", "plain_step_ms", "k0_step_ms"]]
    np.testing.assert_allclose(table["overhead_ms"], table["k0_step_ms"] - table["plain_step_ms"], rtol=1e-9)
    assert (table["draft_forwards_per_step"] == 1).all()
    assert (table["tokens_per_sequence"] == 1).all() and (table["plain_tokens_per_sequence"] == 1).all()
    assert (table["draft_tokens_per_sequence"] == 2).all()  # V1's catch-up: 2 tokens a sequence
    # The raw trace says the same: inside the K = 0 engine's windows, every target forward after a prefill verifies
    # one token per sequence and is followed by exactly one draft forward of 2 tokens per sequence before the next.
    rows = _rows(out / "run-1" / "trace.sqlite")
    for key in CELLS:
        label = f"{key.name}.{DRAFT}.k0.spec-g2"
        windows = [(s, e) for n, s, e, _ in rows if n == f"nsys_cc:engine {label}"]
        assert len(windows) == WARMUP + ITERS
        for s, e in windows[WARMUP:]:
            inside = [(n, p) for n, start, _, p in rows if s <= start <= e
                      and n in ("model_executable()", "draft_model_executable()")]
            decodes = [i for i, (n, p) in enumerate(inside) if n == "model_executable()" and p == key.batch_size]
            assert len(decodes) == OUTPUT_LEN - 1
            for i in decodes[:-1]:
                assert inside[i + 1] == ("draft_model_executable()", 2 * key.batch_size)
                assert inside[i + 2][0] == "model_executable()"


@pytest.mark.vllm
@pytest.mark.nsys
def test_every_steps_context_is_the_prompt_and_the_tokens_generated_so_far(design):
    from nsys_cc.analysis.forwards.engines import in_engine
    from nsys_cc.analysis.forwards.ranges import forward_range, marked_ranges
    from nsys_cc.analysis.forwards.steps import CONTEXT, step_table
    from nsys_cc.trace import open_trace

    out, _ = design
    with open_trace(str(out / "run-1" / "trace.sqlite")) as trace:
        ranges = marked_ranges(trace, None, engines=True)
        for key in CELLS:
            for label in (f"{key.name}.{TARGET}", f"{key.name}.{DRAFT}.k0.spec-g2"):
                mine = in_engine(ranges, label)
                name, _ = forward_range(mine, None, label=label)
                steps = step_table(mine, name).steps.sort_values("start_ns")
                b, n = key.batch_size, key.input_len
                for _, it in steps.groupby("iteration"):
                    # by hand: step g (0: the prefill) reads B prompts of L tokens and the g tokens each generated
                    want = [b * (n + g) for g in range(OUTPUT_LEN)]
                    assert it[CONTEXT].tolist() == want, (label, it[CONTEXT].tolist())


@pytest.mark.vllm
@pytest.mark.nsys
def test_the_k0_schedule_is_one_vllms_validator_takes(design):
    import json

    from nsys_cc.workflows.tune import validate_with_vllm

    _, engines = design
    (config,) = {e.speculative_config for e in engines if ".k0." in e.label}
    table = json.loads(config)["num_speculative_tokens_per_batch_size"]
    assert validate_with_vllm(table) == [(1, 1024, 0)]
