"""Speculative runs pooled over interleaved runs (issue 22 item 6): step tables and counters of several runs made into
one, checked against values worked out by hand here."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from nsys_cc.analysis import spec_runs, steps
from nsys_cc.analysis.acceptance import AcceptanceStats


def _table(step_ms, iteration, drafts_in, latencies, kind="verify"):
    n = len(step_ms)
    frame = pd.DataFrame({"step": np.arange(n), "iteration": iteration, "kind": [kind] * n, "start_ns": np.arange(n),
                          "step_ms": step_ms, "target_ms": np.full(n, 2.0), "tokens": np.full(n, 2.0),
                          "draft_ms": np.full(n, 0.5), "draft_forwards": np.ones(n),
                          "other_ms": np.asarray(step_ms) - 2.5})[steps.STEP_COLUMNS]
    drafts = pd.DataFrame({"step": drafts_in, "wall_ms": np.full(len(drafts_in), 0.5),
                           "payload": np.ones(len(drafts_in))})
    return steps.StepTable(frame, drafts, "step ranges", "", int(np.max(iteration)) + 1, 3.0, 1, ("a note",),
                                 np.asarray(latencies))


def test_pooled_step_tables_keep_each_runs_steps_and_iterations_apart():
    a = _table([10.0, 11.0, 12.0], [0, 0, 1], [0, 1, 2, 3], [0.1, 0.2])  # a draft forward in a step left out (3)
    b = _table([20.0, 21.0], [0, 1], [0, 1], [0.3])
    pooled = spec_runs.pool_tables([a, b])
    assert list(pooled.steps["step"]) == [0, 1, 2, 4, 5]  # b's steps start after a's highest step id (3)
    assert list(pooled.steps["iteration"]) == [0, 0, 1, 2, 3]
    assert list(pooled.steps["run"]) == [0, 0, 0, 1, 1]
    assert list(pooled.draft_forwards["step"]) == [0, 1, 2, 3, 4, 5]
    assert pooled.iterations == 4 and list(pooled.latencies_s) == [0.1, 0.2, 0.3]
    assert pooled.notes == ("a note",)
    assert list(pooled.of_kind("verify")["step_ms"]) == [10.0, 11.0, 12.0, 20.0, 21.0]


def test_counters_of_several_runs_add_up():
    one = AcceptanceStats(alpha=0.25, per_position=(), num_drafts=10, num_draft_tokens=20, num_accepted=5,
                          accepted_per_position=(4, 1))
    two = AcceptanceStats(alpha=0.5, per_position=(), num_drafts=10, num_draft_tokens=20, num_accepted=10,
                          accepted_per_position=(7, 3))
    both = spec_runs.pool_stats([one, two])
    assert (both.num_drafts, both.num_draft_tokens, both.num_accepted) == (20, 40, 15)
    assert both.accepted_per_position == (11, 4) and both.alpha == pytest.approx(15 / 40)
    assert both.alpha_iid == pytest.approx(15 / (15 + 20 - 4))
    assert spec_runs.pool_stats([one, None]) is None  # a run without counters: α from the steps instead
