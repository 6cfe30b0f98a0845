"""`nsys-cc tune` through click's CliRunner: the flags become one `TuneRequest` (each the field of its name) handed
to the workflow whole; its errors name the flags; exit code 3 when the schedule is not recommended."""

from __future__ import annotations

import json
from types import SimpleNamespace

from click.testing import CliRunner

from conftest import FIXTURES
from nsys_cc.cli import cli
from nsys_cc.workflows.tune_request import TuneRequest


def _captured(monkeypatch, trusted=True):
    from nsys_cc.workflows import tune as tuning

    seen = []

    def fake(request):
        seen.append(request)
        result = SimpleNamespace(trusted=trusted)
        return SimpleNamespace(result=result, notes=[], files={}, trusted=trusted,
                               to_dict=lambda: {"trusted": trusted, "notes": []})

    monkeypatch.setattr(tuning, "tune", fake)
    return seen


def test_the_flags_are_the_requests_fields(monkeypatch):
    seen = _captured(monkeypatch)
    r = CliRunner().invoke(cli, ["tune", str(FIXTURES), "--batch-size", "1,8", "--speculate", "2", "--check",
                                 "4:2", "--no-plot", "--no-confirm", "--max-gamma", "4", "--num-iters", "3",
                                 "--nsys-trace", "nvtx", "--workload", "benchmark", "--format", "json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout) == {"trusted": True, "notes": []}
    assert seen == [TuneRequest(str(FIXTURES), batch_sizes=[1, 8], speculate=[2], check=[(4, 2)], plot=False,
                                confirm=False, max_gamma=4, iters=3, trace="nvtx", workload="benchmark")]


def test_defaults_are_the_librarys(monkeypatch):
    seen = _captured(monkeypatch)
    CliRunner().invoke(cli, ["tune", "--format", "json"])
    assert seen == [TuneRequest()]


def test_an_untrusted_schedule_exits_3(monkeypatch):
    _captured(monkeypatch, trusted=False)
    r = CliRunner().invoke(cli, ["tune", str(FIXTURES), "--format", "json"])
    assert r.exit_code == 3 and "not recommended" in r.stderr


def test_a_bad_design_names_the_flag():
    r = CliRunner().invoke(cli, ["tune", str(FIXTURES), "--batch-size", "x"])
    assert r.exit_code == 2 and r.stderr.strip() == "nsys-cc: error: --batch-size: 'x' is not a whole number ≥ 1"
