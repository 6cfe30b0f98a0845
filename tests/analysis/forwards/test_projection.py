"""The projection's (range, op) pairs are built in bounded chunks: tiny chunks must give the same answers."""

import pandas as pd
import pytest

from nsys_cc.analysis.forwards import projection
from nsys_cc.trace import open_trace

pytestmark = [pytest.mark.public]


@pytest.mark.slow
@pytest.mark.parametrize("name", ["GindaChen__nsys-ai__mfu_2gpu_after.sqlite", "NVIDIA__Fuser__report1@8fa9ec2.sqlite"])
def test_tiny_pair_chunks_give_the_same_projection(public_dir, monkeypatch, name):
    with open_trace(public_dir / name) as trace:
        whole = projection.project(trace)
    monkeypatch.setattr(projection, "PAIR_CHUNK", 3)
    with open_trace(public_dir / name) as trace:
        chunked = projection.project(trace)
    assert whole["gpu_busy_ns"].notna().sum() >= 5
    pd.testing.assert_frame_equal(whole, chunked)
