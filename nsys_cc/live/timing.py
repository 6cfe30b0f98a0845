"""Timing of engine steps and their forwards, inside the process that runs the model (the worker).

What is timed (one `StepRecord` per engine step that scheduled tokens):
- each forward of the target model and each forward of the draft model, from its start to its end;
- the rest of each forward's token: its logits and its sampling (the plugin's `nsys_cc:logits` /
  `nsys_cc:sample` work and a draft's `nsys_cc:draft_logits` / `nsys_cc:draft_sample`), each part added to the
  forward before it of the same role;
- the step as a whole: from the start of the runner's `execute_model` for this step to its start for the next
  step. The worker waits for the engine core between the two, so this is the engine's step period: scheduling,
  input preparation, target forward, sampling, rejection, draft proposing, output processing and the hand-over
  between the processes. A period is only known when the next step continues a request of this one (the engine
  cannot have been idle in between); after an idle spell the step's forwards count and its period is NaN.

Clocks (`CpuClock`, `CudaEventClock`): one clock times everything of a run. On the CPU it is the monotonic clock;
on a GPU, CUDA events recorded on the current stream (`torch.cuda.Event(enable_timing=True)`). An event is read
(`query()`, then `elapsed_time`) only once it has completed, at a later step: the timer never waits for the device,
and a record leaves the timer (`drain`) only when all its events have completed, in step order.

Step kinds (`step_shape`, from vLLM's `SchedulerOutput`):
- VERIFY: every scheduled request is decoding and the step carries draft tokens to verify (each request
  schedules 1 + its draft tokens, no new request): the target forward is a verify forward;
- DECODE: every scheduled request is decoding without draft tokens (a plain decode step);
- MIXED: anything else (a prompt or a prompt chunk is in the step).
`tokens_per_seq` = scheduled tokens ÷ scheduled requests (γ + 1 in a verify step where all requests got γ).
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from ..contract import LIVE_DECODE, LIVE_MIXED, LIVE_VERIFY

MIXED, DECODE, VERIFY = LIVE_MIXED, LIVE_DECODE, LIVE_VERIFY
TARGET, DRAFT = "target", "draft"
PART = "part:"  # a part's role in an open step's list: PART + the role of the forward it belongs to


class StepShape(NamedTuple):
    """What kind of step the scheduler sent (see the module docstring)."""

    kind: int
    tokens_per_seq: float
    continuing: bool
    batch: int = 0  # scheduled requests (sequences) in the step


def step_shape(scheduler_output: Any) -> StepShape | None:
    """The kind of the step vLLM's scheduler output describes; None when it schedules no tokens."""
    total = getattr(scheduler_output, "total_num_scheduled_tokens", 0) or 0
    counts = getattr(scheduler_output, "num_scheduled_tokens", None) or {}
    if total <= 0 or not counts:
        return None
    spec = getattr(scheduler_output, "scheduled_spec_decode_tokens", None) or {}
    drafted = sum(map(len, spec.values()))
    cached = getattr(getattr(scheduler_output, "scheduled_cached_reqs", None), "req_ids", None) or ()
    decoding = not getattr(scheduler_output, "scheduled_new_reqs", None) and total == len(counts) + drafted
    kind = (VERIFY if drafted else DECODE) if decoding else MIXED
    return StepShape(kind, total / len(counts), bool(cached), len(counts))


class CpuClock:
    """Marks are `time.perf_counter()` readings (monotonic); always complete."""

    name = "cpu"

    def __init__(self, now: Callable[[], float] = time.perf_counter):
        self._now = now

    def mark(self) -> float:
        return self._now()

    def ready(self, mark: float) -> bool:
        return True

    def seconds(self, start: float, end: float) -> float:
        return end - start

    def release(self, mark: float) -> None:
        pass


class CudaEventClock:
    """Marks are CUDA events recorded on the current stream; read only once complete, then reused.

    event_type: the event class (`torch.cuda.Event`; tests pass a fake one). It is built with
    `enable_timing=True`, and used through `record()`, `query()` and `elapsed_time(other)` (milliseconds).
    """

    name = "cuda-events"

    def __init__(self, event_type: Callable[..., Any]):
        self._event_type = event_type
        self._free: list[Any] = []

    def mark(self) -> Any:
        event = self._free.pop() if self._free else self._event_type(enable_timing=True)
        event.record()
        return event

    def ready(self, mark: Any) -> bool:
        return bool(mark.query())

    def seconds(self, start: Any, end: Any) -> float:
        return start.elapsed_time(end) / 1000.0

    def release(self, mark: Any) -> None:
        self._free.append(mark)


@dataclass
class StepRecord:
    """One engine step: its kind, tokens verified per sequence, and times in seconds.

    step_s: the step period (NaN when unknown, see the module docstring); target_s: the target forwards of the
    step summed (one forward in a normal step); draft_s: each draft forward in order; target_parts_s: the logits and
    sampling after the target forwards, summed; draft_parts_s: per draft forward, its logits and sampling (0 where
    none was timed; a list as long as draft_s).
    """

    kind: int
    tokens_per_seq: float
    step_s: float
    target_s: float
    draft_s: list[float] = field(default_factory=list)
    target_parts_s: float = 0.0
    draft_parts_s: list[float] = field(default_factory=list)
    batch: int = 0  # sequences in the step (0: not recorded)

    @property
    def target_token_s(self) -> float:
        """The target's token: its forwards, logits and sampling."""
        return self.target_s + self.target_parts_s

    @property
    def draft_token_s(self) -> list[float]:
        """Each draft token: its forward, logits and sampling."""
        parts = self.draft_parts_s or [0.0] * len(self.draft_s)
        return [d + p for d, p in zip(self.draft_s, parts)]

    @property
    def outside_s(self) -> float:
        """Time of the step outside every token's work: step − the target's token − the draft tokens (NaN when the
        period is unknown)."""
        return self.step_s - self.target_token_s - math.fsum(self.draft_token_s)

    def valid(self) -> bool:
        """Whether every number is one a step can have: times finite and ≥ 0 (the period also NaN, unknown),
        counts whole and ≥ 0, a draft part per draft forward. A payload that says otherwise (inf, NaN, −1) is
        no measurement (it raised OverflowError, or published a γ from nothing)."""
        def time_ok(x) -> bool:
            return isinstance(x, (int, float)) and math.isfinite(x) and x >= 0

        return (isinstance(self.kind, int) and isinstance(self.batch, int) and self.batch >= 0
                and time_ok(self.tokens_per_seq) and self.tokens_per_seq < 2**31
                and time_ok(self.target_s) and time_ok(self.target_parts_s)
                and (time_ok(self.step_s) or (isinstance(self.step_s, float) and math.isnan(self.step_s)))
                and all(time_ok(d) for d in self.draft_s) and all(time_ok(d) for d in self.draft_parts_s)
                and (not self.draft_parts_s or len(self.draft_parts_s) == len(self.draft_s)))


class _OpenStep:
    __slots__ = ("shape", "start", "end", "continued", "forwards")

    def __init__(self, shape: StepShape, start: Any):
        self.shape = shape
        self.start = start
        self.end: Any = None
        self.continued = False
        self.forwards: list[tuple[str, Any, Any]] = []  # (role, start, end); a part's role is PART + its own


class StepTimer:
    """Collects `StepRecord`s from hooks called on the thread that runs the model.

    Hooks: `step_begin(scheduler_output)` at the start of each `execute_model`, `forward_begin(role)` /
    `forward_end()` around each target (`TARGET`) or draft (`DRAFT`) forward, `part_begin(role)` / `part_end()`
    around its logits and sampling. Forwards outside a step (warm-up and dummy runs) are not recorded. `drain()`
    hands out the records completed so far.
    """

    def __init__(self, clock: Any):
        self.clock = clock
        self._open: _OpenStep | None = None
        self._closed: deque[_OpenStep] = deque()
        self._forward: tuple[str, Any] | None = None

    def step_begin(self, scheduler_output: Any) -> None:
        shape = step_shape(scheduler_output)
        now = self.clock.mark() if shape is not None or self._open is not None else None
        previous = self._open
        if previous is not None:
            previous.end = now
            previous.continued = shape is not None and shape.continuing
            self._closed.append(previous)
        self._open = _OpenStep(shape, now) if shape is not None else None
        self._forward = None

    def forward_begin(self, role: str) -> None:
        if self._open is not None:
            self._forward = (role, self.clock.mark())

    def forward_end(self) -> None:
        if self._open is not None and self._forward is not None:
            role, start = self._forward
            self._open.forwards.append((role, start, self.clock.mark()))
            self._forward = None

    def part_begin(self, role: str) -> None:
        if self._open is not None:
            self._forward = (PART + role, self.clock.mark())

    part_end = forward_end

    def drain(self) -> list[StepRecord]:
        """Records of the closed steps whose marks have all completed, oldest first; the others wait."""
        out = []
        clock = self.clock
        while self._closed:
            step = self._closed[0]
            if not clock.ready(step.end) or not all(clock.ready(end) for _, _, end in step.forwards):
                break
            self._closed.popleft()
            out.append(self._record(step))
        return out

    def _record(self, step: _OpenStep) -> StepRecord:
        clock = self.clock
        target = target_parts = 0.0
        drafts: list[float] = []
        draft_parts: list[float] = []
        for role, start, end in step.forwards:
            seconds = clock.seconds(start, end)
            if role == DRAFT:
                drafts.append(seconds)
                draft_parts.append(0.0)
            elif role == PART + DRAFT:
                if draft_parts:  # a draft's part before any draft forward of the step has nothing to belong to
                    draft_parts[-1] += seconds
            elif role == PART + TARGET:
                target_parts += seconds
            else:
                target += seconds
            clock.release(start)
            clock.release(end)
        period = clock.seconds(step.start, step.end) if step.continued else math.nan
        clock.release(step.start)
        # The end mark is the next step's start: released with that step.
        return StepRecord(step.shape.kind, step.shape.tokens_per_seq, period, target, drafts, target_parts,
                          draft_parts, step.shape.batch)


def make_clock(device_type: str | None = None) -> Any:
    """The clock for this process: CUDA events when torch sees a CUDA device (or device_type says "cuda")."""
    if device_type not in (None, "cuda"):
        return CpuClock()
    try:
        import torch
    except ImportError:  # pragma: no cover - vLLM always brings torch
        return CpuClock()
    if torch.cuda.is_available():
        return CudaEventClock(torch.cuda.Event)
    return CpuClock()
