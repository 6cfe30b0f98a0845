"""`nsys-cc kernels A [B]` (`nsys_cc.cli.kernels`): the rows the library gives, in every format, the notes on stderr
for JSON and CSV, and bad input one line naming the flag; on GPU-shaped traces whose kernels have known names
(`gpu_shaped.named_plan`). The library's own numbers are checked against SQL in tests/analysis/kernels/."""

from __future__ import annotations

import io
import json

import pandas as pd
import pytest
from click.testing import CliRunner
from gpu_shaped import DRAFT_KERNELS, FORWARD, TARGET_KERNELS, GpuShaped, add_gpu_work, named_plan

import nsys_cc
from conftest import FIXTURES, PUBLIC, said
from nsys_cc.cli import cli
from nsys_cc.report import kernel_text

TARGET, DRAFT = FIXTURES / "vllm" / "tiny-llama-target.sqlite", FIXTURES / "vllm" / "tiny-llama-draft-s.sqlite"
REAL_SIM = PUBLIC / "Sh1mwww__llama3-inference__real_inference_simulation.sqlite"


@pytest.fixture(scope="module")
def shaped(tmp_path_factory) -> tuple[GpuShaped, GpuShaped]:
    """The target's and the draft's fixture, each forward launching kernels of known names (`named_plan`)."""
    folder = tmp_path_factory.mktemp("shaped")
    return (add_gpu_work(TARGET, folder / "target.sqlite", named_plan(TARGET_KERNELS), names=(FORWARD,)),
            add_gpu_work(DRAFT, folder / "draft.sqlite", named_plan(DRAFT_KERNELS), names=(FORWARD,)))


@pytest.mark.slow
def test_the_cli_json_rows(shaped):
    target, draft = shaped
    r = CliRunner().invoke(cli, ["kernels", str(target.path), str(draft.path), "--format", "json"])
    assert r.exit_code == 0, r.output
    rows = json.loads(r.stdout)
    lib = nsys_cc.kernel_diff(target.path, draft.path)
    assert isinstance(rows, list) and len(rows) == len(lib)
    keys = {"kernel", "category", "a_count", "a_ms_per_range", "b_count", "b_ms_per_range", "delta_ms_per_range"}
    for row, want in zip(rows, lib.itertuples()):
        assert keys <= set(row)
        assert row["kernel"] == want.kernel and row["a_count"] == want.a_count and row["b_count"] == want.b_count
        assert row["delta_ms_per_range"] == want.delta_ms_per_range
        assert row["delta_ms_per_range"] == pytest.approx(row["b_ms_per_range"] - row["a_ms_per_range"])
    assert "note: draft: dropped 8 of 20 ranges" in r.stderr  # the notes on stderr, stdout the rows alone


@pytest.mark.slow
def test_the_cli_formats(shaped):
    target, draft = shaped
    run = CliRunner()
    csv = run.invoke(cli, ["kernels", str(target.path), str(draft.path), "--format", "csv"])
    assert csv.exit_code == 0
    pd.testing.assert_frame_equal(pd.read_csv(io.StringIO(csv.stdout)), nsys_cc.kernel_diff(target.path, draft.path),
                                  check_exact=False, rtol=1e-12, check_dtype=False)
    one = run.invoke(cli, ["kernels", str(target.path), "--phase", "prefill"])
    assert one.exit_code == 0 and "phase prefill" in one.stdout and "rms_norm_kernel" in one.stdout
    md = run.invoke(cli, ["kernels", str(target.path), str(draft.path), "--format", "markdown"])
    assert md.exit_code == 0 and "| Kernel | Category |" in md.stdout and "- note: " in md.stdout
    table = run.invoke(cli, ["kernels", str(target.path), str(draft.path)])
    assert table.exit_code == 0
    assert "Δ ms/range (B − A)" in table.stdout and "note: target: dropped 8 of 20 ranges" in table.stdout
    first = table.stdout.split("\n---", 1)[0]
    assert first.startswith("A = target: 'model_executable()'") and "phase decode" in first


@pytest.mark.slow
def test_two_ranges_of_one_trace_on_the_command_line(public_dir):
    r = CliRunner().invoke(cli, ["kernels", str(REAL_SIM), "--range", "layer_0_computation", "--range-b",
                                 "layer_7_computation", "--phase", "all", "--skip-ranges", "0", "--format", "json"])
    assert r.exit_code == 0, r.output
    lib = nsys_cc.kernel_diff(REAL_SIM, range_name="layer_0_computation", range_name_b="layer_7_computation",
                              phase="all", skip_ranges=0)
    assert json.loads(r.stdout) == kernel_text.records(lib)


@pytest.mark.parametrize("args, message", [
    (["--range-b", "model_executable()"], "a and b are the same trace and the same range: give b (another trace) or "
                                          "--range-b (another range of a)"),
    (["--range-b", "nope"], "no NVTX range named 'nope'"),
    (["--phase", "verify"], "none of the kept 'model_executable()' ranges is a 'verify' forward (its phases: all, "
                            "prefill, decode); choose one of them with --phase"),
    (["--skip-ranges", "-1"], "--skip-ranges must be ≥ 0, not -1"),
    (["--range", "nope"], "(choose one with --range)"),
])
def test_bad_input_is_one_line_naming_the_flag(args, message):
    r = CliRunner().invoke(cli, ["kernels", str(TARGET), *args])
    assert r.exit_code == 2, r.output
    (line,) = said(r.stderr)
    assert line.startswith("nsys-cc: error: ") and message in line
