"""How many interleaved runs remain and about how long they take: the numbers of `profile`'s progress line.

Pure arithmetic on what the runs so far took, so that it is tested with made-up durations (tests/launch/test_eta.py):

- a fixed number of runs (`repeat`, no precision): the runs left are `repeat - done`;
- with a precision P: at least `repeat - done` (the first `repeat` are always made), at most `max_repeat - done`,
  and the expected number from the precision reached so far: an interval's half-width shrinks as 1/√n, so reaching
  P from the worst half-width w after n runs takes about n·(w/P)² runs in all (`runs_needed`);
- the time per run is the median of the completed runs' times (one slow run, e.g. the first one filling the page
  cache, does not set the estimate); before any run has completed there is no estimate.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Remaining:
    """Runs left (`low`…`high`, `expected` the best guess) and the seconds per run they are estimated at."""

    low: int
    expected: int
    high: int
    per_run_s: float | None

    @property
    def seconds(self) -> float | None:
        return None if self.per_run_s is None else self.expected * self.per_run_s

    def describe(self) -> str:
        """E.g. "about 2 runs left, ~1 min 30 s (at 45 s a run; 1 to 24 runs until ±10.0 %)"."""
        if self.high == 0:
            return "no runs left"
        runs = f"{self.expected} run{'s' if self.expected != 1 else ''} left"
        if self.low != self.high:
            runs = "about " + runs
        if self.per_run_s is None:
            when = "time not known before the first run completes"
        else:
            when = f"~{duration(self.seconds or 0.0)} at {duration(self.per_run_s)} a run"
        return f"{runs}, {when}" + (f"; {self.low} to {self.high} until the precision is reached"
                                    if self.low != self.high else "")


def duration(seconds: float) -> str:
    """Seconds as a person says them: "45 s", "2 min 10 s", "1 h 05 min"."""
    s = max(0, round(seconds))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60:02d} s"
    return f"{s // 3600} h {s % 3600 // 60:02d} min"


def runs_needed(done: int, worst: float, precision: float) -> int:
    """Runs in all to bring a half-width of `worst` (relative, after `done` runs) down to `precision`, if it shrinks
    as 1/√n; at least `done`. An unknown half-width (inf or nan) gives `done + 1`: one more run, then look again."""
    if done <= 0:
        raise ValueError("runs_needed needs at least one completed run")
    if not math.isfinite(worst):
        return done + 1
    if worst <= precision:
        return done
    return max(done + 1, math.ceil(done * (worst / precision) ** 2 - 1e-9))


def remaining(durations: Sequence[float], *, made: int, repeat: int, max_repeat: int | None = None,
              precision: float | None = None, worst: float | None = None) -> Remaining:
    """What is left after `made` runs (resumed ones included) whose completed runs took `durations` seconds.

    Without a precision exactly `repeat - made` runs are left. With one (and `max_repeat`): between
    `repeat - made` and `max_repeat - made`, expected `runs_needed(made, worst, precision) - made` once a half-width
    `worst` is known (before that: the minimum)."""
    if made < 0 or repeat < 1:
        raise ValueError("made must be ≥ 0 and repeat ≥ 1")
    per_run = statistics.median(durations) if durations else None
    floor = max(repeat - made, 0)
    if precision is None or max_repeat is None:
        return Remaining(floor, floor, floor, per_run)
    ceiling = max(max_repeat - made, 0)
    floor = min(floor, ceiling)
    expected = floor
    if worst is not None and made > 0:
        expected = runs_needed(made, worst, precision) - made
    return Remaining(floor, min(max(expected, floor), ceiling), ceiling, per_run)
