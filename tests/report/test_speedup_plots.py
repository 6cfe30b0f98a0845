"""Each speedup plot writes a PNG with the expected axes, colourbars and draft marks."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from nsys_cc.analysis.theory import dsi
from nsys_cc.errors import InputError
from nsys_cc.report import speedup_plots

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
SEED_DRAFTS = pd.DataFrame({"draft": ["1.1B", "160M"], "metric": ["wall", "wall"], "c": [0.688, 0.339],
                            "ci_low": [0.67, 0.32], "ci_high": [0.70, 0.36]})


def _png(path):
    data = path.read_bytes()
    return len(data) > 10_000 and data.startswith(PNG_MAGIC)


def _colourbar_labels(fig):
    return [ax.get_ylabel() for ax in fig.axes if ax.get_label() == "<colorbar>"]


@pytest.mark.slow
def test_speedup_heatmap(tmp_path):
    fig = speedup_plots.speedup_heatmap(0.0662, path=tmp_path / "heat.png")
    assert _png(tmp_path / "heat.png")
    ax = fig.axes[0]
    assert ax.get_xlabel() == "acceptance rate α" and ax.get_ylabel() == "speculative tokens γ per iteration"
    assert _colourbar_labels(fig) == ["expected speedup S over plain decoding (×)"]
    assert "c = 0.0662" in ax.get_title()
    # the dashed best-γ line is the integer argmax of Thm 3.8 at each α
    alphas, gammas = ax.get_lines()[0].get_data()
    s = lambda a, g: (1 - a ** (g + 1)) / ((1 - a) * (g * 0.0662 + 1)) if a < 1 else g + 1  # noqa: E731
    assert gammas[80] == max(range(1, 21), key=lambda g: s(alphas[80], g))


@pytest.mark.slow
def test_break_even_chart(tmp_path):
    fig = speedup_plots.break_even_chart(SEED_DRAFTS, alphas=[0.5, 0.8], path=tmp_path / "be.png")
    assert _png(tmp_path / "be.png")
    ax = fig.axes[0]
    assert ax.get_xlabel() == "cost coefficient c (draft ÷ target time per token)"
    assert ax.get_ylabel() == "acceptance rate α"
    texts = [t.get_text() for t in ax.texts]
    assert "speculation can win (α > c)" in texts and "always loses (α ≤ c)" in texts
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert "1.1B: c = 0.688, needs α > 0.688" in legend and "160M: c = 0.339, needs α > 0.339" in legend


@pytest.mark.slow
def test_dsi_heatmaps(tmp_path):
    maps = dsi.heatmaps(np.linspace(0.0, 1.0, 8), np.linspace(0.0, 1.0, 8), ks=range(1, 6), n_tokens=100, repeats=2)
    fig = speedup_plots.dsi_heatmaps(maps, SEED_DRAFTS, path=tmp_path / "dsi.png")
    assert _png(tmp_path / "dsi.png")
    panels = [ax for ax in fig.axes if ax.get_label() != "<colorbar>"]
    assert [ax.get_title() for ax in panels] == ["SI vs non-SI", "DSI vs SI", "DSI vs non-SI"]
    assert all(ax.get_xlabel() == speedup_plots.C_LABEL for ax in panels)
    assert panels[0].get_ylabel() == "acceptance rate α"
    assert _colourbar_labels(fig) == ["speedup SI vs non-SI (×)", "speedup DSI vs SI (×)", "speedup DSI vs non-SI (×)"]
    assert all({" 1.1B", " 160M"} <= {t.get_text() for t in ax.texts} for ax in panels)


def test_draft_points_accept_both_interval_namings_and_reject_others():
    v = pd.DataFrame({"draft": ["a", "a"], "metric": ["wall", "gpu_span"], "c": [0.2, 0.25],
                      "c_low": [0.1, 0.2], "c_high": [0.3, 0.3]})
    assert speedup_plots.draft_points(v)["label"].tolist() == ["a (wall)", "a (gpu_span)"]
    assert speedup_plots.draft_points(SEED_DRAFTS)["c_high"].tolist() == [0.70, 0.36]
    with pytest.raises(InputError, match="draft and c"):
        speedup_plots.draft_points(pd.DataFrame({"name": ["x"]}))
