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
    from nsys_cc.live.stat_logger import LiveStatLogger

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
    assert sample("nsys_cc:window_verify_steps", "m-none") == 1
    # No acceptance counts, no forecast: the gauge is absent, not a 0 that would say "no γ pays".
    assert sample("nsys_cc:best_num_speculative_tokens", "m-none") is None
    assert live.last.num_speculative_tokens is None


GAUGES = ("nsys_cc:cost_coefficient", "nsys_cc:best_num_speculative_tokens", "nsys_cc:window_verify_steps")


def test_gauges_are_absent_until_the_first_estimate_which_is_not_held_back_by_the_refresh_limit():
    from vllm.v1.spec_decode.metrics import SpecDecodingStats

    live = logger("m-first")
    assert [sample(g, "m-first") for g in GAUGES] == [None] * 3  # a logger that saw nothing exports no gauge
    # The prompt's step arrives first (no verify step: no estimate), its counts at once after it.
    live.record(stats([StepRecord(MIXED, 16.0, math.nan, 0.05, [0.002])]), None)
    assert [sample(g, "m-first") for g in GAUGES] == [None] * 3
    spec = SpecDecodingStats(num_spec_tokens=3, num_drafts=10, num_draft_tokens=30, num_accepted_tokens=30,
                             num_accepted_tokens_per_pos=[10, 10, 10])
    live.record(stats([StepRecord(VERIFY, 4.0, 0.012, 0.008, [0.0004] * 3)] * 2, spec), None)
    # Within the second after the first refresh: the first estimate is shown at once, not at the next stats log.
    assert sample("nsys_cc:cost_coefficient", "m-first") == pytest.approx(0.05)
    assert sample("nsys_cc:window_verify_steps", "m-first") == 2
    # α = 1 (every drafted token accepted): γ tokens more per step for 3 × 0.4 ms of drafts, so speculation pays.
    assert sample("nsys_cc:best_num_speculative_tokens", "m-first") >= 1


def test_a_gauge_whose_value_stops_being_defined_reads_nan_not_zero():
    live = logger("m-nan")
    live.record(stats([StepRecord(VERIFY, 4.0, 0.020, 0.010, [0.001])]), None)
    assert sample("nsys_cc:cost_coefficient", "m-nan") == pytest.approx(0.1)
    # A verify forward of no time (a clock that did not advance) leaves c without a value.
    live.record(stats([StepRecord(VERIFY, 4.0, 0.020, 0.0, [0.001])] * 2), None)
    live.refresh()
    assert math.isnan(sample("nsys_cc:cost_coefficient", "m-nan"))


def test_the_window_is_the_last_n_verify_steps_and_decode_steps_do_not_push_them_out(monkeypatch):
    from vllm.v1.spec_decode.metrics import SpecDecodingStats

    from nsys_cc.live.timing import DECODE

    monkeypatch.setenv("NSYS_CC_LIVE_WINDOW", "4")
    live = logger("m-window")

    def counts(accepted_per_pos):  # one draft of γ = 2 per verify step
        n = len(accepted_per_pos)
        return SpecDecodingStats(num_spec_tokens=2, num_drafts=n, num_draft_tokens=2 * n,
                                 num_accepted_tokens=sum(accepted_per_pos),
                                 num_accepted_tokens_per_pos=[sum(1 for a in accepted_per_pos if a >= 1),
                                                              sum(1 for a in accepted_per_pos if a >= 2)])

    # Six verify steps of 10 ms (draft 1 ms) whose drafts were all rejected, then four of 20 ms (draft 1 ms) all
    # accepted, with plain decode steps in between: the window is the last four verify steps only.
    for _ in range(3):
        live.record(stats([StepRecord(VERIFY, 3.0, 0.015, 0.010, [0.001, 0.001])] * 2, counts([0, 0])), None)
        live.record(stats([StepRecord(DECODE, 1.0, 0.009, 0.006, [])] * 5), None)
    for _ in range(2):
        live.record(stats([StepRecord(VERIFY, 3.0, 0.025, 0.020, [0.001, 0.001])] * 2, counts([2, 2])), None)
        live.record(stats([StepRecord(DECODE, 1.0, 0.009, 0.006, [])] * 5), None)
    est = live.refresh()
    assert est.steps == 4 and sample("nsys_cc:window_verify_steps", "m-window") == 4
    assert est.verify_forward_ms == pytest.approx(20.0) and est.c == pytest.approx(0.05)
    # The plain decode steps have a window of their own: their period is the forecast's plain decode step.
    assert est.decode_source == "observed" and est.decode_step_ms == pytest.approx(9.0)
    # α from vLLM's counts of the same four steps (all accepted), not of the six rejected before them.
    assert live.alpha() == pytest.approx(1.0)
    assert est.alpha == pytest.approx(1.0)
