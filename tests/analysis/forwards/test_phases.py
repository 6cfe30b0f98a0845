"""Phase rules (`analysis.forwards.phases`) and kernel categories (`analysis.forwards.kernel_tables`), checked against
values worked out by hand."""

import gzip
import json
import re
from decimal import Decimal

import gpu_shaped_kineto as gsk
import numpy as np
import pandas as pd
import pytest

import nsys_cc
from conftest import FIXTURES
from nsys_cc.analysis.forwards import kernel_tables as kernels, phases


def test_best_split_finds_the_prefill_group():
    times = np.array([10.0, 1.0, 1.1, 0.9, 11.0, 1.0, 1.05, 10.5])
    ratio, n_low = phases.best_split(times)
    assert n_low == 5
    assert ratio == pytest.approx(10.0 / 1.1)


def test_best_split_unimodal_has_small_gap():
    ratio, _ = phases.best_split(np.linspace(1.0, 1.2, 20))
    assert ratio < 1.5


def _forwards(starts, payload=None, wall=None):
    n = len(starts)
    return pd.DataFrame({
        "start_ns": np.asarray(starts, dtype=np.int64),
        "payload": np.full(n, np.nan) if payload is None else np.asarray(payload, dtype=float),
        "wall_ns": np.ones(n) if wall is None else np.asarray(wall, dtype=float),
    })


def _marks(rows):
    return pd.DataFrame(rows, columns=["name", "start_ns", "end_ns", "payload"])


def test_warmup_from_markers_and_from_skip():
    fw = _forwards([10, 20, 110, 120, 210, 220])
    marks = _marks([("nsys_cc:warmup", 0, 50, 1), ("nsys_cc:iteration", 100, 150, 1),
                    ("nsys_cc:iteration", 200, 250, 1)])
    mask, note = phases.warmup_mask(fw, marks, None)
    assert mask.tolist() == [True, True, False, False, False, False]
    assert "dropped 2 of 6" in note
    mask, note = phases.warmup_mask(fw, marks, 3)
    assert mask.tolist() == [True, True, True, False, False, False]
    assert "skip_ranges=3" in note and "--" not in note  # the library names its parameter, not a flag
    mask, note = phases.warmup_mask(fw, _marks([]), None)
    assert not mask.any() and "kept all 6" in note


def test_phase_by_payload_uses_iteration_batch():
    # batch 2: prefill schedules 2×16 tokens, decode 2 tokens
    fw = _forwards([10, 20, 110, 120], payload=[32, 2, 32, 2])
    marks = _marks([("nsys_cc:warmup", 0, 50, 2), ("nsys_cc:iteration", 100, 150, 2)])
    phase, rule = phases.assign_phases(fw, marks, None, np.array([False, False, True, True]))
    assert phase.tolist() == ["prefill", "decode", "prefill", "decode"]
    assert rule.rule == "payload" and "iteration" in rule.detail


def test_phase_by_payload_without_markers_takes_smallest_payload_as_batch():
    fw = _forwards([1, 2, 3, 4, 5, 6], payload=[512, 4, 4, 512, 4, 4])
    phase, rule = phases.assign_phases(fw, _marks([]), None, np.ones(6, bool))
    assert phase.tolist() == ["prefill", "decode", "decode", "prefill", "decode", "decode"]
    assert "smallest payload (4)" in rule.detail


def test_phase_by_output_len_counts_from_first_range():
    fw = _forwards(range(9))
    phase, rule = phases.assign_phases(fw, _marks([]), 3, np.arange(9) >= 3)
    assert phase.tolist() == ["prefill", "decode", "decode"] * 3
    assert rule.rule == "output-len"


def test_phase_inferred_and_unknown():
    fw = _forwards(range(6), wall=[9e6, 1e6, 9.5e6, 1.1e6, 8.8e6, 0.9e6])
    phase, rule = phases.assign_phases(fw, _marks([]), None, np.ones(6, bool))
    assert phase.tolist() == ["prefill", "decode"] * 3
    assert rule.rule == "inferred" and rule.confidence == "high"
    fw = _forwards(range(6), wall=[1.0, 1.1, 1.05, 1.2, 1.0, 1.1])
    phase, rule = phases.assign_phases(fw, _marks([]), None, np.ones(6, bool))
    assert rule.rule == "unknown" and all(p == "all" for p in phase)


@pytest.mark.parametrize("name,kind,expected", [
    # kernel names seen in the public GPU traces
    ("ampere_sgemm_128x64_nn", "kernel", "GEMM"),
    ("sm80_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize64x256x8", "kernel", "GEMM"),
    ("nvjet_hsh_128x256_64x4_2x1_v_bz_coopA_NTN", "kernel", "GEMM"),
    ("flash_fwd_splitkv_kernel", "kernel", "attention"),
    ("paged_attention_v2_kernel", "kernel", "attention"),
    ("rms_norm_kernel", "kernel", "normalisation"),
    ("vectorized_elementwise_kernel", "kernel", "activation/elementwise"),
    ("act_and_mul_kernel", "kernel", "activation/elementwise"),
    ("rotary_embedding_kernel", "kernel", "embedding/sampling"),
    ("vectorized_gather_kernel", "kernel", "embedding/sampling"),
    ("ncclDevKernel_AllReduce_Sum_f32_RING_LL", "kernel", "communication"),
    ("fft2d_r2c_32x32", "kernel", "convolution"),  # cuDNN's FFT convolution
    ("whatever", "memcpy", "memcpy/memset"),
    ("whatever", "graph", "CUDA graph"),
])
def test_categorise(name, kind, expected):
    assert kernels.categorise(name, kind) == expected


def test_breakdown_averages_per_forward():
    ops = pd.DataFrame({
        "kind": ["kernel"] * 5,
        "name": ["gemm_a", "gemm_a", "gemm_a", "rms_norm", "rms_norm"],
        "duration_ns": [1000, 1000, 1000, 500, 500],
    })
    table = kernels.breakdown(ops, n_forwards=2)
    gemm = table.set_index("name").loc["gemm_a"]
    assert gemm["calls_per_forward"] == 1.5
    assert gemm["time_per_forward_ms"] == pytest.approx(1500 / 1e6)
    assert gemm["share"] == pytest.approx(3000 / 4000)
    cats = kernels.by_category(table).set_index("category")
    assert cats.loc["normalisation", "time_per_forward_ms"] == pytest.approx(500 / 1e6)


def test_forwards_outside_every_iteration_are_dropped_when_iterations_are_marked():
    # vLLM's own warm-up forwards (compile_or_warm_up_model) at 1 and 2, before the benchmark's first generate call;
    # one more between two iterations (300), and the benchmark's forwards inside warm-up and iterations.
    fw = _forwards([1, 2, 10, 20, 110, 120, 300, 410])
    marks = _marks([("nsys_cc:warmup", 0 + 5, 50, 1), ("nsys_cc:iteration", 100, 150, 1),
                    ("nsys_cc:iteration", 400, 450, 1)])
    mask, note = phases.warmup_mask(fw, marks, None)
    assert mask.tolist() == [True, True, True, True, False, False, True, False]
    assert "dropped 5 of 8" in note and "2 that ran inside" in note and "3 that ran outside every" in note
    # Without warm-up ranges, iteration ranges alone decide.
    mask, note = phases.warmup_mask(fw, _marks([("nsys_cc:iteration", 100, 150, 1)]), None)
    assert mask.tolist() == [True, True, True, True, False, False, True, True]
    assert "dropped 6 of 8" in note and "inside the trace's" not in note
    # Every forward inside an iteration: nothing dropped, and the note says why.
    mask, note = phases.warmup_mask(_forwards([110, 120]), _marks([("nsys_cc:iteration", 100, 150, 1)]), None)
    assert not mask.any() and "kept all 2" in note


# ---- phases from what the trace says: the engine's step annotations (PyTorch-profiler traces) ----------------------

TORCH_TARGET = FIXTURES / "torch" / "tiny-llama-target.pt.trace.json.gz"
RUNNER = re.compile(r"gpu_model_runner\.py\(\d+\): execute_model$")
STEP_NAME = re.compile(r"^execute_context_(\d+)\((\d+)\)_generation_(\d+)\((\d+)\)$")


def _runner_frames(path) -> list[tuple[str, int, int, str]]:
    """(frame name, start ns, end ns, the kind its enclosing step annotation names) from the raw JSON, by start."""
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as fh:
        doc = json.load(fh, parse_float=Decimal)
    x = [e for e in doc["traceEvents"] if e.get("ph") == "X"]

    def ns(v) -> int:
        return int(Decimal(str(v)) * 1000)

    steps = [(ns(e["ts"]), ns(e["ts"]) + ns(e["dur"]), e["name"]) for e in x if e.get("cat") == "user_annotation"]
    out = []
    for e in x:
        if e.get("cat") == "python_function" and RUNNER.search(e["name"]):
            s, t = ns(e["ts"]), ns(e["ts"]) + ns(e["dur"])
            (name,) = [n for a, b, n in steps if a <= s and t <= b]
            ctx_req, ctx_tok, gen_req, gen_tok = map(int, STEP_NAME.match(name).groups())
            out.append((e["name"], s, t, "prefill" if ctx_tok else "decode"))
    return sorted(out, key=lambda f: f[1])


def _frame_plan(idle_start: int):
    """The runner's `execute_model` frames launch GPU work (a kernel 1.4× their wall in four launches), except the
    one starting at `idle_start`, which launches none."""
    steady = gsk.steady(1.4)

    def plan(rng):
        if not RUNNER.search(rng.name) or rng.start == idle_start:
            return []
        return steady(gsk.Range(rng.index, gsk.STEP, rng.start, rng.end, rng.pid, rng.tid))

    return plan


@pytest.mark.slow
def test_a_frame_range_takes_the_phase_of_the_step_annotation_around_it(tmp_path):
    """`--range` on the runner's Python frame: each forward's phase is its step's (the annotation around it), never
    inferred; the step that launched no GPU work is no phase (its annotation is dropped, its frame named by none)."""
    frames = _runner_frames(TORCH_TARGET)
    idle = frames[-1]
    made = gsk.add_gpu_work(TORCH_TARGET, tmp_path / "t.pt.trace.json.gz", _frame_plan(idle[1]),
                            frames=lambda n: bool(RUNNER.search(n)))
    res = nsys_cc.analyze(made.path, range_name=frames[0][0])
    (model,) = res.models
    assert model.phase_rule.rule == "step names" and model.phase_rule.confidence == "exact"
    kept = model.forwards[model.forwards["kept"]].sort_values("start_ns")
    want = [f[3] if f is not idle else "all" for f in frames]
    assert kept["phase"].tolist() == want
    assert model.phase_count("prefill") == 1 and model.phase_count("decode") == len(frames) - 2
    assert "1 forward(s) lie in no kept step" in model.phase_rule.detail


@pytest.mark.slow
def test_a_range_named_as_a_step_is_never_reinferred(tmp_path):
    """`--range "execute_context_0(0)_generation_1(1)"`: the name says decode, whatever the GPU times say."""
    made = gsk.add_gpu_work(TORCH_TARGET, tmp_path / "t.pt.trace.json.gz", gsk.steady(3.0))
    res = nsys_cc.analyze(made.path, range_name="execute_context_0(0)_generation_1(1)")
    (model,) = res.models
    assert model.phase_rule.rule == "step names"
    kept = model.forwards[model.forwards["kept"]]
    assert set(kept["phase"]) == {"decode"} and len(kept) == 5


@pytest.mark.slow
def test_without_step_annotations_a_step_without_gpu_work_is_no_evidence(tmp_path):
    """Nothing names the phase (the annotations renamed away): inferred from the GPU times of the forwards that
    launched GPU work only; the one that launched none is no phase."""
    src = tmp_path / "bare.pt.trace.json"
    with gzip.open(TORCH_TARGET, "rt", encoding="utf-8") as fh:
        doc = json.loads(fh.read(), parse_float=gsk._Raw)
    for e in doc["traceEvents"]:
        if e.get("cat") == "user_annotation":
            e["name"] = "engine step"
    src.write_text(gsk._dumps(doc))
    frames = _runner_frames(TORCH_TARGET)
    made = gsk.add_gpu_work(src, tmp_path / "t.pt.trace.json.gz", _frame_plan(frames[-1][1]),
                            frames=lambda n: bool(RUNNER.search(n)))
    res = nsys_cc.analyze(made.path, range_name=frames[0][0])
    (model,) = res.models
    kept = model.forwards[model.forwards["kept"]].sort_values("start_ns")
    assert kept["phase"].tolist()[-1] == "all"
    assert "1 forward(s) launched no GPU work: no phase" in model.phase_rule.detail
    spans = [w.span_ns for w in made.work if w.ops]
    ratio = max(spans) / sorted(spans)[-2]  # the prefill's frame against the slowest decode's
    assert model.phase_rule.confidence == ("high" if ratio >= 3 else "medium" if ratio >= 1.5 else "none")
