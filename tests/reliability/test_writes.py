"""Data safety: no file is ever lost, nothing is written outside `-o`.

Each case plants a hostile shape (a link out of `-o`, a user's files where nsys-cc writes, a cache
folder someone else may write in, two writers at once) and hashes every file outside `-o` (the `outside` folder: the
links' targets, the user's own files) before and after. The last test walks the package for write/remove calls that
do not go through the one writer (`nsys_cc.files`: `Folder`, `atomic.write_*`, `publishing.publish`) or the export
cache's ledger.
"""

from __future__ import annotations

import ast
import json
import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import FIXTURES, REPO, lock_held, nodes, package_offenders, sha256_tree, unchanged
from nsys_cc.errors import InputError
from nsys_cc.files import users
from nsys_cc.trace import export as export_mod

VLLM = FIXTURES / "vllm"
TARGET = VLLM / "tiny-llama-target.sqlite"
DRAFT = VLLM / "tiny-llama-draft-s.sqlite"
REPORT = VLLM / "tiny-llama-target.nsys-rep"
PACKAGE = REPO / "nsys_cc"


@pytest.fixture
def outside(tmp_path):
    """A folder of the user's own files outside `-o` (what links planted in `-o` point at)."""
    d = tmp_path / "outside"
    d.mkdir()
    (d / "precious.txt").write_text("the user's notes\n")
    (d / "trace.sqlite").write_bytes(TARGET.read_bytes())
    (d / "x.bench.json").write_text('{"mine": 1}\n')
    return d


# -- the export cache: private, and it cleans only what it recorded ---------------------------------------------------
def test_C03_stale_cleanup_removes_only_temporaries_the_cache_recorded(tmp_path):
    """NSYS_CC_CACHE names a folder holding the user's traces: hidden `*-*.sqlite` files older than a day that the
    cache did not start are kept; one its ledger records is removed."""
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o700)
    users = [cache / ".run-1.sqlite", cache / ".my-trace.sqlite", cache / ".notes-old.sqlite"]
    for p in users:
        p.write_bytes(TARGET.read_bytes()[:4096])
    ours = cache / ".0123456789abcdef-xyz.sqlite"
    ours.write_bytes(b"half an export")
    export_mod._record_temporary(cache, ours.name, add=True)
    old = time.time() - 3 * 24 * 3600
    for p in [*users, ours]:
        os.utime(p, (old, old))
    with unchanged(*users):
        export_mod._remove_stale_temporaries(cache)
    assert not ours.exists() and all(p.is_file() for p in users)
    assert export_mod._ledger(cache) == set()


def test_C01_the_default_cache_folder_is_made_private(tmp_path, monkeypatch):
    monkeypatch.delenv("NSYS_CC_CACHE", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    folder = export_mod._writable_dir(export_mod.default_cache_dir())
    assert folder == tmp_path / "home" / ".cache" / "nsys_cc" / "exports"
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700


def _planted_cache(tmp_path: Path, mode: int) -> Path:
    """A cache folder holding an 'export' of REPORT that is really another trace, with a record that matches."""
    cache = tmp_path / "cache"
    cache.mkdir()
    digest = export_mod.content_hash(REPORT)
    entry = cache / f"{digest}.sqlite"
    entry.write_bytes(DRAFT.read_bytes())
    (cache / f"{digest}.json").write_text(json.dumps(export_mod._record(REPORT, digest, entry)))
    cache.chmod(mode)
    return cache


def test_C02_a_cache_folder_anyone_may_write_is_refused(tmp_path):
    cache = _planted_cache(tmp_path, 0o777)
    with unchanged(cache), pytest.raises(InputError, match=r"is not yours alone: others may write in it \(mode 0777\)"):
        export_mod.export_report(REPORT, cache_dir=cache)


def test_C02_a_cache_folder_of_another_user_is_refused_and_its_entries_never_trusted(tmp_path, monkeypatch):
    cache = _planted_cache(tmp_path, 0o700)
    digest = export_mod.content_hash(REPORT)
    assert export_mod._valid(cache / f"{digest}.sqlite", REPORT, digest)  # as yours, the planted record matches
    monkeypatch.setattr(users, "my_uid", lambda: os.geteuid() + 4242)  # now the folder is someone else's
    assert not export_mod._valid(cache / f"{digest}.sqlite", REPORT, digest)
    with unchanged(cache), pytest.raises(InputError, match=r"belongs to user id \d+, not to you"):
        export_mod.export_report(REPORT, cache_dir=cache)


# -- profile: run folders, attempts, logs, status ----------------------------------------------------------------------
def _interleaved_run(out: Path):
    from nsys_cc.launch import interleaved_run as repeat
    from nsys_cc.launch.commands import ModelCommands, ModelFiles

    py = [sys.executable, "-c"]
    attempt = ModelCommands({}, [*py, "raise SystemExit('no benchmark here')"], [*py, "pass"],
                            ModelFiles(out / "run-1.attempt", "trace"))
    final = ModelCommands({}, attempt.profile, attempt.export, ModelFiles(out / "run-1", "trace"))
    return repeat.Run(1, out / "run-1", final), attempt


def test_P02_a_users_run_folder_without_done_json_is_refused_never_deleted(tmp_path, outside):
    from nsys_cc.launch import interleaved_run as repeat

    out = tmp_path / "O"
    (out / "run-1").mkdir(parents=True)
    (out / "run-1" / "thesis.tex").write_text("two years of work\n")
    (out / "run-1" / "trace.sqlite").write_bytes(TARGET.read_bytes())
    run, attempt = _interleaved_run(out)
    with unchanged(out / "run-1", outside):
        repeat.execute(run, [], attempt, gpu=False, timeout=30)
    assert run.status == "failed" and "holds files nsys-cc did not write (no done.json)" in run.reason


def test_P04_a_linked_attempt_folder_is_removed_itself_not_followed(tmp_path, outside):
    from nsys_cc.launch import interleaved_run as repeat

    out = tmp_path / "O"
    out.mkdir()
    (out / "run-1.attempt").symlink_to(outside, target_is_directory=True)
    run, attempt = _interleaved_run(out)
    with unchanged(outside):
        repeat.execute(run, [], attempt, gpu=False, timeout=30)  # no FileExistsError
    assert run.status == "failed" and "benchmark under nsys failed" in run.reason
    assert (out / "run-1.attempt").is_dir() and not (out / "run-1.attempt").is_symlink()


def _model_run(out: Path):
    from nsys_cc.launch.commands import ModelCommands, ModelFiles
    from nsys_cc.launch.models import resolve

    py = [sys.executable, "-c"]
    cmds = ModelCommands({}, [*py, "raise SystemExit('RuntimeError: engine core died')"], [*py, "pass"],
                         ModelFiles(out, "m"))
    from nsys_cc.launch.plan import ModelLaunch

    return ModelLaunch("target", resolve("tiny-llama-target"), cmds)


def test_P05_a_linked_attempts_folder_is_refused_its_files_kept(tmp_path, outside):
    from nsys_cc.launch import process
    from nsys_cc.launch.resume import ATTEMPTS_DIR

    out = tmp_path / "O"
    out.mkdir()
    (outside / "m.sqlite").write_bytes(DRAFT.read_bytes())
    (outside / "m.bench.json").write_text("{}\n")
    (out / ATTEMPTS_DIR).symlink_to(outside, target_is_directory=True)
    run = _model_run(out)
    with unchanged(outside):
        process.run_model(run, timeout=30)
    assert run.status == "failed" and "is a link or a file where nsys-cc needs a folder" in run.reason


def test_P12_a_linked_log_is_replaced_its_target_untouched(tmp_path, outside):
    from nsys_cc.launch import process

    out = tmp_path / "O"
    out.mkdir()
    (out / "m.log").symlink_to(outside / "precious.txt")
    run = _model_run(out)
    with unchanged(outside):
        process.run_model(run, timeout=30)
    assert run.status == "failed"
    assert not (out / "m.log").is_symlink() and "engine core died" in (out / "m.log").read_text()


def test_SWP1_a_linked_attempts_tmp_is_never_written_through(tmp_path, outside):
    from nsys_cc.formats import attempts_json

    d = tmp_path / "O" / "cell-1"
    d.mkdir(parents=True)
    (d / f"{attempts_json.NAME}.tmp").symlink_to(outside / "precious.txt")
    (d / attempts_json.NAME).symlink_to(outside / "x.bench.json")
    with unchanged(outside):
        attempts_json.write(d, [])
    assert json.loads((d / attempts_json.NAME).read_text()) == {"starts": []}
    assert not (d / attempts_json.NAME).is_symlink()


# -- reports: one writer at a time, nothing proven by a name alone -----------------------------------------------------
@pytest.fixture(scope="module")
def small_result():
    from nsys_cc import cost_coefficient

    return cost_coefficient(TARGET, [DRAFT])


@pytest.mark.slow  # 4 s or more on 2 cores: in `make test`, not the edit-test loop (`make check` ≤ 60 s)
def test_O09_a_second_writer_of_the_same_out_dir_refuses_naming_the_first(tmp_path, small_result, monkeypatch):
    from nsys_cc.report import write_report

    out = tmp_path / "X"
    write_report(small_result, out)
    with lock_held(out) as holder:
        before = sha256_tree(out)
        monkeypatch.setenv("NSYS_CC_LOCK_WAIT", "0")
        with pytest.raises(InputError, match=rf"another nsys-cc \(pid {holder.pid}\) is writing {out}"):
            write_report(small_result, out)
        assert sha256_tree(out) == before
    write_report(small_result, out)  # the lock dies with its holder (SIGKILL included)


@pytest.mark.slow
def test_O07_a_hand_edited_file_an_old_names_only_manifest_lists_is_refused(tmp_path, small_result, no_figures):
    from nsys_cc.report import write_report
    from nsys_cc.report.report_files import MANIFEST

    out = tmp_path / "X"
    out.mkdir()
    (out / "report.md").write_text("# my own notes on this run\n")
    (out / MANIFEST).write_text(json.dumps({"format": "nsys_cc.report_manifest", "version": 1,
                                            "files": ["report.md", "summary.csv"]}))
    with unchanged(out / "report.md"), pytest.raises(InputError, match=r"report.md is in the way"):
        write_report(small_result, out)


# -- the one writer: nothing under the package writes or removes around it --------------------------------------------
OS_ONLY = {"remove", "makedirs", "removedirs", "link"}
WRITE_CALLS = {"unlink", "rmtree", "rename", "replace", "mkdir", "makedirs", "rmdir", "remove", "write_text",
               "write_bytes", "symlink_to", "removedirs", "link"}
# Calls that write the file their first argument names (a table, a figure): through the writer only when that is a
# path `publishing.Stage.file` gave (`tune` once wrote forecast.csv and tune.png with these, through a link).
FILE_WRITERS = {"to_csv", "to_parquet", "to_excel", "to_pickle", "savefig", "imsave", "plot_tune"}
# module → the calls it may make itself, and why (short, explicit)
ALLOWED = {
    "files/atomic.py": "the one writer itself: a file written whole",
    "files/folder.py": "the one writer itself: every write, folder, removal and rename under -o",
    "files/publishing.py": "the one writer itself: a report's generations, put in place by one rename",
    "files/proof.py": "the one writer itself: removes only what a record proves nsys-cc wrote, never through a link",
    "trace/export.py": "the export cache: writes only inside its own checked private folder, under its lock",
    "report/figure_files.py": "make_plots (a library call): writes only the folder its caller names",
    "report/sweep_plots.py": "make_sweep_plots (a library call): writes only the folder its caller names",
    "report/speedup_plots.py": "a figure saved to the path its caller names (a library call)",
    "report/tune_plots.py": "plot_tune saves to the path its caller names (workflows/tune.py write: a staged file)",
    "analysis/profile_dir/acceptance.py": "writes only the file its caller names (a library call: the user's own path)",
    "vllm/interleave.py": "runs inside the benchmark process, writing the attempt files it was given",
    "formats/interleaved_json.py": "the driver's record, written inside the benchmark process (its attempt folder)",
    "formats/bench_json.py": "the driver's latencies, written inside the benchmark process (its attempt folder)",
    "launch/pair.py": "the known-α pair's weights, in the model cache (not -o)",
    "sweep/cluster.py": "a cluster job's spec file in the cell folder (made by Folder.mkdir in the cell)",
    "sweep/cell.py": "the cell folder itself (spec.dir.mkdir) before its files go through Folder",
    "sweep/run.py": "the sweep's -o folder itself (out.mkdir)",
    "launch/process.py": "the -o folder itself (prepare: out.mkdir), before anything in it is written",
}


def _staged_and_buffers(path: Path) -> tuple[set[str], set[str]]:
    """(names bound by `with stage.file(…) as name`: paths in a `publish` staging folder; names bound to an
    in-memory buffer, `io.StringIO()` / `io.BytesIO()`)."""
    staged, buffers = set(), set()
    for node in nodes(path):
        if isinstance(node, (ast.With, ast.AsyncWith)):
            for item in node.items:
                call, var = item.context_expr, item.optional_vars
                if isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr == "file" \
                        and isinstance(var, ast.Name):
                    staged.add(var.id)
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
            f = node.value.func
            if (f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", "")) in ("StringIO", "BytesIO"):
                buffers.update(t.id for t in node.targets if isinstance(t, ast.Name))
    return staged, buffers


def _write_calls(path: Path) -> list[str]:
    staged, buffers = _staged_and_buffers(path)
    found = []
    for node in nodes(path):
        if not isinstance(node, ast.Call):
            continue
        f = node.func
        name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
        if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id in ("atomic", "folder"):
            continue  # through the one writer
        if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Call):
            inner = f.value.func
            if (inner.attr if isinstance(inner, ast.Attribute) else getattr(inner, "id", "")) == "Folder":
                continue  # Folder(x).write_text(...), files.folder.Folder(x).write_text(...)
        if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id in staged:
            continue  # path.write_text(…) of a staged path: into the staging folder of `publishing.publish`
        if name in FILE_WRITERS:
            target = node.args[0] if node.args else next((k.value for k in node.keywords
                                                          if k.arg in ("path", "path_or_buf", "fname")), None)
            if name == "plot_tune":
                target = node.args[1] if len(node.args) > 1 else None
            if isinstance(target, ast.Name) and target.id in staged | buffers:
                continue
            if target is not None:
                found.append(f"{name} at line {node.lineno}")
            continue
        via_os = isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id in ("os", "shutil")
        if name in OS_ONLY and not via_os:
            continue  # list.remove, DataFrame.rename(columns=…), str.replace(a, b): not files
        if name in ("rename", "replace") and not via_os and (len(node.args) != 1 or node.keywords
                                                             or isinstance(node.args[0], ast.Constant)):
            continue  # Path.rename(target) / Path.replace(target) take one path; Series.rename("x") is no file
        if name in WRITE_CALLS:
            found.append(f"{name} at line {node.lineno}")
        if name == "open" and len(node.args) > 1 and isinstance(node.args[1], ast.Constant) \
                and any(c in str(node.args[1].value) for c in "wax+"):
            found.append(f"open(…, {node.args[1].value!r}) at line {node.lineno}")
    return found


@pytest.mark.slow
def test_every_write_under_the_package_goes_through_the_one_writer():
    offenders = package_offenders(lambda path, rel: [] if rel in ALLOWED else _write_calls(path))
    assert offenders == {}, ("writes/removals outside Folder (route them through it, or add the module to "
                             f"ALLOWED with the reason): {offenders}")


def test_the_walker_finds_a_write_around_the_writer(tmp_path):
    """The walker can fail: a module that unlinks or opens for writing by itself is found."""
    bad = tmp_path / "bad.py"
    bad.write_text("import os, shutil\nfrom pathlib import Path\n"
                   "def f(p):\n    Path(p).unlink()\n    shutil.rmtree(p)\n    open(p, 'w').write('x')\n"
                   "    os.replace(p, p)\n    atomic.write_text(p, 'fine')\n    Folder(p).write_text('fine')\n")
    assert sorted(c.split(" at")[0] for c in _write_calls(bad)) == ["open(…, 'w')", "replace", "rmtree", "unlink"]


def test_the_walker_finds_tables_and_figures_written_around_the_writer(tmp_path):
    """`tune` once wrote forecast.csv (`DataFrame.to_csv`) and tune.png (`savefig`) by path, around the
    writer, and the walker did not look at those calls; a staged path or an in-memory buffer is no offence."""
    bad = tmp_path / "bad.py"
    bad.write_text("import io\n"
                   "def f(df, fig, out, stage):\n"
                   "    df.to_csv(out / 'forecast.csv', index=False)\n    fig.savefig(out / 'tune.png')\n"
                   "    plot_tune(r, out / 'tune.png')\n"
                   "    with stage.file('checks.csv') as path:\n        df.to_csv(path)\n"
                   "        path.write_text('x')\n"
                   "    buf = io.StringIO()\n    df.to_csv(buf)\n    return df.to_csv(index=False)\n")
    assert sorted(c.split(" at")[0] for c in _write_calls(bad)) == ["plot_tune", "savefig", "to_csv"]


def test_tune_writes_its_files_through_the_writer():
    """The tune workflow is no exception to the one writer (it is not in ALLOWED, and the walk finds nothing there)."""
    assert "workflows/tune.py" not in ALLOWED and _write_calls(PACKAGE / "workflows" / "tune.py") == []


def test_P15_a_failing_forced_rerun_keeps_the_completed_run_reachable(tmp_path):
    """A completed run-1/ then a `--force` rerun that fails: run-1/ is kept as it was, status.json says it is
    complete (with the rerun's failure as its reason), and the analysis still finds it."""
    import shutil

    from nsys_cc.analysis.profile_dir.outputs import read_output
    from nsys_cc.launch import interleaved as repeat, interleaved_run, orchestrator
    from nsys_cc.request import ProfileRequest

    out = tmp_path / "O"
    shutil.copytree(FIXTURES / "interleaved" / "run-1", out / "run-1")
    run, attempt = _interleaved_run(out)
    done = out / "run-1" / "done.json"
    marker = json.loads(done.read_text())
    done.write_text(json.dumps({**marker, "commands": run.commands.shell()}))
    strategy = repeat.Interleaved(ProfileRequest("t", ["d"], out), [], gpu=False, dry=True)
    strategy.outcome.runs.append(run)
    with unchanged(out / "run-1"):
        interleaved_run.execute(run, [], attempt, gpu=False, timeout=30)  # the forced rerun: its benchmark fails
        orchestrator.write_status(out, strategy)
    assert run.status == "resumed" and run.reason.startswith("the rerun failed (benchmark under nsys failed")
    assert [r.number for r in read_output(out).runs] == [1]


def test_P12_a_users_status_json_is_refused_never_replaced(tmp_path, outside):
    from nsys_cc.launch import orchestrator, process, separate
    from nsys_cc.request import ProfileRequest

    out = tmp_path / "O"
    out.mkdir()
    strategy = separate.Separate(ProfileRequest("t", ["d"], out), gpu=False, dry=True, launches=[])
    (out / "status.json").write_text('{"my": "own status notes"}\n')
    with unchanged(out / "status.json", outside), pytest.raises(InputError, match=r"status.json is in the way"):
        process.prepare(out, [])
    with unchanged(out / "status.json"), pytest.raises(InputError, match=r"status.json is in the way"):
        orchestrator.write_status(out, strategy)
    (out / "status.json").unlink()
    (out / "status.json").symlink_to(outside / "precious.txt")
    with unchanged(outside):
        orchestrator.write_status(out, strategy)  # a link is replaced, its target untouched
    assert json.loads((out / "status.json").read_text())["models"] == [] and not (out / "status.json").is_symlink()
    orchestrator.write_status(out, strategy)  # a profile's own status file is replaced


# -- output that cannot be written: one line, never a traceback ------------------------------------------------------
@pytest.mark.slow
@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full on this system")
def test_X01_output_to_a_full_device_is_one_error_line_and_exit_2(tmp_path):
    with open("/dev/full", "w") as full:
        done = subprocess.run([sys.executable, "-c", "from nsys_cc.cli import main; main()", "analyze", str(TARGET),
                               str(DRAFT)],
                              stdout=full, stderr=subprocess.PIPE, text=True, timeout=300, cwd=tmp_path,
                              env={**os.environ, "PYTHONPATH": str(PACKAGE.parent)})
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr and lines[-1].startswith("nsys-cc: error: cannot write the output: ")
    assert [ln for ln in lines if ln.startswith("nsys-cc: error")] == [lines[-1]]


def test_O10_a_sigkill_between_the_run_renames_leaves_the_earlier_run_which_comes_back(tmp_path):
    """The state a SIGKILL between `execute`'s two renames leaves (the earlier run set aside, the new one not yet
    in place): the next call finds the completed run again, byte for byte; a set-aside copy beside a run in place
    is removed."""
    import shutil

    from nsys_cc.launch import interleaved_run as repeat

    out = tmp_path / "O"
    shutil.copytree(FIXTURES / "interleaved" / "run-1", out / "run-1.replaced")
    run, _ = _interleaved_run(out)
    done = out / "run-1.replaced" / "done.json"
    done.write_text(json.dumps({**json.loads(done.read_text()), "commands": run.commands.shell()}))
    before = sha256_tree(out / "run-1.replaced")
    assert repeat.is_complete(run)
    assert sha256_tree(out / "run-1") == before and not (out / "run-1.replaced").exists()
    shutil.copytree(out / "run-1", out / "run-1.replaced")
    assert repeat.is_complete(run) and not (out / "run-1.replaced").exists()
    assert sha256_tree(out / "run-1") == before


def test_a_completed_rerun_replaces_the_earlier_run_and_leaves_nothing_set_aside(tmp_path, monkeypatch):
    """The success path of the set-aside rename: run-1/ becomes the new run, no run-1.replaced/ stays."""
    import shutil

    from nsys_cc.launch import interleaved_run as repeat, process
    from nsys_cc.launch.models import resolve

    new = FIXTURES / "interleaved" / "run-2"

    def fake_profile(attempt, log_path, **kw):
        shutil.copy(new / "trace.sqlite", attempt.files.out_dir / "trace.sqlite")
        shutil.copy(new / "interleaved.json", attempt.files.out_dir / "interleaved.json")
        return None

    monkeypatch.setattr(process, "profile_and_export", fake_profile)
    out = tmp_path / "O"
    shutil.copytree(FIXTURES / "interleaved" / "run-1", out / "run-1")
    run, attempt = _interleaved_run(out)
    engines = [repeat.Engine("target", resolve("tiny-llama-target"), ()),
               repeat.Engine("draft", resolve("tiny-llama-draft-s"), ())]
    repeat.execute(run, engines, attempt, gpu=False, timeout=30)
    assert run.status == "done", run.reason
    assert sha256_tree(out / "run-1" / "trace.sqlite") == sha256_tree(new / "trace.sqlite")
    assert sorted(p.name for p in out.iterdir()) == ["run-1"]


def test_P15_separate_a_failing_forced_rerun_keeps_the_complete_trace_set(tmp_path):
    from nsys_cc.launch import process

    out = tmp_path / "O"
    out.mkdir()
    run = _model_run(out)
    f = run.files
    f.trace.write_bytes(TARGET.read_bytes())
    f.bench_json.write_text("{}\n")
    f.done.write_text(json.dumps({"commands": run.commands.shell()}))
    with unchanged(f.trace, f.bench_json, f.done):
        process.run_model(run, timeout=30)  # the forced rerun: its benchmark fails
    assert run.status == "resumed" and run.reason.startswith("the rerun failed (") and run.ok
