"""GPU pricing a GPU run would otherwise get wrong (read from vLLM 0.32's V2 runner), on GPU-shaped
traces: copies of the real CPU spec-decode fixtures with known GPU work added by `gpu_shaped` (NOT GPU traces).

(a) V2 runs a standalone draft's speculator eagerly (`StandaloneARSpeculator`) while the draft's own run replays full
    CUDA graphs: the draft's GPU cost in place is above its standalone c, and Thm 3.8 priced with the standalone c
    promises too much. The analysis keeps `leviathan` (priced with c standalone) and adds `leviathan_in_place`
    (priced with the draft's token in place ÷ the plain target's decode token), and says so.
(b) V2's EAGLE/MTP replay the γ − 1 later draft forwards as one fused CUDA graph, one `draft_model_executable()` range
    whose payload counts them (`hooks.forwards.counting_capture`): the in-place figures divide it by the forwards
    it holds.
"""

from __future__ import annotations

import math
import shutil
import sqlite3
import statistics

import pandas as pd
import pytest
from gpu_shaped import DRAFT, FORWARD, Launch, add_gpu_work, steady
from test_in_place_tokens import D_LOGITS, D_SAMPLE, FWD, HEADS, LOGITS, PROPOSE, SAMPLE, SPEC, STEP, Steps, ms, total

import nsys_cc
from nsys_cc.analysis.speculative import in_place as spec_mod
from nsys_cc.analysis.theory.speedup import expected_tokens

GAMMA = 3


# ---- (b) a fused multi-step draft graph -----------------------------------------------------------------------

def _fuse(src, dst):
    """`src` (a head's real run at γ = 3) as V2 would record it with full CUDA graphs: in each verify step the catch-up
    forward's range holds its logits and argmax (its graph replays them), and the γ − 1 later forwards with their logits
    and argmax are one range (the fused graph) whose payload is its batch (1) × the forwards it holds. Returns
    [(catch-up range, fused range)] per measured verify step (outside warm-up), as (start, end)."""
    shutil.copyfile(src, dst)
    out = []
    with sqlite3.connect(dst) as conn:
        ids = dict(conn.execute("SELECT value, id FROM StringIds"))
        rows = conn.execute("SELECT rowid, textId, start, \"end\", int64Value FROM NVTX_EVENTS WHERE eventType = 59 "
                            "AND \"end\" IS NOT NULL ORDER BY start").fetchall()
        steps = [r for r in rows if r[1] == ids[STEP]]
        warm = [r for r in rows if r[1] == ids["nsys_cc:warmup"]]
        for _, _, s, e, _ in steps:
            inside = [r for r in rows if s <= r[2] <= e]
            drafts = [r for r in inside if r[1] == ids[DRAFT]]
            if len(drafts) != GAMMA or drafts[0][4] != GAMMA + 1:
                continue  # the prefill step: left as it is
            parts = [r for r in inside if r[1] in (ids[D_LOGITS], ids[D_SAMPLE])]
            catch_end = max(r[3] for r in parts if r[2] < drafts[1][2])
            fused_end = max(r[3] for r in parts)
            conn.execute("UPDATE NVTX_EVENTS SET \"end\" = ? WHERE rowid = ?", (catch_end, drafts[0][0]))
            conn.execute("UPDATE NVTX_EVENTS SET \"end\" = ?, int64Value = ? WHERE rowid = ?",
                         (fused_end, GAMMA - 1, drafts[1][0]))
            for r in [*drafts[2:], *parts]:
                conn.execute("DELETE FROM NVTX_EVENTS WHERE rowid = ?", (r[0],))
            if not any(w[2] <= s <= w[3] for w in warm):  # measured steps only, as the analysis keeps them
                out.append(((drafts[0][2], catch_end), (drafts[1][2], fused_end)))
    return out


FORWARD_KERNEL = 300_000  # ns of GPU work per draft forward, in every graph


def _graph_plan(rng):
    """The target's forwards: 0.8 × their wall time; a draft range: one graph launch of one kernel per forward it holds
    (its payload for the fused range, one otherwise)."""
    if rng.name == FORWARD:
        return steady(0.8, launches=4, names=(FORWARD,))(rng)
    forwards = GAMMA - 1 if rng.payload == GAMMA - 1 else 1
    return [Launch(rng.duration // 10, min(5_000, rng.duration // 4), (FORWARD_KERNEL,) * forwards, graph="node")]


@pytest.fixture(scope="module")
def fused(tmp_path_factory):
    out = tmp_path_factory.mktemp("fused")
    label = "tiny-llama-eagle.spec-g3"
    windows = _fuse(HEADS / f"{label}.sqlite", out / "raw.sqlite")
    run = add_gpu_work(out / "raw.sqlite", out / f"{label}.sqlite", _graph_plan)
    shutil.copy(HEADS / f"{label}.metrics.json", out)
    plain = add_gpu_work(HEADS / "tiny-llama-target.sqlite", out / "tiny-llama-target.sqlite", _graph_plan)
    res = nsys_cc.cost_coefficient(plain.path, [run.path])
    return res, run, windows, label


@pytest.mark.slow
def test_a_fused_graph_range_is_divided_by_the_forwards_it_holds(fused):
    res, run, windows, label = fused
    assert len(windows) > 5
    by = {(w.range.start, w.range.end): w for w in run.of(DRAFT)}
    fused_busy = [by[f].busy_ns / 1e6 for _, f in windows]
    catch_busy = [by[c].busy_ns / 1e6 for c, _ in windows]
    assert statistics.median(fused_busy) == pytest.approx((GAMMA - 1) * FORWARD_KERNEL / 1e6)  # as written
    rows = res.speculative.by_metric.set_index(["name", "metric"])
    busy, wall = rows.loc[(label, "gpu_busy")], rows.loc[(label, "wall")]
    assert busy["draft_later_ms"] == pytest.approx(statistics.median(fused_busy) / (GAMMA - 1), rel=1e-9)
    assert busy["draft_catchup_ms"] == pytest.approx(statistics.median(catch_busy), rel=1e-9)
    per_forward = [*catch_busy, *(b / (GAMMA - 1) for b in fused_busy)]
    assert busy["draft_forward_ms"] == pytest.approx(statistics.median(per_forward), rel=1e-9)
    assert busy["draft_forward_ms"] == pytest.approx(FORWARD_KERNEL / 1e6, rel=1e-9)  # one forward's kernel
    fused_wall = [(f[1] - f[0]) / 1e6 for _, f in windows]
    assert wall["draft_later_ms"] == pytest.approx(statistics.median(fused_wall) / (GAMMA - 1), rel=1e-9)
    table = res.speculative.table.set_index("name").loc[label]
    assert table["draft_forwards_per_step"] == GAMMA  # γ forwards a step, in two ranges
    steps = res.speculative.steps
    verify = steps[(steps["run"] == label) & (steps["kind"] == "verify")]
    assert (verify["draft_ranges"] == 2).all() and (verify["draft_forwards"] == GAMMA).all()
    # the draft's token on the GPU: the step's draft GPU time ÷ γ (its logits are inside the graphs)
    assert busy["draft_token_ms"] == pytest.approx(
        statistics.median((c + f) / GAMMA for c, f in zip(catch_busy, fused_busy)), rel=1e-9)
    assert any("a fused multi-step draft graph replays γ − 1 in one range" in n for n in res.speculative.notes)


@pytest.mark.slow
def test_without_the_division_the_fused_range_would_pass_for_one_forward(fused):
    """What the analysis did before: one range, one forward. The test above can fail."""
    res, run, windows, label = fused
    by = {(w.range.start, w.range.end): w for w in run.of(DRAFT)}
    undivided = statistics.median(by[f].busy_ns / 1e6 for _, f in windows)
    busy = res.speculative.by_metric.set_index(["name", "metric"]).loc[(label, "gpu_busy")]
    assert busy["draft_later_ms"] == pytest.approx(undivided / (GAMMA - 1))
    assert abs(busy["draft_later_ms"] / undivided - 1) > 0.4


def test_one_range_for_every_forward_of_a_step_holds_gamma_and_hides_the_catch_up(tmp_path):
    """A multi-module MTP graph replays all γ forwards in one range: each step's one range holds γ; its catch-up
    cannot be told apart (NaN, with a note)."""
    label = "tiny-llama-eagle.spec-g3"
    dst = tmp_path / f"{label}.sqlite"
    shutil.copyfile(HEADS / f"{label}.sqlite", dst)
    shutil.copy(HEADS / f"{label}.metrics.json", tmp_path)
    walls = []
    with sqlite3.connect(dst) as conn:
        ids = dict(conn.execute("SELECT value, id FROM StringIds"))
        rows = conn.execute("SELECT rowid, textId, start, \"end\", int64Value FROM NVTX_EVENTS WHERE eventType = 59 "
                            "AND \"end\" IS NOT NULL ORDER BY start").fetchall()
        warm = [r for r in rows if r[1] == ids["nsys_cc:warmup"]]
        for _, _, s, e, _ in [r for r in rows if r[1] == ids[STEP]]:
            inside = [r for r in rows if s <= r[2] <= e]
            drafts = [r for r in inside if r[1] == ids[DRAFT]]
            if len(drafts) != GAMMA or drafts[0][4] != GAMMA + 1:
                continue
            parts = [r for r in inside if r[1] in (ids[D_LOGITS], ids[D_SAMPLE])]
            end = max(r[3] for r in parts)
            conn.execute("UPDATE NVTX_EVENTS SET \"end\" = ? WHERE rowid = ?", (end, drafts[0][0]))
            for r in [*drafts[1:], *parts]:
                conn.execute("DELETE FROM NVTX_EVENTS WHERE rowid = ?", (r[0],))
            if not any(w[2] <= s <= w[3] for w in warm):
                walls.append((end - drafts[0][2]) / 1e6)
    res = nsys_cc.cost_coefficient(HEADS / "tiny-llama-target.sqlite", [dst])
    row = res.speculative.table.set_index("name").loc[label]
    assert row["draft_catchup_ms"] != row["draft_catchup_ms"]  # NaN
    assert row["draft_forward_ms"] == pytest.approx(statistics.median(walls) / GAMMA, rel=1e-9)
    assert row["draft_forwards_per_step"] == GAMMA
    assert any("catch-up forward" in n and "cannot be told" in n for n in res.speculative.notes)


# ---- (a) a standalone draft eager in place, graphed alone --------------------------------------------------------

TARGET_GPU, ALONE_GPU, IN_PLACE_GPU = 0.8, 0.15, 0.6  # GPU work ÷ wall of target forwards, the draft alone, in place


def _alone(rng):  # the draft's own run: every forward one CUDA graph
    return steady(ALONE_GPU, launches=3, graph="node", names=(FORWARD,))(rng)


def _in_place(rng):  # the speculative run: the target as in its own run, the draft's forwards eager
    if rng.name == DRAFT:
        return steady(IN_PLACE_GPU, launches=3, names=(DRAFT,))(rng)
    return steady(TARGET_GPU, launches=4, names=(FORWARD,))(rng)


@pytest.fixture(scope="module")
def eager(tmp_path_factory):
    out = tmp_path_factory.mktemp("eager")
    target, draft, label = "tiny-llama-target", "tiny-llama-draft-xs", f"tiny-llama-draft-xs.spec-g{GAMMA}"
    made = {target: add_gpu_work(SPEC / f"{target}.sqlite", out / f"{target}.sqlite", _in_place),
            draft: add_gpu_work(SPEC / f"{draft}.sqlite", out / f"{draft}.sqlite", _alone),
            label: add_gpu_work(SPEC / f"{label}.sqlite", out / f"{label}.sqlite", _in_place)}
    shutil.copy(SPEC / f"{label}.metrics.json", out)
    res = nsys_cc.cost_coefficient(made[target].path, [made[draft].path, made[label].path])
    return res, made, label


def _span(shaped, name):
    """Each range's known GPU span (ms): the headline metric on a GPU trace."""
    return {(w.range.start, w.range.end): w.span_ns / 1e6 for w in shaped.of(name)}


@pytest.mark.slow
def test_in_place_steps_are_priced_with_in_place_costs(eager):
    res, made, label = eager
    spec = res.speculative
    assert spec.metric == "gpu_span"
    row = spec.table.set_index("name").loc[label]
    # by hand: a drafted token on the GPU = the step's draft GPU time ÷ γ (logits and sampling launched nothing);
    # the plain target's decode token = its decode forward's GPU time
    fwd = _span(made[label], DRAFT)
    verify = Steps(made[label].path, GAMMA).of_kind("verify")
    draft_token = [sum(fwd[(d[1], d[2])] for d in s[DRAFT]) / GAMMA for s in verify]
    plain = _span(made["tiny-llama-target"], FORWARD)
    decode = [plain[(s[FORWARD][0][1], s[FORWARD][0][2])] for s in Steps(made["tiny-llama-target"].path)
              .of_kind("decode")]
    c_in_place = statistics.median(draft_token) / statistics.median(decode)
    busy = spec.by_metric.set_index(["name", "metric"]).loc[(label, "gpu_span")]
    assert busy["c_in_place_decode"] == pytest.approx(c_in_place, rel=1e-9)
    alpha = row["alpha"]
    assert row["predicted_leviathan_in_place"] == pytest.approx(
        float(expected_tokens(alpha, GAMMA)) / (GAMMA * c_in_place + 1), rel=1e-9)
    # Thm 3.8 as before: priced with the draft's standalone c on gpu_span (its graphed run)
    alone = _span(made["tiny-llama-draft-xs"], FORWARD)
    d_alone = [alone[(s[FORWARD][0][1], s[FORWARD][0][2])] for s in Steps(made["tiny-llama-draft-xs"].path)
               .of_kind("decode")]
    c_alone = statistics.median(d_alone) / statistics.median(decode)
    assert busy["c_standalone"] == pytest.approx(c_alone, rel=1e-9)
    assert row["predicted_leviathan"] == pytest.approx(
        float(expected_tokens(alpha, GAMMA)) / (GAMMA * c_alone + 1), rel=1e-9)
    # the eager draft costs far more in place than alone: the standalone price is optimistic, and it is said
    assert c_in_place > 2 * c_alone
    assert row["predicted_leviathan_in_place"] < row["predicted_leviathan"]
    assert any(label in n and "Thm 3.8 priced with c standalone (leviathan) is optimistic" in n
               and "eagerly" in n for n in spec.notes)


@pytest.mark.slow
def test_on_wall_the_two_prices_agree_where_the_draft_is_the_same_model(eager):
    """On the CPU ranges the draft's forward costs what it costs alone (same model, same CPU): no note on wall,
    so the note above comes from the GPU work, not from the traces' wall times."""
    res, made, label = eager
    wall = res.speculative.by_metric.set_index(["name", "metric"]).loc[(label, "wall")]
    assert wall["c_in_place_decode"] < 2 * wall["c_standalone"]


@pytest.mark.slow
def test_the_printed_speedup_table_shows_both_prices(eager):
    res, _, label = eager
    text = res.render("table")
    assert "Thm 3.8 in place" in text and "Thm 3.8 with c standalone on gpu_span" in text
    line = next(ln for ln in text.splitlines() if ln.startswith(label + " ") and "×" in ln)
    row = res.speculative.table.set_index("name").loc[label]
    assert f"{row['predicted_leviathan_in_place']:.3g}×" in line


def _steps_of(path):
    """The measured steps of a trace by hand, any batch: per step its ranges of each name, in start order."""
    return [by for _, by in Steps(path).steps]


@pytest.mark.slow
@pytest.mark.parametrize("basis", ["forward", "token"])
def test_the_in_place_note_sets_like_against_like(monkeypatch, basis):
    """The note of (a) sets a c standalone of the forwards alone against the draft's forwards in place (÷ the plain
    decode forward), a token's c standalone against its token in place: never a token against forwards, which on the
    CPU fixtures alone would pass for a gap (a tiny draft's logits weigh more in its token than the target's in its;
    batch4: the tiny pair with the token ranges).
    A c standalone between the two ratios is given, on each basis: the note comes on the token basis only."""
    folder, label, batch = SPEC / "batch4", f"tiny-llama-draft-xs.spec-g{GAMMA}", 4
    plain = folder / "tiny-llama-target.sqlite"
    decode = [s for s in _steps_of(plain) if [r[3] for r in s.get(FWD, [])] == [batch]]
    verify = [s for s in _steps_of(folder / f"{label}.sqlite")
              if [r[3] for r in s.get(FWD, [])] == [batch * (GAMMA + 1)]]
    assert len(decode) > 5 and len(verify) > 5
    draft_token = [(total(s, DRAFT) + total(s, D_LOGITS) + total(s, D_SAMPLE)) / GAMMA for s in verify]
    decode_token = [total(s, FWD) + total(s, LOGITS) + total(s, SAMPLE) for s in decode]
    tok = statistics.median(draft_token) / statistics.median(decode_token)
    fwd = (statistics.median(ms(d) for s in verify for d in s[DRAFT])
           / statistics.median(ms(s[FWD][0]) for s in decode))
    assert tok > 1.05 * fwd  # the premise: the draft's token and its forwards in place differ as c's
    c = math.sqrt(fwd * tok) / spec_mod.IN_PLACE_GAP
    real = spec_mod.standalone_c
    monkeypatch.setattr(spec_mod, "standalone_c", lambda coefficients, *_: {
        k: spec_mod.StandaloneC((c, c, c), basis) for k in real(coefficients)})
    res = nsys_cc.cost_coefficient(plain, [folder / "tiny-llama-draft-xs.sqlite", folder / f"{label}.sqlite"])
    noted = [n for n in res.speculative.notes if n.startswith(f"{label}: its draft costs")]
    if basis == "forward":
        assert noted == []
    else:
        assert len(noted) == 1 and f"{tok / c:.2g}× its standalone c" in noted[0] and "token)" in noted[0]


def test_standalone_c_carries_the_basis_of_its_row():
    """`standalone_c` of a coefficients table: a row's `basis` where the table has one, else the forwards'."""
    rows = [{"draft": "d", "metric": "wall", "phase": "decode", "c": 0.2, "ci_low": 0.1, "ci_high": 0.3},
            {"draft": "d", "metric": "wall", "phase": "prefill", "c": 0.5, "ci_low": 0.4, "ci_high": 0.6}]
    old = spec_mod.standalone_c(pd.DataFrame(rows))
    assert old == {("d", "wall"): (0.2, 0.1, 0.3)} and old[("d", "wall")].basis == "forward"
    new = spec_mod.standalone_c(pd.DataFrame([{**r, "basis": "token"} for r in rows]))
    assert new[("d", "wall")] == (0.2, 0.1, 0.3) and new[("d", "wall")].basis == "token"
    assert spec_mod.standalone_c(pd.DataFrame([{**rows[0], "basis": "forward"}]))[("d", "wall")].basis == "forward"


def test_the_catch_up_and_later_forwards_on_cpu_fixtures_differ_in_payload_only():
    """The real standalone-draft run (V1, CPU): its first draft forward of a step covers the verified positions."""
    for step in Steps(SPEC / f"tiny-llama-draft-xs.spec-g{GAMMA}.sqlite", GAMMA).of_kind("verify"):
        payloads = [d[3] for d in step[DRAFT]]
        assert payloads[0] > 1 and payloads[1:] == [1] * (GAMMA - 1)
        assert all(ms(d) > 0 for d in step[DRAFT])


# ---- suffix decoding: refused by vLLM's CPU build, so on a GPU-shaped trace only ------------------------------------

@pytest.mark.slow
def test_suffix_decodings_proposing_is_priced_on_a_gpu_shaped_trace(tmp_path):
    """vLLM's CPU build refuses suffix decoding (it needs Arctic Inference; `profile` says so, test_spec_heads), so
    its analysis is tested here only: the real n-gram run as a suffix run would be recorded (`suffix.spec-g3`: a
    model-free proposer, its proposing in `nsys_cc:propose`), with GPU work for every target forward. The proposing
    launches nothing (a suffix tree lives on the CPU): on gpu_span it adds 0 and Thm 3.8 in place is E(α, γ) ÷ 1; on
    wall it is the proposer's CPU time per step, priced against the wall decode token."""
    folder, label = SPEC / "ngram", "suffix.spec-g3"
    plan = steady(0.8, launches=4, names=(FORWARD,))
    plain = add_gpu_work(folder / "pair-target.sqlite", tmp_path / "pair-target.sqlite", plan, names=(FORWARD,))
    run = add_gpu_work(folder / "ngram.spec-g3.sqlite", tmp_path / f"{label}.sqlite", plan, names=(FORWARD,))
    shutil.copy(folder / "ngram.spec-g3.metrics.json", tmp_path / f"{label}.metrics.json")
    res = nsys_cc.cost_coefficient(plain.path, [run.path])
    spec = res.speculative
    assert spec.metric == "gpu_span"
    row = spec.table.set_index("name").loc[label]
    assert row["draft"] == "suffix"
    verify = Steps(run.path, GAMMA).of_kind("verify")
    proposing = statistics.median(total(s, PROPOSE) for s in verify)
    # the table's figures are the headline's: the proposing launches nothing, 0 on the GPU span; its CPU
    # time is the launch-time row's
    assert proposing > 0 and row["metric"] == "gpu_span" and row["propose_ms"] == 0.0
    rows = spec.by_metric.set_index(["name", "metric"])
    busy, wall = rows.loc[(label, "gpu_span")], rows.loc[(label, "wall")]
    assert busy["propose_ms"] == 0.0 and busy["c_in_place_decode"] == 0.0 and busy["draft_token_ms"] == 0.0
    decode_busy = _span(plain, FORWARD)
    decode = [decode_busy[(s[FWD][0][1], s[FWD][0][2])] for s in Steps(plain.path).of_kind("decode")]
    assert busy["decode_token_ms"] == pytest.approx(statistics.median(decode), rel=1e-9)  # logits, sampling: 0
    assert row["c_propose"] == 0.0
    assert row["predicted_leviathan_in_place"] == pytest.approx(float(expected_tokens(row["alpha"], GAMMA)), rel=1e-12)
    assert wall["propose_ms"] == pytest.approx(proposing, rel=1e-9)

