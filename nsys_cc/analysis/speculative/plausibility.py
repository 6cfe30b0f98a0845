"""Speedups that cannot be: a measured speedup that no speculative run can give is a measurement problem, not a finding.

A speculative step produces at most its tokens (the bonus token plus the accepted drafts) and costs at least a plain
decode step's work (the verify forward is no cheaper than a one-token forward, and the drafts and the rejection come
on top), so

- at α = 0 (no draft token accepted: one token per step) the speedup is at most 1; measured above 1, the plain and the
  speculative runs were timed under different conditions (another process's load, a slower process);
- at any α the speedup is at most the tokens per step; measured above that, likewise.

`problems` says which of these a run's numbers break, in words for the notes; an empty list when none.
"""

from __future__ import annotations

import math


def problems(*, name: str, measured: float, alpha: float, tokens_per_step: float,
             interval: tuple[float, float] | None = None) -> list[str]:
    """The impossibilities (module docstring) that the measured speedup of run `name` shows, as sentences."""
    out: list[str] = []
    if not math.isfinite(measured):
        return out
    where = ""
    if interval is not None and all(math.isfinite(x) for x in interval):
        where = f" [{interval[0]:.3g}–{interval[1]:.3g}]"
    if alpha == 0 and measured > 1:
        out.append(f"{name}: MEASUREMENT PROBLEM: a measured speedup of {measured:.3g}×{where} at α = 0 is impossible "
                   "(no draft token was accepted, so each step gave one token and cost at least a plain step): the "
                   "plain and the speculative steps were timed under different conditions; do not read it as a gain")
    elif math.isfinite(tokens_per_step) and measured > tokens_per_step:
        out.append(f"{name}: MEASUREMENT PROBLEM: a measured speedup of {measured:.3g}×{where} is above the "
                   f"{tokens_per_step:.3g} tokens per step, which no speculative step can give (each costs at least "
                   "a plain step): the plain and the speculative steps were timed under different conditions")
    return out
