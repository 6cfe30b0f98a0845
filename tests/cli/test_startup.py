"""A CLI that answers at once: a verb imports what it uses when it runs. `--help` (of the tool and of each verb) loads
neither pandas, SQLAlchemy, matplotlib nor NumPy; `speedup` neither pandas nor SQLAlchemy; `analyze` of small traces
neither SQLAlchemy, matplotlib nor the Arrow engine. Each runs in a fresh process, which then lists what it loaded.
(How fast that is, is measured by benchmarks/cli_startup.py, not here.)"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from conftest import REPO

ROOT = REPO
VLLM = ROOT / "fixtures" / "vllm"
HEAVY = ("pandas", "sqlalchemy", "matplotlib", "numpy", "pyarrow", "adbc_driver_manager", "scipy")

SPEC = ROOT / "fixtures" / "spec"
# The speculative analysis and its text: a plain analyze needs none of them (a quick CLI loads no more).
SPECULATIVE = ("nsys_cc.analysis.speculative.in_place", "nsys_cc.analysis.speculative.runs",
               "nsys_cc.analysis.speculative.tables", "nsys_cc.analysis.speculative.pooled",
               "nsys_cc.analysis.speculative.forecast", "nsys_cc.report.speculative_text")

PROBE = """
import json, sys
from nsys_cc.cli import main
try:
    main(sys.argv[1:])
except SystemExit as exc:
    code = exc.code
else:
    code = 0
sys.stderr.write("\\n" + json.dumps({"code": code, "loaded": sorted(
    m for m in %r if m in sys.modules)}) + "\\n")
"""


def loaded(*args: str, among: tuple[str, ...] = HEAVY) -> list[str]:
    """The modules of `among` (the heavy libraries) a fresh `nsys-cc ARGS` loaded (it must exit 0)."""
    out = subprocess.run([sys.executable, "-c", PROBE % (among,), *args], capture_output=True, text=True, cwd=ROOT)
    doc = json.loads(out.stderr.strip().splitlines()[-1])
    assert doc["code"] in (0, None), out.stderr
    return doc["loaded"]


def test_help_loads_nothing_heavy():
    assert loaded("--help") == []


@pytest.mark.parametrize("verb", ["analyze", "profile", "sweep", "tune", "speedup", "info", "ranges", "kernels"])
def test_each_verbs_help_loads_nothing_heavy(verb):
    assert loaded(verb, "--help") == []


@pytest.mark.slow
def test_speedup_needs_no_pandas_nor_sqlalchemy():
    assert loaded("speedup", "--c", "0.0662", "--acceptance", "0.8") == ["numpy"]


@pytest.mark.slow
def test_analyze_of_small_traces_loads_no_sqlalchemy_matplotlib_or_arrow_engine():
    got = loaded("analyze", str(VLLM / "tiny-llama-target.sqlite"), str(VLLM / "tiny-llama-draft-s.sqlite"))
    assert not {"sqlalchemy", "matplotlib", "adbc_driver_manager"} & set(got)
    assert "pandas" in got  # the analysis itself is pandas


# slow (a real process, ~4 s on a loaded 2-core machine): the same small-read rule as analyze's, whose test
# above stays in `make check`
@pytest.mark.slow
def test_kernels_of_small_traces_loads_no_sqlalchemy_matplotlib_or_arrow_engine():
    got = loaded("kernels", str(VLLM / "tiny-llama-target.sqlite"), str(VLLM / "tiny-llama-draft-s.sqlite"))
    assert not {"sqlalchemy", "matplotlib", "adbc_driver_manager"} & set(got)


def test_the_small_read_rule(monkeypatch):
    from nsys_cc.trace import bulk

    monkeypatch.delenv(bulk.ENGINE_ENV, raising=False)
    assert bulk.engine_for(bulk.SMALL_ROWS) == "stdlib" and bulk.engine_for(bulk.SMALL_ROWS + 1) == "arrow"
    monkeypatch.setenv(bulk.ENGINE_ENV, "arrow")
    assert bulk.engine_for(10) == "arrow"
    monkeypatch.setenv(bulk.ENGINE_ENV, "stdlib")
    assert bulk.engine_for(10**9) == "stdlib"


# a real process each: `make check` keeps the speculative trace as the target (the benchmark's case, the one where
# the speculative analysis could be wrongly taken in); the plain target is `make test`'s
@pytest.mark.parametrize("target", [pytest.param(VLLM / "tiny-llama-target.sqlite", marks=pytest.mark.slow),
                                    SPEC / "vllm_scopes.spec-g3.sqlite"])
def test_a_plain_analyze_loads_no_speculative_analysis(target):
    """A target and a plain draft (the target a speculative trace, as benchmarks/cli_startup.py times it): the
    speculative analysis is imported only when a speculative run is among the inputs."""
    assert loaded("analyze", str(target), str(VLLM / "tiny-llama-draft-s.sqlite"), among=SPECULATIVE) == []


@pytest.mark.slow
def test_an_analyze_with_a_speculative_run_loads_it():
    got = loaded("analyze", str(SPEC / "tiny-llama-target.sqlite"), str(SPEC / "tiny-llama-draft-xs.sqlite"),
                 str(SPEC / "tiny-llama-draft-xs.spec-g3.sqlite"), among=SPECULATIVE)
    assert got == sorted(SPECULATIVE)
