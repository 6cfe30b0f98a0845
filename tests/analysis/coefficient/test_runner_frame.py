"""A torch trace without vLLM's step annotations (a tensor-parallel rank's trace, as a real TP4 session met it): the
error names the frame that works and the rank, not only the trace's ranges ('nccl:_all_gather_base',
the one name that is no forward). The trace is the CPU torch fixture with its step annotations renamed to that NCCL
range and its `distributedInfo` made rank 0 of 4; the oracle is its raw JSON."""

from __future__ import annotations

import gzip
import json
import re

import pytest
from click.testing import CliRunner

from conftest import FIXTURES, said, unchanged
from nsys_cc.cli import cli

TARGET = FIXTURES / "torch" / "tiny-llama-target.pt.trace.json.gz"
DRAFT = FIXTURES / "torch" / "tiny-llama-draft-xs.pt.trace.json.gz"


def _rank_trace(tmp_path):
    with unchanged(TARGET):
        with gzip.open(TARGET, "rt", encoding="utf-8") as fh:
            doc = json.load(fh)
    for e in doc["traceEvents"]:
        if e.get("cat") == "user_annotation" and e["name"].startswith("execute_"):
            e["name"] = "nccl:_all_gather_base"
    doc["distributedInfo"].update(rank=0, world_size=4)
    runner = [e["name"] for e in doc["traceEvents"] if e.get("cat") == "python_function"
              and re.search(r"/gpu_model_runner\.py\(\d+\): execute_model$", e["name"])]
    path = tmp_path / "rank0.pt.trace.json"
    path.write_text(json.dumps(doc), encoding="utf-8")
    return path, runner


@pytest.mark.slow
def test_a_rank_trace_without_step_annotations_is_pointed_at_the_runner_frame(tmp_path):
    path, runner = _rank_trace(tmp_path)
    assert len(set(runner)) == 1 and len(runner) == 6
    r = CliRunner().invoke(cli, ["analyze", str(path), str(DRAFT)])
    assert r.exit_code == 2
    (line,) = said(r.stderr)
    assert "it is rank 0 of 4 of a distributed run" in line
    assert f"--range='{runner[0]}' (6 of them)" in line
    # what it suggests works: the runner frame as the forward range of this trace
    r = CliRunner().invoke(cli, ["analyze", str(path), str(DRAFT), "--range", runner[0], "--range",
                                 "execute_context_…_generation_…", "--format", "json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["models"][0]["ranges_kept"] == 6 and doc["models"][0]["trace"]["world_size"] == 4
