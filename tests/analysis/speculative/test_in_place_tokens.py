"""A token's cost measured in place: the speculative runs' draft and verify tokens (forward +
logits + sampling), a head's catch-up forward apart from its later ones, a model-free proposer's proposing, and
Thm 3.8 priced with them — on the real CPU fixtures (fixtures/spec/heads: EAGLE, EAGLE-3 and MTP made by vLLM's CPU
build; fixtures/spec/ngram; the tiny pair), every figure recomputed from the raw NVTX rows with plain SQL.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
import statistics
from pathlib import Path

import pytest

import nsys_cc
from conftest import FIXTURES
from nsys_cc.analysis.theory.speedup import expected_tokens

SPEC = FIXTURES / "spec"
HEADS = SPEC / "heads"
STEP, FWD, DRAFT = "nsys_cc:step", "model_executable()", "draft_model_executable()"
LOGITS, SAMPLE = "nsys_cc:logits", "nsys_cc:sample"
D_LOGITS, D_SAMPLE, PROPOSE = "nsys_cc:draft_logits", "nsys_cc:draft_sample", "nsys_cc:propose"


def raw_rows(path: Path) -> list[tuple[str, int, int, int | None]]:
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as conn:
        return conn.execute(
            "SELECT coalesce(e.text, s.value), e.start, e.\"end\", e.int64Value FROM NVTX_EVENTS e "
            "LEFT JOIN StringIds s ON s.id = e.textId WHERE e.eventType = 59 AND e.\"end\" IS NOT NULL "
            "ORDER BY e.start").fetchall()


def ms(r) -> float:
    return (r[2] - r[1]) / 1e6


class Steps:
    """The measured steps of a trace read by hand (batch 1): per step its ranges of each name, in start order."""

    def __init__(self, path: Path, gamma: int | None = None):
        rows = raw_rows(path)
        warm = [r for r in rows if r[0] == "nsys_cc:warmup"]
        rows = [r for r in rows if not any(w[1] <= r[1] <= w[2] for w in warm)]
        self.gamma = gamma
        self.steps = []
        for _, s, e, _ in [r for r in rows if r[0] == STEP]:
            inside = [r for r in rows if s <= r[1] <= e and r[0] != STEP]
            by = {}
            for r in inside:
                by.setdefault(r[0], []).append(r)
            self.steps.append(((e - s) / 1e6, by))

    def of_kind(self, kind: str) -> list[dict]:
        out = []
        for _, by in self.steps:
            fwd = by.get(FWD, [])
            if len(fwd) != 1:
                continue
            tokens = fwd[0][3]
            k = "decode" if tokens == 1 and self.gamma is None else (
                "verify" if self.gamma is not None and 1 < tokens <= self.gamma + 1 else
                "decode" if tokens == 1 else "prefill")
            if k == kind:
                out.append(by)
        return out


def total(by: dict, name: str) -> float:
    return sum(ms(r) for r in by.get(name, []))


def token(by: dict) -> float:
    """The target's token in a step: its forward, its logits, its sampling."""
    return total(by, FWD) + total(by, LOGITS) + total(by, SAMPLE)


def by_hand(plain: Path, run: Path, gamma: int) -> dict:
    decode = Steps(plain).of_kind("decode")
    verify = Steps(run, gamma).of_kind("verify")
    d_token = [token(s) for s in decode]
    draft_token = [(total(s, DRAFT) + total(s, D_LOGITS) + total(s, D_SAMPLE)) / gamma for s in verify]
    v_token = [token(s) for s in verify]
    forwards = [ms(d) for s in verify for d in s.get(DRAFT, [])]
    separate = [s for s in verify if len(s.get(DRAFT, [])) >= 2 or gamma == 1]
    return {
        "draft_token_ms": statistics.median(draft_token), "verify_token_ms": statistics.median(v_token),
        "decode_token_ms": statistics.median(d_token),
        "c_in_place": statistics.median(draft_token) / statistics.median(v_token),
        "c_in_place_decode": statistics.median(draft_token) / statistics.median(d_token),
        "c_in_place_forward": (statistics.median(forwards) / statistics.median(total(s, FWD) for s in verify)
                               if forwards else 0.0),
        "draft_catchup_ms": statistics.median(ms(s[DRAFT][0]) for s in separate) if separate else None,
        "draft_catchup_tokens": statistics.median(s[DRAFT][0][3] for s in separate) if separate else None,
        "draft_later_ms": (statistics.median(ms(d) for s in verify for d in s.get(DRAFT, [])[1:])
                           if gamma > 1 else None),
        "draft_logits_ms": statistics.median(total(s, D_LOGITS) / gamma for s in verify),
        "draft_sample_ms": statistics.median(total(s, D_SAMPLE) / gamma for s in verify),
        "verify_logits_ms": statistics.median(total(s, LOGITS) for s in verify),
        "verify_sample_ms": statistics.median(total(s, SAMPLE) for s in verify),
        "verify_logit_rows": (statistics.median(r[3] for s in verify for r in s[LOGITS])
                              if all(LOGITS in s for s in verify) else None),
        "steps": len(verify),
    }


# (folder, plain target, run label, γ): the heads made by vLLM's CPU build
HEAD_RUNS = [(HEADS, "tiny-llama-target", "tiny-llama-eagle.spec-g1", 1),
             (HEADS, "tiny-llama-target", "tiny-llama-eagle.spec-g3", 3),
             (HEADS, "tiny-llama-target", "tiny-llama-eagle3.spec-g3", 3),
             (HEADS / "mtp", "tiny-mimo-target", "mtp.spec-g3", 3)]
CHECKED = ("draft_token_ms", "verify_token_ms", "decode_token_ms", "c_in_place", "c_in_place_decode",
           "c_in_place_forward", "draft_catchup_ms", "draft_catchup_tokens", "draft_later_ms", "draft_logits_ms",
           "draft_sample_ms", "verify_logits_ms", "verify_sample_ms")


@pytest.fixture(scope="module")
def heads():
    """Each head's run analysed against its plain target: {label: table row}."""
    out = {}
    for folder, target, label, _ in HEAD_RUNS:
        res = nsys_cc.cost_coefficient(folder / f"{target}.sqlite", [folder / f"{label}.sqlite"])
        out[label] = res.speculative.table.set_index("name").loc[label]
    return out


@pytest.mark.parametrize("folder,target,label,gamma", HEAD_RUNS, ids=[r[2] for r in HEAD_RUNS])
def test_a_heads_token_in_place_is_the_raw_rows(heads, folder, target, label, gamma):
    got, want = heads[label], by_hand(folder / f"{target}.sqlite", folder / f"{label}.sqlite", gamma)
    assert got["basis"] == "token" and got["steps"] == want["steps"] > 5
    for figure in CHECKED:
        if want[figure] is None:
            assert got[figure] != got[figure], figure  # NaN: no later forward at γ = 1
        else:
            assert got[figure] == pytest.approx(want[figure], rel=1e-9), figure
    # the verify's own logits are over its γ + 1 positions; the catch-up forward runs over them too
    assert want["verify_logit_rows"] == gamma + 1
    assert want["draft_catchup_tokens"] == gamma + 1


def test_the_catch_up_forward_is_told_apart_from_the_later_ones():
    """In every verify step of a head at γ = 3: one catch-up forward over the γ + 1 verified positions, then γ − 1
    forwards of one token, each followed by its logits and its sampling (one row each)."""
    for folder, _, label, gamma in HEAD_RUNS:
        for step in Steps(folder / f"{label}.sqlite", gamma).of_kind("verify"):
            drafts = step[DRAFT]
            assert [d[3] for d in drafts] == [gamma + 1] + [1] * (gamma - 1), label
            assert [r[3] for r in step[D_LOGITS]] == [1] * gamma and [r[3] for r in step[D_SAMPLE]] == [1] * gamma
            for d, lg, sm in zip(drafts, step[D_LOGITS], step[D_SAMPLE]):
                assert d[2] <= lg[1] and lg[2] <= sm[1], label  # forward, then its logits, then its sampling


@pytest.mark.slow
def test_a_heads_c_prices_thm_3_8_in_place(heads):
    for _, _, label, gamma in HEAD_RUNS:
        row = heads[label]
        assert row["c_standalone"] != row["c_standalone"]  # a head has no standalone run: no c standalone
        assert row["predicted_leviathan"] != row["predicted_leviathan"]
        want = float(expected_tokens(row["alpha"], gamma)) / (gamma * row["c_in_place_decode"] + 1)
        assert row["predicted_leviathan_in_place"] == pytest.approx(want, rel=1e-12)
        assert row["c_propose"] == 0.0


@pytest.mark.slow
def test_the_token_c_is_not_the_forward_c(heads):
    """The check above can fail: the logits of a head on a 10,000-token vocabulary cost as much as its forward."""
    for _, _, label, _ in HEAD_RUNS:
        row = heads[label]
        assert row["draft_token_ms"] > 1.2 * row["draft_forward_ms"], label
        assert abs(row["c_in_place"] / row["c_in_place_forward"] - 1) > 0.1, label
        assert row["draft_logits_ms"] > 0.3 * row["draft_forward_ms"], label


# ---- a proposer without a draft model: n-gram -------------------------------------------------------------------

@pytest.mark.slow
def test_ngram_proposing_is_reported_per_step_and_prices_c_0():
    folder = SPEC / "ngram"
    res = nsys_cc.cost_coefficient(folder / "pair-target.sqlite", [folder / "ngram.spec-g3.sqlite"])
    row = res.speculative.table.set_index("name").loc["ngram.spec-g3"]
    steps = res.speculative.steps
    mine = steps[(steps["run"] == "ngram.spec-g3") & (steps["kind"] == "verify")]
    raw = Steps(folder / "ngram.spec-g3.sqlite", 3)
    verify = [s for s in raw.of_kind("verify")]
    want = [total(s, PROPOSE) for s in verify]
    assert sorted(mine["propose_ms"].round(9)) == sorted(round(x, 9) for x in want)  # every step's proposing
    assert all(len(s.get(PROPOSE, [])) == 1 for s in verify)
    assert row["propose_ms"] == pytest.approx(statistics.median(want), rel=1e-9)
    decode = [token(s) for s in Steps(folder / "pair-target.sqlite").of_kind("decode")]
    assert row["decode_token_ms"] == pytest.approx(statistics.median(decode), rel=1e-9)
    assert row["c_propose"] == pytest.approx(statistics.median(want) / statistics.median(decode), rel=1e-9)
    assert row["c_in_place_decode"] == 0.0 and row["draft_token_ms"] == 0.0  # no model: c = 0 …
    want_s = float(expected_tokens(row["alpha"], 3)) / (1 + row["c_propose"])  # … priced with the proposing
    assert row["predicted_leviathan_in_place"] == pytest.approx(want_s, rel=1e-12)
    assert row["predicted_leviathan_in_place"] < float(expected_tokens(row["alpha"], 3))


# ---- traces without the new ranges keep the forwards' c and say so ------------------------------------------------

def _without(src: Path, dst: Path, names: tuple[str, ...]) -> Path:
    shutil.copyfile(src, dst)
    with sqlite3.connect(dst) as conn:
        marks = ",".join("?" * len(names))
        conn.execute(f"DELETE FROM NVTX_EVENTS WHERE textId IN (SELECT id FROM StringIds WHERE value IN ({marks}))",
                     names)
    return dst


def test_a_trace_without_logits_ranges_keeps_the_forward_c_and_says_so(tmp_path):
    gamma, label = 3, "tiny-llama-eagle.spec-g3"
    for f in (f"{label}.metrics.json",):
        shutil.copy(HEADS / f, tmp_path)
    plain = _without(HEADS / "tiny-llama-target.sqlite", tmp_path / "tiny-llama-target.sqlite", (LOGITS, SAMPLE))
    run = _without(HEADS / f"{label}.sqlite", tmp_path / f"{label}.sqlite", (LOGITS, SAMPLE, D_LOGITS, D_SAMPLE))
    res = nsys_cc.cost_coefficient(plain, [run])
    row = res.speculative.table.set_index("name").loc[label]
    assert row["basis"] == "forward"
    assert row["c_in_place"] == row["c_in_place_forward"]
    verify = Steps(run, gamma).of_kind("verify")
    assert row["draft_token_ms"] == pytest.approx(statistics.median(total(s, DRAFT) / gamma for s in verify))
    assert any("no logits or sampling ranges of the target" in n and "forwards' alone" in n
               for n in res.speculative.notes)
    doc = json.loads(res.render("json"))
    assert doc["speculative"][0]["basis"] == "forward"
