"""The batch × context tune's bar on the CPU build: tune over 3 batch sizes × 2 prompt lengths of the tiny known-α
pair fits the step-cost surface (its held-out error beside the token-only model's), forecasts a held-out (B, L) cell
within 10 %, measures and prices K = 0, and writes every schedule form, the vLLM one accepted by vLLM's own
validator."""

from __future__ import annotations

import json

import pytest


@pytest.mark.vllm
@pytest.mark.nsys
def test_tune_over_batch_and_context(tmp_path):
    from nsys_cc.workflows.tune import tune, validate_with_vllm

    out = tmp_path / "tune"
    report = tune(target="pair-target-a50", draft="pair-draft", batch_sizes=[1, 2, 4], speculate=[1, 3],
                  input_len=[32, 256], check="2@256:2", output_len=16, warmup_iters=1, iters=2, repeat=3,
                  confirm=False, out_dir=out, plot=True, draws=100)
    r = report.result
    assert set(r.by_context) == {32, 256, r.context}
    assert {p for p in r.surfaces} == {"target decode", "target verify", "draft propose"}
    for s in r.surfaces.values():  # both errors shown, on the same cells
        assert s.groups == 6 and s.candidates["intercept+tokens"] == s.token_only_rmse
    check = next(c for c in r.checks if c["batch_size"] == 2 and c.get("input_len") == 256 and c["gamma"] == 2)
    assert abs(check["forecast"] / check["measured"] - 1) <= 0.10
    assert r.k0_known and all(f["speedup"] < 1 for f in r.forecast if f["gamma"] == 0)
    for stem in ("vllm-0.32", "vllm-pr48944", "tensorrt-llm", "sglang"):
        form = json.loads((out / f"schedule.{stem}.json").read_text())
        assert form["engine"] and form["status"]
    table = json.loads((out / "schedule.vllm-0.32.json").read_text())["schedule"]
    assert [list(x) for x in validate_with_vllm(table)] == table
    assert (out / "tune-context.png").stat().st_size > 0
