"""The cost of a token: c = (draft forward + its logits + its sampling) ÷ the target's, per token,
then the medians; the forwards' c beside it; the split in every output; a note where a pair keeps the forwards' c.

Oracles: raw SQL on the real vLLM-CPU fixtures (fixtures/vllm, made with the plugin's `nsys_cc:logits` /
`nsys_cc:sample`; `vllm_scopes.sqlite` with vLLM's own `gpu_model_runner: postprocess` / `sample` scopes), and the
GPU work written into GPU-shaped traces (`gpu_shaped`: real CPU traces with CUDA activity added, not GPU traces).
"""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest
from gpu_shaped import FORWARD, Launch, add_gpu_work

from conftest import FIXTURES, raw_sql
from nsys_cc import cost_coefficient
from nsys_cc.analysis.coefficient.token import tie

VLLM = FIXTURES / "vllm"
TARGET, DRAFT_S, DRAFT_XS = (VLLM / f"{m}.sqlite" for m in ("tiny-llama-target", "tiny-llama-draft-s",
                                                             "tiny-llama-draft-xs"))
SCOPES = VLLM / "vllm_scopes.sqlite"
LOGITS, SAMPLE = "nsys_cc:logits", "nsys_cc:sample"

ROWS = ("SELECT coalesce(e.text, s.value), e.start, e.\"end\", e.int64Value, e.globalTid FROM NVTX_EVENTS e "
        "LEFT JOIN StringIds s ON s.id = e.textId WHERE e.eventType = 59 ORDER BY e.start")


def raw_tokens(path, forward="model_executable()", parts=(LOGITS, SAMPLE), decode_payload=2):
    """(forward ms, token ms) of each kept decode forward, from the raw rows: warm-up by the `nsys_cc:warmup` windows
    (none in the scopes trace: its first 8 forwards are skipped as the analysis is told), decode by payload (scopes:
    every forward after the iteration's first), token = the forward + the part ranges after it on its thread until the
    next forward starts."""
    rows = raw_sql(path, ROWS)
    fwd = [r for r in rows if r[0] == forward]
    warm = [(r[1], r[2]) for r in rows if r[0] == "nsys_cc:warmup"]
    out = []
    for i, f in enumerate(fwd):
        if any(s <= f[1] <= e for s, e in warm):
            continue
        if decode_payload is not None and f[3] != decode_payload:
            continue
        until = fwd[i + 1][1] if i + 1 < len(fwd) else math.inf
        mine = [r for r in rows if r[0] in parts and r[4] == f[4] and f[2] <= r[1] < until]
        assert sorted(r[0] for r in mine) == sorted(parts), mine
        out.append(((f[2] - f[1]) / 1e6, (f[2] - f[1] + sum(r[2] - r[1] for r in mine)) / 1e6))
    return np.array(out)


@pytest.fixture(scope="module")
def result():
    return cost_coefficient(str(TARGET), [str(DRAFT_S), str(DRAFT_XS)], acceptance=0.5)


def test_token_c_and_forward_c_equal_raw_sql_on_the_plugin_fixtures(result):
    t = raw_tokens(TARGET)
    coef = result.coefficients.set_index(["draft", "phase", "metric"])
    for path, name in ((DRAFT_S, "tiny-llama-draft-s"), (DRAFT_XS, "tiny-llama-draft-xs")):
        d = raw_tokens(path)
        row = coef.loc[(name, "decode", "wall")]
        assert row["basis"] == "token"
        assert row["c"] == pytest.approx(np.median(d[:, 1]) / np.median(t[:, 1]), rel=1e-12)
        assert row["c_forward"] == pytest.approx(np.median(d[:, 0]) / np.median(t[:, 0]), rel=1e-12)
        assert (row["n_draft"], row["n_target"]) == (len(d), len(t))
    # The split: the parts' medians on each side, from the raw rows too.
    rows = raw_sql(TARGET, ROWS)
    warm = [(r[1], r[2]) for r in rows if r[0] == "nsys_cc:warmup"]
    fwd = [r for r in rows if r[0] == "model_executable()"]
    decode_starts = {f[1] for f in fwd if f[3] == 2 and not any(s <= f[1] <= e for s, e in warm)}
    for part in ("logits", "sample"):
        mine = []
        for i, f in enumerate(fwd):
            if f[1] in decode_starts:
                until = fwd[i + 1][1] if i + 1 < len(fwd) else math.inf
                mine += [(r[2] - r[1]) / 1e6 for r in rows if r[0] == f"nsys_cc:{part}" and f[2] <= r[1] < until]
        row = coef.loc[("tiny-llama-draft-xs", "decode", "wall")]
        assert row[f"target_{part}_median_ms"] == pytest.approx(np.median(mine), rel=1e-12)


@pytest.mark.slow
def test_the_split_is_in_the_table_the_json_the_csv_and_the_plots(result, tmp_path):
    text = result.render("table")
    assert "c = median(draft token) / median(target token)" in text and "The token's split" in text
    split = text[text.index("The token's split"):].split("\n\n")[1]
    assert "Forward  Logits  Sampling  Token  c token" in split and split.count("decode  Wall") == 3
    doc = json.loads(result.render("json"))
    row = next(r for r in doc["coefficients"] if (r["draft"], r["phase"], r["metric"]) ==
               ("tiny-llama-draft-xs", "decode", "wall"))
    assert row["basis"] == "token" and row["c_forward"] < row["c"]
    assert {"draft_forward_median_ms", "draft_logits_median_ms", "draft_sample_median_ms",
            "target_forward_median_ms", "target_logits_median_ms", "target_sample_median_ms"} <= row.keys()
    target = doc["models"][0]
    assert target["token_parts"] == "plugin"
    tok = target["phases"]["decode"]["token"]["wall"]
    assert tok["token_median_ms"] == pytest.approx(np.median(raw_tokens(TARGET)[:, 1]), rel=1e-9)
    csv = pd.read_csv(__import__("io").StringIO(result.render("csv")))
    assert {"c_forward", "basis", "token_median_ms", "logits_median_ms", "sample_median_ms"} <= set(csv.columns)
    assert "The token's split" in result.render("markdown") and "The token&#x27;s split" in result._repr_html_()
    fig = result.figures()["token_split"]
    bars = [p for p in fig.axes[0].patches]
    assert len(bars) == 3 * 3  # three models × forward, logits, sampling
    assert bars[3].get_height() == pytest.approx(row["target_logits_median_ms"])  # the target's logits bar
    forwards = result.forwards
    assert forwards["logits_wall_ns"].notna().all() and forwards["sample_wall_ns"].notna().all()


def test_speedup_verdicts_take_the_token_c(result):
    v = result.verdicts.query("metric == 'wall'").set_index("draft")
    coef = result.coefficients.query("metric == 'wall' and phase == 'decode'").set_index("draft")
    assert v.loc["tiny-llama-draft-xs", "c"] == coef.loc["tiny-llama-draft-xs", "c"] != \
        coef.loc["tiny-llama-draft-xs", "c_forward"]
    assert result.speedup_marks.set_index("draft").loc["tiny-llama-draft-s", "c"] == coef.loc["tiny-llama-draft-s", "c"]


def test_vllm_scopes_give_the_parts_when_the_plugin_is_off():
    """A target traced with vLLM's own scopes only: its postprocess and sample scopes are its logits and sampling."""
    res = cost_coefficient(str(SCOPES), [str(DRAFT_XS)], range_name=["gpu_model_runner: forward",
                                                                      "model_executable()"], skip_ranges=None)
    assert res.target.token_parts == "scopes"
    assert any("vLLM's own scopes 'gpu_model_runner: postprocess'" in n for n in res.notes)
    t = raw_tokens(SCOPES, forward="gpu_model_runner: forward",
                   parts=("gpu_model_runner: postprocess", "gpu_model_runner: sample"), decode_payload=None)
    # The scopes trace has no payloads: the analysis infers the phases; compare on its decode forwards' starts.
    kept = res.target.phase_rows("decode")
    assert len(kept) and kept["logits_wall_ns"].notna().all()
    starts = set(kept["start_ns"])
    rows = raw_sql(SCOPES, ROWS)
    fwd = [r for r in rows if r[0] == "gpu_model_runner: forward"]
    token = [tok for f, (_, tok) in zip(fwd, t) if f[1] in starts]
    row = res.coefficients.set_index(["draft", "phase", "metric"]).loc[("tiny-llama-draft-xs", "decode", "wall")]
    d = raw_tokens(DRAFT_XS)
    assert row["basis"] == "token"
    assert row["c"] == pytest.approx(np.median(d[:, 1]) / np.median(token), rel=1e-12)


@pytest.mark.slow
def test_a_pair_without_parts_keeps_the_forwards_c_and_says_so(tmp_path):
    """An older trace (fixtures/spec: made before the ranges) against one with them; and a range of one's own."""
    older = FIXTURES / "spec" / "tiny-llama-target.sqlite"
    res = cost_coefficient(str(older), [str(DRAFT_XS)])
    row = res.coefficients.query("phase == 'decode' and metric == 'wall'").iloc[0]
    assert row["basis"] == "forward" and row["c"] == row["c_forward"]
    assert row["draft_median_ms"] == pytest.approx(row["draft_forward_median_ms"])
    assert any(n.startswith("tiny-llama-target: no logits or sampling ranges") for n in res.notes)
    assert not any(n.startswith("c is the cost of a token") for n in res.notes)
    assert "The token's split" in res.render("table")  # the draft's split is still shown
    own = cost_coefficient(str(TARGET), [str(DRAFT_XS)], range_name="nsys_cc:step")
    assert (own.coefficients["basis"] == "forward").all()
    assert any("'nsys_cc:step' is a range of your own" in n for n in own.notes)
    assert own.render("table").startswith("Forward range: 'nsys_cc:step'; c = median(draft) / median(target)")


def test_tie_gives_each_part_to_the_forward_that_ended_last_before_it_on_its_thread():
    forwards = pd.DataFrame({"global_tid": [1, 1, 2], "start_ns": [0, 100, 0], "end_ns": [50, 150, 500]})
    parts = pd.DataFrame({"global_tid": [1, 1, 1, 2, 3, 1], "start_ns": [60, 160, 120, 510, 60, -5]})
    # after forward 0; after forward 1; inside forward 1 (none); after forward 2 (thread 2); a thread without
    # forwards; before any forward
    assert tie(forwards, parts).tolist() == [0, 1, -1, 2, -1, -1]


def _gpu_plan(rng):
    """Forwards launch 3 kernels of 40 % of their wall each (their GPU work outlives them), logits one kernel of 2 µs,
    sampling nothing (a part without GPU work adds 0)."""
    if rng.name == FORWARD:
        each = max(rng.duration * 4 // 10, 3)
        step = rng.duration // 4
        return [Launch(i * step, min(2_000, step - 1), (each,)) for i in range(3)]
    if rng.name == LOGITS:
        return [Launch(rng.duration // 4, min(1_000, rng.duration // 2), (2_000,))]
    return []


@pytest.mark.slow
def test_token_gpu_metrics_add_each_parts_own_projection(tmp_path):
    names = (FORWARD, LOGITS, SAMPLE)
    t = add_gpu_work(TARGET, tmp_path / "t.sqlite", _gpu_plan, names=names)
    d = add_gpu_work(DRAFT_XS, tmp_path / "d.sqlite", _gpu_plan, names=names)
    res = cost_coefficient(str(t.path), [str(d.path)], names=["t", "d"])
    assert res.target.has_cuda

    def known(shaped, model, attr):
        """Per kept decode forward: its work's `attr` + its logits' + its sampling's (0 where nothing ran)."""
        kept = set(model.phase_rows("decode")["start_ns"])
        work = shaped.work
        out = []
        for i, w in enumerate(work):
            if w.range.name != FORWARD or w.range.start not in kept:
                continue
            nxt = next((x.range.start for x in work[i + 1:] if x.range.name == FORWARD), math.inf)
            parts = [x for x in work if x.range.name != FORWARD and w.range.end <= x.range.start < nxt]
            assert sorted(x.range.name for x in parts) == [LOGITS, SAMPLE]
            out.append(sum((getattr(x, attr) or 0) for x in [w, *parts]))
        return np.array(out, dtype=float)

    coef = res.coefficients.set_index(["draft", "phase", "metric"])
    for metric, attr in (("gpu_busy", "busy_ns"), ("gpu_span", "span_ns"), ("kernel_sum", "kernel_sum_ns")):
        dk, tk = known(d, res.models[1], attr), known(t, res.models[0], attr)
        row = coef.loc[("d", "decode", metric)]
        assert row["basis"] == "token"
        assert row["c"] == pytest.approx(np.median(dk) / np.median(tk), rel=1e-12), metric
        assert row["target_logits_median_ms"] == pytest.approx(2_000 / 1e6) if metric != "gpu_span" else True
        assert row["target_sample_median_ms"] == 0.0
    gpu = res.tokens.query("model == 't' and phase == 'decode' and metric == 'gpu_busy'").iloc[0]
    assert gpu["token_median_ms"] == pytest.approx(np.median(known(t, res.models[0], "busy_ns")) / 1e6)
