"""Kernels per forward range, and two sets of ranges compared (`nsys_cc.kernels`, `nsys_cc.kernel_diff`, a result's
`kernel_diff`, the report's section and plot; the verb `nsys-cc kernels`: tests/cli/test_kernels.py).

Oracles: an independent SQL join on the raw tables (NVTX range → CUDA API call inside it on its thread → GPU op with
the call's correlationId in its process, the rule of `nsys stats -r nvtxgpuproj`), with the kept ranges chosen here
from the raw rows (warm-up marks, payloads); and GPU-shaped traces (`gpu_shaped`: the project's real CPU fixtures with
asynchronous kernels of known names and durations added — not GPU traces) whose every forward's GPU work is known.
Both reader engines (Arrow, stdlib) are run on the fixtures and the public traces.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner
from gpu_shaped import DRAFT_KERNELS, FORWARD, TARGET_KERNELS, GpuShaped, add_gpu_work, named_plan

import nsys_cc
from conftest import FIXTURES, PUBLIC, raw_sql, unchanged
from nsys_cc.analysis.forwards import kernel_tables as kernel_mod
from nsys_cc.cli import cli
from nsys_cc.errors import InputError, RangeNotFoundError
from nsys_cc.report import kernel_text
from nsys_cc.trace import bulk

VLLM = FIXTURES / "vllm"
TARGET, DRAFT = VLLM / "tiny-llama-target.sqlite", VLLM / "tiny-llama-draft-s.sqlite"
# The vLLM fixtures' forwards carry the tokens scheduled: 128 for a prefill, 2 (the batch) for a decode (README there).
DECODE_TOKENS = 2
REAL_SIM = PUBLIC / "Sh1mwww__llama3-inference__real_inference_simulation.sqlite"
DEMO = PUBLIC / "Sh1mwww__llama3-inference__demo.sqlite"
TP_PAIR = (PUBLIC / "GindaChen__nsys-ai__mfu_2gpu_before.sqlite", PUBLIC / "GindaChen__nsys-ai__mfu_2gpu_after.sqlite")
ENGINES = ["arrow", "stdlib"]

RANGES = """SELECT e.rowid, e.start, e."end", e.globalTid, e.int64Value FROM NVTX_EVENTS e
            LEFT JOIN StringIds s ON s.id = e.textId
            WHERE e.eventType = 59 AND e."end" IS NOT NULL AND coalesce(e.text, s.value) = ? ORDER BY e.start"""
# Each GPU op launched inside a range of that name, with the range it belongs to (an op counts for every range whose
# thread made its launching call inside it).
OPS = """WITH r AS ({ranges})
SELECT r.rowid, {name}, o."end" - o.start
FROM r JOIN CUPTI_ACTIVITY_KIND_RUNTIME a ON a.globalTid = r.globalTid AND a.start >= r.start AND a."end" <= r."end"
JOIN {table} o ON o.correlationId = a.correlationId AND o.globalPid = (a.globalTid & -16777216)
{join}"""
TABLES = {
    "kernel": ("CUPTI_ACTIVITY_KIND_KERNEL", "ks.value", "JOIN StringIds ks ON ks.id = o.shortName"),
    "memcpy": ("CUPTI_ACTIVITY_KIND_MEMCPY", "'memcpy'", ""),
    "memset": ("CUPTI_ACTIVITY_KIND_MEMSET", "'memset'", ""),
    "graph": ("CUPTI_ACTIVITY_KIND_GRAPH_TRACE", "'graph'", ""),
}


def sql_kernels(path: Path, name: str, keep) -> tuple[dict, int]:
    """Per kernel name (per kind for copies, fills and whole graphs): [count, summed ns] over the ranges named `name`
    that `keep(start, payload, all_rows)` keeps, and how many were kept — from the raw tables only."""
    rows = raw_sql(path, RANGES, (name,))
    kept = {r[0] for r in rows if keep(r[1], r[4])}
    tables = {t for (t,) in raw_sql(path, "SELECT name FROM sqlite_master WHERE type = 'table'")}
    out: dict = defaultdict(lambda: [0, 0])
    for kind, (table, label, join) in TABLES.items():
        if table not in tables:
            continue
        sql = OPS.format(ranges=RANGES, name=label, table=table, join=join)
        for rid, op, dur in raw_sql(path, sql, (name,)):
            if rid in kept:
                key = op if kind == "kernel" else kind
                out[key][0] += 1
                out[key][1] += dur
    return dict(out), len(kept)


def warmup_keep(path: Path, tokens: int | None):
    """Keeps a forward that starts inside no `nsys_cc:warmup` range (and, with `tokens`, carries that payload)."""
    warm = [(s, e) for _, s, e, _, _ in raw_sql(path, RANGES, ("nsys_cc:warmup",))]

    def keep(start: int, payload: int | None) -> bool:
        return not any(s <= start < e for s, e in warm) and (tokens is None or payload == tokens)

    return keep


def as_oracle(table: pd.DataFrame) -> dict:
    """A kernel table keyed as `sql_kernels`: kernel rows by name, other ops by kind."""
    return {(r.kernel if r.kind == "kernel" else r.kind): [int(r.count), r.ms_per_range] for r in table.itertuples()}


def assert_matches(table: pd.DataFrame, oracle: dict, n: int) -> None:
    assert table.attrs["ranges"] == n > 0
    got = as_oracle(table)
    assert set(got) == set(oracle)
    for key, (count, ns) in oracle.items():
        assert got[key][0] == count, key
        assert got[key][1] == pytest.approx(ns / n / 1e6, rel=1e-12), key
    total = sum(ns for _, ns in oracle.values())
    assert table["share"].sum() == pytest.approx(1.0) and total > 0
    assert list(table["ms_per_range"]) == sorted(table["ms_per_range"], reverse=True)


# ---- GPU-shaped fixtures: kernels of known names --------------------------------------------------------------------
@pytest.fixture(scope="module")
def shaped(tmp_path_factory) -> tuple[GpuShaped, GpuShaped]:
    folder = tmp_path_factory.mktemp("shaped")
    with unchanged(TARGET, DRAFT):
        t = add_gpu_work(TARGET, folder / "target.sqlite", named_plan(TARGET_KERNELS), names=(FORWARD,))
        d = add_gpu_work(DRAFT, folder / "draft.sqlite", named_plan(DRAFT_KERNELS), names=(FORWARD,))
    return t, d


def known(shaped_trace: GpuShaped, tokens: int | None = DECODE_TOKENS) -> tuple[dict, int]:
    """What the plan wrote into the kept forwards (of `tokens` tokens): per op name [count, ns], and how many."""
    keep = warmup_keep(shaped_trace.path, tokens)
    out: dict = defaultdict(lambda: [0, 0])
    n = 0
    for w in shaped_trace.of(FORWARD):
        if keep(w.range.start, w.range.payload):
            n += 1
            for s, e, kind, name in w.ops:
                key = name if kind == "kernel" else kind
                out[key][0] += 1
                out[key][1] += e - s
    return dict(out), n


@pytest.mark.slow
@pytest.mark.parametrize("engine", ENGINES)
def test_kernels_of_a_gpu_shaped_trace_are_the_known_ones(shaped, engine, monkeypatch):
    monkeypatch.setenv(bulk.ENGINE_ENV, engine)
    target, _ = shaped
    table = nsys_cc.kernels(target.path)
    want, n = known(target)
    assert {k for k, _ in TARGET_KERNELS} == set(want) and n == 9  # 3 measured iterations × 3 decodes
    assert table.attrs["phase"] == "decode"  # the phase c is judged on
    assert_matches(table, want, n)
    assert_matches(table, *sql_kernels(target.path, FORWARD, warmup_keep(target.path, DECODE_TOKENS)))
    assert list(table.columns) == kernel_mod.KERNEL_COLUMNS
    assert dict(zip(table["kernel"], table["category"])) == {"ampere_sgemm_128x64_tn": "GEMM",
                                                              "flash_fwd_kernel": "attention",
                                                              "rms_norm_kernel": "normalisation"}
    # every phase, and an open trace that stays open
    with nsys_cc.open_trace(target.path) as t:
        prefill = nsys_cc.kernels(t, phase="prefill")
        assert len(t.nvtx_ranges(names=FORWARD)) == 20
    assert_matches(prefill, *known(target, 128))
    assert_matches(nsys_cc.kernels(target.path, phase="all"), *known(target, None))


@pytest.mark.parametrize("engine", ENGINES)
def test_kernel_diff_of_target_and_draft_is_the_known_difference(shaped, engine, monkeypatch):
    monkeypatch.setenv(bulk.ENGINE_ENV, engine)
    target, draft = shaped
    diff = nsys_cc.kernel_diff(target.path, draft.path)
    (ta, na), (db, nb) = known(target), known(draft)
    assert list(diff.columns) == kernel_mod.DIFF_COLUMNS
    assert (diff.attrs["a_ranges"], diff.attrs["b_ranges"], diff.attrs["phase"]) == (na, nb, "decode")
    assert set(diff["kernel"]) == set(ta) | set(db)
    for r in diff.itertuples():
        a = ta.get(r.kernel, [0, 0])
        b = db.get(r.kernel, [0, 0])
        assert (r.a_count, r.b_count) == (a[0], b[0])
        assert r.a_ms_per_range == pytest.approx(a[1] / na / 1e6, rel=1e-12)
        assert r.b_ms_per_range == pytest.approx(b[1] / nb / 1e6, rel=1e-12)
        assert r.delta_ms_per_range == pytest.approx(b[1] / nb / 1e6 - a[1] / na / 1e6, rel=1e-9, abs=1e-15)
        assert r.delta_count_per_range == pytest.approx(b[0] / nb - a[0] / na)
    # what matters most first: the largest difference either way
    assert list(diff["delta_ms_per_range"].abs()) == sorted(diff["delta_ms_per_range"].abs(), reverse=True)
    # a kernel only one side runs: 0 on the other
    only_target = diff.set_index("kernel").loc["rms_norm_kernel"]
    assert only_target["b_count"] == 0 and only_target["b_ms_per_range"] == 0.0
    assert only_target["delta_ms_per_range"] < 0
    cats = kernel_mod.category_diff(diff).set_index("category")
    assert cats.loc["GEMM", "delta_ms_per_range"] == pytest.approx(
        diff[diff["category"] == "GEMM"]["delta_ms_per_range"].sum())


@pytest.mark.slow
def test_a_phase_per_side_compares_a_targets_decode_with_a_speculative_runs_verify(tmp_path):
    """one phase for both sides could not compare a plain target's decode forwards with a speculative run's
    verify forwards; `phase_b` (`--phase-b`) gives the second side its own. Oracle: the work written into the kept
    forwards of each payload (a decode carries 1 token at batch 1, a verify γ + 1 = 4)."""
    spec = FIXTURES / "spec"
    with unchanged(spec / "tiny-llama-target.sqlite", spec / "tiny-llama-draft-xs.spec-g3.sqlite"):
        t = add_gpu_work(spec / "tiny-llama-target.sqlite", tmp_path / "t.sqlite", named_plan(TARGET_KERNELS),
                         names=(FORWARD,))
        v = add_gpu_work(spec / "tiny-llama-draft-xs.spec-g3.sqlite", tmp_path / "v.sqlite",
                         named_plan(DRAFT_KERNELS), names=(FORWARD,))
    diff = nsys_cc.kernel_diff(t.path, v.path, phase="decode", phase_b="verify")
    (ta, na), (vb, nb) = known(t, 1), known(v, 4)
    assert (diff.attrs["phase"], diff.attrs["phase_b"], diff.attrs["a_ranges"], diff.attrs["b_ranges"]) == (
        "decode", "verify", na, nb) and na > 0 and nb > 0
    for r in diff.itertuples():
        assert (r.a_count, r.b_count) == (ta.get(r.kernel, [0])[0], vb.get(r.kernel, [0])[0])
        assert r.b_ms_per_range == pytest.approx(vb.get(r.kernel, [0, 0])[1] / nb / 1e6, rel=1e-12)
    # one phase for both: the plain target has no verify forward — said, naming the flag
    r = CliRunner().invoke(cli, ["kernels", str(t.path), str(v.path), "--phase", "verify"])
    assert r.exit_code == 2 and "choose one of them with --phase" in r.stderr
    r = CliRunner().invoke(cli, ["kernels", str(t.path), str(v.path), "--phase", "decode", "--phase-b", "verify"])
    assert r.exit_code == 0, r.output
    assert f"({na} kept decode ranges)" in r.stdout and f"({nb} kept verify ranges)" in r.stdout
    r = CliRunner().invoke(cli, ["kernels", str(t.path), str(v.path), "--phase", "decode", "--phase-b", "prefill",
                                 "--format", "json"])
    assert r.exit_code == 0 and json.loads(r.stdout)
    r = CliRunner().invoke(cli, ["kernels", str(t.path), str(v.path), "--phase-b", "verify"])
    assert r.exit_code == 2 and "give --phase too" in r.stderr


@pytest.mark.slow  # 4 s or more on 2 cores: in `make test`, not the edit-test loop (`make check` ≤ 60 s)
def test_the_result_carries_the_same_diff_into_the_report(shaped, tmp_path):
    target, draft = shaped
    res = nsys_cc.cost_coefficient(target.path, draft.path)
    table = res.kernel_diff
    assert set(table["draft"]) == {"draft"} and set(table["phase"]) == {"decode"}
    pd.testing.assert_frame_equal(table.drop(columns=["draft", "phase"]), nsys_cc.kernel_diff(target.path, draft.path),
                                  check_exact=False, rtol=1e-12)
    assert json.loads(res.render("json"))["kernel_diff"] == kernel_text.records(table)
    md = res.render("markdown")
    assert "**Kernels: draft against the target, per decode forward" in md and "ampere_sgemm_64x32_tn" in md
    assert "Kernels: draft against the target" in res._repr_html_()
    figures = res.figures()
    assert "kernel_diff" in figures
    ax_cat, ax_top = figures["kernel_diff"].axes[:2]
    shown = [t.get_text() for t in ax_top.get_yticklabels()]
    assert shown == list(table["kernel"])  # the kernels that differ most, in the table's order
    assert [t.get_text() for t in ax_cat.get_yticklabels()] == list(kernel_mod.category_diff(table)["category"])
    res.write_report(tmp_path)
    pd.testing.assert_frame_equal(pd.read_csv(tmp_path / "kernel_diff.csv"), table, check_exact=False, rtol=1e-12,
                                  check_dtype=False)
    assert (tmp_path / "plots" / "kernel_diff.png").stat().st_size > 0


@pytest.mark.slow  # 4 s or more on 2 cores: in `make test`, not the edit-test loop (`make check` ≤ 60 s)
def test_a_graph_recorded_whole_is_one_row_and_a_note(tmp_path):
    shaped = add_gpu_work(DRAFT, tmp_path / "graphs.sqlite", named_plan(DRAFT_KERNELS, graph="whole"), names=(FORWARD,))
    table = nsys_cc.kernels(shaped.path)
    want, n = known(shaped)
    assert_matches(table, want, n)
    assert list(table["kind"]) == ["graph"] and list(table["category"]) == ["CUDA graph"]
    assert table["kernel"].iloc[0].startswith("[CUDA graph")
    assert any("recorded whole" in note and "not counted as 0" in note for note in table.attrs["notes"])


@pytest.mark.slow
def test_cpu_traces_have_no_kernels_and_say_why():
    with pytest.warns(nsys_cc.errors.NsysCCWarning, match="no GPU operation in these ranges"):  # said, not only kept
        table = nsys_cc.kernels(TARGET)
    assert table.empty and list(table.columns) == kernel_mod.KERNEL_COLUMNS
    assert any("no CUDA tables" in n for n in table.attrs["notes"])
    assert any("dropped 8 of 20 ranges" in n for n in table.attrs["notes"])  # warm-up dropped as analyze drops it
    res = nsys_cc.cost_coefficient(TARGET, DRAFT)
    assert res.kernel_diff.empty and "kernel_diff" not in res.figures() and json.loads(res.render("json"))[
        "kernel_diff"] == []


# ---- the public GPU traces ------------------------------------------------------------------------------------------
# a public trace read by each engine (~1 s each): `make check` keeps the default engine (arrow); that the two engines
# read the same rows is tests/trace/test_bulk.py::test_engines_agree_on_real_exports's, in the loop
@pytest.mark.parametrize("engine", [e if e == "arrow" else pytest.param(e, marks=pytest.mark.slow) for e in ENGINES])
def test_two_ranges_of_a_public_trace_against_sql(public_dir, engine, monkeypatch):
    monkeypatch.setenv(bulk.ENGINE_ENV, engine)
    a, b = "layer_0_computation", "layer_7_computation"
    with unchanged(REAL_SIM):
        diff = nsys_cc.kernel_diff(REAL_SIM, range_name=a, range_name_b=b, phase="all", skip_ranges=0)
        one = nsys_cc.kernels(REAL_SIM, range_name=a, phase="all", skip_ranges=0)
    every = lambda start, payload: True  # noqa: E731  (phase all, nothing skipped)
    oa, na = sql_kernels(REAL_SIM, a, every)
    ob, nb = sql_kernels(REAL_SIM, b, every)
    assert_matches(one, oa, na)
    assert {"memset"} <= set(oa)  # copies and fills count as GPU ops too
    for r in diff.itertuples():
        key = r.kernel if r.kind == "kernel" else r.kind
        assert (r.a_count, r.b_count) == (oa[key][0], ob[key][0])
        assert r.delta_ms_per_range == pytest.approx(ob[key][1] / nb / 1e6 - oa[key][1] / na / 1e6, rel=1e-9)
    assert (diff.attrs["a"], diff.attrs["b"]) == (a, b)


@pytest.mark.parametrize("engine", ENGINES)
def test_a_public_pair_of_traces_against_sql(public_dir, engine, monkeypatch):
    monkeypatch.setenv(bulk.ENGINE_ENV, engine)
    diff = nsys_cc.kernel_diff(DEMO, DEMO, range_name="softmax_simulation", range_name_b="attention_simulation",
                               phase="all", skip_ranges=0)
    every = lambda start, payload: True  # noqa: E731
    oa, na = sql_kernels(DEMO, "softmax_simulation", every)
    ob, nb = sql_kernels(DEMO, "attention_simulation", every)
    assert (diff.attrs["a_ranges"], diff.attrs["b_ranges"]) == (na, nb)
    got = {(r.kernel if r.kind == "kernel" else r.kind): r for r in diff.itertuples()}
    assert set(got) == set(oa) | set(ob)
    for key, r in got.items():
        assert r.a_ms_per_range == pytest.approx(oa.get(key, [0, 0])[1] / na / 1e6, rel=1e-12)
        assert r.b_ms_per_range == pytest.approx(ob.get(key, [0, 0])[1] / nb / 1e6, rel=1e-12)


@pytest.mark.slow  # 4 s or more on 2 cores: in `make test`, not the edit-test loop (`make check` ≤ 60 s)
def test_tensor_parallel_forwards_add_their_ranks_kernels(public_dir):
    """Two ranks per forward: a "range" is one forward, its ranks' GPU ops added. The two runs' ncclGroupEnd ranges
    that launched nothing are left out of the forwards; every kernel launched inside one counts."""
    diff = nsys_cc.kernel_diff(*TP_PAIR, range_name="ncclGroupEnd", phase="all")
    every = lambda start, payload: True  # noqa: E731
    for side, path in (("a", TP_PAIR[0]), ("b", TP_PAIR[1])):
        oracle, _ = sql_kernels(path, "ncclGroupEnd", every)
        forwards = diff.attrs[f"{side}_ranges"]
        launched = raw_sql(path, f"SELECT count(DISTINCT r.rowid) FROM ({RANGES}) r JOIN CUPTI_ACTIVITY_KIND_RUNTIME a "
                                 "ON a.globalTid = r.globalTid AND a.start >= r.start AND a.\"end\" <= r.\"end\" "
                                 "JOIN CUPTI_ACTIVITY_KIND_KERNEL k ON k.correlationId = a.correlationId "
                                 "AND k.globalPid = (a.globalTid & -16777216)",
                           ("ncclGroupEnd",))[0][0]
        assert forwards * 2 == launched  # one range per rank in each forward
        row = diff.set_index("kernel").loc["ncclDevKernel_SendRecv"]
        assert row[f"{side}_count"] == oracle["ncclDevKernel_SendRecv"][0]
        assert row[f"{side}_ms_per_range"] == pytest.approx(oracle["ncclDevKernel_SendRecv"][1] / forwards / 1e6,
                                                            rel=1e-12)
        assert row[f"{side}_count_per_range"] == 2.0


def test_library_errors_name_the_parameter(shaped):
    target, _ = shaped
    with pytest.raises(InputError) as err:
        nsys_cc.kernel_diff(target.path)
    assert err.value.param == "range_name_b"
    with pytest.raises(RangeNotFoundError) as err:
        nsys_cc.kernel_diff(target.path, range_name_b="nope")
    assert err.value.param == "range_name_b" and "choose one with range_name_b" in str(err.value)
    with pytest.raises(InputError, match="phase must be one of all, prefill, decode, verify, mixed, not 'warm'"):
        nsys_cc.kernels(target.path, phase="warm")
    with pytest.raises(InputError, match="range_name must be one NVTX range name"):
        nsys_cc.kernels(target.path, range_name=["a", "b"])


def test_the_vllm_scopes_trace_needs_no_range():
    scopes = VLLM / "vllm_scopes.sqlite"
    with pytest.warns(nsys_cc.errors.NsysCCWarning, match="no GPU operation"):  # a CPU trace
        table = nsys_cc.kernels(scopes, phase="all")
    assert table.attrs["range_name"] == "gpu_model_runner: forward"
    assert table.attrs["ranges"] == len(raw_sql(scopes, RANGES, ("gpu_model_runner: forward",))) == 20
    assert any("nsys_cc's plugin was off" in n for n in table.attrs["notes"])
