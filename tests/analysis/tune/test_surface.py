"""The step-cost surface: terms chosen by held-out error, against tables whose true costs are written by hand, a
GPU-shaped serving trace whose GPU work per step is known (1.5 ms + 3 µs·token + 20 ns·context token), and the
public vLLM trace with the detailed annotation."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest

from nsys_cc.analysis.tune import surface
from nsys_cc.analysis.tune.keys import CellKey
from nsys_cc.analysis.tune.model import Cell
from nsys_cc.errors import InputError

PUBLIC = Path(__file__).resolve().parents[3] / ".." / "shared" / "traces" / "public"
DECODE_TRACE = PUBLIC / "AMD-AGI__TraceLens__inference_vllm_decode_full__graph_execution.json.gz"


def _rows(fn, cells):
    out = []
    for b, s in cells:
        out.append({"part": "steps", "group": f"{b}-{s}", "batch_size": b, "gamma": 0, "tokens": b, "context": s,
                    "batch_x_gamma": 0, "forwards": 0, "ms": fn(b, s)})
    return pd.DataFrame(out)


GRID = [(b, b * L) for b in (1, 2, 4, 8) for L in (32, 256, 1024)]


def test_context_term_kept_when_context_costs():
    rows = _rows(lambda b, s: 2.0 + 0.5 * b + 0.01 * s, GRID)
    s = surface.fit_surface(rows, "steps")
    assert s.terms == ("intercept", "tokens", "context")
    assert s.coef["intercept"] == pytest.approx(2.0) and s.coef["tokens"] == pytest.approx(0.5)
    assert s.coef["context"] == pytest.approx(0.01)
    assert s.held_out_rmse == pytest.approx(0.0, abs=1e-9)
    # the token-only model cannot see the context: its held-out error is the context's spread, far from 0
    assert s.token_only_rmse > 1.0


def test_context_term_dropped_when_it_does_not_forecast():
    # costs depend on tokens alone, plus alternating noise: the context term fits the noise, not held-out cells
    noise = {c: (0.05 if i % 2 else -0.05) for i, c in enumerate(GRID)}
    rows = _rows(lambda b, s: 1.0 + 0.25 * b + noise[(b, s)], GRID)
    s = surface.fit_surface(rows, "steps")
    assert s.terms == ("intercept", "tokens")
    assert s.held_out_rmse == s.token_only_rmse
    assert "not kept: context" in s.why


def test_too_few_groups_keeps_token_only_with_unknown_error():
    rows = _rows(lambda b, s: 1 + b + 0.001 * s, [(1, 32), (8, 2048)])
    s = surface.fit_surface(rows, "steps")
    assert s.terms == ("intercept", "tokens") and math.isnan(s.held_out_rmse)
    with pytest.raises(InputError):
        surface.fit_surface(rows.iloc[:1], "steps")


def _cell(b, L, g, *, verify, decode, catchup, later, out=32):
    return Cell(key=CellKey(b, L), gamma=g, draft_forward_ms=math.nan, verify_ms=verify, other_ms=0.0,
                decode_step_ms=decode, measured_speedup=1.0, output_len=out, draft_catchup_ms=catchup,
                draft_later_ms=later if g > 1 else math.nan)


def test_cell_rows_by_hand():
    c = _cell(4, 128, 3, verify=9.0, decode=5.0, catchup=2.0, later=1.5)
    rows = surface.cell_rows([c])
    # Σ context of B=4, L=128 over 32 generated tokens: 4·(128 + 16) = 576
    dec = rows[rows.part == "target decode"].iloc[0]
    assert (dec.tokens, dec.context, dec.ms, dec.group) == (4, 576, 5.0, "bs4-in128")
    ver = rows[rows.part == "target verify"].iloc[0]
    assert (ver.tokens, ver.batch_x_gamma, ver.ms) == (16, 12, 9.0)
    dr = rows[rows.part == "draft propose"].iloc[0]
    assert (dr.tokens, dr.forwards, dr.ms) == (12, 3, 2.0 + 2 * 1.5)


def test_fit_cells_context_kept_for_verify():
    cells = []
    for b in (1, 2, 4, 8):
        for L in (32, 512):
            s = b * (L + 16)
            for g in (1, 3):
                cells.append(_cell(b, L, g, verify=3 + 0.2 * b * (g + 1) + 0.004 * s, decode=4 + 0.3 * b + 0.004 * s,
                                   catchup=1 + 0.05 * b * (g + 2), later=0.8 + 0.02 * b))
    fits = surface.fit_cells(cells)
    assert fits["target verify"].terms == ("intercept", "tokens", "context")
    assert fits["target verify"].coef["context"] == pytest.approx(0.004, rel=1e-6)
    assert fits["target decode"].coef["context"] == pytest.approx(0.004, rel=1e-6)
    assert "context" not in fits["draft propose"].terms  # the draft's cost written here has no context term
    assert fits["target verify"].token_only_rmse > 10 * max(fits["target verify"].held_out_rmse, 1e-6)


def test_serving_trace_recovers_its_known_costs(tmp_path):
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from gpu_shaped_kineto import serve_trace

    path = tmp_path / "serve.json.gz"
    built = serve_trace(path)
    rows = surface.trace_rows(path)
    # every step with GPU work, as the schedule wrote it: batch, tokens and context per step
    expected = [s for s in built.steps if s["kind"] != "empty"]
    assert len(rows) == len(expected)
    assert rows["context"].tolist() == [s["context"] for s in expected]
    assert rows["batch"].tolist() == [s["batch"] for s in expected]
    s = surface.fit_trace(path)
    # the builder's GPU work: 1.5 ms + 3 µs per token + 20 ns per context token
    assert s.terms == ("intercept", "tokens", "context")
    assert s.coef["intercept"] == pytest.approx(1.5, rel=1e-3)
    assert s.coef["tokens"] == pytest.approx(0.003, rel=1e-3)
    assert s.coef["context"] == pytest.approx(2e-5, rel=1e-3)
    assert s.held_out_rmse < 0.001 < s.token_only_rmse


def _raw_gpu_span_ms(path) -> float:
    """The oracle from the raw events: the GPU work launched by the runtime calls inside the step annotation (by
    args.correlation), its first start to its last end."""
    import gzip
    import json

    ev = json.load(gzip.open(path))["traceEvents"]
    a = next(e for e in ev if str(e.get("name", "")).startswith("execute_") and e.get("cat") == "user_annotation")
    calls = {e["args"].get("correlation") for e in ev if e.get("cat") in ("cuda_runtime", "cuda_driver")
             and e.get("tid") == a["tid"] and a["ts"] <= e["ts"] <= a["ts"] + a["dur"]}
    gpu = [e for e in ev if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")
           and e.get("args", {}).get("correlation") in calls]
    return (max(e["ts"] + e["dur"] for e in gpu) - min(e["ts"] for e in gpu)) / 1000


@pytest.mark.skipif(not DECODE_TRACE.exists(), reason="public traces absent")
def test_public_vllm_decode_step_read_with_batch_and_context():
    rows = surface.trace_rows(DECODE_TRACE)
    # its annotation: execute_32_context_0(sq0sk0…)_generation_32(sq32sk55086…)
    assert rows[["batch", "step_tokens", "context"]].values.tolist() == [[32, 32, 55086]]
    assert rows["ms"].iloc[0] == pytest.approx(_raw_gpu_span_ms(DECODE_TRACE), abs=1e-6)
    with pytest.raises(InputError):  # one step: no surface
        surface.fit_trace(DECODE_TRACE)
