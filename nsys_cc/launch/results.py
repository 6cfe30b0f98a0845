"""What `profile` returns, whichever strategy made its runs (`launch.orchestrator`): `ProfileOutcome`, made by the
strategy's `conclude` (`interleaved.conclude`, `separate.conclude`). The analysis of the directory written and its
report are the profile workflow's (`workflows.profile.finish`: `analysis.coefficient.of_profile.analyze_profile`, then
the report), handed down as the orchestrator's `finish`: nothing under launch/ builds an analysis.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from .plan import ModelLaunch

if TYPE_CHECKING:
    from ..analysis.coefficient.result import CostCoefficientResult


@dataclass(frozen=True)
class SpeculativeTrace:
    """A completed speculative run, as the analysis takes it: its trace, vLLM's latency JSON and metrics dump."""

    label: str
    draft: str
    gamma: int
    trace: Path
    bench_json: Path
    metrics: Path


@dataclass
class ProfileOutcome:
    """What `profile` did: every model's launch (`runs`, one `plan.ModelLaunch` per model), and the analysis and
    report when there was enough to analyse.

    With interleaved runs (`interleaved`; every model in one process per run) `runs` has one entry per model (status
    "done" when it has forwards in every completed run) and `interleaved` the runs themselves
    (`interleaved_run.Run`);
    `stopped_by` says what ended them ("repeat", "precision", "max_repeat", "failures", "interrupted", or "unbuilt":
    no draft's or speculative engine could be built)."""

    out_dir: Path
    runs: list[ModelLaunch]
    result: CostCoefficientResult | None = None
    report: Path | None = None
    notes: list[str] = field(default_factory=list)
    interleaved: list = field(default_factory=list)
    stopped_by: str | None = None
    # set by `conclude`: whether the directory holds enough to analyse, what its progress line says, and the tables
    # the report adds (the machine's state of interleaved runs)
    analysable: bool = False
    step: str = "analysing the traces"
    tables: dict = field(default_factory=dict)

    @property
    def failed(self) -> list[ModelLaunch]:
        return [r for r in self.runs if not r.ok]

    @property
    def speculative(self) -> list[SpeculativeTrace]:
        """The speculative runs that completed, in run order (draft by draft, γ ascending)."""
        return [SpeculativeTrace(r.model.label, r.draft or "", r.gamma or 0, r.files.trace, r.files.bench_json,
                                 r.files.metrics) for r in self.runs if r.speculative and r.ok]
