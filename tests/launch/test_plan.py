"""Speculative runs of `nsys-cc profile` that need no vLLM run: the plan, labels, roles, commands, resume, errors."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest
from click.testing import CliRunner

from conftest import planned
from nsys_cc.cli import cli
from nsys_cc.errors import InputError
from nsys_cc.launch import orchestrator, pair, resume, separate
from nsys_cc.launch.models import MODELS_DIR, resolve
from nsys_cc.launch.results import ProfileOutcome
from nsys_cc.request import BenchOptions, ProfileRequest

NSYS = "/opt/nsys/bin/nsys"


def _after(args: list[str], flag: str) -> str:
    return args[args.index(flag) + 1]


def _plan(tmp_path, drafts=("tiny-llama-draft-s", "tiny-llama-draft-xs"), **kw):
    return planned("tiny-llama-target", list(drafts), tmp_path, BenchOptions(output_len=32), nsys=NSYS, **kw)


def test_speculate_adds_one_run_per_draft_and_gamma_after_the_plain_runs(tmp_path):
    runs = _plan(tmp_path, speculate=[3, 1, 3])
    assert [(r.role, r.model.label, r.draft, r.gamma) for r in runs] == [
        ("target", "tiny-llama-target", None, None),
        ("draft", "tiny-llama-draft-s", None, None),
        ("draft", "tiny-llama-draft-xs", None, None),
        ("speculative", "tiny-llama-draft-s.spec-g1", "tiny-llama-draft-s", 1),
        ("speculative", "tiny-llama-draft-s.spec-g3", "tiny-llama-draft-s", 3),
        ("speculative", "tiny-llama-draft-xs.spec-g1", "tiny-llama-draft-xs", 1),
        ("speculative", "tiny-llama-draft-xs.spec-g3", "tiny-llama-draft-xs", 3),
    ]
    spec = runs[-1]
    args = spec.commands.profile
    assert _after(args, "--model") == str(MODELS_DIR / "tiny-llama-target")  # the target runs, speculating
    assert json.loads(_after(args, "--speculative-config")) == {
        "method": "draft_model", "model": str(MODELS_DIR / "tiny-llama-draft-xs"), "num_speculative_tokens": 3}
    assert _after(args, "-o") == str(tmp_path.resolve() / "tiny-llama-draft-xs.spec-g3")
    metrics = tmp_path.resolve() / "tiny-llama-draft-xs.spec-g3.metrics.json"
    assert spec.commands.env["NSYS_CC_METRICS_OUT"] == str(metrics)
    # Plain runs are unchanged by speculation: no speculative config, no metrics dump.
    for run in runs[:3]:
        assert "--speculative-config" not in run.commands.profile and "NSYS_CC_METRICS_OUT" not in run.commands.env
    # Every run has the same benchmark lengths.
    lengths = {tuple(_after(r.commands.profile, f) for f in ("--input-len", "--output-len", "--batch-size"))
               for r in runs}
    assert lengths == {("128", "32", "1")}


def test_status_entries_carry_role_draft_and_gamma(tmp_path):
    runs = _plan(tmp_path, drafts=["tiny-llama-draft-xs"], speculate=[2])
    request = ProfileRequest("tiny-llama-target", ["tiny-llama-draft-xs"], tmp_path, speculate=[2])
    path = orchestrator.write_status(tmp_path, separate.Separate(request, gpu=False, dry=True, launches=runs))
    entries = json.loads(path.read_text())["models"]
    assert [e["role"] for e in entries] == ["target", "draft", "speculative"]
    assert "gamma" not in entries[0] and "draft" not in entries[1]
    assert entries[2]["draft"] == "tiny-llama-draft-xs" and entries[2]["gamma"] == 2
    assert entries[2]["metrics"].endswith("tiny-llama-draft-xs.spec-g2.metrics.json")
    assert json.loads(entries[2]["speculative_config"])["num_speculative_tokens"] == 2


def test_a_speculative_config_is_the_base_of_the_speculate_runs(tmp_path):
    base = '{"method": "draft_model", "draft_tensor_parallel_size": 1, "num_speculative_tokens": 9}'
    runs = _plan(tmp_path, drafts=["tiny-llama-draft-xs"], speculate=[2], speculative_config=base)
    config = json.loads(_after(runs[-1].commands.profile, "--speculative-config"))
    assert config == {"method": "draft_model", "draft_tensor_parallel_size": 1,
                      "model": str(MODELS_DIR / "tiny-llama-draft-xs"), "num_speculative_tokens": 2}


def test_a_speculative_config_alone_is_one_run_as_given_and_needs_no_draft(tmp_path):
    ngram = {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 4, "prompt_lookup_min": 2}
    runs = _plan(tmp_path, drafts=[], speculative_config=json.dumps(ngram))
    assert [(r.role, r.model.label, r.draft, r.gamma) for r in runs] == [
        ("target", "tiny-llama-target", None, None), ("speculative", "ngram.spec-g3", "ngram", 3)]
    assert json.loads(_after(runs[1].commands.profile, "--speculative-config")) == ngram
    # A config that names a draft model is labelled after that draft.
    named = {"method": "draft_model", "model": "tiny-llama-draft-xs", "num_speculative_tokens": 2}
    runs = _plan(tmp_path, drafts=["tiny-llama-draft-xs"], speculative_config=json.dumps(named))
    assert runs[-1].model.label == "tiny-llama-draft-xs.spec-g2" and runs[-1].draft == "tiny-llama-draft-xs"


@pytest.mark.parametrize("kw, words", [
    ({"speculate": [0]}, "γ must be ≥ 1"),
    ({"speculate": "1,x"}, "'x' is not a whole number"),
    ({"speculate": ","}, "at least one γ"),
    ({"speculative_config": "{bad"}, "not JSON"),
    ({"speculative_config": "[3]"}, "must be a JSON object"),
    ({"speculative_config": '{"method": "ngram"}'}, "num_speculative_tokens"),
])
def test_bad_speculation_arguments_are_refused_by_their_parameter_name(tmp_path, kw, words):
    with pytest.raises(InputError, match=words) as info:
        _plan(tmp_path, **kw)
    assert str(info.value).startswith(("speculate", "speculative_config"))


def test_no_draft_is_refused_unless_a_speculative_config_stands_alone(tmp_path):
    with pytest.raises(InputError, match=r"at least one draft \(drafts\)"):
        _plan(tmp_path, drafts=[])
    with pytest.raises(InputError, match=r"at least one draft \(drafts\)"):
        _plan(tmp_path, drafts=[], speculate=[1])


def test_known_alpha_models_load_real_weights_and_cannot_pair_with_dummy_ones(tmp_path, monkeypatch):
    monkeypatch.setenv(pair.ENV_MODELS, str(tmp_path / "models"))
    runs = planned("pair-target-a50", ["pair-draft"], tmp_path / "out", BenchOptions(), nsys=NSYS, speculate=[2])
    assert {_after(r.commands.profile, "--load-format") for r in runs} == {"auto"}
    assert _after(runs[0].commands.profile, "--model") == str(tmp_path / "models" / "pair-target-a50")
    assert not (tmp_path / "models").exists()  # planning builds nothing
    tiny = planned("tiny-llama-target", ["tiny-llama-draft-xs"], tmp_path / "out", BenchOptions(), nsys=NSYS)
    assert {_after(r.commands.profile, "--load-format") for r in tiny} == {"dummy"}
    with pytest.raises(InputError, match="cannot be paired"):
        planned("pair-target", ["tiny-llama-draft-xs"], tmp_path / "out", BenchOptions(), nsys=NSYS, speculate=[1])
    assert resolve("pair-draft").kind == "pair"


def test_resume_needs_the_metrics_dump_of_a_speculative_run(tmp_path):
    runs = _plan(tmp_path, drafts=["tiny-llama-draft-xs"], speculate=[1])
    spec = runs[-1]
    f = spec.files
    for path in (f.trace, f.bench_json):
        path.write_text("x")
    f.done.write_text(json.dumps({"commands": spec.commands.shell(), "range": "model_executable()"}))
    assert not resume.is_complete(spec)
    f.metrics.write_text("{}")
    assert resume.is_complete(spec)


def _cli(*args: str):
    return CliRunner().invoke(cli, ["profile", "--target", "tiny-llama-target", "--device", "cpu", "--dry-run",
                                    *args])


def test_dry_run_lists_the_speculative_runs_with_output_len_32_as_every_profile(tmp_path):
    out = tmp_path / "out"
    res = _cli("--draft", "tiny-llama-draft-xs", "--speculate", "1,3", "-o", str(out), "--separate-processes")
    assert res.exit_code == 0, res.output
    assert not out.exists()
    headers = [ln for ln in res.output.splitlines() if ln.startswith("# ")]
    assert headers == ["# target tiny-llama-target (CPU)", "# draft tiny-llama-draft-xs (CPU)",
                       "# speculative tiny-llama-draft-xs.spec-g1 (draft tiny-llama-draft-xs, γ = 1) (CPU)",
                       "# speculative tiny-llama-draft-xs.spec-g3 (draft tiny-llama-draft-xs, γ = 3) (CPU)"]
    profiles = [shlex.split(ln) for ln in res.output.splitlines() if " profile " in ln]
    assert [_after(p, "--output-len") for p in profiles] == ["32"] * 4
    assert "NSYS_CC_METRICS_OUT=" + str(out / "tiny-llama-draft-xs.spec-g3.metrics.json") in profiles[-1]
    plain = _cli("--draft", "tiny-llama-draft-xs", "-o", str(out), "--separate-processes")
    assert {_after(shlex.split(ln), "--output-len") for ln in plain.output.splitlines() if " profile " in ln} == {"32"}
    given = _cli("--draft", "tiny-llama-draft-xs", "--speculate", "2", "--output-len", "8", "-o", str(out),
                 "--separate-processes")
    assert {_after(shlex.split(ln), "--output-len") for ln in given.output.splitlines() if " profile " in ln} == {"8"}


@pytest.mark.parametrize("args, message", [
    (["--draft", "tiny-llama-draft-xs", "--speculate", "0"], "nsys-cc: error: --speculate: γ must be ≥ 1, not 0"),
    (["--speculative-config", '{"method": "ngram"}'],
     ('nsys-cc: error: --speculative-config needs "num_speculative_tokens" (a whole number ≥ 1) when no γ values '
      "are given")),
])
def test_cli_errors_name_the_flags(args, message):
    res = _cli(*args)
    assert res.exit_code == 2
    assert res.output.strip().splitlines()[-1] == message


def test_the_profile_run_hands_completed_speculative_traces_to_the_analysis(tmp_path):
    runs = _plan(tmp_path, drafts=["tiny-llama-draft-xs"], speculate=[1, 2])
    runs[-2].status, runs[-1].status = "done", "failed"
    outcome = ProfileOutcome(Path(tmp_path), runs)
    (trace,) = outcome.speculative
    assert (trace.label, trace.draft, trace.gamma) == ("tiny-llama-draft-xs.spec-g1", "tiny-llama-draft-xs", 1)
    assert trace.trace.name == "tiny-llama-draft-xs.spec-g1.sqlite"
    assert trace.metrics.name == "tiny-llama-draft-xs.spec-g1.metrics.json"
    assert trace.bench_json.name == "tiny-llama-draft-xs.spec-g1.bench.json"
