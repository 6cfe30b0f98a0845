"""The API server's half: the stat logger turns the records in vLLM's SchedulerStats into metrics and advice."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
from prometheus_client import REGISTRY

from nsys_cc.live import channel
from nsys_cc.live.timing import MIXED, VERIFY, StepRecord

pytestmark = pytest.mark.vllm  # LiveStatLogger is a vLLM StatLoggerBase


def stats(records, spec=None):
    s = SimpleNamespace(spec_decoding_stats=spec)
    setattr(s, channel.FIELD, channel.encode(records))
    return s


def logger(name):
    from nsys_cc.live.metrics import LiveStatLogger

    return LiveStatLogger(SimpleNamespace(model_config=SimpleNamespace(served_model_name=name)), 0)


def sample(metric, name, **labels):
    return REGISTRY.get_sample_value(metric, {"model_name": name, "engine": "0", **labels})


def test_records_become_histograms_counters_and_the_gauges():
    from vllm.v1.spec_decode.metrics import SpecDecodingStats

    live = logger("m-hist")
    verify = StepRecord(VERIFY, 4.0, 0.020, 0.010, [0.001, 0.0005, 0.0005])
    live.record(stats([verify, StepRecord(MIXED, 32.0, math.nan, 0.05, [0.002])]), None)
    # α = 0.5 per token, i.i.d.: 100 drafts of 3, per position 50, 25, 12 accepted → α̂ = 87 / (87 + 88)
    spec = SpecDecodingStats(num_spec_tokens=3, num_drafts=100, num_draft_tokens=300, num_accepted_tokens=87,
                             num_accepted_tokens_per_pos=[50, 25, 12])
    live.record(stats([verify] * 3, spec), None)
    assert sample("nsys_cc:verify_forward_seconds_count", "m-hist") == 4
    assert sample("nsys_cc:draft_forward_seconds_count", "m-hist") == 12  # the mixed step's draft is not one
    assert sample("nsys_cc:draft_forward_seconds_sum", "m-hist") == pytest.approx(0.008)
    assert sample("nsys_cc:step_outside_forward_seconds_sum", "m-hist") == pytest.approx(4 * 0.008)
    assert sample("nsys_cc:engine_steps_total", "m-hist", kind="mixed") == 1
    assert live.alpha() == pytest.approx(87 / 175)
    est = live.refresh()
    assert sample("nsys_cc:cost_coefficient", "m-hist") == pytest.approx(0.05)  # median draft 0.5 ms ÷ 10 ms
    assert sample("nsys_cc:best_num_speculative_tokens", "m-hist") == est.num_speculative_tokens
    # Outside 8 ms a step: a plain step ≈ 18 ms for 1 token, a γ = 1 step 18.5 ms for 1.5 tokens at α = 0.5.
    assert est.num_speculative_tokens >= 1 and est.best_speedup > 1


def test_a_window_without_acceptance_counts_sets_c_but_no_advice():
    live = logger("m-none")
    live.record(stats([StepRecord(VERIFY, 4.0, 0.020, 0.010, [0.002])]), None)
    live.refresh()
    assert sample("nsys_cc:cost_coefficient", "m-none") == pytest.approx(0.2)
    assert sample("nsys_cc:best_num_speculative_tokens", "m-none") == 0  # never set: the gauge's initial value
    assert live.last.num_speculative_tokens is None
