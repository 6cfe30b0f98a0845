"""Reads and waits: every file read through one opener, every wait through one bound.

Each hang case plants a real FIFO (`os.mkfifo`) where nsys-cc reads one of its own files (an export-cache record,
a profile's `status.json`, a run's `done.json`, a sweep cell's record) and runs the code under a bound — a CLI run
as a subprocess with `timeout=`, a library call under `bounded` (SIGALRM) — so a wait fails the test instead of
hanging the suite. Misshapen state files (D06) must give one line, never a traceback. G01 copies a real fixture and
makes its `NVTX_EVENTS.end` an expensive generated column: the query bound (`NSYS_CC_QUERY_TIMEOUT`, a SQLite
progress handler on every connection) must stop it. P10/P11: every timeout is validated by one rule. The walker at
the end fails on any read call outside `nsys_cc.inputs`, the trace reader's `connect` and the writer.
"""

from __future__ import annotations

import ast
import contextlib
import json
import os
import re
import shutil
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from click.testing import CliRunner

from conftest import FIXTURES, REPO, bounded, package_offenders, parsed, slow_column, unchanged
from nsys_cc import inputs
from nsys_cc.cli import cli
from nsys_cc.errors import InputError

VLLM = FIXTURES / "vllm"
TARGET = VLLM / "tiny-llama-target.sqlite"
DRAFT = VLLM / "tiny-llama-draft-s.sqlite"
REPORT = VLLM / "tiny-llama-target.nsys-rep"
INTERLEAVED = FIXTURES / "interleaved"
PACKAGE = REPO / "nsys_cc"
# A hang in a subprocess fails after this many seconds (every case below answers in a few).
HANG_S = 60


def nsys_cc(*args: str, env: dict | None = None, timeout: int = HANG_S) -> subprocess.CompletedProcess:
    """The real `nsys-cc` as a process; a wait without a bound fails the test (TimeoutExpired)."""
    try:
        return subprocess.run([sys.executable, "-c", "import sys; from nsys_cc.cli import main; sys.exit(main())",
                               *args], capture_output=True, text=True,
                              timeout=timeout, stdin=subprocess.DEVNULL,
                              env={**os.environ, "NSYS_CC_QUIET": "1", **(env or {})})
    except subprocess.TimeoutExpired:
        pytest.fail(f"nsys-cc {' '.join(args)} still waiting after {timeout} s: a wait without a bound")


def one_error_line(proc_or_result, *fragments: str) -> str:
    """The single `nsys-cc: error:` line of a run that failed with exit 2 (no traceback), holding `fragments`."""
    code = getattr(proc_or_result, "returncode", getattr(proc_or_result, "exit_code", None))
    stderr = proc_or_result.stderr
    assert code == 2, (code, proc_or_result.stdout, stderr)
    lines = [ln for ln in stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("nsys-cc: error: "), stderr
    assert "Traceback" not in stderr
    for f in fragments:
        assert f in lines[0], (f, lines[0])
    return lines[0]


@contextlib.contextmanager
def prompt(seconds: int = 15):
    """`bounded`, and the block must end well before the bound: code that swallows the alarm's TimeoutError (an
    OSError) after waiting still fails."""
    t0 = time.monotonic()
    with bounded(seconds):
        yield
    assert time.monotonic() - t0 < 5, f"waited {time.monotonic() - t0:.1f} s: a wait without a bound"


def cli_run(*args: str, env: dict | None = None):
    return CliRunner().invoke(cli, list(args), env={"NSYS_CC_QUIET": "1", **(env or {})})


# -- the opener itself ------------------------------------------------------------------------------------------------
def test_the_opener_refuses_a_fifo_without_waiting(tmp_path):
    os.mkfifo(tmp_path / "p")
    with prompt(10), pytest.raises(InputError, match=r"^the status file .*/p is a FIFO \(named pipe\), not a file$"):
        inputs.read_bytes(tmp_path / "p", "status file")


def test_the_opener_refuses_a_file_over_its_size_cap(tmp_path):
    (tmp_path / "big.json").write_bytes(b" " * 2048)
    with pytest.raises(InputError, match="is 2048 bytes, more than the 1024"):
        inputs.read_bytes(tmp_path / "big.json", "record", limit=1024)
    assert inputs.read_bytes(tmp_path / "big.json", "log", limit=10, tail=True) == b" " * 10


def test_a_100k_deep_document_is_one_line_not_a_recursion_error(tmp_path):
    (tmp_path / "deep.json").write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(InputError, match=r"nested deeper than 200 levels"):
        inputs.load_json(tmp_path / "deep.json", "manifest")
    # brackets inside strings are text, not nesting
    (tmp_path / "text.json").write_text(json.dumps({"x": "[" * 1000}))
    assert inputs.load_json(tmp_path / "text.json", "manifest") == {"x": "[" * 1000}


@pytest.mark.parametrize("doc, message", [
    ({"runs": [1, 2]}, "runs[0] is an integer, not an object"),
    ({"runs": [{"status": "done"}]}, "runs[0] has no 'run'"),
    ({"runs": [{"run": True, "status": "done"}]}, "runs[0].run is true or false, not an integer"),
    ([], "the document is an array, not an object"),
])
def test_the_shape_check_names_the_first_place_a_document_differs(doc, message):
    shape = {"runs": inputs.ListOf({"run": int, "status": str})}
    with pytest.raises(InputError, match=re.escape(f"the status file x is not shaped as nsys-cc writes it: {message}")):
        inputs.check_shape(doc, shape, "the status file x")


def test_nan_and_infinity_are_no_json_numbers():
    with pytest.raises(InputError, match="NaN is not a JSON number"):
        inputs.parse_json(b'{"c": NaN}', "record")


# -- C05: a FIFO as an export-cache record ---------------------------------------------------------------------------
def test_C05_a_fifo_as_a_cache_record_is_exported_again_never_waited_on(tmp_path):
    from nsys_cc.files import users
    from nsys_cc.trace import export as export_mod

    cache = tmp_path / "cache"
    cache.mkdir(mode=0o700)
    digest = export_mod.content_hash(REPORT)
    entry = cache / f"{digest}.sqlite"
    shutil.copyfile(TARGET, entry)
    os.mkfifo(export_mod._record_path(entry))
    assert users.my_uid() == os.stat(entry).st_uid
    with prompt(15):
        assert export_mod._cached(entry, REPORT, digest) is False  # not trusted: exported again


def test_C05_a_fifo_as_the_cache_ledger_is_no_ledger(tmp_path):
    from nsys_cc.trace import export as export_mod

    cache = tmp_path / "cache"
    cache.mkdir(mode=0o700)
    os.mkfifo(cache / export_mod.LEDGER)
    with prompt(15):
        assert export_mod._ledger(cache) == set()


# -- D05/D06: a profile's status.json a FIFO, or shaped wrong ---------------------------------------------------------
def _profile_dir(tmp_path: Path) -> Path:
    out = tmp_path / "O"
    shutil.copytree(INTERLEAVED, out, ignore=shutil.ignore_patterns("spec", "README.md"))
    return out


@pytest.mark.slow
def test_D05_analyze_of_a_profile_whose_status_json_is_a_fifo_is_one_line(tmp_path):
    out = _profile_dir(tmp_path)
    os.mkfifo(out / "status.json")
    with unchanged(out):
        proc = nsys_cc("analyze", str(out))
    one_error_line(proc, "status.json is a FIFO (named pipe), not a file")


def test_D05_profile_into_a_dir_whose_status_json_is_a_fifo_refuses_it(tmp_path):
    from nsys_cc.formats import status_json

    out = tmp_path / "O"
    out.mkdir()
    os.mkfifo(out / "status.json")
    with prompt(15), pytest.raises(InputError, match="status.json is in the way"):
        status_json.check_writable(out)


DEEP = "[" * 100_000 + "]" * 100_000


@pytest.mark.parametrize("text, fragment", [
    ('{"runs": [1, 2]}', "a run entry is 1"),
    ('{"runs": [{"status": "done"}]}', "a run entry is"),
    ('{"models": []}', "neither a list of models nor an object with its runs"),
    ('[{"label": "t"}]', "a model's 'role' is None"),
    ("[1, 2]", "a model entry is int"),
    (DEEP, "nested deeper than 200 levels"),
])
def test_D06_analyze_of_a_misshapen_status_json_is_one_line(tmp_path, text, fragment):
    out = _profile_dir(tmp_path)
    (out / "status.json").write_text(text)
    with unchanged(out):
        result = cli_run("analyze", str(out))
    one_error_line(result, "status.json", fragment)


@pytest.mark.parametrize("text", ['{"runs": [1, 2]}', "[1, 2]", '{"cell": "c"}', '{"cell": 1, "status": "done"}',
                                  DEEP, "not json"])
def test_D06_a_sweep_cells_misshapen_record_is_unreadable_state_run_again(tmp_path, text, capsys):
    from nsys_cc.formats import cell_json
    from nsys_cc.sweep import cell

    d = tmp_path / "cell-1"
    d.mkdir()
    (d / cell_json.NAME).write_text(text)
    spec = SimpleNamespace(dir=d, fingerprint=lambda: {"x": 1})
    with unchanged(d):
        assert cell.read_outcome(spec) is None
        assert cell.kept_outcome(spec) is None
    assert "unreadable state, the cell is run again" in capsys.readouterr().err


def test_D05_a_sweep_cells_record_and_attempts_as_fifos_are_never_waited_on(tmp_path):
    from nsys_cc.formats import attempts_json, cell_json
    from nsys_cc.sweep import cell

    d = tmp_path / "cell-1"
    d.mkdir()
    os.mkfifo(d / cell_json.NAME)
    os.mkfifo(d / attempts_json.NAME)
    spec = SimpleNamespace(dir=d, fingerprint=lambda: {"x": 1}, sweep=SimpleNamespace(run_id="r"))
    with prompt(15):
        assert cell.read_outcome(spec) is None
        assert cell.kept_outcome(spec) is None
        assert cell._new_attempt(spec) == (1, False)  # the FIFO is replaced by the record, never read


def test_a_fifo_as_the_cells_lock_file_is_refused_not_waited_on(tmp_path):
    from nsys_cc.errors import NsysCCError
    from nsys_cc.sweep import cell

    os.mkfifo(tmp_path / cell.LOCK_FILE)
    with prompt(15), pytest.raises(NsysCCError, match="is not a regular file"):
        with cell._locked(tmp_path):
            pass


def test_a_deep_report_manifest_is_no_manifest_not_a_recursion_error(tmp_path):
    from nsys_cc.files import publishing
    from nsys_cc.report.report_files import MANIFEST

    (tmp_path / MANIFEST).write_text(DEEP)
    earlier = publishing._read_manifest(tmp_path / MANIFEST)
    assert earlier.hashes == {} and earlier.by_name == set()


# -- P13: a run's done.json a FIFO -------------------------------------------------------------------------------------
def _interleaved_run(out: Path):
    from nsys_cc.launch import interleaved_run as repeat
    from nsys_cc.launch.commands import ModelCommands, ModelFiles

    py = [sys.executable, "-c"]
    final = ModelCommands({}, [*py, "pass"], [*py, "pass"], ModelFiles(out / "run-1", "trace"))
    return repeat.Run(1, out / "run-1", final)


def test_P13_a_fifo_as_an_interleaved_runs_done_json_is_not_a_completed_run(tmp_path):
    from nsys_cc.launch import interleaved_run as repeat

    out = tmp_path / "O"
    (out / "run-1").mkdir(parents=True)
    shutil.copyfile(TARGET, out / "run-1" / "trace.sqlite")
    os.mkfifo(out / "run-1" / "done.json")
    with prompt(15):
        assert repeat.is_complete(_interleaved_run(out)) is False


@pytest.mark.parametrize("text", ["[1, 2]", '{"commands": 3}', DEEP, '{"commands": "x", "engines": [1]}'])
def test_D06_a_misshapen_done_json_is_not_a_completed_run_never_a_traceback(tmp_path, text):
    from nsys_cc.launch import interleaved_run as repeat

    out = tmp_path / "O"
    (out / "run-1").mkdir(parents=True)
    shutil.copyfile(TARGET, out / "run-1" / "trace.sqlite")
    (out / "run-1" / "done.json").write_text(text)
    assert repeat.is_complete(_interleaved_run(out)) is False


def test_P13_a_fifo_as_a_models_done_json_is_not_a_completed_model(tmp_path):
    from nsys_cc.launch import resume
    from nsys_cc.launch.commands import ModelCommands, ModelFiles
    from nsys_cc.launch.models import resolve
    from nsys_cc.launch.plan import ModelLaunch

    out = tmp_path / "O"
    out.mkdir()
    run = ModelLaunch("target", resolve("tiny-llama-target"),
                   ModelCommands({}, [sys.executable, "-c", "pass"], [sys.executable, "-c", "pass"],
                                 ModelFiles(out, "m")))
    shutil.copyfile(TARGET, run.files.trace)
    run.files.bench_json.write_text("{}")
    os.mkfifo(run.files.done)
    with prompt(15):
        assert resume.is_complete(run) is False


@pytest.mark.slow
def test_P13_analyze_of_a_profile_whose_run_done_json_is_a_fifo_answers(tmp_path):
    """`analyze O` with run-1/done.json a FIFO: run-1 is no completed run (the others are analysed), no wait."""
    out = _profile_dir(tmp_path)
    (out / "run-1" / "done.json").unlink()
    os.mkfifo(out / "run-1" / "done.json")
    proc = nsys_cc("analyze", str(out), "--format", "json")
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr


# -- G01: a query made slow by the file itself is stopped by the one bound -------------------------------------------
def _slow_trace(dst: Path) -> Path:
    """The real target trace with NVTX_EVENTS.end turned into a generated column that costs ~1 s a row (it builds
    and scans a 20 MB string, its length depending on the row so that SQLite cannot evaluate it once), its values
    unchanged: reading the 86 ranges takes minutes."""
    shutil.copyfile(TARGET, dst)
    con = sqlite3.connect(dst)
    try:
        slow_column(con, chars=20_000_000)
        con.commit()
    finally:
        con.close()
    return dst


# A real process spinning for its 1 s bound: in `make test`. In `make check` the same bound stops the same kind of
# column inside the readers (tests/properties/test_fuzz.py::test_a_slow_query_is_stopped_by_the_query_bound) and a slow
# statement on the library's own connection (below); the real-process error line is test_reliability's.
@pytest.mark.slow
def test_G01_a_slow_generated_column_is_stopped_by_the_query_bound_naming_its_knob(tmp_path):
    slow = _slow_trace(tmp_path / "slow.sqlite")
    t0 = time.monotonic()
    # a bound of 1 s: the slow statement spins (CPU) until it; the draft's and the target's other statements take
    # a few ms
    proc = nsys_cc("analyze", str(slow), str(DRAFT), env={"NSYS_CC_QUERY_TIMEOUT": "1"})
    one_error_line(proc, "slow.sqlite", "a query ran longer than 1 s", "NSYS_CC_QUERY_TIMEOUT")
    assert time.monotonic() - t0 < HANG_S


@pytest.mark.slow
def test_G01_every_connection_has_the_bound(tmp_path, monkeypatch):
    """The library's own connection function stops a slow statement (a recursive CTE: no file needed)."""
    from nsys_cc.trace.connection import connect, too_slow

    monkeypatch.setenv("NSYS_CC_QUERY_TIMEOUT", "0.5")
    conn = connect(":memory:")
    sql = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT max(x) FROM c"
    t0 = time.monotonic()
    with bounded(30), pytest.raises(sqlite3.OperationalError):
        conn.execute(sql).fetchone()
    assert time.monotonic() - t0 < 10
    err = too_slow(conn, "x.sqlite")
    assert err is not None and "NSYS_CC_QUERY_TIMEOUT" in str(err)
    assert conn.execute("SELECT 1").fetchone() == (1,)  # the next statement has its own bound


# -- P10/P11: one validator for every timeout ------------------------------------------------------------------------
BAD_SECONDS = ["nan", "-5", "inf", "soon"]


@pytest.mark.parametrize("value", BAD_SECONDS)
@pytest.mark.parametrize("verb", [
    ["profile", "--target", "tiny-llama-target", "--draft", "tiny-llama-draft-s", "--dry-run", "-o", "{out}"],
    ["sweep", "--target", "tiny-llama-target", "--draft", "tiny-llama-draft-s", "--batch-size", "1",
     "--input-len", "8", "--dry-run", "-o", "{out}"],
    ["analyze", str(TARGET), str(DRAFT)],
])
def test_P10_P11_a_timeout_that_bounds_nothing_is_one_line_naming_the_flag(tmp_path, verb, value):
    args = [a.replace("{out}", str(tmp_path / "O")) for a in verb] + ["--timeout", value]
    result = cli_run(*args)
    one_error_line(result, "--timeout", value)
    assert not (tmp_path / "O").exists()


@pytest.mark.parametrize("value", BAD_SECONDS)
@pytest.mark.parametrize("variable", ["NSYS_CC_EXPORT_TIMEOUT", "NSYS_CC_QUERY_TIMEOUT", "NSYS_CC_LOCK_WAIT"])
def test_P10_P11_a_bound_from_the_environment_is_checked_by_the_same_rule(tmp_path, variable, value):
    source = TARGET
    if variable == "NSYS_CC_EXPORT_TIMEOUT":  # a report alone (its export beside it would be read instead)
        source = tmp_path / "alone.nsys-rep"
        shutil.copyfile(REPORT, source)
    args = ["info", str(source)] if variable != "NSYS_CC_LOCK_WAIT" else \
        ["analyze", str(TARGET), str(DRAFT), "-o", str(tmp_path / "R")]
    result = cli_run(*args, env={variable: value, "NSYS_CC_CACHE": str(tmp_path / "cache")})
    one_error_line(result, variable, value)


def test_a_zero_timeout_still_means_no_limit():
    assert inputs.seconds("0", "--timeout") is None
    assert inputs.seconds(None, "--timeout", default=5.0) == 5.0
    assert inputs.seconds("2.5", "--timeout") == 2.5


# -- the walker: every read through the one opener -------------------------------------------------------------------
READ_CALLS = {"open", "read_text", "read_bytes", "read_parquet", "read_csv", "read_json", "read_sql"}
# (module, function) → why it may read by itself. Everything else reads through `nsys_cc.inputs`.
ALLOWED = {
    ("inputs.py", "*"): "the one opener itself",
    ("files/publishing.py", "*"): "the one writer: its own generations' files, hashed as it writes them",
    ("trace/connection.py", "connect"): "the one SQLite connection function (the query bound on every connection)",
    ("trace/bulk.py", "_arrow_batches"): "ADBC's connection (no progress handler: bounded between batches)",
    ("vllm/interleave.py", "_has_children"): "the kernel's /proc lists of this process's children, not a user's file",
}


def _read_calls(path: Path, rel: str) -> list[str]:
    tree = parsed(path)
    found = []

    def visit(node: ast.AST, func: str) -> None:
        for child in ast.iter_child_nodes(node):
            name = child.name if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) else func
            if isinstance(child, ast.Call) and (rel, "*") not in ALLOWED and (rel, func) not in ALLOWED:
                f = child.func
                call = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
                owner = f.value.id if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) else ""
                if owner == "inputs":
                    pass  # through the one opener
                elif call == "open" and owner == "os":
                    flags = ast.unparse(child.args[1]) if len(child.args) > 1 else ""
                    if "O_NONBLOCK" not in flags and "O_WRONLY" not in flags and "O_DIRECTORY" not in flags:
                        found.append(f"os.open({flags}) at line {child.lineno}")
                elif call == "open" and len(child.args) > 1 and isinstance(child.args[1], ast.Constant) \
                        and any(c in str(child.args[1].value) for c in "wax"):
                    pass  # a write: the write walker's (tests/reliability/test_writes.py)
                elif call in READ_CALLS and child.args and isinstance(child.args[0], ast.Call) \
                        and ast.unparse(child.args[0].func).endswith("BytesIO"):
                    pass  # parses bytes the opener read
                elif call in READ_CALLS and owner not in ("webbrowser",):
                    found.append(f"{call} at line {child.lineno}")
                elif call == "load" and owner == "json":
                    found.append(f"json.load at line {child.lineno}")
                elif call == "connect" and owner in ("sqlite3", "adbc"):
                    found.append(f"{owner}.connect at line {child.lineno}")
            visit(child, name)

    visit(tree, "")
    return found


@pytest.mark.slow
def test_every_read_in_the_package_goes_through_the_one_opener():
    offenders = package_offenders(_read_calls)
    assert offenders == {}, ("reads outside nsys_cc.inputs (route them through it, or add the function to ALLOWED "
                             f"with the reason): {offenders}")


def test_the_walker_finds_a_read_around_the_opener(tmp_path):
    """The walker can fail: a module that opens, reads or connects by itself is found."""
    bad = tmp_path / "bad.py"
    bad.write_text("import json, os, sqlite3\nfrom pathlib import Path\n"
                   "def f(p):\n    Path(p).read_text()\n    open(p).read()\n    json.load(open(p))\n"
                   "    sqlite3.connect(p)\n    os.open(p, os.O_RDONLY)\n    inputs.read_text(p, 'fine')\n"
                   "    os.open(p, os.O_RDONLY | os.O_NONBLOCK)\n")
    assert sorted(c.split(" at")[0] for c in _read_calls(bad, "bad.py")) == [
        "json.load", "open", "open", "os.open(os.O_RDONLY)", "read_text", "sqlite3.connect"]


@pytest.mark.parametrize("value", [float("nan"), -5, float("inf"), "soon"])
def test_P10_P11_the_library_checks_its_timeouts_by_the_same_rule(tmp_path, value, monkeypatch):
    from nsys_cc.launch import orchestrator
    from nsys_cc.request import ProfileRequest
    from nsys_cc.sweep.grid import SweepSpec
    from nsys_cc.workflows import profile as main_path

    def never(*a, **kw):
        pytest.fail(f"profiled with timeout={value!r}")

    monkeypatch.setattr(orchestrator, "run", never)
    with pytest.raises(InputError, match="^timeout must be") as exc:
        main_path.profile(ProfileRequest("tiny-llama-target", ["tiny-llama-draft-s"], tmp_path / "O", timeout=value))
    assert exc.value.param == "timeout"
    with pytest.raises(InputError, match="^timeout must be"):
        SweepSpec("tiny-llama-target", ("tiny-llama-draft-s",), str(tmp_path / "S"), timeout=value)
    assert not (tmp_path / "O").exists()
