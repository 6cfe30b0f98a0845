"""A report replaced under SIGKILL is the earlier one or the new one, never a mix — for every
command, since every report (`analyze -o`, `profile`, `tune`, the sweep table) is put in place by `publishing.publish`.

The writer is killed (a real SIGKILL, in a forked child) before each of its file-system changes in turn — every
rename, link, unlink, folder made or removed — and what a reader then finds at the report's names (links followed;
a name leading nowhere is absent) must hash exactly as the earlier report or exactly as the new one. The next write
must then succeed, show the new report and leave nothing behind. The user's own files in `-o` and every file
outside it are hashed before and after.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
import signal
from pathlib import Path

import pytest

from conftest import sha256_tree, unchanged
from nsys_cc.errors import InputError
from nsys_cc.files import atomic, publishing
from nsys_cc.files.folder import LOCK_NAME

MANIFEST = ".nsys_cc_report.json"
OLD = {"report.md": "the earlier report\n", "summary.csv": "model,c\nd,0.5\n", "gone.csv": "only in the earlier\n",
       "plots/a.png": "earlier plot a", "plots/old.png": "earlier plot only"}
NEW = {"report.md": "the new report\n", "summary.csv": "model,c\nd,0.25\n", "new.json": '{"only": "new"}\n',
       "plots/a.png": "new plot a", "plots/new.png": "new plot only"}


def _build(files: dict[str, str]):
    def build(stage: publishing.Stage) -> None:
        for name, text in files.items():
            with stage.file(name) as path:
                path.write_text(text)
    return build


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def shown(out: Path) -> dict[str, str]:
    """What a reader finds at the report's names (links followed; a link leading nowhere is no file)."""
    found = {}
    for name in {*OLD, *NEW}:
        try:
            found[name] = hashlib.sha256((out / name).read_bytes()).hexdigest()
        except FileNotFoundError:
            continue
    return found


EARLIER = {n: _digest(t) for n, t in OLD.items()}
LATER = {n: _digest(t) for n, t in NEW.items()}

# every call that changes the file system on the way (shutil.rmtree and tempfile call these too)
CHANGES = ("replace", "rename", "symlink", "unlink", "link", "rmdir", "mkdir", "remove")


def _publish_killed_at(out: Path, k: int, files: dict[str, str]) -> bool:
    """Publish `files` in a forked child that SIGKILLs itself just before its k-th change; True when it was killed
    (False: it finished, having made fewer than k changes)."""
    return _killed_at(k, lambda: publishing.publish(out, _build(files), manifest=MANIFEST))


def _killed_at(k: int, write) -> bool:
    """`write()` in a forked child that SIGKILLs itself just before its k-th file-system change; True when it was
    killed (False: it finished, having made fewer than k changes)."""
    pid = os.fork()
    if pid == 0:  # the child: nothing of pytest runs here, only the writer
        try:
            count = [0]

            def hook(real):
                def changed(*args, **kwargs):
                    count[0] += 1
                    if count[0] == k:
                        os.kill(os.getpid(), signal.SIGKILL)
                    return real(*args, **kwargs)
                return changed

            for name in CHANGES:
                setattr(os, name, hook(getattr(os, name)))
            write()
        except BaseException:
            os._exit(3)
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        assert os.WTERMSIG(status) == signal.SIGKILL
        return True
    assert os.WEXITSTATUS(status) == 0, "the writer failed without being killed"
    return False


def _no_leftovers(out: Path) -> None:
    store = out / publishing.store_of(MANIFEST)
    current = publishing.CURRENT
    assert sorted(p.name for p in store.iterdir()) == sorted([current, os.readlink(store / current)])
    dangling = [p for p in out.rglob("*") if p.is_symlink() and not p.exists()]
    assert dangling == []


def _earlier_report(out: Path, layout: str, monkeypatch) -> None:
    """The earlier report in `out`: round 4's layout (generations), or round 3's (plain files, a sha256 manifest),
    as nsys-cc 0.1 left it, made here by the file-by-file path of a file system without links."""
    if layout == "round-3":
        def no_links(*a, **kw):
            raise OSError(errno.EPERM, "Operation not permitted")

        monkeypatch.setattr(atomic.os, "symlink", no_links)
    publishing.publish(out, _build(OLD), manifest=MANIFEST)
    monkeypatch.undo()
    if layout == "round-3":
        assert not (out / "report.md").is_symlink() and not (out / MANIFEST).is_symlink()
    assert shown(out) == EARLIER


# every kill point of both layouts in `make test`; every third of round 4's in `make check` (~2 s)
@pytest.mark.parametrize("layout, stride", [("round-4", 3), pytest.param("round-4", 1, marks=pytest.mark.slow),
                                            pytest.param("round-3", 1, marks=pytest.mark.slow)])
def test_a_sigkill_at_any_point_leaves_the_earlier_report_or_the_new_one(tmp_path, outside, layout, stride,
                                                                         monkeypatch):
    kills, seen = 0, set()
    for k in range(1, 400, stride):
        out = tmp_path / f"O{k}"
        _earlier_report(out, layout, monkeypatch)
        (out / "notes.txt").write_text("the user's own file in -o\n")
        (out / "link-out").symlink_to(outside / "precious.txt")
        mine = {"notes.txt": sha256_tree(out / "notes.txt")}
        with unchanged(outside):
            killed = _publish_killed_at(out, k, NEW)
            state = shown(out)
            assert state in (EARLIER, LATER), f"killed before change {k}: a mix {state}"
            seen.add("earlier" if state == EARLIER else "new")
            # the next write finds what the kill left and shows the new report, leaving nothing behind
            publishing.publish(out, _build(NEW), manifest=MANIFEST)
        assert shown(out) == LATER and {"notes.txt": sha256_tree(out / "notes.txt")} == mine
        _no_leftovers(out)
        shutil.rmtree(out)
        if not killed:
            break
        kills += 1
    else:
        pytest.fail("the writer never finished")
    assert kills * stride >= 20 and seen == {"earlier", "new"}, (kills, seen)  # kills on both sides of the switch


def test_on_a_file_system_without_links_the_report_is_put_in_place_file_by_file(tmp_path, monkeypatch):
    def no_links(*a, **kw):
        raise OSError(errno.EOPNOTSUPP, "Operation not supported")

    monkeypatch.setattr(atomic.os, "symlink", no_links)
    out = tmp_path / "O"
    publishing.publish(out, _build(OLD), manifest=MANIFEST)
    publishing.publish(out, _build(NEW), manifest=MANIFEST)
    assert shown(out) == LATER and not any(p.is_symlink() for p in out.rglob("*"))
    assert not (out / publishing.store_of(MANIFEST)).exists()


def test_a_round_3_report_is_taken_over_and_its_stale_files_removed(tmp_path, monkeypatch):
    out = tmp_path / "O"
    _earlier_report(out, "round-3", monkeypatch)
    publishing.publish(out, _build(NEW), manifest=MANIFEST)
    assert shown(out) == LATER and not (out / "gone.csv").exists() and not (out / "plots" / "old.png").exists()
    assert json.loads((out / MANIFEST).read_text())["files"] == LATER
    _no_leftovers(out)


def test_a_file_edited_through_its_link_is_never_lost(tmp_path):
    """`report.md` edited in an editor (through its link): the next report refuses to replace it, and it is now the
    user's own plain file, which they can move away; `gone.csv` edited, which the next report does not write: it
    stays, the user's own plain file."""
    out = tmp_path / "O"
    publishing.publish(out, _build(OLD), manifest=MANIFEST)
    (out / "report.md").write_text("my notes on the run\n")
    (out / "gone.csv").write_text("my own table now\n")
    before = shown(out)
    with pytest.raises(InputError, match=r"report\.md is in the way: nsys-cc did not write it, or it changed since"):
        publishing.publish(out, _build(NEW), manifest=MANIFEST)
    assert shown(out) == before and not (out / "report.md").is_symlink()
    (out / "report.md").rename(tmp_path / "my-notes.md")  # "move it away"
    publishing.publish(out, _build(NEW), manifest=MANIFEST)
    assert (tmp_path / "my-notes.md").read_text() == "my notes on the run\n"
    assert (out / "gone.csv").read_text() == "my own table now\n" and not (out / "gone.csv").is_symlink()
    assert shown(out) == {**LATER, "gone.csv": _digest("my own table now\n")}
    with pytest.raises(InputError, match=r"gone\.csv is in the way"):  # now the user's: never written over
        publishing.publish(out, _build(OLD), manifest=MANIFEST)


def test_an_edited_file_whose_link_was_moved_is_refused_not_lost(tmp_path):
    out = tmp_path / "O"
    publishing.publish(out, _build(OLD), manifest=MANIFEST)
    (out / "summary.csv").write_text("edited\n")
    (out / "summary.csv").rename(out / "kept.csv")  # the link moved: it still leads to the edited file
    with pytest.raises(InputError, match=r"summary\.csv was edited since nsys-cc wrote it, and .* no longer leads"):
        publishing.publish(out, _build(NEW), manifest=MANIFEST)
    assert (out / "kept.csv").read_text() == "edited\n"


def test_a_planted_current_link_or_store_link_leads_nowhere_outside(tmp_path, outside):
    """The generation store as a link out of `-o`, or its `current` naming a folder outside: refused or ignored,
    nothing outside written."""
    out = tmp_path / "O"
    out.mkdir()
    (out / publishing.store_of(MANIFEST)).symlink_to(outside, target_is_directory=True)
    with unchanged(outside), pytest.raises(InputError, match=r"is a link or a file where nsys-cc needs a folder"):
        publishing.publish(out, _build(NEW), manifest=MANIFEST)
    (out / publishing.store_of(MANIFEST)).unlink()
    (out / publishing.store_of(MANIFEST)).mkdir()
    (out / publishing.store_of(MANIFEST) / publishing.CURRENT).symlink_to("../../outside", target_is_directory=True)
    with unchanged(outside):
        publishing.publish(out, _build(NEW), manifest=MANIFEST)
    assert shown(out) == LATER


def test_withdraw_removes_the_report_at_once_and_keeps_the_users_files(tmp_path):
    out = tmp_path / "O"
    publishing.publish(out, _build(OLD), manifest=MANIFEST)
    (out / "notes.txt").write_text("mine\n")
    (out / "gone.csv").write_text("edited\n")
    removed = publishing.withdraw(out, manifest=MANIFEST)
    assert sorted(removed) == sorted(n for n in OLD if n != "gone.csv")
    assert shown(out) == {"gone.csv": _digest("edited\n")}
    assert sorted(p.name for p in out.iterdir()) == sorted([".nsys_cc.lock", "gone.csv", "notes.txt", "plots"])


def _visible(out: Path, stamped=("report.md", "report.json")) -> dict[str, str | None]:
    """What a reader finds in `out` (links followed; a name leading nowhere is no file), the report's generations,
    its manifest and the lock aside; the files that hold the time they were written by name only."""
    found: dict[str, str | None] = {}
    for p in out.rglob("*"):
        name = p.relative_to(out).as_posix()
        if not p.is_file() or name.startswith(".nsys_cc_report") or name == LOCK_NAME:
            continue
        found[name] = None if name in stamped else hashlib.sha256(p.read_bytes()).hexdigest()
    return found


@pytest.mark.slow  # two real reports written ~30 times each (~20 s)
@pytest.mark.parametrize("command", ["analyze", "tune"])
def test_a_real_report_killed_at_any_point_is_the_earlier_or_the_new(tmp_path, command):
    """The same check on the reports the commands write (`write_report` of `analyze -o` and `profile`, tune's
    `TuneReport.write`): a reader finds every file of the earlier report or every file of the new one."""
    from conftest import FIXTURES

    if command == "analyze":
        from nsys_cc import cost_coefficient
        from nsys_cc.report import write_report

        vllm = FIXTURES / "vllm"
        first = cost_coefficient(vllm / "tiny-llama-target.sqlite", [vllm / "tiny-llama-draft-s.sqlite"])
        second = cost_coefficient(vllm / "tiny-llama-target.sqlite", [vllm / "tiny-llama-draft-xs.sqlite"],
                                  acceptance=[0.7])

        def write(result, out):
            return lambda: write_report(result, out, plots=False)
    else:
        from nsys_cc.workflows import tune as tuning

        design = FIXTURES / "tune" / "a99-design"
        first = tuning.tune(design, max_batch_size=8, draws=20, plot=False)
        second = tuning.tune(design, max_batch_size=16, max_gamma=4, draws=20, plot=False)

        def write(result, out):
            return lambda: result.write(out, plot=False)

    write(first, tmp_path / "old")()
    write(second, tmp_path / "new")()
    old, new = _visible(tmp_path / "old"), _visible(tmp_path / "new")
    assert old != new
    seen, kills = set(), 0
    for k in range(1, 400):
        out = tmp_path / f"O{k}"
        write(first, out)()
        killed = _killed_at(k, write(second, out))
        state = _visible(out)
        assert state in (old, new), f"killed before change {k}: a mix"
        seen.add("old" if state == old else "new")
        shutil.rmtree(out)
        if not killed:
            break
        kills += 1
    else:
        pytest.fail("the writer never finished")
    assert kills >= 10 and seen == {"old", "new"}
