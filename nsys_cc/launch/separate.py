"""One process per model, the strategy of `launch.orchestrator` the profile workflow (`nsys_cc.workflows.profile`)
takes with `separate`, tensor-parallel models and a speculative config without drafts: profile each model in turn
with vLLM's latency benchmark under the request's recorder; the orchestrator then hands the directory to `finish` (the
workflow's analysis, as `analyze` makes it, and the report).

For every model in turn (target first): `nsys profile … python -m nsys_cc.vllm.bench …` with the NVTX plugin
on, `nsys export` to SQLite (or the benchmark under the torch profiler: `launch.recorders`), a check that the trace
holds forward ranges, then a `<label>.done.json` record (`formats.done_json`). Everything lands in the output directory
as `<label>.{nsys-rep,sqlite,bench.json,log,done.json}` (the torch profiler: `<label>.pt.trace.json.gz`), plus
`status.json` (rewritten after every model) and the report of `nsys_cc.report`.

Reliability: a model that fails (bad config, crash, `timeout` seconds exceeded, no forward ranges) is recorded
with its reason and log, and the next model still runs; Ctrl-C stops the current model's processes, writes
`status.json` and the report on the models completed so far (when there are enough), then re-raises. A rerun
with the same output directory skips every model whose marker records the same commands (`force` redoes them).
A new attempt never touches the results of an earlier one until it completed: it writes its trace set in a fresh
folder under `<out>/.nsys-cc-attempts/` (the commands `--dry-run` prints, with that folder in place of the output
directory) and renames it over the earlier files only when the model completed; a failed or interrupted attempt leaves
the earlier trace set, its marker and the report made of them as they were (`<label>.log` is the latest attempt's).
Only files nsys-cc can prove it wrote are ever replaced (`resume.in_the_way`: a user's own `<label>.log` or trace
there is refused before the first run).
The report is written when the target and at least one draft completed; its notes list the models that did not.

Speculative runs (`speculate`, a list of γ, and/or `speculative_config`, vLLM's JSON): after the plain runs, for
each draft D and γ one run of the target with `--speculative-config {"method": "draft_model", "model": D,
"num_speculative_tokens": γ}` (fields of `speculative_config` as the base, so other proposers work too), labelled
`<D>.spec-g<γ>`, role "speculative", with vLLM's metrics dumped to `<label>.metrics.json`. `speculative_config`
without `speculate` is one run with that JSON as given, labelled after its draft model (or its method, e.g.
`ngram.spec-g3`) and its `num_speculative_tokens`. Every run uses the same benchmark options. The plain analysis
compares the plain runs; the speculative traces are handed on as `ProfileOutcome.speculative`.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from pathlib import Path

from .. import inputs
from ..files import publishing
from ..formats import status_json
from ..request import ProfileRequest
from . import check, orchestrator, recorders
from .models import Model
from .plan import ModelLaunch, config_models, describe, plan, uses_gpu
from .process import run_model
from .results import ProfileOutcome
from .resume import clean_attempts, is_complete, refuse_in_the_way


class Separate:
    """One process per model (module docstring): the launches of `plan.plan`, made in turn (`launches`: given, as
    planned elsewhere)."""

    name = status_json.SEPARATE

    def __init__(self, request: ProfileRequest, *, gpu: bool | None = None, dry: bool = False,
                 launches: Sequence[ModelLaunch] | None = None, binary: str | None = None):
        self.request, self.dry = request, dry
        if binary is not None:  # the recorder's program, found already (else looked up when first needed)
            self.binary = binary
        self.recorder = recorders.get(request.profiler)
        self.gpu = uses_gpu(request.device) if gpu is None else gpu
        self.tp = max(request.target_tp, request.draft_tp)
        self.launches = list(launches) if launches is not None else plan(request, binary=self.binary, gpu=self.gpu)
        self.out = Path(request.out_dir).resolve()
        self._next = 0

    @functools.cached_property
    def binary(self) -> str:
        return self.recorder.binary(shown_only=self.dry)

    def dry_run(self) -> str:
        where = "GPU" if self.gpu else "CPU"
        return "\n\n".join(f"# {describe(r)} ({where})\n{r.commands.shell()}" for r in self.launches) + "\n"

    def models(self) -> list[Model]:
        return [m for r in self.launches for m in (r.model, *config_models(r.commands.profile))]

    def refuse(self) -> None:
        refuse_in_the_way(self.launches)

    def clean(self, out: Path) -> list[str]:
        return clean_attempts(out)

    def next_run(self) -> ModelLaunch | None:
        if self._next >= len(self.launches):
            return None
        self._next += 1
        launch = self.launches[self._next - 1]
        launch.record = orchestrator.stamp(self)
        return launch

    def _where(self, launch: ModelLaunch) -> str:
        return f"[{self.launches.index(launch) + 1}/{len(self.launches)}] {describe(launch)}"

    def resumed(self, launch: ModelLaunch) -> bool:
        return is_complete(launch)

    def start(self, launch: ModelLaunch) -> str:
        return f"{self._where(launch)}: profiling under {self.recorder.under} ({'GPU' if self.gpu else 'CPU'}) …"

    def execute(self, launch: ModelLaunch, timeout: float | None) -> None:
        run_model(launch, timeout=timeout)

    def said(self, launch: ModelLaunch) -> str:
        where = self._where(launch)
        if launch.status == "resumed" and not launch.reason:
            return f"{where}: already complete in {self.out} (force=True profiles it again)"
        if launch.status == "resumed":  # a rerun that failed, the earlier trace set kept
            return f"{where}: {launch.reason}"
        if launch.ok:
            return f"{where}: profiled in {launch.seconds:.1f} s"
        return f"{where}: FAILED after {launch.seconds:.1f} s: {launch.reason} (log: {launch.files.log})"

    def after(self, launch: ModelLaunch) -> None:
        """Nothing stops the launches: a model that fails leaves the next one to run."""

    def interrupted(self) -> None:
        for launch in self.launches:
            if launch.status == "planned":
                launch.status = "not run"

    def stopped_by(self) -> str | None:
        return None

    def entries(self) -> tuple[list[dict], list[dict]]:
        runs = [{"run": i, "label": r.model.label, "status": r.status, "reason": r.reason,
                 "seconds": round(r.seconds, 1), "trace": str(r.files.trace), "log": str(r.files.log)}
                for i, r in enumerate(self.launches, 1)]
        return runs, [r.to_dict() for r in self.launches]

    def conclude(self, out: Path) -> ProfileOutcome:
        return conclude(self.launches, out)


def failure_notes(runs: Sequence[ModelLaunch]) -> list[str]:
    """One line per model that did not complete: role, label, what happened, where its log is."""
    return [f"{describe(r)}: {r.status.upper()}: {r.reason or 'not run'}; log: {r.files.log}"
            for r in runs if not r.ok]


def conclude(runs: list[ModelLaunch], out: Path) -> ProfileOutcome:
    """What the launches did: the status of every model, and whether the directory holds what `nsys-cc analyze OUT`
    analyses (`ProfileOutcome.analysable`: the completed target, drafts and speculative runs); the speculative runs are
    listed in the notes and handed on as `ProfileOutcome.speculative`. The analysis itself is `finish`'s
    (`workflows.profile.finish`).

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
    done = [r for r in runs if r.ok and not r.speculative]
    outcome = ProfileOutcome(out, runs, notes=failure_notes(runs))
    # A proposer without a draft model (ngram) has no draft forwards: the analysis measures its steps with none, when
    # its spec-decode counters show it proposed tokens (an ngram run that found no match proposed none: the analysis
    # says so in its notes).
    model_free = {r.model.label for r in runs if r.speculative and r.method in check.MODEL_FREE_METHODS}
    idle = {t.label for t in outcome.speculative
            if t.label in model_free and not proposes_without_model(t.trace, t.metrics)}
    spec_notes = [f"speculative run {t.label} (draft {t.draft}, γ = {t.gamma}): {t.trace.name}, {t.metrics.name}"
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
