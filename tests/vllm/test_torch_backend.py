"""The plugin's torch.profiler ranges (the torch route): chosen by the launcher's switch, no range opened while no
profiler runs (checked through torch's own profiler state and the trace, not by timing), the payload in the name while
one runs, and a range opened before the profiler started closed as nothing."""

from __future__ import annotations

import gzip
import json

import pytest

from nsys_cc.contract import ENV_TORCH_RANGES, ENV_TORCH_SETTINGS, ENV_TORCH_TRACE
from nsys_cc.vllm import nvtx_backend, torch_backend, torch_profiler


@pytest.fixture(scope="module")
def torch():
    """torch, imported by the tests that run it (~1.5 s of CPU): not at collection, where every worker would pay."""
    return pytest.importorskip("torch")


def annotations(path) -> list[str]:
    with gzip.open(path, "rt") as fh:
        events = json.load(fh)["traceEvents"]
    return [e["name"] for e in events if e.get("cat") == "user_annotation"]


@pytest.mark.slow
def test_the_switch_chooses_the_torch_ranges(monkeypatch):
    monkeypatch.setenv(ENV_TORCH_RANGES, "1")
    chosen = nvtx_backend.choose()
    assert chosen.name == torch_backend.NAME and chosen.payload
    monkeypatch.setenv(ENV_TORCH_RANGES, "0")
    assert nvtx_backend.choose().name != torch_backend.NAME


def test_no_range_is_entered_while_no_profiler_runs(monkeypatch, torch):
    from torch._C._autograd import _profiler_enabled

    entered = []
    real = torch.ops.profiler._record_function_enter_new
    monkeypatch.setattr(torch.ops.profiler, "_record_function_enter_new",
                        lambda *a: entered.append(a) or real(*a))
    push, pop = torch_backend.functions()
    assert not _profiler_enabled()
    for _ in range(100):
        push("model_executable()", 1)
        pop()
    assert entered == []
    assert not _profiler_enabled()  # and no profiler was started by it


def test_ranges_while_the_profiler_runs_carry_the_payload(tmp_path, torch):
    push, pop = torch_backend.functions()
    push("model_executable()", 7)  # before the profiler: a no-op, closed as nothing below
    recording = torch_profiler.Recording(tmp_path / "t.pt.trace.json.gz")
    recording.start()
    push("nsys_cc:engine t", 0)
    push("model_executable()", 128)
    pop()
    pop()
    pop()  # the one opened before the start
    path = recording.stop()
    assert sorted(annotations(path)) == ["model_executable()#128", "nsys_cc:engine t#0"]


def test_settings_come_from_the_environment(tmp_path, torch):
    assert torch_profiler.from_environment({}) is None
    rec = torch_profiler.from_environment({ENV_TORCH_TRACE: str(tmp_path / "x.json"), ENV_TORCH_SETTINGS: "stack, ops"})
    assert rec is not None and rec.settings == {"stack", "ops"}
    with pytest.raises(SystemExit, match="unknown setting"):
        torch_profiler.from_environment({ENV_TORCH_TRACE: "x.json", ENV_TORCH_SETTINGS: "stacks"})


def test_the_default_records_only_the_plugins_ranges(tmp_path, torch):
    """The least the profiler costs: the user scope alone, no aten operators, no Python frames."""
    recording = torch_profiler.Recording(tmp_path / "t.pt.trace.json.gz")
    push, pop = torch_backend.functions()
    recording.start()
    push("model_executable()", 4)
    torch.ones(64, 64) @ torch.ones(64, 64)
    pop()
    path = recording.stop()
    with gzip.open(path, "rt") as fh:
        cats = {e.get("cat") for e in json.load(fh)["traceEvents"]}
    assert "user_annotation" in cats and "cpu_op" not in cats and "python_function" not in cats
