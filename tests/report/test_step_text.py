"""`nsys_cc.report.step_text.display`: a result's engine steps by kind, batch and context as a short table — the
headline metric's medians ("Wall" on a CPU trace; on a GPU trace the GPU metric, then "Launch time"), at most
MAX_ROWS groups and a line saying how many more."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pandas as pd

from nsys_cc.report import step_text


def _steps(n: int, **metrics) -> pd.DataFrame:
    return pd.DataFrame({"model": ["m"] * n, "kind": ["decode"] * n, "batch": list(range(1, n + 1)),
                         "context": ["0–127"] * n, "steps": [4.0] * n, "tokens_median": [1234.0] + [math.nan] * (n - 1),
                         **{f"{k}_ms": v * n for k, v in metrics.items()}})


def test_a_cpu_trace_shows_its_wall_medians():
    shown, more = step_text.display(SimpleNamespace(by_step=_steps(2, wall=[1.23456]), headline="wall"))
    assert list(shown.columns) == ["Model", "Kind", "Batch", "Context (tokens)", "Steps", "Tokens", "Wall (ms)"]
    assert shown.iloc[0].tolist() == ["m", "decode", 1, "0–127", 4, "1,234", "1.235"]
    assert shown.iloc[1]["Tokens"] == "?" and more == ""


def test_a_gpu_trace_shows_its_gpu_time_then_its_launch_time():
    shown, _ = step_text.display(SimpleNamespace(by_step=_steps(1, gpu_span=[2.0], wall=[math.nan]),
                                                 headline="gpu_span"))
    assert list(shown.columns)[-2:] == ["GPU span (ms)", "Launch time (ms)"]
    assert shown.iloc[0].tolist()[-2:] == ["2.000", "–"]


def test_at_most_max_rows_groups_and_the_rest_counted():
    shown, more = step_text.display(SimpleNamespace(by_step=_steps(step_text.MAX_ROWS + 3, wall=[1.0]),
                                                    headline="wall"))
    assert len(shown) == step_text.MAX_ROWS and more == "… 3 more group(s) in result.by_step"


def test_no_engine_steps_no_table():
    shown, more = step_text.display(SimpleNamespace(by_step=pd.DataFrame(), headline="wall"))
    assert shown.empty and more == ""
