"""The schedule forms, against tables written by hand from each engine's rules."""

from __future__ import annotations

from nsys_cc.analysis.tune import forms


def test_tensorrt_llm_keys_are_each_run_s_last_batch_size():
    # K 3 for B 1–4, 1 for 5–8, 0 above: {4: 3, 8: 1}; above the last key TensorRT-LLM drafts 0
    f = forms.tensorrt_llm([[1, 4, 3], [5, 8, 1], [9, 32, 0]], 32)
    assert f["schedule"] == {"4": 3, "8": 1} and f["max_draft_len"] == 3 and f["why_not"] is None


def test_tensorrt_llm_refuses_a_schedule_its_validator_would():
    f = forms.tensorrt_llm([[1, 2, 1], [3, 16, 3]], 16)
    assert f["schedule"] is None and "smallest key" in f["why_not"]
    assert forms.tensorrt_llm([[1, 16, 0]], 16)["schedule"] is None


def test_sglang_one_candidate_per_lower_bound():
    assert forms.sglang([[1, 7, 3], [8, 31, 1], [32, 64, 0]])["schedule"] == {
        "1": {"candidate_steps": [3]}, "8": {"candidate_steps": [1]}, "32": {"candidate_steps": [0]}}


def test_vllm_48944_rows_split_contexts_halfway():
    by = {32: {"server": [[1, 4, 3], [5, 32, 1]]}, 256: {"server": [[1, 32, 1]]}}
    f = forms.vllm_48944({L: v["server"] for L, v in by.items()}, output_len=32, max_model_len=2048)
    # L = 32 sequences reach 32 … 64 tokens of context; the boundary halfway between 32 + 32 and 256: 160
    assert f["schedule"] == [[1, 4, 0, 160, 3], [5, 32, 0, 160, 1], [1, 32, 161, 2048, 1]]
    assert "OPEN" in f["status"]


def test_vllm_0_32_rows_as_given():
    assert forms.vllm_0_32([[1, 8, 2], [9, 32, 0]], 128)["schedule"] == [[1, 8, 2], [9, 32, 0]]
