"""Engine steps and benchmark iterations: `nsys_cc:step` around each engine step, from the moment the scheduler has
scheduled it to its end (payload: the tokens scheduled for the target; a step that schedules nothing gets none), with
`nsys_cc:step_context` opened and closed at its start (payload: the step's total context length, `context_tokens`), and
`nsys_cc:warmup` / `nsys_cc:iteration` around each `LLM.generate` call (the first `NSYS_CC_WARMUP_ITERS` are
warm-up; payload: the prompts in the call)."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from ...contract import ENV_WARMUP_ITERS, ITERATION_RANGE, STEP_CONTEXT_RANGE, STEP_RANGE, WARMUP_RANGE
from . import ranges

generate_calls = 0  # `LLM.generate` calls so far in this process


_warned: set[str] = set()


def warmup_iterations() -> int:
    """N from `NSYS_CC_WARMUP_ITERS` (first N `LLM.generate` calls are warm-up); 0 when unset, or when it is no whole
    number ≥ 0 — then with one warning on stderr naming it (it marked no warm-up without a word: every iteration was
    measured, its first ones included)."""
    text = os.environ.get(ENV_WARMUP_ITERS, "")
    try:
        n = int(text) if text.strip() else 0
    except ValueError:
        n = -1
    if n >= 0:
        return n
    if text not in _warned:
        _warned.add(text)
        import sys

        print(f"[nsys-cc] warning: {ENV_WARMUP_ITERS}={text[:40]!r} is not a whole number ≥ 0: no generate call is "
              "marked as warm-up", file=sys.stderr, flush=True)
    return 0


def as_iteration(original: Callable) -> Callable:
    def generate(self, *args, **kwargs):
        global generate_calls
        prompts = args[0] if args else kwargs.get("prompts")
        batch = len(prompts) if isinstance(prompts, (list, tuple)) else 1
        name = WARMUP_RANGE if generate_calls < warmup_iterations() else ITERATION_RANGE
        generate_calls += 1
        ranges.backend.push(name, batch)
        try:
            return original(self, *args, **kwargs)
        finally:
            ranges.backend.pop()

    return generate


def as_step(core_of: Callable[[Any], Any]) -> Callable[[Callable], Callable]:
    """An engine-step method: the outermost call on a thread owns the `nsys_cc:step` range that the engine core's
    scheduler opens (see `_hook_scheduler`); `core_of(self)` is that engine core (None: not a step here)."""

    def make(original: Callable) -> Callable:
        def step(self, *args, **kwargs):
            core = core_of(self)
            if core is None:
                return original(self, *args, **kwargs)
            _hook_scheduler(core)
            state = ranges.state
            state.steps += 1
            try:
                return original(self, *args, **kwargs)
            finally:
                state.steps -= 1
                if state.steps == 0 and state.step_pushed:
                    state.step_pushed = False
                    ranges.backend.pop()

        return step

    return make


def _hook_scheduler(core: Any) -> None:
    """Wrap `core.scheduler.schedule` on the instance, once: when it returns inside a step, open the step's range."""
    scheduler = getattr(core, "scheduler", None)
    schedule = getattr(scheduler, "schedule", None)
    if scheduler is None or schedule is None or getattr(schedule, ranges.ORIGINAL, None) is not None:
        return

    def scheduled(*args, **kwargs):
        output = schedule(*args, **kwargs)
        state = ranges.state
        tokens = getattr(output, "total_num_scheduled_tokens", None)
        if state.steps and not state.step_pushed and not state.quiet and tokens != 0:
            ranges.backend.push(STEP_RANGE, tokens or 0)
            state.step_pushed = True
            context = context_tokens(output)
            if context is not None:
                ranges.backend.push(STEP_CONTEXT_RANGE, context)
                ranges.backend.pop()
        return output

    setattr(scheduled, ranges.ORIGINAL, schedule)
    try:
        scheduler.schedule = scheduled
    except AttributeError:  # a scheduler with __slots__: no step ranges rather than a failed run
        pass


def context_tokens(output: Any) -> int | None:
    """The total context (KV) length of the step a `SchedulerOutput` schedules: Σ over its requests of the tokens
    computed before the step plus those scheduled in it (spec tokens included) — the K/V the step's attention reads,
    equal to vLLM's runner's `optimistic_seq_lens_cpu[:num_reqs].sum()` (exact where scheduling is synchronous, as on
    the CPU build; under asynchronous scheduling with speculation the runner's own value is optimistic alike). Read
    from `scheduled_new_reqs[i].num_computed_tokens` and the parallel lists `scheduled_cached_reqs.req_ids` /
    `.num_computed_tokens`, both filled before the scheduler advances its requests. None when the output lacks any of
    these (another vLLM version): no context rather than a wrong one."""
    scheduled = getattr(output, "num_scheduled_tokens", None)
    new = getattr(output, "scheduled_new_reqs", None)
    cached = getattr(output, "scheduled_cached_reqs", None)
    ids = getattr(cached, "req_ids", None)
    computed = getattr(cached, "num_computed_tokens", None)
    if not isinstance(scheduled, dict) or new is None or ids is None or computed is None or len(ids) != len(computed):
        return None
    try:
        total = 0
        for req in new:
            total += int(req.num_computed_tokens) + int(scheduled.get(req.req_id, 0))
        for rid, done in zip(ids, computed):
            total += int(done) + int(scheduled.get(rid, 0))
    except (AttributeError, TypeError, ValueError):
        return None
    return total


def inproc_core(engine: Any) -> Any:
    """The in-process engine core behind an `LLMEngine` (None when the engine core runs in another process)."""
    return getattr(getattr(engine, "engine_core", None), "engine_core", None)
