"""One interleaved run: one process under `nsys profile` (`nsys_cc.vllm.interleave`) holding engines of every model,
their iterations alternating, in its folder `run-<k>/` (`launch.interleaved` makes the runs one after another); on the
torch route the driver under plain Python, running the torch profiler itself (`trace.pt.trace.json.gz`, no export).

- `Engine`: one model instance of the run (target, draft or speculative engine) with vLLM's options for it;
- `Run`: the run — its commands (`run_commands`), what happened, the machine around it;
- `execute`: the run made in a fresh `run-<k>.attempt.<id>/` (`attempts`) and renamed over `run-<k>/` only once it
  completed (a failing rerun never destroys a completed run; a run set aside is put back after a kill,
  `_restore_replaced`), its `done.json` written last with the sha256 of every file the run left (`files`), which is
  what lets a later call replace or remove them: a `run-<k>/` holding anything else (a file of the user's) is refused,
  never deleted (`files.proof`); `is_complete`: whether an earlier call left the run complete with the same commands
  (a rerun keeps it); `engine_forwards`: the forward ranges inside each engine's windows of a fresh trace.
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from .. import progress
from ..analysis.profile_dir.outputs import RUN_PREFIX, RUN_TRACE_LABEL
from ..contract import ENGINE_RANGE_PREFIX, ENV_METRICS_OUT, ENV_WARMUP_ITERS, FORWARD_RANGE, INTERLEAVE_MODULE
from ..errors import InputError, NsysCCError
from ..files import proof
from ..files.folder import Folder
from ..files.signals import signals_deferred
from ..formats import done_json, interleaved_json
from . import attempts, process, recorders, resume
from .commands import BenchOptions, ModelCommands, ModelFiles, bench_args, bench_env
from .machine import machine_state
from .models import Model
from .recorders.base import Recorder

# KV cache of each engine of an interleaved run on the CPU (vLLM's CPU default is a whole GiB per engine, and a run
# holds several): plenty for a benchmark's few sequences; VLLM_CPU_KVCACHE_SPACE in the environment wins.
CPU_KV_CACHE_BYTES = 256 * 1024 * 1024
KV_SPACE_ENV = "VLLM_CPU_KVCACHE_SPACE"


@dataclass(frozen=True)
class Engine:
    """One model of an interleaved run: role (target | draft | speculative), the resolved model (for a speculative
    engine the target, labelled `<draft>.spec-g<γ>`), vLLM's options for it, and for a speculative engine its draft's
    label (or proposer) and γ."""

    role: str
    model: Model
    options: tuple[str, ...]
    draft: str | None = None
    gamma: int | None = None
    batch_size: int | None = None  # a tune design's engine (`interleaved.design_engines`): the batch size it runs

    @property
    def speculative(self) -> bool:
        return self.role == "speculative"

    @property
    def label(self) -> str:
        return self.model.label

    @property
    def speculative_config(self) -> str | None:
        """The `--speculative-config` vLLM runs this engine with (None: a plain engine)."""
        return self.options[self.options.index("--speculative-config") + 1] \
            if "--speculative-config" in self.options else None

    def to_dict(self) -> dict:
        """The engine as the run records and the status list it: its label, role and model, and a speculative
        engine's draft, γ and config, a tune design's batch size."""
        return {"label": self.label, "role": self.role, "model": self.model.spec,
                **({"draft": self.draft, "gamma": self.gamma, "speculative_config": self.speculative_config}
                   if self.speculative else {}),
                **({"batch_size": self.batch_size} if self.batch_size is not None else {})}


@dataclass
class Run:
    """One interleaved run (one process): its commands, what happened, and the machine around it.

    status: "planned", "done", "resumed" (complete from an earlier call), "failed", "interrupted", "not run".
    engines: per label, "done" or the reason it has no forwards in this run.
    record: what its `done.json` stores beside what happened (the request, the recorder, the device, the engines:
    `orchestrator.stamp`).
    """

    index: int
    dir: Path
    commands: ModelCommands
    status: str = "planned"
    reason: str = ""
    seconds: float = 0.0
    machine: dict = field(default_factory=dict)
    engines: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    record: dict = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.status in ("done", "resumed")

    @property
    def trace(self) -> Path:
        """The run's trace, as its recorder names it: `trace.sqlite` (nsys), `trace.pt.trace.json.gz` (torch)."""
        return self.dir / self.commands.files.trace.name

    @property
    def recorder(self) -> Recorder:
        return self.commands.files.recorder

    @property
    def log(self) -> Path:
        return self.dir / "log"

    def bench_json(self, label: str) -> Path:
        return self.dir / f"{label}.bench.json"

    def metrics(self, label: str) -> Path:
        """A speculative engine's spec-decode counters (`analysis.profile_dir.acceptance` dump)."""
        return self.dir / f"{label}.metrics.json"

    def to_dict(self) -> dict:
        return {"run": self.index, "dir": str(self.dir), "status": self.status, "reason": self.reason,
                "seconds": round(self.seconds, 1), "machine": self.machine, "engines": self.engines,
                "notes": self.notes, "trace": str(self.trace), "log": str(self.log)}


def run_dir(out: Path, index: int) -> Path:
    return out / f"{RUN_PREFIX}{index}"


def engine_options(model: Model, opts: BenchOptions, *, gpu: bool, engines: int) -> tuple[str, ...]:
    """vLLM's latency-benchmark options for one engine of an interleaved run: those of `nsys_cc.launch.bench` for
    the model (`commands.bench_args`) without the program and `--output-json`; on a GPU the memory share is split
    between the engines (each takes 0.9 ÷ engines of the GPU unless `vllm_args` says otherwise)."""
    args = bench_args(model.path, Path("unused.json"), opts, gpu=gpu, python="python", load_format=model.load_format)
    args = args[3:]  # python -m nsys_cc.launch.bench
    i = args.index("--output-json")
    del args[i:i + 2]
    if gpu and engines > 1 and not any(a.startswith("--gpu-memory-utilization") for a in opts.vllm_args):
        args += ["--gpu-memory-utilization", f"{0.9 / engines:.2f}"]
    if not gpu and not any(a.startswith("--kv-cache-memory-bytes") for a in opts.vllm_args):
        args += ["--kv-cache-memory-bytes", str(CPU_KV_CACHE_BYTES)]
    return tuple(args)


def run_commands(binary: str, out: Path, index: int, engines: Sequence[Engine], opts: BenchOptions, *, gpu: bool,
                 trace: str | None = None, nsys_extra: Sequence[str] = (), python: str | None = None,
                 where: Path | None = None, replicas: int = 1,
                 recorder: Recorder = recorders.DEFAULT) -> ModelCommands:
    """The commands of interleaved run `index` (files in `where`, default `run-<index>/`): `replicas` engines of
    every model, in the order target, drafts, target, drafts, …; engines of a tune design
    (`interleaved.design_engines`) share one vLLM engine across batch sizes (the driver's `--share-batch-sizes`).
    The driver is recorded by `recorder` (`binary`: the program it runs; the torch profiler: the driver alone, its
    trace `trace.pt.trace.json.gz`, no export)."""
    import sys

    from ..vllm.interleave import SHARE_FLAG

    d = where or run_dir(out, index)
    files = ModelFiles(d, RUN_TRACE_LABEL, recorder)
    program = [python or sys.executable, "-m", INTERLEAVE_MODULE, "--output-json", str(d / interleaved_json.NAME)]
    if any(e.batch_size is not None for e in engines):
        program.append(SHARE_FLAG)
    for _ in range(replicas):
        for e in engines:
            program += ["--engine", e.label, *e.options]
    env = bench_env(opts, gpu=gpu)
    env[ENV_WARMUP_ITERS] = str(opts.warmup_iters * len(engines) * replicas)
    if any(e.speculative for e in engines):
        env[ENV_METRICS_OUT] = str(d)  # the driver dumps <label>.metrics.json of each speculative engine there
    if not gpu and KV_SPACE_ENV not in os.environ:
        env.pop(KV_SPACE_ENV, None)  # vLLM's CPU build then takes each engine's --kv-cache-memory-bytes
    recorded = recorder.commands(binary, program, files.base, gpu=gpu, trace=trace, extra=nsys_extra)
    return ModelCommands({**env, **recorded.env}, recorded.profile, recorded.export, files)


def engine_forwards(path: Path, labels: Sequence[str]) -> dict[str, int]:
    """Forward ranges inside each engine's windows of an interleaved trace (an nsys export or a torch trace)."""
    from ..analysis.forwards.engines import in_engine
    from ..trace import open_trace

    with open_trace(str(path)) as trace:
        ranges = trace.nvtx_ranges(names=[FORWARD_RANGE], prefixes=[ENGINE_RANGE_PREFIX], nesting=False)
    out = {}
    for label in labels:
        try:
            scoped = in_engine(ranges, label)
        except NsysCCError:
            out[label] = 0
            continue
        out[label] = int((scoped["name"].astype(str) == FORWARD_RANGE).sum())
    return out


def _replaced(run: Run) -> Path:
    return run.dir.with_name(f"{run.dir.name}.replaced")


# What a run's folder held before its done.json recorded the sha256 of each file (round 4's layout): the names a run
# writes there, which prove such a folder's files (a file by another name is the user's).
_RUN_FILES = (*dict.fromkeys(RUN_TRACE_LABEL + s for r in recorders.RECORDERS for s in r.suffixes), "log",
              interleaved_json.NAME, done_json.NAME)
_RUN_SUFFIXES = (".bench.json", ".metrics.json")


def _legacy_run_file(rel: str, path: Path) -> bool:
    return "/" not in rel and (rel in _RUN_FILES or rel.endswith(_RUN_SUFFIXES))


def ours(run_dir: Path) -> Callable[[str, Path], bool] | None:
    """What proves the files of a run folder nsys-cc completed (`files.proof`): its `done.json` and the sha256 it
    records of every other file (round 4's record, without them: the names a run writes, `_legacy_run_file`); None
    when the folder has no done.json as nsys-cc writes it (none of its files is proven)."""
    marker = done_json.load_run(run_dir)
    if marker is None:
        return None
    files = marker.get("files")
    if files is None:
        return _legacy_run_file
    recorded = proof.by_digest(files)
    return lambda rel, path: rel == done_json.NAME or recorded(rel, path)


def _foreign(run_dir: Path) -> str:
    """Why `run_dir` may not be replaced (a link, a file, no done.json, files nsys-cc did not write), "" when it
    may (or is not there)."""
    if not os.path.lexists(run_dir):
        return ""
    if run_dir.is_symlink() or not run_dir.is_dir():
        return f"{run_dir} is a link or a file, not a run folder nsys-cc made: move it away or choose another out_dir"
    accept = ours(run_dir)
    if accept is None:
        return f"{run_dir} holds files nsys-cc did not write (no done.json): move it away or choose another out_dir"
    left = proof.unproven(run_dir, accept)
    if left:
        return (f"{run_dir} holds files nsys-cc did not write ({proof.shown(left)}): move them away or choose another "
                "out_dir; nothing in it was changed")
    return ""


def _remove_run(folder: Folder, run_dir: Path) -> str:
    """Remove a run folder set aside (`run-<k>.replaced/`): only what nsys-cc proves it wrote (`ours`); "" when it is
    gone, else a note on what stays."""
    accept = ours(run_dir)
    if accept is None:
        return f"{run_dir} was left as it is: it has no done.json of nsys-cc's"
    left = proof.remove_proven(folder.path(run_dir), accept)
    return f"{run_dir} was left with files nsys-cc did not write ({proof.shown(left)})" if left else ""


def _restore_replaced(run: Run) -> None:
    """A completed run set aside by a call killed before its new run was in place (`execute`): put back when
    `run.dir` is missing, removed (what nsys-cc proves it wrote of it) once `run.dir` is there; only a real folder
    with its `done.json` is touched."""
    old = _replaced(run)
    if not (old.is_dir() and not old.is_symlink() and (old / done_json.NAME).is_file()):
        return
    folder = Folder(run.dir.parent)
    with contextlib.suppress(OSError, InputError):
        if os.path.lexists(run.dir):
            note = _remove_run(folder, old)
            if note:
                progress.say(f"note: {note}")
        else:
            folder.replace(old, run.dir)


def is_complete(run: Run) -> bool:
    """Whether an earlier call left this run complete, made with the same commands (`resume.recorded`); then its
    machine, engines and notes are the record's."""
    _restore_replaced(run)
    marker = done_json.load_run(run.dir)
    if marker is None or not resume.recorded(marker, run.commands, [
            run.trace, *(run.metrics(label) for label in marker.get("speculative", []))]):
        return False
    run.machine = marker.get("machine", {})
    run.engines = marker.get("engines", {})
    run.notes = list(marker.get("notes", []))
    return True


def execute(run: Run, engines: Sequence[Engine], attempt: ModelCommands, *, gpu: bool, timeout: float | None) -> None:
    """Make one interleaved run in its attempt directory and move it over `run.dir` when it completed; sets
    `run.status`, `reason`, `engines`, `machine` (never raises for the run's own failures). A rerun (`force`) that
    fails leaves the earlier completed run in place and reachable: its status is "resumed", its reason says that
    the rerun failed and why (issue 32, P15); one stopped by Ctrl-C or SIGTERM too (the status then lists the
    earlier run, so that `analyze DIR` reads it: it refused "nothing to analyse … interrupted"), and the
    KeyboardInterrupt goes on."""
    try:
        _execute(run, engines, attempt, gpu=gpu, timeout=timeout)
    except KeyboardInterrupt as exc:
        if run.status != "done" and is_complete(run):
            why = str(exc) or "Ctrl-C"
            run.status, run.reason = "resumed", f"the rerun was stopped ({why}); the earlier completed run was kept"
        raise
    if run.status == "failed" and is_complete(run):
        log = attempt.files.out_dir / "log"
        run.status, run.reason = "resumed", (f"the rerun failed ({run.reason}; its log: {log}); the earlier "
                                             "completed run was kept")


def _execute(run: Run, engines: Sequence[Engine], attempt: ModelCommands, *, gpu: bool, timeout: float | None) -> None:
    tmp = attempt.files.out_dir
    folder = Folder(run.dir.parent)  # every change under -o through the no-follow writer
    _restore_replaced(run)
    before = machine_state(gpu)
    foreign = _foreign(run.dir)  # a run folder of files nsys-cc cannot prove it wrote: refused, never deleted
    if foreign:
        run.status, run.reason = "failed", foreign
        return
    try:  # a folder of its own, marked with this process (a leftover of that name is cleaned, never reused)
        attempts.make(tmp.parent, tmp.name, run_files(engines))
    except InputError as exc:
        run.status, run.reason = "failed", str(exc)
        return
    t0 = time.perf_counter()
    log_path = tmp / "log"
    try:
        driver = tmp / interleaved_json.NAME
        problem = process.profile_and_export(attempt, log_path, shown=run.commands.shell(),
                                             outputs=(attempt.files.recorded, driver), who=f"run {run.index}",
                                             timeout=timeout)
        if problem:
            run.status, run.reason = "failed", problem
            return
        doc = interleaved_json.read(driver)
        errors: dict[str, str] = {}
        built: dict[str, list[bool]] = {}
        for entry in doc.get("engines", []):
            built.setdefault(entry["label"], []).append(not entry.get("error"))
            if entry.get("error"):
                errors.setdefault(entry["label"], entry["error"])
        counts = engine_forwards(attempt.files.trace, [e.label for e in engines])
        for label, ok in built.items():
            if counts.get(label, 0) and not all(ok):
                run.notes.append(f"run {run.index}: {ok.count(False)} of {len(ok)} engines of {label} could not be "
                                 f"built ({errors[label]}); the others were measured")
        for e in engines:
            if counts.get(e.label, 0) == 0 and e.label in errors:
                run.engines[e.label] = f"its engine could not be built: {errors[e.label]}"
            elif counts.get(e.label, 0) == 0:
                run.engines[e.label] = (f"no {FORWARD_RANGE} ranges inside its engine's windows (plugin not loaded "
                                        f"or its ranges not recorded by {run.recorder.name}: see the log)")
            else:
                run.engines[e.label] = "done"
        run.machine = {"before": before, "after": machine_state(gpu)}
        if run.engines.get(engines[0].label) != "done":
            run.status, run.reason = "failed", f"target {engines[0].label}: {run.engines.get(engines[0].label)}"
            return
        marker = done_json.record(
            run.commands.shell(), **run.record, trace=run.trace.name, machine=run.machine, engines=run.engines,
            forward_ranges=counts, notes=run.notes,
            speculative=[e.label for e in engines if e.speculative and (tmp / f"{e.label}.metrics.json").is_file()])
        Folder(tmp).remove(attempts.MARK)  # the attempt's own mark does not belong to the run
        marker["files"] = proof.digests(tmp, skip=(done_json.NAME,))  # what proves the run's files later
        done_json.write_run(tmp, marker)
        foreign = _foreign(run.dir)  # a file the user put in the earlier run's folder meanwhile: never deleted
        if foreign:
            run.status, run.reason = "failed", foreign
            return
        with signals_deferred():  # Ctrl-C waits: never the earlier run removed and this one not in place
            # The earlier run is set aside, not removed, until the new one is in place: a SIGKILL between the two
            # renames leaves it complete in run-<k>.replaced, which the next call puts back (`_restore_replaced`).
            if os.path.lexists(run.dir):
                folder.replace(run.dir, _replaced(run))
            folder.replace(tmp, run.dir)
            run.status = "done"  # in place: a Ctrl-C held until here finds the new run done
            if os.path.lexists(_replaced(run)):
                note = _remove_run(folder, _replaced(run))
                if note:
                    run.notes.append(note)
        run.status = "done"
    except subprocess.TimeoutExpired:
        run.status, run.reason = "failed", f"timed out after {timeout:g} s (timeout={timeout:g})"
    except (NsysCCError, ValueError, OSError) as exc:
        run.status, run.reason = "failed", str(exc)
    except KeyboardInterrupt:
        run.status, run.reason = "interrupted", "interrupted (Ctrl-C)"
        raise
    finally:
        run.seconds = time.perf_counter() - t0
        if not run.machine:
            run.machine = {"before": before, "after": machine_state(gpu)}


def run_line(run: Run, total: str) -> str:
    """The progress line of a run made or kept (`total`: the runs to make, as said)."""
    where = f"[run {run.index}/{total}]"
    load = run.machine.get("before", {}).get("load_1m")
    cpus = run.machine.get("before", {}).get("cpus")
    state = f" (load {load:.1f} on {cpus} CPUs)" if load is not None else ""
    if run.status == "resumed" and run.reason:
        return f"{where}: {run.reason}, in {run.dir}"
    if run.status == "resumed":
        return f"{where}: already complete in {run.dir} (force=True profiles it again)"
    if run.ok:
        return f"{where}: profiled in {run.seconds:.1f} s{state}"
    return f"{where}: FAILED after {run.seconds:.1f} s: {run.reason} (log: {run.log})"


ATTEMPT_NAME = re.compile(rf"{re.escape(RUN_PREFIX)}[0-9]+\.attempt(?:\.[0-9]+-[0-9a-f]+)?")


def attempt_stem(index: int) -> str:
    """`run-<k>.attempt`: the stem of run k's attempt folders (`attempts.fresh` makes each one's name)."""
    return f"{RUN_PREFIX}{index}.attempt"


def run_files(engines: Sequence[Engine]) -> list[str]:
    """The names a run writes in its folder (the mark of its attempt folder, `attempts.make`)."""
    labels = sorted({e.label for e in engines})
    return [*_RUN_FILES, *(f"{label}{suffix}" for label in labels for suffix in _RUN_SUFFIXES)]


def remove_killed_attempts(out: Path) -> list[str]:
    """Clean every attempt folder a killed call left in `out` (`run-<k>.attempt/`, `run-<k>.attempt.<id>/`: a run whose
    earlier call completed it is not attempted again, so its leftover would stay for good): what its attempt wrote
    is removed, and the folder once empty; a folder whose attempt still runs (an orphan of a killed call), or that
    holds files nsys-cc did not write, stays (`attempts.clean`). Returns a note for each that stays."""
    return attempts.clean_all(out, lambda name: ATTEMPT_NAME.fullmatch(name) is not None, _legacy_run_file)
