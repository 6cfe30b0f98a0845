"""Shared test fixtures: the real nsys, the project's fixtures, the public GPU traces, file-unchanged checks.

- `nsys_bin`: path of the real nsys. Every test that runs nsys asks for it, and asking marks the test `nsys`
  (`pytest_collection_modifyitems`), so `make check` (`-m "not vllm and not nsys"`) leaves it out without a list
  to keep up to date. Without an installed nsys it skips, unless NSYS_CC_REQUIRE_NSYS=1 (set by `make test`,
  which installs nsys): then it fails, so CI cannot pass by skipping. The tests look for the checkout's own
  install in `<repo>/.nsys` (the library does not know the checkout: `NSYS_CC_NSYS_PREFIX` is set for it).
- Tests that run vLLM are marked `vllm` in their module (`pytestmark`) or on the test; tests that only need vLLM's
  classes ask for `vllm_module` (importing vLLM takes seconds), which marks them `vllm` the same way.
- `slow`: what `make test` runs and `make check` (the edit-test loop, goal ≤ 60 s: benchmarks/check_loop.py) leaves
  out — the long end-to-end checks (the notebook in a kernel, a real Dask cluster, extra real-process runs) and every
  test function whose slowest case took over 0.3 s of the loop on 2 cores (`scripts/mark_slow.py`). Test
  modules import vLLM inside tests or fixtures, not at module level: every test worker collects every module. Torch
  too: the plugin tests whose fake models subclass `torch.nn.Module` (tests/vllm/test_plugin.py,
  tests/vllm/test_plugin_draft_token.py) make them in their tests, with `torch = LazyModule("torch")` at the top.
- Hypothesis runs without its per-example deadline (profile `nsys_cc`): timing is not what those tests check,
  and a busy 2-core CI machine would make it flaky.
- `fixtures_dir`: <repo>/fixtures. `nvtx_fixture`: fixtures/nvtx/nvtx_cases.sqlite (made by `make fixtures`).
- `public_dir`: <repo>/../shared/traces/public (skips with a reason when absent, e.g. in a fresh clone).
- `sha256_tree(path)`: {relative path: sha256} of a file or of every file under a directory;
  `unchanged(*paths)`: a context manager asserting that the files are byte-identical afterwards.
- `raw_sql(path, sql)`: rows of a query on a SQLite file opened read-only with the stdlib — the
  independent oracle for reader tests; `named_ranges(path, name)` the NVTX ranges of one name by it, and
  `decode_tokens_ms(sqlite, label, batch)` an interleaved run's decode tokens of one engine (the pooled-c oracle).
- `slow_column(con)`: an NVTX_EVENTS column made slow to read, values unchanged (the query-bound tests).
- `lock_held(folder)`: another process holding the folder's writer lock for the block (the second-writer tests).
- `scenario_result(code)`: the JSON a script run in a fresh Python process printed on its `RESULT ` line (the
  plugin's vLLM scenarios).
- `cli_in_process(*args)`: `nsys-cc ARGS` in the test process, answered as a `CompletedProcess` (exit status,
  stdout, stderr): the CLI's own answer without a real process's start-up (~0.7 s of CPU each).
- `parsed(path)`: a source file's AST, parsed once per test process (the package walkers share it); `nodes(path)`:
  every node of it, listed once.
- `planned(target, drafts, out, options, **fields)`: the launches of one process per model (`launch.plan.plan`) of the
  request those arguments make (`ProfileRequest.of`), planned with a stand-in nsys on the CPU unless told;
  `interleaved_runs(monkeypatch, engines, out, **fields)`: the interleaved runs of `engines` as the orchestrator makes
  them (one run unless told, no time limit, a stand-in nsys and no preflight).
- `one_per_family(paths)`: the parameters of a test run on every real export: the smallest export of each family
  (a fixture folder, runs and grid cells folded together) and the smallest public trace run in `make check`, the
  others are marked `slow` — `make test` runs them all.
"""

from __future__ import annotations

import ast
import contextlib
import hashlib
import importlib.util
import json
import math
import os
import re
import signal
import sqlite3
import subprocess
import sys
import urllib.parse
from pathlib import Path

import numpy as np
import pytest
from hypothesis import settings

from nsys_cc.trace.nsys import BIN_IN_PREFIX, find_nsys

REPO = Path(__file__).resolve().parents[1]
TESTS = REPO / "tests"
FIXTURES = REPO / "fixtures"
PACKAGE = REPO / "nsys_cc"
PUBLIC = REPO.parent / "shared" / "traces" / "public"
# `make test` installs nsys and sets this: a missing nsys is then a failure, not a skip.
REQUIRE_NSYS = os.environ.get("NSYS_CC_REQUIRE_NSYS", "") not in ("", "0")

settings.register_profile("nsys_cc", deadline=None)
settings.load_profile("nsys_cc")

# The checkout's own nsys (`make nsys` → <repo>/.nsys), for the tests and the nsys-cc processes they start.
if not os.environ.get("NSYS_CC_NSYS_PREFIX") and (REPO / ".nsys" / BIN_IN_PREFIX).is_file():
    os.environ["NSYS_CC_NSYS_PREFIX"] = str(REPO / ".nsys")


# A test that asks for one of these fixtures (directly or through another fixture) gets the marker.
FIXTURE_MARKERS = {"nsys_bin": pytest.mark.nsys, "vllm_module": pytest.mark.vllm}


def pytest_collection_modifyitems(config, items):
    for item in items:
        for fixture in set(getattr(item, "fixturenames", ())) & FIXTURE_MARKERS.keys():
            item.add_marker(FIXTURE_MARKERS[fixture])


# The edit-test loop's guard against regrowth: `make check` sets NSYS_CC_TEST_BUDGET (seconds) and gets, after the
# run, the tests whose setup + call + teardown took longer, slowest first, with where they belong. A warning, not a
# failure: a speed goal is checked by a benchmark (benchmarks/check_loop.py), never by a timed test. Under xdist
# the controller sees every worker's reports, so one list covers the whole run.
TEST_BUDGET_S = float(os.environ.get("NSYS_CC_TEST_BUDGET", "0") or 0)
_test_seconds: dict[str, float] = {}


def pytest_runtest_logreport(report):
    if TEST_BUDGET_S > 0:
        _test_seconds[report.nodeid] = _test_seconds.get(report.nodeid, 0.0) + report.duration


def pytest_terminal_summary(terminalreporter):
    if TEST_BUDGET_S <= 0 or not _test_seconds:
        return
    over = sorted(((s, n) for n, s in _test_seconds.items() if s > TEST_BUDGET_S), reverse=True)
    total = sum(_test_seconds.values())
    if not over:
        terminalreporter.write_line(f"test budget: every test under {TEST_BUDGET_S:g} s ({total:.0f} s of tests)")
        return
    terminalreporter.section(f"tests over the {TEST_BUDGET_S:g} s budget of `make check`", sep="-", yellow=True)
    for seconds, nodeid in over:
        terminalreporter.write_line(f"{seconds:6.1f} s  {nodeid}")
    terminalreporter.write_line(
        f"{len(over)} test(s) over budget, {sum(s for s, _ in over):.0f} of {total:.0f} s of tests (setup included: "
        "the first user of a shared fixture pays for it). A test over 0.3 s belongs in `make test` only: mark it "
        "`@pytest.mark.slow` (scripts/mark_slow.py does, from a junit XML of the loop; or let it ask for "
        "`nsys_bin`/`vllm_module`); an expensive fixture can be built once "
        "(scope=\"module\" or \"session\"). The loop's time is benchmarks/check_loop.py's (goal 60 s).")


class LazyModule:
    """A module imported at its first attribute read: `torch = LazyModule("torch")` at a test module's top level
    leaves torch (~2 s of CPU) to the test process that runs one of its tests, not every worker that collects it."""

    def __init__(self, name: str):
        self._name = name

    def __getattr__(self, attr: str):
        # what collection asks of every object in a test module (`__test__`, fixture markers, `pytestmark`) is not
        # the module's API: answered without importing it
        if attr.startswith("_") or attr == "pytestmark":
            raise AttributeError(attr)
        import importlib

        return getattr(importlib.import_module(self._name), attr)


def room_module(path: str):
    """The test module at `path` (relative to tests/, e.g. "analysis/forwards/test_ranks.py"), for a test of another
    room that uses its helpers. The rooms are folders, not packages (no `__init__.py`: pytest imports each test module
    under its basename, with its own folder on sys.path), so a module of the same folder is imported by its name and
    one of another folder through here: by its path, under the same name pytest gives it, whichever test runs first."""
    name = Path(path).stem
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, TESTS / path)
        assert spec is not None and spec.loader is not None, path
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


_PARSED: dict[tuple[str, int, int], ast.Module] = {}


def parsed(path: str | Path) -> ast.Module:
    """`ast.parse` of a source file, once per test process while the file is unchanged (its path, size and mtime):
    the walkers of the package's source (layers, contract names, the one opener and writer, the front door's
    imports) parse the same ~120 modules, ~0.7 s of CPU a walk. The tree is shared: read it, never change it."""
    path = Path(path)
    st = path.stat()
    key = (str(path.resolve()), st.st_size, st.st_mtime_ns)
    if key not in _PARSED:
        _PARSED[key] = ast.parse(path.read_text(), str(path))
    return _PARSED[key]


_NODES: dict[int, tuple[ast.AST, ...]] = {}


def nodes(path: str | Path) -> tuple[ast.AST, ...]:
    """Every node of a source file's AST (`ast.walk(parsed(path))`), listed once per test process while the file is
    unchanged: the package walkers (layers, contract names, metrics, the one opener and writer, the front door) each
    walk the same ~165 modules, ~3 M nodes a walk. Read them, never change them."""
    tree = parsed(path)
    if id(tree) not in _NODES:
        _NODES[id(tree)] = tuple(ast.walk(tree))
    return _NODES[id(tree)]


def package_offenders(find) -> dict[str, list[str]]:
    """What `find(path, rel)` reports in each module of the package (rel: its path under nsys_cc/, posix), keyed by
    `rel`, for the modules where it reports anything: the one walk of the reliability walkers."""
    offenders = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        calls = find(path, rel)
        if calls:
            offenders[rel] = calls
    return offenders


def export_family(path: Path) -> str:
    """What a real export is an instance of: its folder under fixtures/ with run, batch-size and acceptance folders
    folded (fixtures/tune/a50/bs4/run-2 → tune), or a public trace's repository (owner__repo__name → owner__repo)."""
    path = Path(path)
    if path.is_relative_to(FIXTURES):
        parts = [p for p in path.parent.relative_to(FIXTURES).parts if not re.fullmatch(r"run-\d+|bs\d+|a\d+", p)]
        return "fixtures/" + "/".join(parts)
    return "public/" + "__".join(path.name.split("__")[:2])


def one_per_family(paths, families: tuple[str, ...] | None = None) -> list:
    """pytest parameters for `paths` (real exports), ids their file names: the smallest of each fixture
    `export_family` and the smallest public trace as they are, every other one marked `slow`. A test over every
    export here spends most of its time on near-copies (16 runs of one tune grid, seven batch-4 runs) and large
    public traces; the edit-test loop reads one of each kind, `make test` reads them all. `families`: only the
    smallest export of these families (and "public") in the loop, for a test whose code path is the same on the
    other families' exports (the same plugin's ranges in another fixture folder)."""
    paths = [Path(p) for p in paths]
    first: dict[str, Path] = {}
    for p in sorted(paths, key=lambda p: (p.stat().st_size, str(p))):
        # the public traces (real GPU exports of other projects, up to tens of MB) count as one family here: the
        # smallest of them is the loop's real GPU export, the rest were a third of these tests' time in `make check`
        family = export_family(p)
        family = "public" if family.startswith("public/") else family
        if families is None or family in families:
            first.setdefault(family, p)
    if families is not None:
        missing = set(families) - set(first) - {"public"}  # the public traces live outside the repository
        assert not missing, f"no export of {missing} among the paths"
    quick = set(first.values())
    return [pytest.param(p, id=p.name, marks=() if p in quick else pytest.mark.slow) for p in paths]


def sha256_tree(path: str | Path) -> dict[str, str]:
    """sha256 of a file, or of every file under a directory, keyed by path relative to `path`. The `-o` lock
    (`files.folder.LOCK_NAME`) counts by its presence only: it holds the pid of its latest writer."""
    root = Path(path)
    files = [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.is_file())
    return {str(f.relative_to(root)) if f != root else f.name:
            "the -o lock" if f.name == ".nsys_cc.lock" else hashlib.sha256(f.read_bytes()).hexdigest()
            for f in files}


@contextlib.contextmanager
def unchanged(*paths: str | Path):
    """Assert that every file under `paths` has the same bytes (and no file appeared or vanished) afterwards."""
    before = {str(p): sha256_tree(p) for p in paths}
    yield
    after = {str(p): sha256_tree(p) for p in paths}
    assert after == before, "input files were modified"


def processes_mentioning(marker: str | Path) -> list[str]:
    """Command lines of live processes whose arguments mention `marker` (e.g. an output directory): what a killed or
    interrupted run must not leave behind."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            args = cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if str(marker) in args:
            found.append(args)
    return found


def union_length(intervals: list[tuple[int, int]]) -> int:
    """Length of the union of (start, end) intervals, by a plain sweep: the reference the GPU busy time is checked
    against (the library computes it vectorised)."""
    total, reach = 0, None
    for s, e in sorted(intervals):
        if reach is None or s > reach:
            total += e - s
            reach = e
        elif e > reach:
            total += e - reach
            reach = e
    return total


@contextlib.contextmanager
def bounded(seconds: int):
    """Fail instead of hanging when the code under test waits forever (a FIFO nobody writes, a stuck export)."""
    def hung(signum, frame):
        raise TimeoutError(f"still waiting after {seconds} s: a wait without a bound")

    previous = signal.signal(signal.SIGALRM, hung)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def raw_sql(path: str | Path, sql: str, params: tuple = ()) -> list[tuple]:
    """Rows of `sql` on the SQLite file at `path`, opened read-only with the stdlib only."""
    uri = f"file:{urllib.parse.quote(str(Path(path).resolve()))}?mode=ro&immutable=1"
    con = sqlite3.connect(uri, uri=True)
    try:
        return con.execute(sql, params).fetchall()
    finally:
        con.close()


def planned(target: str, drafts, out, options=None, *, nsys: str = "/opt/nsys/bin/nsys", gpu: bool = False, **fields):
    """The launches of one process per model (`nsys_cc.launch.plan.plan`) of the request these arguments make."""
    from nsys_cc.launch import plan
    from nsys_cc.request import ProfileRequest

    return plan.plan(ProfileRequest.of(target, drafts, out, options, **fields), binary=nsys, gpu=gpu)


def interleaved_runs(monkeypatch, engines, out, **fields):
    """The interleaved runs of `engines` into `out` (`launch.orchestrator.run`, `launch.interleaved.Interleaved`)."""
    from nsys_cc.launch import interleaved, orchestrator, process
    from nsys_cc.request import ProfileRequest

    monkeypatch.setattr(process, "preflight", lambda recorder, binary: [])
    request = ProfileRequest(engines[0].model.spec, [e.model.spec for e in engines[1:]], out,
                             **{"repeat": 1, "timeout": 0, **fields})
    return orchestrator.run(interleaved.Interleaved(request, list(engines), gpu=False, binary="nsys"))


@contextlib.contextmanager
def lock_held(folder: Path):
    """Another process holding `folder`'s writer lock (`nsys_cc.files.folder.Folder.lock`) while the block runs; it is
    killed at the end (SIGKILL: the lock dies with it). Yields the holder's Popen (its pid is the one named)."""
    holder = subprocess.Popen([sys.executable, "-c", (
        "import time; from nsys_cc.files.folder import Folder\n"
        f"with Folder({str(folder)!r}).lock():\n"
        "    print('held', flush=True); time.sleep(120)")], stdout=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)})
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        yield holder
    finally:
        holder.kill()
        holder.wait()


def scenario_result(code: str, timeout: float = 600) -> dict:
    """Run `code` in a fresh Python process (a vLLM or torch scenario that must not touch the test process) and return
    the JSON it printed on its line starting `RESULT `."""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, done.stderr[-3000:]
    line = next(ln for ln in done.stdout.splitlines() if ln.startswith("RESULT "))
    return json.loads(line.removeprefix("RESULT "))


def slow_column(con: sqlite3.Connection, column: str = "end", chars: int = 6_000_000) -> None:
    """NVTX_EVENTS.`column` turned into a generated column that builds and scans a string of `chars` characters per
    row (~0.3 s a row at 6 M), its length depending on the row so that SQLite cannot evaluate it once; its values
    unchanged. The caller commits."""
    con.execute(f'ALTER TABLE NVTX_EVENTS RENAME COLUMN "{column}" TO _raw')
    con.execute(f'ALTER TABLE NVTX_EVENTS ADD COLUMN "{column}" INTEGER GENERATED ALWAYS AS '
                f"(_raw + 0 * instr(printf('%.*c', {chars} + coalesce(_raw, 0) % 2, 'x'), 'y')) VIRTUAL")


def named_ranges(path: str | Path, name: str) -> list[tuple[int, int, int | None]]:
    """(start, end, int64 payload) of every NVTX range called `name` (inline text or a StringIds id), by start."""
    return raw_sql(path, "SELECT e.start, e.\"end\", e.int64Value FROM NVTX_EVENTS e LEFT JOIN StringIds s "
                         "ON s.id = e.textId WHERE e.eventType = 59 AND coalesce(e.text, s.value) = ? ORDER BY e.start",
                   (name,))


def decode_tokens_ms(sqlite: str | Path, label: str, batch: int, *, token: bool = True) -> np.ndarray:
    """The oracle of an interleaved run's decode tokens, by raw SQL: ms of each forward of `batch` tokens (its payload)
    that starts inside engine `label`'s windows and outside every warm-up range; `token`: plus the `nsys_cc:logits`
    and `nsys_cc:sample` ranges between its end and the next forward's start (exactly those two: one thread)."""
    windows = named_ranges(sqlite, f"nsys_cc:engine {label}")
    warm = named_ranges(sqlite, "nsys_cc:warmup")
    forwards = named_ranges(sqlite, "model_executable()")
    parts = named_ranges(sqlite, "nsys_cc:logits") + named_ranges(sqlite, "nsys_cc:sample")
    out = []
    for i, (start, end, payload) in enumerate(forwards):
        if payload != batch or not any(s <= start <= e for s, e, _ in windows):
            continue
        if any(s <= start <= e for s, e, _ in warm):
            continue
        until = forwards[i + 1][0] if i + 1 < len(forwards) else math.inf
        mine = [e - s for s, e, _ in parts if end <= s < until]
        assert len(mine) == 2, (label, start, mine)  # its logits and its sampling
        out.append((end - start + (sum(mine) if token else 0)) / 1e6)
    return np.array(out)


@pytest.fixture(autouse=True)
def _environment_restored():
    """Every test leaves os.environ as it found it. Library code may set variables for the processes it starts (the
    vLLM plugin turns on VLLM_NVTX_SCOPES_FOR_PROFILING when it meets a runner it does not know); a test that makes
    it do so must not change what a later test's vLLM subprocess records."""
    saved = dict(os.environ)
    yield
    if os.environ != saved:
        os.environ.clear()
        os.environ.update(saved)


@pytest.fixture
def events(monkeypatch):
    """The vLLM plugin's NVTX calls recorded instead of made: pushes as (name, payload), pops as "pop"; fresh
    per-thread state and iteration count for each test (no vLLM, no nsys)."""
    from nsys_cc.vllm import nvtx_backend
    from nsys_cc.vllm.hooks import ranges, steps

    log: list = []
    monkeypatch.setattr(ranges, "backend", nvtx_backend.Backend(
        "record", True, lambda name, payload: log.append((name, payload)), lambda: log.append("pop")))
    monkeypatch.setattr(ranges, "state", ranges.State())
    monkeypatch.setattr(steps, "generate_calls", 0)
    return log


@pytest.fixture(scope="session")
def nsys_bin() -> str:
    nsys = find_nsys()
    if nsys is None:
        if REQUIRE_NSYS:
            pytest.fail("nsys is not installed but NSYS_CC_REQUIRE_NSYS is set (`make test` installs it)")
        pytest.skip("nsys is not installed: run `make nsys`")
    return nsys


@pytest.fixture(scope="session")
def vllm_module():
    """The installed vLLM (its CPU build here), imported: a hard requirement of the tests that ask for it."""
    import vllm

    return vllm


@pytest.fixture(scope="session")
def fixtures_dir() -> Path:
    return FIXTURES


@pytest.fixture(scope="session")
def nvtx_fixture() -> Path:
    path = FIXTURES / "nvtx" / "nvtx_cases.sqlite"
    assert path.is_file(), "fixtures/nvtx/nvtx_cases.sqlite is missing: run `make fixtures`"
    return path


@pytest.fixture(scope="session")
def public_dir() -> Path:
    if not PUBLIC.is_dir():
        pytest.skip(f"public traces not found at {PUBLIC} (they live outside the repository)")
    return PUBLIC


@pytest.fixture
def no_figures(request, monkeypatch):
    """Reports and sweep tables written without their PNGs, for the tests that check what a run, a sweep or an
    analysis wrote (its tables, report.json, the runs' status), not its figures: drawing a small report's nine
    figures, or a sweep's two after each cell, is most of such a test's time (~1 s a figure on 2 cores). A test that
    looks at the figures in a module that uses this marks itself `figures`; they are drawn and checked where they are
    the subject (tests/report/test_result_plots.py, the tests that look in plots/). Production code is unchanged."""
    if request.node.get_closest_marker("figures"):
        return
    from nsys_cc.report import report_files, sweep_files

    monkeypatch.setattr(report_files, "iter_figures", lambda result: iter(()))
    monkeypatch.setattr(sweep_files, "sweep_figures", lambda table: iter(()))


@pytest.fixture
def outside(tmp_path):
    """A folder of the user's own outside `-o` (what a link planted in `-o` points at): `precious.txt`."""
    d = tmp_path / "outside"
    d.mkdir()
    (d / "precious.txt").write_text("the user's notes\n")
    return d


@pytest.fixture()
def cache_dir(tmp_path, monkeypatch) -> Path:
    """An empty export cache for this test (NSYS_CC_CACHE points at it)."""
    path = tmp_path / "cache"
    monkeypatch.setenv("NSYS_CC_CACHE", str(path))
    return path


def said(stderr: str) -> list[str]:
    """What a verb said on stderr, its progress lines (`[nsys-cc] …`) aside: a read that takes over two seconds on a
    loaded machine reports its time, which is not what a test of the error line checks."""
    return [ln for ln in stderr.strip().splitlines() if not ln.startswith("[nsys-cc] ")]


def one_error_line(done: subprocess.CompletedProcess[str], *needles: str) -> str:
    """The one line a verb refusing its input says (`nsys-cc: error: …`, exit status 2), checked to hold every one of
    `needles`."""
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2, (done.returncode, done.stderr)
    assert len(lines) == 1 and lines[0].startswith("nsys-cc: error: "), done.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


def cli_in_process(*args: str, stdout=None) -> subprocess.CompletedProcess[str]:
    """`nsys-cc ARGS` run in this test process, as a finished process would report it: the exit status (`main`'s
    SystemExit), its stdout and stderr. For the cases that check what the CLI says (one error line, exit 2, an
    escaped file name): a real process costs ~0.7 s of CPU for its interpreter and imports each, and the code path
    that writes the line is the same. An exception `main` lets through fails the test here, as a traceback would
    in a process. The behaviours only a process shows (start-up, signals, a closed pipe, real file descriptors,
    the console script) keep their real-process tests. `stdout`: a text file to write the output to instead."""
    import io
    from contextlib import redirect_stderr, redirect_stdout

    from nsys_cc.cli import main

    # text streams over bytes, as a process's are (a verb that writes CSV writes to sys.stdout.buffer)
    out = io.TextIOWrapper(io.BytesIO(), encoding="utf-8", write_through=True)
    err = io.TextIOWrapper(io.BytesIO(), encoding="utf-8", errors="backslashreplace", write_through=True)
    code: int | str | None = 0
    with redirect_stdout(stdout if stdout is not None else out), redirect_stderr(err):
        try:
            main(list(args))
        except SystemExit as exc:
            code = exc.code
    if code is None:
        code = 0
    elif not isinstance(code, int):  # sys.exit("message"): printed to stderr, status 1, as the interpreter does
        err.write(f"{code}\n")
        code = 1
    text = [s.buffer.getvalue().decode("utf-8", "replace") for s in (out, err)]  # type: ignore[attr-defined]
    return subprocess.CompletedProcess(["nsys-cc", *args], code, *text)


def run_nsys_profile(cmd: list[str], **kwargs) -> subprocess.CompletedProcess[str]:
    """`subprocess.run` of an `nsys profile` command, retried as the launcher retries it when nsys 2022.4 fails to
    start because another nsys session started at the same moment (`process.retry_nsys_start`)."""
    from nsys_cc.launch.process import nsys_start_failure, retry_nsys_start

    return retry_nsys_start(
        lambda: subprocess.run(cmd, capture_output=True, text=True, **kwargs),
        lambda done: nsys_start_failure(done.returncode, done.stdout + done.stderr) is not None,
    )


@pytest.fixture
def counted(monkeypatch):
    """(opens, reads): per real path, how many times a trace was opened (at the reader's constructor) and its NVTX
    ranges were read (at `nsys_cc.trace.nvtx.read_ranges`, the one function that runs the NVTX query)."""
    from collections import Counter

    from nsys_cc.trace import nvtx
    from nsys_cc.trace.reader import ExportTrace

    opens: Counter = Counter()
    reads: Counter = Counter()
    init, read = ExportTrace.__init__, nvtx.read_ranges

    def counting_init(self, path, sqlite_path):
        opens[os.path.realpath(path)] += 1
        init(self, path, sqlite_path)

    def counting_read(trace, *args, **kwargs):
        reads[os.path.realpath(trace.path)] += 1
        return read(trace, *args, **kwargs)

    monkeypatch.setattr(ExportTrace, "__init__", counting_init)
    monkeypatch.setattr(nvtx, "read_ranges", counting_read)
    return opens, reads
