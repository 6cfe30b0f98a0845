"""A tune design's engines over (batch size, prompt length) and the K = 0 engine (`launch.interleaved.design_engines`):
labels, the options each engine runs with (read back from its command words, not from the code's own structures), the
driver's sharing of one vLLM engine across cells (`vllm.interleave.shared_engines`)."""

from __future__ import annotations

import json

import pytest

from nsys_cc.analysis.tune.keys import CellKey
from nsys_cc.errors import InputError
from nsys_cc.launch import interleaved
from nsys_cc.request import BenchOptions
from nsys_cc.vllm.interleave import shared_engines


def _flag(options, flag: str) -> str:
    options = list(options)
    return options[options.index(flag) + 1]


def test_cells_over_batch_and_prompt_length_are_labelled_by_their_key_and_run_at_it():
    cells = {CellKey(1, 32): [1], CellKey(4, 32): [1], CellKey(1, 64): [1], CellKey(4, 64): [1]}
    engines = interleaved.design_engines("tiny-llama-target", "tiny-llama-draft-xs", cells,
                                         BenchOptions(input_len=128, output_len=4), gpu=False)
    assert [e.label for e in engines] == [
        "bs1-in32.tiny-llama-target", "bs1-in32.tiny-llama-draft-xs.spec-g1",
        "bs1-in64.tiny-llama-target", "bs1-in64.tiny-llama-draft-xs.spec-g1",
        "bs4-in32.tiny-llama-target", "bs4-in32.tiny-llama-draft-xs.spec-g1",
        "bs4-in64.tiny-llama-target", "bs4-in64.tiny-llama-draft-xs.spec-g1"]
    # each engine runs at its own cell (the label's numbers), not at the options' input_len
    for e in engines:
        b, rest = e.label.removeprefix("bs").split("-in", 1)
        assert (_flag(e.options, "--batch-size"), _flag(e.options, "--input-len")) == (b, rest.split(".", 1)[0])
    # one vLLM engine per model across all four cells
    assert shared_engines([(e.label, list(e.options)) for e in engines]) == [0, 1, 0, 1, 0, 1, 0, 1]


def test_plain_int_keys_are_batch_sizes_at_the_options_prompt_length():
    engines = interleaved.design_engines("tiny-llama-target", "tiny-llama-draft-xs", {2: [1], CellKey(4): [1]},
                                         BenchOptions(input_len=48, output_len=4), gpu=False)
    assert [e.label for e in engines] == ["bs2.tiny-llama-target", "bs2.tiny-llama-draft-xs.spec-g1",
                                          "bs4.tiny-llama-target", "bs4.tiny-llama-draft-xs.spec-g1"]
    assert {_flag(e.options, "--input-len") for e in engines} == {"48"}


def test_the_longest_prompt_must_fit_the_models_context():
    # tiny-llama's context is 2048 tokens (its config.json); the shortest cell fits, the longest does not
    with pytest.raises(InputError, match="input_len 2040 \\+ output_len 16"):
        interleaved.design_engines("tiny-llama-target", "tiny-llama-draft-xs",
                                   {CellKey(1, 32): [1], CellKey(1, 2040): [1]}, BenchOptions(output_len=16),
                                   gpu=False)


def test_the_k0_engine_configures_the_largest_gamma_with_a_schedule_of_zero_everywhere():
    cells = {CellKey(1, 32): [1, 3], CellKey(4, 32): [2]}
    engines = interleaved.design_engines("tiny-llama-target", "tiny-llama-draft-xs", cells,
                                         BenchOptions(output_len=4), gpu=False, k0=True)
    k0 = [e for e in engines if ".k0." in e.label]
    assert [e.label for e in k0] == ["bs1-in32.tiny-llama-draft-xs.k0.spec-g3",
                                     "bs4-in32.tiny-llama-draft-xs.k0.spec-g3"]
    config = json.loads(_flag(k0[0].options, "--speculative-config"))
    g3 = next(e for e in engines if e.label == "bs1-in32.tiny-llama-draft-xs.spec-g3")
    base = json.loads(_flag(g3.options, "--speculative-config"))
    # the design's own draft_model config at γ = 3, plus the schedule: K = 0 from batch 1 to vLLM's largest default
    assert config == {**base, "num_speculative_tokens_per_batch_size": [[1, 1024, 0]]}
    assert base["num_speculative_tokens"] == 3 and base["method"] == "draft_model"
    assert [e.speculative and e.gamma == 3 and e.draft == "tiny-llama-draft-xs" for e in k0] == [True, True]
    # its own vLLM engine, shared by its cells, apart from the γ = 3 engine
    owners = shared_engines([(e.label, list(e.options)) for e in engines])
    labels = [e.label for e in engines]
    assert owners[labels.index(k0[1].label)] == labels.index(k0[0].label)
    assert owners[labels.index(k0[0].label)] != labels.index(g3.label)


def test_the_k0_schedule_reaches_max_num_seqs_where_the_options_name_it():
    opts = BenchOptions(output_len=4, vllm_args=("--max-num-seqs", "16"))
    engines = interleaved.design_engines("tiny-llama-target", "tiny-llama-draft-xs", {1: [2]}, opts, gpu=False,
                                         k0=True)
    (k0,) = [e for e in engines if ".k0." in e.label]
    assert json.loads(_flag(k0.options, "--speculative-config"))["num_speculative_tokens_per_batch_size"] == [[1, 16,
                                                                                                              0]]


@pytest.mark.slow
def test_the_k0_schedule_passes_vllms_own_validator():
    validator = pytest.importorskip("vllm.v1.spec_decode.dynamic.utils")
    config = interleaved.k0_config({"method": "draft_model", "model": "/m"}, 3)
    assert validator.validate_and_normalize_dynamic_sd_schedule(
        config["num_speculative_tokens_per_batch_size"]) == [(1, 1024, 0)]
    lookup = validator.build_dynamic_sd_schedule_lookup(config["num_speculative_tokens_per_batch_size"],
                                                        vllm_max_batch_size=256, vllm_num_speculative_tokens=3)
    assert set(lookup[1:]) == {0}  # K = 0 at every batch size the engine can run


def test_a_cell_key_that_is_no_key_or_batch_size_is_refused():
    with pytest.raises(InputError, match="CellKey or a batch size"):
        interleaved.design_engines("tiny-llama-target", "tiny-llama-draft-xs", {"8": [1]}, BenchOptions(), gpu=False)
