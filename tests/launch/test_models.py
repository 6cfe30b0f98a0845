"""Profiling the methods servers run: EAGLE and EAGLE-3 heads shipped for `tiny-llama-target`,
MTP with a target that has an MTP layer (`tiny-mimo-target`); their plans and the commands vLLM gets (no vLLM run).
"""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from conftest import planned
from nsys_cc.cli import cli
from nsys_cc.errors import InputError
from nsys_cc.launch import models
from nsys_cc.launch.models import MODELS_DIR
from nsys_cc.request import BenchOptions

NSYS = "/opt/nsys/bin/nsys"


def _plan(tmp_path, target="tiny-llama-target", drafts=(), **kw):
    return planned(target, list(drafts), tmp_path, BenchOptions(output_len=16), nsys=NSYS, gpu=False, **kw)


def _config(run):
    args = run.commands.profile
    return json.loads(args[args.index("--speculative-config") + 1])


def _shape(name):
    return json.loads((MODELS_DIR / name / "config.json").read_text())


def test_the_heads_are_shaped_for_the_tiny_target():
    target, eagle, eagle3 = _shape("tiny-llama-target"), _shape("tiny-llama-eagle"), _shape("tiny-llama-eagle3")
    for head in (eagle, eagle3):  # a head runs on the target's hidden states and predicts its vocabulary
        assert head["hidden_size"] == target["hidden_size"] and head["vocab_size"] == target["vocab_size"]
        assert head["num_hidden_layers"] == 1
    # EAGLE-3 reads three of the target's layers: they exist, and its first layer takes 3 × the target's width
    assert len(eagle3["eagle_aux_hidden_state_layer_ids"]) == 3
    assert max(eagle3["eagle_aux_hidden_state_layer_ids"]) < target["num_hidden_layers"]
    assert eagle3["architectures"] == ["LlamaForCausalLMEagle3"]
    mimo = _shape("tiny-mimo-target")
    assert mimo["architectures"] == ["MiMoForCausalLM"] and mimo["num_nextn_predict_layers"] == 1
    assert {k: mimo[k] for k in ("hidden_size", "num_hidden_layers", "vocab_size")} == \
        {k: target[k] for k in ("hidden_size", "num_hidden_layers", "vocab_size")}
    assert set(models.HEADS) <= set(models.SHAPES)


def test_an_eagle_config_is_one_run_per_gamma_with_the_shipped_head_filled_in(tmp_path):
    runs = _plan(tmp_path, speculate=[1, 3], speculative_config='{"method": "eagle"}')
    assert [(r.role, r.model.label, r.draft, r.gamma, r.method) for r in runs] == [
        ("target", "tiny-llama-target", None, None, None),
        ("speculative", "tiny-llama-eagle.spec-g1", "tiny-llama-eagle", 1, "eagle"),
        ("speculative", "tiny-llama-eagle.spec-g3", "tiny-llama-eagle", 3, "eagle")]
    assert _config(runs[2]) == {"method": "eagle", "num_speculative_tokens": 3,
                                "model": str(MODELS_DIR / "tiny-llama-eagle")}


def test_a_head_named_in_the_config_is_given_to_vllm_as_its_folder(tmp_path):
    runs = _plan(tmp_path, speculative_config='{"method": "eagle3", "model": "tiny-llama-eagle3", '
                                              '"num_speculative_tokens": 2}')
    assert [r.model.label for r in runs] == ["tiny-llama-target", "tiny-llama-eagle3.spec-g2"]
    assert _config(runs[1])["model"] == str(MODELS_DIR / "tiny-llama-eagle3")


def test_mtp_needs_a_target_with_mtp_layers(tmp_path):
    runs = _plan(tmp_path, target="tiny-mimo-target", speculate=[2], speculative_config='{"method": "mtp"}')
    assert [(r.model.label, r.draft) for r in runs] == [("tiny-mimo-target", None), ("mtp.spec-g2", "mtp")]
    assert _config(runs[1]) == {"method": "mtp", "num_speculative_tokens": 2}
    with pytest.raises(InputError, match="tiny-llama-target has none of; profile tiny-mimo-target"):
        _plan(tmp_path, speculate=[2], speculative_config='{"method": "mtp"}')


def test_a_head_given_as_a_draft_is_refused_with_the_way_to_profile_it(tmp_path):
    res = CliRunner().invoke(cli, ["profile", "--target", "tiny-llama-target", "--draft", "tiny-llama-eagle3",
                                   "--speculate", "2", "--dry-run", "-o", str(tmp_path / "out")])
    assert res.exit_code == 2
    assert ("tiny-llama-eagle3 is an EAGLE-3 head on tiny-llama-target's hidden states: it has no run of its own; "
            "profile it with --speculative-config") in res.output
    assert "Traceback" not in res.output


def test_suffix_decoding_without_arctic_inference_is_one_clear_line(tmp_path, monkeypatch):
    import importlib.util

    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None)
    res = CliRunner().invoke(cli, ["profile", "--target", "tiny-llama-target", "--speculative-config",
                                   '{"method": "suffix", "num_speculative_tokens": 3}', "--dry-run", "-o",
                                   str(tmp_path / "out")])
    assert res.exit_code == 2 and "Arctic Inference is required for suffix decoding" in res.output


def test_speculate_without_drafts_or_config_still_needs_a_draft(tmp_path):
    with pytest.raises(InputError, match="give at least one draft"):
        _plan(tmp_path, speculate=[1])
