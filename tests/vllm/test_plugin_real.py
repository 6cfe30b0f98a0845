"""The plugin against the installed vLLM: the layout it patches exists, and a speculative run traces drafts apart.

Both run vLLM code in a child process, so the test process's imports stay untouched.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import textwrap

import pytest

from conftest import run_nsys_profile
from nsys_cc.launch.models import MODELS_DIR
from nsys_cc.trace.nsys import require_nsys

pytestmark = pytest.mark.vllm

LAYOUT_PROBE = textwrap.dedent("""
    import importlib, inspect, json
    from nsys_cc.vllm import plugin as p

    def params(cls, name):
        fn = getattr(getattr(cls, name), "__nsys_cc_original__", getattr(cls, name))
        return list(inspect.signature(fn).parameters)

    mods = {name: importlib.import_module(name) for name in p._PATCHES}
    out = {"patched": {name: p._PATCHES[name](mod) for name, mod in mods.items()}}
    v1 = mods["vllm.v1.worker.gpu_model_runner"].GPUModelRunner
    v2 = mods["vllm.v1.worker.gpu.model_runner"].GPUModelRunner
    cg = mods["vllm.v1.worker.gpu.cudagraph_utils"]
    out["params"] = {
        "v1.execute_model": params(v1, "execute_model")[:2],
        "v1._model_forward": params(v1, "_model_forward")[:3],
        "v2.execute_model": params(v2, "execute_model"),
        "pw": params(cg.CudaGraphManager, "run_pw_graph"),
        "full": params(cg.ModelCudaGraphManager, "run_fullgraph"),
        "v2.draft.propose": params(mods["vllm.v1.worker.gpu.spec_decode.speculator"].DraftModelSpeculator, "propose"),
        "generate": params(mods["vllm.entrypoints.llm"].LLM, "generate")[:2],
        "steps": [params(mods["vllm.v1.engine.llm_engine"].LLMEngine, "step"),
                  params(mods["vllm.v1.engine.core"].EngineCoreProc, "_process_engine_step"),
                  params(mods["vllm.v1.engine.core_client"].InprocClient, "get_output")],
    }
    core = mods["vllm.v1.engine.core"].EngineCore
    # The step range opens when the engine core's scheduler returns: each step function schedules through it.
    out["schedules"] = [("self.scheduler.schedule(" in inspect.getsource(getattr(core, f))) for f in
                        ("step", "step_with_batch_queue")]
    print(json.dumps(out))
""")


def test_installed_vllm_has_the_layout_the_plugin_patches():
    done = subprocess.run([sys.executable, "-c", LAYOUT_PROBE], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert all(found["patched"].values()), found["patched"]
    p = found["params"]
    assert p["v1.execute_model"] == ["self", "scheduler_output"]
    assert p["v1._model_forward"] == ["self", "input_ids", "positions"]
    assert p["v2.execute_model"][:2] == ["self", "scheduler_output"] and "dummy_run" in p["v2.execute_model"]
    assert p["pw"] == ["self", "model", "model_inputs"] and p["full"] == ["self", "desc"]
    assert "dummy_run" in p["v2.draft.propose"]
    assert p["generate"] == ["self", "prompts"]
    assert p["steps"] == [["self"]] * 3 and found["schedules"] == [True, True]


SPEC_DRIVER = textwrap.dedent("""
    import sys
    if __name__ == "__main__":
        from nsys_cc.vllm import plugin as vllm_plugin
        vllm_plugin.register()
        from vllm import LLM, SamplingParams
        from vllm.inputs import TokensPrompt
        llm = LLM(model=sys.argv[1], load_format="dummy", skip_tokenizer_init=True, enforce_eager=True,
                  gpu_memory_utilization=0.3,
                  speculative_config={"method": "draft_model", "model": sys.argv[2], "num_speculative_tokens": 3})
        params = SamplingParams(max_tokens=8, ignore_eos=True, detokenize=False)
        llm.generate([TokensPrompt(prompt_token_ids=list(range(1, 33)))], params, use_tqdm=False)
""")


def test_speculative_run_traces_draft_forwards_and_steps_under_their_own_names(tmp_path):
    driver = tmp_path / "spec_driver.py"
    driver.write_text(SPEC_DRIVER)
    nsys = require_nsys()
    env = {"NSYS_CC_PLUGIN": "1", "VLLM_ENABLE_V1_MULTIPROCESSING": "0", "VLLM_CPU_KVCACHE_SPACE": "1"}
    profiled = run_nsys_profile(
        [nsys, "profile", "-t", "nvtx", "-s", "none", "--cpuctxsw=none", "-f", "true", "-o", str(tmp_path / "spec"),
         sys.executable, str(driver), str(MODELS_DIR / "tiny-llama-target"), str(MODELS_DIR / "tiny-llama-draft-xs")],
        timeout=600, env={**os.environ, **env})
    assert profiled.returncode == 0, profiled.stdout[-3000:]
    sqlite = tmp_path / "spec.sqlite"
    export = [nsys, "export", "--type", "sqlite", "-f", "true", "-o", str(sqlite), str(tmp_path / "spec.nsys-rep")]
    subprocess.run(export, capture_output=True, check=True, timeout=300)
    with sqlite3.connect(sqlite) as conn:
        rows = conn.execute(
            "SELECT coalesce(e.text, s.value), e.int64Value FROM NVTX_EVENTS e "
            "LEFT JOIN StringIds s ON s.id = e.textId WHERE e.eventType = 59 "
            "AND coalesce(e.text, s.value) LIKE '%model_executable()' ORDER BY e.start").fetchall()
    names = [r[0] for r in rows]
    target = [r[1] for r in rows if r[0] == "model_executable()"]
    # Random weights accept (almost) no draft token, so each step yields one token: ≤ 8 target forwards.
    assert 2 <= len(target) <= 8
    assert target[0] == 32 and all(t == 1 + 3 for t in target[1:])  # verify: the last token + 3 drafts
    # After every target forward, three draft forwards (num_speculative_tokens = 3), the last two one token each.
    assert names == ["model_executable()", *["draft_model_executable()"] * 3] * len(target)
    drafts = [r[1] for r in rows if r[0] == "draft_model_executable()"]
    assert all(d == 1 for i, d in enumerate(drafts) if i % 3)
    # One nsys_cc:step per engine step, on the forwards' thread, around the verify forward and its 3 drafts.
    with sqlite3.connect(sqlite) as conn:
        ranges = conn.execute(
            "SELECT coalesce(e.text, s.value), e.start, e.\"end\", e.int64Value, e.globalTid FROM NVTX_EVENTS e "
            "LEFT JOIN StringIds s ON s.id = e.textId WHERE e.eventType = 59 ORDER BY e.start").fetchall()
    steps = [r for r in ranges if r[0] == "nsys_cc:step"]
    assert [s[3] for s in steps] == target
    for step in steps:
        inside = [r for r in ranges if step[1] < r[1] and r[2] < step[2] and r[4] == step[4]]
        # The step's context range first (zero-length, as the step opens), then each forward followed by the rest of
        # its token's work: its logits, then its sampling.
        assert [r[0] for r in inside] == ["nsys_cc:step_context", "model_executable()", "nsys_cc:logits",
                                          "nsys_cc:sample",
                                          *["draft_model_executable()", "nsys_cc:draft_logits",
                                            "nsys_cc:draft_sample"] * 3]
        if step[3] == 1 + 3:  # a verify: logits over the last token and the 3 drafts, all of them sampled
            assert [r[3] for r in inside[2:4]] == [1 + 3, 1 + 3]
