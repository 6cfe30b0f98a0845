"""Speculative runs at batch 4 with two drafts (fixtures/spec/batch4, `make fixtures`: tiny target, drafts
tiny-llama-draft-xs and tiny-llama-draft-s, each speculating at γ = 1 and 3; dummy weights, so α = 0 and the four
sequences of a batch advance in lockstep).

Batch 4: a verify forward carries 4 × (γ + 1) tokens; the analysis divides by the batch (the `nsys_cc:iteration`
payload) to get tokens verified per sequence, from which it tells verify from decode and prefill and reads γ when no
metrics dump says it. Two drafts: each run belongs to the draft its label names, gets that draft's standalone c, and
each draft's cost model is fitted on its own runs only. Every expectation is recomputed here from the raw rows.
"""

from __future__ import annotations

import shutil
import statistics
from pathlib import Path

import pytest
from test_in_place import expected, fit_by_hand, raw_ranges

import nsys_cc
from conftest import REPO

BATCH4 = REPO / "fixtures" / "spec" / "batch4"
TARGET = BATCH4 / "tiny-llama-target.sqlite"
DRAFTS = ("tiny-llama-draft-xs", "tiny-llama-draft-s")
GAMMAS = (1, 3)
BATCH = 4


def label(draft: str, gamma: int) -> str:
    return f"{draft}.spec-g{gamma}"


def wall(r) -> float:
    return (r[2] - r[1]) / 1e6


class Run:
    """One trace by hand: engine steps (outside warm-up) with the forwards that start in them."""

    def __init__(self, path: Path):
        rows = raw_ranges(str(path))
        warm = [r for r in rows if r[0] == "nsys_cc:warmup"]
        self.iterations = [r for r in rows if r[0] == "nsys_cc:iteration"]
        assert {r[3] for r in self.iterations} == {BATCH}  # the benchmark's batch, the plugin's iteration payload

        def measured(r):
            return not any(w[1] <= r[1] <= w[2] for w in warm)

        self.forwards = [r for r in rows if r[0] == "model_executable()" and measured(r)]
        self.drafts = [r for r in rows if r[0] == "draft_model_executable()" and measured(r)]
        self.steps = [s for s in rows if s[0] == "nsys_cc:step" and measured(s)]

    def inside(self, step, ranges):
        return [r for r in ranges if step[1] <= r[1] <= step[2]]

    def of_tokens(self, per_seq: int):
        """Steps whose target forward verifies `per_seq` tokens per sequence (payload = batch × per_seq)."""
        return [s for s in self.steps if s[3] == BATCH * per_seq]


@pytest.fixture(scope="module")
def result():
    specs = [str(BATCH4 / f"{label(d, g)}.sqlite") for d in DRAFTS for g in GAMMAS]
    return nsys_cc.cost_coefficient(str(TARGET), [str(BATCH4 / f"{d}.sqlite") for d in DRAFTS] + specs)


def entry(res, draft, gamma):
    t = res.speculative.table
    return t[(t["draft"] == draft) & (t["gamma"] == gamma)].iloc[0]


class ByHand:
    def __init__(self, draft: str, gamma: int):
        run = Run(BATCH4 / f"{label(draft, gamma)}.sqlite")
        verify = run.of_tokens(gamma + 1)
        self.steps = len(verify)
        fwd = [run.inside(s, run.forwards) for s in verify]
        drafts = [run.inside(s, run.drafts) for s in verify]
        assert all(len(f) == 1 for f in fwd) and all(len(d) == gamma for d in drafts)
        self.verify_ms = statistics.median(wall(f[0]) for f in fwd)
        self.draft_forward_ms = statistics.median(wall(d) for ds in drafts for d in ds)
        self.draft_step_ms = statistics.median(sum(wall(d) for d in ds) for ds in drafts)
        self.other_ms = statistics.median(wall(s) - wall(f[0]) - sum(wall(d) for d in ds)
                                          for s, f, ds in zip(verify, fwd, drafts))
        self.step_ms = statistics.median(wall(s) for s in verify)
        plain = Run(TARGET)
        self.decode_step_ms = statistics.median(wall(s) for s in plain.of_tokens(1))
        self.decode_ms = statistics.median(wall(run_f[0]) for run_f in
                                           (plain.inside(s, plain.forwards) for s in plain.of_tokens(1)))
        output_len = len([f for f in plain.forwards if plain.iterations[0][1] <= f[1] <= plain.iterations[0][2]])
        per_iter = [sum(1 for s in verify if it[1] <= s[1] <= it[2]) for it in run.iterations]
        self.tokens_per_step = (output_len - 1) / statistics.mean(per_iter)


@pytest.mark.parametrize("draft", DRAFTS)
@pytest.mark.parametrize("gamma", GAMMAS)
def test_batch_4_verify_steps_are_told_by_tokens_per_sequence(result, draft, gamma):
    r, h = entry(result, draft, gamma), ByHand(draft, gamma)
    assert r["step_rule"] == "step ranges"
    assert r["steps"] == h.steps > 0
    for key in ("verify_ms", "draft_forward_ms", "draft_step_ms", "other_ms", "step_ms", "decode_step_ms",
                "decode_ms", "tokens_per_step"):
        assert r[key] == pytest.approx(getattr(h, key), rel=1e-9), key
    assert r["tokens_per_step"] == 1.0 and r["alpha"] == 0.0  # dummy weights: nothing accepted
    assert r["measured_speedup"] == pytest.approx(h.tokens_per_step * h.decode_step_ms / h.step_ms, rel=1e-9)
    steps = result.speculative.steps
    mine = steps[(steps["run"] == label(draft, gamma)) & (steps["kind"] == "verify")]
    assert set(mine["tokens"]) == {gamma + 1}  # tokens verified per sequence, not per forward


@pytest.mark.slow
@pytest.mark.parametrize("gamma", GAMMAS)
def test_batch_4_gamma_from_the_verify_payload_divides_by_the_batch(tmp_path, gamma):
    # Without the metrics dump γ comes from the payload: 4 × (γ + 1) tokens per verify forward over 4 sequences.
    copy = tmp_path / "run.sqlite"
    shutil.copy(BATCH4 / f"{label(DRAFTS[0], gamma)}.sqlite", copy)
    res = nsys_cc.cost_coefficient(str(TARGET), [str(BATCH4 / f"{DRAFTS[0]}.sqlite"), str(copy)])
    (r,) = res.speculative.table.to_dict("records")
    payloads = {s[3] for s in Run(copy).steps} - {BATCH * 32}  # the prompt steps: 4 × 32 tokens
    assert payloads == {BATCH * (gamma + 1)}
    assert r["gamma"] == gamma and r["steps"] == ByHand(DRAFTS[0], gamma).steps
    assert r["alpha_source"] == "tokens per step" and r["alpha"] == 0.0


@pytest.mark.slow
def test_two_drafts_each_get_their_own_runs_standalone_c_and_model(result):
    coef = result.coefficients
    plain = Run(TARGET)
    decode_forward = statistics.median(wall(plain.inside(s, plain.forwards)[0]) for s in plain.of_tokens(1))
    for draft in DRAFTS:
        runs = result.speculative.table[result.speculative.table["draft"] == draft]
        assert sorted(runs["name"]) == sorted(label(draft, g) for g in GAMMAS)
        # standalone c: this draft's plain decode forward ÷ the plain target's, both of 1 token per sequence
        own = Run(BATCH4 / f"{draft}.sqlite")
        c = statistics.median(wall(own.inside(s, own.forwards)[0]) for s in own.of_tokens(1)) / decode_forward
        row = coef[(coef["draft"] == draft) & (coef["phase"] == "decode") & (coef["metric"] == "wall")]
        (forward_c,) = row["c_forward"]  # the forwards' c (the token's c, `c`, adds each forward's logits, sampling)
        assert forward_c == pytest.approx(c, rel=1e-9)
        (want,) = row["c"]
        assert (runs["c_standalone"] == want).all()
        # its cost model: the two runs of this draft only, by hand
        h = {g: ByHand(draft, g) for g in GAMMAS}
        model, predict = fit_by_hand([(g, h[g].draft_step_ms, h[g].verify_ms, h[g].other_ms) for g in GAMMAS],
                                     h[1].decode_step_ms)
        fitted = result.speculative.models[draft]
        for key, value in model.items():
            assert getattr(fitted, key) == pytest.approx(value, rel=1e-9, abs=1e-12), (draft, key)
        for g in GAMMAS:
            assert entry(result, draft, g)["predicted_cost_model"] == pytest.approx(
                predict(0.0, g), rel=1e-9)
            assert expected(0.0, g) == 1.0
        # one other γ per run: no held-out forecast (it needs two), whatever the other draft has
        assert (runs["held_out_fit_gammas"] == "").all()
    assert set(result.speculative.forecast["draft"]) == set(DRAFTS)
