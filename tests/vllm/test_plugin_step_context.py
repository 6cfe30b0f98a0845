"""The step's total context as the plugin writes it (`hooks.steps`): a zero-length `nsys_cc:step_context` range
inside each step range, its payload Σ over the scheduled requests of (tokens computed + tokens scheduled), from a
fake `SchedulerOutput` shaped as vLLM 0.32's (no vLLM needed; the real one: fixtures/context/, tests/analysis/…)."""

from __future__ import annotations

from types import SimpleNamespace

from nsys_cc.vllm.hooks import steps

STEP, CONTEXT = "nsys_cc:step", "nsys_cc:step_context"


def _output(new, cached, scheduled):
    """new: [(req_id, computed)], cached: [(req_id, computed)], scheduled: {req_id: tokens}."""
    return SimpleNamespace(
        total_num_scheduled_tokens=sum(scheduled.values()), num_scheduled_tokens=scheduled,
        scheduled_new_reqs=[SimpleNamespace(req_id=r, num_computed_tokens=c) for r, c in new],
        scheduled_cached_reqs=SimpleNamespace(req_ids=[r for r, _ in cached],
                                              num_computed_tokens=[c for _, c in cached]))


def _core(outputs):
    it = iter(outputs)
    return SimpleNamespace(scheduler=SimpleNamespace(schedule=lambda: next(it)))


def _run_steps(outputs) -> None:
    core = _core(outputs)

    class Engine:
        @steps.as_step(lambda self: core)
        def step(self):
            core.scheduler.schedule()

    for _ in outputs:
        Engine().step()


def test_each_step_range_holds_its_context_range_with_the_kv_length_summed(events):
    outputs = [
        # a prefill of two prompts of 32 tokens, one with 16 tokens cached already (prefix cache)
        _output([("a", 0), ("b", 16)], [], {"a": 32, "b": 16}),
        # their first decode, and a verify of 1 + 3 tokens beside a new request's chunk
        _output([], [("a", 32), ("b", 32)], {"a": 1, "b": 1}),
        _output([("c", 0)], [("a", 33), ("b", 33)], {"a": 4, "b": 1, "c": 8}),
    ]
    _run_steps(outputs)
    # by hand: 32 + (16 + 16); 33 + 33; (33 + 4) + (33 + 1) + (0 + 8)
    assert events == [(STEP, 48), (CONTEXT, 64), "pop", "pop",
                      (STEP, 2), (CONTEXT, 66), "pop", "pop",
                      (STEP, 13), (CONTEXT, 79), "pop", "pop"]


def test_an_output_without_the_fields_gets_a_step_range_and_no_context(events):
    _run_steps([SimpleNamespace(total_num_scheduled_tokens=5)])
    lists_apart = _output([], [("a", 3)], {"a": 1})
    lists_apart.scheduled_cached_reqs.num_computed_tokens = []  # parallel lists of other lengths: no guess
    _run_steps([lists_apart])
    assert events == [(STEP, 5), "pop", (STEP, 1), "pop"]


def test_the_context_is_none_where_a_request_field_is_missing():
    broken = _output([("a", 0)], [], {"a": 4})
    del broken.scheduled_new_reqs[0].num_computed_tokens
    assert steps.context_tokens(broken) is None
    assert steps.context_tokens(_output([("a", 2)], [("b", 5)], {"a": 3, "b": 1})) == 11
