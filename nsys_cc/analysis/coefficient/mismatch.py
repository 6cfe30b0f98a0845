"""What differs between the target's trace and each other model's, said before c is read: a c is a
ratio of two models' times on one machine, one kind of step and one phase; traces that differ in any of these give a
number that is no cost coefficient.

From each model's `description` (`Trace.describe`: platform, GPUs, engine, rank) and its phases, per model against
the target (`mismatches`, one row each, `COLUMNS`):

- "platform": a CPU trace against a GPU trace (refused by `check_platforms` unless `mixed_platforms=True`: c would
  divide CPU time by a GPU's launch time), or CUDA against ROCm;
- "device": different GPUs (an H100 against a B200);
- "engine": different engines (vLLM against SGLang), and "ranks": different world sizes (a TP8 rank against a single
  GPU);
- "step kind": a speculative run given as the target (its steps verify γ + 1 tokens; a plain draft's decode one);
- "phase": the phase c is judged on is not each side's own (a prefill-only target against decoding drafts: c falls
  back to "all", prefill against decode).

The result holds them (`CostCoefficientResult.mismatches`), the notes say each in a line starting "warning:", the JSON
lists them (`mismatches`).
"""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from ...errors import InputError
from ...trace.description import CPU
from ..metrics import ALL, DECODE, VERIFY, decision_phase
from .result import ModelForwards

COLUMNS = ["kind", "target", "model", "target_value", "value", "text"]


def _platform_words(m: ModelForwards) -> str:
    d = m.description
    if d is None:
        return "a GPU trace" if m.has_cuda else "a CPU trace"
    return "a CPU trace" if d.platform == CPU else f"a GPU trace ({d.device or d.platform})"


def check_platforms(models: Sequence[ModelForwards], mixed_platforms: bool = False) -> None:
    """Refuse a CPU trace paired with a GPU trace (InputError naming `mixed_platforms`) unless asked for: a c of
    CPU time over a GPU's launch time is no cost coefficient of either."""
    if mixed_platforms or not models:
        return
    target = models[0]
    for m in models[1:]:
        cpu = [x for x in (target, m) if _is_cpu(x)]
        if len(cpu) == 1:
            raise InputError(f"{target.name} is {_platform_words(target)} and {m.name} {_platform_words(m)}: c would "
                             "divide one's CPU time by the other's, no cost coefficient of either; profile both on "
                             "the same platform, or pass mixed_platforms=True to compare them anyway",
                             param="mixed_platforms")


def _is_cpu(m: ModelForwards) -> bool:
    return m.description.platform == CPU if m.description is not None else not m.has_cuda


def _phase_words(m: ModelForwards) -> str:
    own = [p for p in m.phases if p != ALL]
    return ", ".join(own) if own else "phases not told apart"


def mismatches(models: Sequence[ModelForwards]) -> pd.DataFrame:
    """One row per difference between the target (models[0]) and another model (module docstring; `COLUMNS`)."""
    rows: list[dict] = []
    if not models:
        return pd.DataFrame(columns=COLUMNS)
    t = models[0]

    def add(kind: str, m: ModelForwards, tv, mv, text: str) -> None:
        rows.append({"kind": kind, "target": t.name, "model": m.name, "target_value": tv, "value": mv, "text": text})

    for m in models[1:]:
        td, md = t.description, m.description
        if _is_cpu(t) != _is_cpu(m):
            add("platform", m, "CPU" if _is_cpu(t) else "GPU", "CPU" if _is_cpu(m) else "GPU",
                f"{t.name} is {_platform_words(t)} and {m.name} {_platform_words(m)} (compared as asked, "
                "mixed_platforms): c divides CPU time by a GPU's launch time, no cost coefficient of either")
        elif td is not None and md is not None and td.platform != md.platform:
            add("platform", m, td.platform, md.platform,
                f"{t.name} ran on {td.platform} and {m.name} on {md.platform}: c compares two platforms")
        if (td is not None and md is not None and td.platform != CPU and md.platform != CPU and td.device
                and md.device and td.device != md.device):
            add("device", m, td.device, md.device,
                f"{t.name} ran on {td.device} and {m.name} on {md.device}: c compares different GPUs")
        if td is not None and md is not None and td.engine and md.engine and td.engine != md.engine:
            add("engine", m, td.engine, md.engine, f"{t.name} ran on {td.engine} and {m.name} on {md.engine}")
        tw = (td.world_size or 1) if td is not None and td.world_size is not None else None
        mw = (md.world_size or 1) if md is not None and md.world_size is not None else None
        if tw is not None and mw is not None and tw != mw:
            def rank(d) -> str:
                return "?" if d is None or d.rank is None else str(d.rank)

            add("ranks", m, tw, mw, f"{t.name} is rank {rank(td)} of {tw} and {m.name} rank {rank(md)} of {mw}: c "
                                    "compares one rank of a distributed run with another setup")
        speculative_target = VERIFY in t.phases and VERIFY not in m.phases and DECODE in m.phases
        if speculative_target:
            add("step kind", m, VERIFY, DECODE,
                f"{t.name} is a speculative run (its steps verify several tokens) and {m.name} decodes one token a "
                f"step: c is judged on '{decision_phase(p for p in m.phases if p in t.phases) or ALL}', verify steps "
                "against decode steps; give the plain target first")
        common = [p for p in m.phases if p in t.phases]
        judged = decision_phase(common)
        own = [decision_phase(x.phases) for x in (t, m)]
        if judged == ALL and any(p != ALL for p in own) and not speculative_target:
            add("phase", m, _phase_words(t), _phase_words(m),
                f"{t.name} ({_phase_words(t)}) and {m.name} ({_phase_words(m)}) share no decode phase: c is judged "
                f"on '{ALL}', which compares different kinds of steps")
    return pd.DataFrame(rows, columns=COLUMNS)


def notes(table: pd.DataFrame) -> list[str]:
    """Each difference as a note starting with "warning:"."""
    return [f"warning: {text}" for text in table["text"]]
