"""Names that mean one thing, as a caller meets them: an engine's window in an interleaved trace is given
by `engines=` (`--engine`), never by "scope" (vLLM's own NVTX scopes); the old `scopes=` / `--scope` still answer,
through `_compat`, with the version they go in."""

from __future__ import annotations

import json
import warnings

import pytest
from click.testing import CliRunner

import nsys_cc
from conftest import FIXTURES
from nsys_cc.cli import cli
from nsys_cc.errors import InputError, RangeNotFoundError

RUN = FIXTURES / "interleaved" / "run-1" / "trace.sqlite"
LABELS = ["tiny-llama-target", "tiny-llama-draft-s", "tiny-llama-draft-xs"]


@pytest.fixture(scope="module")
def by_engines():
    return nsys_cc.cost_coefficient(RUN, [RUN] * 2, engines=LABELS)


def test_the_old_name_of_engines_warns_and_means_the_same(by_engines):
    with pytest.warns(DeprecationWarning, match=r"^scopes= is deprecated and goes in nsys_cc 0\.2\.0: use engines="):
        old = nsys_cc.cost_coefficient(RUN, [RUN] * 2, scopes=LABELS)
    assert old == by_engines and [m.name for m in by_engines.models] == LABELS
    with pytest.warns(DeprecationWarning, match=r"^scopes= is deprecated"):
        assert nsys_cc.analyze(RUN, [RUN] * 2, scopes=LABELS) == by_engines


def test_engines_and_their_old_name_together_are_refused():
    for call in (lambda: nsys_cc.cost_coefficient(RUN, [RUN] * 2, engines=LABELS, scopes=LABELS),
                 lambda: nsys_cc.cost_coefficient_runs([[RUN] * 3], engines=[LABELS], scopes=[LABELS]),
                 lambda: nsys_cc.analyze(RUN, [RUN] * 2, engines=LABELS, scopes=LABELS)):
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # refused before any warning
            with pytest.raises(InputError, match=r"^give engines only \(scopes is its old name\)$") as err:
                call()
        assert err.value.param == "engines"


def test_an_unknown_engine_is_said_under_the_parameters_name():
    with pytest.raises(RangeNotFoundError, match=r"no .nsys_cc:engine nope. ranges") as err:
        nsys_cc.cost_coefficient(RUN, [RUN], engines=["nope", LABELS[1]])
    assert err.value.param == "engines"


def test_the_cli_takes_engine_and_its_old_name_with_a_note(by_engines):
    new = CliRunner().invoke(cli, ["analyze", str(RUN), str(RUN), str(RUN), *[a for label in LABELS
                                                                              for a in ("--engine", label)],
                                   "--format", "json"])
    assert new.exit_code == 0, new.output
    old = CliRunner().invoke(cli, ["analyze", str(RUN), str(RUN), str(RUN), *[a for label in LABELS
                                                                              for a in ("--scope", label)],
                                   "--format", "json"])
    assert old.exit_code == 0, old.output
    assert json.loads(old.stdout) == json.loads(new.stdout)
    assert "note: --scope is deprecated and goes in nsys-cc 0.2.0: use --engine" in old.stderr
    assert [m["name"] for m in json.loads(new.stdout)["models"]] == [m.name for m in by_engines.models]
