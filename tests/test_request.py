"""`nsys_cc.request`: one profile's request, made once from the flags or the library's arguments, and read back from
what a record stored. The fields are read here against `nsys-cc profile`'s own click options (the oracle for "a flag is
the field of the same name") and against `nsys_cc.profile`'s signature."""

from __future__ import annotations

import dataclasses
import inspect
import json

import click
import pytest

import nsys_cc
from nsys_cc.errors import InputError
from nsys_cc.request import BENCH_FIELDS, BenchOptions, ProfileRequest, parse_gammas

# What the profile verb takes that is no field of the request: how the CLI answers (dry run, table format).
CLI_ONLY = {"dry_run", "fmt"}


def _profile_flags() -> dict[str, click.Option]:
    from nsys_cc.cli import cli

    return {p.name: p for p in cli.commands["profile"].params if isinstance(p, click.Option) and p.name}


def test_every_flag_of_profile_is_the_field_of_its_name_and_back():
    fields = {f.name for f in dataclasses.fields(ProfileRequest)}
    flags = set(_profile_flags()) - CLI_ONLY
    assert flags == fields
    # so an error naming a field names its flag on the command line (the CLI's one function for it)
    from nsys_cc.cli import cli, in_flags

    command = cli.commands["profile"]
    assert in_flags("warmup_iters must be ≥ 0", command, "warmup_iters") == "--num-iters-warmup must be ≥ 0"
    assert in_flags("batch_size must be ≥ 1", command, "batch_size") == "--batch-size must be ≥ 1"


def test_the_library_takes_the_request_or_the_arguments_that_make_it():
    params = inspect.signature(nsys_cc.profile).parameters
    fields = {f.name for f in dataclasses.fields(ProfileRequest)}
    # its keywords are the request's fields, the benchmark's come in `options`
    assert set(params) - {"target", "options"} == fields - set(BENCH_FIELDS) - {"target"}
    made = ProfileRequest.of("t", "d", "o", BenchOptions(output_len=7, vllm_args=("--x",)), seed=3, speculate="3,1")
    assert (made.drafts, made.output_len, made.input_len, made.vllm_args, made.seed, made.speculate) == (
        ("d",), 7, 128, ("--x",), 3, (1, 3))
    assert made.options == BenchOptions(output_len=7, vllm_args=("--x",))


def test_the_benchmark_fields_are_defined_once():
    """A request's benchmark fields are `BenchOptions`' own (one definition, one default each: the two copies had
    drifted to 2 and 32 output tokens), keywords only; the models and `out_dir` stay positional."""
    assert issubclass(ProfileRequest, BenchOptions)
    own = {f.name: f for f in dataclasses.fields(BenchOptions)}
    for field in dataclasses.fields(ProfileRequest):
        if field.name in own:
            assert field is own[field.name] and field.kw_only, field.name
    assert tuple(own) == BENCH_FIELDS
    assert ProfileRequest("t").options == BenchOptions() and ProfileRequest("t", ("d",), "o").out_dir == "o"
    with pytest.raises(TypeError):
        BenchOptions(128)  # type: ignore[misc]
    # stored in the records in the order they always were: the models, out_dir, the benchmark, the rest
    assert list(ProfileRequest("t").to_dict())[:10] == ["target", "drafts", "out_dir", *BENCH_FIELDS]


def test_the_defaults_are_the_cli_defaults():
    from nsys_cc.cli import cli

    parsed = cli.commands["profile"].make_context("profile", ["--target", "t"]).params  # the flags as click gives them
    from_flags = ProfileRequest(**{k: v for k, v in parsed.items() if k not in CLI_ONLY})
    # the library's None is the CLI's default number of seconds
    assert parsed["timeout"] == 1800 and ProfileRequest("t").timeout is None
    assert from_flags.replace(timeout=None) == ProfileRequest("t")


def test_a_request_is_stored_as_json_data_and_read_back():
    request = ProfileRequest("tiny-llama-target", ["a", "b"], "out/p", output_len=8, acceptance=[0.6, "0.8"],
                             speculate=[3, 1], precision=0.05, timeout=0, profiler="torch",
                             speculative_config='{"method": "ngram"}')
    doc = json.loads(json.dumps(request.to_dict()))  # what a record holds
    assert doc["drafts"] == ["a", "b"] and doc["speculate"] == [1, 3] and doc["timeout"] == 0
    assert ProfileRequest.from_dict(doc) == request
    # a field a newer nsys-cc added is ignored, a missing one takes its default; null is a value where it can be
    assert ProfileRequest.from_dict({"target": "t", "new": 1}) == ProfileRequest("t")
    assert ProfileRequest.from_dict({"target": "t", "repeat": None}).repeat is None


@pytest.mark.parametrize("doc, words", [({"drafts": ["d"]}, "no 'target'"), ({"target": "t", "output_len": "8"},
                                                                              "output_len is a string, not an integer"),
                                        ({"target": "t", "drafts": "d"}, "drafts is a string, not an array")])
def test_a_stored_request_of_another_shape_is_named(doc, words):
    with pytest.raises(InputError, match=words):
        ProfileRequest.from_dict(doc, "the run record")


def test_list_like_fields_take_one_item_alone():
    one = ProfileRequest("t", "d", nsys_args="--sample=none", vllm_args="--dtype=half", acceptance=0.8, speculate=2)
    assert (one.drafts, one.nsys_args, one.vllm_args, one.acceptance, one.speculate) == (
        ("d",), ("--sample=none",), ("--dtype=half",), (0.8,), (2,))
    with pytest.raises(InputError, match="drafts: give a list") as err:
        ProfileRequest("t", {"d": 1})
    assert err.value.param == "drafts"


@pytest.mark.parametrize("value, expected", [("1,3", (1, 3)), ([3, 1, 3], (1, 3)), ((), ()), (None, ()), (2, (2,))])
def test_gammas_are_whole_numbers_at_least_one_ascending(value, expected):
    assert parse_gammas(value) == expected


@pytest.mark.parametrize("value, words", [("1,x", "'x' is not a whole number"), (",", "at least one γ"),
                                          ([0], "γ must be ≥ 1")])
def test_bad_gammas_name_speculate(value, words):
    with pytest.raises(InputError, match=words) as err:
        ProfileRequest("t", speculate=value)
    assert err.value.param == "speculate"


def test_a_request_given_with_other_arguments_is_refused(tmp_path):
    request = ProfileRequest("t", ["d"], tmp_path / "o")
    with pytest.raises(InputError, match=r"give a ProfileRequest alone .*also given: drafts, seed") as err:
        nsys_cc.profile(request, ["x"], seed=2)
    assert err.value.param == "drafts" and not (tmp_path / "o").exists()
