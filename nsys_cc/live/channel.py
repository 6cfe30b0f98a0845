"""How step records travel from the worker to the API server, on the path vLLM's own statistics take.

vLLM runs the model in a worker process, the scheduler in the engine-core process and `/metrics` in the API
server. Its own engine-side numbers (the speculative-decoding counters among them) go worker → engine core in
each step's `ModelRunnerOutput`, and engine core → API server in `EngineCoreOutputs.scheduler_stats`
(`SchedulerStats`), where the stat loggers (`StatLoggerManager`, Prometheus) turn them into metrics. The records
take the same road, so they reach every front end vLLM's counters reach, and nothing new listens:

1. worker: `attach(output)` sets the drained records on the step's `ModelRunnerOutput` (an instance attribute,
   pickled with it by vLLM's message queue; an `AsyncModelRunnerOutput` carries them on the output it wraps);
2. engine core: `Scheduler.update_from_output` takes them off the output, `Scheduler.make_stats` puts everything
   gathered since the last statistics into the `SchedulerStats` field `nsys_cc_live`;
3. `SchedulerStats` gains that field (a dataclass field with default None, `init=False`) in every process where
   the plugin is on, before vLLM's msgpack encoder and decoder first see the class. A process without the field
   ignores it on decoding (msgspec skips unknown dataclass keys) and one with it reads None from a sender without
   it, so a half-enabled deployment loses the numbers, never a step.

Payload: a `dict[str, list[float]]` of columns, one row per step (`kind`, `tokens_per_seq`, `step_s`,
`target_s`, `target_parts_s`, `num_drafts`), plus the draft forwards of all rows in one column `draft_s` and their
logits and sampling in `draft_parts_s` beside it. A payload without the parts' columns (a worker of an older nsys_cc)
reads as parts of 0.
"""

from __future__ import annotations

import dataclasses
import math
import threading
from collections.abc import Callable, Iterable
from typing import Any

from .timing import DECODE, DRAFT, MIXED, TARGET, VERIFY, StepRecord, StepTimer, make_clock

FIELD = "nsys_cc_live"
_ROWS = ("kind", "tokens_per_seq", "step_s", "target_s")
_PENDING = "_nsys_cc_live_pending"
KINDS = (MIXED, DECODE, VERIFY)


def encode(records: Iterable[StepRecord]) -> dict[str, list[float]]:
    """Columns of the payload for these records."""
    out: dict[str, list[float]] = {name: [] for name in (*_ROWS, "target_parts_s", "num_drafts", "draft_s",
                                                         "draft_parts_s", "batch")}
    for r in records:
        out["kind"].append(float(r.kind))
        out["tokens_per_seq"].append(float(r.tokens_per_seq))
        out["step_s"].append(r.step_s)
        out["target_s"].append(r.target_s)
        out["target_parts_s"].append(r.target_parts_s)
        out["num_drafts"].append(float(len(r.draft_s)))
        out["batch"].append(float(r.batch))
        out["draft_s"].extend(r.draft_s)
        out["draft_parts_s"].extend(r.draft_parts_s or [0.0] * len(r.draft_s))
    return out


def _count(x, kinds: tuple[int, ...] | None = None) -> int:
    """A whole number ≥ 0 (below 2³¹) of the payload, one of `kinds` when given (ValueError otherwise: inf, NaN,
    −1, 2.5, 1e308, a kind no step has)."""
    if not (isinstance(x, (int, float)) and math.isfinite(x) and 0 <= x < 2**31 and x == int(x)):
        raise ValueError(x)
    if kinds is not None and int(x) not in kinds:
        raise ValueError(x)
    return int(x)


def decode(payload: dict[str, list[float]] | None) -> list[StepRecord]:
    """The records of a payload (an empty list for None or a malformed one: a count that is no whole number ≥ 0, a
    time that is no finite number ≥ 0, `StepRecord.valid`)."""
    if not payload:
        return []
    try:
        drafts = payload["draft_s"]
        rows = len(payload["kind"])
        target_parts = payload.get("target_parts_s") or [0.0] * rows
        batches = payload.get("batch") or [0.0] * rows
        draft_parts = payload.get("draft_parts_s") or [0.0] * len(drafts)
        if len(draft_parts) != len(drafts):
            return []
        records, i = [], 0
        for kind, n, step, target, k, tp, b in zip(*(payload[name] for name in (*_ROWS, "num_drafts")),
                                                   target_parts, batches, strict=True):
            k = _count(k)
            records.append(StepRecord(_count(kind, KINDS), n, step, target, list(drafts[i : i + k]), tp,
                                      list(draft_parts[i : i + k]), _count(b)))
            i += k
        return records if all(r.valid() for r in records) else []
    except (KeyError, TypeError, ValueError, OverflowError):
        return []


def merge(payloads: Iterable[dict[str, list[float]]]) -> dict[str, list[float]] | None:
    """One payload holding the rows of several, in order; None when there is nothing."""
    out: dict[str, list[float]] = {}
    for payload in payloads:
        for name, values in payload.items():
            out.setdefault(name, []).extend(values)
    return out if out.get("kind") else None


# ---- worker -------------------------------------------------------------------------------------------

_timer: StepTimer | None = None
_timer_lock = threading.Lock()


def timer() -> StepTimer:
    """This process's step timer (built on first use, with the clock the device asks for)."""
    global _timer
    if _timer is None:
        with _timer_lock:
            if _timer is None:
                _timer = StepTimer(make_clock())
    return _timer


def attach(output: Any) -> Any:
    """Put the records completed so far on a runner's output (see the module docstring); returns the output."""
    if _timer is None:
        return output
    target = getattr(output, "_model_runner_output", output)
    if not getattr(target, "req_ids", None):
        # vLLM's shared EMPTY_MODEL_RUNNER_OUTPUT and outputs without requests: keep the records for the next.
        return output
    records = _timer.drain()
    if records:
        setattr(target, FIELD, encode(records))
    return output


# ---- engine core ---------------------------------------------------------------------------------------


def take(scheduler: Any, model_runner_output: Any) -> None:
    """Move the records a runner output carries onto the scheduler, until its next statistics."""
    payload = getattr(model_runner_output, "__dict__", {}).pop(FIELD, None)
    if payload:
        pending = scheduler.__dict__.setdefault(_PENDING, [])
        pending.append(payload)


def put(scheduler: Any, stats: Any) -> Any:
    """Give the statistics being made everything the scheduler gathered since the last ones."""
    pending = scheduler.__dict__.pop(_PENDING, None)
    if stats is not None and pending:
        setattr(stats, FIELD, merge(pending))
    return stats


def add_stats_field(stats_cls: type) -> bool:
    """Give the `SchedulerStats` dataclass the field `nsys_cc_live` (once); False when it is not a dataclass."""
    fields = getattr(stats_cls, "__dataclass_fields__", None)
    if fields is None:
        return False
    if FIELD in fields:
        return True
    new: Any = dataclasses.field(default=None, init=False, repr=False, compare=False)
    new.name = FIELD
    new.type = dict[str, list[float]] | None
    new._field_type = dataclasses._FIELD  # type: ignore[attr-defined]  # what @dataclass sets on its fields
    fields[FIELD] = new
    stats_cls.__annotations__[FIELD] = new.type
    setattr(stats_cls, FIELD, None)
    return True


def payload_of(scheduler_stats: Any) -> dict[str, list[float]] | None:
    return getattr(scheduler_stats, FIELD, None)


# ---- patches (applied by the vLLM plugin when NSYS_CC_LIVE is on) -------------------------------------------


def _taking(original: Callable) -> Callable:
    def update_from_output(self, scheduler_output, model_runner_output, *args, **kwargs):
        take(self, model_runner_output)
        return original(self, scheduler_output, model_runner_output, *args, **kwargs)

    return update_from_output


def _putting(original: Callable) -> Callable:
    def make_stats(self, *args, **kwargs):
        return put(self, original(self, *args, **kwargs))

    return make_stats


def patch_scheduler(module: Any, wrap: Callable) -> bool:
    cls = getattr(module, "Scheduler", None)
    if cls is None:
        return False
    return wrap(cls, "update_from_output", _taking) and wrap(cls, "make_stats", _putting)


def patch_stats(module: Any, wrap: Callable) -> bool:
    cls = getattr(module, "SchedulerStats", None)
    return cls is not None and add_stats_field(cls)


# ---- worker hooks (called by the vLLM plugin on the thread that runs the model) ------------------------------


def step_begin(scheduler_output: Any) -> None:
    timer().step_begin(scheduler_output)


def forward_begin(draft: bool) -> None:
    if _timer is not None:
        _timer.forward_begin(DRAFT if draft else TARGET)


def forward_end() -> None:
    if _timer is not None:
        _timer.forward_end()


def part_begin(draft: bool) -> None:
    """The logits or sampling of the forward before (a draft's when `draft`) begins."""
    if _timer is not None:
        _timer.part_begin(DRAFT if draft else TARGET)


def part_end() -> None:
    if _timer is not None:
        _timer.part_end()
