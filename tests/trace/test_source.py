"""The trace contract (`nsys_cc.trace.source`): what an opened export hands out is the caller's to change.

Tables handed out by a Trace must not be the cached objects: changing a returned frame in place (a column
assigned, cells set, rows dropped) must not change what the trace or an analysis returns afterwards. Checked on
a public GPU trace (kernels, copies, NVTX ranges with a projection) against a fresh, untouched Trace.
"""

from __future__ import annotations

import pandas as pd
import pytest

from conftest import PUBLIC, unchanged
from nsys_cc.analysis.forwards.projection import project
from nsys_cc.analysis.forwards.ranges import range_table
from nsys_cc.trace import ExportTrace, Trace, TraceSource, open_trace

GPU_TRACE = PUBLIC / "Sh1mwww__llama3-inference__real_inference_simulation.sqlite"

pytestmark = [pytest.mark.public,
              pytest.mark.skipif(not GPU_TRACE.is_file(),
                                 reason=f"public traces not found at {PUBLIC} (they live outside the repository)")]


@pytest.fixture(scope="module")
def untouched():
    with unchanged(GPU_TRACE), open_trace(GPU_TRACE) as t:
        return {"gpu_ops": t.gpu_ops(), "nvtx_ranges": t.nvtx_ranges(), "cuda_api": t.cuda_api(),
                "kernels": t.kernels(), "memops": t.memops(), "project": project(t), "table": range_table(t)}


def _spoil(frame: pd.DataFrame) -> None:
    """Every way a notebook user changes a frame in place."""
    first, second = frame.columns[0], frame.columns[-1]
    numeric = [c for c in frame.columns if pd.api.types.is_integer_dtype(frame[c].dtype)]
    frame[numeric[-1]] = frame[numeric[0]]
    frame.loc[frame.index[0], numeric[0]] = -1
    frame.iloc[1, frame.columns.get_loc(numeric[-1])] = -2
    frame[second] = None
    del frame[first]
    frame.index = frame.index[::-1]  # the index and the column labels of the frame object itself
    frame.columns = [f"x{i}" for i in range(frame.shape[1])]


@pytest.mark.slow
@pytest.mark.parametrize("table", ["gpu_ops", "nvtx_ranges", "cuda_api", "kernels", "memops"])
def test_changing_a_returned_table_changes_nothing_later(untouched, table):
    with open_trace(GPU_TRACE) as t:
        _spoil(getattr(t, table)())
        pd.testing.assert_frame_equal(getattr(t, table)(), untouched[table])
        assert t.has_loaded(table)
        # The analyses that read it afterwards see the export as it is.
        pd.testing.assert_frame_equal(project(t), untouched["project"])
        pd.testing.assert_frame_equal(range_table(t), untouched["table"])


def test_the_issue_example_gpu_ops_end_set_to_start(untouched):
    with open_trace(GPU_TRACE) as t:
        g = t.gpu_ops()
        g["end_ns"] = g["start_ns"]
        proj = project(t)
    assert (proj["kernel_sum_ns"].dropna() > 0).any()
    pd.testing.assert_frame_equal(proj, untouched["project"])


def test_arrays_of_a_returned_frame_are_read_only_or_copies(untouched):
    with open_trace(GPU_TRACE) as t:
        values = t.gpu_ops()["end_ns"].to_numpy()
        try:
            values[:] = 0
        except ValueError:  # pandas ≥ 3: copy-on-write hands out read-only views
            pass
        pd.testing.assert_frame_equal(t.gpu_ops(), untouched["gpu_ops"])
        with pytest.raises(TypeError):
            t.strings()[1] = "changed"  # type: ignore[index]


def test_project_leaves_its_input_as_it_was(untouched):
    with open_trace(GPU_TRACE) as t:
        ranges = t.nvtx_ranges()
        before = ranges.copy(deep=True)
        out = project(t, ranges)
        out["start_ns"] = 0
        pd.testing.assert_frame_equal(ranges, before)


def test_the_opened_trace_meets_both_protocols():
    with open_trace(GPU_TRACE) as t:
        assert isinstance(t, ExportTrace) and isinstance(t, Trace) and isinstance(t, TraceSource)
    assert not isinstance(object(), TraceSource)
