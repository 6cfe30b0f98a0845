"""Traces of any size, with bounded memory (issue 52): a bomb is refused at its bound, not after it; invalid text is
refused as soon as it is seen; no read asks for the whole size cap up front, so an address-space limit (`ulimit -v`)
is never met by a small trace; a MemoryError is one line.

Every bomb and huge file is made at test time, cheaply: a gzip bomb is one deflate block of 1 MiB of blanks,
compressed once and repeated (a 20 GiB bomb is ~21 MB on disk), and a huge plain file is sparse (`truncate`: no
disk). Each runs in a child process under an address-space limit (`RLIMIT_AS`, as `ulimit -v 4000000` sets it), and
the child's own peak memory is read back (`os.wait4`: its rusage alone).
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
import resource, sys
limit = int(sys.argv[1])
resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
from click.testing import CliRunner
from nsys_cc.cli import cli
runs = [a.split("\\x1f") for a in sys.argv[2:]]
if len(runs) == 1:  # one run: as the real process would end (its exit status, its stderr)
    from nsys_cc.cli import main
    sys.argv = ["nsys-cc", *runs[0]]
    sys.exit(main())
import json
runner = CliRunner()
for args in runs:
    r = runner.invoke(cli, args)
    print(json.dumps([args, r.exit_code, r.stderr, repr(r.exception) if r.exit_code not in (0, 2) else None]))
"""


def capped(tmp_path: Path, *runs: list[str], limit: int = AS_LIMIT,
           env: dict | None = None) -> tuple[int, str, str, dict]:
    """`nsys-cc ARGS` for each of `runs` in one child process under an address-space limit of `limit` bytes: its
    exit status, stdout, stderr and its own rusage (peak RSS in MiB, CPU seconds)."""
    out, err = tmp_path / "child.out", tmp_path / "child.err"
    with open(out, "wb") as fo, open(err, "wb") as fe:
        child = subprocess.Popen([sys.executable, "-c", _CHILD, str(limit), *("\x1f".join(r) for r in runs)],
                                 stdout=fo, stderr=fe, stdin=subprocess.DEVNULL,
                                 env={**os.environ, "PYTHONPATH": str(REPO), "NSYS_CC_QUIET": "1", **(env or {})})
        watchdog = threading.Timer(HANG_S, child.kill)
        watchdog.start()
        try:
            _, status, usage = os.wait4(child.pid, 0)
        finally:
            watchdog.cancel()
        child.returncode = os.waitstatus_to_exitcode(status)
    assert child.returncode != -9, f"the child still ran after {HANG_S} s"
    return (child.returncode, out.read_text(), err.read_text(),
            {"rss_mib": usage.ru_maxrss / 1024, "cpu_s": usage.ru_utime + usage.ru_stime})


def one_line(code: int, stderr: str, *fragments: str) -> str:
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
def test_a_20_gib_gzip_bomb_is_refused_at_once_in_little_memory(tmp_path):
    bomb = gzip_of_blanks(tmp_path / "bomb.pt.trace.json.gz", 20 << 30, b'{"traceEvents": [')
    assert bomb.stat().st_size < 25e6
    code, _, err, usage = capped(tmp_path, ["info", str(bomb)])
    line = one_line(code, err, "gzip bomb", str(bomb))
    out_bytes = int(line.split("when decompressed (")[1].split(" bytes")[0].replace(",", ""))
    assert out_bytes <= kineto_stream.BOMB_AFTER + kineto_stream.CHUNK  # refused at its bound: 72 MiB of 20 GiB
    assert usage["rss_mib"] < 500, usage


def test_a_bomb_under_the_size_cap_is_refused_at_its_bound(tmp_path):
    # 6 GiB of blanks inside a valid trace's list: under the 16 GiB cap, and valid JSON, yet no trace expands 1000×
    bomb = gzip_of_blanks(tmp_path / "inside.json.gz", 6 << 30, b'{"schemaVersion": 1, "traceEvents": [', b"]}")
    code, _, err, usage = capped(tmp_path, ["ranges", str(bomb)])
    one_line(code, err, "gzip bomb")
    assert usage["rss_mib"] < 500, usage


def test_the_size_cap_is_applied_to_the_decompressed_stream_as_it_is_read(tmp_path, monkeypatch):
    # a cap of 100 MiB and 300 MiB of blanks in a gzip: refused after 100 MiB + 1 byte come out, not after 300
    bomb = gzip_of_blanks(tmp_path / "over.json.gz", 300 << 20, b'{"traceEvents": [')
    monkeypatch.setenv("NSYS_CC_MAX_TRACE_BYTES", str(100 << 20))
    monkeypatch.setattr(kineto_stream, "BOMB_AFTER", 1 << 40)  # the ratio check off: the cap alone
    monkeypatch.setattr(kineto_json, "MAX_BLANK", 1 << 40)  # and the blanks' bound
    seen = []
    read = kineto_stream.TraceBytes.read
    monkeypatch.setattr(kineto_stream.TraceBytes, "read", lambda self: seen.append(self.out) or read(self))
    with pytest.raises(InputError, match=r"holds more than 104,857,600 bytes of JSON uncompressed"):
        open_trace(bomb)
    assert max(seen) <= 100 << 20


@pytest.mark.parametrize("cap", [None, str(64 << 30)])
def test_a_sparse_20_gib_file_is_refused_without_being_read(tmp_path, cap):
    # the default cap: refused by its size; a cap above it: refused at the first byte that is not JSON (byte 17)
    huge = sparse(tmp_path / "huge.json", 20 << 30, b'{"traceEvents": [')
    code, _, err, usage = capped(tmp_path, ["info", str(huge)], env={"NSYS_CC_MAX_TRACE_BYTES": cap} if cap else None)
    one_line(code, err, *(["is 21,474,836,480 bytes: more than nsys-cc reads"] if cap is None else
                          ["is not JSON", "at byte 17"]))
    assert usage["rss_mib"] < 500, usage


def test_a_sparse_file_invalid_from_its_second_byte_is_refused_at_once(tmp_path):
    bad = sparse(tmp_path / "bad.json", 3 << 30, b"{")
    code, _, err, usage = capped(tmp_path, ["kernels", str(bad)])
    one_line(code, err, "is not JSON", "at byte 1")
    assert usage["rss_mib"] < 500, usage


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
def trace_runs(traces: list[Path], sets: list[list[Path]]) -> list[list[str]]:
    """info, ranges and kernels of each trace, and analyze of each set (target first)."""
    return [*([*verb, str(t)] for t in traces for verb in VERBS[:3]),
            *(["analyze", "--format", "json", *map(str, s)] for s in sets)]


def test_every_trace_verb_works_under_an_address_space_limit(tmp_path):
    # `ulimit -v 4000000`: a request for the 16 GiB cap up front failed every read, even of a 4 KB trace
    torch = [TORCH / f"{m}.pt.trace.json.gz" for m in ("tiny-llama-target", "tiny-llama-draft-xs",
                                                       "tiny-llama-draft-xs.spec-g2")]
    vllm = [FIXTURES / "vllm" / f"{m}.sqlite" for m in ("tiny-llama-target", "tiny-llama-draft-xs")]
    runs = trace_runs([*torch, vllm[0]], [torch, vllm])
    code, out, err, _ = capped(tmp_path, *runs)
    assert code == 0, err[-3000:]
    results = [json.loads(line) for line in out.splitlines() if line.startswith("[")]
    assert len(results) == len(runs)
    for args, status, stderr, exc in results:
        assert status == 0 and exc is None and "MemoryError" not in stderr, (args, status, stderr, exc)


@pytest.mark.public
@pytest.mark.slow
def test_every_trace_verb_works_on_the_public_traces_under_an_address_space_limit(tmp_path):
    if not PUBLIC.is_dir():
        pytest.skip(f"the public traces are not here ({PUBLIC})")
    traces = sorted(PUBLIC.glob("*.json.gz")) + sorted(PUBLIC.glob("*.sqlite"))[:3]
    code, out, err, _ = capped(tmp_path, *trace_runs(traces, [[t] for t in traces if t.suffix == ".gz"]))
    assert code == 0, err[-3000:]
    for args, status, stderr, exc in (json.loads(ln) for ln in out.splitlines() if ln.startswith("[")):
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
