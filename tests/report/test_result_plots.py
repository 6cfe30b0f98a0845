"""Plots of a cost-coefficient result, built from real traces: the vLLM CPU fixtures (wall-clock only) and two public
GPU traces (GPU metrics). Figures are inspected through their axes; the PNGs through their headers."""

from __future__ import annotations

import dataclasses
import math
import struct
from pathlib import Path

import numpy as np
import pytest

import nsys_cc
from conftest import REPO
from nsys_cc.report import figure_files as figures, result_plots as plots

ROOT = REPO
VLLM = ROOT / "fixtures" / "vllm"
TARGET = VLLM / "tiny-llama-target.sqlite"
DRAFTS = [VLLM / "tiny-llama-draft-s.sqlite", VLLM / "tiny-llama-draft-xs.sqlite"]
PUBLIC = ROOT.parent / "shared" / "traces" / "public"
# Two different runs of one 2-GPU training script (before/after an MFU fix); `ncclGroupEnd` is where NCCL launches
# its kernels, so the range has GPU work in both traces.
GPU_TARGET = PUBLIC / "GindaChen__nsys-ai__mfu_2gpu_before.sqlite"
GPU_DRAFT = PUBLIC / "GindaChen__nsys-ai__mfu_2gpu_after.sqlite"
GPU_RANGE = "ncclGroupEnd"
ALPHAS = (0.6, 0.8)


@pytest.fixture(scope="module")
def cpu_result():
    return nsys_cc.cost_coefficient(str(TARGET), [str(d) for d in DRAFTS], acceptance=ALPHAS)


@pytest.fixture(scope="module")
def gpu_result():
    if not GPU_TARGET.exists() or not GPU_DRAFT.exists():
        pytest.skip(f"public GPU traces not found in {PUBLIC}")
    return nsys_cc.cost_coefficient(str(GPU_TARGET), [str(GPU_DRAFT)], names=["before", "after"],
                                    range_name=GPU_RANGE, acceptance=(0.5,))


def _png_size(path: Path) -> tuple[int, int]:
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n", f"{path.name} is not a PNG"
    return struct.unpack(">II", head[16:24])


def _texts(fig) -> str:
    """Every title, axis label and tick label of a figure, joined: what a reader sees."""
    parts = [fig.get_suptitle()]
    for ax in fig.axes:
        parts += [ax.get_title(), ax.get_xlabel(), ax.get_ylabel()]
        parts += [t.get_text() for t in ax.get_xticklabels() + ax.get_yticklabels()]
    return "\n".join(parts)


def _median_ms(result, model: str, phase: str, metric: str) -> float:
    s = result.summary
    return float(s[(s["model"] == model) & (s["phase"] == phase) & (s["metric"] == metric)]["median_ms"].iloc[0])


def _hlines(ax) -> set[float]:
    """y of the horizontal lines spanning an axis (axhline)."""
    return {round(float(line.get_ydata()[0]), 6) for line in ax.get_lines()
            if len(set(np.asarray(line.get_ydata(), dtype=float))) == 1 and line.get_xdata()[0] == 0}


@pytest.mark.public
@pytest.mark.slow  # 4 s or more on 2 cores: in `make test`, not the edit-test loop (`make check` ≤ 60 s)
def test_gpu_result_writes_every_plot_at_150_dpi(gpu_result, tmp_path):
    paths = figures.make_plots(gpu_result, tmp_path / "plots")
    names = [p.name for p in paths]
    for expected in ("forward_times.png", "coefficients.png", "time_breakdown.png", "kernel_categories.png"):
        assert expected in names
    figs = figures.make_figures(gpu_result)
    for p in paths:
        assert p.exists() and p.stat().st_size > 10_000, f"{p.name} is (nearly) empty"
        w, h = figs[p.stem].get_size_inches()
        assert _png_size(p) == (round(w * plots.DPI), round(h * plots.DPI))


@pytest.mark.slow  # 4 s or more on 2 cores: in `make test`, not the edit-test loop (`make check` ≤ 60 s)
def test_cpu_only_result_makes_no_gpu_plots(cpu_result, tmp_path):
    assert not any(m.has_cuda for m in cpu_result.models)
    names = {p.name for p in figures.make_plots(cpu_result, tmp_path)}
    assert {"forward_times.png", "coefficients.png", "time_breakdown.png"} <= names
    assert "kernel_categories.png" not in names
    assert plots.plot_kernel_categories(cpu_result) is None
    texts = _texts(plots.plot_forward_times(cpu_result)) + _texts(plots.plot_coefficients(cpu_result))
    assert "GPU" not in texts
    breakdown = plots.plot_time_breakdown(cpu_result)
    assert "CPU-only" in breakdown.get_suptitle() and "wall-clock only" in breakdown.get_suptitle()


@pytest.mark.slow
def test_forward_times_show_each_model_and_phase_in_ms(cpu_result):
    fig = plots.plot_forward_times(cpu_result)
    (ax,) = fig.axes
    assert ax.get_ylabel() == "wall-clock time per forward (ms)"
    ticks = [t.get_text() for t in ax.get_xticklabels()]
    for m in cpu_result.models:
        for phase in ("prefill", "decode"):
            n = len(m.phase_rows(phase))
            assert f"{m.name}\n{phase} (n={n})" in ticks
    medians = cpu_result.summary.query("metric == 'wall' and phase != 'all'")["median_ms"]
    assert ax.get_yscale() == ("log" if medians.max() / medians.min() > 10 else "linear")
    low, high = ax.get_ylim()
    assert low <= medians.min() and medians.max() <= high


@pytest.mark.slow
def test_coefficients_one_panel_per_phase_with_intervals_and_reference_lines(cpu_result):
    fig = plots.plot_coefficients(cpu_result)
    coef = cpu_result.coefficients
    assert {"all", "prefill", "decode"} <= set(coef["phase"])
    # `all` (the mix of both phases, with a much wider interval) is left out when prefill and decode are known.
    phases = ["prefill", "decode"]
    assert [ax.get_title() for ax in fig.axes] == [f"{p} forwards" for p in phases]
    assert "c = median draft ÷ median target token" == fig.axes[0].get_ylabel()  # c of a token, not of a forward
    assert "against tiny-llama-target" in fig.get_suptitle()
    for ax, phase in zip(fig.axes, phases):
        assert {1.0, *ALPHAS} <= _hlines(ax)
        assert [t.get_text() for t in ax.get_xticklabels()] == [d.name for d in cpu_result.drafts]
        plotted = sorted(y for line in ax.get_lines() if line.get_marker() == "o" for y in line.get_ydata())
        expected = sorted(coef[(coef["phase"] == phase) & (coef["metric"] == "wall")]["c"])
        assert plotted == pytest.approx(expected)


def test_coefficients_show_all_only_when_the_phases_are_not_split(cpu_result):
    coef = cpu_result.coefficients.query("phase == 'all'")
    fig = plots.plot_coefficients(dataclasses.replace(cpu_result, coefficients=coef))
    assert [ax.get_title() for ax in fig.axes] == ["all forwards"]
    plotted = sorted(y for line in fig.axes[0].get_lines() if line.get_marker() == "o" for y in line.get_ydata())
    assert plotted == pytest.approx(sorted(coef.query("metric == 'wall'")["c"]))


def test_nan_c_does_not_crash_and_says_so(cpu_result):
    coef = cpu_result.coefficients.assign(c=math.nan, ci_low=math.nan, ci_high=math.nan)
    fig = plots.plot_coefficients(dataclasses.replace(cpu_result, coefficients=coef, acceptance=()))
    for ax in fig.axes:
        assert not [line for line in ax.get_lines() if line.get_marker() == "o"]
        assert any("not finite" in t.get_text() for t in ax.texts)


def test_time_breakdown_cpu_only_bars_are_median_wall(cpu_result):
    fig = plots.plot_time_breakdown(cpu_result)
    for ax in fig.axes:
        phase = ax.get_title().removesuffix(" forwards")
        heights = [bar.get_height() for bar in ax.patches]
        expected = [_median_ms(cpu_result, m.name, phase, "wall") for m in cpu_result.models]
        assert heights == pytest.approx(expected)
        assert ax.get_ylabel() == "median time per forward (ms)"


@pytest.mark.slow
@pytest.mark.public
def test_gpu_plots_show_gpu_metrics(gpu_result):
    assert all(m.has_cuda for m in gpu_result.models)
    ft = plots.plot_forward_times(gpu_result)
    # on a GPU trace the GPU span heads, and the range's CPU time is named launch time, never wall-clock
    assert [ax.get_ylabel() for ax in ft.axes] == ["GPU span time per forward (ms)", "launch time per forward (ms)"]
    coef = plots.plot_coefficients(gpu_result)
    labels = [t.get_text() for t in coef.legends[0].get_texts()]
    assert {"launch time", "GPU span", "kernel sum", "GPU busy"} <= set(labels) and "wall-clock" not in labels
    assert labels.index("GPU span") < labels.index("launch time")
    assert 0.5 in _hlines(coef.axes[0])


@pytest.mark.slow
@pytest.mark.public
def test_gpu_time_breakdown_stacks_busy_idle_and_cpu(gpu_result):
    fig = plots.plot_time_breakdown(gpu_result)
    assert "CPU-only" not in fig.get_suptitle()
    ax = fig.axes[0]
    phase = ax.get_title().removesuffix(" forwards")
    busy = [b for b in ax.patches if b.get_facecolor()[:3] == pytest.approx(plots.matplotlib.colors.to_rgb("#c44e52"))]
    expected = [_median_ms(gpu_result, m.name, phase, "gpu_busy") for m in gpu_result.models]
    assert [b.get_height() for b in busy] == pytest.approx(expected)
    labels = {t.get_text() for t in fig.legends[0].get_texts()}
    assert {"GPU busy", "GPU idle inside the span", "CPU outside the GPU span (launch time − span)",
            "median launch time"} <= labels


@pytest.mark.slow
@pytest.mark.public
def test_kernel_categories_bars_match_the_category_table(gpu_result):
    fig = plots.plot_kernel_categories(gpu_result)
    cats = gpu_result.categories
    ax = fig.axes[0]
    phase = ax.get_title().removesuffix(" forwards")
    assert ax.get_xlabel() == "GPU time per forward (ms)" and ax.get_ylabel() == "kernel category"
    sub = cats[cats["phase"] == phase]
    widths = sorted(round(b.get_width(), 9) for b in ax.patches if b.get_width() > 0)
    assert widths == sorted(round(w, 9) for w in sub["time_per_forward_ms"] if w > 0)
    assert {t.get_text() for t in fig.legends[0].get_texts()} == {"before", "after"}
