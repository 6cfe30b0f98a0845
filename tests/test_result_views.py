"""The library as a notebook user meets it: the `nsys_cc` facade, the result's views, and inputs written as a user
writes them (one path, one α, a range name per trace). Real fixtures and public GPU traces; values are checked
against the raw rows or against the result's own tables where the behaviour under test is a rendering."""

from __future__ import annotations

import html
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from pandas.testing import assert_frame_equal

import nsys_cc
from conftest import FIXTURES, raw_sql
from nsys_cc.analysis.metrics import C_METRICS, METRICS
from nsys_cc.cli import cli
from nsys_cc.errors import InputError
from nsys_cc.report import sentence_text
from nsys_cc.report.report_files import MANIFEST

ROOT = Path(__file__).resolve().parents[1]
VLLM = FIXTURES / "vllm"
TARGET = VLLM / "tiny-llama-target.sqlite"
DRAFTS = [VLLM / "tiny-llama-draft-s.sqlite", VLLM / "tiny-llama-draft-xs.sqlite"]
PUBLIC = ROOT.parent / "shared" / "traces" / "public"
GPU_PAIR = (PUBLIC / "GindaChen__nsys-ai__mfu_2gpu_before.sqlite", PUBLIC / "GindaChen__nsys-ai__mfu_2gpu_after.sqlite")


@pytest.fixture(scope="module")
def result():
    return nsys_cc.cost_coefficient(TARGET, DRAFTS, acceptance=[0.6, 0.8])


def test_facade_names_are_listed_and_resolve():
    names = dir(nsys_cc)
    for name in ("cost_coefficient", "CostCoefficientResult", "open_trace", "Trace", "TraceInfo", "project", "speedup",
                 "write_report", "render", "make_figures", "plots", "speedup_plots", "NsysCCError"):
        assert name in names and name in nsys_cc.__all__
        assert getattr(nsys_cc, name) is not None
    assert nsys_cc.plots.plot_coefficients.__module__ == "nsys_cc.report.result_plots"
    with pytest.raises(AttributeError):
        nsys_cc.no_such_thing  # noqa: B018


def test_importing_the_package_loads_no_pandas():
    # the vLLM plugin imports `nsys_cc` in every vLLM process: the facade must stay lazy
    code = "import sys, nsys_cc; dir(nsys_cc); print(sorted(m for m in ('pandas', 'matplotlib', 'sqlalchemy') " \
           "if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == "[]"


def test_speedup_module_lists_only_its_own_names():
    listed = dir(nsys_cc.speedup)
    assert {"best_gamma", "walltime_factor", "judge", "verdicts"} <= set(listed)
    assert not {"np", "pd", "math"} & set(listed)


@pytest.mark.slow
def test_one_draft_path_and_a_scalar_acceptance(result):
    one = nsys_cc.cost_coefficient(str(TARGET), str(DRAFTS[0]), acceptance=0.8)
    assert [m.path for m in one.models] == [str(TARGET), str(DRAFTS[0])]
    assert one.acceptance == (0.8,) and set(one.verdicts["alpha"]) == {0.8}
    same = result.coefficients[result.coefficients["draft"] == one.drafts[0].name].reset_index(drop=True)
    assert_frame_equal(one.coefficients, same)
    assert nsys_cc.cost_coefficient(TARGET, DRAFTS[0], acceptance="0.6, 0.8").acceptance == (0.6, 0.8)
    with pytest.raises(InputError, match=r"^acceptance: 'x' is not a number$") as err:
        nsys_cc.cost_coefficient(TARGET, DRAFTS[0], acceptance="x")
    assert err.value.param == "acceptance"
    with pytest.raises(InputError, match=r"^skip_ranges must be ≥ 0, not -1$"):
        nsys_cc.cost_coefficient(TARGET, DRAFTS[0], skip_ranges=-1)


@pytest.mark.slow
def test_a_range_name_per_trace_compares_a_trace_with_itself():
    # forwards against the benchmark iterations that hold them, in one trace: c = forward time ÷ iteration time
    res = nsys_cc.cost_coefficient(TARGET, TARGET, names=["iteration", "forward"],
                                   range_name=["nsys_cc:iteration", "model_executable()"])
    assert [m.range_name for m in res.models] == ["nsys_cc:iteration", "model_executable()"]
    rows = raw_sql(TARGET, "SELECT e.start, e.end, coalesce(e.text, s.value) FROM NVTX_EVENTS e "
                           "LEFT JOIN StringIds s ON s.id = e.textId WHERE e.eventType IN (59, 60)")
    iters = [(s, e) for s, e, n in rows if n == "nsys_cc:iteration"]
    assert len(res.target.kept) == len(iters)
    assert res.target.kept["wall_ns"].median() == np.median([e - s for s, e in iters])
    c = res.coefficients.query("phase == 'all' and metric == 'wall'")["c"].iloc[0]
    assert 0 < c < 1  # a forward is part of an iteration
    doc = json.loads(res.render("json"))
    assert doc["range"] == ["nsys_cc:iteration", "model_executable()"]
    assert [m["range"] for m in doc["models"]] == doc["range"]
    by_label = nsys_cc.cost_coefficient(TARGET, TARGET, names=["iteration", "forward"],
                                        range_name={"iteration": "nsys_cc:iteration"})
    assert [m.range_name for m in by_label.models] == ["nsys_cc:iteration", "model_executable()"]
    with pytest.raises(InputError, match="given twice"):
        nsys_cc.cost_coefficient(TARGET, TARGET)
    with pytest.raises(InputError, match=r"^range_name has 3 names for 2 traces") as err:
        nsys_cc.cost_coefficient(TARGET, DRAFTS[0], range_name=["a", "b", "c"])
    assert err.value.param == "range_name"


def test_cli_takes_a_range_per_trace():
    res = CliRunner().invoke(cli, ["analyze", str(TARGET), str(TARGET), "--range", "nsys_cc:iteration",
                                   "--range", "model_executable()", "--format", "json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["range"] == ["nsys_cc:iteration", "model_executable()"]
    res = CliRunner().invoke(cli, ["analyze", str(TARGET), str(DRAFTS[0]), "--range", "a", "--range", "b",
                                   "--range", "c"])
    assert res.exit_code == 2 and res.stderr.startswith("nsys-cc: error: --range has 3 names for 2 traces")


@pytest.mark.slow
def test_one_vocabulary(result):
    f = result.forwards
    assert set(f["phase"].dropna()) <= {"all", "prefill", "decode"} and f["phase"].notna().all()
    assert all(m.column in f for m in METRICS)
    assert list(result.kernel_summary.columns)[-2:] == ["mean_duration_ms", "share"]
    empty = nsys_cc.cost_coefficient(TARGET, DRAFTS[0])
    assert empty.verdicts.empty and list(empty.verdicts.columns) == list(result.verdicts.columns)
    assert "speedup" not in empty.to_dict()
    for name in ("summary", "coefficients", "forwards", "kernel_summary", "verdicts"):
        assert name in nsys_cc.CostCoefficientResult.__doc__
    assert "gpu_span_ns" in nsys_cc.project.__doc__ and "proj_duration_ns" in nsys_cc.project.__doc__


def test_short_repr_and_html_view(result):
    text = repr(result)
    assert len(text) < 300 and "tiny-llama-target" in text
    wall = result.coefficients.query("metric == 'wall' and phase == 'decode'").set_index("draft")["c"]
    for draft, c in wall.items():
        assert f"{draft}: {c:.3g} (decode)" in text
    page = result._repr_html_()
    # the table (header + a row per model and phase), then the token's split (header + a row per model and metric)
    from nsys_cc.report.token_text import split_table

    assert page.count("<tr") == 1 + sum(len(m.phases) for m in result.models) + 1 + len(split_table(result))
    assert all(html.escape(sentence_text.diagnosis_text(result, row)) in page for row in result.diagnosis.itertuples())
    assert result.render("table") == nsys_cc.render(result, "table")


@pytest.mark.slow  # 4 s or more on 2 cores: in `make test`, not the edit-test loop (`make check` ≤ 60 s)
def test_write_report_replaces_its_own_earlier_files_only(tmp_path, result):
    mine = tmp_path / "notes.txt"
    mine.write_text("the user's")
    result.write_report(tmp_path)
    first = json.loads((tmp_path / MANIFEST).read_text())["files"]
    assert "plots/speedup_tiny-llama-draft-xs.png" in first and (tmp_path / "speedup.csv").exists()
    # a later report with one draft and no α: the other draft's plot and the speedup table are gone
    nsys_cc.write_report(nsys_cc.cost_coefficient(TARGET, DRAFTS[0]), tmp_path)
    second = json.loads((tmp_path / MANIFEST).read_text())["files"]
    # the report's generations are in the hidden .nsys_cc_report/ (docs/reliability.md, round 4)
    on_disk = {p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*")
               if p.is_file() and not p.relative_to(tmp_path).as_posix().startswith(".nsys_cc_report/")}
    assert on_disk == {*second, MANIFEST, "notes.txt", ".nsys_cc.lock"}  # the -o lock stays (docs/reliability.md)
    assert not (tmp_path / "plots" / "speedup_tiny-llama-draft-xs.png").exists()
    assert not (tmp_path / "speedup.csv").exists() and mine.read_text() == "the user's"


@pytest.mark.slow
def test_figures_from_the_result(result):
    figs = result.figures()
    assert {"forward_times", "coefficients", "break_even", "dsi_heatmaps"} <= set(figs)
    assert {f"speedup_{d}" for d in result.speedup_marks["draft"]} <= set(figs)


@pytest.fixture(scope="module")
def gpu_pair():
    if not all(p.exists() for p in GPU_PAIR):
        pytest.skip(f"public GPU traces not found in {PUBLIC}")
    return nsys_cc.cost_coefficient(*GPU_PAIR, names=["before", "after"], range_name="ncclGroupEnd")


@pytest.mark.slow
def test_summary_counts_forwards_that_have_each_metric(gpu_pair):
    for m in gpu_pair.models:
        kept = m.kept
        for metric in METRICS:
            row = gpu_pair.summary.query("model == @m.name and phase == 'all' and metric == @metric.name")
            assert int(row["count"].iloc[0]) == int(kept[metric.column].notna().sum())
    before = gpu_pair.summary.query("model == 'before' and phase == 'all'").set_index("metric")["count"]
    # ncclGroupEnd ranges lie in 2 processes (ranks): a forward is one range per rank. The 2 ranges that launched
    # nothing (the 1-second window cut their round) have no partner in the other rank and are left out, so every
    # forward has GPU work.
    left_out = gpu_pair.target.ranks.ranges.query("forward < 0")
    assert len(left_out) == 2 and left_out["gpu_busy_ns"].isna().all()
    assert before["wall"] == before["gpu_busy"] == 32
    assert set(gpu_pair.coefficients["metric"]) == set(C_METRICS)


@pytest.fixture(scope="module")
def outliving_pair():
    """A draft whose forwards' GPU work outlives them: the `tensor_creation` ranges (one process) of a public
    inference trace. (The ncclGroupEnd pair no longer serves: its ranges lie in 2 processes, and a forward's wall runs
    from the first rank's start to the last rank's end, longer than its GPU work.)"""
    demo = PUBLIC / "Sh1mwww__llama3-inference__demo.sqlite"
    if not (GPU_PAIR[0].exists() and demo.exists()):
        pytest.skip(f"public GPU traces not found in {PUBLIC}")
    return nsys_cc.cost_coefficient(GPU_PAIR[0], demo, names=["before", "demo"],
                                    range_name=["ncclGroupEnd", "tensor_creation"])


@pytest.mark.slow
def test_diagnosis_says_work_runs_past_the_range(outliving_pair):
    d = outliving_pair.drafts[0].kept
    busy, wall = np.median(d["gpu_busy_ns"].dropna()), np.median(d["wall_ns"])
    assert busy > wall  # the kernels outlive the short range that launched them
    span = np.median(d["gpu_span_ns"].dropna())
    row = outliving_pair.diagnosis.iloc[0]
    # the share is of the GPU span, never above 1; the launch time is said to be shorter than the work
    assert row["outlives_range"] and row["busy_share"] == pytest.approx(busy / span) and row["busy_share"] <= 1
    text = sentence_text.diagnosis_text(outliving_pair, row)
    assert f"GPU busy {busy / 1e6:.3f} ms of its {span / 1e6:.3f} ms GPU span ({busy / span:.0%})" in text
    assert f"longer than the range's {wall / 1e6:.3f} ms launch time" in text
    assert "runs past the range" in text and f"({busy / wall:.0%})" not in text
