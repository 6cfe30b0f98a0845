"""The documented columns (`nsys_cc.trace.frames`, shown by `help()`) are exactly the columns returned.

`help(Trace.kernels)`, `help(nsys_cc.project)` and the other table accessors list their columns from one
definition; these tests hold that definition to the frames read from real exports — the project's fixtures (made
by the real nsys 2022.4; CPU-only, so their CUDA tables are empty but still have every column) and a public GPU
trace with kernels, copies and a projection — so the documentation cannot drift from what is returned.
"""

from __future__ import annotations

import inspect
import pydoc

import pytest

import nsys_cc
from conftest import FIXTURES
from nsys_cc.analysis.forwards.projection import PROJECTION, project
from nsys_cc.trace import ExportTrace, Trace, frames, open_trace

FIXTURE_TRACES = [FIXTURES / "vllm" / "tiny-llama-target.sqlite", FIXTURES / "nvtx" / "nvtx_cases.sqlite"]
GPU_TRACE = "Sh1mwww__llama3-inference__real_inference_simulation.sqlite"


def _check_columns(path) -> dict[str, int]:
    with open_trace(path) as t:
        rows = {}
        for accessor, columns in frames.TABLES.items():
            frame = getattr(t, accessor)()
            assert list(frame.columns) == frames.names(columns), accessor
            rows[accessor] = len(frame)
        assert list(project(t).columns) == frames.names(frames.NVTX_RANGES) + frames.names(PROJECTION)
        # a narrowed read has the same columns (level and parent_id <NA> without nesting)
        some = t.nvtx_ranges(prefixes=["n", "m"], nesting=False)
        assert list(some.columns) == frames.names(frames.NVTX_RANGES)
    return rows


@pytest.mark.parametrize("path", FIXTURE_TRACES, ids=lambda p: p.name)
def test_fixture_frames_have_the_documented_columns(path):
    assert _check_columns(path)["nvtx_ranges"] > 0


@pytest.mark.public
def test_gpu_trace_frames_have_the_documented_columns(public_dir):
    rows = _check_columns(public_dir / GPU_TRACE)
    assert rows["kernels"] > 0 and rows["memops"] > 0 and rows["cuda_api"] > 0 and rows["gpu_ops"] > 0


def test_every_table_accessor_is_documented():
    # every method of the Trace protocol that returns a frame (annotations are strings: `from __future__`)
    returns_frames = {name for name, fn in inspect.getmembers(Trace, inspect.isfunction)
                      if not name.startswith("_") and fn.__annotations__.get("return") == "pd.DataFrame"}
    assert returns_frames == set(frames.TABLES)


@pytest.mark.parametrize("accessor", list(frames.TABLES))
@pytest.mark.parametrize("cls", [Trace, ExportTrace], ids=["Trace", "ExportTrace"])
def test_help_lists_every_column_with_its_unit(cls, accessor):
    text = pydoc.render_doc(getattr(cls, accessor), renderer=pydoc.plaintext)
    for c in frames.TABLES[accessor]:
        unit = f" [{c.unit}]" if c.unit else ""
        assert f"{c.name}{unit}: {c.meaning}" in " ".join(text.split()), (accessor, c.name)


def test_help_of_project_lists_the_range_and_projection_columns():
    text = " ".join(pydoc.render_doc(nsys_cc.project, renderer=pydoc.plaintext).split())
    for c in (*frames.NVTX_RANGES, *PROJECTION):
        assert f"{c.name}{f' [{c.unit}]' if c.unit else ''}: " in text, c.name
    assert "gpu_busy_ns [ns]: length of the union" in text
