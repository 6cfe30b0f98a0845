"""A real speculative run under vLLM's own torch profiler, measured in place: the known-α pair's fixtures
(`fixtures/torch/pair-*`, `scripts/make_torch_fixtures.sh pair`: vLLM's CPU build, draft_model at γ = 3, batch 4,
Python frames on, vLLM's counters dumped beside the speculative trace).

Every figure is recomputed from the raw JSON (json + Decimal, frames told by their module path): the engine core's
step frames as the steps, the step annotations inside them, the proposer's frame and the sampling frame less the frame
that proposes in it; the requests' lives from the step annotations' batches; vLLM's α from the dump's counters."""

from __future__ import annotations

import gzip
import json
import re
import statistics
from decimal import Decimal

import pytest

import nsys_cc
from conftest import FIXTURES

pytestmark = pytest.mark.slow  # three real traces with Python frames (3 MB), each read whole: make test

FIX = FIXTURES / "torch"
TARGET, DRAFT, SPEC = (FIX / f"{n}.pt.trace.json.gz" for n in ("pair-target-a50", "pair-draft", "pair-draft.spec-g3"))
RUN = "pair-draft.spec-g3"
GAMMA = 3
STEP_RE = re.compile(r"^execute_context_(\d+)\((\d+)\)_generation_(\d+)\((\d+)\)$")
FRAMES = {"step": r"vllm/v1/engine/core\.py\(\d+\): step", "sample": r"vllm/v1/worker/gpu_model_runner\.py\(\d+\): "
          r"sample_tokens", "propose": r"vllm/v1/spec_decode/\S+\.py\(\d+\): propose",
          "proposing": r"vllm/v1/worker/gpu_model_runner\.py\(\d+\): propose_draft_token_ids"}


def outermost(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for s in sorted(spans, key=lambda x: (x[0], -x[1])):
        if not out or s[0] >= out[-1][1]:
            out.append(s)
    return out


class Raw:
    """The trace's step annotations (kind, batch, start, end) and each frame kind's outermost frames (start, end)."""

    def __init__(self, path) -> None:
        with gzip.open(path, "rt", encoding="utf-8") as fh:
            doc = json.load(fh, parse_float=Decimal)
        self.steps, found = [], {k: [] for k in FRAMES}
        for e in doc["traceEvents"]:
            if e.get("ph") != "X":
                continue
            start = int(Decimal(e["ts"]) * 1000)
            end = start + int(Decimal(e["dur"]) * 1000)
            if e["cat"] == "user_annotation" and (m := STEP_RE.match(e["name"])):
                ctx, _, gen, gen_tok = map(int, m.groups())
                kind = "prefill" if ctx else "verify" if gen_tok > gen else "decode"
                self.steps.append({"kind": kind, "batch": ctx + gen, "start": start, "end": end})
            elif e["cat"] == "python_function":
                for k, pattern in FRAMES.items():
                    if re.search(rf"(?:^|/){pattern}$", e["name"]):
                        found[k].append((start, end))
        self.steps.sort(key=lambda s: s["start"])
        self.frames = {k: outermost(v) for k, v in found.items()}

    def within(self, kind: str, start: int, end: int) -> list[tuple[int, int]]:
        return [f for f in self.frames[kind] if start <= f[0] and f[1] <= end]

    def engine_steps(self) -> list[dict]:
        """Per engine step frame: its time and its step annotation's kind, batch and time, the proposing in it, and
        its sampling (the sampling frame less the frame in it that proposes), ms."""
        out = []
        for a, b in self.frames["step"]:
            s = next(s for s in self.steps if a <= s["start"] and s["end"] <= b)
            sample = self.within("sample", a, b)
            proposing = sum(e - f for f, e in self.within("proposing", a, b))
            out.append({**s, "step_ms": (b - a) / 1e6, "forward_ms": (s["end"] - s["start"]) / 1e6,
                        "propose_ms": sum(e - f for f, e in self.within("propose", a, b)) / 1e6,
                        "sample_ms": (sum(e - f for f, e in sample) - proposing) / 1e6})
        return out


@pytest.fixture(scope="module")
def analysed():
    return nsys_cc.analyze(str(TARGET), [str(DRAFT), str(SPEC)])


@pytest.fixture(scope="module")
def raw():
    return {k: Raw(p) for k, p in (("target", TARGET), ("draft", DRAFT), ("spec", SPEC))}


def test_the_run_is_measured_in_place_from_its_own_frames(analysed, raw):
    steps = raw["spec"].engine_steps()
    verify = [s for s in steps if s["kind"] == "verify"]
    plain = [s for s in raw["target"].engine_steps() if s["kind"] == "decode"]
    row = analysed.speculative.table.set_index("name").loc[RUN]
    assert row["metric"] == "wall" and row["steps"] == len(verify) >= 5
    assert row["verify_ms"] == pytest.approx(statistics.median(s["forward_ms"] for s in verify), rel=1e-9)
    assert row["draft_step_ms"] == pytest.approx(statistics.median(s["propose_ms"] for s in verify), rel=1e-9)
    assert row["draft_forward_ms"] == pytest.approx(statistics.median(s["propose_ms"] / GAMMA for s in verify),
                                                    rel=1e-9)
    assert row["verify_sample_ms"] == pytest.approx(statistics.median(s["sample_ms"] for s in verify), rel=1e-9)
    step, decode = statistics.median(s["step_ms"] for s in verify), statistics.median(s["step_ms"] for s in plain)
    assert row["step_ms"] == pytest.approx(step, rel=1e-9) and row["decode_step_ms"] == pytest.approx(decode, rel=1e-9)
    assert row["measured_speedup"] == pytest.approx(row["tokens_per_step"] * decode / step, rel=1e-9)
    first = next(s for s in steps if s["kind"] == "prefill")  # the first proposing, over the prompt: kept apart
    assert any(f"took {first['propose_ms']:.3f} ms on wall" in n for n in analysed.speculative.notes)


def test_alpha_from_the_trace_beside_vllms_counters(analysed, raw):
    batches = [s["batch"] for s in raw["spec"].steps if s["kind"] == "verify"]
    lives, n = [], 0  # a request leaves after the last verify step of a batch it was in
    for i, b in enumerate(batches):
        n += 1
        lives += [n] * (b - (batches[i + 1] if i + 1 < len(batches) else 0))
    assert len(lives) == 4
    said = [x for x in analysed.speculative.notes if x.startswith(f"{RUN}: α ") and "tokens per step from" in x]
    assert len(said) == 1 and f"in {min(lives)}–{max(lives)} verify steps" in said[0]
    trace_alpha = float(re.search(r"α (\d\.\d+)", said[0]).group(1))
    with open(FIX / f"{RUN}.metrics.json", encoding="utf-8") as fh:
        counters = {m["name"]: m.get("value", m.get("values")) for m in json.load(fh)["metrics"]}
    accepted = counters["vllm:spec_decode_num_accepted_tokens"]
    drafts = counters["vllm:spec_decode_num_drafts"]
    last = counters["vllm:spec_decode_num_accepted_tokens_per_pos"][-1]
    row = analysed.speculative.table.set_index("name").loc[RUN]
    assert row["alpha_source"] == "metrics"
    assert row["alpha"] == pytest.approx(accepted / (accepted + drafts - last), rel=1e-12)
    assert row["alpha_vllm"] == pytest.approx(accepted / counters["vllm:spec_decode_num_draft_tokens"], rel=1e-12)
    assert abs(trace_alpha - 0.5) < 0.25 and abs(row["alpha"] - 0.5) < 0.15  # the pair is built for α ≈ 0.5


def test_the_token_c_of_the_plain_pair_holds_the_sampling(analysed, raw):
    def tokens(r: Raw) -> list[float]:
        return [s["forward_ms"] + s["sample_ms"] for s in r.engine_steps() if s["kind"] == "decode"]

    c = statistics.median(tokens(raw["draft"])) / statistics.median(tokens(raw["target"]))
    coef = analysed.coefficients.set_index(["draft", "phase", "metric"]).loc[("pair-draft", "decode", "wall")]
    assert coef["basis"] == "token" and coef["c"] == pytest.approx(c, rel=1e-9)
