"""The interleaved runs, the default way of the profile workflow (`nsys_cc.workflows.profile`): every model in ONE
process, iterations interleaved, repeated R times, c across the runs.

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

On the torch route (`profiler` "torch", `profile --profiler torch`) a run is the driver under plain Python, its torch
profiler writing `run-<k>/trace.pt.trace.json.gz` (no nsys, no export; `commands`); everything else is the same.

Files: `run-<k>/` holds trace.nsys-rep, trace.sqlite (or trace.pt.trace.json.gz), interleaved.json (the driver's
latencies), `<label>.bench.json` per model, log and done.json (written last, with the commands: a rerun keeps a run
whose commands match, `force` redoes it). A run is made in `run-<k>.attempt/` and renamed over `run-<k>/` only when it
completed, so a failing rerun never destroys a completed run. `status.json` lists every run.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from .. import progress
from ..analysis.profile_dir.outputs import RUN_PREFIX, RUN_TRACE_LABEL
from ..errors import InputError
from ..files.folder import Folder, check_out_dir
from ..formats import status_json
from . import attempts, environment, eta, interleaved_run, plan, process, results
from .commands import UNDER, BenchOptions, ModelCommands, ModelFiles, nsys_for
from .interleaved_run import Engine, Run, engine_options, run_commands
from .machine import machine_notes, machine_table
from .models import Model, resolve_all

DEFAULT_REPEAT = 6
DEFAULT_MAX_REPEAT = 30
# Engines of each model in one run: instances of one model differ in speed (their weights' addresses), and an engine
# more costs about 2 s where a run more costs the vLLM import, nsys and the export (docs/REPEATABILITY.md).
DEFAULT_REPLICAS = 2
# What a default profile runs per engine and run: 5 warm-up and 5 measured iterations of one 128-token prefill and 31
# one-token decode steps: 155 decode forwards per engine and run, 1860 per model in a default profile.
DEFAULT_OPTIONS = BenchOptions(output_len=32)


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


def write_status(out: Path, outcome: InterleavedOutcome, profiler: str = "nsys") -> Path:
    """`status.json`: every interleaved run's state, and each model's, and which profiler recorded the runs."""
    doc = {"runs": [r.to_dict() for r in outcome.runs], "profiler": profiler, "stopped_by": outcome.stopped_by,
           "models": [{"role": e.role, "model": e.model.spec, "label": e.label,
                       "status": outcome.model_status(e.label)[0], "reason": outcome.model_status(e.label)[1],
                       **({"draft": e.draft, "gamma": e.gamma} if e.speculative else {}),
                       **({"batch_size": e.batch_size} if e.batch_size is not None else {})}
                      for e in outcome.engines]}
    return status_json.write(out, doc)


def run_all(engines: list[Engine], out: Path, options: BenchOptions, *, nsys: str, gpu: bool, repeat: int,
            precision: float | None, max_repeat: int, timeout: float | None, force: bool, trace: str | None,
            nsys_args: Sequence[str], replicas: int = 1,
            measure: Callable[[Path, list[str]], dict[str, float]] | None = None,
            profiler: str = "nsys") -> InterleavedOutcome:
    """Make the interleaved runs (see the module docstring) and return what happened. With a `precision`, `measure`
    (the front door's `analysis.coefficient.of_profile.decode_precision_of`) gives each draft's decode c precision after
    a run. Ctrl-C: the status is written, then KeyboardInterrupt propagates with `InterleavedOutcome` attached as its
    `outcome` attribute."""
    outcome = InterleavedOutcome([], engines, "repeat")
    active = list(engines)
    failures_in_a_row = 0
    for note in interleaved_run.remove_killed_attempts(out):
        progress.say(f"note: {note}")
    total = str(repeat) if precision is None else f"{repeat}…{max_repeat}"
    try:
        for k in range(1, max_repeat + 1):
            run = Run(k, interleaved_run.run_dir(out, k), run_commands(nsys, out, k, active, options, gpu=gpu,
                                                                       trace=trace, nsys_extra=nsys_args,
                                                                       replicas=replicas, profiler=profiler))
            outcome.runs.append(run)
            if not force and interleaved_run.is_complete(run):
                run.status = "resumed"
            else:
                left = eta.remaining([r.seconds for r in outcome.runs if r.status == "done"], made=k - 1,
                                     repeat=repeat, max_repeat=max_repeat if precision is not None else None,
                                     precision=precision,
                                     worst=max(outcome.precision.values(), default=None) if outcome.precision else None)
                progress.say(f"[run {k}/{total}] {' + '.join(e.label for e in active)}, interleaved in one process "
                             f"under {UNDER[profiler]} ({'GPU' if gpu else 'CPU'}) … ({left.describe()})")
                attempt = run_commands(nsys, out, k, active, options, gpu=gpu, trace=trace, nsys_extra=nsys_args,
                                       where=out / attempts.fresh(interleaved_run.attempt_stem(k)),
                                       replicas=replicas, profiler=profiler)
                interleaved_run.execute(run, active, attempt, gpu=gpu, timeout=timeout)
            interleaved_run.say_run(run, total)
            write_status(out, outcome, profiler)
            failures_in_a_row = 0 if run.ok else failures_in_a_row + 1
            if failures_in_a_row >= 2:
                outcome.stopped_by = "failures"
                break
            if run.ok:  # a draft whose engine could not be built is left out of the later runs
                active = [e for e in active if e is active[0] or not run.engines.get(e.label, "").startswith(
                    "its engine could not be built")]
                if all(e.role == "target" for e in active):  # no draft left: more runs measure nothing to compare
                    outcome.stopped_by = "unbuilt"
                    break
            if k < repeat:
                continue
            if precision is None:
                break
            if len(outcome.completed) >= 2 and measure is not None:
                labels = _plain_labels(outcome)  # the runs so far, as status.json (just written) lists them
                outcome.precision = measure(out, labels)
                worst = max(outcome.precision.values(), default=math.inf)
                progress.say(f"after {len(outcome.completed)} runs: decode c known to ±{worst:.1%} "
                             f"(asked: ±{precision:.1%})")
                if worst <= precision:
                    outcome.stopped_by = "precision"
                    break
        else:
            if precision is not None:
                outcome.stopped_by = "max_repeat"
    except KeyboardInterrupt as exc:
        outcome.stopped_by = "interrupted"
        for r in outcome.runs:
            if r.status == "planned":
                r.status = "not run"
        write_status(out, outcome, profiler)
        exc.outcome = outcome  # type: ignore[attr-defined]
        raise
    write_status(out, outcome, profiler)
    return outcome


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


def _engines(target: str, drafts: Sequence[str], options: BenchOptions, gpu: bool, replicas: int = 1,
             speculate: Sequence[int] = (), speculative_config: str | None = None) -> list[Engine]:
    """The engines of every run: the target, the drafts, then a speculative engine per draft and γ (the labels and
    configs of `plan.speculative_runs`)."""
    models = engines_for(target, drafts)
    if not drafts:
        raise InputError("give at least one draft (drafts)", param="drafts")
    labels = [m.label for m in models]
    if len(set(labels)) != len(labels):
        raise InputError(f"two models have the same label ({', '.join(labels)}): give each model once",
                         param="drafts")
    plan.check_options(options)
    plan.check_context(models, options)
    gammas = plan.parse_gammas(speculate) if speculate else []
    config = plan.parse_speculative_config(speculative_config)
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


DESIGN_LABEL = "bs{batch}.{label}"  # a tune design's engine label: the batch size first, so `<draft>.spec-g<γ>` ends it


def design_engines(target: str, draft: str, cells: Mapping[int, Sequence[int]], options: BenchOptions,
                   gpu: bool, schedule: str | None = None) -> list[Engine]:
    """The engines of a tune design measured in ONE process (`nsys_cc.workflows.tune`): at every batch size B of `cells`
    (B → the γ values measured there) the plain target, labelled `bs<B>.<target>`, and one speculative engine per γ,
    `bs<B>.<draft>.spec-g<γ>`. The driver builds one vLLM engine per model (the target, one speculative engine per γ)
    and runs it at every batch size (`--share-batch-sizes`): the options of one model differ only in the batch
    size. No plain draft: the design's cells are the speculative engines against the plain target of their B.
    `schedule`: a --speculative-config holding vLLM's whole schedule (`num_speculative_tokens_per_batch_size`): one
    engine more, `bs<B>.<draft>.schedule.spec-g<k>` at every batch size (k its num_speculative_tokens)."""
    import dataclasses

    if not cells:
        raise InputError("the design has no cell", param="batch_size")
    tm, dm = engines_for(target, [draft])
    plan.check_options(options)
    plan.check_context([tm, dm], options)

    def carrier(m: Model, js: str = "") -> ModelCommands:
        return ModelCommands({}, [js], [], ModelFiles(Path("."), m.label))

    gammas = sorted({g for gs in cells.values() for g in gs})
    spec = {r.gamma: r for r in plan.speculative_runs(tm, [dm], gammas, None, carrier)}
    sched = plan.parse_speculative_config(schedule) if schedule else None
    if sched is not None and not isinstance(sched.get("num_speculative_tokens"), int):
        raise InputError("schedule: a --speculative-config with num_speculative_tokens", param="schedule")
    if sched is not None:  # the draft named as vLLM loads it (a shipped shape or a pair model: its folder)
        sched = plan.with_model_path(tm, sched) or sched
        schedule = plan._spec_json(sched)
    n = 1 + len(spec) + (sched is not None)  # vLLM engines in the process (one per model, every batch size on it)
    out: list[Engine] = []
    for b, gs in sorted(cells.items()):
        opts = dataclasses.replace(options, batch_size=b)
        plain = engine_options(tm, opts, gpu=gpu, engines=n)
        out.append(Engine("target", dataclasses.replace(tm, label=DESIGN_LABEL.format(batch=b, label=tm.label)),
                          plain, batch_size=b))
        for g in sorted(set(gs)):
            r = spec[g]
            out.append(Engine("speculative", dataclasses.replace(
                r.model, label=DESIGN_LABEL.format(batch=b, label=r.model.label)),
                (*plain, "--speculative-config", r.commands.profile[0]), r.draft, g, batch_size=b))
        if sched is not None:
            k = sched["num_speculative_tokens"]
            label = DESIGN_LABEL.format(batch=b, label=f"{dm.label}.schedule.spec-g{k}")
            out.append(Engine("speculative", dataclasses.replace(tm, label=label),
                              (*plain, "--speculative-config", str(schedule)), dm.label, k, batch_size=b))
    return out


def dry_run_interleaved(target: str, drafts: Sequence[str], out_dir: str | os.PathLike, options: BenchOptions, *,
                        nsys: str,
            gpu: bool, trace: str | None, nsys_args: Sequence[str], repeat: int, precision: float | None,
            max_repeat: int | None, replicas: int = DEFAULT_REPLICAS, speculate: Sequence[int] = (),
            speculative_config: str | None = None, profiler: str = "nsys") -> str:
    """The commands of the first interleaved run, and how many runs would be made."""
    repeat, max_repeat = validate(repeat, precision, max_repeat, replicas)
    environment.check(profiler, gpu=gpu)  # what the run would refuse
    engines = _engines(target, drafts, options, gpu, replicas, speculate, speculative_config)
    out = Path(out_dir).resolve()
    cmds = run_commands(nsys, out, 1, engines, options, gpu=gpu, trace=trace, nsys_extra=nsys_args,
                        replicas=replicas, profiler=profiler)
    runs = f"{repeat}" if precision is None else f"{repeat} to {max_repeat} (until ±{precision:.1%})"
    return (f"# interleaved run 1 of {runs}: {' + '.join(e.label for e in engines)} in one process "
            f"({'GPU' if gpu else 'CPU'}, {profiler}); run k writes {out}/{RUN_PREFIX}k/\n{cmds.shell()}\n")


def profile_interleaved(target: str, drafts: Sequence[str], out_dir: str | os.PathLike, options: BenchOptions, *,
                        device: str, timeout: float | None, force: bool, trace: str | None, nsys_args: Sequence[str],
                        repeat: int, precision: float | None,
                        max_repeat: int | None, replicas: int = DEFAULT_REPLICAS, speculate: Sequence[int] = (),
                        speculative_config: str | None = None,
                        measure: Callable[[Path, list[str]], dict[str, float]] | None = None,
                        finish: Callable[[results.ProfileOutcome], results.ProfileOutcome] | None = None,
                        profiler: str = "nsys"):
    """`profile` with interleaved runs (module docstring); returns a `results.ProfileOutcome`, handed to `finish` (the
    front door's analysis and report) at the end, Ctrl-C included, when it is `analysable`. `measure`: the precision
    loop's c between runs (`run_all`). The analysis' own arguments (acceptance, seed) are bound into `measure` and
    `finish` above (`workflows.profile.profile`)."""
    validate(repeat, precision, max_repeat, replicas)  # before the models are resolved: the options' errors first
    gpu = plan.uses_gpu(device)
    engines = _engines(target, drafts, options, gpu, replicas, speculate, speculative_config)
    return profile_engines(engines, out_dir, options, gpu=gpu, timeout=timeout, force=force, trace=trace,
                           nsys_args=nsys_args, repeat=repeat, precision=precision, max_repeat=max_repeat,
                           replicas=replicas, measure=measure, finish=finish, profiler=profiler)


def profile_engines(engines: list[Engine], out_dir: str | os.PathLike, options: BenchOptions, *, gpu: bool,
                    timeout: float | None, force: bool, trace: str | None, nsys_args: Sequence[str], repeat: int,
                    precision: float | None = None, max_repeat: int | None = None, replicas: int = 1,
                    measure: Callable[[Path, list[str]], dict[str, float]] | None = None,
                    finish: Callable[[results.ProfileOutcome], results.ProfileOutcome] | None = None,
                    profiler: str = "nsys"):
    """The interleaved runs of `engines` (`_engines`' for a profile, `design_engines`' for a tune design) into
    `out_dir`, as `profile_interleaved` describes; `profiler` "torch": the torch route, no nsys needed."""
    repeat, max_repeat = validate(repeat, precision, max_repeat, replicas)
    nsys = nsys_for(profiler)
    for warning in [*environment.check(profiler, gpu=gpu), *process.preflight(nsys)]:
        progress.say(f"warning: {warning}")
    out = check_out_dir(out_dir, "the profile run").resolve()
    process.prepare(out, [m for e in engines for m in (e.model, *plan.config_models(e.options))])
    with Folder(out).lock("the profile run"):  # one writer per out_dir
        try:
            outcome = run_all(engines, out, options, nsys=nsys, gpu=gpu, repeat=repeat, precision=precision,
                              max_repeat=max_repeat, timeout=timeout, force=force, trace=trace, nsys_args=nsys_args,
                              replicas=replicas, measure=measure, profiler=profiler)
        except KeyboardInterrupt as exc:
            partial = getattr(exc, "outcome", None)
            if partial is not None and partial.completed:
                done = conclude(partial, out, precision=precision, max_repeat=max_repeat)
                if finish is not None and done.analysable:
                    done = finish(done)
                if done.report is not None:
                    progress.say(f"interrupted: report on the runs completed so far: {done.report}")
            raise
        done = conclude(outcome, out, precision=precision, max_repeat=max_repeat)
        return finish(done) if finish is not None and done.analysable else done


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
