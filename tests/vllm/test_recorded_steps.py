"""The speculative fixtures (real runs of `nsys-cc profile --speculate`, fixtures/spec/README.md): the plugin's step
ranges, forwards inside steps, payloads, and the files each run leaves. Read with raw SQL, never through nsys_cc."""

from __future__ import annotations

import itertools
import json
import sqlite3
from pathlib import Path

import pytest

from conftest import REPO

SPEC = REPO / "fixtures" / "spec"
INPUT_LEN, OUTPUT_LEN, WARMUP, ITERS = 128, 32, 1, 3
# (folder, plain target, draft, γ values)
PAIRS = [(SPEC, "tiny-llama-target", "tiny-llama-draft-xs", (1, 2, 3)),
         (SPEC / "pair-a50", "pair-target-a50", "pair-draft", (1, 2, 3)),
         (SPEC / "pair-a99", "pair-target", "pair-draft", (2,))]
SPEC_RUNS = [(folder, draft, g) for folder, _, draft, gammas in PAIRS for g in gammas]
# The rest of a token's work: the target's logits and sampling, the draft's. The tiny and the known-α pairs'
# runs were made on a quiet machine before the plugin wrote them (fixtures/spec/README.md) and hold none; their layout
# is checked wherever a run has them (batch4's runs, below, were made with them).
PARTS = ("nsys_cc:logits", "nsys_cc:sample", "nsys_cc:draft_logits", "nsys_cc:draft_sample")
PLAIN_RUNS = [(folder, label) for folder, target, draft, _ in PAIRS for label in (target, draft)]


def _ranges(sqlite: Path) -> list[tuple[str, int, int, int | None, int]]:
    """(name, start, end, int64 payload, globalTid) of every push/pop range, in time order."""
    with sqlite3.connect(f"file:{sqlite}?mode=ro", uri=True) as conn:
        return conn.execute(
            "SELECT coalesce(e.text, s.value), e.start, e.\"end\", e.int64Value, e.globalTid FROM NVTX_EVENTS e "
            "LEFT JOIN StringIds s ON s.id = e.textId WHERE e.eventType = 59 ORDER BY e.start").fetchall()


def _steps(sqlite: Path) -> list[dict]:
    """Each `nsys_cc:step` with the forwards that start inside it (any thread)."""
    rows = _ranges(sqlite)
    steps = [r for r in rows if r[0] == "nsys_cc:step"]
    out = []
    for _, start, end, payload, tid in steps:
        inside = [r for r in rows if start <= r[1] <= end and r[0].endswith("model_executable()")]
        parts = [r for r in rows if start <= r[1] <= end and r[0] in PARTS]
        out.append({"payload": payload, "tid": tid, "start": start, "end": end,
                    "target": [r[3] for r in inside if r[0] == "model_executable()"],
                    "drafts": [r[3] for r in inside if r[0] == "draft_model_executable()"],
                    "parts": [(r[0], r[3]) for r in parts]})
    return out


@pytest.mark.parametrize("folder, label", PLAIN_RUNS, ids=lambda v: getattr(v, "name", v))
def test_plain_runs_have_one_step_per_forward(folder, label):
    steps = _steps(folder / f"{label}.sqlite")
    forwards = [r for r in _ranges(folder / f"{label}.sqlite") if r[0] == "model_executable()"]
    assert len(steps) == len(forwards) == (WARMUP + ITERS) * OUTPUT_LEN
    for i, step in enumerate(steps):
        prefill = i % OUTPUT_LEN == 0
        assert step["target"] == [INPUT_LEN if prefill else 1] and step["drafts"] == []
        assert step["payload"] == step["target"][0]
    assert len({s["tid"] for s in steps}) == 1  # in-process engine: one thread
    assert all(a["end"] <= b["start"] for a, b in itertools.pairwise(steps))  # steps never overlap


@pytest.mark.parametrize("folder, draft, gamma", SPEC_RUNS, ids=lambda v: getattr(v, "name", v))
def test_speculative_steps_hold_one_verify_and_gamma_draft_forwards(folder, draft, gamma):
    label = f"{draft}.spec-g{gamma}"
    steps = _steps(folder / f"{label}.sqlite")
    iterations = [r for r in _ranges(folder / f"{label}.sqlite") if r[0] in ("nsys_cc:warmup", "nsys_cc:iteration")]
    assert [r[0] for r in iterations] == ["nsys_cc:warmup"] * WARMUP + ["nsys_cc:iteration"] * ITERS
    per_iteration = [[s for s in steps if it[1] <= s["start"] <= it[2]] for it in iterations]
    assert sum(map(len, per_iteration)) == len(steps)  # every step lies in an iteration
    token = int(any(s["parts"] for s in steps))  # 0: made before the token ranges, as the tiny and known-α pairs'
    for its_steps in per_iteration:
        first, rest = its_steps[0], its_steps[1:]
        assert first["target"] == [INPUT_LEN] and first["payload"] == INPUT_LEN
        assert first["drafts"] == [INPUT_LEN + 1] + [1] * (gamma - 1)  # the draft's prefill, then single tokens
        for step in rest:
            assert step["target"] == [gamma + 1] and step["payload"] == gamma + 1  # verify γ drafts + the bonus
            assert step["drafts"] == [gamma + 2] + [1] * (gamma - 1) or step is rest[-1]
            # the verify's logits over its γ + 1 positions and its rejection sampling, then each draft forward's
            # logits and argmax (one position each) — in a run made with the token ranges (PARTS)
            assert step["parts"] == (token * ([("nsys_cc:logits", gamma + 1), ("nsys_cc:sample", gamma + 1)]
                                              + [("nsys_cc:draft_logits", 1), ("nsys_cc:draft_sample", 1)] * gamma)
                                     ) or step is rest[-1]
        # 1 + accepted tokens per step: the steps yield exactly the output length (the last may yield more).
        assert 1 + len(rest) <= OUTPUT_LEN
    assert len({s["tid"] for s in steps}) == 1


@pytest.mark.parametrize("folder, draft, gamma", SPEC_RUNS, ids=lambda v: getattr(v, "name", v))
def test_speculative_runs_keep_bench_json_and_metrics(folder, draft, gamma):
    label = f"{draft}.spec-g{gamma}"
    bench = json.loads((folder / f"{label}.bench.json").read_text())
    assert len(bench["latencies"]) == ITERS
    metrics = json.loads((folder / f"{label}.metrics.json").read_text())
    assert metrics["format"] == "nsys_cc.vllm_metrics"
    by_name = {m["name"]: m for m in metrics["metrics"]}
    assert len(by_name["vllm:spec_decode_num_accepted_tokens_per_pos"]["values"]) == gamma
    drafts = by_name["vllm:spec_decode_num_drafts"]["value"]
    steps = _steps(folder / f"{label}.sqlite")
    # vLLM counts one draft per verify step; the steps after each prefill are those verify steps.
    verify_steps = sum(1 for s in steps if s["payload"] == gamma + 1)
    assert drafts == verify_steps


BATCH, BATCH_INPUT = 4, 32


@pytest.mark.parametrize("label, gamma", [(f"{d}.spec-g{g}", g) for d in ("tiny-llama-draft-xs", "tiny-llama-draft-s")
                                          for g in (1, 3)] + [(t, 0) for t in ("tiny-llama-target",
                                                                                "tiny-llama-draft-xs")])
def test_batch4_steps_hold_each_forwards_logits_and_sampling(label, gamma):
    """batch4/ (made with the token ranges): after every target forward its logits then its sampling, rows = its
    positions sampled (B after a prefill or a plain decode, B × (γ + 1) after a verify); after every draft forward
    (catch-up or later) its logits then its argmax, B rows each."""
    steps = _steps(SPEC / "batch4" / f"{label}.sqlite")
    assert steps
    for step in steps:
        prefill = step["target"] == [BATCH * BATCH_INPUT]
        rows = BATCH if prefill or gamma == 0 else BATCH * (gamma + 1)
        assert step["target"] == [BATCH * BATCH_INPUT] or step["target"] == [rows]
        want = [("nsys_cc:logits", rows), ("nsys_cc:sample", rows)]
        want += [("nsys_cc:draft_logits", BATCH), ("nsys_cc:draft_sample", BATCH)] * len(step["drafts"])
        assert step["parts"] == want
        assert len(step["drafts"]) in ((0,) if gamma == 0 else (gamma,))


def test_accepted_tokens_shorten_the_speculative_iterations():
    """α ≈ 0.5 at γ = 3 yields about 1.9 tokens per step: far fewer steps than the 32 of the plain run."""
    steps = _steps(SPEC / "pair-a50" / "pair-draft.spec-g3.sqlite")
    per_iteration = len(steps) / (WARMUP + ITERS)
    assert per_iteration < 24
    tiny = _steps(SPEC / "tiny-llama-draft-xs.spec-g3.sqlite")  # α = 0: one token per step
    assert len(tiny) == (WARMUP + ITERS) * OUTPUT_LEN


def test_vllm_scopes_trace_names_steps_verify_and_drafts():
    rows = _ranges(SPEC / "vllm_scopes.spec-g3.sqlite")
    names = [r[0] for r in rows]
    assert not any(n.startswith("nsys_cc:") or n.endswith("model_executable()") for n in names)
    steps = names.count("llm_engine step: get_output")
    assert steps == (1 + 2) * OUTPUT_LEN  # one warm-up and two measured iterations, α = 0
    assert names.count("gpu_model_runner: forward") == names.count("gpu_model_runner: draft") == steps
    # Inside each step: preprocess, forward (verify), sample (rejection), draft, in that order.
    step = next(r for r in rows if r[0] == "llm_engine step: get_output")
    order = [r[0] for r in rows if step[1] <= r[1] <= step[2] and r[0].startswith("gpu_model_runner")]
    assert order[:3] == ["gpu_model_runner: preprocess", "gpu_model_runner: forward", "gpu_model_runner: postprocess"]
    assert order.index("gpu_model_runner: sample") < order.index("gpu_model_runner: draft")
