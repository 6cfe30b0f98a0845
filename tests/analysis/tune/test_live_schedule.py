"""The live per-batch-size schedule, from steps of several batch sizes (made from a known model, so
the schedule must be that model's), and the batch size carried through the channel."""

from __future__ import annotations

from nsys_cc.analysis.profile_dir.acceptance import AcceptanceStats
from nsys_cc.analysis.tune import model as tune_model, schedule as tune_schedule
from nsys_cc.analysis.tune.keys import CellKey
from nsys_cc.analysis.tune.live import batch_schedule
from nsys_cc.live import channel
from nsys_cc.live.timing import DECODE, VERIFY, StepRecord

# The known model (ms): draft 0.5 + 0.1·B per token, verify 2 + 0.8·B(γ+1), outside 1 + 0.2·B, decode 3 + 0.6·B.


def _steps(b: int, g: int, n: int = 5) -> list[StepRecord]:
    draft = (0.5 + 0.1 * b) / 1e3
    verify = (2 + 0.8 * b * (g + 1)) / 1e3
    outside = (1 + 0.2 * b) / 1e3
    step = verify + g * draft + outside
    v = [StepRecord(VERIFY, g + 1.0, step, verify, [draft] * g, batch=b) for _ in range(n)]
    d = [StepRecord(DECODE, 1.0, (3 + 0.6 * b) / 1e3, 2.4e-3, batch=b) for _ in range(n)]
    return v + d


def _stats() -> AcceptanceStats:
    per = [160, 128, 100]
    return AcceptanceStats(alpha=sum(per) / 600, per_position=tuple(p / 200 for p in per), num_drafts=200,
                           num_draft_tokens=600, num_accepted=sum(per), accepted_per_position=tuple(per))


def test_the_live_schedule_is_the_tune_model_of_the_steps():
    records = _steps(1, 3) + _steps(8, 3) + _steps(16, 3)
    got = batch_schedule(records, _stats(), max_batch_size=64, max_gamma=8)
    cost = tune_model.BatchCostModel((3.0, 0.6), (0.5, 0.1), (2.0, 0.8), (1.0, 0.2, 0.0))
    tokens = tune_model.tokens_model([tune_model.Cell(CellKey(1), 3, 0, 0, 0, 0, 1.0, acceptance=_stats())])
    best = []
    for b in range(1, 65):
        s = [tune_model.speedup(cost, tokens, b, g) for g in range(1, 9)]
        i = max(range(8), key=lambda k: s[k])
        best.append(i + 1 if s[i] > 1 else 0)
    assert got == tune_schedule.schedule_ranges(best)
    assert got[0][2] > 0 and got[-1][2] == 0  # speculates at small batches, not at large ones: what the model says


def test_steps_without_a_batch_size_give_no_schedule():
    records = [StepRecord(VERIFY, 4.0, 0.01, 0.005, [0.001] * 3) for _ in range(5)]
    assert batch_schedule(records, _stats()) is None


def test_the_channel_carries_the_batch_size():
    records = _steps(4, 2, n=1)
    back = channel.decode(channel.encode(records))
    assert [r.batch for r in back] == [4, 4]
    old = channel.encode(records)
    del old["batch"]  # a payload from an older engine: batch unknown, not an error
    assert [r.batch for r in channel.decode(old)] == [0, 0]
