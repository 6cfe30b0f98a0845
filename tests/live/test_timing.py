"""Live timing in the worker: step kinds, the step timer on a CPU clock and on (fake) CUDA events, the channel."""

from __future__ import annotations

import dataclasses
import math
from types import SimpleNamespace

import pytest

from nsys_cc.live import channel
from nsys_cc.live.timing import DECODE, DRAFT, MIXED, TARGET, VERIFY, CpuClock, CudaEventClock, StepTimer, step_shape


def sched(counts: dict[str, int], spec: dict[str, list[int]] | None = None, new=(), cached=()):
    return SimpleNamespace(
        num_scheduled_tokens=counts, total_num_scheduled_tokens=sum(counts.values()),
        scheduled_spec_decode_tokens=spec or {}, scheduled_new_reqs=list(new),
        scheduled_cached_reqs=SimpleNamespace(req_ids=list(cached)),
    )


def verify_step(reqs=("a",), gamma=3):
    return sched({r: gamma + 1 for r in reqs}, {r: [7] * gamma for r in reqs}, cached=reqs)


def test_step_kinds_from_the_scheduler_output():
    assert step_shape(verify_step(("a", "b"))) == (VERIFY, 4.0, True, 2)
    assert step_shape(sched({"a": 1, "b": 1}, cached=("a", "b"))) == (DECODE, 1.0, True, 2)
    # A prompt chunk beside a verify: mixed; a new request: mixed and not continuing.
    assert step_shape(sched({"a": 4, "b": 16}, {"a": [1, 2, 3]}, cached=("a", "b"))).kind == MIXED
    assert step_shape(sched({"c": 8}, new=["c"])) == (MIXED, 8.0, False, 1)
    # Requests with fewer drafts than others still verify; tokens per sequence is the mean.
    assert step_shape(sched({"a": 4, "b": 2}, {"a": [1, 2, 3], "b": [1]}, cached=("a", "b"))) == (VERIFY, 3.0, True, 2)
    assert step_shape(sched({})) is None


class Ticks:
    """A monotonic clock the test advances by hand."""

    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


def run_step(timer: StepTimer, ticks: Ticks, so, target: float, drafts: list[float], gap: float):
    timer.step_begin(so)
    ticks.t += gap
    timer.forward_begin(TARGET)
    ticks.t += target
    timer.forward_end()
    for d in drafts:
        ticks.t += gap
        timer.forward_begin(DRAFT)
        ticks.t += d
        timer.forward_end()
    ticks.t += gap


def test_cpu_timer_times_forwards_and_the_step_period():
    ticks = Ticks()
    timer = StepTimer(CpuClock(ticks))
    run_step(timer, ticks, verify_step(), 0.010, [0.002, 0.001, 0.001], gap=0.0005)
    assert timer.drain() == []  # the period ends when the next step begins
    run_step(timer, ticks, verify_step(), 0.020, [0.003], gap=0.001)
    (first,) = timer.drain()
    assert first.kind == VERIFY and first.tokens_per_seq == 4.0
    assert first.target_s == pytest.approx(0.010) and first.draft_s == pytest.approx([0.002, 0.001, 0.001])
    assert first.step_s == pytest.approx(0.014 + 5 * 0.0005)
    assert first.outside_s == pytest.approx(5 * 0.0005)
    # An empty step closes the step before it without a period (nothing continues), and forwards outside a step
    # (a dummy run while the engine is idle) are not recorded; a step after an idle spell (no continuing request)
    # leaves the previous period unknown too.
    timer.step_begin(sched({}))
    timer.forward_begin(TARGET)
    ticks.t += 5.0
    timer.forward_end()
    (second,) = timer.drain()
    assert second.target_s == pytest.approx(0.020) and math.isnan(second.step_s)
    run_step(timer, ticks, sched({"z": 8}, new=["z"]), 0.030, [0.004], gap=0.0)
    run_step(timer, ticks, sched({"q": 8}, new=["q"]), 0.030, [], gap=0.0)
    (third,) = timer.drain()
    assert third.kind == MIXED and math.isnan(third.step_s) and third.draft_s == pytest.approx([0.004])


class FakeDevice:
    """A stream: work enqueued advances its clock; `run_until(t)` is the device executing up to time t."""

    def __init__(self):
        self.enqueued = 0.0  # device time of the end of the enqueued work
        self.done = 0.0  # device time executed so far
        self.events = []


class FakeEvent:
    """What the timer may use of torch.cuda.Event: record, query, elapsed_time. Any other use fails the test
    (there is no synchronize: the timer must never wait for the device)."""

    device: FakeDevice

    def __init__(self, enable_timing=False):
        assert enable_timing
        self.at = None

    def record(self):
        self.at = self.device.enqueued

    def query(self):
        return self.at is not None and self.at <= self.device.done

    def elapsed_time(self, end):
        assert self.query() and end.query(), "elapsed_time on an event not yet complete"
        return (end.at - self.at) * 1000.0


def test_cuda_event_timer_reads_events_only_once_complete_and_in_step_order():
    device = FakeDevice()
    FakeEvent.device = device
    clock = CudaEventClock(FakeEvent)
    timer = StepTimer(clock)

    def step(target, drafts):
        timer.step_begin(verify_step())
        timer.forward_begin(TARGET)
        device.enqueued += target
        timer.forward_end()
        for d in drafts:
            timer.forward_begin(DRAFT)
            device.enqueued += d
            timer.forward_end()
        device.enqueued += 0.001  # sampling and rejection kernels

    step(0.010, [0.002, 0.002])
    step(0.012, [0.002, 0.002])
    step(0.011, [0.002, 0.002])
    assert timer.drain() == []  # the host ran ahead: nothing has executed
    device.done = 0.016  # first step complete (0.015), second step's start event too
    (first,) = timer.drain()
    assert first.target_s == pytest.approx(0.010) and first.draft_s == pytest.approx([0.002, 0.002])
    assert first.step_s == pytest.approx(0.015) and first.outside_s == pytest.approx(0.001)
    device.done = 0.020  # second step half done: it waits
    assert timer.drain() == []
    device.done = 1.0
    (second,) = timer.drain()  # the third step's period ends with a fourth step, not begun
    assert second.target_s == pytest.approx(0.012)
    # Events are reused once read: the pool keeps the device from allocating one per forward.
    step(0.010, [])
    assert len(clock._free) >= 4


def test_channel_carries_records_from_runner_output_to_scheduler_stats():
    ticks = Ticks()
    channel._timer = StepTimer(CpuClock(ticks))
    try:
        run_step(channel._timer, ticks, verify_step(), 0.010, [0.002, 0.001], gap=0.001)
        run_step(channel._timer, ticks, verify_step(), 0.010, [0.002], gap=0.001)
        empty = SimpleNamespace(req_ids=[])
        assert channel.attach(empty) is empty and not hasattr(empty, channel.FIELD)
        inner = SimpleNamespace(req_ids=["a"])
        wrapped = SimpleNamespace(_model_runner_output=inner)  # an AsyncModelRunnerOutput
        channel.attach(wrapped)
        assert channel.decode(getattr(inner, channel.FIELD))[0].draft_s == pytest.approx([0.002, 0.001])
    finally:
        channel._timer = None
    scheduler = SimpleNamespace()
    channel.take(scheduler, inner)
    assert not hasattr(inner, channel.FIELD)
    stats = SimpleNamespace()
    channel.put(scheduler, stats)
    (record,) = channel.decode(channel.payload_of(stats))
    assert record.kind == VERIFY and record.target_s == pytest.approx(0.010) and record.step_s == pytest.approx(0.017)
    again = SimpleNamespace()
    channel.put(scheduler, again)  # taken once
    assert channel.payload_of(again) is None


def test_stats_field_survives_msgpack_and_is_ignored_by_a_receiver_without_it():
    msgspec = pytest.importorskip("msgspec")

    @dataclasses.dataclass
    class Stats:
        num_running_reqs: int = 0

    @dataclasses.dataclass
    class OldStats:
        num_running_reqs: int = 0

    assert channel.add_stats_field(Stats) and channel.add_stats_field(Stats)
    s = Stats(3)
    setattr(s, channel.FIELD, {"kind": [2.0]})
    wire = msgspec.msgpack.encode(s)
    assert getattr(msgspec.msgpack.decode(wire, type=Stats), channel.FIELD) == {"kind": [2.0]}
    assert msgspec.msgpack.decode(wire, type=OldStats) == OldStats(3)
    assert getattr(msgspec.msgpack.decode(msgspec.msgpack.encode(OldStats(1)), type=Stats), channel.FIELD) is None
    assert getattr(dataclasses.replace(s, num_running_reqs=4), channel.FIELD) is None


def test_logits_and_sampling_join_the_forward_before_them_and_leave_the_outside_time():
    """A token is its forward, its logits and its sampling; the target's parts add to the target, a draft's
    to the draft forward before it, and the step's outside time is what no token's work holds."""
    ticks = Ticks()
    timer = StepTimer(CpuClock(ticks))

    def timed(begin, end, role, seconds):
        begin(role)
        ticks.t += seconds
        end()
        ticks.t += 0.0001

    for _ in range(2):
        timer.step_begin(verify_step())
        timed(timer.forward_begin, timer.forward_end, TARGET, 0.010)
        timed(timer.part_begin, timer.part_end, TARGET, 0.002)  # the target's logits
        timed(timer.part_begin, timer.part_end, TARGET, 0.001)  # its rejection sampling
        for _ in range(3):
            timed(timer.forward_begin, timer.forward_end, DRAFT, 0.003)
            timed(timer.part_begin, timer.part_end, DRAFT, 0.0005)
    (r,) = timer.drain()
    assert r.target_s == pytest.approx(0.010) and r.target_parts_s == pytest.approx(0.003)
    assert r.target_token_s == pytest.approx(0.013)
    assert r.draft_s == pytest.approx([0.003] * 3) and r.draft_token_s == pytest.approx([0.0035] * 3)
    assert r.outside_s == pytest.approx(9 * 0.0001)  # the gaps after each of its 9 ranges
    # The channel carries the parts; a payload from a worker without them reads as parts of 0.
    (back,) = channel.decode(channel.encode([r]))
    assert back == r
    old = {k: v for k, v in channel.encode([r]).items() if "parts" not in k}
    (plain,) = channel.decode(old)
    assert plain.target_token_s == pytest.approx(0.010) and plain.draft_token_s == pytest.approx([0.003] * 3)
