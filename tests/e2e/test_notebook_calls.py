"""Calls a notebook user makes that used to mislead: each now works as the user means it, or raises an
NsysCCError that says what to pass. Real fixtures; numbers checked against the raw rows (stdlib SQL) or against the
call written the long way (a list of one item), never against what the call under test just computed alone."""

from __future__ import annotations

import dataclasses
import html
import inspect
import json
import math
import os
import re
import shutil
import statistics
import subprocess
import sys
import warnings

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

import nsys_cc
from conftest import FIXTURES, REPO, raw_sql, room_module
from nsys_cc.analysis.result_values import same
from nsys_cc.analysis.speculative import in_place as spec_mod, pooled as spec_runs, tables as spec_tables
from nsys_cc.cli import cli
from nsys_cc.errors import InputError, NsysCCError, TraceClosedError
from nsys_cc.report import speculative_text
from nsys_cc.trace.reader import ExportTrace

VLLM = FIXTURES / "vllm"
SPEC = FIXTURES / "spec"
TARGET = VLLM / "tiny-llama-target.sqlite"
DRAFT_S, DRAFT_XS = VLLM / "tiny-llama-draft-s.sqlite", VLLM / "tiny-llama-draft-xs.sqlite"
SCOPES = VLLM / "vllm_scopes.sqlite"
NAMED = ("SELECT count(*) FROM NVTX_EVENTS e LEFT JOIN StringIds s ON s.id = e.textId "
         "WHERE e.eventType IN (59, 60) AND coalesce(e.text, s.value) = ?")


@pytest.fixture(scope="module")
def result():
    return nsys_cc.cost_coefficient(TARGET, [DRAFT_S, DRAFT_XS], acceptance=[0.6, 0.8])


@pytest.fixture(scope="module")
def spec_result():
    runs = [SPEC / f"tiny-llama-draft-xs.spec-g{g}.sqlite" for g in (1, 2, 3)]
    return nsys_cc.cost_coefficient(SPEC / "tiny-llama-target.sqlite", [SPEC / "tiny-llama-draft-xs.sqlite", *runs])


# ---- a bare string where a list is expected is a list of one -------------------------------------------------------
def test_a_bare_name_or_prefix_is_one_name_not_its_characters():
    with nsys_cc.open_trace(TARGET) as t:
        one = t.nvtx_ranges(names="model_executable()")
        assert len(one) == raw_sql(TARGET, NAMED, ("model_executable()",))[0][0] == 20
        pd.testing.assert_frame_equal(one, t.nvtx_ranges(names=["model_executable()"]))
        # "mX" is one prefix that no name starts with, not the prefixes "m" and "X"
        assert t.nvtx_ranges(prefixes="mX").empty
        starts = raw_sql(TARGET, "SELECT count(*) FROM NVTX_EVENTS e LEFT JOIN StringIds s ON s.id = e.textId "
                                 "WHERE e.eventType IN (59, 60) AND coalesce(e.text, s.value) LIKE 'nsys_cc:%'")[0][0]
        assert len(t.nvtx_ranges(prefixes="nsys_cc:")) == starts > 0


def test_one_label_is_one_label_and_says_it_is_one_short():
    with pytest.raises(InputError, match=r"^names has 1 label\(s\) for 2 traces") as err:
        nsys_cc.cost_coefficient(TARGET, DRAFT_S, names="tgt")
    assert err.value.param == "names"
    labelled = nsys_cc.cost_coefficient(TARGET, DRAFT_S, names=("t", "d"))
    assert [m.name for m in labelled.models] == ["t", "d"]


def test_a_label_given_twice_is_refused():
    with pytest.raises(InputError, match="'a' given to more than one trace") as err:
        nsys_cc.cost_coefficient(TARGET, [DRAFT_S, DRAFT_XS], names=["t", "a", "a"])
    assert err.value.param == "names"


@pytest.mark.slow
def test_the_target_as_a_list_of_one_is_that_trace():
    assert nsys_cc.cost_coefficient([TARGET], [DRAFT_S]) == nsys_cc.cost_coefficient(TARGET, DRAFT_S)
    with pytest.raises(InputError, match=r"^target is one trace, not 2: pass one path; several go in drafts$") as err:
        nsys_cc.cost_coefficient([TARGET, DRAFT_S], DRAFT_XS)
    assert err.value.param == "target"
    with pytest.raises(InputError, match=r"^target: expected a trace path \(str or os.PathLike\), not int 5$"):
        nsys_cc.cost_coefficient(5, DRAFT_S)
    with pytest.raises(InputError, match=r"^drafts: give a list \(or one item\), not a mapping"):
        nsys_cc.cost_coefficient(TARGET, {str(DRAFT_S): "x"})


def _public_callables():
    """(qualified name, function) of every public function and method the facade hands out."""
    out = []
    for name in nsys_cc.__all__:
        obj = getattr(nsys_cc, name)
        if inspect.ismodule(obj):
            for attr in dir(obj):
                f = getattr(obj, attr)
                if attr.startswith("_") or getattr(f, "__module__", None) != obj.__name__:
                    continue
                if inspect.isfunction(f):
                    out.append((f"{name}.{attr}", f))
                elif inspect.isclass(f):
                    out += [(f"{name}.{attr}.{m}", g) for m, g in inspect.getmembers(f, inspect.isfunction)
                            if not m.startswith("_")]
        elif inspect.isclass(obj):
            cls = ExportTrace if name == "Trace" else obj
            out += [(f"{name}.{m}", g) for m, g in inspect.getmembers(cls, inspect.isfunction) if not m.startswith("_")]
        elif callable(obj):
            out.append((name, obj))
    return out


LIST_LIKE = re.compile(r"\b(Sequence|Collection|Iterable|list|tuple)\[")


def _refused(a, b) -> bool:
    """Both calls refused with the same NsysCCError (a heatmap of one α: it says it needs two)."""
    return isinstance(a, NsysCCError) and type(a) is type(b) and str(a) == str(b) and "at least two" in str(a)


def _fit(param: str):
    runs = {"gammas": [1, 3], "draft_forward_ms": [0.7, 0.8], "verify_ms": [5.6, 6.0], "other_ms": [4.2, 4.9],
            "draft_weights": [1, 3]}
    return lambda v: nsys_cc.forecast.fit(6.4, **{**{k: r[:1] for k, r in runs.items()}, param: v})


# Per public (function, list-like parameter): a call with one item alone and the same with a list of one, which must
# agree (compared by `check`). Every list-like parameter of the public API must be here: `test_every_list_like_…`.
FIT = {"gammas": 1, "draft_forward_ms": 0.7, "verify_ms": 5.6, "other_ms": 4.2, "draft_weights": 1}


ONE_ITEM = {
    ("Trace.nvtx_ranges", "names"): None,  # test_a_bare_name_or_prefix_is_one_name_not_its_characters
    ("Trace.nvtx_ranges", "prefixes"): None,  # the same test
    ("cost_coefficient", "drafts"): None,  # test_the_target_as_a_list_of_one_is_that_trace (and test_facade)
    ("cost_coefficient", "names"): None,  # test_one_label_is_one_label_and_says_it_is_one_short
    ("cost_coefficient", "range_name"): (lambda v: nsys_cc.cost_coefficient(TARGET, DRAFT_S, range_name=v),
                                         "model_executable()", lambda a, b: a == b),
    ("cost_coefficient", "acceptance"): (lambda v: nsys_cc.cost_coefficient(TARGET, DRAFT_S, acceptance=v).acceptance,
                                         "0.8", lambda a, b: a == b == (0.8,)),
    ("dsi.heatmaps", "c_grid"): (lambda v: nsys_cc.dsi.heatmaps(v, [0.5], [1, 2], n_tokens=50, repeats=1).si,
                                 0.3, lambda a, b: np.array_equal(a, b) and a.shape == (1, 1)),
    ("dsi.heatmaps", "alpha_grid"): (lambda v: nsys_cc.dsi.heatmaps([0.3], v, [1, 2], n_tokens=50, repeats=1).si,
                                     0.5, lambda a, b: np.array_equal(a, b) and a.shape == (1, 1)),
    ("dsi.heatmaps", "ks"): (lambda v: nsys_cc.dsi.heatmaps([0.3], [0.5], v, n_tokens=50, repeats=1).si_k,
                             2, lambda a, b: np.array_equal(a, b) and a.tolist() == [[2]]),
    ("metrics.decision_phase", "phases"): (nsys_cc.metrics.decision_phase, "decode", lambda a, b: a == b == "decode"),
    ("metrics.in_order", "phases"): (nsys_cc.metrics.in_order, "prefill", lambda a, b: a == b == ["prefill"]),
    ("speedup.judge_all", "alphas"): (lambda v: nsys_cc.speedup.judge_all(0.1, v), 0.8,
                                      lambda a, b: same(a, b) and len(a) == 1 and a[0].alpha == 0.8),
    ("speedup.verdicts", "alphas"): (
        lambda v: nsys_cc.speedup.verdicts(pd.DataFrame([{"draft": "d", "phase": "decode", "metric": "wall",
                                                          "c": 0.1, "ci_low": 0.08, "ci_high": 0.12}]), v),
        0.8, lambda a, b: a.equals(b) and list(a["alpha"]) == [0.8]),
    ("speedup_plots.speedup_heatmap", "alphas"): (lambda v: nsys_cc.speedup_plots.speedup_heatmap(0.1, alphas=v),
                                                  0.5, _refused),
    ("speedup_plots.speedup_heatmap", "gammas"): (lambda v: nsys_cc.speedup_plots.speedup_heatmap(0.1, gammas=v),
                                                  3, _refused),
    **{("forecast.fit", p): (_fit(p), v, same) for p, v in FIT.items()},
    ("speedup_plots.break_even_chart", "alphas"): (
        lambda v: nsys_cc.speedup_plots.break_even_chart(pd.DataFrame(columns=["draft", "c", "ci_low", "ci_high"]),
                                                         alphas=v),
        0.7, lambda a, b: len(a.axes[0].lines) == len(b.axes[0].lines) == 2),
    ("write_report", "extra_notes"): None,  # test_write_report_takes_one_note
    ("cost_coefficient", "engines"): (lambda v: nsys_cc.cost_coefficient(TARGET, DRAFT_S, engines=v), "tgt",
                                     lambda a, b: _same_refusal(a, b, "engines has 1 entries for 2 traces")),
    ("cost_coefficient_runs", "runs"): (lambda v: nsys_cc.cost_coefficient_runs(v, names=["t", "d"]),
                                        [TARGET, DRAFT_S], lambda a, b: a == b and len(a.coefficients) > 0),
    ("cost_coefficient_runs", "names"): (lambda v: nsys_cc.cost_coefficient_runs([[TARGET, DRAFT_S]], names=v), "tgt",
                                         lambda a, b: _same_refusal(a, b, "names has 1 label(s) for 2 models")),
    ("cost_coefficient_runs", "engines"): (
        lambda v: nsys_cc.cost_coefficient_runs([[TARGET, DRAFT_S]], names=["t", "d"], engines=v), "tgt",
        lambda a, b: _same_refusal(a, b, "engines has 1 entries for 2 traces")),
    ("cost_coefficient_runs", "range_name"): (
        lambda v: nsys_cc.cost_coefficient_runs([[TARGET, DRAFT_S]], names=["t", "d"], range_name=v),
        "model_executable()", lambda a, b: a == b),
    ("cost_coefficient_runs", "acceptance"): (
        lambda v: nsys_cc.cost_coefficient_runs([[TARGET, DRAFT_S]], names=["t", "d"], acceptance=v).acceptance,
        "0.8", lambda a, b: a == b == (0.8,)),
    ("speedup.verdicts", "alpha_intervals"): (
        lambda v: nsys_cc.speedup.verdicts(pd.DataFrame([{"draft": "d", "phase": "decode", "metric": "wall",
                                                          "c": 0.1, "ci_low": 0.08, "ci_high": 0.12}]), 0.8,
                                           alpha_intervals=v),
        (0.7, 0.9), lambda a, b: a.equals(b) and list(a["alpha_low"]) == [0.7] and list(a["alpha_high"]) == [0.9]),
    ("analyze", "drafts"): (lambda v: nsys_cc.analyze(TARGET, v), DRAFT_S, lambda a, b: a == b),
    ("analyze", "names"): (lambda v: nsys_cc.analyze(TARGET, DRAFT_S, names=v), "tgt",
                           lambda a, b: _same_refusal(a, b, "names has 1 label(s) for 2 traces")),
    ("analyze", "range_name"): (lambda v: nsys_cc.analyze(TARGET, DRAFT_S, range_name=v), "model_executable()",
                                lambda a, b: a == b),
    ("analyze", "engines"): (lambda v: nsys_cc.analyze(TARGET, DRAFT_S, engines=v), "tgt",
                            lambda a, b: _same_refusal(a, b, "engines has 1 entries for 2 traces")),
    ("analyze", "acceptance"): (lambda v: nsys_cc.analyze(TARGET, DRAFT_S, acceptance=v).acceptance, "0.8",
                                lambda a, b: a == b == (0.8,)),
    ("profile", "drafts"): None,  # test_profile_takes_one_item_alone
    ("profile", "speculate"): None,  # the same test
    ("profile", "nsys_args"): None,  # the same test
    ("profile", "acceptance"): None,  # the same test
}


def test_runs_refuse_one_label_for_two_models():
    # as cost_coefficient does (duplicate labels are an error in the library as in the CLI): the target's and the
    # draft's rows would carry the same name
    with pytest.raises(InputError, match=r"^names: 'a' given to more than one trace") as err:
        nsys_cc.cost_coefficient_runs([[TARGET, DRAFT_S]], names=["a", "a"])
    assert err.value.param == "names"


def _same_refusal(a, b, says: str) -> bool:
    """Both calls refused with the same NsysCCError, which says `says` (a bare name taken as one item, not letters)."""
    return isinstance(a, NsysCCError) and type(a) is type(b) and str(a) == str(b) and says in str(a)


def test_profile_takes_one_item_alone(monkeypatch, tmp_path):
    # profile runs minutes of vLLM: what it hands to the runner is checked instead of running it
    from nsys_cc.launch import orchestrator
    from nsys_cc.workflows import profile as profile_mod

    seen = []
    monkeypatch.setattr(orchestrator, "run", lambda strategy, **k: seen.append((strategy, k)))
    monkeypatch.setattr("nsys_cc.trace.nsys.require_nsys", lambda: "/opt/nsys/bin/nsys")  # (planned, never run)
    nsys_cc.profile("tiny-llama-target", "tiny-llama-draft-xs", tmp_path / "a", nsys_args="--sample=none",
                    acceptance=0.8)
    nsys_cc.profile("tiny-llama-target", "tiny-llama-draft-xs", tmp_path / "b", speculate=2, separate=True)
    (a, k), (b, kb) = seen
    assert (a.name, b.name) == ("interleaved", "separate")
    assert list(a.request.drafts) == ["tiny-llama-draft-xs"] and list(a.request.nsys_args) == ["--sample=none"]
    # acceptance is the analysis' (the runs take none): a lone one reaches it, in the request the finish holds
    assert k["finish"].keywords["request"].acceptance == (0.8,)
    assert k["finish"].func is profile_mod.finish  # the one end of a profile, which every sweep cell ends with too
    assert list(b.request.drafts) == ["tiny-llama-draft-xs"] and list(b.request.speculate) == [2]
    assert kb["finish"].keywords["request"].acceptance == ()


def test_every_list_like_parameter_of_the_public_api_is_checked():
    found = {(q, p.name) for q, f in _public_callables() for p in inspect.signature(f).parameters.values()
             if LIST_LIKE.search(str(p.annotation))}
    assert found == set(ONE_ITEM), "list the new list-like parameter in ONE_ITEM with a check"


@pytest.mark.parametrize("key", [k for k, v in ONE_ITEM.items() if v is not None], ids=lambda k: f"{k[0]}:{k[1]}")
def test_one_item_alone_is_a_list_of_one(key):
    call, item, check = ONE_ITEM[key]

    def outcome(value):
        try:
            return call(value)
        except NsysCCError as exc:
            return exc

    assert check(outcome(item), outcome([item]))


@pytest.mark.slow
def test_write_report_takes_one_note(tmp_path, result):
    nsys_cc.write_report(result, tmp_path, extra_notes="profiled on a quiet machine", plots=False)
    md = (tmp_path / "report.md").read_text()
    assert "- profiled on a quiet machine" in md and "\n- p\n" not in md


# ---- a result's tables are the caller's own; results compare by value --------------------------------------------
def _tables(obj, path="res"):
    """(path, frame) of every DataFrame reachable from a result by attribute, models and speculative included."""
    out = []
    if dataclasses.is_dataclass(obj):
        names = [f.name for f in dataclasses.fields(obj) if not f.name.startswith("_")]
        names += [n for n, v in inspect.getmembers(type(obj)) if isinstance(v, property)]
        for n in dict.fromkeys(names):
            value = getattr(obj, n)
            if isinstance(value, pd.DataFrame):
                out.append((f"{path}.{n}", lambda o=obj, n=n: getattr(o, n)))
            elif isinstance(value, (tuple, list)) and n in ("models",):
                out += [t for i, m in enumerate(value) for t in _tables(m, f"{path}.{n}[{i}]")]
            elif dataclasses.is_dataclass(value):
                out += _tables(value, f"{path}.{n}")
    return out


@pytest.mark.slow
@pytest.mark.parametrize("which", ["plain", "speculative"])
def test_changing_a_table_handed_out_changes_nothing_the_result_says(request, which):
    res = request.getfixturevalue("result" if which == "plain" else "spec_result")
    before_repr, before_render, before_json = repr(res), res.render("table"), res.render("json")
    tables = _tables(res)
    assert {"res.coefficients", "res.summary", "res.forwards", "res.models[0].forwards"} <= {p for p, _ in tables}
    if which == "speculative":
        assert {"res.speculative.table", "res.speculative.decomposition"} <= {p for p, _ in tables}
    for path, get in tables:
        snapshot = get().copy(deep=True)
        frame = get()
        if len(frame.columns):
            frame[frame.columns[0]] = 99  # as a user's `res.coefficients["c"] = 99`, on every table
            if len(frame):
                frame.iloc[0, 0] = 98
        frame["added"] = 1
        pd.testing.assert_frame_equal(get(), snapshot, obj=path)
    assert (repr(res), res.render("table"), res.render("json")) == (before_repr, before_render, before_json)


def test_the_issues_own_case(result):
    c = result.coefficients["c"].copy()
    with warnings.catch_warnings():  # pandas ≥ 3 warns that this writes into a copy: which is the point
        warnings.simplefilter("ignore")
        result.coefficients["c"] = 99
    assert result.coefficients["c"].equals(c) and "99" not in repr(result)


@pytest.mark.slow
def test_results_compare_by_value(result):
    again = nsys_cc.cost_coefficient(TARGET, [DRAFT_S, DRAFT_XS], acceptance=[0.6, 0.8])
    assert again == result and not (again != result)
    assert nsys_cc.cost_coefficient(TARGET, [DRAFT_S, DRAFT_XS], acceptance=[0.6, 0.8], seed=1) != result
    assert nsys_cc.cost_coefficient(TARGET, [DRAFT_S, DRAFT_XS], acceptance=[0.6]) != result
    assert result != "a result" and result.models[0] == again.models[0]
    with pytest.raises(TypeError):
        hash(result)


# ---- the speculative section: in the notebook view, a short repr, flat frames --------------------------------------
@pytest.mark.slow
def test_the_notebook_view_has_the_speculative_section(spec_result):
    page = spec_result._repr_html_()
    spec = spec_result.speculative
    assert html.escape(speculative_text.HEADER) in page
    for title, body in speculative_text.sections(spec):
        if len(body):
            assert html.escape(title) in page
    for r in spec.table.itertuples():  # the measured speedup of each run, as the text table prints it
        assert html.escape(r.name) in page and f"{r.measured_speedup:.3g}" in page
    assert page.index("Speculative runs") < page.index("<b>Notes</b>")


@pytest.mark.slow
def test_the_speculative_repr_is_short(spec_result):
    text = repr(spec_result.speculative)
    assert len(text) < 400, text
    assert "3 run(s) of 1 draft(s)" in text and "tiny-llama-draft-xs.spec-g2 (γ 2)" in text


@pytest.mark.slow
def test_the_speculative_frames_hold_one_value_per_cell(spec_result):
    spec = spec_result.speculative
    for name in ("table", "by_metric", "decomposition", "forecast", "grid", "best", "steps"):
        frame = getattr(spec, name)
        for col in frame.columns:
            assert not frame[col].map(lambda v: isinstance(v, (list, tuple, dict, np.ndarray))).any(), (name, col)
    t = spec.table
    assert list(t.columns) == spec_tables.TABLE_COLUMNS
    # each interval right after its value, as `coefficients` has c, ci_low, ci_high
    i = list(t.columns).index("measured_speedup")
    assert list(t.columns)[i:i + 3] == ["measured_speedup", "measured_speedup_ci_low", "measured_speedup_ci_high"]
    assert {"predicted_leviathan", "predicted_cost_model", "predicted_cost_model_held_out",
            "held_out_fit_gammas"} <= set(t.columns)
    assert sorted(t["held_out_fit_gammas"]) == ["1,2", "1,3", "2,3"]
    # the JSON keeps its documented shape: intervals as [low, high], the predictions as one object
    entries = {e["name"]: e for e in json.loads(spec_result.render("json"))["speculative"]}
    for r in t.itertuples():
        e = entries[r.name]
        assert e["measured_speedup_ci95"] == [r.measured_speedup_ci_low, r.measured_speedup_ci_high]
        assert e["predicted_speedup"]["leviathan"] == r.predicted_leviathan
        assert e["predicted_speedup"]["held_out_fit_gammas"] == [int(g) for g in r.held_out_fit_gammas.split(",")]


def test_the_decomposition_comes_in_the_waterfalls_order(spec_result):
    dec = spec_result.speculative.decomposition
    assert dec["part"].cat.ordered and list(dec["part"].cat.categories) == list(spec_tables.DECOMPOSITION_PARTS)
    wide = dec.pivot(index="part", columns="name", values="factor")  # sorts its index: the waterfall's order
    assert list(wide.index) == list(spec_tables.DECOMPOSITION_PARTS)
    # the product of the factors is the measured speedup of each run
    for name, rows in dec.groupby("name"):
        product = math.prod(rows.sort_values("part")["factor"].dropna())
        measured = spec_result.speculative.table.set_index("name").at[name, "measured_speedup"]
        assert product == pytest.approx(measured, rel=1e-12)


# ---- the facade lists its API; a closed trace answers nothing ---------------------------------------------------
def test_dir_lists_the_public_api_only():
    listed = dir(nsys_cc)
    assert listed == sorted(nsys_cc.__all__)
    assert not {"annotations", "importlib", "TYPE_CHECKING", "report", "version", "views", "_report", "_LAZY",
                "trace", "analysis"} & set(listed)
    assert {"kernels", "kernel_diff", "cost_coefficient", "StepCostModel", "forecast", "__version__"} <= set(listed)
    for name in listed:
        assert getattr(nsys_cc, name) is not None
    # in a fresh process too (nothing imported yet)
    code = "import nsys_cc; print(dir(nsys_cc) == sorted(nsys_cc.__all__))"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                          cwd=REPO).stdout.strip() == "True"


def test_a_closed_trace_answers_no_query():
    with nsys_cc.open_trace(TARGET) as t:
        read = len(t.nvtx_ranges())
    assert read == raw_sql(TARGET, "SELECT count(*) FROM NVTX_EVENTS WHERE eventType IN (59, 60)")[0][0]
    assert t.closed and "closed" in repr(t)
    for query in (t.nvtx_ranges, t.kernels, t.cuda_api, t.gpu_ops, t.strings, lambda: t.columns("NVTX_EVENTS"),
                  lambda: nsys_cc.project(t, None)):
        with pytest.raises(TraceClosedError, match="the trace is closed .*open it again with nsys_cc.open_trace"):
            query()
    assert t.info().path == str(TARGET)  # what it held is still known


# ---- speedup.judge, the ranks table -------------------------------------------------------------------------------
def test_best_gamma_bounds_are_missing_where_the_speedup_bounds_are():
    j = nsys_cc.speedup.judge(c=0.1, alpha=0.8)
    assert math.isnan(j.best_speedup_low) and math.isnan(j.best_speedup_high)
    assert j.best_gamma_low is None and j.best_gamma_high is None and j.best_gamma == 6
    bounded = nsys_cc.speedup.judge(c=0.1, alpha=0.8, c_low=0.08, c_high=0.12)
    g, _ = nsys_cc.speedup.best_gamma(0.8, np.array([0.12, 0.08]))
    assert (bounded.best_gamma_low, bounded.best_gamma_high) == tuple(int(x) for x in g)
    none = nsys_cc.speedup.judge(c=float("nan"), alpha=0.8)
    assert none.best_gamma is None and none.outcome == "no-measurement"


def test_the_ranks_table_names_its_mean():
    res = nsys_cc.cost_coefficient(FIXTURES / "tp" / "tiny-llama-target.tp2.sqlite", DRAFT_S)
    assert "comm_mean_ms" in res.ranks.columns and "comm_ms" not in res.ranks.columns


# ---- vLLM's own scopes, used when the default range is absent ---------------------------------------------------
@pytest.mark.slow
def test_a_vllm_scopes_trace_is_measured_on_its_forward_scope_with_a_note():
    res = nsys_cc.cost_coefficient(SCOPES, DRAFT_XS)
    explicit = nsys_cc.cost_coefficient(SCOPES, DRAFT_XS, range_name=["gpu_model_runner: forward",
                                                                      "model_executable()"])
    pd.testing.assert_frame_equal(res.coefficients, explicit.coefficients)
    assert res.target.range_name == "gpu_model_runner: forward"
    assert len(res.target.forwards) == raw_sql(SCOPES, NAMED, ("gpu_model_runner: forward",))[0][0] == 20
    (note,) = [n for n in res.notes if "nsys_cc's plugin was off" in n]
    assert note.startswith("vllm_scopes: no 'model_executable()' ranges") and "range_name" in note
    # another name that is absent is still an error, not a silent switch
    with pytest.raises(NsysCCError, match="no NVTX range named 'forward'"):
        nsys_cc.cost_coefficient(SCOPES, DRAFT_XS, range_name="forward")


def test_the_cli_uses_vllms_scopes_too():
    r = CliRunner().invoke(cli, ["analyze", str(SCOPES), str(DRAFT_XS), "--format", "json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["range"] == ["gpu_model_runner: forward", "model_executable()"]
    assert any("choose another range with --range" in n for n in doc["notes"])


@pytest.mark.parametrize("quiet", [False, True])
def test_a_newer_report_says_no_export_done_before_its_error(tmp_path, monkeypatch, nsys_bin, quiet):
    newer_report = room_module("reliability/test_bad_input.py").newer_report

    monkeypatch.setenv("NSYS_CC_CACHE", str(tmp_path / "cache"))
    if quiet:
        monkeypatch.setenv("NSYS_CC_QUIET", "1")
    else:
        monkeypatch.delenv("NSYS_CC_QUIET", raising=False)
    bad = newer_report(tmp_path / "newer.nsys-rep")
    r = CliRunner().invoke(cli, ["info", str(bad)])
    assert r.exit_code == 2
    lines = r.stderr.strip().splitlines()
    assert not [ln for ln in lines if "done" in ln], lines
    assert lines[-1].startswith("nsys-cc: error: ") and "was written by nsys 2024.6.2" in lines[-1]
    assert len(lines) == (1 if quiet else 2)



# ---- wrong numbers, silently ----------------------------------------------------------------------------------------
INTERLEAVED = FIXTURES / "interleaved"
ISPEC = INTERLEAVED / "spec"
SPEC_LABELS = ["tiny-llama-target", "tiny-llama-draft-xs", *[f"tiny-llama-draft-xs.spec-g{g}" for g in (1, 2, 3)]]
RAW_RANGES = ("SELECT coalesce(e.text, s.value), e.start, e.\"end\" FROM NVTX_EVENTS e "
              "LEFT JOIN StringIds s ON s.id = e.textId WHERE e.eventType = 59 ORDER BY e.start")


def _measured_drafts(sqlite, label: str) -> int:
    """Draft-model forwards of engine `label` outside warm-up, from the raw rows: `draft_model_executable()` ranges
    that start inside one of its `nsys_cc:engine` windows and inside an `nsys_cc:iteration` range."""
    rows = raw_sql(sqlite, RAW_RANGES)
    windows = [(s, e) for n, s, e in rows if n == f"nsys_cc:engine {label}"]
    iters = [(s, e) for n, s, e in rows if n == "nsys_cc:iteration"]
    return sum(1 for n, s, _ in rows if n == "draft_model_executable()" and any(a <= s <= b for a, b in windows)
               and any(a <= s <= b for a, b in iters))


def _spec_engines():
    return [spec_runs.SpecEngine(label, "tiny-llama-draft-xs", g) for g, label in zip((1, 2, 3), SPEC_LABELS[2:])]


@pytest.mark.slow
def test_an_interleaved_runs_speculative_engines_are_measured_in_place_by_the_library():
    # cost_coefficient(R, [R] * 4, engines=labels) said "holds no draft-model forward ranges"
    trace = ISPEC / "run-1" / "trace.sqlite"
    res = nsys_cc.cost_coefficient(trace, [trace] * 4, engines=SPEC_LABELS)
    assert [m.name for m in res.models] == SPEC_LABELS[:2]  # the speculative engines are no plain drafts
    assert res.speculative is not None
    steps = res.speculative.steps
    for label in SPEC_LABELS[2:]:
        measured = int(steps.loc[steps["run"] == label, "draft_forwards"].sum())
        assert measured == _measured_drafts(trace, label) > 0
    # the same figures as the CLI's reader of a run's folder (spec_runs.read_run, its own read of the trace)
    direct = spec_runs.analyze_runs([(trace, ISPEC / "run-1")], SPEC_LABELS[0], _spec_engines(),
                                        c_standalone=spec_mod.standalone_c(res.coefficients))
    pd.testing.assert_frame_equal(res.speculative.table, direct.table)
    # each engine's own counters (run-1/<label>.metrics.json), not "α inferred from the tokens per step"
    assert not [n for n in res.speculative.notes if "no metrics dump" in n]


@pytest.fixture(scope="module")
def spec_runs_result():
    """The two interleaved speculative runs, written out the long way (each trace once per engine)."""
    runs = [[ISPEC / f"run-{k}" / "trace.sqlite"] * 5 for k in (1, 2)]
    return nsys_cc.cost_coefficient_runs(runs, names=SPEC_LABELS, engines=[SPEC_LABELS] * 2)


@pytest.mark.slow
def test_interleaved_runs_with_speculative_engines_pool_them_as_the_cli_does(spec_runs_result):
    # cost_coefficient_runs treated the speculative engines as plain drafts (c 1.02 / 0.891 / 0.834, no .speculative)
    runs = [[ISPEC / f"run-{k}" / "trace.sqlite"] * 5 for k in (1, 2)]
    res = spec_runs_result
    assert [m.name for m in res.models] == SPEC_LABELS[:2] and res.speculative is not None
    plain = nsys_cc.cost_coefficient_runs([r[:2] for r in runs], names=SPEC_LABELS[:2],
                                          engines=[SPEC_LABELS[:2]] * 2)
    pd.testing.assert_frame_equal(res.coefficients, plain.coefficients)
    direct = spec_runs.analyze_runs([(ISPEC / f"run-{k}" / "trace.sqlite", ISPEC / f"run-{k}") for k in (1, 2)],
                                        SPEC_LABELS[0], _spec_engines(),
                                        c_standalone=spec_mod.standalone_c(res.coefficients, res.runs))
    pd.testing.assert_frame_equal(res.speculative.table, direct.table)
    pd.testing.assert_frame_equal(res.speculative.by_metric, direct.by_metric)
    assert any("2 runs give no interval" in n for n in res.speculative.notes)


PLAIN_LABELS = ["tiny-llama-target", "tiny-llama-draft-s", "tiny-llama-draft-xs"]
PLAIN_RUNS = [INTERLEAVED / f"run-{k}" / "trace.sqlite" for k in (1, 2, 3)]


def _long_way(labels=PLAIN_LABELS):
    return nsys_cc.cost_coefficient_runs([[t] * len(labels) for t in PLAIN_RUNS], names=labels,
                                         engines=[labels] * len(PLAIN_RUNS))


@pytest.fixture(scope="module")
def long_way():
    """The demo-like three interleaved runs, written out the long way (each trace once per engine)."""
    return _long_way()


@pytest.fixture(scope="module")
def interleaved_result():
    """The same runs' profile directory, given as it is."""
    return nsys_cc.cost_coefficient_runs(INTERLEAVED)


def _decode_forwards(sqlite, label: str) -> int:
    """Measured decode forwards of engine `label`, from the raw rows: forward ranges of one token per sequence
    (payload 2 = the batch) inside its windows and inside an iteration range."""
    rows = raw_sql(sqlite, RAW_RANGES.replace("e.\"end\"", "e.\"end\", e.int64Value"))
    windows = [(s, e) for n, s, e, _ in rows if n == f"nsys_cc:engine {label}"]
    iters = [(s, e) for n, s, e, _ in rows if n == "nsys_cc:iteration"]
    return sum(1 for n, s, _, p in rows if n == "model_executable()" and p == 2
               and any(a <= s <= b for a, b in windows) and any(a <= s <= b for a, b in iters))


def test_a_flat_list_of_interleaved_runs_is_refused_with_names_that_are_not_their_engines():
    # it was read as ONE run: run-1 the target, run-2 and run-3 the drafts, each trace whole (c 1.02 and 1.07)
    with pytest.raises(InputError, match=r"^names: 't', 'ds', 'dxs' are not an engine of these runs") as err:
        nsys_cc.cost_coefficient_runs(PLAIN_RUNS, names=["t", "ds", "dxs"])
    assert err.value.param == "names"
    assert "'tiny-llama-target', 'tiny-llama-draft-s', 'tiny-llama-draft-xs'" in str(err.value)
    assert "runs=[[trace] * 3 for each run] with engines=" in str(err.value)


@pytest.mark.slow
def test_interleaved_runs_given_as_they_are_are_each_one_run_of_every_model(long_way):
    assert nsys_cc.cost_coefficient_runs(PLAIN_RUNS) == long_way  # their traces, a flat list
    assert sorted(set(long_way.runs["run"])) == sorted(set(long_way.models[0].forwards["run"])) and len(
        set(long_way.runs["run"])) == 3
    per_run = long_way.runs[(long_way.runs["draft"] == "tiny-llama-draft-s") & (long_way.runs["phase"] == "decode")
                            & (long_way.runs["metric"] == "wall")]
    assert list(per_run["n_target"]) == [_decode_forwards(t, "tiny-llama-target") for t in PLAIN_RUNS]


@pytest.mark.slow
def test_a_profile_directory_of_interleaved_runs_is_read_as_it_is(long_way, interleaved_result):
    assert interleaved_result == long_way  # the directory that holds them


@pytest.mark.slow  # the same reader as the traces and the directory above, given another way: 2 analyses more
def test_interleaved_run_folders_and_names_choosing_engines(long_way):
    assert nsys_cc.cost_coefficient_runs([t.parent for t in PLAIN_RUNS]) == long_way  # their run folders
    # names choose the engines (target first)
    two = ["tiny-llama-target", "tiny-llama-draft-xs"]
    assert nsys_cc.cost_coefficient_runs(PLAIN_RUNS, names=two) == _long_way(two)


@pytest.mark.slow  # the directory's reader is the one the quick test above checks on the plain runs
def test_a_profile_directory_of_speculative_runs_is_read_as_it_is(spec_runs_result):
    res = nsys_cc.cost_coefficient_runs(ISPEC)
    assert [m.name for m in res.models] == SPEC_LABELS[:2]
    assert list(res.speculative.table["name"]) == SPEC_LABELS[2:]
    assert res == spec_runs_result


def test_interleaved_and_plain_traces_mixed_in_runs_are_refused():
    with pytest.raises(InputError, match="holds every model of one interleaved run but .* holds no engine") as err:
        nsys_cc.cost_coefficient_runs([PLAIN_RUNS[0], TARGET])
    assert err.value.param == "runs"
    with pytest.raises(InputError, match="is a profile's output directory: give it alone"):
        nsys_cc.cost_coefficient_runs([ISPEC, INTERLEAVED])


@pytest.mark.slow
def test_a_draft_slower_than_its_target_gets_a_note():
    # target and draft swapped: c = 6.68 and not a word
    swapped = nsys_cc.cost_coefficient(DRAFT_XS, TARGET)
    decode = ("SELECT e.\"end\" - e.start FROM NVTX_EVENTS e LEFT JOIN StringIds s ON s.id = e.textId "
              "WHERE e.eventType = 59 AND coalesce(e.text, s.value) = 'model_executable()' AND e.int64Value = 2 "
              "AND e.start > (SELECT max(w.\"end\") FROM NVTX_EVENTS w LEFT JOIN StringIds ws ON ws.id = w.textId "
              "WHERE coalesce(w.text, ws.value) = 'nsys_cc:warmup')")
    c = (statistics.median(d for (d,) in raw_sql(TARGET, decode))
         / statistics.median(d for (d,) in raw_sql(DRAFT_XS, decode)))
    assert c > 1
    row = swapped.coefficients.query("phase == 'decode' and metric == 'wall'").iloc[0]
    assert row["c_forward"] == pytest.approx(c, rel=1e-9)  # the forwards' c, as SQL has it
    (note,) = [n for n in swapped.notes if "cannot be faster" in n]
    # the note gives the headline c: the token's (forward + logits + sampling), more than 1 as the forwards' is
    assert row["c"] > 1 and note.startswith(f"tiny-llama-target: c = {row['c']:.3g} (decode, wall-clock)")
    assert "give its trace first" in note
    assert not [n for n in nsys_cc.cost_coefficient(TARGET, DRAFT_XS).notes if "cannot be faster" in n]


# ---- the other calls that misled ------------------------------------------------------------------------------------
@pytest.mark.slow
def test_runs_take_a_range_per_model_as_cost_coefficient_does():
    # range_name=[…] raised TypeError (unhashable list) although documented "as for cost_coefficient"
    two = ["gpu_model_runner: forward", "model_executable()"]
    runs = nsys_cc.cost_coefficient_runs([[SCOPES, DRAFT_XS]], names=["t", "d"], range_name=two)
    pd.testing.assert_frame_equal(runs.coefficients,
                                  nsys_cc.cost_coefficient(SCOPES, DRAFT_XS, names=["t", "d"], range_name=two)
                                  .coefficients)
    by_label = nsys_cc.cost_coefficient_runs([[SCOPES, DRAFT_XS]], names=["t", "d"],
                                             range_name={"t": "gpu_model_runner: forward"})
    assert by_label == runs
    with pytest.raises(InputError, match="range_name has 3 names for 2 traces") as err:
        nsys_cc.cost_coefficient_runs([[SCOPES, DRAFT_XS]], names=["t", "d"], range_name=[*two, "x"])
    assert err.value.param == "range_name"


@pytest.mark.parametrize("param, value", [("skip_ranges", "3"), ("skip_ranges", 2.5), ("skip_ranges", True),
                                          ("output_len", "4"), ("output_len", 4.0)])
def test_a_count_that_is_not_a_whole_number_is_refused(param, value):
    # "3" raised TypeError; 2.5 was taken ("dropped the first 2.5 of 20 ranges")
    with pytest.raises(InputError, match=rf"^{param} must be a whole number ≥ [01] \(an int\), not ") as err:
        nsys_cc.cost_coefficient(TARGET, DRAFT_S, **{param: value})
    assert err.value.param == param
    with pytest.raises(InputError, match=rf"^{param} must be a whole number"):
        nsys_cc.kernels(TARGET, **{param: value})


@pytest.mark.slow
def test_a_numpy_whole_number_is_a_count():
    # once, not in each refused case above (two analyses each, the same for every case)
    assert nsys_cc.cost_coefficient(TARGET, DRAFT_S, skip_ranges=np.int64(8)) == nsys_cc.cost_coefficient(
        TARGET, DRAFT_S, skip_ranges=8)


@pytest.mark.slow
def test_render_takes_a_format_in_any_case_or_says_which_there_are(result):
    # "JSON", "md", "html" and None silently gave the text table
    assert result.render("JSON") == result.render("json") and json.loads(result.render("Json"))["coefficients"]
    assert result.render("md") == result.render("markdown") != result.render("table")
    assert result.render("html") == result._repr_html_()
    for bad in (None, "xml", 3):
        with pytest.raises(InputError, match=r"^fmt must be one of table, markdown, csv, json, html") as err:
            result.render(bad)
        assert err.value.param == "fmt"


def test_phase_rows_of_a_phase_that_does_not_exist_is_refused_as_kernels_refuses_it(result):
    with pytest.raises(InputError) as rows:
        result.target.phase_rows("Decode")
    with pytest.raises(InputError) as kern:
        nsys_cc.kernels(TARGET, phase="Decode")
    assert str(rows.value) == str(kern.value) == (
        "phase must be one of all, prefill, decode, verify, mixed, not 'Decode'")
    assert len(result.target.phase_rows("decode")) == result.coefficients.query("phase == 'decode'")["n_target"].iloc[0]


@pytest.mark.slow
def test_range_name_none_is_the_default_range_not_a_range_named_none(result):
    # it became the range 'None'
    assert nsys_cc.cost_coefficient(TARGET, [DRAFT_S, DRAFT_XS], acceptance=[0.6, 0.8], range_name=None) == result
    assert nsys_cc.cost_coefficient(SCOPES, DRAFT_XS, range_name=None).target.range_name == "gpu_model_runner: forward"
    assert nsys_cc.cost_coefficient_runs([[TARGET, DRAFT_S]], range_name=None) == nsys_cc.cost_coefficient_runs(
        [[TARGET, DRAFT_S]])
    with warnings.catch_warnings():  # a CPU trace: no GPU operation (said by a warning, test_an_empty_kernel_…)
        warnings.simplefilter("ignore", nsys_cc.errors.NsysCCWarning)
        pd.testing.assert_frame_equal(nsys_cc.kernels(TARGET, range_name=None), nsys_cc.kernels(TARGET))


def test_trace_paths_given_wrong_are_one_error_naming_the_parameter(tmp_path, result):
    with pytest.raises(InputError, match=r"^path: expected a trace path \(str or os.PathLike\), not NoneType None$"):
        nsys_cc.open_trace(None)
    with nsys_cc.open_trace([TARGET]) as one, nsys_cc.open_trace(TARGET) as t:
        pd.testing.assert_frame_equal(one.nvtx_ranges(), t.nvtx_ranges())
        # project takes a path as kernels does
        pd.testing.assert_frame_equal(nsys_cc.project(TARGET), nsys_cc.project(t))
    with pytest.raises(InputError, match=r"^trace: give an open Trace \(open_trace\) or a trace's path, not int"):
        nsys_cc.project(5)
    with pytest.raises(InputError, match="no such file"):
        nsys_cc.project(tmp_path / "x.sqlite")
    for call in (lambda: result.write_report(None), lambda: nsys_cc.write_report(result, None)):
        with pytest.raises(InputError, match=r"^out_dir: give the report directory's path, not NoneType") as err:
            call()
        assert err.value.param == "out_dir"


def test_a_result_is_unequal_to_anything_that_is_not_a_result(result):
    # res == res.coefficients raised from pandas
    assert (result == result.coefficients) is False  # (the other way round is pandas' own ==)
    assert result != "result" and result != result.target and result.target != result


def test_the_speculative_models_handed_out_are_the_callers_own(spec_result):
    models = spec_result.speculative.models
    assert models and list(models) == ["tiny-llama-draft-xs"]
    models.clear()
    assert list(spec_result.speculative.models) == ["tiny-llama-draft-xs"]
    assert "models: tiny-llama-draft-xs" in repr(spec_result.speculative)


def test_a_narrowed_read_holds_the_names_it_read_only():
    # the categoricals carried every name of the trace (value_counts() printed them all at 0)
    with nsys_cc.open_trace(TARGET) as t:
        every = raw_sql(TARGET, "SELECT count(DISTINCT coalesce(e.text, s.value)) FROM NVTX_EVENTS e LEFT JOIN "
                                "StringIds s ON s.id = e.textId WHERE e.eventType IN (59, 60)")[0][0]
        assert len(t.nvtx_ranges()["name"].cat.categories) == every > 1
        ranges = t.nvtx_ranges(names="model_executable()")
        assert ranges["name"].value_counts().to_dict() == {"model_executable()": 20}
        assert list(ranges["qualified_name"].cat.categories) == ["model_executable()"]
        # the push/pop or start/end column is not hidden behind DataFrame.style
        assert "style" not in ranges.columns and set(ranges.range_style) == {"push/pop"}


@pytest.mark.slow
def test_an_open_trace_is_taken_where_a_trace_path_is(result):
    # cost_coefficient refused the open Trace that kernels takes
    with nsys_cc.open_trace(TARGET) as t:
        assert nsys_cc.cost_coefficient(t, [DRAFT_S, DRAFT_XS], acceptance=[0.6, 0.8]) == result
        assert len(t.nvtx_ranges()) > 0  # left open


@pytest.mark.slow
def test_a_metrics_dump_for_no_trace_given_is_refused():
    runs = [SPEC / f"tiny-llama-draft-xs.spec-g{g}.sqlite" for g in (1, 2, 3)]
    given = [SPEC / "tiny-llama-draft-xs.sqlite", *runs]
    with pytest.raises(InputError, match=r"^spec_metrics: '.*nope.sqlite' is neither a trace given") as err:
        nsys_cc.cost_coefficient(SPEC / "tiny-llama-target.sqlite", given,
                                 spec_metrics={SPEC / "nope.sqlite": runs[0].with_suffix(".metrics.json")})
    assert err.value.param == "spec_metrics"
    # a dump given by a model's label is that model's: the γ = 3 run given the γ = 1 run's dump says γ = 1
    label = "tiny-llama-draft-xs.spec-g3"
    other = SPEC / "tiny-llama-draft-xs.spec-g1.metrics.json"
    by_label = nsys_cc.cost_coefficient(SPEC / "tiny-llama-target.sqlite", given, spec_metrics={label: other})
    by_path = nsys_cc.cost_coefficient(SPEC / "tiny-llama-target.sqlite", given, spec_metrics={runs[2]: other})
    assert by_label == by_path
    assert any(f"{label}: its label says γ = 3, the run used γ = 1" in n for n in by_label.speculative.notes)


@pytest.mark.slow
@pytest.mark.public
def test_a_default_phase_told_apart_by_inference_is_said_where_it_is_seen(public_dir):
    # kernels() chose 'decode' (63 ranges) where kernel_diff() compared 'all' (64), the reason only in .attrs
    trace = public_dir / "Sh1mwww__llama3-inference__real_inference_simulation.sqlite"
    with pytest.warns(nsys_cc.errors.NsysCCWarning, match=r"phase 'decode' \(63 of 64 kept ranges\) was told apart "
                                                          r"by inference"):
        alone = nsys_cc.kernels(trace, range_name="layer_0_computation")
    count = raw_sql(trace, NAMED, ("layer_0_computation",))[0][0]
    assert (alone.attrs["phase"], alone.attrs["ranges"], count) == ("decode", 63, 64)
    with pytest.warns(nsys_cc.errors.NsysCCWarning, match=r"compared on phase 'all' \(64 ranges\), the phase both "
                                                          r"sides have; on its own its phase would be 'decode'"):
        diff = nsys_cc.kernel_diff(trace, range_name="layer_0_computation", range_name_b="layer_1_computation")
    assert diff.attrs["a_ranges"] == 64 and any("on its own" in n for n in diff.attrs["notes"])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        nsys_cc.kernels(trace, range_name="layer_0_computation", phase="all")  # chosen: nothing to say


def test_an_empty_kernel_table_says_why():
    with pytest.warns(nsys_cc.errors.NsysCCWarning, match=r"^no GPU operation in these ranges, so nothing to list "
                                                          r"\(tiny-llama-target: no CUDA tables in the trace"):
        diff = nsys_cc.kernel_diff(TARGET, DRAFT_S)
    assert diff.empty and any("no GPU operation" in n for n in diff.attrs["notes"])


def test_a_report_with_its_export_beside_it_is_not_exported_again(tmp_path, monkeypatch):
    # as nsys stats does: X.sqlite beside X.nsys-rep, made from it and not older, is read instead of exporting again
    from nsys_cc.trace import reader

    exported = []
    monkeypatch.setattr(reader, "export_report", lambda p, **k: exported.append(p) or TARGET)
    report = tmp_path / "tiny-llama-target.nsys-rep"
    export = tmp_path / "tiny-llama-target.sqlite"
    shutil.copyfile(VLLM / report.name, report)
    shutil.copyfile(TARGET, export)  # its export: its EXPORT_META_DATA names tiny-llama-target.nsys-rep
    os.utime(report, (1_000_000_000, 1_000_000_000))
    with nsys_cc.open_trace(report) as t:
        assert t.sqlite_path == export
    assert exported == []
    os.utime(export, (1_000_000_000 - 10, 1_000_000_000 - 10))  # older than the report: exported again
    with nsys_cc.open_trace(report) as t:
        assert t.sqlite_path == TARGET
    assert exported == [report]
    other = report.rename(tmp_path / "other.nsys-rep")  # other.sqlite names another report as its input
    shutil.copyfile(TARGET, tmp_path / "other.sqlite")
    exported.clear()
    with nsys_cc.open_trace(other) as t:
        assert t.sqlite_path == TARGET
    assert exported == [other]


# ---- run numbers: one count, 1 … N ----------------------------------------------------------------------------------
@pytest.mark.slow
def test_runs_are_numbered_one_way_everywhere(tmp_path, interleaved_result):
    # res.runs and runs.csv said 0…2 where the JSON, the text and the run-<k> folders said 1…3
    res = interleaved_result
    numbers = [1, 2, 3]
    assert sorted(set(res.runs["run"])) == numbers == res.target.runs
    assert sorted({r["run"] for r in res.to_dict()["runs"]}) == numbers
    assert sorted(set(res.forward_share["run"])) == numbers
    res.write_report(tmp_path, plots=False)
    assert sorted(set(pd.read_csv(tmp_path / "runs.csv")["run"])) == numbers
    text = res.render("table").split("c per run", 1)[1].split("\n\n", 2)[1]
    assert sorted({int(line.split()[2]) for line in text.splitlines()[2:]}) == numbers
    # of_run(k) is run k: run-<k>/trace.sqlite read alone (run 2: counted from 0, it would be run-3's)
    for k in (2,):
        alone = nsys_cc.cost_coefficient(PLAIN_RUNS[k - 1], [PLAIN_RUNS[k - 1]] * 2, engines=PLAIN_LABELS)
        pd.testing.assert_series_equal(res.target.of_run(k).kept["wall_ns"].reset_index(drop=True),
                                       alone.target.kept["wall_ns"].reset_index(drop=True))
    for bad in (0, 4, "1"):
        with pytest.raises(InputError, match=rf"^run {bad!r} is not one of tiny-llama-target's runs \(1, 2, 3\)$"):
            res.target.of_run(bad)


@pytest.mark.slow
def test_a_profiles_own_run_numbers_are_kept(tmp_path):
    # a profile whose run 2 failed: its runs are 1 and 3, as its folders say
    for k in (1, 3):
        shutil.copytree(INTERLEAVED / f"run-{k}", tmp_path / f"run-{k}")
    res = nsys_cc.cost_coefficient_runs(tmp_path)
    assert sorted(set(res.runs["run"])) == [1, 3] == res.target.runs


@pytest.mark.parametrize("alpha, c", [(None, 0.1), (0.8, None), ([0.8, None], 0.1)])
def test_best_gamma_of_none_is_refused_not_a_gamma_of_zero(alpha, c):
    with pytest.raises(InputError, match="must be a number"):
        nsys_cc.speedup.best_gamma(alpha, c)
    assert nsys_cc.speedup.best_gamma(0.8, 0.1)[0] >= 1  # a number is still a γ


def test_no_old_name_is_answered():
    # 0.1.0 carries no shim: no module warns of a deprecation, no CLI option is hidden, the old names are gone
    import click

    from nsys_cc.sweep.manifest import TraceSet

    package = REPO / "nsys_cc"
    assert [p.name for p in package.rglob("*.py") if "DeprecationWarning" in p.read_text()] == []
    hidden = [f"{name} {o.opts}" for name, command in cli.commands.items() for o in command.params
              if isinstance(o, click.Option) and o.hidden]
    assert hidden == []
    assert not (package / "_compat.py").exists() and not (package / "launch" / "vllm_plugin.py").exists()
    assert not hasattr(TraceSet, "range") and not hasattr(nsys_cc.Trace, "summary")
    with pytest.raises(TypeError, match="scopes"):
        nsys_cc.cost_coefficient(TARGET, DRAFT_S, scopes=["a", "b"])
