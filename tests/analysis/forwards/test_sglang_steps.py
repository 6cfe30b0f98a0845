"""SGLang's own markers in a PyTorch-profiler trace (`analysis.forwards.sglang_steps`), read as vLLM's are.

SGLang does not run here (its CPU backend does not install): the SGLang-shaped traces are built whole from SGLang's
names (`gpu_shaped_kineto.sglang_trace`: NOT real runs) with known GPU work — a target, a smaller draft, and an EAGLE
speculative run (γ = 3) whose batch shrinks as its requests end. The oracle: the spans and work the builder wrote,
read back from the raw JSON's events. The real SGLang trace is the public MI300X decode (skipped when absent)."""

from __future__ import annotations

import gzip
import json
import re
import statistics
from decimal import Decimal

import gpu_shaped_kineto as gsk
import pytest

import nsys_cc
from conftest import PUBLIC
from nsys_cc.analysis.forwards import sglang_steps, vllm_steps
from nsys_cc.trace import open_trace

GAMMA = 3


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    out = tmp_path_factory.mktemp("sglang")
    return {"target": gsk.sglang_trace(out / "qwen-8b.pt.trace.json.gz"),
            "draft": gsk.sglang_trace(out / "qwen-0.6b.pt.trace.json.gz", "draft", scale=0.2),
            "spec": gsk.sglang_trace(out / "qwen-0.6b.spec-g3.pt.trace.json.gz", "spec", gamma=GAMMA),
            "execute": gsk.sglang_trace(out / "qwen-8b-exec.pt.trace.json.gz", execute=True)}


@pytest.fixture(scope="module")
def analysed(built):
    return nsys_cc.analyze(built["target"].made.path, [built["draft"].made.path, built["spec"].made.path])


def works(b: gsk.Built) -> dict[int, gsk.Work]:
    return {w.range.start: w for w in b.made.work}


def token_spans(b: gsk.Built, metric: str = "span_ns") -> list[float]:
    """Each decode step's token on `metric`: its forward's work and its sampling frame's."""
    w = works(b)
    return [getattr(w[s["forward"]], metric) + getattr(w[s["sample"]], metric) for s in b.steps
            if s["kind"] == "decode"]


def test_the_steps_are_sglangs_forwards_with_their_kind_and_batch(built):
    b = built["spec"]
    with open_trace(b.made.path) as trace:
        found = vllm_steps.read(trace)
    assert found.engine == "SGLang" and found.speculative
    kept = found.forwards.sort_values("start_ns")
    # the target's forwards only: not the draft's extend over the prompt (inside its proposing) nor DRAFT_EXTEND
    assert kept["start_ns"].tolist() == [s["forward"] for s in b.steps]
    assert kept["kind"].tolist() == [s["kind"] for s in b.steps]
    assert kept["batch"].tolist() == [s["batch"] for s in b.steps]
    assert any("are the draft worker's" in n for n in found.notes)


@pytest.mark.slow
def test_c_of_an_sglang_pair_is_the_known_gpu_work(built, analysed):
    coef = analysed.coefficients.set_index(["phase", "metric"])
    for metric, attr in (("gpu_span", "span_ns"), ("kernel_sum", "kernel_sum_ns")):
        t, d = token_spans(built["target"], attr), token_spans(built["draft"], attr)
        row = coef.loc[("decode", metric)]
        assert row["basis"] == "token"  # SGLang's sampling (ModelRunner.sample) after each forward
        assert row["c"] == pytest.approx(statistics.median(d) / statistics.median(t), rel=1e-12)
    assert analysed.headline == "gpu_span"


@pytest.mark.slow
def test_the_speculative_run_is_measured_in_place(built, analysed):
    b = built["spec"]
    w = works(b)
    verify = [s for s in b.steps if s["kind"] == "verify"]
    row = analysed.speculative.by_metric.set_index(["name", "metric"]).loc[("qwen-0.6b.spec-g3", "gpu_span")]
    def held(start: int) -> int:
        """The GPU span of the work launched inside the frame starting at `start` (the spans written inside it)."""
        frame = w[start].range
        ops = [o for x in b.made.work if frame.start <= x.range.start and x.range.end <= frame.end for o in x.ops]
        return max(o[1] for o in ops) - min(o[0] for o in ops)

    proposing = [sum(held(p) for p in s["propose"]) for s in verify]
    assert row["verify_ms"] == pytest.approx(statistics.median(w[s["forward"]].span_ns for s in verify) / 1e6,
                                             rel=1e-12)
    assert row["draft_forward_ms"] == pytest.approx(statistics.median(p / GAMMA for p in proposing) / 1e6, rel=1e-12)
    v_token = [w[s["forward"]].span_ns + w[s["sample"]].span_ns for s in verify]
    assert row["verify_token_ms"] == pytest.approx(statistics.median(v_token) / 1e6, rel=1e-12)
    # the first proposing, after the prefill, kept apart
    (pre,) = [s for s in b.steps if s["kind"] == "prefill"]
    assert any("the proposing after the prefill step" in n and f"{held(pre['propose'][0]) / 1e6:.3f} ms on "
               "gpu_span" in n for n in analysed.speculative.notes)


@pytest.mark.slow
def test_the_verify_sampling_is_shown_on_each_metric_its_token_holds(built, analysed):
    b = built["spec"]
    w = works(b)
    verify = [s for s in b.steps if s["kind"] == "verify"]
    rows = analysed.speculative.by_metric.set_index(["name", "metric"])
    for metric, of in (("gpu_span", lambda x: x.span_ns), ("wall", lambda x: x.range.duration)):
        want = statistics.median(of(w[s["sample"]]) for s in verify) / 1e6  # EagleVerifyInput.verify's frame
        assert rows.loc[("qwen-0.6b.spec-g3", metric), "verify_sample_ms"] == pytest.approx(want, rel=1e-12)
    from nsys_cc.report import speculative_text

    shown = speculative_text.token_table(analysed.speculative).set_index("Metric")
    for metric, label in (("gpu_span", "GPU span"), ("wall", "launch time")):  # neither row shows "–"
        value = rows.loc[("qwen-0.6b.spec-g3", metric), "verify_sample_ms"]
        assert float(shown.loc[label, "Verify sample"]) == pytest.approx(value, rel=1e-2)


@pytest.mark.slow
def test_notes_name_sglangs_markers_as_sglang_writes_them(built, analysed):
    said = "\n".join([*analysed.notes, *analysed.speculative.notes, analysed.render("table").splitlines()[0]])
    for vllm_name in ("execute_context_…_generation_…'; c", "…/spec_decode/…: propose", "…/engine/core.py(…): step",
                      "gpu_model_runner.py(…): sample_tokens", "vLLM's latency benchmark", "vLLM's metrics dump"):
        assert vllm_name not in said
    assert "Forward range: 'step[<MODE> bs=…]'" in said
    assert "'…/speculative/…: draft' range" in said and "'…/scheduler.py(…): run_batch'" in said
    assert "measured SGLang's own forward annotations ('step[<MODE> bs=…]'" in said


def test_tokens_per_step_and_alpha_come_from_whole_requests_lives(built, analysed):
    """The batch shrinks as requests end: each request's verify steps for its 11 tokens, each last step censored."""
    b = built["spec"]
    lives: dict[int, int] = {}
    for s in b.steps:
        for r in s["taken"]:
            lives[r] = lives.get(r, 0) + 1
    table = analysed.speculative.table.set_index("name").loc["qwen-0.6b.spec-g3"]
    made = sum(sum(s["taken"].values()) for s in b.steps)
    assert made == 2 * 11
    note = next(n for n in analysed.speculative.notes if n.startswith("qwen-0.6b.spec-g3: α "))
    assert f"11 tokens each in {min(lives.values())}–{max(lives.values())} verify steps" in note
    assert table["alpha_source"] == "tokens per step" and 0 < table["alpha"] < 1


SG = PUBLIC / "AMD-AGI__TraceLens__inference_sglang_decode__sglang_Qwen3-8B_decode.json.gz"


@pytest.mark.slow
@pytest.mark.skipif(not SG.exists(), reason="the public SGLang trace is not here (../shared/traces/public)")
def test_the_public_sglang_decode_is_one_decode_step_of_batch_32_with_its_sampling():
    with gzip.open(SG, "rt", encoding="utf-8") as fh:
        doc = json.load(fh, parse_float=Decimal)
    x = [e for e in doc["traceEvents"] if e.get("ph") == "X"]
    (step,) = [e for e in x if e.get("cat") == "user_annotation" and e["name"].startswith("step[")]
    (execute,) = [e for e in x if e.get("cat") == "user_annotation" and e["name"].startswith("execute_")]
    m = re.search(r"_generation_(\d+)\(sq(\d+)sk(\d+)", execute["name"])
    res = nsys_cc.analyze(SG)
    (model,) = res.models
    kept = model.forwards[model.forwards["kept"]]
    assert len(kept) == 1 and kept["phase"].iloc[0] == "decode"
    assert kept["batch"].iloc[0] == int(m.group(1)) == 32 and kept["context"].iloc[0] == int(m.group(3))
    assert kept["start_ns"].iloc[0] == int(Decimal(str(step["ts"])) * 1000)  # the forward is step[…], not execute_…
    sample = [e for e in x if e.get("cat") == "python_function" and re.search(r"model_runner\.py\(\d+\): sample$",
                                                                                 e["name"])]
    assert len(sample) == 1 and model.token_parts
    assert sglang_steps.MARKS.engine in " ".join(res.notes)


def test_an_execute_annotation_around_the_forward_gives_its_context(built):
    b = built["execute"]
    with open_trace(b.made.path) as trace:
        found = vllm_steps.read(trace)
    kept = found.forwards.sort_values("start_ns")
    assert kept["start_ns"].tolist() == [s["forward"] for s in b.steps]  # still the step[…] forwards
    assert kept["context"].notna().all() and kept["context"].iloc[0] == 2 * 128  # the prefill's prompts
