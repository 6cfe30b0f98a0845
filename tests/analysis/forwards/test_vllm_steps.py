"""vLLM's own torch-profiler traces analysed with no plugin and no --range: vLLM's step markers are the default range.

Every figure is checked against an independent recomputation from the raw JSON: `json.load` and plain Python, times
through their decimal text (exact ns), steps by their names (a regular expression written here, not the contract's),
the `sample_tokens` frame after each step, the proposer frames, medians and ratios by hand — and, on GPU-shaped copies
(`gpu_shaped_kineto`: real CPU traces with known GPU work added; NOT GPU traces), the GPU figures from the work
written (`Work`). The real GPU trace is the public B200 one (skipped when absent).
"""

from __future__ import annotations

import functools
import gzip
import json
import math
import re
import shutil
import statistics
from decimal import Decimal
from pathlib import Path

import gpu_shaped_kineto as gsk
import pytest

import nsys_cc
from conftest import FIXTURES, PUBLIC, cli_in_process
from nsys_cc.analysis.forwards import vllm_steps
from nsys_cc.errors import InputError

TORCH = FIXTURES / "torch"
TARGET = TORCH / "tiny-llama-target.pt.trace.json.gz"
DRAFT = TORCH / "tiny-llama-draft-xs.pt.trace.json.gz"
SPEC = TORCH / "tiny-llama-draft-xs.spec-g2.pt.trace.json.gz"
B200 = PUBLIC / "AMD-AGI__TraceLens__b200_eager_trace.pt.trace.json.gz"
METRICS = {"gpu_span": "span_ns", "kernel_sum": "kernel_sum_ns", "gpu_busy": "busy_ns"}

# ---- the oracle: the raw JSON read by hand --------------------------------------------------------------------------
STEP = re.compile(r"^execute_context_(\d+)\((\d+)[_\d]*\)_generation_(\d+)\((\d+)[_\d]*\)$")
SAMPLE = re.compile(r"gpu_model_runner\.py\(\d+\): sample_tokens$")
PROPOSE = re.compile(r"/spec_decode/.*: propose$")
ENGINE = re.compile(r"engine/core\.py\(\d+\): step$")


def ns(value) -> int:
    """A Kineto time (µs, the ns in its decimals) as exact integer ns."""
    return int(Decimal(str(value)) * 1000)


@functools.cache
def raw_of(path: Path) -> Raw:
    """A file's `Raw`, read once a session (the B200 trace takes ~0.5 s): for the fixtures and the module's GPU-shaped
    copies, which several tests read (and only read); a file a test makes for itself is read with `Raw`."""
    return Raw(path)


class Raw:
    """A torch trace's events as plain tuples (name, start ns, end ns, tid), by category."""

    def __init__(self, path: Path):
        opener = gzip.open if path.read_bytes()[:2] == b"\x1f\x8b" else open
        with opener(path, "rt", encoding="utf-8") as fh:
            doc = json.load(fh, parse_float=Decimal)
        self.events = doc["traceEvents"]
        x = [e for e in self.events if e.get("ph") == "X"]
        self.steps = sorted(((e["name"], ns(e["ts"]), ns(e["ts"]) + ns(e["dur"]), e["tid"]) for e in x
                             if e.get("cat") == "user_annotation" and STEP.match(e["name"])), key=lambda r: r[1])
        self.frames = sorted(((e["name"], ns(e["ts"]), ns(e["ts"]) + ns(e["dur"]), e["tid"]) for e in x
                              if e.get("cat") == "python_function"), key=lambda r: r[1])

    def kind(self, step) -> str:
        ctx_req, ctx_tok, gen_req, gen_tok = map(int, STEP.match(step[0]).groups())
        if ctx_tok and not gen_tok:
            return "prefill"
        return "decode" if gen_tok == gen_req else "verify"

    def of(self, pattern: re.Pattern) -> list:
        return [f for f in self.frames if pattern.search(f[0])]

    def sample_after(self, step) -> tuple | None:
        """The sampling frame after a step: the first `sample_tokens` starting after it ends, before the next step."""
        later = [s for s in self.steps if s[1] > step[1]]
        limit = later[0][1] if later else float("inf")
        return next((f for f in self.of(SAMPLE) if step[2] <= f[1] < limit), None)

    def sampling_ns(self, sample) -> int:
        """The sampling's wall: the frame less the outermost frame inside it that holds a proposer frame."""
        if sample is None:
            return 0
        props = [p for p in self.of(PROPOSE) if sample[1] <= p[1] and p[2] <= sample[2]]
        cut = 0
        for p in props:
            holders = [f for f in self.frames if sample[1] <= f[1] <= p[1] and p[2] <= f[2] <= sample[2]
                       and f != sample]
            outer = min(holders, key=lambda f: f[1])
            cut += outer[2] - outer[1]
        return sample[2] - sample[1] - cut


def median_ms(values) -> float:
    return statistics.median(values) / 1e6


# ---- the names -----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name, kind, per_request", [
    ("execute_context_1(32)_generation_0(0)", "prefill", 32),
    ("execute_context_0(0)_generation_1(1)", "decode", 1),
    ("execute_context_0(0)_generation_4(4)", "decode", 1),
    ("execute_context_0(0)_generation_1(3)", "verify", 3),
    ("execute_context_0(0)_generation_2(8)", "verify", 4),
    ("execute_context_2(100)_generation_0(0)", "prefill", 50),
    ("execute_context_1(888_788544)_generation_0(0)", "prefill", 888),  # the public B200 trace's form
    ("execute_context_1(5)_generation_3(3)", "mixed", 2),  # all tokens ÷ all requests
    ("execute_context_0(0)_generation_0(0)", "empty", None),
    # the detailed form (gpu_worker.py annotate_profile with detailed_trace_annotation)
    ("execute_1033_context_1(sq1000sk1000sqsq1000000sqsk1000000)_generation_33(sq33sk5000sqsq33sqsk5000)", "mixed",
     1033 / 34),
    ("execute_40_context_0(sq0sk0sqsq0sqsk0)_generation_10(sq40sk900sqsq160sqsk3600)", "verify", 4),
    ("execute_64_context_2(sq64sk64sqsq2048sqsk2048)_generation_0(sq0sk0sqsq0sqsk0)", "prefill", 32),
])
def test_a_step_name_gives_its_kind_and_tokens(name, kind, per_request):
    step = vllm_steps.parse(name)
    assert step is not None and step.kind == kind
    if per_request is None:
        assert step.tokens_per_request != step.tokens_per_request  # NaN
    else:
        assert step.tokens_per_request == per_request


@pytest.mark.parametrize("name", ["execute_model", "execute_context_1(32)_generation_0", "execute_context_a(1)_"
                                  "generation_0(0)", "execute_context_1(32)_generation_0(0)_extra", ""])
def test_a_name_that_is_no_step_is_none(name):
    assert vllm_steps.parse(name) is None


# ---- (a) the real CPU fixtures: c per phase on wall ------------------------------------------------------------------
@pytest.fixture(scope="module")
def plain():
    return nsys_cc.analyze(TARGET, [DRAFT])


@pytest.mark.slow
def test_c_per_phase_on_wall_is_the_steps_c_from_the_raw_json(plain):
    """The draft's trace has no Python frames: the pair's tokens are the steps alone (basis forward), c the ratio of
    the steps' median wall time per phase, the phase and tokens from each step's name."""
    t, d = raw_of(TARGET), raw_of(DRAFT)
    assert not d.frames and t.of(SAMPLE)
    coef = plain.coefficients.set_index(["phase", "metric"])
    assert set(plain.coefficients["metric"]) == {"wall"} and plain.headline == "wall"
    for phase in ("all", "prefill", "decode"):
        want = [median_ms([s[2] - s[1] for s in raw.steps if phase == "all" or raw.kind(s) == phase])
                for raw in (d, t)]
        row = coef.loc[(phase, "wall")]
        assert row["basis"] == "forward"
        assert row["c"] == pytest.approx(want[0] / want[1], rel=1e-12), phase
        assert row["draft_median_ms"] == pytest.approx(want[0], rel=1e-12)
        assert row["target_median_ms"] == pytest.approx(want[1], rel=1e-12)
    assert {m.name: m.phase_count("decode") for m in plain.models} == {"tiny-llama-target": 5,
                                                                      "tiny-llama-draft-xs": 5}
    assert all(m.phase_rule.rule == "step names" for m in plain.models)


@pytest.mark.slow
def test_the_targets_token_is_its_step_and_the_sampling_frame_after_it(plain):
    t = raw_of(TARGET)
    tokens = plain.tokens.set_index(["model", "phase", "metric"])
    for phase in ("prefill", "decode"):
        steps = [s for s in t.steps if t.kind(s) == phase]
        want = median_ms([s[2] - s[1] + t.sampling_ns(t.sample_after(s)) for s in steps])
        row = tokens.loc[("tiny-llama-target", phase, "wall")]
        assert row["basis"] == "token"
        assert row["token_median_ms"] == pytest.approx(want, rel=1e-12)
        assert row["sample_median_ms"] == pytest.approx(
            median_ms([t.sampling_ns(t.sample_after(s)) for s in steps]), rel=1e-12)
    # the draft (no Python frames) keeps its steps alone, and says why
    assert tokens.loc[("tiny-llama-draft-xs", "decode", "wall"), "basis"] == "forward"
    assert any("tiny-llama-draft-xs: the trace has no Python frames" in n and "a token is the step alone" in n
               for n in plain.notes)
    assert any("measured the engine's own step annotations" in n for n in plain.notes)


@pytest.mark.slow
def test_the_cli_gives_the_same_c_without_range_or_plugin():
    result = cli_in_process("analyze", str(TARGET), str(DRAFT), "--format", "json")
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["range"] == "execute_context_…_generation_…" and doc["headline_metric"] == "wall"
    t, d = raw_of(TARGET), raw_of(DRAFT)
    decode = [median_ms([s[2] - s[1] for s in raw.steps if raw.kind(s) == "decode"]) for raw in (d, t)]
    (row,) = [c for c in doc["coefficients"] if c["phase"] == "decode" and c["metric"] == "wall"]
    assert row["c"] == pytest.approx(decode[0] / decode[1], rel=1e-12)


# ---- (c) the speculative fixture, measured in place --------------------------------------------------------------
def censored_by_hand(lives: list[int], tokens: int, gamma: int) -> float:
    """The α (on a 1e-3 grid) under which requests most likely took `lives` verify steps to make `tokens` each, the
    last step cut: P(end at step n) = Σ_{s < T} P(n − 1 steps make s) · P(a step makes ≥ T − s)."""
    best, best_ll = 0.0, -math.inf
    for i in range(1, 1000):
        a = i / 1000
        pmf = {k: a ** (k - 1) * (1 - a) for k in range(1, gamma + 1)} | {gamma + 1: a ** gamma}
        ways = {0: 1.0}
        ends: dict[int, float] = {}
        for n in range(1, max(lives) + 1):
            ends[n] = sum(p * sum(q for k, q in pmf.items() if k >= tokens - s) for s, p in ways.items())
            nxt: dict[int, float] = {}
            for s, p in ways.items():
                for k, q in pmf.items():
                    if s + k < tokens:
                        nxt[s + k] = nxt.get(s + k, 0.0) + p * q
            ways = nxt
        ll = sum(math.log(max(ends[n], 1e-300)) for n in lives)
        if ll > best_ll:
            best, best_ll = a, ll
    return best


def engine_steps(raw: Raw) -> list[dict]:
    """Each engine step frame of a trace with the step annotation, sampling and proposing inside it."""
    out = []
    for e in raw.of(ENGINE):
        (step,) = [s for s in raw.steps if e[1] <= s[1] <= e[2]]
        sample = raw.sample_after(step)
        props = [p for p in raw.of(PROPOSE) if e[1] <= p[1] <= e[2]]
        outer = [p for p in props if not any(q != p and q[1] <= p[1] and p[2] <= q[2] for q in props)]
        out.append({"wall": e[2] - e[1], "step": step, "kind": raw.kind(step), "sample": sample,
                    "sampling": raw.sampling_ns(sample), "propose": outer})
    return out


@pytest.fixture(scope="module")
def spec():
    return nsys_cc.analyze(TARGET, [DRAFT, SPEC])


@pytest.mark.slow
def test_the_proposer_frames_make_a_speculative_run_measured_in_place(spec):
    p, s = raw_of(TARGET), raw_of(SPEC)
    plain_steps, spec_steps = engine_steps(p), engine_steps(s)
    decode = [x for x in plain_steps if x["kind"] == "decode"]
    verify = [x for x in spec_steps if x["kind"] == "verify"]
    gamma = int(STEP.match(verify[0]["step"][0]).group(4)) // int(STEP.match(verify[0]["step"][0]).group(3)) - 1
    assert gamma == 2 and len(verify) == 5
    proposing = [sum(q[2] - q[1] for q in x["propose"]) for x in verify]
    v_wall = [x["step"][2] - x["step"][1] for x in verify]
    v_token = [x["step"][2] - x["step"][1] + x["sampling"] for x in verify]
    d_token = [x["step"][2] - x["step"][1] + x["sampling"] for x in decode]
    row = spec.speculative.table.set_index("name").loc["tiny-llama-draft-xs.spec-g2"]
    assert row["draft"] == "tiny-llama-draft-xs" and row["gamma"] == gamma and row["steps"] == 5
    assert row["step_rule"] == "engine step frames"
    assert row["verify_ms"] == pytest.approx(median_ms(v_wall), rel=1e-12)  # verify per step
    assert row["draft_step_ms"] == pytest.approx(median_ms(proposing), rel=1e-12)  # the proposing per step
    assert row["draft_forward_ms"] == pytest.approx(median_ms([x / gamma for x in proposing]), rel=1e-12)  # per token
    assert row["other_ms"] == pytest.approx(  # the time outside both
        median_ms([x["wall"] - (x["step"][2] - x["step"][1]) - y for x, y in zip(verify, proposing)]), rel=1e-12)
    assert row["step_ms"] == pytest.approx(median_ms([x["wall"] for x in verify]), rel=1e-12)
    assert row["decode_ms"] == pytest.approx(median_ms([x["step"][2] - x["step"][1] for x in decode]), rel=1e-12)
    assert row["decode_step_ms"] == pytest.approx(median_ms([x["wall"] for x in decode]), rel=1e-12)
    assert row["basis"] == "token"
    assert row["verify_token_ms"] == pytest.approx(median_ms(v_token), rel=1e-12)
    assert row["decode_token_ms"] == pytest.approx(median_ms(d_token), rel=1e-12)
    assert row["c_in_place"] == pytest.approx(median_ms([x / gamma for x in proposing]) / median_ms(v_token),
                                              rel=1e-12)
    assert row["c_in_place_decode"] == pytest.approx(median_ms([x / gamma for x in proposing]) / median_ms(d_token),
                                                     rel=1e-12)
    # tokens per step: the α that best explains the request's verify steps for its output tokens (the plain target's
    # steps per prefill), its last step cut by its length, by brute force here; E(α, γ) at it
    outputs = len(p.steps) / sum(p.kind(x) == "prefill" for x in p.steps)
    alpha = censored_by_hand([len(verify)], int(outputs) - 1, gamma)
    tps = (1 - alpha ** (gamma + 1)) / (1 - alpha) if alpha < 1 else gamma + 1
    assert row["tokens_per_step"] == pytest.approx(tps, abs=2e-3)
    assert row["measured_speedup"] == pytest.approx(row["tokens_per_step"] * row["decode_step_ms"] / row["step_ms"],
                                                    rel=1e-12)
    # and in words: a verify step's verify, proposing (per step, per drafted token) and outside time
    (said,) = [n for n in spec.speculative.notes if n.startswith("tiny-llama-draft-xs.spec-g2: a verify step")]
    assert (f"on wall: verify {median_ms(v_wall):.3g} ms, the proposing {median_ms(proposing):.3g} ms "
            f"({median_ms([x / gamma for x in proposing]):.3g} ms per drafted token, γ = 2), outside both "
            f"{row['other_ms']:.3g} ms") in said


@pytest.mark.slow
def test_the_first_proposing_after_the_prefill_is_kept_apart(spec):
    s = raw_of(SPEC)
    (pre,) = [x for x in engine_steps(s) if x["kind"] == "prefill"]
    first = sum(q[2] - q[1] for q in pre["propose"]) / 1e6
    notes = [n for n in spec.speculative.notes if "the proposing after the prefill step" in n]
    assert len(notes) == 1 and f"{first:.3f} ms on wall" in notes[0] and "kept apart" in notes[0]
    steps = spec.speculative.steps
    mine = steps[steps["run"] == "tiny-llama-draft-xs.spec-g2"]
    assert mine.loc[mine["kind"] == "prefill", "draft_ms"].tolist() == pytest.approx([first], rel=1e-12)
    # the per-step figures are the verify steps': the prefill's proposing (over the prompt) is not among them
    verify = [sum(q[2] - q[1] for q in x["propose"]) / 1e6 for x in engine_steps(s) if x["kind"] == "verify"]
    assert first > max(verify)


# ---- (b) GPU-shaped torch traces: c on every metric, the headline, the words ---------------------------------------
@pytest.fixture(scope="module")
def shaped(tmp_path_factory):
    """GPU-shaped copies (NOT GPU traces), each made on first use (a copy takes ~0.6 s): a GPU-bound target (its
    steps' work 3× their wall, a CUDA graph among their launches, running past the step), a launch-bound 'draft' made
    of the same CPU trace (its steps' ten tiny kernels spread over 90 % of the step: the GPU idles between them), each
    step's sampling two kernels; and a pair whose launch and GPU times agree (the real target and draft, work 1.1×
    their steps), with the speculative run."""
    out = tmp_path_factory.mktemp("vllm-gpu")
    plans = {"gpu-target": (TARGET, gsk.vllm_plan(3.0)), "gpu-draft": (TARGET, gsk.vllm_plan(launch_bound=True)),
             "tiny-llama-target": (TARGET, gsk.vllm_plan(1.1)), "tiny-llama-draft-xs": (DRAFT, gsk.vllm_plan(1.1)),
             "tiny-llama-draft-xs.spec-g2": (SPEC, gsk.vllm_plan(1.1))}
    made: dict[str, gsk.GpuShapedKineto] = {}

    def get(label: str) -> gsk.GpuShapedKineto:
        if label not in made:
            src, plan = plans[label]
            made[label] = gsk.add_gpu_work(src, out / f"{label}.pt.trace.json", plan, frames=gsk.vllm_frame)
        return made[label]

    return get


@pytest.fixture(scope="module")
def disagree(shaped):
    return nsys_cc.analyze(shaped("gpu-target").path, [shaped("gpu-draft").path])


def known_tokens(made: gsk.GpuShapedKineto, metric: str) -> dict[str, list[float]]:
    """Per phase (and all), each step's token on `metric` (ns): the step's value plus its sampling's — wall from the
    raw JSON, a GPU metric from the work written (the sampling's two kernels launch before any proposing)."""
    raw = raw_of(made.path)
    work = {(w.range.start, w.range.name): w for w in made.work}
    out: dict[str, list[float]] = {"all": []}
    for s in raw.steps:
        sample = raw.sample_after(s)
        if metric == "wall":
            value = s[2] - s[1] + raw.sampling_ns(sample)
        else:
            value = getattr(work[(s[1], s[0])], METRICS[metric]) + (
                getattr(work[(sample[1], sample[0])], METRICS[metric]) if sample else 0)
        out.setdefault(raw.kind(s), []).append(value)
        out["all"].append(value)
    return out


@pytest.mark.slow
@pytest.mark.parametrize("metric", ["gpu_span", "kernel_sum", "gpu_busy", "wall"])
def test_c_on_every_metric_is_the_known_gpu_work(shaped, disagree, metric):
    t, d = known_tokens(shaped("gpu-target"), metric), known_tokens(shaped("gpu-draft"), metric)
    coef = disagree.coefficients.set_index(["phase", "metric"])
    for phase in ("all", "prefill", "decode"):
        row = coef.loc[(phase, metric)]
        assert row["basis"] == "token"
        assert row["c"] == pytest.approx(statistics.median(d[phase]) / statistics.median(t[phase]), rel=1e-12)
        assert row["target_median_ms"] == pytest.approx(statistics.median(t[phase]) / 1e6, rel=1e-12)


@pytest.mark.slow
def test_gpu_time_heads_and_the_cpu_time_is_named_launch_time(shaped, disagree):
    assert disagree.headline == "gpu_span"
    assert disagree.speedup_marks.set_index("draft").loc["gpu-draft", "c"] == pytest.approx(
        disagree.coefficients.set_index(["phase", "metric"]).loc[("decode", "gpu_span"), "c"])
    text = disagree.render("table")
    header = next(line for line in text.splitlines() if line.startswith("Model "))
    assert header.split()[4:7] == ["GPU", "span", "(ms)"]  # the headline first
    assert header.index("GPU span (ms)") < header.index("Kernel sum") < header.index("Launch time (ms)")
    assert "c Wall" not in header and "c Launch time" in header
    assert "on the GPU: c on GPU span heads (the GPU's time), 'Launch time' is each range's CPU time" in text
    assert repr(disagree).endswith("c on GPU span: gpu-draft: " f"{disagree.speedup_marks['c'].iloc[0]:.3g} (decode)>")


@pytest.mark.slow
def test_the_words_say_where_launch_and_gpu_time_disagree(shaped, disagree):
    """The same CPU trace under both: c on launch time is 1, on GPU time the known ratio; the target's GPU work runs
    3× past its launches; the draft's GPU idles between its launches (busy ≪ span)."""
    table = disagree.gpu_time.set_index("model")
    t_span, d_span = (statistics.median(known_tokens(shaped(k), "gpu_span")["decode"]) for k in ("gpu-target",
                                                                                                 "gpu-draft"))
    d_busy = statistics.median(known_tokens(shaped("gpu-draft"), "gpu_busy")["decode"])
    draft = table.loc["gpu-draft"]
    assert draft["c_gpu"] == pytest.approx(d_span / t_span, rel=1e-12) and draft["c_launch"] == pytest.approx(1.0)
    assert draft["c_disagrees"] and draft["boundness"] == "launch-bound"
    assert draft["busy_share"] == pytest.approx(d_busy / d_span, rel=1e-12) and draft["busy_share"] < 0.5
    assert table.loc["gpu-target", "disagrees"] and table.loc["gpu-target", "launch_ratio"] < 1 / 1.5
    text = disagree.render("table")
    assert "GPU time vs launch time" in text
    lines = [ln for ln in text.splitlines() if "launch time and GPU time disagree" in ln]
    assert any(ln.startswith(f"* gpu-draft (decode): c on GPU span is {d_span / t_span:.3g}") for ln in lines)
    assert any(ln.startswith("* gpu-target (decode)") and "its GPU work spans" in ln for ln in lines)
    assert any(ln.startswith("* gpu-draft (decode)") and "launch-bound: its GPU idles between launches" in ln
               and f"GPU busy {d_busy / 1e6:.3f} ms of its {d_span / 1e6:.3f} ms GPU span" in ln
               for ln in text.splitlines())
    doc = json.loads(disagree.render("json"))
    assert doc["headline_metric"] == "gpu_span" and any("disagree" in w for w in doc["gpu_time_words"])
    assert "GPU time vs launch time" in disagree.render("markdown")


@pytest.mark.slow
def test_no_disagreement_is_said_when_launch_and_gpu_time_agree(shaped):
    res = nsys_cc.analyze(shaped("tiny-llama-target").path, [shaped("tiny-llama-draft-xs").path])
    assert res.headline == "gpu_span"
    table = res.gpu_time
    assert not table["disagrees"].any() and not table["c_disagrees"].any()
    assert set(table["boundness"]) == {"GPU-bound"}
    text = res.render("table")
    assert "disagree" not in text and "its GPU idles between launches" not in text
    assert "* launch time and GPU time agree within 1.5× for every model and c" in text
    c = res.coefficients.set_index(["phase", "metric"])
    assert c.loc[("decode", "gpu_span"), "c"] == pytest.approx(c.loc[("decode", "wall"), "c"], rel=0.25)


@pytest.mark.slow
def test_the_speculative_run_in_place_on_the_gpu_is_the_known_work(shaped):
    """In place on a GPU trace: verify, the proposing and the outside time on the headline metric (gpu_span) equal
    the work written, per step from the raw JSON's engine step frames."""
    res = nsys_cc.analyze(shaped("tiny-llama-target").path, [shaped("tiny-llama-draft-xs").path,
                                                              shaped("tiny-llama-draft-xs.spec-g2").path])
    spec = res.speculative
    assert spec.metric == "gpu_span"
    gamma = 2
    made, plain = shaped("tiny-llama-draft-xs.spec-g2"), shaped("tiny-llama-target")
    work = {(w.range.start, w.range.name): w for w in made.work}
    p_work = {(w.range.start, w.range.name): w for w in plain.work}
    verify = [x for x in engine_steps(raw_of(made.path)) if x["kind"] == "verify"]
    decode = [x for x in engine_steps(raw_of(plain.path)) if x["kind"] == "decode"]
    for metric in ("gpu_span", "gpu_busy", "kernel_sum"):

        def of(w, frame, metric=metric):
            return getattr(w[(frame[1], frame[0])], METRICS[metric]) if frame else 0

        v = [of(work, x["step"]) for x in verify]
        prop = [sum(of(work, q) for q in x["propose"]) for x in verify]
        v_token = [of(work, x["step"]) + of(work, x["sample"]) for x in verify]
        d_token = [of(p_work, x["step"]) + of(p_work, x["sample"]) for x in decode]
        row = spec.by_metric.set_index(["name", "metric"]).loc[("tiny-llama-draft-xs.spec-g2", metric)]
        assert row["verify_ms"] == pytest.approx(median_ms(v), rel=1e-12), metric
        assert row["draft_forward_ms"] == pytest.approx(median_ms([x / gamma for x in prop]), rel=1e-12), metric
        assert row["other_ms"] == pytest.approx(median_ms([x["wall"] - a - b for x, a, b in zip(verify, v, prop)]),
                                                rel=1e-12), metric
        assert row["verify_token_ms"] == pytest.approx(median_ms(v_token), rel=1e-12), metric
        assert row["c_in_place"] == pytest.approx(median_ms([x / gamma for x in prop]) / median_ms(v_token),
                                                  rel=1e-12), metric
        assert row["c_in_place_decode"] == pytest.approx(median_ms([x / gamma for x in prop]) / median_ms(d_token),
                                                         rel=1e-12), metric
    assert any("the proposing after the prefill step" in n and "on gpu_span" in n for n in spec.notes)


@pytest.mark.slow
def test_an_nsys_gpu_export_is_headlined_by_the_same_rule(tmp_path):
    """The rule is the format's none: a GPU-shaped nsys export pair (tests/gpu_shaped.py) is headlined on GPU span,
    its wall named as launch time, with the same words where the two disagree."""
    from gpu_shaped import FORWARD, add_gpu_work, steady

    vllm = FIXTURES / "vllm"
    t = add_gpu_work(vllm / "tiny-llama-target.sqlite", tmp_path / "t.sqlite", steady(3.0, names=(FORWARD,)))
    d = add_gpu_work(vllm / "tiny-llama-draft-xs.sqlite", tmp_path / "d.sqlite", steady(0.3, names=(FORWARD,)))
    res = nsys_cc.analyze(t.path, [d.path])
    assert res.headline == "gpu_span"
    coef = res.coefficients.set_index(["phase", "metric"])
    phase = res.speedup_marks["phase"].iloc[0]
    assert res.speedup_marks["c"].iloc[0] == coef.loc[(phase, "gpu_span"), "c"]
    row = res.gpu_time.set_index("model").loc["d"]
    assert row["c_gpu"] == coef.loc[(phase, "gpu_span"), "c"] and row["c_launch"] == coef.loc[(phase, "wall"), "c"]
    text = res.render("table")
    assert "Launch time (ms)" in text and "GPU time vs launch time" in text
    assert "launch time and GPU time disagree" in text  # the target's work runs 3× past its launches


# ---- (d) the public B200 trace: one real prefill step --------------------------------------------------------------
def b200_by_hand() -> tuple[float, float, float]:
    """(CPU ms, GPU span ms, GPU busy ms) of the B200 trace's step from the raw JSON: the GPU work of the CUDA calls
    inside the step on its thread (joined by correlation id), its span and the length of its union."""
    raw = raw_of(B200)
    (step,) = raw.steps
    x = [e for e in raw.events if e.get("ph") == "X"]
    calls = {e["args"]["correlation"] for e in x if e.get("cat") in ("cuda_runtime", "cuda_driver")
             and e["tid"] == step[3] and step[1] <= ns(e["ts"]) and ns(e["ts"]) + ns(e["dur"]) <= step[2]}
    ops = sorted((ns(e["ts"]), ns(e["ts"]) + ns(e["dur"])) for e in x
                 if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset") and e["args"].get("correlation") in calls)
    busy, reach = 0, None
    for s, e in ops:
        if reach is None or s > reach:
            busy, reach = busy + e - s, e
        elif e > reach:
            busy, reach = busy + e - reach, e
    return (step[2] - step[1]) / 1e6, (max(e for _, e in ops) - ops[0][0]) / 1e6, busy / 1e6


@pytest.mark.slow
@pytest.mark.skipif(not B200.exists(), reason="the public B200 trace is not here (../shared/traces/public)")
def test_the_b200_trace_alone_and_with_itself_says_gpu_time_against_launch_time(tmp_path):
    cpu, span, busy = b200_by_hand()
    assert 80 < cpu < 95 and 11 < busy < 12.5  # the step: ~87 ms on the CPU, ~11.6 ms of GPU work
    copy = tmp_path / "b200-copy.pt.trace.json.gz"
    shutil.copyfile(B200, copy)
    for args in ([str(B200)], [str(B200), str(copy)]):
        result = cli_in_process("analyze", *args)
        assert result.returncode == 0, result.stderr
        out = result.stdout
        assert "GPU time vs launch time" in out
        line = next(ln for ln in out.splitlines() if ln.startswith("* AMD-AGI__TraceLens__b200_eager_trace (all)"))
        assert (f"launch time {cpu:.3f} ms (CPU), GPU span {span:.3f} ms, GPU busy {busy:.3f} ms: launch-bound: its "
                f"GPU idles between launches") in line
    alone = nsys_cc.analyze(B200)
    assert alone.headline == "gpu_span" and not alone.drafts and alone.coefficients.empty
    assert any("is one trace: its steps are described alone" in n for n in alone.notes)
    assert any("no sampling frame" in n and "a token is the step alone" in n for n in alone.notes)


# ---- (e) odd traces: one line or a note, never a traceback ---------------------------------------------------------
def renamed(tmp_path: Path, src: Path, names: dict[int, str], *, drop_frames: bool = False,
            out: str = "odd.pt.trace.json") -> Path:
    """`src` with its i-th step annotation renamed (`names`: position → new name), written as JSON."""
    opener = gzip.open if src.read_bytes()[:2] == b"\x1f\x8b" else open
    with opener(src, "rt", encoding="utf-8") as fh:
        text = fh.read()
    doc = json.loads(text, parse_float=gsk._Raw)
    steps = [e for e in doc["traceEvents"] if e.get("cat") == "user_annotation" and e.get("ph") == "X"]
    steps.sort(key=lambda e: Decimal(str(e["ts"])))
    for i, name in names.items():
        steps[i]["name"] = name
    if drop_frames:
        doc["traceEvents"] = [e for e in doc["traceEvents"] if e.get("cat") != "python_function"]
    path = tmp_path / out
    path.write_text(gsk._dumps(doc))
    return path


def one_line(*args: str) -> str:
    result = cli_in_process("analyze", *args)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("nsys-cc: error: ")
    return line


def test_only_empty_steps_give_one_line(tmp_path):
    odd = renamed(tmp_path, DRAFT, {i: "execute_context_0(0)_generation_0(0)" for i in range(6)})
    line = one_line(str(TARGET), str(odd))
    assert "none of its 6 vLLM step annotations is a forward to measure (6 schedule no tokens" in line


@pytest.mark.slow
def test_empty_mixed_and_unparsed_steps_are_left_out_with_a_note(tmp_path):
    odd = renamed(tmp_path, DRAFT, {1: "execute_context_0(0)_generation_0(0)",
                                    2: "execute_context_1(7)_generation_1(1)",
                                    3: "execute_context_0(0)_generation_one(1)"})
    res = nsys_cc.analyze(TARGET, [odd])
    d = res.models[1]
    # 6 steps less the empty and the unparsed one; the mixed one a phase of its own, never a prefill
    assert d.phase_count("decode") == 2 and d.phase_count("prefill") == 1 and d.phase_count("mixed") == 1
    said = [n for n in res.notes if n.startswith("odd: ")]
    assert any("1 of its 6 vLLM steps schedule no tokens" in n for n in said)
    assert any("1 of its 6 vLLM steps hold both context (prefill) and generation requests" in n
               and "measured as mixed steps, a phase of their own" in n for n in said)
    assert any("1 of its 6 vLLM steps named like vLLM's steps" in n and "execute_context_0(0)_generation_one(1)" in n
               for n in said)
    raw = Raw(odd)  # a file of this test: read once
    kept = [s for s in raw.steps if raw.kind(s) == "decode" and s[0] == "execute_context_0(0)_generation_1(1)"]
    c = res.coefficients.set_index(["phase", "metric"]).loc[("decode", "wall"), "draft_median_ms"]
    assert c == pytest.approx(median_ms([s[2] - s[1] for s in kept]), rel=1e-12)


@pytest.mark.slow
def test_the_detailed_step_names_give_the_same_c(tmp_path, plain):
    """vLLM's detailed_trace_annotation names (`execute_<total>_context_<n>(sq…)_generation_<m>(sq…)`) read as the
    plain ones: the draft's steps renamed so give the same c per phase."""
    raw = raw_of(DRAFT)
    names = {}
    for i, s in enumerate(raw.steps):
        ctx_req, ctx_tok, gen_req, gen_tok = map(int, STEP.match(s[0]).groups())
        names[i] = (f"execute_{ctx_tok + gen_tok}_context_{ctx_req}(sq{ctx_tok}sk{ctx_tok}sqsq{ctx_tok ** 2}sqsk"
                    f"{ctx_tok ** 2})_generation_{gen_req}(sq{gen_tok}sk{32 + i}sqsq{gen_tok}sqsk{32 + i})")
    detailed = renamed(tmp_path, DRAFT, names, out="tiny-llama-draft-xs.pt.trace.json")
    assert "sqsq" in names[0] and not Raw(detailed).steps  # none left in the plain form
    res = nsys_cc.analyze(TARGET, [detailed])
    got = res.coefficients.set_index(["phase", "metric"])["c"]
    want = plain.coefficients.set_index(["phase", "metric"])["c"]
    assert got.to_dict() == pytest.approx(want.to_dict(), rel=1e-12)


@pytest.mark.slow
def test_steps_without_gpu_work_on_a_gpu_trace_are_dropped_with_a_note(tmp_path):
    # only the decode steps launch work: the prefill launched none and is no forward of this GPU run
    shaped = gsk.add_gpu_work(DRAFT, tmp_path / "d.pt.trace.json.gz", gsk.steady(1.1))
    target = gsk.add_gpu_work(TARGET, tmp_path / "t.pt.trace.json.gz", gsk.steady(1.1))
    res = nsys_cc.analyze(target.path, [shaped.path])
    assert [m.phases for m in res.models] == [["all", "decode"], ["all", "decode"]]
    assert any(n.startswith("d: 1 of its 6 vLLM steps launched no GPU work") for n in res.notes)
    # none launched any (the trace's GPU work came from another thread): one line
    other = gsk.add_gpu_work(DRAFT, tmp_path / "o.pt.trace.json.gz",
                             lambda rng: [gsk.Launch(rng.duration // 2, 1_000, (50_000,), thread=4242)])
    assert len(other.all_ops) == 6 and not any(w.ops for w in other.work)
    line = one_line(str(target.path), str(other.path))
    assert "none of its 6 vLLM step annotations is a forward to measure (6 launched no GPU work on their own " \
           "thread)" in line


@pytest.mark.slow
def test_a_speculative_run_without_proposer_frames_is_refused_as_a_draft(tmp_path):
    bare = renamed(tmp_path, SPEC, {}, drop_frames=True, out="tiny-llama-draft-xs.spec-g2.pt.trace.json")
    line = one_line(str(TARGET), str(DRAFT), str(bare))
    assert "verify more than one token per request (a speculative run)" in line and "no proposer frame" in line
    # as a target it is measured, and the note says it could not be measured in place
    res = nsys_cc.analyze(bare)
    assert any("measured as plain steps, not in place" in n for n in res.notes)


def test_a_speculative_run_alone_is_one_line():
    line = one_line(str(SPEC))
    assert "is a speculative run: give the plain target's trace first" in line


def test_the_library_raises_the_projects_error():
    with pytest.raises(InputError, match="is a speculative run"):
        nsys_cc.analyze(SPEC)


# ---- (f) frames as every install names them ------------------------------------------------------
SPEC_FIGURES = ("verify_ms", "draft_step_ms", "draft_forward_ms", "other_ms", "verify_token_ms", "c_in_place",
                "tokens_per_step")


@pytest.mark.slow
@pytest.mark.parametrize("form", ["source checkout", "container", "conda", "venv", "editable"])
def test_a_speculative_run_is_measured_in_place_whatever_the_install_prefix(tmp_path, spec, form):
    """The fixtures' frames are trimmed (`vllm/v1/…`, a site-packages install); the same traces with every vLLM frame
    written as another install writes it (absolute paths) give the same run in place, its sampling included."""
    t = gsk.with_frames_as(TARGET, tmp_path / "tiny-llama-target.pt.trace.json.gz", form)
    s = gsk.with_frames_as(SPEC, tmp_path / "tiny-llama-draft-xs.spec-g2.pt.trace.json.gz", form)
    assert not any(f[0].startswith("vllm/") for f in Raw(s).frames if "spec_decode" in f[0])
    res = nsys_cc.analyze(t, [DRAFT, s])
    got = res.speculative.table.set_index("name").loc["tiny-llama-draft-xs.spec-g2"]
    want = spec.speculative.table.set_index("name").loc["tiny-llama-draft-xs.spec-g2"]
    for column in SPEC_FIGURES:
        assert got[column] == pytest.approx(want[column], rel=1e-12), column
    assert got["basis"] == "token"
    assert not any("no sampling frame" in n or "no proposer frame" in n for n in res.notes)


@pytest.mark.slow
@pytest.mark.parametrize("module", ["spec_decode/eagle.py", "worker/gpu/spec_decode/eagle.py"])
def test_the_proposer_is_found_where_other_versions_put_it(tmp_path, spec, module):
    """The fixture's proposer is `vllm/v1/spec_decode/llm_base_proposer.py`; early-2026 builds had it in
    `spec_decode/eagle.py`, the V2 runner in `worker/gpu/spec_decode/`."""
    def moved(name: str) -> str:
        old = "vllm/v1/spec_decode/llm_base_proposer.py("
        return "vllm/v1/" + module + name[len(old) - 1:] if name.startswith(old) else name

    s = gsk.with_frames_as(SPEC, tmp_path / "tiny-llama-draft-xs.spec-g2.pt.trace.json.gz", "source checkout",
                           rename=moved)
    assert any(module in f[0] for f in Raw(s).frames)
    res = nsys_cc.analyze(TARGET, [DRAFT, s])
    got = res.speculative.table.set_index("name").loc["tiny-llama-draft-xs.spec-g2"]
    want = spec.speculative.table.set_index("name").loc["tiny-llama-draft-xs.spec-g2"]
    assert got["draft_step_ms"] == pytest.approx(want["draft_step_ms"], rel=1e-12)


@pytest.mark.slow
def test_without_stacks_is_said_only_of_a_trace_without_python_frames(tmp_path):
    """A speculative trace whose frames name no proposer nsys_cc knows is not 'recorded without Python stacks'."""
    def elsewhere(name: str) -> str:
        return name.replace("/spec_decode/", "/drafting/") if "/spec_decode/" in name else name

    odd = gsk.with_frames_as(SPEC, tmp_path / "tiny-llama-draft-xs.spec-g2.pt.trace.json.gz", "pip", rename=elsewhere)
    line = one_line(str(TARGET), str(DRAFT), str(odd))
    assert "no proposer frame" in line and "holds Python frames" in line and "without Python stacks" not in line
    bare = renamed(tmp_path, SPEC, {}, drop_frames=True, out="tiny-llama-draft-xs.spec-g2.pt.trace.json")
    line = one_line(str(TARGET), str(DRAFT), str(bare))
    assert "holds no Python frames: recorded without Python stacks" in line


@pytest.mark.slow
def test_the_sampling_is_in_the_token_whatever_the_install_prefix(tmp_path):
    """A container's absolute frame names: the target's token is still its step and the sampling frame after it."""
    t = gsk.with_frames_as(TARGET, tmp_path / "tiny-llama-target.pt.trace.json.gz", "container")
    raw = Raw(t)
    assert raw.of(SAMPLE) and all(f[0].startswith("/usr/local/lib/python3.12/dist-packages/vllm/")
                                  for f in raw.of(SAMPLE))
    res = nsys_cc.analyze(t)
    row = res.tokens.set_index(["model", "phase", "metric"]).loc[("tiny-llama-target", "decode", "wall")]
    steps = [s for s in raw.steps if raw.kind(s) == "decode"]
    assert row["basis"] == "token"
    assert row["token_median_ms"] == pytest.approx(
        median_ms([s[2] - s[1] + raw.sampling_ns(raw.sample_after(s)) for s in steps]), rel=1e-12)
