"""Where a speculative run's α and γ come from (docs/speculative.md, "Which traces" and "Numbers"), on copies of the
real fixtures in fixtures/spec with what a run left beside its trace removed or moved:

- α: the metrics dump beside the trace (`X.metrics.json`), else `--spec-metrics X.sqlite=DUMP`, else the α whose
  E(α, γ) equals the tokens per step measured in the trace (closed forms at γ = 1 and 2 here);
- γ: the dump's per-position vector, else the verify payload (tokens verified per sequence − 1), else the label
  `<draft>.spec-g<γ>`; a label that disagrees with the run is noted; without any of the three, one error line.

Expected numbers come from the raw rows and the dumps by hand (helpers of test_in_place.py).
"""

from __future__ import annotations

import json
import math
import shutil

import pytest
from click.testing import CliRunner
from test_in_place import SPEC, Raw, alpha_iid_by_hand, metrics, raw_ranges, trace

import nsys_cc
from nsys_cc.cli import cli

A50 = SPEC / "pair-a50"
TARGET, DRAFT = str(A50 / "pair-target-a50.sqlite"), str(A50 / "pair-draft.sqlite")


def copy_without_dump(tmp_path, label: str, as_name: str):
    """The trace (and its bench JSON) under another name in tmp_path, without the metrics dump."""
    src = SPEC / f"{label}.sqlite"
    dst = tmp_path / f"{as_name}.sqlite"
    shutil.copy(src, dst)
    shutil.copy(SPEC / f"{label}.bench.json", tmp_path / f"{as_name}.bench.json")
    return dst


def tokens_per_step_by_hand(label: str, gamma: int) -> float:
    """(output length − 1) ÷ the mean number of verify steps per measured iteration, from the raw rows."""
    import statistics

    run = Raw(trace(label), gamma)
    verify = run.of_kind("verify")
    per_iter = [sum(1 for s in verify if run.iteration_of(s[0]) == i) for i in range(len(run.iterations))]
    output_len = Raw(TARGET).forwards_per_iteration()
    return (output_len - 1) / statistics.mean(per_iter)


@pytest.mark.slow
@pytest.mark.parametrize("gamma", [1, 2])
def test_without_a_metrics_dump_alpha_is_the_one_the_tokens_per_step_imply(tmp_path, gamma):
    label = f"pair-a50/pair-draft.spec-g{gamma}"
    copy = copy_without_dump(tmp_path, label, f"pair-draft.spec-g{gamma}")
    res = nsys_cc.cost_coefficient(TARGET, [DRAFT, str(copy)])
    (r,) = res.speculative.table.to_dict("records")
    tps = tokens_per_step_by_hand(label, gamma)
    # E(α, 1) = 1 + α; E(α, 2) = 1 + α + α²
    want = tps - 1 if gamma == 1 else (math.sqrt(4 * tps - 3) - 1) / 2
    assert r["tokens_per_step"] == pytest.approx(tps, rel=1e-12)
    assert r["alpha_source"] == "tokens per step" and r["alpha"] == pytest.approx(want, abs=1e-12)
    assert math.isnan(r["alpha_vllm"]) and math.isnan(r["tokens_per_step_metrics"])
    assert r["gamma"] == gamma  # from the verify payload: γ + 1 tokens verified per sequence
    assert any("no metrics dump" in n and "α inferred from the tokens per step" in n for n in res.speculative.notes)
    # the forecast is made at that α too (the draft's measured α when no run has a dump)
    f = res.speculative.forecast
    assert set(f["alpha_source"]) == {"measured (tokens per step)"}
    assert f["alpha"].iloc[0] == pytest.approx(want, abs=1e-12)


@pytest.mark.slow
def test_spec_metrics_names_the_dump_of_a_trace_kept_elsewhere(tmp_path):
    label = "pair-a50/pair-draft.spec-g2"
    copy = copy_without_dump(tmp_path, label, "pair-draft.spec-g2")
    dump = SPEC / f"{label}.metrics.json"
    done = CliRunner().invoke(cli, ["analyze", TARGET, DRAFT, str(copy), "--spec-metrics", f"{copy}={dump}",
                                    "--format", "json"])
    assert done.exit_code == 0, done.output
    (e,) = json.loads(done.stdout)["speculative"]
    alpha, gamma = alpha_iid_by_hand(label)
    assert (e["alpha_source"], e["gamma"]) == ("metrics", gamma)
    assert e["alpha"] == pytest.approx(alpha, rel=1e-12)
    m = metrics(label)
    assert e["alpha_vllm"] == pytest.approx(m["vllm:spec_decode_num_accepted_tokens"]
                                            / m["vllm:spec_decode_num_draft_tokens"], rel=1e-12)
    assert e["tokens_per_step_metrics"] == pytest.approx(
        1 + m["vllm:spec_decode_num_accepted_tokens"] / m["vllm:spec_decode_num_drafts"], rel=1e-12)


@pytest.mark.slow
def test_gamma_from_the_verify_payload_and_a_label_that_disagrees_is_noted(tmp_path):
    # The γ = 3 run without its dump, under a name with no γ, and under one that says γ = 5.
    rows = raw_ranges(trace("pair-a50/pair-draft.spec-g3"))
    verify_payload = max(r[3] for r in rows if r[0] == "nsys_cc:step" and r[3] < 128)
    plain = copy_without_dump(tmp_path, "pair-a50/pair-draft.spec-g3", "run")
    wrong = copy_without_dump(tmp_path, "pair-a50/pair-draft.spec-g3", "pair-draft.spec-g5")
    res = nsys_cc.cost_coefficient(TARGET, [DRAFT, str(plain), str(wrong)])
    t = res.speculative.table.set_index("name")
    assert t.at["run", "gamma"] == t.at["pair-draft.spec-g5", "gamma"] == verify_payload - 1 == 3
    assert t.at["run", "draft"] == "pair-draft"  # the only draft
    assert any("its label says γ = 5, the run used γ = 3" in n for n in res.speculative.notes)


@pytest.mark.slow
def test_gamma_from_the_label_when_the_trace_has_no_payload(tmp_path):
    # vLLM's own scopes carry no token payload: without the dump, only the label tells γ.
    label = "tiny-llama-draft-xs.spec-g3"
    named = copy_without_dump(tmp_path, "vllm_scopes.spec-g3", label)
    target, draft = trace("tiny-llama-target"), trace("tiny-llama-draft-xs")
    res = nsys_cc.cost_coefficient(target, [draft, str(named)])
    (r,) = res.speculative.table.to_dict("records")
    assert r["gamma"] == 3 and r["alpha_source"] == "tokens per step"
    assert any(f"{label}: γ = 3 from its label" in n for n in res.speculative.notes)
    # under a name without γ nothing tells it: one error line
    unnamed = copy_without_dump(tmp_path, "vllm_scopes.spec-g3", "scopes-run")
    done = CliRunner().invoke(cli, ["analyze", target, draft, str(unnamed)])
    assert done.exit_code == 2
    assert done.stderr.strip() == (f"nsys-cc: error: {unnamed}: cannot tell γ (no metrics dump, no verify payload, "
                                   "no '.spec-g<γ>' label)")


# ---- a proposer without a draft model (vLLM's ngram): fixtures/spec/ngram -------------------------------------------

NGRAM = SPEC / "ngram"


@pytest.mark.slow
def test_an_ngram_run_is_measured_in_place_not_taken_for_a_draft():
    """`ngram.spec-g3` holds no draft-model forward (nothing but the target runs a model), so its draft-forward ranges
    cannot tell it is speculative; its metrics dump does. It is measured in place like any speculative run (its
    proposer's work is in the time outside the forwards, a draft forward costs nothing) and is not a draft of the c
    table (as a draft its 'c' was the target against itself). Expectations from the raw rows."""
    import statistics

    done = CliRunner().invoke(cli, ["analyze", str(NGRAM / "pair-target.sqlite"), str(NGRAM / "ngram.spec-g3.sqlite"),
                                    "--format", "json"])
    assert done.exit_code == 0, done.output
    doc = json.loads(done.stdout)
    assert [m["name"] for m in doc["models"]] == ["pair-target"] and doc["coefficients"] == []
    (e,) = doc["speculative"]
    assert (e["name"], e["draft"], e["gamma"]) == ("ngram.spec-g3", "ngram", 3)
    rows = raw_ranges(str(NGRAM / "ngram.spec-g3.sqlite"))
    warm = [r for r in rows if r[0] == "nsys_cc:warmup"]
    iterations = [r for r in rows if r[0] == "nsys_cc:iteration"]
    steps = [s for s in rows if s[0] == "nsys_cc:step" and not any(w[1] <= s[1] <= w[2] for w in warm)]
    forwards = [r for r in rows if r[0] == "model_executable()"]
    assert not any(r[0] == "draft_model_executable()" for r in rows)
    verify = [s for s in steps if 1 < s[3] <= 4]  # the lookup proposed 1…3 tokens: 2…4 verified (batch 1)
    assert e["steps"] == len(verify) > 0
    fwd = [[f for f in forwards if s[1] <= f[1] <= s[2]] for s in verify]
    assert all(len(f) == 1 for f in fwd)
    assert e["verify_ms"] == pytest.approx(statistics.median((f[0][2] - f[0][1]) / 1e6 for f in fwd), rel=1e-9)
    assert e["step_ms"] == pytest.approx(statistics.median((s[2] - s[1]) / 1e6 for s in verify), rel=1e-9)
    assert e["other_ms"] == pytest.approx(statistics.median((s[2] - s[1] - f[0][2] + f[0][1]) / 1e6
                                                            for s, f in zip(verify, fwd)), rel=1e-9)
    assert e["draft_step_ms"] == 0.0 and e["draft_forwards_per_step"] == 0.0 and e["c_in_place_forward"] is None
    assert e["c_in_place"] == 0.0 and e["draft_token_ms"] == 0.0  # no model: a drafted token costs no forward
    # tokens per step over every step after the prefill: most steps found nothing to propose (1 token each)
    output_len = Raw(str(NGRAM / "pair-target.sqlite")).forwards_per_iteration()
    per_iter = [sum(1 for s in steps if it[1] <= s[1] <= it[2] and s[3] <= 4) for it in iterations]
    assert e["tokens_per_step"] == pytest.approx((output_len - 1) / statistics.median(per_iter), rel=1e-9)
    stats = metrics("ngram/ngram.spec-g3")
    assert e["alpha_source"] == "metrics" and stats["vllm:spec_decode_num_drafts"] > 0
    res = nsys_cc.cost_coefficient(str(NGRAM / "pair-target.sqlite"), [str(NGRAM / "ngram.spec-g3.sqlite")])
    assert any(n.startswith("ngram.spec-g3: no draft-model forwards") for n in res.speculative.notes)
    assert res.speculative.models["ngram"].draft_forward_ms == 0.0  # the forecast prices no draft forward


def test_a_trace_labelled_speculative_without_draft_forwards_or_metrics_dump_is_an_error(tmp_path):
    # Without its dump nothing shows the ngram run speculated, yet its label says it did: measured as a plain draft it
    # would give a c of the target against itself, so it is refused with what to do.
    copy = tmp_path / "ngram.spec-g3.sqlite"
    shutil.copy(NGRAM / "ngram.spec-g3.sqlite", copy)
    with pytest.raises(nsys_cc.NsysCCError, match=r"labelled as a speculative run \('ngram.spec-g3'\)"):
        nsys_cc.cost_coefficient(str(NGRAM / "pair-target.sqlite"), [str(copy)])
