"""The GPU-traces run (scripts/gpu_traces: traces made on a GPU machine) dry-run on the CPU under the real nsys 2022.4:

- `nvtx_ctypes` (the pure-Python NVTX3 client the GPU machine's Python 3.12 uses instead of the cp311 `nvtx` wheel)
  records push/pop ranges with their int64 payloads, nested as pushed; without a tool it does nothing;
- `pack_nsys.sh` packs nsys and its importer, and `run_on_device.sh` — run as the device would run it, with the pack,
  `python3`-like interpreter, its probe and import check — profiles the workload (target, draft, speculative-shaped),
  imports, exports and summarises each trace, and returns compressed reports that export here and analyse as a
  plain pair plus a speculative run; its summary agrees with raw SQL on the exports.
"""

from __future__ import annotations

import lzma
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from conftest import REPO, raw_sql, run_nsys_profile
from nsys_cc.analysis.coefficient.measure import cost_coefficient

SCRIPTS = REPO / "scripts" / "gpu_traces"
NAMES = "SELECT coalesce(e.text, s.value), e.int64Value, e.start, e.\"end\" FROM NVTX_EVENTS e " \
        "LEFT JOIN StringIds s ON s.id = e.textId WHERE e.eventType = 59 ORDER BY e.start"


def _export(nsys: str, rep: Path) -> Path:
    sqlite = rep.with_suffix(".sqlite")
    subprocess.run([nsys, "export", "--type", "sqlite", "-f", "true", "-o", str(sqlite), str(rep)], check=True,
                   capture_output=True, timeout=300)
    return sqlite


def test_nvtx_ctypes_records_ranges_with_payloads_under_nsys(tmp_path, nsys_bin):
    program = tmp_path / "ranges.py"
    program.write_text(textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(SCRIPTS)!r})
        from nvtx_ctypes import NVTX
        with NVTX.range("outer", 7):
            NVTX.push("model_executable()", 128); NVTX.pop()
            NVTX.push("no payload"); NVTX.pop()
        print(NVTX.status)
    """))
    done = run_nsys_profile([nsys_bin, "profile", "-t", "nvtx", "-s", "none", "--cpuctxsw=none", "-f", "true", "-o",
                             str(tmp_path / "r"), sys.executable, str(program)], timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "attached to " in done.stdout
    rows = raw_sql(_export(nsys_bin, tmp_path / "r.nsys-rep"), NAMES)
    assert [(r[0], r[1]) for r in rows] == [("outer", 7), ("model_executable()", 128), ("no payload", None)]
    outer = rows[0]
    assert all(outer[2] <= r[2] and r[3] <= outer[3] for r in rows[1:])  # nested as pushed
    # Without nsys there is no tool to attach to: every call is a no-op.
    alone = subprocess.run([sys.executable, str(program)], capture_output=True, text=True, timeout=120,
                           env={k: v for k, v in os.environ.items() if k != "NVTX_INJECTION64_PATH"})
    assert alone.returncode == 0 and "no tool attached" in alone.stdout


def _summary(path: Path) -> dict[str, dict[str, str]]:
    lines = [ln.split("\t") for ln in path.read_text().splitlines() if ln.strip()]
    return {row[0]: dict(zip(lines[0], row)) for row in lines[1:]}


def test_the_device_run_works_on_the_cpu_from_pack_to_analysis(tmp_path, nsys_bin):
    pack = tmp_path / "pack"
    root = Path(nsys_bin).resolve().parent.parent  # …/nsight-systems/bin/nsys → …/nsight-systems
    packed = subprocess.run(["bash", str(SCRIPTS / "pack_nsys.sh")], capture_output=True, text=True, timeout=600,
                            env={**os.environ, "NSYS_ROOT": str(root), "PACK_DIR": str(pack), "XZ_LEVEL": "0"})
    assert packed.returncode == 0, packed.stderr[-2000:]
    assert sorted(p.name for p in pack.iterdir()) == ["nsys.tar.xz"]
    out = tmp_path / "out"
    env = {**os.environ, "OUT": str(out), "PACK": str(pack), "PYTHON": sys.executable, "EXPECT_GPU": "0",
           "TARGET_MODEL": "tiny-llama-target", "DRAFT_MODEL": "tiny-llama-draft-xs",
           "RUNS": "target-eager draft-eager spec-g3", "INPUT_LEN": "32", "DECODE": "3", "WARMUP": "1", "ITERS": "2"}
    env.pop("NVTX_INJECTION64_PATH", None)
    run = subprocess.run(["bash", str(SCRIPTS / "run_on_device.sh")], capture_output=True, text=True, timeout=900,
                         env=env)
    log = (out / "run.log").read_text() if (out / "run.log").exists() else run.stdout
    assert run.returncode == 0, log[-4000:]
    assert "probe passed" in log and "FAILED" not in log and "SKIPPED" not in log
    names = ["target-eager", "draft-eager", "spec-g3"]
    assert sorted(p.name for p in out.iterdir()) == sorted(["run.log", "summary.tsv"] +
                                                           [f"{n}.nsys-rep.xz" for n in names])
    summary = _summary(out / "summary.tsv")
    traces = {}
    for name in names:
        rep = tmp_path / f"{name}.nsys-rep"
        rep.write_bytes(lzma.decompress((out / f"{name}.nsys-rep.xz").read_bytes()))
        traces[name] = _export(nsys_bin, rep)
        rows = raw_sql(traces[name], NAMES)
        counted = {k: sum(r[0] == v for r in rows) for k, v in (("forwards", "model_executable()"),
                                                                ("drafts", "draft_model_executable()"),
                                                                ("steps", "nsys_cc:step"))}
        assert {k: int(summary[f"{name}.sqlite"][k]) for k in counted} == counted, name
    # 3 iterations (1 warm-up) of a 32-token prefill and 3 steps; speculating: verify 4 = γ + 1, γ = 3 drafts a step.
    spec = raw_sql(traces["spec-g3"], NAMES)
    assert [r[1] for r in spec if r[0] == "model_executable()"] == [32, 4, 4, 4] * 3
    assert [r[1] for r in spec if r[0] == "draft_model_executable()"] == ([32] + [1] * 9) * 3
    assert summary["spec-g3.sqlite"]["cuda_api"] == "0"  # the CPU: no CUDA, as expected here
    result = cost_coefficient(traces["target-eager"], [traces["draft-eager"], traces["spec-g3"]],
                              names=["tiny-llama-target", "tiny-llama-draft-xs", "tiny-llama-draft-xs.spec-g3"],
                              output_len=4)  # a prefill, then 3 steps of one token each
    assert result.speculative is not None and result.speculative.table["gamma"].tolist() == [3]
    assert result.speculative.table["tokens_per_step"].tolist() == [1.0]  # nothing accepted: one token a step
    assert {"prefill", "decode"} <= set(result.coefficients["phase"])


@pytest.mark.slow
def test_the_workloads_cuda_graph_path_runs_on_the_cpu(tmp_path):
    """--graphs compiles the one-token forwards (torch.compile, reduce-overhead): slow on the CPU, but the GPU run
    must not be the first to execute it."""
    done = subprocess.run([sys.executable, str(SCRIPTS / "workload.py"), "--model", "tiny-llama-draft-xs", "--graphs",
                           "--input-len", "8", "--decode", "2", "--warmup", "0", "--iters", "1", "--device", "cpu"],
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "1 iterations done" in done.stdout or "0 + 1 iterations done" in done.stdout
