"""γ = 0's price and the held-out verdict, against numbers worked by hand."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from nsys_cc.analysis.tune.verdict import K0Price, verdict


def test_k0_price_interpolates_in_batch_at_the_nearest_prompt_length():
    table = pd.DataFrame({"batch_size": [1, 4, 1, 4], "input_len": [128, 128, 512, 512],
                          "overhead_ms": [4.1, 5.4, 3.5, 6.0]})  # the CPU build's measurements
    k0 = K0Price.from_table(table)
    assert k0.overhead_ms(1, 128) == pytest.approx(4.1)
    assert k0.overhead_ms(2, 128) == pytest.approx(4.1 + (5.4 - 4.1) / 3)
    assert k0.overhead_ms(4, 600) == pytest.approx(6.0)  # nearest L = 512
    assert k0.overhead_ms(16, 128) == pytest.approx(5.4)  # held flat past the last B
    # plain 11.58 ms + 4.1 ms: K = 0 runs at 11.58 / 15.68 of plain decoding's speed
    assert k0.speedup(11.58, 1, 128) == pytest.approx(11.58 / 15.68)
    assert math.isnan(K0Price().speedup(11.58, 1, 128))


def test_verdicts():
    # within 10 %: consistent
    assert verdict(1.05, (1.0, 1.1), 1.0, (0.95, 1.05), 3)["verdict"] == "consistent"
    # 20 % off, intervals apart: refuted
    assert verdict(1.2, (1.15, 1.25), 1.0, (0.95, 1.05), 3)["verdict"] == "refuted"
    # 20 % off but the intervals overlap: imprecise; half-widths 0.3/1.2 = 25 % and 0.2/1.0 = 20 %: runs 3 ×
    # ((0.25 + 0.20) / 0.20)² = 15.19 → 16
    v = verdict(1.2, (0.9, 1.5), 1.0, (0.8, 1.2), 3)
    assert v["verdict"] == "imprecise" and v["intervals_overlap"] and v["runs_to_decide"] == 16
    # no interval on a side: imprecise, the runs unknown
    w = verdict(1.2, (math.nan, math.nan), 1.0, (0.95, 1.05), 2)
    assert w["verdict"] == "imprecise" and math.isnan(w["runs_to_decide"])
