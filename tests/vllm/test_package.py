"""What runs inside vLLM lives in `nsys_cc.vllm`, apart from the host launcher (`nsys_cc.launch`): the plugin's entry
point names it, and it has no other import path (no shim at 0.1.0)."""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys
import tomllib

from conftest import REPO

ROOT = REPO


def test_entry_point_names_the_plugin_in_the_vllm_package():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert project["project"]["entry-points"]["vllm.general_plugins"] == {"nsys_cc": "nsys_cc.vllm.plugin:register"}


def test_the_entry_point_loads_the_one_register_and_the_old_path_is_gone():
    from nsys_cc.vllm import plugin

    (ep,) = [e for e in importlib.metadata.entry_points(group="vllm.general_plugins") if e.name == "nsys_cc"]
    assert ep.load() is plugin.register
    assert not (ROOT / "nsys_cc" / "launch" / "vllm_plugin.py").exists()


def test_the_code_inside_vllm_loads_nothing_heavy():
    # vLLM imports the plugin in every process; the bench driver's module too runs there
    code = ("import sys, nsys_cc.vllm.plugin, nsys_cc.vllm.fixes, nsys_cc.vllm.bench; "
            "print(sorted(m for m in ('pandas', 'sqlalchemy', 'matplotlib', 'vllm', 'torch') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == "[]"
