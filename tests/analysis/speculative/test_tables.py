"""The in-place speculative figures on every metric, on GPU-shaped traces: copies of the real CPU
spec-decode fixtures (fixtures/spec, fixtures/interleaved/spec) with asynchronous GPU work added by `gpu_shaped`, each
forward's GPU work known exactly. They are NOT GPU traces; they check what the analysis makes of a GPU trace.

Each target forward's GPU work is 0.8 × its wall time, each draft forward's 0.3 × (so the GPU c differs from the
wall c), spread over several launches whose kernels queue on one stream behind the previous forward's (the GPU span
then differs from the busy time). The oracle: the steps, their kinds and their forwards read by hand from the raw
NVTX rows (`test_speculative.Raw`), each forward's GPU figures from what `add_gpu_work` wrote (`Work`).
"""

from __future__ import annotations

import json
import math
import shutil
import sqlite3
import statistics

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner
from gpu_shaped import DRAFT, FORWARD, add_gpu_work, steady
from test_in_place import SPEC, Raw, trace
from test_in_place_tokens import raw_rows

import nsys_cc
from conftest import FIXTURES
from nsys_cc.analysis.speculative import pooled as spec_runs
from nsys_cc.analysis.speculative.tables import BY_METRIC_FIGURES
from nsys_cc.cli import cli

TARGET, PLAIN_DRAFT = "tiny-llama-target", "tiny-llama-draft-xs"
GAMMAS = (1, 3)
TARGET_GPU, DRAFT_GPU = 0.8, 0.3  # GPU work ÷ wall time of each target / draft forward
FIGURES = ("draft_forward_ms", "verify_ms", "decode_ms", "verify_factor", "c_in_place", "other_ms", "c_standalone")
BY_HAND = (*FIGURES, "c_in_place_forward")
ATTR = {"gpu_span": "span_ns", "kernel_sum": "kernel_sum_ns", "gpu_busy": "busy_ns"}


def _plan(rng):
    if rng.name == DRAFT:
        return steady(DRAFT_GPU, launches=2, names=(DRAFT,))(rng)
    return steady(TARGET_GPU, launches=4, names=(FORWARD,))(rng)


def spec_label(gamma):
    return f"{PLAIN_DRAFT}.spec-g{gamma}"


@pytest.fixture(scope="module")
def shaped(tmp_path_factory):
    """GPU-shaped copies of the plain target, the plain draft (its forwards at the draft's factor) and the
    speculative runs (with their metrics dumps beside): {label: GpuShaped}."""
    out = tmp_path_factory.mktemp("shaped")
    made = {TARGET: add_gpu_work(trace(TARGET), out / f"{TARGET}.sqlite", _plan),
            PLAIN_DRAFT: add_gpu_work(trace(PLAIN_DRAFT), out / f"{PLAIN_DRAFT}.sqlite",
                                      steady(DRAFT_GPU, launches=2, names=(FORWARD,)))}
    for g in GAMMAS:
        made[spec_label(g)] = add_gpu_work(trace(spec_label(g)), out / f"{spec_label(g)}.sqlite", _plan)
        shutil.copy(SPEC / f"{spec_label(g)}.metrics.json", out)
    return made


@pytest.fixture(scope="module")
def result(shaped):
    return nsys_cc.cost_coefficient(shaped[TARGET].path, [shaped[PLAIN_DRAFT].path,
                                                         *[shaped[spec_label(g)].path for g in GAMMAS]])


def _value(work, rng, metric):
    """A forward's value of `metric` in ms: its wall time, or the GPU figure `add_gpu_work` wrote for it."""
    if metric == "wall":
        return (rng[2] - rng[1]) / 1e6
    return getattr(work[(rng[0], rng[1])], ATTR[metric]) / 1e6


def by_hand(shaped, gamma, metric):
    """The by-metric figures of the γ run, from the raw rows and the known GPU work (medians, no intervals)."""
    work = {(w.range.name, w.range.start): w for s in shaped.values() for w in s.work}
    plain = Raw(str(shaped[TARGET].path))
    run = Raw(str(shaped[spec_label(gamma)].path), gamma)
    verify, decode = run.of_kind("verify"), plain.of_kind("decode")
    v = [_value(work, s[2][0], metric) for s in verify]
    drafts = [_value(work, d, metric) for s in verify for d in s[3]]
    dec = [_value(work, s[2][0], metric) for s in decode]
    other = [s[1] - _value(work, s[2][0], metric) - sum(_value(work, d, metric) for d in s[3]) for s in verify]
    d_plain = Raw(str(shaped[PLAIN_DRAFT].path)).of_kind("decode")
    c_alone = statistics.median(_value(work, s[2][0], metric) for s in d_plain) / statistics.median(dec)
    # a token's parts (logits, sampling): their wall time; no GPU work was written for them, so 0 on the GPU metrics
    parts = _parts(shaped[spec_label(gamma)].path, verify, metric)
    draft_token = [(sum(_value(work, d, metric) for d in s[3]) + parts[i][1]) / gamma for i, s in enumerate(verify)]
    v_token = [_value(work, s[2][0], metric) + parts[i][0] for i, s in enumerate(verify)]
    return {"draft_forward_ms": statistics.median(drafts), "verify_ms": statistics.median(v),
            "decode_ms": statistics.median(dec), "verify_factor": statistics.median(v) / statistics.median(dec),
            # the token's c where both runs have the target's token ranges, else the forwards' (basis "forward": the
            # tiny pair's fixtures were made before the plugin wrote them)
            "c_in_place": (statistics.median(draft_token) / statistics.median(v_token)
                           if _has_parts(shaped[spec_label(gamma)].path) and _has_parts(shaped[TARGET].path)
                           else statistics.median(drafts) / statistics.median(v)),
            "c_in_place_forward": statistics.median(drafts) / statistics.median(v),
            "other_ms": statistics.median(other), "c_standalone": c_alone}


TARGET_PARTS, DRAFT_PARTS = ("nsys_cc:logits", "nsys_cc:sample"), ("nsys_cc:draft_logits", "nsys_cc:draft_sample")


def _has_parts(path):
    return any(r[0] in TARGET_PARTS for r in raw_rows(path))


def _parts(path, steps, metric):
    """Per step (start, duration ms, …): (the target's logits + sampling, the draft's) in ms on `metric`, raw rows."""
    rows = raw_rows(path)
    out = []
    for s in steps:
        end = s[0] + s[1] * 1e6
        inside = [r for r in rows if s[0] <= r[1] <= end]
        tot = [sum((r[2] - r[1]) / 1e6 for r in inside if r[0] in names) if metric == "wall" else 0.0
               for names in (TARGET_PARTS, DRAFT_PARTS)]
        out.append(tuple(tot))
    return out


@pytest.mark.parametrize("metric", ["wall", "gpu_span", "kernel_sum", "gpu_busy"])
@pytest.mark.parametrize("gamma", GAMMAS)
def test_each_speculative_figure_on_each_metric_is_the_known_work(shaped, result, gamma, metric):
    rows = result.speculative.by_metric.set_index(["name", "metric"])
    got = rows.loc[(spec_label(gamma), metric)]
    want = by_hand(shaped, gamma, metric)
    for fig in BY_HAND:
        assert got[fig] == pytest.approx(want[fig], rel=1e-9), fig
        assert got[f"{fig}_ci_low"] <= got[fig] <= got[f"{fig}_ci_high"], fig


@pytest.mark.slow
def test_the_gpu_c_is_not_the_wall_c(shaped, result):
    """The traces make the two differ (different GPU multiples for target and draft): the check above can fail."""
    rows = result.speculative.by_metric.set_index(["name", "metric"])
    for g in GAMMAS:
        wall, busy = rows.loc[(spec_label(g), "wall")], rows.loc[(spec_label(g), "gpu_busy")]
        # the forwards' ratio scales by the factors written; the token's also holds the parts' wall time on wall
        assert busy["c_in_place_forward"] == pytest.approx(wall["c_in_place_forward"] * DRAFT_GPU / TARGET_GPU,
                                                           rel=0.02)
        assert abs(busy["c_in_place"] / wall["c_in_place"] - 1) > 0.5
        assert busy["other_ms"] > wall["other_ms"]  # the GPU idles for longer than the CPU spends outside forwards


@pytest.mark.slow
def test_other_time_on_gpu_busy_is_the_step_minus_the_known_busy_time(shaped, result):
    """On gpu_busy, outside = the time of the step the forwards' GPU work does not cover (the GPU's idle time)."""
    work = {(w.range.name, w.range.start): w for s in shaped.values() for w in s.work}
    rows = result.speculative.by_metric.set_index(["name", "metric"])
    for g in GAMMAS:
        run = Raw(str(shaped[spec_label(g)].path), g)
        idle = [s[1] - (work[(s[2][0][0], s[2][0][1])].busy_ns + sum(work[(d[0], d[1])].busy_ns for d in s[3])) / 1e6
                for s in run.of_kind("verify")]
        assert rows.loc[(spec_label(g), "gpu_busy"), "other_ms"] == pytest.approx(statistics.median(idle), rel=1e-9)


@pytest.mark.slow
def test_the_tables_figures_are_the_gpu_span_rows(shaped, result):
    """On a GPU trace the in-place figures are headlined on the GPU span, as c is (not gpu_busy), and the table — one
    row per run — carries them with a metric column (its c's were launch-time c's beside a Thm 3.8 priced
    with the GPU c): c in place, c standalone and the token's parts included."""
    spec = result.speculative
    assert spec.metric == "gpu_span"
    assert list(spec.by_metric["metric"].unique()) == ["wall", "gpu_span", "kernel_sum", "gpu_busy"]
    head = spec.by_metric[spec.by_metric["metric"] == "gpu_span"].set_index("name")
    table = spec.table.set_index("name")
    assert set(table["metric"]) == {"gpu_span"}
    for fig in (*FIGURES, "c_standalone"):
        for col in (fig, f"{fig}_ci_low", f"{fig}_ci_high"):
            assert head[col].to_dict() == table[col].to_dict(), col
    for g in GAMMAS:  # the known GPU work, and never the launch-time figure
        want, wall = by_hand(shaped, g, "gpu_span"), by_hand(shaped, g, "wall")
        row = table.loc[spec_label(g)]
        assert row["c_in_place"] == pytest.approx(want["c_in_place"], rel=1e-9) != wall["c_in_place"]
        assert row["verify_ms"] == pytest.approx(want["verify_ms"], rel=1e-9)
    c_gpu = result.coefficients.set_index(["draft", "phase", "metric"]).loc[(PLAIN_DRAFT, "decode", "gpu_span"), "c"]
    assert table["c_standalone"].tolist() == pytest.approx([c_gpu] * len(GAMMAS))
    # the waterfall and the cost model split the steps on the headline metric: its decomposition ends at the measured
    dec = spec.decomposition
    assert set(dec["metric"]) == {"wall", "gpu_span", "kernel_sum", "gpu_busy"}
    for name, rows in dec[dec["metric"] == "gpu_span"].groupby("name"):
        assert rows.sort_values("order")["after"].iloc[-1] == pytest.approx(table.loc[name, "measured_speedup"])


def test_json_carries_every_metric_of_every_run(shaped, result):
    doc = json.loads(result.render("json"))
    assert doc["speculative_metric"] == "gpu_span"
    keys = {k for f in (*BY_METRIC_FIGURES, "c_standalone") for k in (f, f"{f}_ci95")}  # the token figures too
    assert set(FIGURES) < keys
    for e in doc["speculative"]:
        assert list(e["by_metric"]) == ["wall", "gpu_span", "kernel_sum", "gpu_busy"]
        for metric, figures in e["by_metric"].items():
            assert set(figures) == keys, metric
            for f in FIGURES:
                lo, hi = figures[f"{f}_ci95"]
                assert lo <= figures[f] <= hi
        assert e["metric"] == "gpu_span"  # the entry's own figures: the headline's, true to speculative_metric
        for f in (*FIGURES, "c_standalone"):
            assert e["by_metric"]["gpu_span"][f] == e[f] and e["by_metric"]["gpu_span"][f"{f}_ci95"] == e[f"{f}_ci95"]
        want = by_hand(shaped, e["gamma"], "gpu_busy")
        assert e["by_metric"]["gpu_busy"]["c_in_place"] == pytest.approx(want["c_in_place"], rel=1e-9)


@pytest.mark.slow
def test_the_printed_table_heads_with_gpu_span_and_shows_wall_beside(shaped):
    paths = [str(shaped[k].path) for k in (TARGET, PLAIN_DRAFT, *map(spec_label, GAMMAS))]
    res = CliRunner().invoke(cli, ["analyze", *paths], env={"NSYS_CC_QUIET": "1"})
    assert res.exit_code == 0, res.output
    out = res.stdout
    assert "Speculative runs (on gpu_span: the forwards' GPU time, headline; then launch time" in out
    assert "Thm 3.8 with c standalone on gpu_span" in out
    assert ("Forecast (cost model fitted on all runs of each draft: step times (each step from its start to the end "
            "of its GPU work), split on gpu_span)") in out
    lines = out.splitlines()
    for g in GAMMAS:  # the metric column names the CPU time launch time, never wall (one name)
        rows = [line for line in lines if line.startswith(spec_label(g) + " ") and (" GPU span " in line
                                                                                     or " launch time " in line)]
        assert [("gpu_span" if " GPU span " in r else "wall") for r in rows[:2]] == ["gpu_span", "wall"]
        for row, metric in zip(rows, ("gpu_span", "wall")):  # the verify column: the known median on that metric
            assert f" {by_hand(shaped, g, metric)['verify_ms']:.3g} [" in row


@pytest.mark.slow
def test_cpu_traces_have_wall_only_and_say_so():
    res = nsys_cc.cost_coefficient(trace(TARGET), [trace(PLAIN_DRAFT), *[trace(spec_label(g)) for g in GAMMAS]])
    spec = res.speculative
    assert spec is not None
    assert spec.metric == "wall" and set(spec.by_metric["metric"]) == {"wall"}
    wall = spec.by_metric.set_index("name")
    table = spec.table.set_index("name")
    for fig in FIGURES:
        assert wall[fig].to_dict() == table[fig].to_dict(), fig
    doc = json.loads(res.render("json"))
    assert doc["speculative_metric"] == "wall" and all(list(e["by_metric"]) == ["wall"] for e in doc["speculative"])
    text = res.render("table")
    assert "Speculative runs (on wall: the forward ranges' time)" in text and " gpu_busy " not in text


# ---- interleaved runs (fixtures/interleaved/spec), GPU-shaped ------------------------------------------------------

INTERLEAVED = FIXTURES / "interleaved" / "spec"
ENGINES = [spec_runs.SpecEngine(spec_label(g), PLAIN_DRAFT, g) for g in (1, 2, 3)]


def _engine_steps(sqlite, work, label, metric):
    """Per measured step of engine `label` (raw rows): (kind, target value, [draft values], step ms), as
    test_spec_runs reads them: an `nsys_cc:step` inside a measured iteration of the engine's windows."""
    with sqlite3.connect(f"file:{sqlite}?mode=ro", uri=True) as conn:
        rows = conn.execute(
            "SELECT coalesce(e.text, s.value), e.start, e.\"end\", e.int64Value FROM NVTX_EVENTS e "
            "LEFT JOIN StringIds s ON s.id = e.textId WHERE e.eventType = 59 ORDER BY e.start").fetchall()
    windows = [(s, e) for n, s, e, _ in rows if n == f"nsys_cc:engine {label}"]
    iters = [(s, e) for n, s, e, _ in rows if n == "nsys_cc:iteration" and any(a <= s <= b for a, b in windows)]
    out = []
    for n, s, e, _ in rows:
        if n != "nsys_cc:step" or not any(a <= s <= b for a, b in iters):
            continue
        fwd = [r for r in rows if r[0] == FORWARD and s <= r[1] <= e]
        drafts = [r for r in rows if r[0] == DRAFT and s <= r[1] <= e]
        # a token's parts: their wall time; no GPU work was written for them (0 on the GPU metrics)
        parts = [sum((r[2] - r[1]) / 1e6 for r in rows if r[0] in names and s <= r[1] <= e) if metric == "wall"
                 else 0.0 for names in (TARGET_PARTS, DRAFT_PARTS)]
        if len(fwd) == 1 and fwd[0][3] <= 4:
            out.append(("decode" if fwd[0][3] == 1 else "verify", _value(work, fwd[0], metric),
                        [_value(work, d, metric) for d in drafts], (e - s) / 1e6, *parts))
    return out


@pytest.fixture(scope="module")
def interleaved(tmp_path_factory):
    out = tmp_path_factory.mktemp("interleaved")
    work = {}
    for k in (1, 2):
        run = out / f"run-{k}"
        shutil.copytree(INTERLEAVED / f"run-{k}", run)
        made = add_gpu_work(INTERLEAVED / f"run-{k}" / "trace.sqlite", run / "trace.sqlite", _plan)
        work[run / "trace.sqlite"] = {(w.range.name, w.range.start): w for w in made.work}
    runs = [(out / f"run-{k}" / "trace.sqlite", out / f"run-{k}") for k in (1, 2)]
    return runs, work, spec_runs.analyze_runs(runs, TARGET, ENGINES, output_len=6)


@pytest.mark.slow
@pytest.mark.parametrize("metric", ["gpu_busy", "wall"])
def test_pooled_interleaved_runs_carry_every_metric_pooled_run_by_run(interleaved, metric):
    runs, work, analysis = interleaved
    assert analysis.metric == "gpu_span"
    rows = analysis.by_metric.set_index(["name", "metric"])
    decode = [[x[1] for x in _engine_steps(p, work[p], TARGET, metric) if x[0] == "decode"] for p, _ in runs]
    for e in ENGINES:
        steps = [[x for x in _engine_steps(p, work[p], e.label, metric) if x[0] == "verify"] for p, _ in runs]
        verify = [[x[1] for x in s] for s in steps]
        drafts = [[d for x in s for d in x[2]] for s in steps]
        other = [[x[3] - x[1] - sum(x[2]) for x in s] for s in steps]
        v_token = [[x[1] + x[4] for x in s] for s in steps]
        d_token = [[(sum(x[2]) + x[5]) / e.gamma for x in s] for s in steps]
        row = rows.loc[(e.label, metric)]

        def med(runs):  # c pooled from its runs, by hand: each run's median, then their geometric mean
            return [float(np.median(r)) for r in runs]

        def ratio(num, den):  # each run's ratio of medians, like with like
            return [float(np.median(n) / np.median(d)) for n, d in zip(num, den)]

        for fig, per_run in (("verify_ms", med(verify)), ("draft_forward_ms", med(drafts)),
                             ("decode_ms", med(decode)), ("other_ms", med(other)),
                             ("verify_factor", ratio(verify, decode)), ("c_in_place_forward", ratio(drafts, verify)),
                             ("c_in_place", ratio(d_token, v_token)),
                             ("draft_token_ms", med(d_token)), ("verify_token_ms", med(v_token))):
            assert row[fig] == pytest.approx(math.sqrt(per_run[0] * per_run[1]), rel=1e-9), fig
            assert min(per_run) <= row[fig] * (1 + 1e-12) and row[fig] <= max(per_run) * (1 + 1e-12), fig
            # two runs: no interval (t on one degree of freedom is no bound); each run's own value in `runs`
            assert np.isnan(row[f"{fig}_ci_low"]) and np.isnan(row[f"{fig}_ci_high"]), fig
            mine = analysis.runs[(analysis.runs["name"] == e.label) & (analysis.runs["metric"] == metric)
                                 & (analysis.runs["figure"] == fig)].sort_values("run")
            assert list(mine["value"]) == pytest.approx(per_run, rel=1e-9), fig
    # the table's figures (on the headline, gpu_span) carry the same intervals across runs as its by_metric rows
    table = analysis.table.set_index("name")
    head = analysis.by_metric[analysis.by_metric["metric"] == "gpu_span"].set_index("name")
    for fig in FIGURES[:-1]:
        for col in (fig, f"{fig}_ci_low", f"{fig}_ci_high"):
            pd.testing.assert_series_equal(head[col], table[col], check_names=False, obj=col)


def test_thm_3_8_is_priced_with_the_headline_metrics_standalone_c(shaped, result):
    """On a GPU trace Thm 3.8 takes the standalone c on gpu_span (the known GPU work), not the launch-time c."""
    table = result.speculative.table.set_index("name")
    for g in GAMMAS:
        row = table.loc[spec_label(g)]
        a, c = row["alpha"], by_hand(shaped, g, "gpu_span")["c_standalone"]
        tokens = g + 1 if a == 1 else (1 - a ** (g + 1)) / (1 - a)
        assert row["predicted_leviathan"] == pytest.approx(tokens / (g * c + 1), rel=1e-9)


@pytest.mark.slow
def test_without_a_gpu_c_of_the_plain_draft_thm_3_8_falls_back_to_wall_and_says_so(shaped):
    """The plain draft profiled without CUDA data (its real CPU trace, compared as asked: a CPU trace beside GPU ones
    is refused by default): no standalone c on gpu_busy to price with."""
    res = nsys_cc.cost_coefficient(shaped[TARGET].path, [trace(PLAIN_DRAFT), shaped[spec_label(3)].path],
                                   mixed_platforms=True)
    spec = res.speculative
    assert spec is not None and spec.metric == "gpu_span"
    row = spec.table.iloc[0]
    a, c = row["alpha"], row["c_standalone"]
    assert row["predicted_leviathan"] == pytest.approx((1 - a ** 4) / (1 - a) / (3 * c + 1), rel=1e-9)
    assert any("no c on gpu_span" in n and "priced with its wall c" in n for n in spec.notes)
    busy = spec.by_metric.set_index("metric").loc["gpu_span"]
    assert np.isnan(busy["c_standalone"]) and np.isfinite(busy["c_in_place"])


def test_the_waterfall_and_the_heatmap_name_their_metric(result):
    from nsys_cc.report import speculative_plots

    spec = result.speculative
    fig = speculative_plots.waterfall(spec)
    assert ("forwards on gpu_span (their GPU time), each step from its start to the end of its GPU work"
            in fig._suptitle.get_text())
    panels = [ax for ax in fig.axes if ax.get_visible()]
    assert len(panels) == len(GAMMAS)  # one panel per run, drawn on the headline metric only
    # each panel's bars end at the run's gpu_span decomposition, not wall's
    dec = spec.decomposition
    for ax, g in zip(panels, GAMMAS):
        rows = dec[(dec["name"] == spec_label(g)) & (dec["metric"] == "gpu_span")].sort_values("order")
        labels = [t.get_text() for t in ax.texts]
        assert f"×{rows['factor'].iloc[1]:.3g}" in labels
    heat = speculative_plots.forecast_heatmap(spec, PLAIN_DRAFT)
    assert "fitted on step times split on gpu_span" in heat.axes[0].get_title()
