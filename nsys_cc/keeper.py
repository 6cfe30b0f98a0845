"""The keeper of every command nsys-cc runs (`nsys profile …`, the torch route's driver, `nsys export`): everything the
command starts dies with nsys-cc, however nsys-cc ends — a `kill -9` included.

`start(cmd, **popen)` runs `python -m nsys_cc.keeper FD -- COMMAND…` (by `launch.process.run_logged` for the profiles,
by `trace.export` for `nsys export`), where FD is the read end of a pipe whose only write end nsys-cc holds. The
keeper

- makes itself a child subreaper (`PR_SET_CHILD_SUBREAPER`), so that every process below it that loses its parent
  (vLLM's engine process once the benchmark is gone, the program nsys started once nsys is gone) becomes its child
  instead of init's: the whole tree stays below it, found by its /proc parent links;
- runs COMMAND in a session of its own, its output where the keeper's goes (the log, or the caller's pipe), and ends
  with its exit status (128 + N for a signal N; 127 with `CANNOT_RUN`'s line when COMMAND cannot be started);
- when the pipe reads end of file — nsys-cc is gone: a SIGKILL cannot be caught, but the kernel closes its end of the
  pipe; or nsys-cc closed it on purpose, `stop_now` — SIGKILLs everything below it at once, again until nothing is
  left, and ends. Without it, `kill -9` of nsys-cc left nsys, the benchmark and vLLM running (for over 5 s, writing
  into the run's attempt folder, which the next call then reused), and an `nsys export` running into the cache;
- on SIGTERM, SIGINT or SIGHUP (nsys-cc stopping the command: a timeout, Ctrl-C) passes SIGTERM to everything below
  it, gives it `GRACE_S` to end, then SIGKILLs what is left.

It imports nothing of nsys-cc beyond the standard library, so that it starts in a few tens of milliseconds, and it
sits at the base of the package (no layer of its own), so that the trace room's export and the launch room's runs
use the same one.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import threading
import time

MODULE = "nsys_cc.keeper"
CANNOT_RUN = "nsys-cc: cannot run "  # the keeper's one line when COMMAND cannot be started (exit status 127)
PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
GRACE_S = 10.0


def _prctl(option: int, value: int) -> bool:
    try:
        return ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0) == 0
    except (OSError, AttributeError):  # not Linux: the pipe still tells nsys-cc's end, orphans may escape
        return False


def descendants(pid: int) -> list[int]:
    """Every process below `pid`, from /proc's parent links."""
    children: dict[int, list[int]] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return []
    for entry in entries:
        if not entry.isdigit():
            continue
        try:  # a /proc record: never a wait (O_NONBLOCK, as every read of nsys-cc's)
            fd = os.open(f"/proc/{entry}/stat", os.O_RDONLY | os.O_NONBLOCK)
            try:
                fields = os.read(fd, 4096).rsplit(b")", 1)[1].split()
            finally:
                os.close(fd)
        except (OSError, IndexError):
            continue
        if len(fields) > 1 and fields[0] not in (b"Z", b"X"):
            children.setdefault(int(fields[1]), []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def _signal_all(sig: int) -> int:
    pids = descendants(os.getpid())
    for pid in pids:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass
    return len(pids)


def _reap() -> None:
    """Collect every child that has ended (the subreaper's orphans included), without waiting."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def kill_everything(deadline_s: float = 5.0) -> None:
    """SIGKILL every process below this one until none is left (or `deadline_s` passed), reaping them."""
    end = time.monotonic() + deadline_s
    while _signal_all(signal.SIGKILL) and time.monotonic() < end:
        time.sleep(0.02)
        _reap()


def start(cmd: list[str], **popen) -> tuple[subprocess.Popen, int]:
    """`cmd` started under its keeper (`popen`: `subprocess.Popen`'s arguments for the keeper, whose output and
    environment the command shares); the keeper's process and the write end of its pipe. Close that end (`stop_now`)
    and the keeper SIGKILLs the command and everything it started, then ends; it closes by itself when nsys-cc ends."""
    alive_r, alive_w = os.pipe()
    try:
        proc = subprocess.Popen([sys.executable, "-m", MODULE, str(alive_r), "--", *cmd], start_new_session=True,
                                pass_fds=(alive_r,), stdin=subprocess.DEVNULL, **popen)
    except BaseException:
        os.close(alive_w)
        raise
    finally:
        os.close(alive_r)
    return proc, alive_w


def stop_now(alive: int) -> None:
    """Close the write end `start` gave: the keeper SIGKILLs everything below it at once and ends (wait for it)."""
    with contextlib.suppress(OSError):
        os.close(alive)


def cannot_run(rc: int, output: str) -> str | None:
    """Why the keeper could not start its command (its `CANNOT_RUN` line, exit status 127), None when it started."""
    if rc != 127:
        return None
    lines = [line for line in output.splitlines() if line.startswith(CANNOT_RUN)]
    return lines[-1].rsplit(": ", 1)[-1] if lines else None


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[1] != "--":
        print(f"usage: python -m {MODULE} FD -- COMMAND…", file=sys.stderr)
        return 2
    fd = int(argv[0])
    command = argv[2:]
    _prctl(PR_SET_CHILD_SUBREAPER, 1)
    stopping = threading.Event()

    def parent_gone() -> None:
        try:
            while os.read(fd, 4096):
                pass
        except OSError:
            pass
        if not stopping.is_set():  # nsys-cc ended without waiting for the command: nothing of it may stay
            stopping.set()
            kill_everything()
            os._exit(137)

    def stop(signum, frame) -> None:
        if stopping.is_set():
            return
        stopping.set()
        _signal_all(signal.SIGTERM)
        end = time.monotonic() + GRACE_S
        while time.monotonic() < end and descendants(os.getpid()):
            time.sleep(0.05)
            _reap()
        kill_everything()
        os._exit(128 + signum)

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, stop)
    try:
        proc = subprocess.Popen(command, start_new_session=True, stdin=subprocess.DEVNULL)
    except OSError as exc:
        print(f"{CANNOT_RUN}{command[0]}: {exc.strerror or exc}", file=sys.stderr, flush=True)
        return 127
    threading.Thread(target=parent_gone, daemon=True).start()
    rc = proc.wait()
    stopping.set()
    return 128 - rc if rc < 0 else rc


if __name__ == "__main__":
    sys.stdout.flush()
    code = main(sys.argv[1:])
    sys.stderr.flush()
    os._exit(code)
