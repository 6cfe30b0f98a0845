"""`launch.recorders`: one module per recorder (nsys, the torch profiler) and the registry, the one list of the values
`--profiler` takes. Each recorder's commands are read back as words; its version against the installed program's own
answer; and the package is walked for a recorder's name compared or listed anywhere else."""

from __future__ import annotations

import ast
import importlib.metadata
from pathlib import Path

import click
import pytest

from conftest import nodes
from nsys_cc.errors import InputError
from nsys_cc.launch import recorders
from nsys_cc.launch.recorders import nsys as nsys_recorder, torch as torch_recorder

PACKAGE = Path(__file__).resolve().parents[3] / "nsys_cc"
NSYS = "/opt/nsys/bin/nsys"


def _after(args: list[str], flag: str) -> str:
    return args[args.index(flag) + 1]


def test_the_registry_lists_each_recorder_once_the_default_first():
    assert recorders.NAMES == ("nsys", "torch") and recorders.DEFAULT is recorders.NSYS
    assert [recorders.get(n) for n in recorders.NAMES] == list(recorders.RECORDERS)
    assert recorders.get(None) is recorders.DEFAULT
    with pytest.raises(InputError, match="profiler must be nsys or torch, not 'perf'") as err:
        recorders.get("perf")
    assert err.value.param == "profiler"


@pytest.mark.parametrize("verb", ["profile", "sweep", "tune"])
def test_every_verbs_profiler_flag_takes_the_registrys_names(verb):
    from nsys_cc.cli import cli

    (option,) = [p for p in cli.commands[verb].params if p.name == "profiler"]
    assert isinstance(option.type, click.Choice) and tuple(option.type.choices) == recorders.NAMES
    assert option.default == recorders.DEFAULT.name


def test_nsys_options_fit_the_platform():
    base = Path("/o/m")
    cpu = nsys_recorder.profile_args(NSYS, base, gpu=False)
    gpu = nsys_recorder.profile_args(NSYS, base, gpu=True)
    assert _after(cpu, "-t") == "nvtx,osrt" and "--trace-fork-before-exec=true" not in cpu
    assert _after(gpu, "-t") == "cuda,nvtx,osrt,cublas,cudnn" and "--trace-fork-before-exec=true" in gpu
    # CUDA graphs are traced node by node on a GPU (kernel metrics exist); a CPU run has no graphs to trace.
    assert "--cuda-graph-trace=node" in gpu and not any(a.startswith("--cuda-graph-trace") for a in cpu)
    assert _after(nsys_recorder.profile_args(NSYS, base, gpu=True, trace="nvtx"), "-t") == "nvtx"
    assert _after(cpu, "-o") == "/o/m" and cpu[:2] == [NSYS, "profile"]
    # tensor parallel on the CPU: every rank's process is followed
    assert "--trace-fork-before-exec=true" in nsys_recorder.profile_args(NSYS, base, gpu=False, tp=2)


def test_each_recorder_records_the_program_into_its_own_trace():
    program = ["python", "-m", "driver", "--x"]
    nsys = recorders.NSYS.commands(NSYS, program, Path("/o/run-1/trace"), gpu=False, extra=["--sample=cpu"])
    assert nsys.profile[-4:] == program and _after(nsys.profile, "-o") == "/o/run-1/trace"
    assert "--sample=cpu" in nsys.profile and nsys.env == {}
    assert nsys.export == [NSYS, "export", "--type", "sqlite", "-f", "true", "-o", "/o/run-1/trace.sqlite",
                           "/o/run-1/trace.nsys-rep"]
    torch = recorders.TORCH.commands("", program, Path("/o/run-1/trace"), gpu=True, environ={})
    assert torch.profile == program and torch.export == []
    assert torch.env == {"NSYS_CC_TORCH_RANGES": "1", "NSYS_CC_TORCH_TRACE": "/o/run-1/trace.pt.trace.json.gz",
                         "VLLM_ENABLE_V1_MULTIPROCESSING": "0"}
    assert recorders.NSYS.trace_name("trace") == "trace.sqlite"
    assert recorders.TORCH.trace_name("m") == "m.pt.trace.json.gz"


def test_the_torch_profiler_needs_no_binary_and_refuses_what_it_cannot_record():
    assert recorders.TORCH.binary() == "" and recorders.TORCH.binary(shown_only=True) == ""
    for kwargs, param in (({"target_tp": 2}, "target_tp"), ({"draft_tp": 4}, "draft_tp"),
                          ({"trace": "nvtx"}, "trace"), ({"nsys_args": ["--sample=cpu"]}, "nsys_args")):
        with pytest.raises(InputError) as err:
            recorders.TORCH.refuse(**kwargs)
        assert err.value.param == param
    recorders.NSYS.refuse(target_tp=2, draft_tp=4, trace="nvtx", nsys_args=["--sample=cpu"])  # nsys takes them all


def test_the_version_a_record_stores_is_the_programs_own(nsys_bin):
    import subprocess

    said = subprocess.run([nsys_bin, "--version"], capture_output=True, text=True).stdout
    record = recorders.NSYS.record(nsys_bin)
    assert record["name"] == "nsys" and record["version"] and record["version"] in said
    assert recorders.TORCH.record("") == {"name": "torch", "version": importlib.metadata.version("torch")}
    assert recorders.NSYS.record("/nonexistent/nsys") == {"name": "nsys", "version": None}


@pytest.mark.parametrize("nvtx_version, nsys_version, warned", [
    ("0.2.13", "2022.4.2.1", True), ("0.2.11", "2022.4.2.1", False), ("0.2.15", "2024.6.1", False)])
def test_nvtx_versions_that_nsys_does_not_record_are_flagged(monkeypatch, nvtx_version, nsys_version, warned):
    monkeypatch.setattr(nsys_recorder.importlib.metadata, "version", lambda name: nvtx_version)
    monkeypatch.setattr("nsys_cc.trace.nsys.nsys_version", lambda nsys: nsys_version)
    warnings = recorders.NSYS.warnings("nsys")
    assert bool(warnings) == warned
    assert not warned or "pip install nvtx==0.2.11" in warnings[0]
    assert recorders.TORCH.warnings("") == []


def test_the_environment_each_recorder_refuses_names_its_variable():
    recorders.NSYS.check_environment({})
    with pytest.raises(InputError, match="NSYS_CC_TORCH_SETTINGS='ops' is set, but the runs are recorded by nsys"):
        recorders.NSYS.check_environment({"NSYS_CC_TORCH_SETTINGS": "ops"})
    recorders.TORCH.check_environment({"NSYS_CC_TORCH_SETTINGS": "ops,stack"})
    with pytest.raises(InputError, match="NSYS_CC_TORCH_SETTINGS"):
        recorders.TORCH.check_environment({"NSYS_CC_TORCH_SETTINGS": "opz"})
    assert torch_recorder.ENV == {"VLLM_ENABLE_V1_MULTIPROCESSING": "0"}


# ---- the values are listed once ----------------------------------------------------------------------------------
def name_tests_outside(root: Path, names: tuple[str, ...]) -> list[str]:
    """`path:line` of every comparison with a recorder's name (`profiler == "torch"`, `x in ("nsys", …)`) and every
    literal listing two or more of them (a tuple, list, set, or dict keys) outside `launch/recorders/`: what the name
    decides is the recorder's to say."""
    hits = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root.parent)
        if rel.parts[1:3] == ("launch", "recorders"):
            continue
        for node in nodes(path):
            if isinstance(node, ast.Compare):
                operands = [node.left, *node.comparators]
                consts = [o.value for o in operands if isinstance(o, ast.Constant)]
                consts += [e.value for o in operands if isinstance(o, (ast.Tuple, ast.List, ast.Set))
                           for e in o.elts if isinstance(e, ast.Constant)]
                if any(c in names for c in consts):
                    hits.append(f"{rel}:{node.lineno}")
            elems = node.elts if isinstance(node, (ast.Tuple, ast.List, ast.Set)) else \
                node.keys if isinstance(node, ast.Dict) else []
            if sum(isinstance(e, ast.Constant) and e.value in names for e in elems) >= 2:
                hits.append(f"{rel}:{node.lineno}")
    return sorted(set(hits))


@pytest.mark.slow
def test_no_recorder_name_is_tested_or_listed_outside_the_recorders():
    assert name_tests_outside(PACKAGE, recorders.NAMES) == []


def test_the_check_finds_a_name_tested_and_a_list_of_names(tmp_path):
    pkg = tmp_path / "nsys_cc"
    (pkg / "launch" / "recorders").mkdir(parents=True)
    (pkg / "a.py").write_text('def f(profiler):\n    return profiler == "torch"\nX = ("nsys", "torch")\n'
                              'U = {"nsys": 1, "torch": 2}\nD = "nsys"  # a default is no test\n'
                              'def g(p):\n    return p in ("nsys",)\n')
    (pkg / "launch" / "recorders" / "torch.py").write_text('name = "torch"\nY = name == "torch"\n')
    assert name_tests_outside(pkg, ("nsys", "torch")) == ["nsys_cc/a.py:2", "nsys_cc/a.py:3", "nsys_cc/a.py:4",
                                                          "nsys_cc/a.py:7"]
