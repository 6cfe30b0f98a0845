"""Traces of any size, with bounded memory: a bomb is refused at its bound, not after it; invalid text is
refused as soon as it is seen; no read asks for the whole size cap up front, so an address-space limit (`ulimit -v`)
is never met by a small trace; a MemoryError is one line.

Every bomb and huge file is made at test time, cheaply: a gzip bomb is one deflate block of 1 MiB of blanks,
compressed once and repeated (a 20 GiB bomb is ~21 MB on disk), and a huge plain file is sparse (`truncate`: no
disk). Each runs in a child process under an address-space limit (`RLIMIT_AS`, as `ulimit -v 4000000` sets it), and
the child's own peak memory is read back (its `VmHWM`: `ru_maxrss` would count the pages of the parent it had
before its exec).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import zlib
from pathlib import Path

import pytest

from conftest import FIXTURES, PUBLIC, REPO, cli_in_process
from nsys_cc.errors import InputError
from nsys_cc.trace import kineto_json, kineto_stream, open_trace

# `ulimit -v 4000000`: KiB of address space.
AS_LIMIT = 4_000_000 * 1024
# A child still running after this many seconds has hung (each case answers in a few).
HANG_S = 120
TORCH = FIXTURES / "torch"
DRAFT = TORCH / "tiny-llama-draft-xs.pt.trace.json.gz"
VERBS = (["info"], ["ranges", "--format", "json"], ["kernels", "--format", "json"], ["analyze", "--format", "json"])

_CHILD = """
import json, resource, sys
limit = int(sys.argv[1])
resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
from click.testing import CliRunner
from nsys_cc.cli import cli
runner = CliRunner()
for run in json.loads(sys.argv[2]):
    r = runner.invoke(cli, run["args"], env=run.get("env"))
    print(json.dumps([run["args"], r.exit_code, r.stderr, None if r.exit_code in (0, 2) else repr(r.exception)]),
          flush=True)
with open("/proc/self/status") as status:  # the peak of this program's own memory (ru_maxrss would count the
    print(next(ln for ln in status if ln.startswith("VmHWM:")))  # parent's pages this process had before its exec)
"""


def capped(tmp_path: Path, runs: list[dict], limit: int = AS_LIMIT) -> tuple[list[tuple], dict]:
    """`nsys-cc ARGS` for each of `runs` ({"args": [...], "env": {...}}) in one child process under an address-space
    limit of `limit` bytes: (args, exit status, stderr, exception) of each, and the child's own peak RSS (MiB) and CPU
    seconds."""
    out, err = tmp_path / "child.out", tmp_path / "child.err"
    with open(out, "wb") as fo, open(err, "wb") as fe:
        child = subprocess.Popen([sys.executable, "-c", _CHILD, str(limit), json.dumps(runs)], stdout=fo, stderr=fe,
                                 stdin=subprocess.DEVNULL,
                                 env={**os.environ, "PYTHONPATH": str(REPO), "NSYS_CC_QUIET": "1"})
        watchdog = threading.Timer(HANG_S, child.kill)
        watchdog.start()
        try:
            _, status, usage = os.wait4(child.pid, 0)
        finally:
            watchdog.cancel()
    assert os.waitstatus_to_exitcode(status) == 0, err.read_text()[-3000:]
    lines = out.read_text().splitlines()
    results = [tuple(json.loads(line)) for line in lines if line.startswith("[")]
    assert len(results) == len(runs), err.read_text()[-3000:]
    peak_kib = int(next(ln for ln in lines if ln.startswith("VmHWM:")).split()[1])
    return results, {"rss_mib": peak_kib / 1024, "cpu_s": usage.ru_utime + usage.ru_stime}


def one_line(code: int, stderr: str, *fragments: str) -> str:
    """The one `nsys-cc: error:` line of a run that exited 2, holding `fragments`."""
    lines = [ln for ln in stderr.splitlines() if ln.strip()]
    assert code == 2 and len(lines) == 1 and lines[0].startswith("nsys-cc: error: "), (code, stderr[-2000:])
    assert all(f in lines[0] for f in fragments), lines[0]
    return lines[0]


def gzip_of_blanks(path: Path, blank_bytes: int, head: bytes = b"", tail: bytes = b"") -> Path:
    """A gzip file whose text is `head`, `blank_bytes` blanks, `tail`: one full-flush deflate block of 1 MiB of blanks
    made once and repeated (a flush resets the compressor, so each repetition is the same bytes). Its trailer's CRC
    is not computed (20 GiB of CRC would take longer than the test): the reader refuses long before it."""
    mib = 1 << 20
    assert blank_bytes % mib == 0
    co = zlib.compressobj(9, zlib.DEFLATED, -15)
    with open(path, "wb") as fh:
        fh.write(b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x02\x03")
        fh.write(co.compress(head) + co.flush(zlib.Z_FULL_FLUSH))
        block = co.compress(b" " * mib) + co.flush(zlib.Z_FULL_FLUSH)
        again = co.compress(b" " * mib) + co.flush(zlib.Z_FULL_FLUSH)
        assert block == again
        fh.write(block * 2)
        remaining = blank_bytes // mib - 2
        while remaining:
            n = min(remaining, 1024)
            fh.write(block * n)
            remaining -= n
        fh.write(co.compress(tail) + co.flush())
        fh.write((0).to_bytes(4, "little") + ((len(head) + blank_bytes + len(tail)) % 2**32).to_bytes(4, "little"))
    return path


def sparse(path: Path, size: int, head: bytes) -> Path:
    """A file of `size` bytes: `head`, then a hole (zeros no disk holds)."""
    with open(path, "wb") as fh:
        fh.write(head)
        fh.truncate(size)
    return path


# -- bombs and huge files, refused at their bound ----------------------------------------------------------------------
HUGE = {  # case → (what to make, the verb, the cap, what the line says)
    "bomb-20-gib": ("gzip", 20 << 30, "info", None, ["gzip bomb"]),
    "bomb-under-the-cap": ("gzip", 6 << 30, "ranges", None, ["gzip bomb"]),
    "sparse-20-gib": ("sparse", 20 << 30, "info", None, ["is 21,474,836,480 bytes: more than nsys-cc reads"]),
    "sparse-20-gib-cap-raised": ("sparse", 20 << 30, "info", str(64 << 30), ["is not JSON", "at byte 17"]),
    "sparse-invalid-from-byte-2": ("invalid", 3 << 30, "kernels", None, ["is not JSON", "at byte 1"]),
}


@pytest.fixture(scope="module")
def huge(tmp_path_factory) -> tuple[dict, dict]:
    """Each case of HUGE made (a 21 MB gzip of 20 GiB of blanks in a trace's list; 6 GiB of blanks in a valid trace,
    under the 16 GiB cap; sparse files) and run by one child under the address-space limit: case → (exit status,
    stderr, the file), and the child's rusage."""
    folder = tmp_path_factory.mktemp("huge")
    paths = {}
    for case, (kind, size, _, _, _) in HUGE.items():
        path = folder / f"{case}.pt.trace.json{'.gz' if kind == 'gzip' else ''}"
        if kind == "gzip":
            paths[case] = gzip_of_blanks(path, size, b'{"schemaVersion": 1, "traceEvents": [', b"]}")
        else:
            paths[case] = sparse(path, size, b"{" if kind == "invalid" else b'{"traceEvents": [')
    assert paths["bomb-20-gib"].stat().st_size < 25e6
    runs = [{"args": [verb, str(paths[case])], "env": {"NSYS_CC_MAX_TRACE_BYTES": cap} if cap else None}
            for case, (_, _, verb, cap, _) in HUGE.items()]
    results, usage = capped(folder, runs)
    return {case: (status, stderr, paths[case]) for case, (_, status, stderr, _) in zip(HUGE, results)}, usage


@pytest.mark.slow
@pytest.mark.parametrize("case", list(HUGE))
def test_a_bomb_or_huge_file_is_refused_at_its_bound_in_little_memory(huge, case):
    results, usage = huge
    status, stderr, path = results[case]
    line = one_line(status, stderr, *HUGE[case][4], str(path))
    if "gzip bomb" in line:  # refused at its bound: after 64–72 MiB of the 20 GiB, not after the 16 GiB cap
        out_bytes = int(line.split("when decompressed (")[1].split(" bytes")[0].replace(",", ""))
        assert out_bytes <= kineto_stream.BOMB_AFTER + kineto_stream.CHUNK
    assert usage["rss_mib"] < 500, usage  # the child that read them all, at its peak


def test_the_size_cap_is_applied_to_the_decompressed_stream_as_it_is_read(tmp_path, monkeypatch):
    # a cap of 20 MiB and 60 MiB of blanks in a gzip: refused after 20 MiB + 1 byte come out, not after 60
    bomb = gzip_of_blanks(tmp_path / "over.json.gz", 60 << 20, b'{"traceEvents": [')
    monkeypatch.setenv("NSYS_CC_MAX_TRACE_BYTES", str(20 << 20))
    monkeypatch.setattr(kineto_stream, "BOMB_AFTER", 1 << 40)  # the ratio check off: the cap alone
    monkeypatch.setattr(kineto_json, "MAX_BLANK", 1 << 40)  # and the blanks' bound
    seen = []
    read = kineto_stream.TraceBytes.read
    monkeypatch.setattr(kineto_stream.TraceBytes, "read", lambda self: seen.append(self.out) or read(self))
    with pytest.raises(InputError, match=r"holds more than 20,971,520 bytes of JSON uncompressed"):
        open_trace(bomb)
    assert max(seen) <= 20 << 20


def test_a_run_of_blanks_longer_than_any_trace_holds_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(kineto_json, "MAX_BLANK", 4 << 20)
    path = tmp_path / "blank.json"
    path.write_bytes(b'{"traceEvents": [' + b" " * (6 << 20) + b"]}")
    with pytest.raises(InputError, match="MiB of blanks in a row"):
        open_trace(path)


def test_a_value_larger_than_any_event_is_refused(tmp_path, monkeypatch):
    # an event longer than a batch's span is read alone, by the exact parser, within MAX_VALUE bytes
    monkeypatch.setattr(kineto_json, "MAX_VALUE", 2 << 20)
    path = tmp_path / "big.json"
    path.write_bytes(b'{"traceEvents": [{"name": "' + b"x" * (kineto_json.MAX_SPAN + (1 << 20)) + b'"}]}')
    with pytest.raises(InputError, match=r"traceEvents\[0\] is larger than 2 MiB"):
        open_trace(path)


# -- an address-space limit --------------------------------------------------------------------------------------------
def trace_runs(traces: list[Path], sets: list[list[Path]]) -> list[dict]:
    """info, ranges and kernels of each trace, and analyze of each set (target first)."""
    return [*({"args": [*verb, str(t)]} for t in traces for verb in VERBS[:3]),
            *({"args": ["analyze", "--format", "json", *map(str, s)]} for s in sets)]


@pytest.mark.slow
def test_every_trace_verb_works_under_an_address_space_limit(tmp_path):
    # `ulimit -v 4000000`: a request for the 16 GiB cap up front failed every read, even of a 4 KB trace
    torch = [TORCH / f"{m}.pt.trace.json.gz" for m in ("tiny-llama-target", "tiny-llama-draft-xs",
                                                       "tiny-llama-draft-xs.spec-g2")]
    vllm = [FIXTURES / "vllm" / f"{m}.sqlite" for m in ("tiny-llama-target", "tiny-llama-draft-xs")]
    results, _ = capped(tmp_path, trace_runs([*torch[:2], vllm[0]], [torch, vllm]))
    for args, status, stderr, exc in results:
        assert status == 0 and exc is None and "MemoryError" not in stderr, (args, status, stderr, exc)


@pytest.mark.public
@pytest.mark.slow
def test_every_trace_verb_works_on_the_public_traces_under_an_address_space_limit(tmp_path):
    if not PUBLIC.is_dir():
        pytest.skip(f"the public traces are not here ({PUBLIC})")
    traces = sorted(PUBLIC.glob("*.json.gz")) + sorted(PUBLIC.glob("*.sqlite"))[:3]
    results, _ = capped(tmp_path, trace_runs(traces, [[t] for t in traces if t.suffix == ".gz"]))
    for args, status, stderr, exc in results:
        # exit 2: what the trace does not hold (a capture trace has no step to default to), never memory
        assert status in (0, 2) and exc is None and "memory" not in stderr.lower(), (args, status, stderr, exc)


def test_a_memory_error_while_reading_is_one_line(tmp_path, monkeypatch):
    class Exhausted:
        def decode(self, data):
            raise MemoryError

    monkeypatch.setattr(kineto_json, "_DECODER", Exhausted())
    result = cli_in_process("info", str(DRAFT))
    assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
    assert "not enough memory to read this trace" in result.stderr and "ulimit -v" in result.stderr


@pytest.mark.parametrize("value", ["99999999999999999999999", "0", "-5", "1e9", str(2**62 + 1)])
def test_the_size_cap_variable_is_checked(monkeypatch, value):
    monkeypatch.setenv("NSYS_CC_MAX_TRACE_BYTES", value)
    result = cli_in_process("info", str(DRAFT))
    assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
    assert "NSYS_CC_MAX_TRACE_BYTES must be a" in result.stderr


def test_the_largest_size_cap_reads_a_small_trace(monkeypatch):
    monkeypatch.setenv("NSYS_CC_MAX_TRACE_BYTES", str(2**62))
    with open_trace(DRAFT) as trace:
        assert len(trace.nvtx_ranges())


def test_no_read_asks_for_more_than_a_piece(tmp_path, monkeypatch):
    # whatever the cap, the file is read in pieces of at most CHUNK bytes (never `read(cap + 1)`)
    import gzip as gzip_mod

    asked: list[int] = []
    real = gzip_mod.GzipFile.read
    monkeypatch.setattr(gzip_mod.GzipFile, "read", lambda self, n=-1: asked.append(n) or real(self, n))
    monkeypatch.setenv("NSYS_CC_MAX_TRACE_BYTES", str(2**62))
    with open_trace(DRAFT):
        pass
    assert asked and all(0 < n <= kineto_stream.CHUNK for n in asked), asked
