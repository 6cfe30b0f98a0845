"""c on real public GPU traces: the per-forward GPU numbers behind it are nsys's own.

`nsys stats -r nvtxgpuproj` (run now, on copies) gives each range's projected duration; the test takes the range name
with the most projected instances common to both traces, asks nsys_cc for c on it, and checks every per-forward GPU
span against nsys's row for the same range (same start, thread) and c(gpu_span) against the ratio of nsys's medians.
"""

from __future__ import annotations

import re
import shutil
import subprocess

import numpy as np
import pandas as pd
import pytest

from conftest import unchanged
from nsys_cc import cost_coefficient
from nsys_cc.report import sentence_text

pytestmark = [pytest.mark.public, pytest.mark.nsys]

PAIR = ("MohanadOdema__DLProf__nsys_profile.sqlite", "MohanadOdema__DLProf__w_Relu_nsys_profile.sqlite")


@pytest.fixture(scope="module")
def nsys_proj(public_dir, nsys_bin, tmp_path_factory):
    out = {}
    for name in PAIR:
        src = public_dir / name
        work = tmp_path_factory.mktemp("stats")
        with unchanged(src):
            shutil.copyfile(src, work / name)
        subprocess.run([nsys_bin, "stats", "-q", "-r", "nvtxgpuproj", "-f", "csv", "-o", str(work / "s"),
                        str(work / name)], check=True, capture_output=True, timeout=600)
        out[name] = pd.read_csv(work / "s_nvtxgpuproj.csv")
    return out


def test_gpu_spans_and_c_agree_with_nsys_stats(public_dir, nsys_proj):
    a, b = (nsys_proj[n] for n in PAIR)
    common = set(a["Name"]) & set(b["Name"])
    counts = a[a["Name"].isin(common)].groupby("Name").size()
    name = counts.idxmax()
    assert counts.max() >= 5, "the pair should share a range with several GPU projections"
    with unchanged(*(public_dir / n for n in PAIR)):
        res = cost_coefficient(str(public_dir / PAIR[0]), [str(public_dir / PAIR[1])], range_name=name,
                               skip_ranges=0)
    for model, stats in zip(res.models, (a, b)):
        assert model.has_cuda
        ours = model.forwards.dropna(subset=["gpu_span_ns"])
        theirs = stats[stats["Name"] == name].set_index("Orig Start (ns)")
        assert len(ours) == len(theirs)
        for row in ours.itertuples():
            nsys_row = theirs.loc[row.start_ns]
            assert row.gpu_span_ns == nsys_row["Projected Duration (ns)"]
            assert row.tid == nsys_row["TID"]
    c = res.coefficients.query("phase == 'all' and metric == 'gpu_span'").iloc[0]
    expected = (np.median(b.loc[b["Name"] == name, "Projected Duration (ns)"])
                / np.median(a.loc[a["Name"] == name, "Projected Duration (ns)"]))
    assert c["c"] == pytest.approx(expected, rel=1e-12)
    assert c["ci_low"] <= c["c"] <= c["ci_high"]
    # a GPU trace gets every metric, and the kernel breakdown covers the forwards' kernels
    assert set(res.coefficients["metric"]) == {"wall", "gpu_span", "kernel_sum", "gpu_busy"}
    assert not res.kernel_summary.empty and set(res.kernel_summary["model"]) == {m.name for m in res.models}


def test_diagnosis_explains_the_draft_with_gpu_numbers(public_dir, nsys_proj):
    a, b = (nsys_proj[n] for n in PAIR)
    name = a[a["Name"].isin(set(b["Name"]))].groupby("Name").size().idxmax()
    res = cost_coefficient(str(public_dir / PAIR[0]), [str(public_dir / PAIR[1])], range_name=name, skip_ranges=0)
    row = res.diagnosis.iloc[0]
    text, phase = sentence_text.diagnosis_text(res, row), row["phase"]
    assert "per category, draft vs target ms per forward" in text and "Top kernels:" in text
    # The busy share is the draft's median GPU busy over its median GPU span in the diagnosed phase (the
    # span is the base, not the launch time): the span from nsys's own projection, busy per forward from nsys_cc
    # (checked against the raw CUDA rows in test_projection_public).
    spans = b[b["Name"] == name].set_index("Orig Start (ns)")["Projected Duration (ns)"]
    rows = res.drafts[0].phase_rows(phase)
    share = np.median(rows["gpu_busy_ns"].dropna()) / np.median([spans[s] for s in rows["start_ns"] if s in spans])
    assert row["busy_share"] == pytest.approx(share, rel=1e-12)
    assert f"({share:.0%})" in text
    # The class the documented thresholds give (< 50 % launch-bound, < 80 % partly, else GPU-bound), named first.
    expected = "launch-bound" if share < 0.5 else "partly launch-bound" if share < 0.8 else "GPU-bound"
    assert row["boundness"] == expected
    assert re.findall(r"partly launch-bound|launch-bound|GPU-bound", text)[0] == expected
