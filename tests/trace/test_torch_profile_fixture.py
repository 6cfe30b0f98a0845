"""fixtures/torch/profile: an interleaved profile directory made by `nsys-cc profile --profiler torch` (`make
fixtures`, scripts/make_torch_fixtures.sh), analysed as any profile directory; the oracle is the raw Kineto JSON."""

from __future__ import annotations

import gzip
import json
import math
import re
import statistics

import pytest

from conftest import FIXTURES, cli_in_process, unchanged

FOLDER = FIXTURES / "torch" / "profile"
Mark = tuple[str, float, float]


def _marks(run) -> list[Mark]:
    with gzip.open(run / "trace.pt.trace.json.gz", "rt") as fh:
        return [(e["name"], float(e["ts"]), float(e["ts"]) + float(e["dur"])) for e in json.load(fh)["traceEvents"]
                if e.get("cat") == "user_annotation" and e.get("ph") == "X"]


def _decode_tokens(marks: list[Mark], label: str) -> list[float]:
    """A model's measured one-token forwards in its engine's windows, each plus the logits and sampling ranges that
    follow it before the next forward (docs/definitions.md), in µs."""
    warm = [(s, e) for n, s, e in marks if re.fullmatch(r"nsys_cc:warmup#-?\d+", n)]
    windows = [(s, e) for n, s, e in marks if re.fullmatch(rf"nsys_cc:engine {re.escape(label)}#-?\d+", n)]
    forwards = sorted((s, e, int(n.rsplit("#", 1)[1])) for n, s, e in marks
                      if re.fullmatch(r"model_executable\(\)#\d+", n))
    parts = [(s, e) for n, s, e in marks if re.fullmatch(r"nsys_cc:(logits|sample)#-?\d+", n)]
    out = []
    for i, (s, e, tokens) in enumerate(forwards):
        if tokens != 1 or not any(a <= s <= b for a, b in windows) or any(a <= s <= b for a, b in warm):
            continue
        nxt = forwards[i + 1][0] if i + 1 < len(forwards) else math.inf
        out.append(e - s + sum(pe - ps for ps, pe in parts if e <= ps < nxt))
    return out


@pytest.mark.slow
def test_the_torch_profile_fixture_is_analysed_from_its_raw_events():
    """The pooled decode c equals the geometric mean of each run's median draft token ÷ median target token."""
    per_run = []
    for run in sorted(FOLDER.glob("run-*")):
        marks = _marks(run)
        per_run.append(statistics.median(_decode_tokens(marks, "tiny-llama-draft-xs"))
                       / statistics.median(_decode_tokens(marks, "tiny-llama-target")))
    assert len(per_run) == 2
    with unchanged(FOLDER):
        done = cli_in_process("analyze", str(FOLDER), "--format", "json")
    assert done.returncode == 0, done.stderr
    (row,) = [r for r in json.loads(done.stdout)["coefficients"]
              if r["draft"] == "tiny-llama-draft-xs" and r["phase"] == "decode" and r["metric"] == "wall"]
    assert row["c"] == pytest.approx(math.prod(per_run) ** (1 / len(per_run)), rel=1e-6)
    assert min(per_run) <= row["c"] <= max(per_run)
    assert json.loads((FOLDER / "status.json").read_text())["profiler"] == "torch"
