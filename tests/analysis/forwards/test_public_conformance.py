"""Conformance on every real trace in ../shared/traces/public: each is read, its engine steps recognised with their
kind, batch and context, and every step's GPU span and kernel sum equal a computation from the raw events written
here (the oracle: the JSON read with `json`, times through their decimal text; a step's GPU work is the GPU ops whose
`args.correlation` is that of a runtime/driver call made inside the step on its own thread; its kernel sum the
kernels' durations). Step names are parsed here by regular expressions of this file, not the package's.

The traces: vLLM on B200 (eager, one prefill), vLLM on MI300X (a FULL-graph decode at batch 32; a piecewise mixed step
of 8,192 tokens), SGLang on MI300X (a decode at batch 32), the graph-capture traces of both (captures, no steps), and
the Nsight Systems exports (none of them an engine's: no step is found in any). Skipped when ../shared is absent;
marked `slow` (a few seconds a trace: `make test` runs it, `make check` does not)."""

from __future__ import annotations

import gzip
import json
import re
from decimal import Decimal

import pytest

import nsys_cc
from conftest import PUBLIC
from nsys_cc.analysis.forwards import vllm_steps
from nsys_cc.analysis.forwards.step_names import parse_capture
from nsys_cc.trace import open_trace

pytestmark = [pytest.mark.slow, pytest.mark.skipif(not PUBLIC.is_dir(),
                                                 reason="the public traces are not here (../shared/traces/public)")]

VLLM_PLAIN = re.compile(r"^execute_context_(\d+)\((\d+)[_\d]*\)_generation_(\d+)\((\d+)[_\d]*\)$")
VLLM_DETAILED = re.compile(r"^execute_\d+_context_(\d+)\(sq(\d+)sk(\d+)sqsq\d+sqsk\d+\)"
                           r"_generation_(\d+)\(sq(\d+)sk(\d+)sqsq\d+sqsk\d+\)$")
SGLANG_STEP = re.compile(r"^step\[(\w+) bs=(\d+)(?: toks=(\d+))?\]$")
CAPTURE = re.compile(r"^capture_(\d+)_(\w+)$")
LAUNCH = ("cuda_runtime", "cuda_driver")
GPU = ("kernel", "gpu_memcpy", "gpu_memset")

# name → (engine, steps: [(kind, batch, context or None)], captures: [(batch, mode)])
KINETO = {
    "AMD-AGI__TraceLens__b200_eager_trace.pt.trace.json.gz": ("vLLM", [("prefill", 1, None)], []),
    "AMD-AGI__TraceLens__inference_vllm_decode_full__graph_execution.json.gz": ("vLLM", [("decode", 32, 55086)], []),
    "AMD-AGI__TraceLens__inference_vllm_prefilldecode_piecewise__graph_execution.json.gz":
        ("vLLM", [("mixed", 46, 8430 + 34489)], []),
    "AMD-AGI__TraceLens__inference_sglang_decode__sglang_Qwen3-8B_decode.json.gz":
        ("SGLang", [("decode", 32, 32785)], []),
    "AMD-AGI__TraceLens__inference_vllm_decode_full__capture_traces__graph_capture_rank_0.1773709742341309550"
    ".pt.trace.json.gz": (None, [], [(32, "FULL")]),
    "AMD-AGI__TraceLens__inference_sglang_decode__capture_traces__bs_32_rank0.json.gz": (None, [], [(32, "DECODE")]),
}


def ns(value) -> int:
    return int(Decimal(str(value)) * 1000)


class Raw:
    """A Kineto trace's events as the oracle reads them."""

    def __init__(self, path):
        with gzip.open(path, "rt", encoding="utf-8") as fh:
            doc = json.load(fh, parse_float=Decimal)
        self.x = [e for e in doc["traceEvents"] if e.get("ph") == "X"]
        self.annotations = [e for e in self.x if e.get("cat") == "user_annotation"]

    def steps(self) -> list[dict]:
        """The forwards by the engines' rule: SGLang's step[…] where there are any, else vLLM's execute_…"""
        sg = [e for e in self.annotations if SGLANG_STEP.match(e["name"])]
        out = []
        for e in sg or self.annotations:
            name = e["name"]
            if (m := VLLM_DETAILED.match(name)) and not sg:
                c_req, c_sq, c_sk, g_req, g_sq, g_sk = map(int, m.groups())
                kind = "mixed" if c_sq and g_sq else "prefill" if c_sq else "decode" if g_sq == g_req else "verify"
                out.append({"event": e, "kind": kind, "batch": c_req + g_req, "context": c_sk + g_sk})
            elif (m := VLLM_PLAIN.match(name)) and not sg:
                c_req, c_tok, g_req, g_tok = map(int, m.groups())
                kind = "mixed" if c_tok and g_tok else "prefill" if c_tok else "decode"
                out.append({"event": e, "kind": kind, "batch": c_req + g_req, "context": None})
            elif m := SGLANG_STEP.match(name):
                around = [a for a in self.annotations if VLLM_DETAILED.match(a["name"]) and a["tid"] == e["tid"]
                          and ns(a["ts"]) <= ns(e["ts"]) and ns(e["ts"]) + ns(e["dur"]) <= ns(a["ts"]) + ns(a["dur"])]
                context = None
                if around:
                    g = VLLM_DETAILED.match(around[0]["name"]).groups()
                    context = int(g[2]) + int(g[5])
                out.append({"event": e, "kind": m.group(1).lower(), "batch": int(m.group(2)), "context": context})
        return out

    def work(self, e: dict) -> tuple[int | None, int | None]:
        """(GPU span, kernel sum) of the work launched inside annotation `e` on its thread (ns; None without any)."""
        start, end = ns(e["ts"]), ns(e["ts"]) + ns(e["dur"])
        calls = {c["args"]["correlation"] for c in self.x if c.get("cat") in LAUNCH and c["tid"] == e["tid"]
                 and c["pid"] == e["pid"] and start <= ns(c["ts"]) and ns(c["ts"]) + ns(c["dur"]) <= end}
        ops = [(ns(o["ts"]), ns(o["ts"]) + ns(o["dur"]), o["cat"]) for o in self.x
               if o.get("cat") in GPU and o.get("args", {}).get("correlation") in calls]
        if not ops:
            return None, None
        kernels = [b - a for a, b, cat in ops if cat == "kernel"]
        return max(b for _, b, _ in ops) - min(a for a, _, _ in ops), sum(kernels) if kernels else None


@pytest.mark.parametrize("name", sorted(KINETO))
def test_every_public_kineto_trace_is_read_and_its_steps_recognised(name):
    path = PUBLIC / name
    if not path.exists():
        pytest.skip(f"{name} is not among the public traces here")
    engine, want, captures = KINETO[name]
    raw = Raw(path)
    steps = raw.steps()
    assert [(s["kind"], s["batch"], s["context"]) for s in steps] == want  # the oracle agrees with the catalogue
    assert [parse_capture(e["name"]) for e in raw.annotations if CAPTURE.match(e["name"])] == captures
    with open_trace(path) as trace:
        found = vllm_steps.read(trace)
        if not want:  # a capture trace: no step, said so
            assert found is None
            assert "CUDA-graph capture trace" in (vllm_steps.missing_note(trace) or "")
            return
        assert found.engine == engine
    res = nsys_cc.analyze(path)
    (model,) = res.models
    kept = model.forwards[model.forwards["kept"]].sort_values("start_ns")
    assert len(kept) == len(steps)
    for row, step in zip(kept.itertuples(), steps):
        e = step["event"]
        assert row.start_ns == ns(e["ts"]) and row.end_ns == ns(e["ts"]) + ns(e["dur"])
        assert row.phase == row.step_kind == step["kind"]
        assert row.batch == step["batch"]
        assert (row.context != row.context) if step["context"] is None else row.context == step["context"]
        span, kernels = raw.work(e)
        assert row.gpu_span_ns == span
        assert row.kernel_sum_ns == kernels
    by_step = res.by_step
    assert by_step["steps"].sum() == len(steps) and set(by_step["kind"]) == {s["kind"] for s in steps}


NSYS = sorted(PUBLIC.glob("*.sqlite")) if PUBLIC.is_dir() else []


@pytest.mark.parametrize("path", NSYS, ids=[p.name for p in NSYS])
def test_no_public_nsys_export_holds_an_engines_steps(path):
    """None of the public exports is an engine's run: none of their NVTX ranges reads as an engine step."""
    from nsys_cc.analysis.forwards.step_names import parse

    with open_trace(path) as trace:
        assert vllm_steps.read(trace) is None
        if not trace.has_nvtx:
            return
        names = trace.nvtx_ranges(nesting=False)["name"].dropna().astype(str).unique()
    assert not [n for n in names if parse(n) is not None]
