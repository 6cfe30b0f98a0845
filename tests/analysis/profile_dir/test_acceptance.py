"""α from vLLM's spec-decode counters: hand-made snapshots, simulated drafts, dumps, and a real vLLM CPU run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from nsys_cc.analysis.profile_dir import acceptance
from nsys_cc.errors import InputError

LABELS = {"model_name": "m", "engine": "0"}


@pytest.fixture(scope="module")
def reader(vllm_module):
    """vLLM's own metric classes (`LLM.get_metrics()` returns them), imported only by the tests that use them."""
    from vllm.v1.metrics import reader

    return reader


@pytest.fixture(scope="module")
def snapshot(reader):
    def make(drafts, draft_tokens, accepted, per_pos, labels=LABELS):
        return [
            reader.Counter(acceptance.DRAFTS, dict(labels), drafts),
            reader.Counter(acceptance.DRAFT_TOKENS, dict(labels), draft_tokens),
            reader.Counter(acceptance.ACCEPTED, dict(labels), accepted),
            reader.Vector(acceptance.PER_POSITION, dict(labels), list(per_pos)),
        ]

    return make


def test_rates_from_a_get_metrics_list(snapshot, reader):
    metrics = snapshot(100, 300, 150, [80, 45, 25]) + [
        reader.Gauge("vllm:num_requests_running", dict(LABELS), 0.0),
        reader.Histogram("vllm:e2e_request_latency_seconds", dict(LABELS), 1, 0.5, {"1.0": 1, "+Inf": 1}),
    ]
    s = acceptance.from_metrics(metrics)
    assert (s.num_drafts, s.num_draft_tokens, s.num_accepted) == (100, 300, 150)
    assert s.alpha == 0.5
    assert s.per_position == (0.8, 0.45, 0.25)
    assert s.num_speculative_tokens == 3
    assert s.mean_acceptance_length == 2.5
    assert s.alpha_iid == pytest.approx(150 / (150 + 100 - 25))


def test_alpha_iid_recovers_the_iid_alpha_and_alpha_is_the_mean_over_k(snapshot):
    rng = np.random.default_rng(0)
    true_alpha, k, n = 0.7, 4, 200_000
    accepted = np.minimum(rng.geometric(1 - true_alpha, n) - 1, k)  # i.i.d. model of Leviathan et al.
    per_pos = [int((accepted > i).sum()) for i in range(k)]
    s = acceptance.from_metrics(snapshot(n, n * k, int(accepted.sum()), per_pos))
    assert s.alpha_iid == pytest.approx(true_alpha, abs=0.005)
    assert s.alpha == pytest.approx(sum(true_alpha**i for i in range(1, k + 1)) / k, abs=0.005)
    assert s.per_position[0] == pytest.approx(true_alpha, abs=0.005)


def test_engines_are_summed_and_prometheus_style_records_accepted(snapshot):
    two = snapshot(10, 30, 12, [6, 4, 2], {"model_name": "m", "engine": "0"}) + snapshot(
        5, 15, 3, [2, 1, 0], {"model_name": "m", "engine": "1"})
    s = acceptance.from_metrics(two)
    assert (s.num_drafts, s.num_draft_tokens, s.num_accepted, s.accepted_per_position) == (15, 45, 15, (8, 5, 2))
    records = [
        {"name": "vllm:spec_decode_num_drafts_total", "labels": {}, "value": 4},
        {"name": "vllm:spec_decode_num_draft_tokens_total", "labels": {}, "value": 8},
        {"name": "vllm:spec_decode_num_accepted_tokens_total", "labels": {}, "value": 5},
        {"name": "vllm:spec_decode_num_accepted_tokens_per_pos_total", "labels": {"position": "1"}, "value": 2},
        {"name": "vllm:spec_decode_num_accepted_tokens_per_pos_total", "labels": {"position": "0"}, "value": 3},
    ]
    s = acceptance.from_metrics(records)
    assert s.accepted_per_position == (3, 2) and s.alpha == 5 / 8


def test_several_models_need_a_choice(snapshot):
    both = snapshot(10, 30, 12, [6, 4, 2], {"model_name": "a"}) + snapshot(5, 15, 3, [2, 1, 0], {"model_name": "b"})
    with pytest.raises(InputError, match=r"several models \(a, b\)"):
        acceptance.from_metrics(both)
    assert acceptance.from_metrics(both, model="b").num_drafts == 5
    with pytest.raises(InputError, match="no metrics of model 'c'"):
        acceptance.from_metrics(both, model="c")


def test_dump_round_trip(tmp_path, snapshot):
    metrics = snapshot(15, 45, 9, [5, 3, 1])
    path = tmp_path / "metrics.json"
    acceptance.dump_metrics(metrics, path)
    doc = json.loads(path.read_text())
    assert doc["format"] == "nsys_cc.vllm_metrics" and doc["version"] == 1
    assert {"name": acceptance.PER_POSITION, "labels": LABELS, "values": [5, 3, 1]} in doc["metrics"]
    assert acceptance.load(path) == acceptance.from_metrics(metrics)


@pytest.mark.parametrize("content, message", [
    (None, "metrics dump not found"),
    ("{not json", "is not a JSON metrics dump"),
    ("[1, 2]", "expected a JSON object"),
    ('{"format": "other", "metrics": []}', "not an nsys_cc metrics dump"),
    ('{"format": "nsys_cc.vllm_metrics", "version": 9, "metrics": []}', "version 9 is not 1"),
    ('{"format": "nsys_cc.vllm_metrics", "version": 1, "metrics": []}', "was speculative decoding on"),
    ('{"format": "nsys_cc.vllm_metrics", "version": 1, "metrics": [{"value": 3}]}', "no name"),
])
def test_bad_dumps_give_one_line_errors(tmp_path, content, message):
    path = tmp_path / "dump.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(InputError, match=message) as info:
        acceptance.load(path)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("counts, message", [
    ((0, 0, 0, [0, 0, 0]), "counters are zero"),
    ((4, 12, 13, [4, 4, 5]), "13 accepted > 12 draft tokens"),
    ((4, 12, 6, [3, 2, 0]), "sum to 5, not 6"),
    ((4, 12, -1, [0, 0, 0]), "whole number"),
])
def test_inconsistent_counters_are_rejected(counts, message, snapshot):
    with pytest.raises(InputError, match=message):
        acceptance.from_metrics(snapshot(*counts))


_VLLM_SCRIPT = textwrap.dedent('''
    import json, sys
    from pathlib import Path

    def config(d, hidden, layers, heads, inter):
        d.mkdir(parents=True, exist_ok=True)
        (d / "config.json").write_text(json.dumps({
            "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": hidden,
            "intermediate_size": inter, "num_hidden_layers": layers, "num_attention_heads": heads,
            "num_key_value_heads": heads, "vocab_size": 1000, "max_position_embeddings": 256, "rms_norm_eps": 1e-5,
            "bos_token_id": 1, "eos_token_id": 2, "torch_dtype": "float32", "tie_word_embeddings": False}))
        return str(d)

    if __name__ == "__main__":
        from vllm import LLM, SamplingParams
        from vllm.inputs import TokensPrompt
        from nsys_cc.analysis.profile_dir import acceptance
        work = Path(sys.argv[1])
        target = config(work / "target", 128, 2, 2, 256)
        runs = {"random": config(work / "draft", 64, 1, 2, 128), "same": target}
        for name, draft in runs.items():
            llm = LLM(model=target, load_format="dummy", skip_tokenizer_init=True, enforce_eager=True,
                      gpu_memory_utilization=0.3, disable_log_stats=False, max_model_len=256,
                      speculative_config={"method": "draft_model", "model": draft, "num_speculative_tokens": 3})
            llm.generate([TokensPrompt(prompt_token_ids=list(range(3, 35)))],
                         SamplingParams(max_tokens=16, ignore_eos=True, temperature=0.0))
            acceptance.dump_metrics(llm.get_metrics(), work / f"{name}.json")
            del llm
''')


@pytest.mark.vllm
def test_real_vllm_cpu_spec_decode_metrics(tmp_path):
    script = tmp_path / "spec_decode.py"
    script.write_text(_VLLM_SCRIPT)
    env = dict(os.environ, VLLM_ENABLE_V1_MULTIPROCESSING="0", VLLM_CPU_KVCACHE_SPACE="1")
    # The timeout only guards against a hung vLLM (a run takes 15–60 s on a busy 2-core machine).
    proc = subprocess.run([sys.executable, str(script), str(tmp_path)], env=env, capture_output=True, text=True,
                          timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    k = 3
    for name in ("random", "same"):
        s = acceptance.load(tmp_path / f"{name}.json")
        assert s.num_drafts > 0
        assert s.num_drafts * k == s.num_draft_tokens
        assert sum(s.accepted_per_position) == s.num_accepted and len(s.per_position) == k
        assert s.alpha == s.num_accepted / s.num_draft_tokens
    # a draft with the target's own (seeded dummy) weights, greedy: every draft token is accepted
    same = acceptance.load(tmp_path / "same.json")
    assert same.alpha == 1.0 and same.alpha_iid == 1.0 and same.per_position == (1.0, 1.0, 1.0)
    random = acceptance.load(tmp_path / "random.json")
    assert 0.0 <= random.alpha < 1.0
