"""`nsys_cc.report.token_plots.plot_token_split`: per model its forward, logits and sampling stacked (medians per
token in the decision phase), the token's median marked, each draft's c of the token beside c of the forward; no
figure without token ranges, nor when the target's token is its forward alone."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

import nsys_cc
from conftest import FIXTURES
from nsys_cc.report.token_plots import plot_token_split

VLLM = FIXTURES / "vllm"


@pytest.fixture(scope="module")
def result():
    return nsys_cc.cost_coefficient(VLLM / "tiny-llama-target.sqlite", [VLLM / "tiny-llama-draft-s.sqlite"])


@pytest.mark.slow
def test_each_models_parts_are_stacked_and_its_token_marked(result):
    fig = plot_token_split(result, {})
    ax, share = fig.axes[:2]
    assert ax.get_title() == "wall-clock" and share.get_ylabel() == "share of the token"
    decode = result.tokens.query("phase == 'decode' and metric == 'wall'").set_index("model")
    models = ["tiny-llama-target", "tiny-llama-draft-s"]
    bars = ax.patches  # forward bars of each model, then logits, then sampling
    assert [b.get_height() for b in bars[:2]] == pytest.approx(decode.loc[models, "forward_median_ms"].tolist())
    assert [b.get_y() for b in bars[2:4]] == pytest.approx(decode.loc[models, "forward_median_ms"].tolist())
    tops = [b.get_y() + b.get_height() for b in bars[4:6]]
    assert tops == pytest.approx((decode.loc[models, ["forward_median_ms", "logits_median_ms", "sample_median_ms"]]
                                  .sum(axis=1)).tolist())
    assert [s.get_height() for s in share.patches[:2]] == pytest.approx(
        (decode.loc[models, "forward_median_ms"] / decode.loc[models, ["forward_median_ms", "logits_median_ms",
                                                                        "sample_median_ms"]].sum(axis=1)).tolist())
    c = result.coefficients.query("draft == 'tiny-llama-draft-s' and phase == 'decode' and metric == 'wall'").iloc[0]
    notes = [t.get_text() for t in ax.texts]
    assert notes == ["target", f"c {c['c']:.3g}\n(forward {c['c_forward']:.3g})"]


def test_no_figure_without_token_ranges_or_with_a_forward_only_target(result):
    forward_only = result.tokens.assign(basis="forward")
    assert plot_token_split(SimpleNamespace(tokens=forward_only), {}) is None
    target_forward = result.tokens.assign(basis=lambda f: f["role"].map({"target": "forward", "draft": "token"}))
    assert plot_token_split(SimpleNamespace(tokens=target_forward, target=result.target), {}) is None
