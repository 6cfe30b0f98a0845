"""The price of speculation at K = 0 (`analysis.tune.k0`), end to end on the CPU: a tune design with its K = 0 engine
profiled for real (vLLM's CPU build under nsys, through `nsys_cc.launch` as a tune round profiles), then read.

Oracles: the trace's raw NVTX rows read with SQL (the K = 0 engine's draft forwards per step and the tokens of its
target forwards), the benchmark's arithmetic for Σ context (a step of a batch of B prompts of L tokens, after g tokens
generated per sequence, reads B × (L + g) tokens of K/V), and vLLM's own validator for the schedule."""

from __future__ import annotations

import sqlite3

import numpy as np
import pytest

from nsys_cc.analysis.tune import k0
from nsys_cc.analysis.tune.keys import CellKey
from nsys_cc.errors import InputError

TARGET, DRAFT = "tiny-llama-target", "tiny-llama-draft-xs"
CELLS = {CellKey(1, 32): [2], CellKey(2, 64): [2]}  # 2 batch sizes, 2 prompt lengths
OUTPUT_LEN, WARMUP, ITERS = 6, 1, 3


def test_cells_pair_their_plain_target_with_their_k0_engine_and_nothing_else():
    labels = ["bs1-in32.t", "bs1-in32.d.spec-g2", "bs1-in32.d.k0.spec-g2", "bs1-in32.d.schedule.spec-g2",
              "bs2-in64.t", "bs2-in64.d.spec-g2", "bs4.t", "bs4.d.k0.spec-g3", "bs8.d.k0.spec-g3", "t"]
    assert k0.design_pairs(labels) == {CellKey(1, 32): ("bs1-in32.t", "bs1-in32.d.k0.spec-g2"),
                                       CellKey(4): ("bs4.t", "bs4.d.k0.spec-g3")}


def test_a_directory_that_is_no_profile_is_refused_in_one_line(tmp_path):
    with pytest.raises(InputError, match="not a profile directory"):
        k0.overhead(tmp_path)


@pytest.fixture(scope="module")
def design(tmp_path_factory):
    from nsys_cc.launch import interleaved, orchestrator
    from nsys_cc.request import ProfileRequest

    out = tmp_path_factory.mktemp("k0") / "round-1"
    request = ProfileRequest(TARGET, (DRAFT,), out, output_len=OUTPUT_LEN, warmup_iters=WARMUP, iters=ITERS,
                             repeat=1, replicas=1, device="cpu", trace="nvtx", timeout=0)
    engines = interleaved.design_engines(TARGET, DRAFT, CELLS, request.options, False, k0=True)
    done = orchestrator.run(interleaved.Interleaved(request, engines, gpu=False))
    assert all(r.ok for r in done.interleaved), [r.reason for r in done.interleaved]
    return out, engines


def _rows(sqlite, *, threads: bool = False) -> list[tuple]:
    """The trace's push/pop ranges by start: (name, start, end, payload), or (name, start, end, thread, payload)."""
    with sqlite3.connect(f"file:{sqlite}?mode=ro", uri=True) as conn:
        return conn.execute(
            f"SELECT coalesce(e.text, s.value), e.start, e.\"end\", {'e.globalTid, ' if threads else ''}e.int64Value "
            "FROM NVTX_EVENTS e LEFT JOIN StringIds s ON s.id = e.textId WHERE e.eventType = 59 ORDER BY e.start"
        ).fetchall()


@pytest.mark.vllm
@pytest.mark.nsys
def test_k0_costs_more_than_plain_decoding_and_drafts_nothing(design):
    out, engines = design
    table = k0.overhead(out)
    assert [(r.batch_size, r.input_len) for r in table.itertuples()] == [(1, 32), (2, 64)]
    assert (table["metric"] == "wall").all()  # a CPU-only trace
    assert (table["gamma"] == 2).all()
    assert (table["overhead_ms"] > 0).all(), table[["batch_size", "plain_step_ms", "k0_step_ms"]]
    np.testing.assert_allclose(table["overhead_ms"], table["k0_step_ms"] - table["plain_step_ms"], rtol=1e-9)
    assert (table["draft_forwards_per_step"] == 1).all()
    assert (table["tokens_per_sequence"] == 1).all() and (table["plain_tokens_per_sequence"] == 1).all()
    assert (table["draft_tokens_per_sequence"] == 2).all()  # V1's catch-up: 2 tokens a sequence
    # The raw trace says the same: inside the K = 0 engine's windows, every target forward after a prefill verifies
    # one token per sequence and is followed by exactly one draft forward of 2 tokens per sequence before the next.
    rows = _rows(out / "run-1" / "trace.sqlite")
    for key in CELLS:
        label = f"{key.name}.{DRAFT}.k0.spec-g2"
        windows = [(s, e) for n, s, e, _ in rows if n == f"nsys_cc:engine {label}"]
        assert len(windows) == WARMUP + ITERS
        for s, e in windows[WARMUP:]:
            inside = [(n, p) for n, start, _, p in rows if s <= start <= e
                      and n in ("model_executable()", "draft_model_executable()")]
            decodes = [i for i, (n, p) in enumerate(inside) if n == "model_executable()" and p == key.batch_size]
            assert len(decodes) == OUTPUT_LEN - 1
            for i in decodes[:-1]:
                assert inside[i + 1] == ("draft_model_executable()", 2 * key.batch_size)
                assert inside[i + 2][0] == "model_executable()"


def _known_step_ms(rows, ends: dict, label: str, batch: int) -> tuple[list[float], list[float]]:
    """The measured decode steps of engine `label` from the raw rows, in ms: (their time to the end of their GPU work
    as `steps.STEP_GPU` defines it — from the step's start, or from the end of GPU work of the engine's earlier steps
    still running then, to the end of the GPU work its forwards launched or of its CPU range where later —, their CPU
    time). `ends`: the known end of the GPU work of each forward, by (start, thread)."""
    windows = [(s, e) for n, s, e, _, _ in rows if n == f"nsys_cc:engine {label}"]
    gpu_ms: list[float] = []
    cpu_ms: list[float] = []
    reach = None
    for i, (ws, we) in enumerate(windows):
        for s, e, t in [(s, e, t) for n, s, e, t, _ in rows if n == "nsys_cc:step" and ws <= s <= we]:
            inside = [(n, p, ends.get((fs, ft))) for n, fs, fe, ft, p in rows if ft == t and s <= fs and fe <= e
                      and n in ("model_executable()", "draft_model_executable()")]
            work_end = max((g for _, _, g in inside if g is not None), default=None)
            begin = s if reach is None else max(s, reach)
            target = [p for n, p, _ in inside if n == "model_executable()"]
            if i >= WARMUP and target and target[0] == batch:  # a measured decode step: one token per sequence
                gpu_ms.append((max(e, work_end if work_end is not None else e) - begin) / 1e6)
                cpu_ms.append((e - s) / 1e6)
            if work_end is not None:
                reach = work_end if reach is None else max(reach, work_end)
    return gpu_ms, cpu_ms


@pytest.mark.vllm
@pytest.mark.nsys
def test_on_a_gpu_trace_k0_is_priced_on_each_steps_time_to_the_end_of_its_gpu_work(design, tmp_path):
    """A GPU-shaped copy of the design's run (every forward launches 4× its wall time of kernels, so the GPU work
    runs past the steps and queues into the next): both engines' decode steps are timed to the end of their GPU work
    (the GPU span), never by their CPU time, which on a GPU trace is launch time. Oracle: the known work written
    (`gpu_shaped`) and the raw NVTX rows."""
    import shutil

    import gpu_shaped as gs

    out, _ = design
    copy = tmp_path / "round-1"
    shutil.copytree(out, copy)
    trace = copy / "run-1" / "trace.sqlite"
    made = gs.add_gpu_work(trace, trace.with_name("gpu.sqlite"), gs.steady(4.0))
    made.path.replace(trace)
    table = k0.overhead(copy).set_index("batch_size")
    assert (table["metric"] == "gpu_span").all()
    rows = _rows(trace, threads=True)
    ends = {(w.range.start, w.range.global_tid): w.gpu_end for w in made.work}
    for key in CELLS:
        row = table.loc[key.batch_size]
        for label, column, count in ((f"{key.name}.{TARGET}", "plain_step_ms", "plain_steps"),
                                     (f"{key.name}.{DRAFT}.k0.spec-g2", "k0_step_ms", "k0_steps")):
            gpu_ms, cpu_ms = _known_step_ms(rows, ends, label, key.batch_size)
            assert row[count] == len(gpu_ms) == ITERS * (OUTPUT_LEN - 1), (label, row[count], len(gpu_ms))
            assert row[column] == pytest.approx(float(np.median(gpu_ms)), rel=1e-9), label
            assert float(np.median(gpu_ms)) > 1.2 * float(np.median(cpu_ms)), (label, gpu_ms, cpu_ms)  # not launch time
        assert row["overhead_ms"] == pytest.approx(row["k0_step_ms"] - row["plain_step_ms"], rel=1e-9)


@pytest.mark.vllm
@pytest.mark.nsys
def test_every_steps_context_is_the_prompt_and_the_tokens_generated_so_far(design):
    from nsys_cc.analysis.forwards.engines import in_engine
    from nsys_cc.analysis.forwards.ranges import forward_range, marked_ranges
    from nsys_cc.analysis.forwards.steps import CONTEXT, step_table
    from nsys_cc.trace import open_trace

    out, _ = design
    with open_trace(str(out / "run-1" / "trace.sqlite")) as trace:
        ranges = marked_ranges(trace, None, engines=True)
        for key in CELLS:
            for label in (f"{key.name}.{TARGET}", f"{key.name}.{DRAFT}.k0.spec-g2"):
                mine = in_engine(ranges, label)
                name, _ = forward_range(mine, None, label=label)
                steps = step_table(mine, name).steps.sort_values("start_ns")
                b, n = key.batch_size, key.input_len
                for _, it in steps.groupby("iteration"):
                    # by hand: step g (0: the prefill) reads B prompts of L tokens and the g tokens each generated
                    want = [b * (n + g) for g in range(OUTPUT_LEN)]
                    assert it[CONTEXT].tolist() == want, (label, it[CONTEXT].tolist())


@pytest.mark.vllm
@pytest.mark.nsys
def test_the_k0_schedule_is_one_vllms_validator_takes(design):
    import json

    from nsys_cc.workflows.tune import validate_with_vllm

    _, engines = design
    (config,) = {e.speculative_config for e in engines if ".k0." in e.label}
    table = json.loads(config)["num_speculative_tokens_per_batch_size"]
    assert validate_with_vllm(table) == [(1, 1024, 0)]
