"""A step's time on a GPU trace (`analysis.forwards.step_windows`): its windows projected onto the GPU, and its time
from its start (or the end of the GPU work of the steps before it) to the end of its own GPU work. The oracle: times
by hand on a few rows, and the GPU work a built H100-shaped trace wrote (`gpu_shaped_kineto.h100_vllm_trace`: not a
real run) read from its schedule."""

from __future__ import annotations

import math

import gpu_shaped_kineto as gsk
import numpy as np
import pandas as pd

from nsys_cc.analysis.forwards import step_windows
from nsys_cc.analysis.forwards.ranges import marked_ranges
from nsys_cc.contract import VLLM_STEP_RANGE
from nsys_cc.trace import open_trace


def _windows(starts, reach, kind=step_windows.WINDOW_FORWARD) -> pd.DataFrame:
    return pd.DataFrame({"name": step_windows.STEP_WINDOW, "qualified_name": step_windows.STEP_WINDOW,
                         "start_ns": starts, "payload": kind, step_windows.GPU_REACH: reach})


def test_a_step_ends_with_its_gpu_work_and_starts_after_the_work_before_it():
    start = np.array([0, 100, 200, 900])
    duration = np.array([100, 100, 100, 50])
    # step 0's GPU work runs to 150 (past step 1's start), step 1 launched none, step 2's runs to 450, step 3's to 930
    ranges = _windows(start, [150.0, math.nan, 250.0, 30.0])
    got = step_windows.step_times(ranges, start, duration, step_windows.WINDOW_FORWARD)
    # by hand: [0, 150]; [150, 200] (its CPU range's end, after step 0's work); [200, 450]; [900, 950] (CPU end later)
    assert got.tolist() == [150.0, 50.0, 250.0, 50.0]
    # windows of the other kind (a step range's) are not a forward's
    assert step_windows.step_times(ranges, start, duration, step_windows.WINDOW_RANGE) is None
    # a CPU trace: no windows projected, no such time
    assert step_windows.step_times(ranges.drop(columns=step_windows.GPU_REACH), start, duration,
                                   step_windows.WINDOW_FORWARD) is None


def test_each_forward_window_reaches_the_end_of_the_work_launched_in_it(tmp_path):
    run = gsk.h100_vllm_trace(tmp_path / "target.pt.trace.json.gz", "target", form="container")
    with open_trace(str(run.path)) as trace:
        ranges = marked_ranges(trace, None)
        found = step_windows.with_windows(trace, ranges, VLLM_STEP_RANGE)
    rows = found[found["name"] == step_windows.STEP_WINDOW]
    rows = rows[rows["payload"] == step_windows.WINDOW_FORWARD].set_index("start_ns")
    kept = [s for s in run.steps if s.kind != "empty"]  # a step without GPU work is no forward
    assert sorted(rows.index) == [s.start for s in kept]
    for step, after in zip(kept, kept[1:]):  # each window runs to the next forward; the last to its own end
        assert rows.loc[step.start, "end_ns"] == after.start
        assert rows.loc[step.start, step_windows.GPU_REACH] == max(o[1] for o in step.window) - step.start
