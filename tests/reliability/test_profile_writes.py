"""Round 5: what `profile` (every route: nsys and torch, interleaved and one process per model), `tune` and
`sweep` may write, replace and remove — only under `-o`, never through a link, and only files nsys-cc can prove it
wrote — each case a test that fails without its fix. Files outside `-o` and the user's own are hashed before and
after."""

from __future__ import annotations

import hashlib
import json

import pytest

from conftest import FIXTURES, cli_in_process, unchanged
from nsys_cc.errors import InputError

VLLM = FIXTURES / "vllm"
TARGET = VLLM / "tiny-llama-target.sqlite"
DRAFT = VLLM / "tiny-llama-draft-s.sqlite"
PAIR = ("--target", "tiny-llama-target", "--draft", "tiny-llama-draft-s", "--device", "cpu")


def _refused(done, *needles: str) -> str:
    lines = done.stderr.strip().splitlines()
    errors = [ln for ln in lines if ln.startswith("nsys-cc")]
    assert done.returncode == 2 and len(errors) == 1 and errors[0].startswith("nsys-cc: error: "), done.stderr
    for needle in needles:
        assert needle in errors[0], errors[0]
    return errors[0]


# -- -o through a link -------------------------------------------------------------------------------------------------
VERBS = {
    "profile": ("profile", *PAIR),
    "profile --separate-processes": ("profile", *PAIR, "--separate-processes"),
    "profile --profiler torch": ("profile", *PAIR, "--profiler", "torch", "--separate-processes"),
    "profile --dry-run": ("profile", *PAIR, "--dry-run"),
    "tune": ("tune", *PAIR),
    "tune SOURCE": ("tune", str(FIXTURES / "tune" / "a99")),
    "analyze": ("analyze", str(TARGET), str(DRAFT)),
    "sweep": ("sweep", *PAIR),
    "sweep --dry-run": ("sweep", *PAIR, "--dry-run"),
}


@pytest.mark.parametrize("verb", list(VERBS))
def test_an_output_folder_given_as_a_link_is_refused_by_every_verb(verb, tmp_path, monkeypatch):
    """`profile -o LINK` wrote the lock, status.json and its runs through the link, where `analyze` and `tune`
    refused the same link: now every verb refuses it, before anything is written."""
    from nsys_cc.launch import interleaved_run, process
    from nsys_cc.workflows import tune as workflow

    monkeypatch.setattr(process, "profile_and_export", lambda *a, **kw: pytest.fail("profiled"))
    monkeypatch.setattr(interleaved_run, "execute", lambda *a, **kw: pytest.fail("profiled"))
    monkeypatch.setattr(workflow, "_profile_round", lambda *a, **kw: pytest.fail("profiled"))
    real = tmp_path / "real"
    real.mkdir()
    link = tmp_path / "link"
    link.symlink_to(real, target_is_directory=True)
    with unchanged(real):
        _refused(cli_in_process(*VERBS[verb], "-o", str(link)), "is a symbolic link", str(real))
    assert list(real.iterdir()) == []


# -- the -o lock -------------------------------------------------------------------------------------------------------
def test_a_users_file_named_like_the_lock_is_never_written_over(tmp_path):
    """A user's `o/.nsys_cc.lock` was truncated to the pid of the writer."""
    from nsys_cc.files.folder import LOCK_NAME, Folder

    out = tmp_path / "o"
    out.mkdir()
    mine = out / LOCK_NAME
    mine.write_text("my notes on the lock I mean to take\n")
    with unchanged(mine), pytest.raises(InputError, match=r"is in the way: it is not nsys-cc's lock file"):
        with Folder(out).lock():
            pytest.fail("locked")
    _refused(cli_in_process("analyze", str(TARGET), str(DRAFT), "-o", str(out)), "not nsys-cc's lock file")
    for ours in ("", "12345\n", "7"):  # just made, or left by a writer: taken
        mine.write_text(ours)
        with Folder(out).lock():
            assert mine.read_text().strip().isdigit()


# -- one process per model: the per-model files are nsys-cc's own, never a user's --------------------------------------
@pytest.mark.parametrize("profiler, name", [("torch", "tiny-llama-target.pt.trace.json.gz"),
                                            ("torch", "tiny-llama-target.log"), ("nsys", "tiny-llama-target.sqlite"),
                                            ("nsys", "tiny-llama-draft-s.done.json"), ("torch", "report.md")])
def test_a_users_file_at_a_name_a_model_writes_is_refused_before_the_first_run(profiler, name, tmp_path,
                                                                               monkeypatch):
    """`profile --profiler torch --separate-processes -o o` overwrote the user's own
    `o/tiny-llama-target.pt.trace.json.gz` and `o/tiny-llama-target.log`, then refused the user's `report.md`
    saying "nothing was changed". Now every name a run writes is checked before the first run."""
    from nsys_cc.launch import process

    monkeypatch.setattr(process, "profile_and_export", lambda *a, **kw: pytest.fail("profiled"))
    monkeypatch.setattr(process, "preflight", lambda recorder, binary: [])
    monkeypatch.setattr("nsys_cc.trace.nsys.require_nsys", lambda: "/opt/nsys/bin/nsys")
    out = tmp_path / "o"
    out.mkdir()
    (out / name).write_text("two years of work\n")
    with unchanged(out / name):
        line = _refused(cli_in_process("profile", *PAIR, "--separate-processes", "--profiler", profiler, "-o",
                                       str(out)), name, "is in the way", "nothing was changed")
    assert sorted(p.name for p in out.iterdir()) == [name], line


def _model(out, profiler="nsys"):
    from conftest import planned

    return planned("tiny-llama-target", ["tiny-llama-draft-s"], out, nsys="nsys", profiler=profiler)[0]


def _completed(run, content=b"trace"):
    """The files a completed attempt of `run` leaves, committed as `run_model` commits them."""
    from nsys_cc.launch import resume

    attempt = resume.staged(run, resume.new_attempt(run)).files
    attempt.trace.write_bytes(TARGET.read_bytes() + content)
    attempt.recorded.write_bytes(content)
    attempt.bench_json.write_text("{}\n")
    resume.commit(run, attempt, {"commands": run.commands.shell(), "range": "model_executable()"})
    resume.discard(attempt)


def test_a_trace_set_is_proven_by_its_digests_and_an_edited_one_is_the_users(tmp_path):
    from nsys_cc.launch import resume

    out = tmp_path / "o"
    out.mkdir()
    run = _model(out)
    _completed(run)
    assert resume.in_the_way([run]) == [] and resume.is_complete(run)
    _completed(run, b"second")  # a rerun replaces its own files
    assert run.files.recorded.read_bytes() == b"second" and resume.in_the_way([run]) == []
    run.files.recorded.write_bytes(b"my edit")  # changed since: nsys-cc cannot prove it wrote it
    assert resume.in_the_way([run]) == [run.files.recorded]
    assert not (out / resume.ATTEMPTS_DIR).exists()


def test_a_kill_between_the_renames_of_a_commit_leaves_every_file_proven(tmp_path, monkeypatch):
    """The earlier marker was removed before the renames: a kill in between left files no record proved (a
    rerun would have had to refuse them). The marker written first records both contents and is incomplete."""
    from nsys_cc.files.folder import Folder
    from nsys_cc.launch import resume

    out = tmp_path / "o"
    out.mkdir()
    run = _model(out)
    _completed(run)
    real, calls = Folder.replace, []

    def killed_after_one(self, src, dst):
        if calls:
            raise SystemExit("killed")
        calls.append(dst)
        real(self, src, dst)

    monkeypatch.setattr(Folder, "replace", killed_after_one)
    with pytest.raises(SystemExit):
        _completed(run, b"second")
    monkeypatch.setattr(Folder, "replace", real)
    assert len(calls) == 1 and not resume.is_complete(run)  # profiled again, never a mix called complete
    assert resume.in_the_way([run]) == []  # the earlier and the new file at every name: both proven


def test_a_round_4_marker_proves_its_trace_set_by_name(tmp_path):
    import json

    from nsys_cc.launch import resume

    out = tmp_path / "o"
    out.mkdir()
    run = _model(out)
    run.files.trace.write_bytes(TARGET.read_bytes())
    run.files.done.write_text(json.dumps({"commands": run.commands.shell()}))
    (out / "tiny-llama-target.log").write_text("# nsys-cc profile: …\n")
    assert resume.in_the_way([run]) == []
    (out / "tiny-llama-target.log").write_text("my own log\n")
    assert resume.in_the_way([run]) == [out / "tiny-llama-target.log"]


# -- attempt folders ---------------------------------------------------------------------------------------------------
def test_a_users_file_in_an_attempt_folder_is_never_deleted(tmp_path, monkeypatch):
    """A user's `o/run-1.attempt/thesis.tex` was deleted by the next `profile` (every attempt folder was removed
    whole); the new attempt now gets a folder of its own, and the leftover loses only what an attempt writes."""
    from conftest import interleaved_runs
    from nsys_cc.launch import interleaved, interleaved_run
    from nsys_cc.launch.models import resolve

    out = tmp_path / "o"
    (out / "run-1.attempt").mkdir(parents=True)
    (out / "run-1.attempt" / "thesis.tex").write_text("two years of work\n")
    (out / "run-1.attempt" / "log").write_text("a killed attempt's log\n")
    used = []
    monkeypatch.setattr(interleaved_run, "execute",
                        lambda run, engines, attempt, **kw: (used.append(attempt.files.out_dir),
                                                             setattr(run, "status", "failed")))
    engines = [interleaved.Engine("target", resolve("tiny-llama-target"), ()),
               interleaved.Engine("draft", resolve("tiny-llama-draft-s"), ())]
    with unchanged(out / "run-1.attempt" / "thesis.tex"):
        interleaved_runs(monkeypatch, engines, out)
    assert sorted(p.name for p in (out / "run-1.attempt").iterdir()) == ["thesis.tex"]
    assert used and used[0].name.startswith("run-1.attempt.") and used[0].parent == out


def test_an_attempt_folder_whose_process_runs_is_left_alone(tmp_path):
    """A rerun right after a kill -9 reused `run-1.attempt/` while the killed call's benchmark still wrote into it;
    a folder whose marked process still runs is neither removed nor reused."""
    import subprocess
    import sys

    from nsys_cc.launch import attempts, interleaved_run

    out = tmp_path / "o"
    out.mkdir()
    orphan = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        folder = attempts.make(out, "run-1.attempt.1-ab", ["log"])
        mark = json.loads((folder / attempts.MARK).read_text())
        mark.update(pid=orphan.pid, start=attempts.process_start(orphan.pid))
        (folder / attempts.MARK).write_text(json.dumps(mark))
        (folder / "log").write_text("still being written\n")
        notes = interleaved_run.remove_killed_attempts(out)
        assert len(notes) == 1 and "is still running" in notes[0] and (folder / "log").exists()
        with pytest.raises(InputError, match="is still running"):
            attempts.make(out, folder.name, ["log"])
    finally:
        orphan.kill()
        orphan.wait()
    assert interleaved_run.remove_killed_attempts(out) == [] and not folder.exists()


# -- interleaved run folders -------------------------------------------------------------------------------------------
def _interleaved(out):
    import sys

    from nsys_cc.launch import interleaved_run as repeat
    from nsys_cc.launch.commands import ModelCommands, ModelFiles

    py = [sys.executable, "-c"]
    attempt = ModelCommands({}, [*py, "raise SystemExit('no benchmark here')"], [*py, "pass"],
                            ModelFiles(out / "run-1.attempt.1-ab", "trace"))
    final = ModelCommands({}, attempt.profile, attempt.export, ModelFiles(out / "run-1", "trace"))
    return repeat.Run(1, out / "run-1", final), attempt


def test_a_users_file_in_a_completed_run_folder_is_refused_not_deleted(tmp_path, monkeypatch):
    """A forced rerun set `run-1/` aside and removed it whole, with the user's file in it."""
    import shutil

    from nsys_cc.launch import interleaved_run as repeat, process
    from nsys_cc.launch.models import resolve

    new = FIXTURES / "interleaved" / "run-2"

    def fake_profile(attempt, log_path, **kw):
        shutil.copy(new / "trace.sqlite", attempt.files.out_dir / "trace.sqlite")
        shutil.copy(new / "interleaved.json", attempt.files.out_dir / "interleaved.json")
        return None

    monkeypatch.setattr(process, "profile_and_export", fake_profile)
    out = tmp_path / "o"
    shutil.copytree(FIXTURES / "interleaved" / "run-1", out / "run-1")
    engines = [repeat.Engine("target", resolve("tiny-llama-target"), ()),
               repeat.Engine("draft", resolve("tiny-llama-draft-s"), ())]
    run, attempt = _interleaved(out)
    repeat.execute(run, engines, attempt, gpu=False, timeout=30)  # the rerun: its done.json records the digests
    assert run.status == "done", run.reason
    recorded = json.loads((out / "run-1" / "done.json").read_text())["files"]
    assert recorded["trace.sqlite"] == hashlib.sha256((new / "trace.sqlite").read_bytes()).hexdigest()
    (out / "run-1" / "thesis.tex").write_text("two years of work\n")
    run, attempt = _interleaved(out)
    with unchanged(out / "run-1"):
        repeat.execute(run, engines, attempt, gpu=False, timeout=30)
    assert run.status == "resumed" and "holds files nsys-cc did not write (thesis.tex)" in run.reason
    (out / "run-1" / "thesis.tex").unlink()
    with open(out / "run-1" / "trace.sqlite", "ab") as fh:  # edited since nsys-cc wrote it
        fh.write(b"\0")
    run, attempt = _interleaved(out)
    with unchanged(out / "run-1"):
        repeat.execute(run, engines, attempt, gpu=False, timeout=30)
    assert run.status == "resumed" and "(trace.sqlite)" in run.reason


def test_a_set_aside_run_with_a_users_file_is_left_not_removed(tmp_path):
    import shutil

    from nsys_cc.launch import interleaved_run as repeat

    out = tmp_path / "o"
    shutil.copytree(FIXTURES / "interleaved" / "run-1", out / "run-1")
    shutil.copytree(FIXTURES / "interleaved" / "run-1", out / "run-1.replaced")
    (out / "run-1.replaced" / "thesis.tex").write_text("two years of work\n")
    run, _ = _interleaved(out)
    repeat.is_complete(run)  # puts back or removes what a kill set aside
    assert sorted(p.name for p in (out / "run-1.replaced").iterdir()) == ["thesis.tex"]


# -- a rerun stopped by SIGTERM ---------------------------------------------------------------------------------------
@pytest.mark.slow
def test_a_forced_rerun_stopped_by_sigterm_leaves_the_completed_run_analysable(tmp_path, monkeypatch):
    """Round 4, still failing: a `profile --force` rerun stopped by SIGTERM while nsys ran left status.json saying
    run 1 was "interrupted", and `analyze DIR` refused ("nothing to analyse … interrupted") although the finished
    run-1/ was intact. The status now lists it as kept, and analyze reads it as before the rerun."""
    import shutil
    import signal

    import nsys_cc
    from conftest import interleaved_runs
    from nsys_cc.launch import interleaved, process
    from nsys_cc.launch.models import resolve

    source = FIXTURES / "interleaved" / "run-1"
    stop = []

    def fake_profile(attempt, log_path, **kw):
        if stop:
            raise process.Terminated(signal.SIGTERM)
        for name in ("trace.sqlite", "interleaved.json"):
            shutil.copy(source / name, attempt.files.out_dir / name)
        return ""

    monkeypatch.setattr(process, "profile_and_export", fake_profile)
    engines = [interleaved.Engine("target" if i == 0 else "draft", resolve(m), ())
               for i, m in enumerate(["tiny-llama-target", "tiny-llama-draft-s", "tiny-llama-draft-xs"])]
    out = tmp_path / "o"
    out.mkdir()
    interleaved_runs(monkeypatch, engines, out)
    before = nsys_cc.analyze(out)
    stop.append(True)
    with unchanged(out / "run-1"), pytest.raises(KeyboardInterrupt):
        interleaved_runs(monkeypatch, engines, out, force=True)
    (entry,) = json.loads((out / "status.json").read_text())["runs"]
    assert entry["status"] == "resumed" and "terminated by SIGTERM" in entry["reason"], entry
    after = nsys_cc.analyze(out)
    assert after.coefficients.equals(before.coefficients)


def test_a_separate_rerun_stopped_by_sigterm_keeps_the_trace_set_listed(tmp_path, monkeypatch):
    import signal

    from nsys_cc.launch import process, resume

    out = tmp_path / "o"
    out.mkdir()
    run = _model(out)
    _completed(run)

    def stopped(*a, **kw):
        raise process.Terminated(signal.SIGTERM)

    monkeypatch.setattr(process, "profile_and_export", stopped)
    with pytest.raises(KeyboardInterrupt):
        process.run_model(run, timeout=None)
    assert run.status == "resumed" and run.ok and resume.is_complete(run)
