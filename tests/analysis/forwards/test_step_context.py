"""The step table's `context` column (Σ KV length per step) on every route that says it, against the benchmark's
arithmetic and the raw names and payloads read here: fixtures/context/ (one benchmark, batch 2 × prompts of 32 tokens,
4 output tokens: a prefill and 3 decodes per iteration, recorded by the plugin under nsys and on the torch route, and
by vLLM's own detailed step annotations), an older plugin trace (no context: NaN), the public engine traces."""

from __future__ import annotations

import gzip
import json
import re
import sqlite3

import numpy as np
import pytest

from conftest import PUBLIC, REPO
from nsys_cc.analysis.forwards.steps import CONTEXT, read_step_table

FIX = REPO / "fixtures" / "context"
B, L, OUT = 2, 32, 4
# by hand: step g of an iteration (0: the prefill) reads B prompts of L tokens and the g tokens each has generated
WANT = [B * (L + g) for g in range(OUT)]
DETAILED = re.compile(r"^execute_\d+_context_\d+\(sq\d+sk(\d+)sqsq\d+sqsk\d+\)"
                      r"_generation_\d+\(sq\d+sk(\d+)sqsq\d+sqsk\d+\)$")


def _per_iteration(table) -> list[list[float]]:
    steps = table.steps.sort_values("start_ns")
    return [it[CONTEXT].tolist() for _, it in steps.groupby("iteration")]


def test_the_plugins_context_under_nsys_is_the_prompt_and_tokens_generated_so_far():
    with sqlite3.connect(f"file:{FIX / 'plugin.sqlite'}?mode=ro", uri=True) as conn:
        raw = conn.execute(
            "SELECT coalesce(e.text, s.value), e.start, e.\"end\", e.int64Value FROM NVTX_EVENTS e "
            "LEFT JOIN StringIds s ON s.id = e.textId WHERE e.eventType = 59 ORDER BY e.start").fetchall()
    steps = [r for r in raw if r[0] == "nsys_cc:step"]
    marks = [r for r in raw if r[0] == "nsys_cc:step_context"]
    # the raw trace: one context range inside each step range, its payloads the arithmetic's (warm-up included)
    assert len(marks) == len(steps) == 3 * OUT
    assert all(s[1] <= m[1] and m[2] <= s[2] for s, m in zip(steps, marks))
    assert [m[3] for m in marks] == WANT * 3
    table = read_step_table(FIX / "plugin.sqlite")
    assert table.rule == "step ranges"
    assert _per_iteration(table) == [WANT, WANT]  # the two measured iterations


def test_the_plugins_context_on_the_torch_route_travels_in_its_name():
    with gzip.open(FIX / "plugin.pt.trace.json.gz", "rt") as fh:
        names = [e["name"] for e in json.load(fh)["traceEvents"] if e.get("cat") == "user_annotation"]
    assert [int(n.split("#")[1]) for n in names if n.startswith("nsys_cc:step_context#")] == WANT * 3
    assert _per_iteration(read_step_table(FIX / "plugin.pt.trace.json.gz")) == [WANT, WANT]


def test_vllms_detailed_annotations_give_each_steps_context():
    with gzip.open(FIX / "vllm-detailed.pt.trace.json.gz", "rt") as fh:
        events = sorted((e for e in json.load(fh)["traceEvents"] if e.get("cat") == "user_annotation"
                         and e["name"].startswith("execute_")), key=lambda e: float(e["ts"]))
    by_hand = [sum(map(int, DETAILED.match(e["name"]).groups())) for e in events]
    assert by_hand == WANT  # the one profiled batch, its sk summed over both parts
    table = read_step_table(FIX / "vllm-detailed.pt.trace.json.gz")
    # from one step annotation to the next (no engine step frames without stacks): the last closes no step
    assert table.rule == "forward to forward"
    assert table.steps.sort_values("start_ns")[CONTEXT].tolist() == by_hand[:-1]


def test_a_trace_that_says_no_context_has_nan_not_zero():
    table = read_step_table(REPO / "fixtures" / "vllm" / "tiny-llama-target.sqlite")  # made before the range
    assert len(table.steps) and np.isnan(table.steps[CONTEXT].to_numpy(dtype=float)).all()
    plain = read_step_table(REPO / "fixtures" / "torch" / "tiny-llama-target.pt.trace.json.gz")  # vLLM's plain form
    assert len(plain.steps) and np.isnan(plain.steps[CONTEXT].to_numpy(dtype=float)).all()


@pytest.mark.slow
@pytest.mark.skipif(not PUBLIC.is_dir(), reason="the public traces are not here (../shared/traces/public)")
@pytest.mark.parametrize("name", sorted(p.name for p in PUBLIC.glob("*.json.gz")) if PUBLIC.is_dir() else [])
def test_every_public_engine_traces_steps_carry_the_context_its_names_say(name):
    """Each step of the table lies at an annotation whose name says its context: vLLM's detailed `execute_…` (sk of
    both parts), SGLang's `step[…]` inside one; the plain form and the capture traces say none."""
    from nsys_cc.errors import InputError

    with gzip.open(PUBLIC / name, "rt") as fh:
        annotations = [e for e in json.load(fh)["traceEvents"] if e.get("cat") == "user_annotation"]
    said = {}
    for e in annotations:
        if m := DETAILED.match(e["name"]):
            said[float(e["ts"])] = sum(map(int, m.groups()))
    try:
        table = read_step_table(PUBLIC / name)
    except InputError:  # a capture trace: no step
        assert not said
        return
    for row in table.steps.itertuples():
        # by hand: the detailed annotation starting at the step or around it (SGLang's step[…] inside execute_…)
        around = [c for ts, c in said.items() if ts * 1000 <= row.start_ns + 1000]
        if around:
            assert getattr(row, CONTEXT) == around[-1]
        else:
            assert np.isnan(getattr(row, CONTEXT))
