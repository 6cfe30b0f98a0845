"""`analysis.coefficient.source_kinds`: what `analyze` was given, decided once (`decide`), and the analysis each kind
gets (`analyze_given`) — a profile's directory, many trace sets, traces (a list, a pattern, a folder named by labels)
— with the one-line errors of a source that is none of them."""

from __future__ import annotations

import pytest

import nsys_cc
from conftest import FIXTURES
from nsys_cc.analysis.coefficient.source_kinds import (
    MANY,
    PROFILE,
    TRACES,
    Given,
    analyze_given,
    decide,
    traces_of_folder,
)
from nsys_cc.errors import InputError

VLLM, INTERLEAVED = FIXTURES / "vllm", FIXTURES / "interleaved"
PLAIN = ["tiny-llama-target", "tiny-llama-draft-s", "tiny-llama-draft-xs"]


def test_what_the_source_is_is_decided_once(monkeypatch):
    """`analyze` asks what its source is once (`source_kinds.decide`), then analyses that kind: a profile's output
    directory is not asked about again on the way to its analysis (front and the analysis each asked before)."""
    from nsys_cc.analysis.coefficient import source_kinds
    from nsys_cc.analysis.profile_dir import outputs

    asked: list = []
    real = outputs.is_profile_output
    monkeypatch.setattr(outputs, "is_profile_output", lambda p: asked.append(p) or real(p))

    class Reached(Exception):
        pass

    def reached(path, **kwargs):
        raise Reached(len(asked))

    monkeypatch.setattr(source_kinds, "analyze_profile", reached)
    with pytest.raises(Reached) as got:
        nsys_cc.analyze(INTERLEAVED / "spec")
    assert got.value.args == (1,)


def test_the_kinds_of_source(tmp_path):
    traces = [VLLM / f"{m}.sqlite" for m in PLAIN]
    manifest = tmp_path / "m.csv"
    manifest.write_text("name,target,drafts\n")
    assert decide(INTERLEAVED / "spec").kind == PROFILE
    assert (decide(manifest, is_many=lambda p: True).kind, decide(manifest).kind) == (MANY, TRACES)
    listed = decide(traces)  # [target, *drafts] as one list
    assert (listed.kind, listed.source, listed.drafts) == (TRACES, traces[0], tuple(traces[1:]))
    given = decide(traces[0], traces[1:], is_many=lambda p: True)  # drafts given: one trace set, whatever the path
    assert (given.kind, given.source, given.drafts) == (TRACES, traces[0], tuple(traces[1:]))


def test_a_folder_of_traces_is_read_by_their_labels(tmp_path):
    for label in ("t", "d", "d.spec-g1", "d.spec-g2", "h.spec-g1"):
        (tmp_path / f"{label}.sqlite").write_bytes(b"")
    target, drafts, (note,) = traces_of_folder(str(tmp_path))
    assert target == str(tmp_path / "t.sqlite")  # neither a speculative run nor a draft one names
    assert drafts == [str(tmp_path / f"{x}.sqlite") for x in ("d", "d.spec-g1", "d.spec-g2", "h.spec-g1")]
    assert "no status.json" in note and "target t" in note


def test_a_folder_that_does_not_say_its_target_is_one_error_naming_its_traces(tmp_path):
    for label in ("a", "b"):
        (tmp_path / f"{label}.sqlite").write_bytes(b"")
    with pytest.raises(InputError, match=r"neither a profile's output directory .*\(it holds 2 trace\(s\): a.sqlite, "
                                         r"b.sqlite") as err:
        traces_of_folder(str(tmp_path))
    assert err.value.param == "source"


@pytest.mark.parametrize("kwargs, param", [({"names": ["a"]}, "names"), ({"engines": ["a"]}, "engines"),
                                           ({"spec_metrics": {"a": "b"}}, "spec_metrics"),
                                           ({"range_name": ["x", "y"]}, "range_name")])
def test_what_only_traces_take_is_refused_for_a_profile_directory(kwargs, param):
    with pytest.raises(InputError) as err:
        analyze_given(Given(PROFILE, INTERLEAVED / "spec"), **kwargs)
    assert err.value.param == param


def test_many_trace_sets_are_the_callers_and_a_lone_path_must_exist(tmp_path):
    with pytest.raises(InputError, match=r"holds many trace sets: analyse it with nsys_cc.analyze") as err:
        analyze_given(Given(MANY, tmp_path / "m.csv"))
    assert err.value.param == "source"
    with pytest.raises(InputError, match=r"no file matches this pattern"):
        analyze_given(decide(str(tmp_path / "run-*" / "trace.sqlite")))
    with pytest.raises(InputError, match=r"no such file or directory"):
        analyze_given(decide(tmp_path / "gone.sqlite"))
    with pytest.raises(InputError, match=r"is one trace: give the drafts' traces after the target's") as err:
        analyze_given(decide(VLLM / "tiny-llama-target.sqlite"))
    assert err.value.param == "drafts"
