"""Rules of the repository itself, so that they hold after files move.

- No tracked file is one that .gitignore ignores: a file both tracked and ignored is half kept (its changes are
  committed, a new one beside it is not), and nobody can tell from the tree which was meant.
- The tests say what they test: no test file, name or comment cites an issue number (in prose or in a name); an
  issue number tells a newcomer nothing, and the issue is history, not the behaviour under test.
- The package's citations of issue numbers only go down (those left are in modules being split; each split drops them).
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
ISSUE_NUMBER = re.compile(r"(?<![a-z])issues?[ _#-]*\d+", re.IGNORECASE)
# The package's citations left, in modules being split (analysis/, vllm/plugin.py, tuning.py, trace/reader.py,
# launch/interleaved.py) or removed (_compat.py). Lower it when one goes; it never rises.
PACKAGE_CITATIONS_LEFT = 32


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
