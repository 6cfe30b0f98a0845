"""The rest of a token's work in the plugin's ranges: the target's logits (`nsys_cc:logits`) and its
sampling (`nsys_cc:sample`) after every target forward, on both runners.

- V1 (`vllm.v1.worker.gpu_model_runner`, what the CPU build runs): for real, vLLM under nsys, the ranges read back
  with plain SQL — a plain run and a speculative one (the sampling is then the rejection sampler's, over γ + 1 rows
  per request).
- V2 (`vllm.v1.worker.gpu.model_runner`, in the CPU build but never run by it): the runner's real `sample` and
  `_dummy_sampler_run` called on a stand-in runner whose model and samplers record what runs, NVTX calls going to a
  recording backend (as tests/vllm/test_plugin_v2.py does), in a child process.
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import textwrap

import pytest

from conftest import run_nsys_profile, scenario_result
from nsys_cc.contract import FORWARD_RANGE, LOGITS_RANGE, SAMPLE_RANGE, STEP_RANGE
from nsys_cc.launch.models import MODELS_DIR
from nsys_cc.trace.nsys import require_nsys

pytestmark = pytest.mark.vllm

DRIVER = textwrap.dedent("""
    import sys
    if __name__ == "__main__":
        from nsys_cc.vllm import plugin as vllm_plugin
        from nsys_cc.vllm.hooks import forwards, ranges, sampling
        vllm_plugin.register()
        from vllm import LLM, SamplingParams
        from vllm.inputs import TokensPrompt
        spec = None if sys.argv[2] == "-" else {"method": "draft_model", "model": sys.argv[2],
                                                 "num_speculative_tokens": 3}
        llm = LLM(model=sys.argv[1], load_format="dummy", skip_tokenizer_init=True, enforce_eager=True,
                  gpu_memory_utilization=0.3, speculative_config=spec)
        params = SamplingParams(max_tokens=5, ignore_eos=True, detokenize=False)
        prompts = [TokensPrompt(prompt_token_ids=list(range(1 + i, 25 + i))) for i in range(int(sys.argv[3]))]
        llm.generate(prompts, params, use_tqdm=False)
""")


def _profile(tmp_path, name: str, draft: str, batch: int) -> list[tuple]:
    """(name, start, end, payload, globalTid) of every push/pop range of a real run, by start (plain SQL)."""
    driver = tmp_path / "driver.py"
    driver.write_text(DRIVER)
    nsys = require_nsys()
    env = {"NSYS_CC_PLUGIN": "1", "VLLM_ENABLE_V1_MULTIPROCESSING": "0", "VLLM_CPU_KVCACHE_SPACE": "1"}
    out = tmp_path / name
    profiled = run_nsys_profile(
        [nsys, "profile", "-t", "nvtx", "-s", "none", "--cpuctxsw=none", "-f", "true", "-o", str(out),
         sys.executable, str(driver), str(MODELS_DIR / "tiny-llama-target"), draft, str(batch)],
        timeout=600, env={**os.environ, **env})
    assert profiled.returncode == 0, profiled.stdout[-3000:]
    sqlite = tmp_path / f"{name}.sqlite"
    export = [nsys, "export", "--type", "sqlite", "-f", "true", "-o", str(sqlite), f"{out}.nsys-rep"]
    subprocess.run(export, capture_output=True, check=True, timeout=300)
    with sqlite3.connect(sqlite) as conn:
        return conn.execute(
            "SELECT coalesce(e.text, s.value), e.start, e.\"end\", e.int64Value, e.globalTid FROM NVTX_EVENTS e "
            "LEFT JOIN StringIds s ON s.id = e.textId WHERE e.eventType = 59 ORDER BY e.start").fetchall()


def _after_each_forward(ranges: list[tuple], forward: str = FORWARD_RANGE) -> list[list[tuple]]:
    """Per target forward, the ranges that start after it ends and before the next target forward, on its thread,
    that are not inside it."""
    fwd = [r for r in ranges if r[0] == forward]
    out = []
    for i, f in enumerate(fwd):
        until = fwd[i + 1][1] if i + 1 < len(fwd) else float("inf")
        out.append([r for r in ranges if r[4] == f[4] and f[2] <= r[1] < until])
    return out


def test_v1_plain_run_writes_logits_then_sample_after_every_forward_inside_its_step(tmp_path):
    ranges = _profile(tmp_path, "plain", "-", batch=2)
    forwards = [r for r in ranges if r[0] == FORWARD_RANGE]
    # 2 requests of 24 tokens, 5 tokens each: one prefill forward (48 tokens), then 4 decodes of 2 tokens.
    assert [f[3] for f in forwards] == [48, 2, 2, 2, 2]
    parts = [[r for r in after if r[0] in (LOGITS_RANGE, SAMPLE_RANGE)] for after in _after_each_forward(ranges)]
    for f, mine in zip(forwards, parts):
        # Logits then sampling, each once, one row per request (the prefill computes logits of its last positions).
        assert [(r[0], r[3]) for r in mine] == [(LOGITS_RANGE, 2), (SAMPLE_RANGE, 2)]
        logits, sample = mine
        assert f[2] <= logits[1] < logits[2] <= sample[1] < sample[2]
        # Inside the same engine step as the forward.
        step = next(s for s in ranges if s[0] == STEP_RANGE and s[1] <= f[1] and f[2] <= s[2])
        assert sample[2] <= step[2]
    # No other logits or sample range anywhere (vLLM's dummy sampler run, its profile run: silenced).
    assert sum(r[0] == LOGITS_RANGE for r in ranges) == sum(r[0] == SAMPLE_RANGE for r in ranges) == len(forwards)


def test_v1_speculative_run_samples_gamma_plus_one_rows_per_request_with_the_rejection_sampler(tmp_path):
    ranges = _profile(tmp_path, "spec", str(MODELS_DIR / "tiny-llama-draft-xs"), batch=1)
    forwards = [r for r in ranges if r[0] == FORWARD_RANGE]
    assert forwards[0][3] == 24 and all(f[3] == 4 for f in forwards[1:])  # verify: the last token + 3 drafts
    for f, after in zip(forwards, _after_each_forward(ranges)):
        mine = [(r[0], r[3]) for r in after if r[0] in (LOGITS_RANGE, SAMPLE_RANGE)]
        rows = 1 if f[3] == 24 else 4  # the prefill's last position; the verify's γ + 1 positions
        assert mine == [(LOGITS_RANGE, rows), (SAMPLE_RANGE, rows)]
        # The target's parts come before the step's draft forwards (sampling decides what the drafts continue).
        sample = next(r for r in after if r[0] == SAMPLE_RANGE)
        drafts = [r for r in after if r[0] == "draft_model_executable()"]
        assert drafts and all(sample[2] <= d[1] for d in drafts)


V2_SCENARIOS = textwrap.dedent('''
    import importlib, json, types
    import torch
    from nsys_cc.vllm import plugin as p
    from nsys_cc.vllm.hooks import forwards, ranges, sampling
    from nsys_cc.vllm import nvtx_backend

    log = []
    ranges.backend = nvtx_backend.Backend("record", True, lambda n, v: log.append([n, v]), lambda: log.append("pop"))
    assert p._PATCHES["vllm.v1.worker.gpu.model_runner"](importlib.import_module("vllm.v1.worker.gpu.model_runner"))
    from vllm.v1.worker.gpu.model_runner import GPUModelRunner

    class Model(torch.nn.Module):  # stands for the loaded target model: its LM head records when it runs
        def forward(self, input_ids=None, positions=None, **kw):
            log.append("forward")
            return torch.zeros(positions.shape[0], 4)
        def compute_logits(self, hidden_states):
            log.append("lm_head")
            return torch.zeros(hidden_states.shape[0], 11)

    class Sampler:  # the runner's sampler, and a rejection sampler: what the real `sample` calls
        def __call__(self, logits, input_batch, *a):
            log.append("sampler")
            return types.SimpleNamespace(num_sampled=1, num_rejected=0)

    runner = object.__new__(GPUModelRunner)
    runner.model = Model()
    runner.batch_sharder = None
    runner.sampler = runner.rejection_sampler = Sampler()
    runner.speculator = types.SimpleNamespace(draft_logits=None)
    runner.structured_outputs_worker = None

    def take():
        got = list(log)
        log.clear()
        return got

    out = {}
    # The runner's execute_model (wrapped by the plugin) hooks the model's logits before the step runs.
    sched = types.SimpleNamespace(total_num_scheduled_tokens=6)
    forwards.with_scheduled_tokens(lambda self, so: None)(runner, sched)
    out["tag"] = getattr(runner.model, sampling.LOGITS_TAG, None)
    batch = types.SimpleNamespace(logits_indices=torch.tensor([2, 5]), num_reqs=2, num_draft_tokens=0)
    runner.sample(torch.zeros(6, 4), batch, None)
    out["plain"] = take()
    verify = types.SimpleNamespace(logits_indices=torch.arange(8), num_reqs=2, num_draft_tokens=6)
    runner.sample(torch.zeros(8, 4), verify, None)
    out["verify"] = take()
    # vLLM's sampler warm-up (the worker calls it outside any dummy forward): no range.
    runner.input_buffers = None
    import vllm.v1.worker.gpu.model_runner as mr
    mr.InputBatch = types.SimpleNamespace(make_dummy=lambda *a: None)
    runner._dummy_sampler_run(torch.zeros(3, 4))
    out["dummy"] = take()
    # Another model of the same class (a draft of the target's architecture) is not touched.
    other = Model()
    other.compute_logits(torch.zeros(2, 4))
    out["other"] = take()
    out["silenced"] = hasattr(vars(GPUModelRunner)["_dummy_sampler_run"], ranges.ORIGINAL)
    print("RESULT " + json.dumps(out))
''')


@pytest.fixture(scope="module")
def v2():
    return scenario_result(V2_SCENARIOS)


def test_v2_sample_puts_the_logits_then_the_sampler_in_their_ranges(v2):
    assert v2["tag"] == LOGITS_RANGE
    # The logits of the 2 sampled positions, then the sampler, each in its range; nothing else pushed.
    assert v2["plain"] == [[LOGITS_RANGE, 2], "lm_head", "pop", [SAMPLE_RANGE, 2], "sampler", "pop"]
    # A verify step: the logits of every verified position, the rejection sampler over them.
    assert v2["verify"] == [[LOGITS_RANGE, 8], "lm_head", "pop", [SAMPLE_RANGE, 8], "sampler", "pop"]


def test_v2_dummy_sampler_run_and_other_models_get_no_range(v2):
    assert v2["silenced"] is True
    assert v2["dummy"] == ["lm_head", "sampler"]
    assert v2["other"] == ["lm_head"]
