"""Names that mean one thing, as a caller meets them: an engine's window in an interleaved trace is given
by `engines=` (`--engine`), never by "scope" (vLLM's own NVTX scopes)."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

import nsys_cc
from conftest import FIXTURES
from nsys_cc.cli import cli
from nsys_cc.errors import RangeNotFoundError

RUN = FIXTURES / "interleaved" / "run-1" / "trace.sqlite"
LABELS = ["tiny-llama-target", "tiny-llama-draft-s", "tiny-llama-draft-xs"]


@pytest.fixture(scope="module")
def by_engines():
    return nsys_cc.cost_coefficient(RUN, [RUN] * 2, engines=LABELS)


def test_an_unknown_engine_is_said_under_the_parameters_name():
    with pytest.raises(RangeNotFoundError, match=r"no .nsys_cc:engine nope. ranges") as err:
        nsys_cc.cost_coefficient(RUN, [RUN], engines=["nope", LABELS[1]])
    assert err.value.param == "engines"


@pytest.mark.slow
def test_the_cli_takes_engine(by_engines):
    new = CliRunner().invoke(cli, ["analyze", str(RUN), str(RUN), str(RUN), *[a for label in LABELS
                                                                              for a in ("--engine", label)],
                                   "--format", "json"])
    assert new.exit_code == 0, new.output
    assert [m["name"] for m in json.loads(new.stdout)["models"]] == [m.name for m in by_engines.models] == LABELS
