"""The interleaved runs, the default strategy of `launch.orchestrator` (the profile workflow's, and every tune
round's): every model in ONE process, iterations interleaved, repeated R times, c across the runs.

Why (docs/REPEATABILITY.md has the measurements): on a shared machine each vLLM process settles at its own speed
and the machine's load drifts, so c from one process per model, minutes apart, does not repeat (three default runs
gave 0.164, 0.127, 0.251), and an interval over one run's forwards says nothing about that. Here:

- a **run** is one process under `nsys profile` (`nsys_cc.vllm.interleave`) that holds `replicas` engines of every
  model (the target, the drafts, and with `speculate` one speculative engine per draft and γ) and alternates their
  benchmark iterations, so load bursts and the process's own state hit every model alike; its trace
  `run-<k>/trace.sqlite` holds every model, told apart by the `nsys_cc:engine <label>` ranges
  (`analysis.forwards.engines`);
- `repeat` runs are made one after another; c pools them and its interval covers the variation between runs
  (`analysis.coefficient.over_runs.cost_coefficient_runs`, `stats.runs_ratio_of_medians`, called by the front door's
  `finish` on the directory written, as `nsys-cc analyze OUT` reads it); the report lists c per run beside
  the machine's state during that run (`launch.machine`) and plots them;
- `precision` P: runs are added (from `repeat`, at most `max_repeat`) until the decode c interval (across three
  runs or more: two give none) of every draft
  (wall-clock) lies within ±P·c; the outcome says whether the precision or `max_repeat` stopped it;
- the machine's state before and after each run (load average, CPU count, and the GPU clocks when `nvidia-smi`
  answers) is recorded in `run-<k>/done.json` and the report's `machine.csv`; runs made with a load above the CPU
  count get a note.
- speculative engines are measured in place against the plain target of the same runs, pooled over the runs
  (`analysis.speculative.pooled`); each writes its spec-decode counters to `run-<k>/<label>.metrics.json`.

Under the torch profiler (`profile --profiler torch`: `launch.recorders`) a run is the driver under plain Python, its
torch profiler writing `run-<k>/trace.pt.trace.json.gz` (no nsys, no export); everything else is the same.

Files: `run-<k>/` holds trace.nsys-rep, trace.sqlite (or trace.pt.trace.json.gz), interleaved.json (the driver's
latencies), `<label>.bench.json` per model, log and done.json (written last, with the commands and the request: a rerun
keeps a run whose commands match, `force` redoes it). A run is made in `run-<k>.attempt.<id>/` and renamed over
`run-<k>/` only when it completed, so a failing rerun never destroys a completed run. `status.json` lists every run.

`Interleaved` is the strategy (the runs one after another, what stops them, the precision loop, their status);
`profile_engines` the engines of a profile, `design_engines` those of a tune design; `conclude` what the runs add up
to.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from .. import progress
from ..analysis.profile_dir.outputs import RUN_PREFIX, RUN_TRACE_LABEL
from ..analysis.profile_dir.spec_labels import K0_MARK, SCHEDULE_MARK
from ..analysis.tune.keys import CellKey
from ..errors import InputError
from ..formats import status_json
from ..request import BenchOptions, ProfileRequest
from . import attempts, eta, interleaved_run, orchestrator, plan, recorders, results
from .commands import ModelCommands, ModelFiles
from .interleaved_run import Engine, Run, engine_options, run_commands
from .machine import machine_notes, machine_table
from .models import Model, resolve_all

DEFAULT_REPEAT = 6
DEFAULT_MAX_REPEAT = 30
# Engines of each model in one run: instances of one model differ in speed (their weights' addresses), and an engine
# more costs about 2 s where a run more costs the vLLM import, nsys and the export (docs/REPEATABILITY.md).
DEFAULT_REPLICAS = 2


def engines_for(target: str, drafts: Sequence[str]) -> list[Model]:
    """The resolved models of a profile, target first (names resolved as `plan.plan` resolves them)."""
    return resolve_all([target, *drafts])


def validate(repeat: int, precision: float | None, max_repeat: int | None, replicas: int = 1) -> tuple[int, int]:
    """(repeat, max_repeat) checked: repeat ≥ 1; replicas ≥ 1; precision in (0, 1); max_repeat ≥ repeat (default
    max(DEFAULT_MAX_REPEAT, repeat) with a precision, else repeat)."""
    if isinstance(repeat, bool) or not isinstance(repeat, int) or repeat < 1:
        raise InputError(f"repeat must be a whole number ≥ 1, not {repeat!r}", param="repeat")
    if isinstance(replicas, bool) or not isinstance(replicas, int) or replicas < 1:
        raise InputError(f"replicas must be a whole number ≥ 1, not {replicas!r}", param="replicas")
    if precision is not None and not (0 < precision < 1):
        raise InputError(f"precision must lie between 0 and 1 (e.g. 0.05 for ±5 %), not {precision!r}",
                         param="precision")
    if max_repeat is None:
        return repeat, max(DEFAULT_MAX_REPEAT, repeat) if precision is not None else repeat
    if precision is None:
        raise InputError("max_repeat only bounds the runs of a precision (e.g. precision=0.05); without one exactly "
                         "repeat runs are made", param="max_repeat")
    if isinstance(max_repeat, bool) or not isinstance(max_repeat, int) or max_repeat < repeat:
        raise InputError(f"max_repeat must be a whole number ≥ repeat ({repeat}), not {max_repeat!r}",
                         param="max_repeat")
    return repeat, max_repeat


@dataclass
class InterleavedOutcome:
    """What the interleaved runs did: the runs, the models that took part, and why they stopped (`conclude` makes
    of it the `results.ProfileOutcome` that `profile` returns)."""

    runs: list[Run]
    engines: list[Engine]
    stopped_by: str  # "repeat" | "precision" | "max_repeat" | "failures" | "unbuilt" | "interrupted"
    precision: dict[str, float] = field(default_factory=dict)  # per draft: relative half-width reached

    @property
    def completed(self) -> list[Run]:
        return [r for r in self.runs if r.ok]

    def model_status(self, label: str) -> tuple[str, str]:
        """("done", "") when the model has forwards in every completed run, else ("failed", why)."""
        done = self.completed
        if not done:
            reasons = {r.reason for r in self.runs if r.reason}
            return "failed", "; ".join(sorted(reasons)) or "no run completed"
        missing = [(r.index, r.engines.get(label, "left out after an earlier run")) for r in done
                   if r.engines.get(label) != "done"]
        if not missing:
            return "done", ""
        return "failed", "; ".join(f"run {i}: {why}" for i, why in missing)


def _plain_labels(outcome: InterleavedOutcome) -> list[str]:
    """The target and the plain drafts with forwards in every completed run (the models c is pooled over; the
    speculative engines are measured in place beside them)."""
    return [e.label for e in outcome.engines if not e.speculative and outcome.model_status(e.label)[0] == "done"]


def stop_note(outcome: InterleavedOutcome, precision: float | None, max_repeat: int) -> str:
    """One sentence on how many runs were made and what stopped them."""
    n = len(outcome.completed)
    made = f"{n} interleaved run(s) completed of {len(outcome.runs)} made"
    if outcome.stopped_by == "precision":
        worst = max(outcome.precision.values(), default=math.nan)
        return (f"{made}; stopped by the precision: every draft's decode c is known to ±{worst:.1%} "
                f"(asked ±{precision:.1%})")
    if outcome.stopped_by == "max_repeat":
        worst = max(outcome.precision.values(), default=math.inf)
        reached = f"±{worst:.1%}" if math.isfinite(worst) else "no interval yet"
        return (f"{made}; stopped by max_repeat ({max_repeat}) before the precision: decode c known to {reached}, "
                f"asked ±{precision:.1%}")
    if outcome.stopped_by == "failures":
        return f"{made}; stopped after two runs in a row failed"
    if outcome.stopped_by == "interrupted":
        return f"{made}; interrupted (Ctrl-C)"
    if outcome.stopped_by == "unbuilt":
        return f"{made}; stopped: no draft's or speculative engine could be built (why: below), so no run would compare"
    return f"{made} (repeat)"


def profile_engines(request: ProfileRequest, gpu: bool, replicas: int = 1) -> list[Engine]:
    """The engines of every run of a profile: the target, the drafts, then a speculative engine per draft and γ (the
    labels and configs of `plan.speculative_runs`)."""
    drafts, options = request.drafts, request.options
    models = engines_for(request.target, drafts)
    if not drafts:
        raise InputError("give at least one draft (drafts)", param="drafts")
    labels = [m.label for m in models]
    if len(set(labels)) != len(labels):
        raise InputError(f"two models have the same label ({', '.join(labels)}): give each model once",
                         param="drafts")
    plan.check_options(options)
    plan.check_context(models, options)
    gammas = request.gammas
    config = plan.parse_speculative_config(request.speculative_config)
    # the configs come as the one-process-per-model runs' (their JSON is the first word of the carrier's command)
    def carrier(m: Model, js: str = "") -> ModelCommands:
        return ModelCommands({}, [js], [], ModelFiles(Path("."), m.label))

    spec = plan.speculative_runs(models[0], models[1:], gammas, config, carrier)
    # one label, one engine's windows: two engines labelled alike would mix their ranges (compared without case)
    plan.refuse_shared_labels([plan.ModelLaunch("target" if i == 0 else "draft", m, carrier(m))
                               for i, m in enumerate(models)] + spec)
    n = (len(models) + len(spec)) * replicas
    out = [Engine("target" if i == 0 else "draft", m, engine_options(m, options, gpu=gpu, engines=n))
           for i, m in enumerate(models)]
    out += [Engine("speculative", r.model, (*engine_options(models[0], options, gpu=gpu, engines=n),
                                            "--speculative-config", r.commands.profile[0]), r.draft, r.gamma)
            for r in spec]
    return out


DESIGN_LABEL = "{cell}.{label}"  # a tune design's engine label: the cell key first (`bs8`, `bs8-in128`), so that
# `<draft>.spec-g<γ>` ends it (`analysis.profile_dir.spec_labels.DESIGN_LABEL_RE` reads it back)
# The K = 0 engine's label <cell>.<draft>.k0.spec-g<γ max> (`analysis.tune.k0`) and a schedule engine's
# <cell>.<draft>.schedule.spec-g<k>: their marks as the analysis reads them (`spec_labels.design_role`).
# The K = 0 schedule's range reaches vLLM's largest default max_num_seqs (1024: GPUs of 70 GiB and more; 256 on the
# CPU): vLLM cuts a range past the engine's max_num_seqs, and carries the last K beyond the last range anyway.
K0_MAX_NUM_SEQS = 1024


def _cell_key(key: CellKey | int) -> CellKey:
    if isinstance(key, CellKey):
        return key
    if isinstance(key, bool) or not isinstance(key, int):
        raise InputError(f"a design's cell is a CellKey or a batch size, not {key!r}", param="batch_size")
    return CellKey(key)


def k0_config(draft_config: dict, gamma: int, vllm_args: Sequence[str] = ()) -> dict:
    """The speculative config of the K = 0 engine: `draft_config` (the design's draft_model config) proposing `gamma`
    tokens (the design's largest γ: vLLM clamps every K to it and refuses 0) with vLLM's schedule giving K = 0 at
    every batch size, `num_speculative_tokens_per_batch_size` = [[1, max_num_seqs, 0]] (`--max-num-seqs` where
    `vllm_args` names it, else `K0_MAX_NUM_SEQS`)."""
    top = K0_MAX_NUM_SEQS
    for i, a in enumerate(vllm_args):
        text = vllm_args[i + 1] if a == "--max-num-seqs" and i + 1 < len(vllm_args) else (
            a.split("=", 1)[1] if a.startswith("--max-num-seqs=") else None)
        if text is not None and text.strip().isdigit() and int(text) > 0:
            top = int(text)
    return {**draft_config, "num_speculative_tokens": int(gamma),
            "num_speculative_tokens_per_batch_size": [[1, top, 0]]}


DesignCells = Mapping[CellKey, Sequence[int]] | Mapping[int, Sequence[int]] | Mapping[CellKey | int, Sequence[int]]


def design_engines(target: str, draft: str, cells: DesignCells, options: BenchOptions, gpu: bool,
                   schedule: str | None = None, k0: bool = False) -> list[Engine]:
    """The engines of a tune design measured in ONE process (`nsys_cc.workflows.tune`): at every cell of `cells`
    (its `CellKey` → the γ values measured there; a plain int key is a batch size) the plain target, labelled
    `<cell>.<target>` (`bs8.…`, `bs8-in128.…` where the key names the prompt length: `CellKey.name`), and one
    speculative engine per γ, `<cell>.<draft>.spec-g<γ>`. A cell runs at its batch size and prompt length (the
    key's `input_len`, else `options.input_len`). The driver builds one vLLM engine per model (the target, one
    speculative engine per γ) and runs it at every cell (`--share-batch-sizes`): the options of one model differ only
    in the batch size and the prompt length, and every cell's sequence must fit the models' context (the longest
    prompt + output_len). No plain draft: the design's cells are the speculative engines against the plain target of
    their cell.
    `schedule`: a --speculative-config holding vLLM's whole schedule (`num_speculative_tokens_per_batch_size`): one
    engine more, `<cell>.<draft>.schedule.spec-g<k>` at every cell (k its num_speculative_tokens).
    `k0`: one engine more at every cell, `<cell>.<draft>.k0.spec-g<γ>`: speculation configured (the design's
    draft_model config at its largest γ) with vLLM's schedule giving K = 0 at every batch size (`k0_config`): the
    price of speculation that proposes nothing (`analysis.tune.k0`)."""
    import dataclasses

    if not cells:
        raise InputError("the design has no cell", param="batch_size")
    keyed = {_cell_key(k): gs for k, gs in cells.items()}
    tm, dm = engines_for(target, [draft])
    plan.check_options(options)
    longest = max(k.input_len if k.input_len is not None else options.input_len for k in keyed)
    plan.check_context([tm, dm], dataclasses.replace(options, input_len=longest))

    def carrier(m: Model, js: str = "") -> ModelCommands:
        return ModelCommands({}, [js], [], ModelFiles(Path("."), m.label))

    gammas = sorted({g for gs in keyed.values() for g in gs})
    if k0 and not gammas:
        raise InputError("k0: the design measures no γ to configure speculation with", param="speculate")
    spec = {r.gamma: r for r in plan.speculative_runs(tm, [dm], gammas, None, carrier)}
    sched = plan.parse_speculative_config(schedule) if schedule else None
    if sched is not None and not isinstance(sched.get("num_speculative_tokens"), int):
        raise InputError("schedule: a --speculative-config with num_speculative_tokens", param="schedule")
    if sched is not None:  # the draft named as vLLM loads it (a shipped shape or a pair model: its folder)
        sched = plan.with_model_path(tm, sched) or sched
        schedule = plan._spec_json(sched)
    zero = None
    if k0:  # the design's own draft_model config, as its largest γ's engine runs it
        base = plan.parse_speculative_config(spec[gammas[-1]].commands.profile[0]) or {}
        zero = plan._spec_json(k0_config(base, gammas[-1], options.vllm_args))
    n = 1 + len(spec) + (sched is not None) + k0  # vLLM engines in the process (one per model, every cell on it)
    out: list[Engine] = []
    for key, gs in sorted(keyed.items()):
        opts = dataclasses.replace(options, batch_size=key.batch_size,
                                   input_len=key.input_len if key.input_len is not None else options.input_len)
        plain = engine_options(tm, opts, gpu=gpu, engines=n)
        b = key.batch_size
        out.append(Engine("target", dataclasses.replace(tm, label=DESIGN_LABEL.format(cell=key.name, label=tm.label)),
                          plain, batch_size=b))
        for g in sorted(set(gs)):
            r = spec[g]
            out.append(Engine("speculative", dataclasses.replace(
                r.model, label=DESIGN_LABEL.format(cell=key.name, label=r.model.label)),
                (*plain, "--speculative-config", r.commands.profile[0]), r.draft, g, batch_size=b))
        if sched is not None:
            k = sched["num_speculative_tokens"]
            label = DESIGN_LABEL.format(cell=key.name, label=f"{dm.label}{SCHEDULE_MARK}.spec-g{k}")
            out.append(Engine("speculative", dataclasses.replace(tm, label=label),
                              (*plain, "--speculative-config", str(schedule)), dm.label, k, batch_size=b))
        if zero is not None:
            label = DESIGN_LABEL.format(cell=key.name, label=f"{dm.label}{K0_MARK}.spec-g{gammas[-1]}")
            out.append(Engine("speculative", dataclasses.replace(tm, label=label),
                              (*plain, "--speculative-config", zero), dm.label, gammas[-1], batch_size=b))
    return out


def _model_runs(outcome: InterleavedOutcome):
    """One `plan.ModelLaunch` per model, its status over the runs (for the CLI's exit status and notes)."""
    first = outcome.runs[0] if outcome.runs else None
    out = []
    for e in outcome.engines:
        commands = (first.commands if first is not None
                    else ModelCommands({}, [], [], ModelFiles(Path("."), RUN_TRACE_LABEL)))
        mr = plan.ModelLaunch(e.role, e.model, commands, draft=e.draft, gamma=e.gamma)
        mr.status, mr.reason = outcome.model_status(e.label)
        mr.seconds = sum(r.seconds for r in outcome.runs)
        out.append(mr)
    return out


def conclude(outcome: InterleavedOutcome, out: Path, *, precision: float | None = None,
             max_repeat: int = DEFAULT_REPEAT) -> results.ProfileOutcome:
    """What the runs did, as `profile` returns it: each model's status over the runs, the notes (how the runs
    stopped, what failed; with enough to analyse, the runs' own notes and the machine's state) and the `machine`
    table, and whether the directory holds what `nsys-cc analyze OUT` analyses (`analysable`: the target and a plain
    draft with forwards in every completed run). The analysis itself is `finish`'s (`nsys_cc.front`)."""
    runs = _model_runs(outcome)
    notes = [stop_note(outcome, precision, max_repeat)]
    notes += [f"{mr.role} {mr.model.label}: FAILED: {mr.reason}" for mr in runs if not mr.ok]
    notes += [f"run {r.index}: FAILED: {r.reason}; log: {r.log}" for r in outcome.runs if not r.ok and r.reason]
    result = results.ProfileOutcome(out, runs, notes=notes, interleaved=outcome.runs, stopped_by=outcome.stopped_by)
    labels = _plain_labels(outcome)
    done = outcome.completed
    if not done or len(labels) < 2 or labels[0] != outcome.engines[0].label:
        return result
    notes += [n for r in done for n in r.notes]
    notes += machine_notes(outcome.runs)
    result.analysable = True
    result.step = f"analysing {len(done)} interleaved run(s)"
    result.tables = {"machine": machine_table(outcome.runs)}
    return result


Measure = Callable[[Path, list[str]], dict[str, float]]


class Interleaved:
    """The interleaved runs as a strategy of `orchestrator` (module docstring): runs 1, 2, … of `engines` (a
    profile's, `profile_engines`, by default; a tune design's, `design_engines`) until `repeat` runs were made, or with
    a `precision` until `measure` (the profile workflow's `analysis.coefficient.of_profile.decode_precision_of`) finds
    every draft's decode c known to it after a run, at most `max_repeat`; two failed runs in a row stop them, and so
    does a run that leaves no draft (a draft whose engine could not be built is left out of the later runs)."""

    name = status_json.INTERLEAVED

    def __init__(self, request: ProfileRequest, engines: list[Engine] | None = None, *, gpu: bool | None = None,
                 measure: Measure | None = None, dry: bool = False, binary: str | None = None):
        self.request, self.measure, self.dry = request, measure, dry
        if binary is not None:  # the recorder's program, found already (else looked up when first needed)
            self.binary = binary
        repeat = DEFAULT_REPEAT if request.repeat is None else request.repeat
        self.replicas = DEFAULT_REPLICAS if request.replicas is None else request.replicas
        # before the models are resolved: the options' errors first
        self.repeat, self.max_repeat = validate(repeat, request.precision, request.max_repeat, self.replicas)
        self.recorder = recorders.get(request.profiler)
        self.gpu = plan.uses_gpu(request.device) if gpu is None else gpu
        self.tp = 1
        self.engines = profile_engines(request, self.gpu, self.replicas) if engines is None else engines
        self.out = Path(request.out_dir).resolve()
        self.outcome = InterleavedOutcome([], self.engines, "repeat")
        self.active = list(self.engines)
        self._failures_in_a_row = 0
        self._stopped = False

    @functools.cached_property
    def binary(self) -> str:
        return self.recorder.binary(shown_only=self.dry)

    @property
    def total(self) -> str:
        """The runs to make, as the progress lines say them."""
        return str(self.repeat) if self.request.precision is None else f"{self.repeat}…{self.max_repeat}"

    def commands(self, index: int, where: Path | None = None) -> ModelCommands:
        """Run `index`'s commands (files in `where`, default its `run-<k>/`)."""
        return run_commands(self.binary, self.out, index, self.active, self.request.options, gpu=self.gpu,
                            trace=self.request.trace, nsys_extra=self.request.nsys_args, where=where,
                            replicas=self.replicas, recorder=self.recorder)

    def dry_run(self) -> str:
        precision = self.request.precision
        runs = f"{self.repeat}" if precision is None else f"{self.repeat} to {self.max_repeat} (until ±{precision:.1%})"
        return (f"# interleaved run 1 of {runs}: {' + '.join(e.label for e in self.engines)} in one process "
                f"({'GPU' if self.gpu else 'CPU'}, {self.recorder.name}); run k writes {self.out}/{RUN_PREFIX}k/\n"
                f"{self.commands(1).shell()}\n")

    def models(self) -> list[Model]:
        return [m for e in self.engines for m in (e.model, *plan.config_models(e.options))]

    def refuse(self) -> None:
        """Nothing before the first run: a run folder of files nsys-cc cannot prove it wrote is refused by its run."""

    def clean(self, out: Path) -> list[str]:
        return interleaved_run.remove_killed_attempts(out)

    def next_run(self) -> Run | None:
        k = len(self.outcome.runs) + 1
        if self._stopped:
            return None
        if k > self.max_repeat:
            if self.request.precision is not None:
                self.outcome.stopped_by = "max_repeat"
            return None
        run = Run(k, interleaved_run.run_dir(self.out, k), self.commands(k))
        run.record = {**orchestrator.stamp(self), "models": [e.to_dict() for e in self.active]}
        self.outcome.runs.append(run)
        return run

    def resumed(self, run: Run) -> bool:
        return interleaved_run.is_complete(run)

    def start(self, run: Run) -> str:
        made = [r.seconds for r in self.outcome.runs if r.status == "done"]
        precision = self.outcome.precision
        left = eta.remaining(made, made=run.index - 1, repeat=self.repeat,
                             max_repeat=self.max_repeat if self.request.precision is not None else None,
                             precision=self.request.precision,
                             worst=max(precision.values(), default=None) if precision else None)
        return (f"[run {run.index}/{self.total}] {' + '.join(e.label for e in self.active)}, interleaved in one "
                f"process under {self.recorder.under} ({'GPU' if self.gpu else 'CPU'}) … ({left.describe()})")

    def execute(self, run: Run, timeout: float | None) -> None:
        attempt = self.commands(run.index, where=self.out / attempts.fresh(interleaved_run.attempt_stem(run.index)))
        interleaved_run.execute(run, self.active, attempt, gpu=self.gpu, timeout=timeout)

    def said(self, run: Run) -> str:
        return interleaved_run.run_line(run, self.total)

    def after(self, run: Run) -> None:
        """What stops the runs after `run` (class docstring); the status holds `run` already (the precision's
        `measure` reads the directory)."""
        self._failures_in_a_row = 0 if run.ok else self._failures_in_a_row + 1
        if self._failures_in_a_row >= 2:
            self._stop("failures")
            return
        if run.ok:  # a draft whose engine could not be built is left out of the later runs
            self.active = [e for e in self.active if e is self.active[0] or not run.engines.get(e.label, "").startswith(
                "its engine could not be built")]
            if all(e.role == "target" for e in self.active):  # no draft left: more runs measure nothing to compare
                self._stop("unbuilt")
                return
        if run.index < self.repeat:
            return
        if self.request.precision is None:
            self._stop("repeat")
            return
        if len(self.outcome.completed) >= 2 and self.measure is not None:
            self.outcome.precision = self.measure(self.out, _plain_labels(self.outcome))
            worst = max(self.outcome.precision.values(), default=math.inf)
            progress.say(f"after {len(self.outcome.completed)} runs: decode c known to ±{worst:.1%} "
                         f"(asked: ±{self.request.precision:.1%})")
            if worst <= self.request.precision:
                self._stop("precision")

    def _stop(self, why: str) -> None:
        self._stopped, self.outcome.stopped_by = True, why

    def interrupted(self) -> None:
        self.outcome.stopped_by = "interrupted"
        for r in self.outcome.runs:
            if r.status == "planned":
                r.status = "not run"

    def stopped_by(self) -> str | None:
        return self.outcome.stopped_by

    def entries(self) -> tuple[list[dict], list[dict]]:
        models = [{**e.to_dict(), "status": self.outcome.model_status(e.label)[0],
                   "reason": self.outcome.model_status(e.label)[1]} for e in self.engines]
        return [r.to_dict() for r in self.outcome.runs], models

    def conclude(self, out: Path) -> results.ProfileOutcome:
        return conclude(self.outcome, out, precision=self.request.precision, max_repeat=self.max_repeat)
