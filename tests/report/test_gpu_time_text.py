"""One answer on a GPU trace, one name for the CPU time, on GPU-shaped torch traces (the project's
real CPU torch fixtures with known GPU work added by `gpu_shaped_kineto`, NOT GPU traces) and on the CPU fixtures.

- the verdicts a person reads (text, markdown, HTML, JSON `speedup`) rest on the headline metric alone: with α between
  the GPU c and the launch-time c, the launch-time "slows decoding down" is nowhere;
- the CPU time of a range is "launch time" wherever a person reads it on a GPU trace (tables, the token's split, the
  runs, sentences, plots), its data key stays `wall` (JSON `metric_names` maps it);
- on a CPU trace it stays wall, as before.
"""

from __future__ import annotations

import json
import re

import gpu_shaped_kineto as gsk
import pytest

import nsys_cc
from conftest import FIXTURES, unchanged
from nsys_cc.report import gpu_time_text

TORCH = FIXTURES / "torch"
TARGET = TORCH / "tiny-llama-target.pt.trace.json.gz"
DRAFT = TORCH / "tiny-llama-draft-xs.pt.trace.json.gz"


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    """A GPU-bound target (its steps' work 3× their launch time) and a launch-bound draft: their c on launch time and
    on the GPU span lie far apart."""
    out = tmp_path_factory.mktemp("gpu-time-text")
    with unchanged(TARGET):
        t = gsk.add_gpu_work(TARGET, out / "t.pt.trace.json", gsk.vllm_plan(3.0), frames=gsk.vllm_frame)
        d = gsk.add_gpu_work(TARGET, out / "d.pt.trace.json", gsk.vllm_plan(launch_bound=True),
                             frames=gsk.vllm_frame)
    first = nsys_cc.analyze(t.path, [d.path])
    c = first.coefficients.set_index(["phase", "metric"])["c"]
    c_gpu, c_launch = float(c[("decode", "gpu_span")]), float(c[("decode", "wall")])
    assert c_gpu < c_launch  # the draft's GPU idles; its launch time is most of the target's
    alpha = round((c_gpu + c_launch) / 2, 3)
    return nsys_cc.analyze(t.path, [d.path], acceptance=[alpha]), alpha, c_gpu, c_launch


@pytest.mark.slow
def test_the_verdicts_rest_on_the_gpu_span_alone(pair):
    res, alpha, c_gpu, c_launch = pair
    assert c_gpu < alpha < c_launch
    # the data keeps every metric's verdict; what a person reads is the headline's
    assert set(res.verdicts["metric"]) >= {"wall", "gpu_span"}
    for fmt in ("table", "markdown", "html"):
        text = res.render(fmt)
        assert "slows decoding down" not in text and "wall c" not in text and "launch time c" not in text, fmt
        assert len(re.findall(r"\(GPU span c, decode\)", text)) == 1, fmt
    doc = json.loads(res.render("json"))
    assert [v["metric"] for v in doc["speedup"]] == ["gpu_span"] and doc["speedup"][0]["outcome"] == "speeds-up"
    assert doc["speedup"][0]["c"] == pytest.approx(c_gpu)


@pytest.mark.slow
def test_the_cpu_time_is_named_launch_time_everywhere_a_person_reads_it(pair):
    res = pair[0]
    text = res.render("table")
    assert "Wall" not in text and "wall-clock" not in text and " wall " not in text
    header = next(line for line in text.splitlines() if line.startswith("Model "))
    assert "Launch time (ms)" in header and "c Launch time" in header
    split = text[text.index("The token's split"):].splitlines()
    rows = [line for line in split[3:] if line.startswith("t ")]
    assert rows[0].split()[2:4] == ["GPU", "span"] and any(r.split()[2:4] == ["Launch", "time"] for r in rows)
    diagnosis = next(line for line in text.splitlines() if line.startswith("* d (decode): decode:"))
    assert "launched in" in diagnosis and " wall" not in diagnosis
    doc = json.loads(res.render("json"))
    assert doc["headline_metric"] == "gpu_span" and doc["metric_names"]["wall"] == "launch time"
    assert {c["metric"] for c in doc["coefficients"]} >= {"wall", "gpu_span"}  # the data key stays


@pytest.mark.slow
def test_the_plots_name_it_launch_time(pair):
    from nsys_cc.report import result_plots, token_plots

    res = pair[0]
    coef = result_plots.plot_coefficients(res)
    labels = [t.get_text() for t in coef.legends[0].get_texts()]
    assert "GPU span" in labels and "launch time" in labels and "wall-clock" not in labels
    assert labels.index("GPU span") < labels.index("launch time")
    tok = token_plots.plot_token_split(res, dict(result_plots.STYLE))
    assert [ax.get_title() for ax in tok.axes[:2]] == ["GPU span", "launch time"]
    assert "c on GPU span:" in repr(res)


def test_the_words_per_kind_of_trace():
    assert gpu_time_text.label("wall", "gpu_span") == "Launch time" and gpu_time_text.label("wall", "wall") == "Wall"
    assert gpu_time_text.words("wall", "gpu_span") == "launch time" and gpu_time_text.words("wall", "wall") == "wall"
    assert gpu_time_text.plot_label("wall", "wall") == "wall-clock"
    assert gpu_time_text.words("gpu_span", "gpu_span") == "GPU span"


@pytest.mark.slow
def test_a_cpu_trace_keeps_wall():
    res = nsys_cc.analyze(TARGET, [DRAFT], acceptance=[0.5])
    text = res.render("table")
    header = next(line for line in text.splitlines() if line.startswith("Model "))
    assert "Wall (ms)" in header and "c Wall" in header and "Launch" not in text
    assert "(wall c, decode)" in text
    doc = json.loads(res.render("json"))
    assert doc["metric_names"]["wall"] == "wall" and {v["metric"] for v in doc["speedup"]} == {"wall"}


SPEC = TORCH / "tiny-llama-draft-xs.spec-g2.pt.trace.json.gz"


@pytest.mark.slow
def test_the_speculative_table_is_on_the_gpu_span_with_the_samplings_gpu_time(tmp_path):
    """the speculative table's c's were launch-time c's beside a Thm 3.8 priced with the GPU c, and
    its "Verify sample" a blocking copy waiting for the GPU on the CPU. Now its figures carry their metric (the
    headline), c standalone is the plain draft's GPU c, and the verify's sampling is its GPU span (oracle: the two
    sampling kernels written under each `sample_tokens` frame, launched back to back)."""
    made = {}
    with unchanged(TARGET, DRAFT, SPEC):
        for label, src in (("tiny-llama-target", TARGET), ("tiny-llama-draft-xs", DRAFT),
                           ("tiny-llama-draft-xs.spec-g2", SPEC)):
            made[label] = gsk.add_gpu_work(src, tmp_path / f"{label}.pt.trace.json", gsk.vllm_plan(1.1),
                                           frames=gsk.vllm_frame)
    res = nsys_cc.analyze(made["tiny-llama-target"].path, [made["tiny-llama-draft-xs"].path,
                                                           made["tiny-llama-draft-xs.spec-g2"].path])
    spec = res.speculative
    (row,) = spec.table.to_dict(orient="records")
    assert spec.metric == row["metric"] == "gpu_span"
    c_gpu = res.coefficients.set_index(["draft", "phase", "metric"]).loc[("tiny-llama-draft-xs", "decode", "gpu_span")]
    assert row["c_standalone"] == pytest.approx(c_gpu["c"])
    spans = {w.span_ns for w in made["tiny-llama-draft-xs.spec-g2"].work if gsk.SAMPLE_FRAME.match(w.range.name)}
    assert spans == {32_000}  # each sampling: 20 µs + 12 µs of kernels, back to back
    assert row["verify_sample_ms"] == pytest.approx(0.032)
    wall = spec.by_metric.set_index("metric").loc["wall"]
    assert row["c_in_place"] != wall["c_in_place"]
    from nsys_cc.sweep.table import from_speculative  # a sweep's tidy rows name the metric of the in-place c

    tidy = from_speculative(spec, cell="c", batch_size=1, input_len=8, target_tp=1, attempts=1)
    assert tidy["metric"].tolist() == ["gpu_span"] and tidy["c"].tolist() == [row["c_in_place"]]
    doc = json.loads(res.render("json"))
    (entry,) = doc["speculative"]
    assert doc["speculative_metric"] == entry["metric"] == "gpu_span"
    assert entry["c_in_place"] == pytest.approx(entry["by_metric"]["gpu_span"]["c_in_place"])
    text = res.render("table")
    tokens = text[text.index("Tokens in place"):]  # its GPU span row: the sampling's GPU time, not the copy's wait
    gpu_row = next(line for line in tokens.splitlines() if line.startswith("tiny-llama-draft-xs.spec-g2  2  GPU span "))
    assert " 0.0320 " in gpu_row
