"""`analysis.forwards.steps`: the engine steps of a vLLM run, on the real speculative fixtures, against the steps
worked out here from the raw NVTX rows (stdlib SQLite: each `nsys_cc:step` range outside warm-up, the forwards that
start inside it, its parts by subtraction)."""

from __future__ import annotations

import pytest

from conftest import FIXTURES, raw_sql
from nsys_cc.analysis.forwards.steps import is_speculative, read_step_table, step_table
from nsys_cc.errors import InputError
from nsys_cc.trace import open_trace

SPEC = FIXTURES / "spec"
INPUT_LEN = 128  # the fixtures' prompt (fixtures/spec/README.md)
RANGES_SQL = ("SELECT coalesce(e.text, s.value), e.start, e.\"end\", e.int64Value FROM NVTX_EVENTS e "
              "LEFT JOIN StringIds s ON s.id = e.textId WHERE e.eventType = 59 ORDER BY e.start")


def raw_steps(path) -> list[dict]:
    """The measured steps by hand: each `nsys_cc:step` that starts outside every `nsys_cc:warmup` range, with the
    target and draft forwards that start inside it."""
    rows = raw_sql(path, RANGES_SQL)
    warm = [(s, e) for name, s, e, _ in rows if name == "nsys_cc:warmup"]
    out = []
    for name, start, end, _ in rows:
        if name != "nsys_cc:step" or any(ws <= start <= we for ws, we in warm):
            continue
        inside = [r for r in rows if start <= r[1] <= end]
        out.append({"start": start, "ms": (end - start) / 1e6,
                    "target": [(e - s) / 1e6 for n, s, e, _ in inside if n == "model_executable()"],
                    "payload": [p for n, _, _, p in inside if n == "model_executable()"],
                    "drafts": [(e - s) / 1e6 for n, s, e, _ in inside if n == "draft_model_executable()"]})
    return out


@pytest.mark.parametrize("label, gamma", [("tiny-llama-draft-xs.spec-g2", 2), ("tiny-llama-target", None)])
def test_each_step_range_is_a_step_with_the_forwards_that_start_in_it(label, gamma):
    path = SPEC / f"{label}.sqlite"
    table = read_step_table(path)
    raw = raw_steps(path)
    assert table.rule == "step ranges" and table.iterations == 3
    assert all(len(s["target"]) == 1 for s in raw)  # one target forward a step: every step is kept
    steps = table.steps
    assert list(steps["start_ns"]) == [s["start"] for s in raw]
    assert list(steps["step_ms"]) == pytest.approx([s["ms"] for s in raw])
    assert list(steps["target_ms"]) == pytest.approx([s["target"][0] for s in raw])
    assert list(steps["draft_forwards"]) == [len(s["drafts"]) for s in raw]
    assert list(steps["draft_ms"]) == pytest.approx([sum(s["drafts"]) for s in raw])
    # what is not a forward is the rest of the step
    assert list(steps["other_ms"]) == pytest.approx([s["ms"] - s["target"][0] - sum(s["drafts"]) for s in raw])
    later = "verify" if gamma else "decode"
    assert list(steps["kind"]) == ["prefill" if s["payload"][0] == INPUT_LEN else later for s in raw]
    # a verify forward holds γ + 1 tokens a sequence, and each speculative step drafts γ tokens
    assert table.gamma_from_payload == gamma
    if gamma:
        assert set(steps.loc[steps["kind"] == "verify", "draft_forwards"]) == {gamma}
        assert table.draft_forwards.groupby("step").size().tolist() == [gamma] * len(raw)


def test_a_speculative_run_is_told_by_its_draft_forwards():
    assert is_speculative(SPEC / "tiny-llama-draft-xs.spec-g1.sqlite")
    assert not is_speculative(SPEC / "tiny-llama-target.sqlite")
    assert not is_speculative(SPEC / "tiny-llama-draft-xs.sqlite")  # the draft profiled alone is a plain run


def test_a_trace_without_the_forward_range_is_one_error():
    with open_trace(SPEC / "tiny-llama-target.sqlite") as trace:
        ranges = trace.nvtx_ranges()
    with pytest.raises(InputError, match=r"no 'nope' ranges \(target forwards\) in the trace"):
        step_table(ranges, "nope")
    warm_only = ranges[ranges["name"].isin(["nsys_cc:warmup", "model_executable()"])]
    warm = warm_only[warm_only["name"] == "nsys_cc:warmup"].iloc[0]
    inside = warm_only[(warm_only["start_ns"] >= warm["start_ns"]) & (warm_only["start_ns"] <= warm["end_ns"])]
    with pytest.raises(InputError, match=r"every 'model_executable\(\)' range ran inside a warm-up iteration"):
        step_table(inside, "model_executable()")
