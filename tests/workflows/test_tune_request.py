"""`TuneRequest`: what `tune` is asked, made from the CLI's flags (a flag's destination is the field of the same name)
or the library's keywords, checked when it is made, each error naming its field; its design, checks and defaults.
Expectations written by hand."""

from __future__ import annotations

import dataclasses

import click
import pytest

from conftest import FIXTURES
from nsys_cc.analysis.tune.keys import CellKey
from nsys_cc.cli.tune import tune_command
from nsys_cc.errors import InputError
from nsys_cc.workflows.tune_request import MAX_FORECAST_CELLS, TuneRequest


def test_every_flag_of_the_verb_is_a_field_of_the_request():
    fields = {f.name for f in dataclasses.fields(TuneRequest)}
    dests = {p.name for p in tune_command.params}
    assert dests - fields == {"fmt"}  # how the answer is printed: the CLI's alone
    assert fields - dests == {"draws"}  # the library's bootstrap size: no flag
    flags = {p.name: p for p in tune_command.params if isinstance(p, click.Option)}
    for name in ("plot", "confirm", "run_schedule"):  # on/off flags are the field, not its negation
        assert flags[name].secondary_opts, name
    library, ctx = TuneRequest(), click.Context(tune_command)
    for name, p in flags.items():  # a flag's default makes the field's default (the CLI and the library alike)
        if name != "fmt":
            assert getattr(TuneRequest(**{name: p.get_default(ctx)}), name) == getattr(library, name), name


def test_the_design_is_read_by_the_arguments_rules():
    r = TuneRequest(batch_sizes="8,1", speculate=[3, "1"], check="16:3,4:2")
    assert (r.batch_sizes, r.speculate, r.check) == ([1, 8], [1, 3], [(16, 3), (4, 2)])
    assert r.checks == [(CellKey(16), 3), (CellKey(4), 2)]
    assert r.profiling and r.profiled_out == "out/tune"
    assert r.design() == ([CellKey(1), CellKey(8)], [1, 3])


def test_the_design_defaults_differ_when_profiling_and_reading():
    assert TuneRequest().design() == ([CellKey(1), CellKey(8)], [1, 3])  # profiling: B ∈ {1, 8} × γ ∈ {1, 3}
    reading = TuneRequest(FIXTURES / "tune" / "a99")
    assert reading.design() == ([], [])  # nothing asked, nothing recorded: every cell is fitted
    assert reading.design({"batch_sizes": [4], "speculate": [2]}) == ([CellKey(4)], [2])
    assert TuneRequest(FIXTURES, speculate=3).design({"batch_sizes": [4], "speculate": [2]}) == ([CellKey(4)], [3])


@pytest.mark.parametrize("kw,param,match", [
    (dict(batch_sizes="x"), "batch_sizes", r"^batch_sizes: 'x' is not a whole number"),
    (dict(speculate=""), "speculate", r"^speculate is empty"),
    (dict(check="4"), "check", r"^check: '4' is not BATCH:GAMMA"),
    (dict(workload="steady"), "workload", r"^workload must be one of server, benchmark"),
    (dict(max_gamma=0), "max_gamma", r"^max_gamma must be a whole number ≥ 1, not 0"),
    (dict(draws=True), "draws", r"^draws must be a whole number"),
    (dict(max_batch_size=MAX_FORECAST_CELLS, max_gamma=2), "max_batch_size", r"forecast cells: at most 8192"),
    (dict(max_batch_size=2, max_gamma=MAX_FORECAST_CELLS), "max_gamma", r"forecast cells: at most 8192"),
    (dict(max_batch_size=64, draws=1 << 20), "draws", r"^draws 1048576 × 512 forecast cells: at most"),
])
def test_a_bad_request_is_refused_when_made_naming_its_field(kw, param, match):
    with pytest.raises(InputError, match=match) as got:
        TuneRequest(**kw)
    assert got.value.param == param


def test_the_benchmark_options_are_the_requests():
    o = TuneRequest(input_len=32, output_len=8, warmup_iters=1, iters=2).bench_options()
    assert (o.input_len, o.output_len, o.warmup_iters, o.iters) == (32, 8, 1, 2)
    assert TuneRequest(device="cpu").uses_gpu is False


def test_the_library_passes_a_request_whole_or_its_keywords(monkeypatch):
    from nsys_cc.workflows import tune as tuning

    seen = []
    monkeypatch.setattr(tuning, "_tuned", lambda req, folder: seen.append(req) or "report")
    base = TuneRequest(FIXTURES, max_gamma=4)
    assert tuning.tune(base) == "report" and seen[-1] is base
    tuning.tune(base, plot=False)  # a request with some fields replaced
    assert seen[-1] == dataclasses.replace(base, plot=False)
    tuning.tune(FIXTURES, max_gamma=4)  # nsys_cc.tune(source, **keywords), as before
    assert seen[-1] == base
    tuning.tune(source=FIXTURES, max_gamma=4)
    assert seen[-1] == base
    with pytest.raises(TypeError):
        tuning.tune(FIXTURES, batch_size=4)  # not a field: the keyword is batch_sizes


def test_input_len_is_a_design_axis_and_check_names_its_length():
    from nsys_cc.analysis.tune.keys import CellKey
    from nsys_cc.workflows.tune_request import TuneRequest as Req

    r = Req(target="t", draft="d", batch_sizes="1,4,8", speculate="1,3", input_len="256,32", check="2@256:3,4:2")
    assert r.input_len == (32, 256)
    keys, gammas = r.design()
    assert keys == [CellKey(b, L) for b in (1, 4, 8) for L in (32, 256)] and gammas == [1, 3]
    assert r.checks == [(CellKey(4), 2), (CellKey(2, 256), 3)]
    assert r.bench_options().input_len == 256
    one = Req(target="t", draft="d", input_len=128)
    assert one.input_len == (128,) and one.design()[0] == [CellKey(1), CellKey(8)]
