"""The end of a one-process-per-model profile: `status.json`, the notes on the runs that did not complete, whether
there is enough to analyse (`conclude`), and what `profile` returns (`ProfileOutcome`). The analysis of the directory
written and its report are the front door's (`nsys_cc.front.profile`: `analysis.coefficient.of_profile.analyze_profile`,
then the report), handed down as `profile`'s `finish`: nothing under launch/ builds an analysis.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from .. import inputs
from ..files import publishing
from ..formats import status_json
from . import check
from .plan import ModelLaunch, describe

if TYPE_CHECKING:
    from ..analysis.coefficient.result import CostCoefficientResult


@dataclass(frozen=True)
class SpeculativeTrace:
    """A completed speculative run, as the analysis takes it: its trace, vLLM's latency JSON and metrics dump."""

    label: str
    draft: str
    gamma: int
    sqlite: Path
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


def write_status(out_dir: Path, runs: Sequence[ModelLaunch]) -> Path:
    """`status.json`: every model's state, reason and files (rewritten after each model)."""
    return status_json.write(out_dir, [r.to_dict() for r in runs])


def failure_notes(runs: Sequence[ModelLaunch]) -> list[str]:
    """One line per model that did not complete: role, label, what happened, where its log is."""
    return [f"{describe(r)}: {r.status.upper()}: {r.reason or 'not run'}; log: {r.files.log}"
            for r in runs if not r.ok]


def conclude(runs: list[ModelLaunch], out: Path) -> ProfileOutcome:
    """The status of every model, and whether the directory holds what `nsys-cc analyze OUT` analyses
    (`ProfileOutcome.analysable`: the completed target, drafts and speculative runs); the speculative runs are listed in
    the notes and handed on as `ProfileOutcome.speculative`. The analysis itself is `finish`'s (`nsys_cc.front`).

    Forwards are the ranges the target's trace holds (`model_executable()`, or vLLM's own scope when the plugin
    fell back to it); a draft (or speculative run) traced with the other kind cannot be compared and is reported
    as failed.
    """
    from ..analysis.profile_dir.spec_labels import proposes_without_model

    range_name = runs[0].range_name
    for run in runs[1:]:
        if run.ok and run.range_name != range_name:
            run.status = "failed"
            run.reason = f"its forwards are {run.range_name!r} ranges, the target's {range_name!r}"
    write_status(out, runs)
    done = [r for r in runs if r.ok and not r.speculative]
    outcome = ProfileOutcome(out, runs, notes=failure_notes(runs))
    # A proposer without a draft model (ngram) has no draft forwards: the analysis measures its steps with none, when
    # its spec-decode counters show it proposed tokens (an ngram run that found no match proposed none: the analysis
    # says so in its notes).
    model_free = {r.model.label for r in runs if r.speculative and r.method in check.MODEL_FREE_METHODS}
    idle = {t.label for t in outcome.speculative
            if t.label in model_free and not proposes_without_model(t.sqlite, t.metrics)}
    spec_notes = [f"speculative run {t.label} (draft {t.draft}, γ = {t.gamma}): {t.sqlite.name}, {t.metrics.name}"
                  + (" (no draft model: its steps hold no draft forwards)" if t.label in model_free - idle else "")
                  for t in outcome.speculative]
    measurable = [t for t in outcome.speculative if t.label not in idle]
    # a head, MTP or n-gram run has no plain draft beside the target: its steps are measured all the same
    if not runs[0].ok or (len(done) < 2 and not measurable):
        outcome.notes += spec_notes + _withdraw_stale_report(out, runs)
        return outcome
    outcome.notes += spec_notes
    outcome.analysable = True
    return outcome


def _withdraw_stale_report(out: Path, runs: Sequence[ModelLaunch]) -> list[str]:
    """When no new report could be made but this run replaced a trace the earlier report in `out` was made of, that
    report no longer describes the files beside it: it is removed (only what the report writer can prove it wrote),
    and a note says so. An earlier report of traces left as they were stays."""
    from ..report.report_files import MANIFEST

    replaced = {str(r.files.trace) for r in runs if r.status == "done"}
    doc = inputs.load_state(out / "report.json", "report", shape={"models": inputs.ListOf(dict)})
    if doc is None:
        return []
    described = {str(m.get("path")) for m in doc["models"]}
    stale = sorted(replaced & described)
    if not stale:
        return []
    removed = publishing.withdraw(out, manifest=MANIFEST)
    if not removed:
        return []
    return [f"the earlier report in {out} was removed: it described {', '.join(Path(p).name for p in stale)}, which "
            "this run replaced, and no new report could be made"]
