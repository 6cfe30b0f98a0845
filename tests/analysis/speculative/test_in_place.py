"""Speculative runs measured in place (c, verify cost, step overhead), on the real CPU fixtures in fixtures/spec
(`make fixtures`).

Every number the analysis reports is recomputed here from the raw NVTX rows (sqlite3 on NVTX_EVENTS, the statistics
module), not through nsys_cc's reader or analysis: the step rule, the verify/draft/outside split, the medians, the
tokens per step, α from the metrics dump by hand, Thm 3.8, the decomposition, the cost model's fit and its forecast
of a run it was not fitted on.
"""

from __future__ import annotations

import dataclasses
import json
import math
import shutil
import sqlite3
import statistics

import pytest
from click.testing import CliRunner
from test_in_place_tokens import by_hand as token_by_hand

import nsys_cc
from conftest import REPO, planned
from nsys_cc.cli import cli
from nsys_cc.workflows import profile as profile_workflow

SPEC = REPO / "fixtures" / "spec"
TARGET, DRAFT = "tiny-llama-target", "tiny-llama-draft-xs"
GAMMAS = (1, 2, 3)


def trace(label: str) -> str:
    return str(SPEC / f"{label}.sqlite")


def spec_label(gamma: int, draft: str = DRAFT) -> str:
    return f"{draft}.spec-g{gamma}"


# ---- an independent reading of the raw rows -------------------------------------------------------------------

def raw_ranges(path: str) -> list[tuple[str, int, int, float | None]]:
    """(name, start, end, payload) of every closed NVTX push/pop or start/end range, straight from SQLite."""
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    rows = con.execute(
        "SELECT COALESCE(e.text, s.value), e.start, e.end, "
        "COALESCE(e.int64Value, e.uint64Value, e.doubleValue, e.int32Value, e.uint32Value) "
        "FROM NVTX_EVENTS e LEFT JOIN StringIds s ON s.id = e.textId "
        "WHERE e.eventType IN (59, 60) AND e.end IS NOT NULL ORDER BY e.start").fetchall()
    con.close()
    return rows


def named(rows, name):
    return [r for r in rows if r[0] == name]


def inside(t, windows):
    return any(s <= t <= e for _, s, e, _ in windows)


class Raw:
    """One trace read by hand: measured steps with their forwards (warm-up dropped)."""

    def __init__(self, path: str, gamma: int | None = None, step_ranges: bool = True):
        rows = raw_ranges(path)
        warm = named(rows, "nsys_cc:warmup")
        self.iterations = named(rows, "nsys_cc:iteration")
        keep = [r for r in rows if not inside(r[1], warm)]
        self.target = named(keep, "model_executable()")
        self.drafts = named(keep, "draft_model_executable()")
        self.steps = []  # (start, duration_ms, target forwards, draft forwards)
        if step_ranges and named(keep, "nsys_cc:step"):
            for _, s, e, _ in named(keep, "nsys_cc:step"):
                self.steps.append((s, (e - s) / 1e6, [f for f in self.target if s <= f[1] <= e],
                                   [d for d in self.drafts if s <= d[1] <= e]))
        else:  # forward to forward, inside one iteration
            for a, b in zip(self.target, self.target[1:]):
                same = [w for w in self.iterations if w[1] <= a[1] <= w[2] and w[1] <= b[1] <= w[2]]
                if same:
                    self.steps.append((a[1], (b[1] - a[1]) / 1e6, [a],
                                       [d for d in self.drafts if a[1] <= d[1] < b[1]]))
        self.gamma = gamma

    def iteration_of(self, t):
        return next(i for i, w in enumerate(self.iterations) if w[1] <= t <= w[2])

    def kind(self, step):
        fwd = step[2]
        if len(fwd) != 1:
            return None
        tokens = fwd[0][3]  # batch 1 in every fixture
        if tokens == 1:
            return "decode"
        if self.gamma is not None and tokens <= self.gamma + 1:
            return "verify"
        return "prefill"

    def of_kind(self, kind):
        return [s for s in self.steps if self.kind(s) == kind]

    def forwards_per_iteration(self):
        counts = [sum(1 for f in self.target if w[1] <= f[1] <= w[2]) for w in self.iterations]
        return statistics.median([c for c in counts if c])


def wall(rng):
    return (rng[2] - rng[1]) / 1e6


def metrics(label: str) -> dict:
    doc = json.loads((SPEC / f"{label}.metrics.json").read_text())
    out = {}
    for m in doc["metrics"]:
        name = m["name"].removesuffix("_total")
        out[name] = m.get("values", m.get("value"))
    return out


def alpha_iid_by_hand(label: str) -> tuple[float, int]:
    m = metrics(label)
    per_pos = m["vllm:spec_decode_num_accepted_tokens_per_pos"]
    accepted, drafts = m["vllm:spec_decode_num_accepted_tokens"], m["vllm:spec_decode_num_drafts"]
    rejected = drafts - per_pos[-1]
    return (accepted / (accepted + rejected) if accepted + rejected else 1.0), len(per_pos)


def expected(alpha, gamma):
    return gamma + 1 if alpha == 1 else (1 - alpha ** (gamma + 1)) / (1 - alpha)


class Measured:
    """The in-place figures of one speculative run, by hand."""

    def __init__(self, plain: Raw, draft_plain: Raw, label: str):
        self.alpha, self.gamma = alpha_iid_by_hand(label)
        run = Raw(trace(label), self.gamma)
        verify = run.of_kind("verify")
        decode = plain.of_kind("decode")
        self.steps = len(verify)
        self.verify_ms = statistics.median(wall(s[2][0]) for s in verify)
        self.draft_forward_ms = statistics.median(wall(d) for s in verify for d in s[3])
        self.draft_forwards_per_step = statistics.median(len(s[3]) for s in verify)
        self.draft_step_ms = statistics.median(sum(wall(d) for d in s[3]) for s in verify)
        self.other_ms = statistics.median(s[1] - wall(s[2][0]) - sum(wall(d) for d in s[3]) for s in verify)
        self.step_ms = statistics.median(s[1] for s in verify)
        self.decode_ms = statistics.median(wall(s[2][0]) for s in decode)
        self.decode_step_ms = statistics.median(s[1] for s in decode)
        output_len = plain.forwards_per_iteration()
        per_iter = statistics.mean(
            sum(1 for s in verify if run.iteration_of(s[0]) == i) for i in range(len(run.iterations))
            if any(run.iteration_of(s[0]) == i for s in verify))
        self.tokens_per_step = (output_len - 1) / per_iter
        self.measured = self.tokens_per_step * self.decode_step_ms / self.step_ms
        draft_decode = statistics.median(wall(f) for f in draft_plain.target if f[3] == 1)
        self.c_standalone = draft_decode / self.decode_ms
        self.leviathan = expected(self.alpha, self.gamma) / (self.gamma * self.c_standalone + 1)


@pytest.fixture(scope="module")
def tiny():
    """The analysis of the tiny pair: plain target and draft, speculative γ = 1, 2, 3."""
    paths = [trace(TARGET), trace(DRAFT)] + [trace(spec_label(g)) for g in GAMMAS]
    return nsys_cc.cost_coefficient(paths[0], paths[1:], acceptance=[0.6])


@pytest.fixture(scope="module")
def by_hand():
    plain, draft_plain = Raw(trace(TARGET)), Raw(trace(DRAFT))
    return {g: Measured(plain, draft_plain, spec_label(g)) for g in GAMMAS}


def row(result, gamma, draft=DRAFT):
    t = result.speculative.table
    return t[(t["draft"] == draft) & (t["gamma"] == gamma)].iloc[0]


@pytest.mark.slow
@pytest.mark.parametrize("gamma", GAMMAS)
def test_every_figure_matches_the_raw_rows(tiny, by_hand, gamma):
    r, h = row(tiny, gamma), by_hand[gamma]
    assert r["step_rule"] == "step ranges"
    assert r["steps"] == h.steps and r["gamma"] == h.gamma == gamma
    for key in ("verify_ms", "draft_forward_ms", "draft_forwards_per_step", "other_ms", "step_ms", "decode_ms",
                "decode_step_ms", "draft_step_ms", "tokens_per_step", "alpha", "c_standalone"):
        assert r[key] == pytest.approx(getattr(h, key), rel=1e-9), key
    assert r["draft_forwards_per_step"] == gamma  # vLLM's draft_model proposer runs γ draft forwards per step
    assert r["verify_factor"] == pytest.approx(h.verify_ms / h.decode_ms, rel=1e-9)
    assert r["c_in_place_forward"] == pytest.approx(h.draft_forward_ms / h.verify_ms, rel=1e-9)
    # These runs were made before the plugin wrote the token ranges (fixtures/spec/README.md): c in place stays the
    # forwards' (basis "forward", not the token's), the token figures are the forwards alone, and a note says so.
    tokens = token_by_hand(SPEC / f"{TARGET}.sqlite", SPEC / f"{spec_label(gamma)}.sqlite", gamma)
    assert r["basis"] == "forward"
    assert r["c_in_place"] == r["c_in_place_forward"]
    for key in ("c_in_place_decode", "draft_token_ms", "verify_token_ms", "decode_token_ms", "draft_catchup_ms",
                "draft_catchup_tokens"):
        assert r[key] == pytest.approx(tokens[key], rel=1e-9), key
    assert r["verify_token_ms"] == r["verify_ms"] and math.isnan(r["draft_logits_ms"])
    assert sum(n.startswith(f"{spec_label(gamma)}: no logits or sampling ranges of the target")
               for n in tiny.speculative.notes) == 1
    assert r["measured_speedup"] == pytest.approx(h.measured, rel=1e-9)
    assert r["predicted_leviathan"] == pytest.approx(h.leviathan, rel=1e-9)
    assert r["alpha_source"] == "metrics"
    for key in ("verify_ms", "other_ms", "step_ms", "measured_speedup", "c_in_place", "verify_factor"):
        lo, hi = r[f"{key}_ci_low"], r[f"{key}_ci_high"]
        assert lo <= r[key] <= hi, key


KNOWN_ALPHA_RUNS = [("pair-a50", "pair-target-a50", g) for g in GAMMAS] + [("pair-a99", "pair-target", 2)]


@pytest.mark.parametrize("folder, target, gamma", KNOWN_ALPHA_RUNS)
def test_tokens_per_step_agrees_with_vllms_own_count(folder, target, gamma):
    """On the known-α pair, where accepted drafts make the counts differ from 1: vLLM's 1 + accepted ÷ drafts counts
    every iteration (warm-up included), the trace's figure the measured iterations only. Over the same steps (every
    iteration of the trace) the two counts agree exactly up to what vLLM counts and the output drops: tokens accepted
    past the last one an iteration needs (at most γ per iteration)."""
    label = f"{folder}/pair-draft.spec-g{gamma}"
    d = SPEC / folder
    result = nsys_cc.cost_coefficient(str(d / f"{target}.sqlite"), [str(d / "pair-draft.sqlite"), trace(label)])
    r = row(result, gamma, "pair-draft")
    m = metrics(label)
    drafts, accepted = m["vllm:spec_decode_num_drafts"], m["vllm:spec_decode_num_accepted_tokens"]
    assert r["tokens_per_step_metrics"] == pytest.approx(1 + accepted / drafts, rel=1e-12)
    rows = raw_ranges(trace(label))
    iterations = named(rows, "nsys_cc:warmup") + named(rows, "nsys_cc:iteration")
    verify = [s for s in named(rows, "nsys_cc:step") if s[3] == gamma + 1]  # batch 1: γ + 1 tokens verified
    output_len = Raw(trace(f"{folder}/{target}")).forwards_per_iteration()
    tokens = len(iterations) * (output_len - 1)  # every token after each iteration's prefill
    assert drafts == len(verify)  # vLLM counts one draft per verify step, the same steps as the trace's
    assert 0 <= accepted - (tokens - len(verify)) <= gamma * len(iterations)
    # the trace's figure: the same count over the measured iterations only (the mean of their verify steps)
    run = Raw(trace(label), gamma)
    per_iter = [sum(1 for s in run.of_kind("verify") if run.iteration_of(s[0]) == i)
                for i in range(len(run.iterations))]
    assert r["tokens_per_step"] == pytest.approx((output_len - 1) / statistics.mean(per_iter), rel=1e-12)
    assert r["tokens_per_step"] > 1.3  # accepted drafts: more than a token per step


@pytest.mark.slow
@pytest.mark.parametrize("gamma", GAMMAS)
def test_decomposition_multiplies_from_the_ideal_to_the_measured_speedup(tiny, by_hand, gamma):
    h = by_hand[gamma]
    dec = tiny.speculative.decomposition
    dec = dec[(dec["draft"] == DRAFT) & (dec["gamma"] == gamma)].set_index("part")
    d, f, v, r, o, t = h.decode_step_ms, h.decode_ms, h.verify_ms, h.draft_step_ms, h.other_ms, h.step_ms
    want = {"tokens per step": h.tokens_per_step, "verify ≠ decode": d / (d + v - f),
            "draft forwards": (d + v - f) / (d + v - f + r), "outside time": (d + v - f + r) / (v + r + o),
            "medians do not add": (v + r + o) / t}
    assert list(dec.index) == [*want, "measured"]
    for part, factor in want.items():
        assert dec.loc[part, "factor"] == pytest.approx(factor, rel=1e-9), part
    assert dec.loc["measured", "after"] == pytest.approx(h.measured, rel=1e-9)
    assert math.prod(want.values()) == pytest.approx(h.measured, rel=1e-9)


def iteration_spread(label: str) -> float:
    """Half the range of a run's per-iteration median verify steps, relative to its median verify step."""
    run = Raw(trace(label), alpha_iid_by_hand(label)[1])
    verify = run.of_kind("verify")
    per_iter = {}
    for s in verify:
        per_iter.setdefault(run.iteration_of(s[0]), []).append(s[1])
    medians = [statistics.median(v) for v in per_iter.values()]
    return (max(medians) - min(medians)) / 2 / statistics.median(s[1] for s in verify)


def line_by_hand(xs, ys):
    """(intercept, slope) of the least-squares line (statistics.linear_regression); a falling line is the constant
    through the mean (the documented rule: verifying or drafting more cannot take less time); one x: the mean."""
    if len(set(xs)) < 2:
        return statistics.fmean(ys), 0.0
    slope, intercept = statistics.linear_regression(xs, ys)
    return (statistics.fmean(ys), 0.0) if slope < 0 else (intercept, slope)


def fit_by_hand(points, decode_step):
    """The StepCostModel of docs/speculative.md fitted by hand on runs (γ, per-step draft, verify, other): the draft
    forward is the runs' draft time per step ÷ γ pooled (Σ draft ÷ Σ γ), verify a line in γ + 1, outside a line in γ.
    Returns the model's numbers and speedup(α, γ) = E(α, γ) × decode step ÷ step(γ)."""
    gammas = [p[0] for p in points]
    draft = sum(p[1] for p in points) / sum(gammas)
    v0, v1 = line_by_hand([g + 1 for g in gammas], [p[2] for p in points])
    o0, o1 = line_by_hand(gammas, [p[3] for p in points])

    def step(g):
        return g * draft + v0 + v1 * (g + 1) + o0 + o1 * g

    model = {"draft_forward_ms": draft, "verify_intercept_ms": v0, "verify_slope_ms": v1, "other_intercept_ms": o0,
             "other_slope_ms": o1, "decode_step_ms": decode_step}
    return model, (lambda alpha, g: expected(alpha, g) * decode_step / step(g))


def points(h, gammas):
    return [(g, h[g].draft_step_ms, h[g].verify_ms, h[g].other_ms) for g in gammas]


def uncertainty_by_hand(row, label):
    """A run's relative uncertainty of its median verify step, as docs/speculative.md defines it: the larger of its 95 %
    interval's half-width (the interval the analysis reports, `step_ms_ci_low`/`_ci_high`) and half the range of its
    iterations' own medians (recomputed from the raw rows)."""
    lo, hi = row["step_ms_ci_low"], row["step_ms_ci_high"]
    return max((hi - row["step_ms"]) / row["step_ms"], (row["step_ms"] - lo) / row["step_ms"], iteration_spread(label))


def held_out_by_hand(result, h, gamma, label_of, draft):
    """The held-out forecast of run γ (the model fitted on the other γ by hand), its error against the measured
    speedup, and the tolerance (root sum of squares of the run's and the largest fitted run's uncertainty)."""
    others = [g for g in sorted(h) if g != gamma]
    _, predict = fit_by_hand(points(h, others), h[gamma].decode_step_ms)
    forecast = predict(h[gamma].alpha, gamma)
    error = forecast / h[gamma].measured - 1
    tolerance = math.hypot(uncertainty_by_hand(row(result, gamma, draft), label_of(gamma)),
                           max(uncertainty_by_hand(row(result, g, draft), label_of(g)) for g in others))
    return others, forecast, error, tolerance


# The claim of docs/speculative.md ("Forecast", "The check"): each held-out forecast of the tiny pair's fixtures
# misses by −3.4 %, +2.6 % and −2.9 % (γ = 1, 2, 3, each from the other two), within the runs' own ±7.7 %.
TINY_README_ERRORS = {1: -0.034, 2: 0.026, 3: -0.029}


@pytest.mark.slow
@pytest.mark.parametrize("gamma", GAMMAS)
def test_each_held_out_forecast_of_the_tiny_pair_is_recomputed_and_within_the_runs_precision(tiny, by_hand, gamma):
    r = row(tiny, gamma)
    others, forecast, error, tolerance = held_out_by_hand(tiny, by_hand, gamma, spec_label, DRAFT)
    assert r["held_out_fit_gammas"] == ",".join(map(str, others))
    assert r["predicted_cost_model_held_out"] == pytest.approx(forecast, rel=1e-9)
    assert r["forecast_error"] == pytest.approx(error, rel=1e-9)
    # The tolerance is recomputed, not only bounded from below: a wider one cannot quietly retire the check.
    assert r["forecast_tolerance"] == pytest.approx(tolerance, rel=1e-9)
    assert abs(error) <= tolerance, (forecast, by_hand[gamma].measured, tolerance)
    assert error == pytest.approx(TINY_README_ERRORS[gamma], abs=5e-4)  # the documented figure, to its 0.1 %
    assert tolerance <= 0.0775  # the documented ±7.7 %


@pytest.mark.slow
@pytest.mark.parametrize("which", ["tiny", "known-α pair"])
def test_the_cost_model_is_the_least_squares_fit_of_all_runs_and_gives_the_in_sample_speedups(
        tiny, by_hand, pair, pair_hand, which):
    result, h, draft = (tiny, by_hand, DRAFT) if which == "tiny" else (pair[0], pair_hand, "pair-draft")
    model, predict = fit_by_hand(points(h, GAMMAS), h[1].decode_step_ms)
    fitted = result.speculative.models[draft]
    for key, want in model.items():
        assert getattr(fitted, key) == pytest.approx(want, rel=1e-9, abs=1e-12), key
    for g in GAMMAS:
        assert row(result, g, draft)["predicted_cost_model"] == pytest.approx(
            predict(h[g].alpha, g), rel=1e-9)


@pytest.mark.slow
def test_forecast_list_covers_gamma_1_to_8_at_the_measured_alpha_and_each_given_one(tiny, by_hand):
    f = tiny.speculative.forecast
    model = tiny.speculative.models[DRAFT]
    alphas = sorted(set(f["alpha"]))
    assert 0.6 in alphas and len(alphas) == 2
    for a in alphas:
        sub = f[f["alpha"] == a].sort_values("gamma")
        assert list(sub["gamma"]) == list(range(1, 9))
        for g, s in zip(sub["gamma"], sub["speedup"]):
            step = g * model.draft_forward_ms + model.verify_intercept_ms + model.verify_slope_ms * (g + 1) \
                + model.other_intercept_ms + model.other_slope_ms * g
            assert s == pytest.approx(expected(a, g) * model.decode_step_ms / step, rel=1e-9)
        assert sub.loc[sub["best"], "speedup"].iloc[0] == sub["speedup"].max()
    # the measured α pools the runs' counters
    acc = [metrics(spec_label(g)) for g in GAMMAS]
    accepted = sum(m["vllm:spec_decode_num_accepted_tokens"] for m in acc)
    rejected = sum(m["vllm:spec_decode_num_drafts"] - m["vllm:spec_decode_num_accepted_tokens_per_pos"][-1]
                   for m in acc)
    pooled = accepted / (accepted + rejected) if accepted + rejected else 1.0
    assert pooled == pytest.approx(next(a for a in alphas if a != 0.6))


def test_verify_forwards_are_their_own_phase():
    # The speculative run analysed as if it were a plain target: its verify forwards are not called prefill.
    res = nsys_cc.cost_coefficient(trace(spec_label(3)), [trace(DRAFT)])
    fw = res.forwards
    fw = fw[(fw["model"] == spec_label(3)) & fw["kept"]]
    raw = Raw(trace(spec_label(3)), gamma=3)
    want_verify = sum(1 for f in raw.target if 1 < f[3] <= 4)
    want_prefill = sum(1 for f in raw.target if f[3] > 4)
    assert (fw["phase"] == "verify").sum() == want_verify > 0
    assert (fw["phase"] == "prefill").sum() == want_prefill
    assert any("verify forwards" in n for n in res.notes)


def test_a_trace_without_step_ranges_uses_forward_to_forward_steps(tmp_path, tiny):
    # The same real run with its nsys_cc:step ranges removed (on a copy: inputs are never modified).
    src = trace(spec_label(3))
    copy = tmp_path / f"{spec_label(3)}.sqlite"
    shutil.copy(src, copy)
    con = sqlite3.connect(copy)
    con.execute("DELETE FROM NVTX_EVENTS WHERE textId IN (SELECT id FROM StringIds WHERE value = 'nsys_cc:step') "
                "OR text = 'nsys_cc:step'")
    con.commit()
    con.close()
    shutil.copy(SPEC / f"{spec_label(3)}.metrics.json", tmp_path / f"{spec_label(3)}.metrics.json")
    res = nsys_cc.cost_coefficient(trace(TARGET), [trace(DRAFT), str(copy)])
    r = row(res, 3)
    assert r["step_rule"] == "forward to forward"
    raw = Raw(str(copy), gamma=3, step_ranges=False)
    verify = raw.of_kind("verify")
    assert r["steps"] == len(verify)
    assert r["step_ms"] == pytest.approx(statistics.median(s[1] for s in verify), rel=1e-9)
    assert r["other_ms"] == pytest.approx(statistics.median(
        s[1] - wall(s[2][0]) - sum(wall(d) for d in s[3]) for s in verify), rel=1e-9)
    # the verify forwards are those that close a step: the last one of each iteration is not counted
    assert r["verify_ms"] == pytest.approx(statistics.median(wall(s[2][0]) for s in verify), rel=1e-9)
    assert r["steps"] == row(tiny, 3)["steps"] - len(raw.iterations)
    assert any("forward to forward" in n for n in res.speculative.notes)


def hand_forecast(by_hand):
    """speedup(α, γ) of the model fitted by hand on all three runs, and the best γ in 1…16 at α."""
    _, predict = fit_by_hand(points(by_hand, GAMMAS), by_hand[1].decode_step_ms)

    def best(alpha):
        values = [predict(alpha, g) for g in range(1, 17)]
        return 1 + values.index(max(values)), max(values)

    return predict, best


@pytest.mark.slow
def test_json_has_the_speculative_and_forecast_lists(tiny, by_hand):
    r = CliRunner().invoke(cli, ["analyze", trace(TARGET), trace(DRAFT), *[trace(spec_label(g)) for g in GAMMAS],
                                 "--acceptance", "0.6", "--format", "json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    keys = {"draft", "gamma", "steps", "draft_forward_ms", "verify_ms", "decode_ms", "verify_factor", "c_in_place",
            "c_standalone", "other_ms", "tokens_per_step", "alpha", "measured_speedup", "predicted_speedup"}
    assert len(doc["speculative"]) == 3
    for e in doc["speculative"]:
        assert keys <= set(e)
        assert {"leviathan", "cost_model", "cost_model_held_out"} <= set(e["predicted_speedup"])
        h = by_hand[e["gamma"]]  # every number of the entry against the raw rows
        assert e["steps"] == h.steps
        for key in ("verify_ms", "draft_forward_ms", "other_ms", "step_ms", "decode_step_ms", "tokens_per_step"):
            assert e[key] == pytest.approx(getattr(h, key), rel=1e-9), key
        assert e["c_in_place_forward"] == pytest.approx(h.draft_forward_ms / h.verify_ms, rel=1e-9)
        assert e["basis"] == "forward" and e["c_in_place"] == e["c_in_place_forward"]  # made before the token ranges
        assert e["measured_speedup"] == pytest.approx(h.measured, rel=1e-9)
        assert e["predicted_speedup"]["leviathan"] == pytest.approx(h.leviathan, rel=1e-9)
    predict, best = hand_forecast(by_hand)
    at = {(f["gamma"], f["alpha"]): f for f in doc["forecast"]}
    assert set(at) >= {(g, 0.6) for g in range(1, 9)}
    for g in range(1, 9):
        assert at[(g, 0.6)]["speedup"] == pytest.approx(predict(0.6, g), rel=1e-9)
    listed = [predict(0.6, g) for g in range(1, 9)]  # the list flags the best of the γ it lists
    assert [g for g in range(1, 9) if at[(g, 0.6)]["best"]] == [1 + listed.index(max(listed))]
    (b,) = [b for b in doc["speculative_best"] if b["alpha"] == 0.6]
    assert (b["best_gamma"], b["speedup"]) == (best(0.6)[0], pytest.approx(best(0.6)[1], rel=1e-9))
    assert [m["name"] for m in doc["models"]] == [TARGET, DRAFT]  # speculative runs are not drafts
    plain = CliRunner().invoke(cli, ["analyze", trace(TARGET), trace(DRAFT), "--format", "json"])
    assert json.loads(plain.stdout)["speculative"] == [] and json.loads(plain.stdout)["forecast"] == []


def check_line(h, gamma, error, tolerance):
    others = ",".join(str(g) for g in GAMMAS if g != gamma)
    forecast = (1 + error) * h.measured
    return (f"{spec_label(gamma)}: forecast from γ {others} {forecast:.3g}× vs measured {h.measured:.3g}× "
            f"({error:+.1%}; {'within' if abs(error) <= tolerance else 'outside'} the runs' own ±{tolerance:.1%})")


@pytest.mark.slow
def test_table_shows_measured_and_predicted_side_by_side(tiny, by_hand):
    r = CliRunner().invoke(cli, ["analyze", trace(TARGET), trace(DRAFT), *[trace(spec_label(g)) for g in GAMMAS]])
    assert r.exit_code == 0, r.output
    # each title names the metric it uses: on these CPU traces, wall
    for heading in ("Speculative runs (on wall", "Speedup: measured vs predicted (measured on wall step times; Thm 3.8 "
                    "with c standalone on wall, Thm 3.8 in place", "Tokens in place", "Thm 3.8", "Forecast check"):
        assert heading in r.stdout
    lines = r.stdout.splitlines()
    for g in GAMMAS:
        h = by_hand[g]
        _, _, error, tolerance = held_out_by_hand(tiny, by_hand, g, spec_label, DRAFT)
        assert any(line.endswith(check_line(h, g, error, tolerance)) for line in lines), check_line(h, g, error,
                                                                                                    tolerance)
        # the speedup table's row: measured, Thm 3.8 and the in-sample fit, each to 3 significant digits
        (speedup_row,) = [line for line in lines if line.startswith(f"{spec_label(g)} ") and "×" in line]
        _, predict = fit_by_hand(points(by_hand, GAMMAS), h.decode_step_ms)
        for v in (h.measured, h.leviathan, predict(h.alpha, g)):
            assert f"{v:.3g}×" in speedup_row, (v, speedup_row)


@pytest.mark.slow
def test_report_directory_has_the_waterfall_and_heatmap(tiny, by_hand, tmp_path, monkeypatch):
    import pandas as pd

    from nsys_cc.report import figure_files, write_report

    # only the speculative figures drawn: they are what this checks; the report's other figures are
    # tests/report/test_result_plots.py's (drawing them was ~3 of this test's 4 s, too long for `make check`)
    makers = figure_files._makers
    monkeypatch.setattr(figure_files, "_makers",
                        lambda result: ((n, m) for n, m in makers(result) if n.startswith("speculative_")))
    write_report(tiny, tmp_path / "rep")
    plots = {p.name for p in (tmp_path / "rep" / "plots").iterdir()}
    assert {"speculative_waterfall.png", f"speculative_forecast_{DRAFT}.png"} <= plots
    for name in ("speculative_waterfall.png", f"speculative_forecast_{DRAFT}.png"):
        assert (tmp_path / "rep" / "plots" / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    doc = json.loads((tmp_path / "rep" / "report.json").read_text())
    assert len(doc["speculative"]) == 3 and doc["forecast"]
    for e in doc["speculative"]:
        assert e["measured_speedup"] == pytest.approx(by_hand[e["gamma"]].measured, rel=1e-9)
    table = pd.read_csv(tmp_path / "rep" / "speculative.csv").set_index("gamma")
    for g in GAMMAS:
        h = by_hand[g]
        assert table.at[g, "c_in_place_forward"] == pytest.approx(h.draft_forward_ms / h.verify_ms, rel=1e-9)
        assert table.at[g, "step_ms"] == pytest.approx(h.step_ms, rel=1e-9)
    dec = pd.read_csv(tmp_path / "rep" / "speculative_decomposition.csv")
    measured = dec[dec["part"] == "measured"].set_index("gamma")["after"]
    assert {g: measured[g] for g in GAMMAS} == {g: pytest.approx(by_hand[g].measured, rel=1e-9) for g in GAMMAS}
    md = (tmp_path / "rep" / "report.md").read_text()
    assert ("**Speedup: measured vs predicted (measured on wall step times; Thm 3.8 with c standalone on wall, Thm 3.8 "
            "in place with c vs decode token and the proposing in place)**") in md
    assert f"| {spec_label(2)} | 2 | 0 | {by_hand[2].measured:.3g}× [" in md


def test_spec_metrics_flag_must_name_a_given_trace():
    r = CliRunner().invoke(cli, ["analyze", trace(TARGET), trace(DRAFT), trace(spec_label(1)),
                                 "--spec-metrics", "nope.sqlite=x.json"])
    assert r.exit_code == 2 and "--spec-metrics: 'nope.sqlite' is neither a trace given" in r.stderr


@pytest.mark.slow
def test_a_vllm_scopes_trace_is_read_with_its_own_steps_and_ranges():
    # Plugin off, VLLM_NVTX_SCOPES_FOR_PROFILING=1: no payloads, no warm-up or iteration marks, no step ranges.
    label = "vllm_scopes.spec-g3"
    rows = raw_ranges(trace(label))
    eng = [r for r in rows if r[0].startswith("llm_engine step: ")]
    steps, current = [], None
    for r in eng:  # a step: one get_output and the llm_engine ranges after it
        if r[0] == "llm_engine step: get_output":
            current = [r[1], r[2]]
            steps.append(current)
        elif current is not None:
            current[1] = max(current[1], r[2])
    forwards = named(rows, "gpu_model_runner: forward")
    drafts = named(rows, "gpu_model_runner: draft")
    alloc = named(rows, "schedule: allocate_slots")
    verify = []
    for s, e in steps:
        fw = [f for f in forwards if s <= f[1] <= e]
        if len(fw) == 1 and any(s <= a[1] <= e for a in alloc):  # a step allocating for running requests
            dr = sum(wall(d) for d in drafts if s <= d[1] <= e)
            verify.append(((e - s) / 1e6, wall(fw[0]), dr))
    gamma = alpha_iid_by_hand(label)[1]
    res = nsys_cc.cost_coefficient(trace(TARGET), [trace(DRAFT), trace(label)])
    r = row(res, gamma)
    assert r["name"] == label and r["step_rule"] == "vLLM step scopes"
    assert r["steps"] == len(verify) > 0
    assert r["step_ms"] == pytest.approx(statistics.median(v[0] for v in verify), rel=1e-9)
    assert r["verify_ms"] == pytest.approx(statistics.median(v[1] for v in verify), rel=1e-9)
    assert r["draft_forward_ms"] == pytest.approx(statistics.median(v[2] / gamma for v in verify), rel=1e-9)
    assert r["other_ms"] == pytest.approx(statistics.median(v[0] - v[1] - v[2] for v in verify), rel=1e-9)
    prefills = len(steps) - sum(1 for s, e in steps if any(s <= a[1] <= e for a in alloc))
    output_len = Raw(trace(TARGET)).forwards_per_iteration()
    assert r["tokens_per_step"] == pytest.approx((output_len - 1) / (len(forwards) / prefills - 1), rel=1e-9)


# ---- the known-α pair (real weights: nsys_cc.launch.pair) -------------------------------------------------------

PAIR_FIT, PAIR_KNOB = "pair-a50", "pair-a99"
FORECAST_GOAL = 0.10  # the forecast's goal: within 10 % of every run it was not fitted on


def pair_analysis(folder: str, target: str):
    d = SPEC / folder
    specs = sorted(str(p) for p in d.glob("pair-draft.spec-g*.sqlite"))
    return nsys_cc.cost_coefficient(str(d / f"{target}.sqlite"), [str(d / "pair-draft.sqlite"), *specs])


@pytest.fixture(scope="module")
def pair():
    return pair_analysis(PAIR_FIT, "pair-target-a50"), pair_analysis(PAIR_KNOB, "pair-target")


@pytest.mark.slow
def test_known_alpha_pair_figures_match_the_raw_rows(pair):
    fit, knob = pair
    plain = Raw(trace(f"{PAIR_FIT}/pair-target-a50"))
    draft_plain = Raw(trace(f"{PAIR_FIT}/pair-draft"))
    for g in GAMMAS:
        h = Measured(plain, draft_plain, f"{PAIR_FIT}/pair-draft.spec-g{g}")
        r = row(fit, g, "pair-draft")
        for key in ("verify_ms", "draft_forward_ms", "other_ms", "step_ms", "tokens_per_step", "alpha",
                    "decode_step_ms"):
            assert r[key] == pytest.approx(getattr(h, key), rel=1e-9), key
        assert r["measured_speedup"] == pytest.approx(h.measured, rel=1e-9)
        assert r["predicted_leviathan"] == pytest.approx(h.leviathan, rel=1e-9)
        # accepted drafts: more than one token per step; vLLM's own count beside it (1 + accepted ÷ drafts, over
        # every iteration, warm-up included, so not the same steps as the trace's count of measured iterations)
        m = metrics(f"{PAIR_FIT}/pair-draft.spec-g{g}")
        assert h.alpha > 0 and r["tokens_per_step"] > 1
        assert r["tokens_per_step_metrics"] == pytest.approx(
            1 + m["vllm:spec_decode_num_accepted_tokens"] / m["vllm:spec_decode_num_drafts"], rel=1e-12)


def pair_label(gamma: int) -> str:
    return f"{PAIR_FIT}/pair-draft.spec-g{gamma}"


@pytest.fixture(scope="module")
def pair_hand() -> dict:
    """The α ≈ 0.5 target's runs by hand (`Measured`), by γ."""
    plain = Raw(trace(f"{PAIR_FIT}/pair-target-a50"))
    draft_plain = Raw(trace(f"{PAIR_FIT}/pair-draft"))
    return {g: Measured(plain, draft_plain, pair_label(g)) for g in GAMMAS}


# The claim of docs/speculative.md (and the README's example): the known-α pair's held-out forecasts miss by −6.9 %,
# +8.6 % and −10.4 % (γ = 1, 2, 3), against the runs' own ±5.7 %; the tests hold γ = 1, 2 to the forecast goal, 10 %.
# γ = 3 misses it by 0.4 points since the tokens per step are the mean of the iterations' step counts (14, 19 and 20
# steps: the median, 19, gave −3.7 % by the luck of which iteration is in the middle); docs/speculative.md says so.
PAIR_README_ERRORS = {1: -0.069, 2: 0.086, 3: -0.104}
PAIR_STEPS_G3 = [14, 19, 20]  # verify steps of the γ = 3 run's three measured iterations


@pytest.mark.slow
@pytest.mark.parametrize("gamma", GAMMAS)
def test_known_alpha_pair_held_out_forecasts_are_within_10_percent(pair, pair_hand, gamma):
    fit, _ = pair
    r = row(fit, gamma, "pair-draft")
    others, forecast, error, tolerance = held_out_by_hand(fit, pair_hand, gamma, pair_label, "pair-draft")
    assert r["held_out_fit_gammas"] == ",".join(map(str, others))
    assert r["predicted_cost_model_held_out"] == pytest.approx(forecast, rel=1e-9)
    assert r["forecast_error"] == pytest.approx(error, rel=1e-9)
    assert r["forecast_tolerance"] == pytest.approx(tolerance, rel=1e-9)
    # The goal itself, whatever the runs' precision says (the known-α pair's runs sample tokens, so their steps vary
    # more than the tiny pair's: docs/speculative.md reports two of the three outside that precision, all within 10 %).
    if gamma != 3:
        assert abs(error) <= FORECAST_GOAL, (forecast, r["measured_speedup"])
    else:  # the documented miss, and why: three iterations far apart
        run = Raw(trace(pair_label(3)), 3)
        per_iter = [sum(1 for s in run.of_kind("verify") if run.iteration_of(s[0]) == i)
                    for i in range(len(run.iterations))]
        assert sorted(per_iter) == PAIR_STEPS_G3
    assert error == pytest.approx(PAIR_README_ERRORS[gamma], abs=5e-4)
    assert tolerance == pytest.approx(0.057, abs=1e-3)  # the documented ±5.7 % (5.6 % at γ = 3)


@pytest.mark.slow
def test_known_alpha_pair_forecasts_the_other_knob(pair, pair_hand):
    """The model the library fitted on the α ≈ 0.5 target's runs (γ = 1, 2, 3) forecasts the other knob (same shapes,
    α ≈ 0.99) at γ = 2, at that run's own α and against its own plain decode step: within 10 % of what it measured."""
    fit, knob = pair
    model = fit.speculative.models["pair-draft"]
    k = row(knob, 2, "pair-draft")
    assert k["alpha"] > 0.95
    forecast = float(dataclasses.replace(model, decode_step_ms=k["decode_step_ms"]).speedup(k["alpha"], 2))
    # the same by hand, from the α ≈ 0.5 runs' raw rows and the knob's own plain run
    h = pair_hand
    kh = Measured(Raw(trace(f"{PAIR_KNOB}/pair-target")), Raw(trace(f"{PAIR_KNOB}/pair-draft")),
                  f"{PAIR_KNOB}/pair-draft.spec-g2")
    _, predict = fit_by_hand(points(h, GAMMAS), kh.decode_step_ms)
    assert forecast == pytest.approx(predict(kh.alpha, 2), rel=1e-9)
    assert k["measured_speedup"] == pytest.approx(kh.measured, rel=1e-9)
    assert abs(forecast / kh.measured - 1) <= FORECAST_GOAL, (forecast, kh.measured)


@pytest.mark.slow  # 4 s or more on 2 cores: in `make test`, not the edit-test loop (`make check` ≤ 60 s)
def test_profile_analyses_its_speculative_runs_in_place(tmp_path):
    # The fixtures as the output folder of a finished `profile --speculate 1,2,3` (runs marked done by hand).
    from nsys_cc.launch import orchestrator, separate
    from nsys_cc.request import ProfileRequest

    for f in SPEC.glob("tiny-llama-*"):
        shutil.copy(f, tmp_path / f.name)
    runs = planned("tiny-llama-target", [DRAFT], tmp_path, output_len=32, nsys="/opt/nsys", speculate=list(GAMMAS))
    for r in runs:
        r.status = "done"
    request = ProfileRequest("tiny-llama-target", [DRAFT], tmp_path, output_len=32, speculate=GAMMAS)
    strategy = separate.Separate(request, gpu=False, dry=True, launches=runs)
    outcome = profile_workflow.finish(orchestrator.conclude(strategy, tmp_path), request)
    spec = outcome.result.speculative
    assert sorted(spec.table["name"]) == [spec_label(g) for g in GAMMAS]
    assert [m.name for m in outcome.result.models] == [TARGET, DRAFT]
    doc = json.loads((tmp_path / "report.json").read_text())
    assert len(doc["speculative"]) == 3 and len(doc["forecast"]) == 8
    assert (tmp_path / "plots" / "speculative_waterfall.png").exists()


def test_bench_speedup_is_vllms_latencies_less_prefill(tiny, tmp_path):
    # (L_plain − P_plain) ÷ (L_spec − P_spec): L the mean iteration latency of X.bench.json (vLLM's "Avg latency"),
    # P the median prefill step
    def latency_ms(label):
        return statistics.mean(json.loads((SPEC / f"{label}.bench.json").read_text())["latencies"]) * 1e3

    plain = Raw(trace(TARGET))
    p_plain = statistics.median(s[1] for s in plain.of_kind("prefill"))
    for gamma in GAMMAS:
        spec = Raw(trace(spec_label(gamma)), gamma)
        p_spec = statistics.median(s[1] for s in spec.of_kind("prefill"))
        want = (latency_ms(TARGET) - p_plain) / (latency_ms(spec_label(gamma)) - p_spec)
        assert row(tiny, gamma)["bench_speedup"] == pytest.approx(want, rel=1e-9)
    # a bench file that is not vLLM's output beside a run: no cross-check for it, and a note that says why
    for suffix in (".sqlite", ".metrics.json"):
        shutil.copy(SPEC / f"{spec_label(2)}{suffix}", tmp_path / f"{spec_label(2)}{suffix}")
    (tmp_path / f"{spec_label(2)}.bench.json").write_text('{"avg_latency": 1.0}')
    res = nsys_cc.cost_coefficient(trace(TARGET), [trace(DRAFT), str(tmp_path / f"{spec_label(2)}.sqlite")])
    assert math.isnan(row(res, 2)["bench_speedup"])
    assert any(f"{spec_label(2)}.bench.json is not a vLLM latency --output-json" in n and "left out" in n
               for n in res.speculative.notes)
