"""Rules of the repository itself, so that they hold after files move.

- No tracked file is one that .gitignore ignores: a file both tracked and ignored is half kept (its changes are
  committed, a new one beside it is not), and nobody can tell from the tree which was meant.
- The tests say what they test: no test file, name or comment cites an issue number (in prose or in a name); an
  issue number tells a newcomer nothing, and the issue is history, not the behaviour under test.
- The package's citations of issue numbers only go down (those left are in modules being split; each split drops them).
- The tests mirror the package: at least 90 % of the test files are in a room named after a folder of the package
  (`tests/analysis/forwards/` for `nsys_cc/analysis/forwards/`), in a suite that cuts across rooms (`e2e/`,
  `properties/`, `reliability/`), or at the top named after a top-level module (`test_front.py` for
  `nsys_cc/front.py`); every test file's name is unique in the tree (the rooms are folders, not packages: pytest
  imports each test module under its basename).
- Where a module has behaviour of its own it has a test file of its name: every module of `report/`, `files/` and
  `cli/` (their `__init__` aside) has `tests/<room>/test_<module>.py`, or `test_<module>_<aspect>.py` beside it (a name
  another test file of the tree already holds: `cli/test_profile_command.py`), but those of `NO_TEST_FILE`.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import PACKAGE, REPO

TESTS = REPO / "tests"
# "issue", "issues" or "_issue" followed by a number, in any case, with a space, "#", "_" or nothing between; a link
# to an issue elsewhere (…/issues/<number>: a citation with an address) passes.
# The suites that test no one room: whole workflows, properties that hold everywhere, bad input and data safety.
CROSS_CUTTING = ("e2e", "properties", "reliability")
MIRRORED_SHARE = 0.9
ISSUE_NUMBER = re.compile(r"(?<![a-z])issues?[ _#-]*\d+", re.IGNORECASE)
# The package's citations left, in modules being split (analysis/, vllm/plugin.py, tuning.py, trace/reader.py,
# launch/interleaved.py) or removed (_compat.py). Lower it when one goes; it never rises.
PACKAGE_CITATIONS_LEFT = 27
# The rooms in which every module has its test file, and the modules with no behaviour of their own (why, each).
MODULE_ROOMS = ("report", "files", "cli")
NO_TEST_FILE = {
    "files/users.py": "one line, `my_uid() = os.geteuid()`: the seam a test replaces to play another user",
}


def ignored_but_tracked(root: Path) -> list[str]:
    """The files git tracks in `root` that its ignore rules ignore."""
    out = subprocess.run(["git", "-C", str(root), "ls-files", "--cached", "--ignored", "--exclude-standard"],
                         capture_output=True, text=True, check=True).stdout
    return out.splitlines()


def citations(paths: list[Path], root: Path = REPO) -> list[str]:
    """`path:line: text` (relative to `root`) of every issue number cited in the files, and every file whose name
    cites one."""
    found = []
    for path in paths:
        where = path.relative_to(root)
        if ISSUE_NUMBER.search(path.name):
            found.append(f"{where}: the file's name")
        for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            if ISSUE_NUMBER.search(line):
                found.append(f"{where}:{n}: {line.strip()}")
    return found


def _in_a_git_checkout() -> bool:
    if shutil.which("git") is None:
        return False
    probe = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--is-inside-work-tree"], capture_output=True,
                           text=True)
    return probe.returncode == 0 and probe.stdout.strip() == "true"


@pytest.mark.skipif(not _in_a_git_checkout(), reason="not a git checkout (an unpacked copy has no index to check)")
def test_no_tracked_file_is_ignored():
    assert ignored_but_tracked(REPO) == [], (
        "tracked files that .gitignore ignores: untrack them, or keep them under a name .gitignore does not ignore")


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_the_ignore_check_finds_a_tracked_ignored_file(tmp_path):
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / ".gitignore").write_text("results/\n")
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "kept.json").write_text("{}\n")
    (tmp_path / "records.json").write_text("{}\n")
    subprocess.run(["git", "-C", str(tmp_path), "add", "-f", ".gitignore", "results/kept.json", "records.json"],
                   check=True)
    assert ignored_but_tracked(tmp_path) == ["results/kept.json"]


def test_no_test_cites_an_issue_number():
    files = sorted(TESTS.rglob("*.py"))
    assert len(files) > 50, "the tests were not found"
    assert citations(files) == []


def test_the_citation_check_finds_names_and_comments(tmp_path):
    number = "4" + "2"  # not written whole: this file must pass its own check
    (tmp_path / f"test_issue{number}.py").write_text("x = 1\n")
    (tmp_path / "test_a.py").write_text(f"# Issue {number}: why\ndef _issue_{number}_shape(): ...\n"
                                        f"# see the issues {number} and 43\n"
                                        f"# https://github.com/vllm-project/vllm/issues/6468 (a link, kept)\n"
                                        f"# an issue with no number, tissue {number}x\n")
    found = citations(sorted(tmp_path.glob("*.py")), tmp_path)
    assert found == [f"test_a.py:1: # Issue {number}: why", f"test_a.py:2: def _issue_{number}_shape(): ...",
                     f"test_a.py:3: # see the issues {number} and 43", f"test_issue{number}.py: the file's name"]


def test_the_packages_issue_citations_only_go_down():
    found = citations(sorted(PACKAGE.rglob("*.py")))
    assert len(found) <= PACKAGE_CITATIONS_LEFT, "a new issue number cited in the package: say why instead\n" + \
        "\n".join(found)
    assert len(found) == PACKAGE_CITATIONS_LEFT, (
        f"{PACKAGE_CITATIONS_LEFT - len(found)} citation(s) fewer: lower PACKAGE_CITATIONS_LEFT to {len(found)}")


def misplaced(tests: Path, package: Path) -> list[str]:
    """The test files (`test_*.py` under `tests`, relative posix paths) that are neither in a room named after a
    folder of `package` holding modules, nor in a cross-cutting suite, nor at the top named after a top-level
    module. The package's folders are listed here, not from the tests: the package is the oracle."""
    rooms = {p.parent.relative_to(package).as_posix() for p in package.rglob("*.py") if p.parent != package}
    modules = {p.stem for p in package.glob("*.py")}
    out = []
    for path in sorted(tests.rglob("test_*.py")):
        rel = path.relative_to(tests)
        if len(rel.parts) == 1:
            ok = rel.stem.removeprefix("test_") in modules
        else:
            ok = rel.parts[0] in CROSS_CUTTING or rel.parent.as_posix() in rooms
        if not ok:
            out.append(rel.as_posix())
    return out


def test_the_tests_mirror_the_package():
    files = sorted(TESTS.rglob("test_*.py"))
    assert len(files) > 50, "the tests were not found"
    off = misplaced(TESTS, PACKAGE)
    assert 1 - len(off) / len(files) >= MIRRORED_SHARE, (
        f"{len(off)} of {len(files)} test files are in no room of the package (tests/<room>/ after nsys_cc/<room>/, "
        f"or {', '.join(CROSS_CUTTING)}) nor named after a top-level module: {off}")


def test_every_test_files_name_is_unique():
    names = [p.name for p in TESTS.rglob("test_*.py")]
    assert sorted(n for n in set(names) if names.count(n) > 1) == []


def test_the_mirror_check_finds_a_test_outside_every_room(tmp_path):
    package, tests = tmp_path / "pkg", tmp_path / "tests"
    for module in ("front.py", "trace/reader.py", "launch/models/config.json"):
        (package / module).parent.mkdir(parents=True, exist_ok=True)
        (package / module).write_text("")
    for test in ("test_front.py", "test_user_calls.py", "trace/test_reader.py", "traces/test_reader2.py",
                 "e2e/test_profile.py", "launch/models/test_config.py", "launch/test_plan.py"):
        (tests / test).parent.mkdir(parents=True, exist_ok=True)
        (tests / test).write_text("")
    # launch/models/ holds no module (data only), and launch/ none at all: neither is a room
    assert misplaced(tests, package) == ["launch/models/test_config.py", "launch/test_plan.py",
                                         "test_user_calls.py", "traces/test_reader2.py"]


def untested_modules(package: Path, tests: Path, rooms: tuple[str, ...], allowed=()) -> list[str]:
    """The modules of `rooms` (`room/module.py`, `__init__` and `allowed` aside) with no test file of their name:
    `tests/<room>/test_<module>.py`, or `test_<module>_<aspect>.py` where `<module>_<aspect>` is no module of the
    room (`test_speedup_command.py` is `speedup`'s; `test_speedup_plots.py` is `speedup_plots`', not `speedup`'s)."""
    out = []
    for room in rooms:
        modules = sorted(p.stem for p in (package / room).glob("*.py") if p.stem != "__init__")
        for module in modules:
            if f"{room}/{module}.py" in allowed:
                continue
            folder = tests / room
            aspects = [p for p in folder.glob(f"test_{module}_*.py") if p.stem.removeprefix("test_") not in modules]
            if not (folder / f"test_{module}.py").exists() and not aspects:
                out.append(f"{room}/{module}.py")
    return out


def test_every_module_of_report_files_and_cli_has_its_test_file():
    assert untested_modules(PACKAGE, TESTS, MODULE_ROOMS, NO_TEST_FILE) == [], (
        "give each a tests/<room>/test_<module>.py (or say in NO_TEST_FILE why it has no behaviour of its own)")
    assert [m for m in NO_TEST_FILE if not (PACKAGE / m).exists()] == [], "NO_TEST_FILE names a module that is gone"


def test_the_module_check_finds_a_module_without_its_test_file(tmp_path):
    package, tests = tmp_path / "pkg", tmp_path / "tests"
    for module in ("cli/__init__.py", "cli/speedup.py", "cli/tune.py", "cli/flags.py", "report/speedup.py",
                   "report/speedup_plots.py", "report/text.py", "files/users.py"):
        (package / module).parent.mkdir(parents=True, exist_ok=True)
        (package / module).write_text("")
    for test in ("cli/test_speedup_command.py", "cli/test_tune.py", "report/test_speedup_plots.py",
                 "report/test_text_markdown.py"):
        (tests / test).parent.mkdir(parents=True, exist_ok=True)
        (tests / test).write_text("")
    # flags: none; report's speedup: its neighbour speedup_plots' file is not its own; users: allowed
    assert untested_modules(package, tests, ("cli", "report", "files"), {"files/users.py": "why"}) == [
        "cli/flags.py", "report/speedup.py"]
