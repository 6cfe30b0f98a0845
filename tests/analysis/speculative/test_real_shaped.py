"""Acceptance: what a user's vLLM GPU traces must give, on traces shaped like the real H100 ones of a Qwen3-32B-like
target and a small draft (`gpu_shaped_kineto.h100_vllm_trace`: NOT real runs — built from a schedule with known GPU
work, and with what the real traces hold and no CPU run writes: frames under a source checkout's or a container's
absolute path, CUDA-graph replays, a blocking device-to-host copy in the verify's sampling, asynchronous scheduling,
today's MoE kernel names).

Through the library and the CLI (JSON): the speculative trace is measured in place (the verify's GPU span per step
and the proposing per step within 3 % of the raw events), the token's c holds the sampling (within 1 %), no verdict,
plot or table row rests on launch time, each step's time runs to the end of its GPU work, phases are right with
`--range` on a Python frame, and MoE block-scaled GEMMs are GEMMs. The oracle reads the raw JSON written (json +
Decimal, a GPU op joined to its launching call by `args.correlation`, a call inside a range on its thread) and
computes every figure by hand."""

from __future__ import annotations

import gzip
import json
import re
import statistics
from decimal import Decimal
from pathlib import Path

import gpu_shaped_kineto as gsk
import pytest
from click.testing import CliRunner

import nsys_cc
from nsys_cc.analysis.speculative.runs import load_run, request_lives
from nsys_cc.cli import cli
from nsys_cc.contract import VLLM_STEP_RANGE

# every set is built (~2.5 s of CPU each, a 10 MB Kineto trace with its GPU work) for its first test: the module runs in
# `make test`; the loop keeps the same GPU logic on the smaller GPU-shaped fixture traces of tests/analysis/forwards/
pytestmark = pytest.mark.slow

GAMMA = 3
STEP_RE = re.compile(r"^execute_context_(\d+)\((\d+)\)_generation_(\d+)\((\d+)\)$")
RUNNER_FORWARD = "vllm/v1/worker/gpu_model_runner.py(3380): execute_model"  # a frame, asked for by module path
# (form, scheduling) of each built set: the traces (a source checkout, asynchronous scheduling), a container's
# frames (slow: `make test`), and the engine core's step frames of a run without asynchronous scheduling (where a
# step's time to the end of its GPU work and its CPU time differ step after step, not only around the prefill)
SETS = [("source checkout", "async"), ("container", "async"), ("source checkout", "sync")]


class Raw:
    """A built trace's raw events (times in ns, exact): runtime calls by correlation id, the GPU ops of each, and the
    annotations and frames."""

    def __init__(self, path: Path) -> None:
        with gzip.open(path, "rt", encoding="utf-8") as fh:
            doc = json.load(fh, parse_float=Decimal)
        self.calls: dict[int, tuple[int, int, int]] = {}
        self.ops: dict[int, list[tuple[int, int, str]]] = {}
        self.spans: list[tuple[str, str, int, int, int]] = []
        for e in doc["traceEvents"]:
            if e.get("ph") != "X":
                continue
            start = int(Decimal(e["ts"]) * 1000)
            end = start + int(Decimal(e["dur"]) * 1000)
            if e["cat"] == "cuda_runtime":
                self.calls[e["args"]["correlation"]] = (e["tid"], start, end)
            elif e["cat"] in ("kernel", "gpu_memcpy"):
                self.ops.setdefault(e["args"]["correlation"], []).append((start, end, e["name"]))
            elif e["cat"] in ("user_annotation", "python_function"):
                self.spans.append((e["cat"], e["name"], e["tid"], start, end))
        self.spans.sort(key=lambda s: s[3])

    def launched(self, tid: int, start: int, end: int) -> list[tuple[int, int, str]]:
        """The GPU ops whose launching call lies inside [start, end] on thread `tid`."""
        return [o for c, (t, s, e) in self.calls.items() if t == tid and start <= s and e <= end
                for o in self.ops.get(c, [])]

    def frames(self, suffix: str) -> list[tuple[str, str, int, int, int]]:
        return [s for s in self.spans if s[0] == "python_function" and s[1].endswith(suffix)]

    def steps(self) -> list[dict]:
        """Every step annotation: its kind by its name, batch, times, thread and the GPU ops launched inside it."""
        out = []
        for cat, name, tid, start, end in self.spans:
            m = STEP_RE.match(name) if cat == "user_annotation" else None
            if m is None:
                continue
            ctx, _, gen, gen_tok = map(int, m.groups())
            kind = ("prefill" if ctx and not gen else "empty" if not gen else
                    "verify" if gen_tok > gen else "decode")
            out.append({"kind": kind, "batch": ctx + gen, "start": start, "end": end, "tid": tid,
                        "ops": self.launched(tid, start, end)})
        return out


def span(ops) -> float:
    """The GPU span of some ops, ms."""
    return (max(o[1] for o in ops) - min(o[0] for o in ops)) / 1e6


def windows(raw: Raw, scheduling: str) -> list[dict]:
    """The steps as the user waits for them, by hand: each step's window (the engine core's step frame without
    asynchronous scheduling; else from its annotation to the next one's, the last closing none), the annotation in
    it, the GPU ops launched in the window and its time to the end of its GPU work — from its start, or from the end of
    the steps before it where their GPU work still ran then, to the later of its window's end and its GPU work's."""
    forwards = [s for s in raw.steps() if s["ops"]]  # a step that launched nothing is no step
    if scheduling == "sync":
        wins = [(f[3], f[4], f[2]) for f in raw.frames("vllm/v1/engine/core.py(391): step")]
    else:
        wins = [(a["start"], b["start"], a["tid"]) for a, b in zip(forwards, forwards[1:])]
    out, reached = [], None
    for start, end, tid in wins:
        inside = [f for f in forwards if start <= f["start"] < end]
        if len(inside) != 1:
            continue
        ops = raw.launched(tid, start, end)
        reach = max(end, max(o[1] for o in ops))
        begin = start if reached is None else max(start, min(reached, reach))
        reached = reach if reached is None else max(reached, reach)
        out.append({**inside[0], "window": (start, end), "gpu_ms": (reach - begin) / 1e6, "cpu_ms": (end - start) / 1e6,
                    "propose": [f for f in raw.frames("vllm/v1/spec_decode/eagle.py(237): propose")
                                if start <= f[3] < end]})
    return out


def tokens(raw: Raw, kind: str = "decode") -> list[tuple[float, float]]:
    """Per step of `kind`: (its forward's GPU span, its sampling's: the runner's sample_tokens frame after it, less
    the frame in it that proposes the next drafts), ms."""
    samples = raw.frames("vllm/v1/worker/gpu_model_runner.py(4303): sample_tokens")
    proposing = raw.frames("vllm/v1/worker/gpu_model_runner.py(2410): propose_draft_token_ids")
    out = []
    for s in raw.steps():
        if s["kind"] == kind:
            frame = next(f for f in samples if f[3] >= s["end"])
            cut = [p[3:] for p in proposing if frame[3] <= p[3] and p[4] <= frame[4]]
            ops = [o for o in raw.launched(frame[2], frame[3], frame[4])
                   if not any(a <= c <= b for a, b in cut for c in [_call_start(raw, o)])]
            out.append((span(s["ops"]), span(ops)))
    return out


def _call_start(raw: Raw, op: tuple[int, int, str]) -> int:
    """When the call that launched `op` started."""
    return next(raw.calls[c][1] for c, ops in raw.ops.items() if op in ops)


@pytest.fixture(scope="module", params=[pytest.param(p, id="-".join(p).replace(" ", "-"),
                                                     marks=[pytest.mark.slow] if p[0] == "container" else [])
                                        for p in SETS])
def built(request, tmp_path_factory):
    form, scheduling = request.param
    out = tmp_path_factory.mktemp("h100")
    runs = {"target": gsk.h100_vllm_trace(out / "qwen3-32b.pt.trace.json.gz", "target", form=form,
                                          scheduling=scheduling),
            "draft": gsk.h100_vllm_trace(out / "qwen3-1.7b.pt.trace.json.gz", "draft", form=form,
                                         scheduling=scheduling),
            "spec": gsk.h100_vllm_trace(out / "qwen3-1.7b.spec-g3.pt.trace.json.gz", "spec", form=form,
                                        scheduling=scheduling, gamma=GAMMA)}
    paths = [str(runs[k].path) for k in ("target", "draft", "spec")]
    result = nsys_cc.analyze(paths[0], paths[1:], acceptance=[0.6])
    res = CliRunner().invoke(cli, ["analyze", *paths, "--acceptance", "0.6", "--format", "json"],
                             env={"NSYS_CC_QUIET": "1"})
    assert res.exit_code == 0, res.output
    raw = {k: Raw(r.path) for k, r in runs.items()}
    return {"form": form, "scheduling": scheduling, "runs": runs, "paths": paths, "result": result,
            "json": json.loads(res.stdout), "raw": raw}


@pytest.mark.slow
def test_the_frames_are_named_as_the_install_names_them(built):
    prefix = gsk.VLLM_PREFIXES[built["form"]]
    frames = [s[1] for s in built["raw"]["spec"].spans if s[0] == "python_function"]
    assert frames and all(f.startswith(prefix + "vllm/v1/") for f in frames)


@pytest.mark.slow
def test_the_speculative_trace_is_measured_in_place(built):
    raw, scheduling = built["raw"]["spec"], built["scheduling"]
    steps = [s for s in windows(raw, scheduling) if s["kind"] == "verify"]
    assert len(steps) >= 4
    verify = statistics.median(span(s["ops"]) for s in steps)
    propose = statistics.median(span(raw.launched(*(lambda f: (f[2], f[3], f[4]))(s["propose"][0])))
                                for s in steps)
    propose_cpu = statistics.median((s["propose"][0][4] - s["propose"][0][3]) / 1e6 for s in steps)
    for entry in (built["json"]["speculative"][0], built["result"].speculative.table.iloc[0].to_dict()):
        assert entry["metric"] == "gpu_span" and entry["steps"] == len(steps)
        assert entry["verify_ms"] == pytest.approx(verify, rel=0.03)
        assert entry["draft_step_ms"] == pytest.approx(propose, rel=0.03)  # the proposing per step
        assert entry["draft_forward_ms"] == pytest.approx(propose / GAMMA, rel=0.03)  # per drafted token
    wall = built["json"]["speculative"][0]["by_metric"]["wall"]  # the proposing's launch time, beside
    assert wall["draft_forward_ms"] * GAMMA == pytest.approx(propose_cpu, rel=0.03)
    assert propose_cpu < propose / 3  # the proposer returns long before its drafts have run on the GPU
    # the first proposing, over the prompt, kept apart: on the headline first, its CPU time named launch time
    first = next(s for s in windows(raw, scheduling) if s["kind"] == "prefill")["propose"][0]
    gpu, cpu = span(raw.launched(first[2], first[3], first[4])), (first[4] - first[3]) / 1e6
    said = [n for n in built["result"].speculative.notes if "the proposing after the prefill step" in n]
    assert len(said) == 1 and f"took {gpu:.3f} ms on gpu_span, " in said[0]
    assert said[0].index("on gpu_span") < said[0].index(f"{cpu:.3f} ms on launch time") and " on wall" not in said[0]


@pytest.mark.slow
def test_the_token_c_holds_the_sampling(built):
    raw = built["raw"]
    target, draft = tokens(raw["target"]), tokens(raw["draft"])
    c_token = (statistics.median(f + s for f, s in draft) / statistics.median(f + s for f, s in target))
    c_forward = statistics.median(f for f, _ in draft) / statistics.median(f for f, _ in target)
    assert abs(c_token / c_forward - 1) > 0.02  # so that a c without the sampling is caught
    rows = [r for r in built["json"]["coefficients"] if r["phase"] == "decode" and r["metric"] == "gpu_span"]
    coef = built["result"].coefficients.set_index(["phase", "metric"]).loc[("decode", "gpu_span")]
    for c in (rows[0]["c"], coef["c"]):
        assert c == pytest.approx(c_token, rel=0.01)
    assert rows[0]["basis"] == "token"
    assert not any("stopped before" in n or "no Python frames" in n for n in built["json"]["notes"])
    # the verify's sampling on the GPU is the sampling kernels, not the blocking copy's wait (its launch time)
    verify = tokens(raw["spec"], "verify")
    by = built["json"]["speculative"][0]["by_metric"]
    assert by["gpu_span"]["verify_sample_ms"] == pytest.approx(statistics.median(s for _, s in verify), rel=0.03)
    assert by["wall"]["verify_sample_ms"] > 10 * by["gpu_span"]["verify_sample_ms"]


@pytest.mark.slow
def test_each_step_runs_to_the_end_of_its_gpu_work_and_the_speedup_rests_on_it(built):
    raw, scheduling = built["raw"], built["scheduling"]
    plain = [s for s in windows(raw["target"], scheduling) if s["kind"] == "decode"]
    verify = [s for s in windows(raw["spec"], scheduling) if s["kind"] == "verify"]
    d_gpu, t_gpu = (statistics.median(s["gpu_ms"] for s in x) for x in (plain, verify))
    d_cpu, t_cpu = (statistics.median(s["cpu_ms"] for s in x) for x in (plain, verify))
    for entry in (built["json"]["speculative"][0], built["result"].speculative.table.iloc[0].to_dict()):
        assert entry["decode_step_ms"] == pytest.approx(d_gpu, rel=1e-6)
        assert entry["step_ms"] == pytest.approx(t_gpu, rel=1e-6)
        assert entry["measured_speedup"] == pytest.approx(entry["tokens_per_step"] * d_gpu / t_gpu, rel=1e-6)
    # the step's CPU time stays beside, as its launch time
    wall = built["json"]["speculative"][0]["by_metric"]["wall"]
    assert wall["step_ms"] == pytest.approx(t_cpu, rel=1e-6)
    assert wall["decode_step_ms"] == pytest.approx(d_cpu, rel=1e-6)
    if scheduling == "sync":  # the drafts run past the step frame: a CPU step is short of what the user waits for
        assert t_gpu > 1.02 * t_cpu
    # every step of both runs, each kind: its time to the end of its GPU work and its CPU time (launch time)
    steps = built["result"].speculative.steps
    for run, trace in (("(plain target)", "target"), ("qwen3-1.7b.spec-g3", "spec")):
        mine = steps[steps["run"] == run].set_index("start_ns")
        want = {s["window"][0]: s for s in windows(raw[trace], scheduling)}
        assert sorted(mine.index) == sorted(want)
        for start, s in want.items():
            assert mine.loc[start, "step_gpu_ms"] == pytest.approx(s["gpu_ms"], rel=1e-9)
            assert mine.loc[start, "step_ms"] == pytest.approx(s["cpu_ms"], rel=1e-9)
    first = min(want)  # the speculative prefill: its proposing over the prompt runs on long after its CPU range
    assert want[first]["gpu_ms"] > 1.05 * want[first]["cpu_ms"]


def test_tokens_per_step_come_from_every_request_to_its_end(built):
    run, raw = built["runs"]["spec"], built["raw"]["spec"]
    batches = [s["batch"] for s in raw.steps() if s["kind"] == "verify"]
    lives, n = [], 0  # by hand: a request leaves after the last verify step of a batch it was in
    for i, b in enumerate(batches):
        n += 1
        after = batches[i + 1] if i + 1 < len(batches) else 0
        lives += [n] * (b - after)
    truth = sorted(sum(1 for s in run.steps if r in s.taken) for r in range(run.batch))
    assert sorted(lives) == truth  # the oracle reads what the builder made
    table = load_run(built["paths"][2], "qwen3-1.7b.spec-g3", "qwen3-1.7b", VLLM_STEP_RANGE).steps
    found, _ = request_lives(table.forwards)
    assert sorted(found) == truth  # the last verify step closes no step, yet ends its requests' lives
    said = [n for n in built["json"]["notes"] + list(built["result"].speculative.notes) if "verify steps, each" in n]
    assert said and all(f"in {min(truth)}–{max(truth)} verify steps" in n for n in said)


def test_no_verdict_plot_or_table_row_rests_on_launch_time(built):
    doc, result = built["json"], built["result"]
    assert doc["headline_metric"] == doc["speculative_metric"] == "gpu_span"
    c = {r["draft"]: r["c"] for r in doc["coefficients"] if r["phase"] == "decode" and r["metric"] == "gpu_span"}
    for verdict in doc["speedup"]:
        assert verdict["metric"] == "gpu_span" and verdict["c"] == pytest.approx(c[verdict["draft"]], rel=1e-9)
        assert "launch" not in verdict["verdict"] and "wall" not in verdict["verdict"]
    marks = result.speedup_marks.set_index("draft")  # what the plots draw
    assert marks.loc["qwen3-1.7b", "c"] == pytest.approx(c["qwen3-1.7b"], rel=1e-9)
    entry = doc["speculative"][0]
    on_gpu, on_cpu = entry["by_metric"]["gpu_span"], entry["by_metric"]["wall"]
    for figure in ("c_in_place", "verify_ms", "draft_forward_ms", "c_standalone"):
        assert entry[figure] == on_gpu[figure] != on_cpu[figure]
    table = result.speculative.table
    assert set(table["metric"]) == {"gpu_span"}
    from nsys_cc.report import speculative_plots, speculative_text

    shown = speculative_text.measured_table(result.speculative)
    assert shown["Metric"].tolist() == ["GPU span", "launch time"]  # the headline's row first, the CPU time named so
    fig = speculative_plots.waterfall(result.speculative)
    assert "forwards on gpu_span" in fig._suptitle.get_text()
    dec = result.speculative.decomposition
    end = dec[(dec["metric"] == "gpu_span") & (dec["part"] == "measured")]["after"].iloc[0]
    assert end == pytest.approx(entry["measured_speedup"], rel=1e-9)


@pytest.mark.slow
def test_phases_are_right_with_a_frame_as_the_range(built):
    raw = built["raw"]["target"]
    steps = raw.steps()
    frames = raw.frames(RUNNER_FORWARD)
    want = []
    for f in frames:  # the step annotation around each frame names its phase; a step without GPU work names none
        s = next(s for s in steps if s["start"] <= f[3] and f[4] <= s["end"])
        want.append("all" if not s["ops"] else s["kind"])
    assert want.count("decode") == 11 and want.count("all") == 1
    result = nsys_cc.analyze(built["paths"][0], built["paths"][1:2], range_name=RUNNER_FORWARD)
    target = result.models[0]
    assert target.phase_rule.rule == "step names"
    got = target.forwards.sort_values("start_ns")["phase"].astype(str).tolist()
    assert got == want
    res = CliRunner().invoke(cli, ["analyze", *built["paths"][:2], "--range", RUNNER_FORWARD, "--format", "json"],
                             env={"NSYS_CC_QUIET": "1"})
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    model = doc["models"][0]
    assert model["phase_rule"] == "step names" and model["phase_confidence"] == "exact"
    assert {p: v["count"] for p, v in model["phases"].items()} == {
        "all": len(want), **{k: want.count(k) for k in ("prefill", "decode")}}


def test_moe_block_scaled_gemms_are_gemms(built):
    raw = built["raw"]["target"]
    decode = [s for s in raw.steps() if s["kind"] == "decode"]
    gemm = statistics.median(sum(o[1] - o[0] for o in s["ops"] if o[2].startswith(("bmm_", "nvjet_")))
                             for s in decode) / 1e6
    rows = [r for r in built["json"]["kernel_diff"] if r["draft"] == "qwen3-1.7b" and r["phase"] == "decode"]
    category = {r["kernel"]: r["category"] for r in rows}
    assert category[gsk.MOE_UP] == category[gsk.MOE_DOWN] == "GEMM"
    assert category[gsk.QUANT] == "quantisation" and category[gsk.ROUTING] == "MoE routing"
    assert sum(r["a_ms_per_range"] for r in rows if r["category"] == "GEMM") == pytest.approx(gemm, rel=0.01)
