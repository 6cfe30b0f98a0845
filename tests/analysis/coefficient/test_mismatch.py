"""What differs between the traces, said: the cases a real session met — a CPU export paired with
an H100 trace, a B200 TP8 prefill-only trace paired with H100 decodes, the speculative trace given as the target — on
the public B200 trace and GPU-shaped copies of the CPU torch fixtures (`gpu_shaped_kineto`: NOT GPU traces; their
`deviceProperties` say one H100). The oracle for each side is its raw JSON (`deviceProperties`, `distributedInfo`)."""

from __future__ import annotations

import gzip
import json

import gpu_shaped_kineto as gsk
import pytest
from click.testing import CliRunner

import nsys_cc
from conftest import FIXTURES, PUBLIC, said, unchanged
from nsys_cc.cli import cli
from nsys_cc.errors import InputError

TORCH = FIXTURES / "torch"
TARGET, DRAFT = TORCH / "tiny-llama-target.pt.trace.json.gz", TORCH / "tiny-llama-draft-xs.pt.trace.json.gz"
SPEC = TORCH / "tiny-llama-draft-xs.spec-g2.pt.trace.json.gz"
B200 = PUBLIC / "AMD-AGI__TraceLens__b200_eager_trace.pt.trace.json.gz"


@pytest.fixture(scope="module")
def h100(tmp_path_factory):
    out = tmp_path_factory.mktemp("h100")
    made = {}
    with unchanged(TARGET, DRAFT, SPEC):
        for label, src in (("target", TARGET), ("draft", DRAFT), ("spec", SPEC)):
            made[label] = gsk.add_gpu_work(src, out / f"{label}.pt.trace.json", gsk.vllm_plan(1.1),
                                           frames=gsk.vllm_frame).path
    return made


def _raw(path):
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as fh:
        return json.load(fh)


@pytest.mark.slow
def test_a_cpu_trace_paired_with_a_gpu_trace_is_refused_unless_asked_for(h100):
    r = CliRunner().invoke(cli, ["analyze", str(h100["target"]), str(DRAFT)])
    assert r.exit_code == 2
    (line,) = said(r.stderr)
    assert line.startswith("nsys-cc: error: target is a GPU trace (NVIDIA H100 80GB HBM3) and tiny-llama-draft-xs a "
                           "CPU trace") and "--mixed-platforms" in line
    with pytest.raises(InputError) as err:
        nsys_cc.analyze(h100["target"], [DRAFT])
    assert err.value.param == "mixed_platforms"
    res = nsys_cc.analyze(h100["target"], [DRAFT], mixed_platforms=True)
    row = res.mismatches.set_index("kind").loc["platform"]
    assert (row["target_value"], row["value"]) == ("GPU", "CPU")
    assert any(n.startswith("warning: target is a GPU trace") for n in res.notes)
    doc = json.loads(res.render("json"))
    assert [m["kind"] for m in doc["mismatches"]] == ["platform"]
    assert [m["trace"]["platform"] for m in doc["models"]] == ["CUDA", "CPU"]
    r = CliRunner().invoke(cli, ["analyze", str(h100["target"]), str(DRAFT), "--mixed-platforms"])
    assert r.exit_code == 0
    assert "Traces: target: NVIDIA H100 80GB HBM3 (CUDA 12.4), vLLM 0.32.0; tiny-llama-draft-xs: CPU, vLLM 0.32.0" \
        in r.stdout


@pytest.mark.slow
def test_a_b200_tp8_prefill_trace_against_h100_decodes_says_every_difference(public_dir, h100):
    b200 = _raw(B200)
    shaped = _raw(h100["draft"])
    res = nsys_cc.analyze(B200, [h100["draft"]])
    rows = res.mismatches.set_index("kind")
    assert set(rows.index) == {"device", "ranks", "phase"}
    assert (rows.loc["device", "target_value"], rows.loc["device", "value"]) == (
        b200["deviceProperties"][0]["name"], shaped["deviceProperties"][0]["name"])
    assert (rows.loc["ranks", "target_value"], rows.loc["ranks", "value"]) == (
        b200["distributedInfo"]["world_size"], shaped["distributedInfo"]["world_size"])
    assert "share no decode phase: c is judged on 'all'" in rows.loc["phase", "text"]
    text = res.render("table")
    assert "warning: AMD-AGI__TraceLens__b200_eager_trace ran on NVIDIA B200 and draft on NVIDIA H100 80GB HBM3" in text
    assert "Traces: AMD-AGI__TraceLens__b200_eager_trace: NVIDIA B200 (CUDA 12.9), vLLM, rank 0 of 8; " in text


@pytest.mark.slow
def test_the_speculative_trace_given_as_the_target_is_said(h100):
    res = nsys_cc.analyze(h100["spec"], [h100["draft"]])
    (row,) = res.mismatches.itertuples()
    assert (row.kind, row.target_value, row.value) == ("step kind", "verify", "decode")
    assert "c is judged on 'all', verify steps against decode steps; give the plain target first" in row.text


@pytest.mark.slow
def test_traces_alike_say_nothing_and_cpu_output_is_unchanged(h100):
    res = nsys_cc.analyze(h100["target"], [h100["draft"]])
    assert res.mismatches.empty and not [n for n in res.notes if n.startswith("warning: ")]
    assert "Traces: every model: NVIDIA H100 80GB HBM3 (CUDA 12.4), vLLM 0.32.0" in res.render("table")
    cpu = nsys_cc.analyze(TARGET, [DRAFT])
    assert cpu.mismatches.empty and "Traces:" not in cpu.render("table")
    assert [m.description.platform for m in cpu.models] == ["CPU", "CPU"]
