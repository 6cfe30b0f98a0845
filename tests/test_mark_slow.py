"""scripts/mark_slow.py: a test function whose slowest case of a loop's junit XML is over the threshold gets
`@pytest.mark.slow` above its decorators; one already marked, a quicker one and a skipped case are left alone."""

from __future__ import annotations

import importlib.util

from conftest import REPO, sha256_tree

SPEC = importlib.util.spec_from_file_location("mark_slow", REPO / "scripts" / "mark_slow.py")
mark_slow = importlib.util.module_from_spec(SPEC)  # type: ignore[arg-type]
SPEC.loader.exec_module(mark_slow)  # type: ignore[union-attr]

SOURCE = '''import pytest


@pytest.mark.parametrize("n", [1, 2])
def test_heavy(n):
    pass


def test_quick():
    pass


@pytest.mark.slow
def test_marked():
    pass


def test_skipped_once():
    pass


class TestGroup:
    def test_inside(self):
        pass
'''

JUNIT = '''<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite>
<testcase classname="tests.room.test_x" name="test_heavy[1]" time="0.05"/>
<testcase classname="tests.room.test_x" name="test_heavy[2]" time="0.45"/>
<testcase classname="tests.room.test_x" name="test_quick" time="0.29"/>
<testcase classname="tests.room.test_x" name="test_marked" time="3.0"/>
<testcase classname="tests.room.test_x" name="test_skipped_once" time="5.0"><skipped message="no"/></testcase>
<testcase classname="tests.room.test_x.TestGroup" name="test_inside" time="0.31"/>
</testsuite></testsuites>
'''


def _tree(tmp_path):
    (tmp_path / "tests" / "room").mkdir(parents=True)
    test_file = tmp_path / "tests" / "room" / "test_x.py"
    test_file.write_text(SOURCE)
    junit = tmp_path / "junit.xml"
    junit.write_text(JUNIT)
    return test_file, junit


def test_the_functions_over_the_threshold_are_marked_and_nothing_else(tmp_path, capsys):
    test_file, junit = _tree(tmp_path)
    assert mark_slow.main([str(junit), "0.3", "--root", str(tmp_path)]) == 0
    assert "marked 2 test function(s) slow" in capsys.readouterr().out
    text = test_file.read_text()
    assert '@pytest.mark.slow\n@pytest.mark.parametrize("n", [1, 2])\ndef test_heavy(n):' in text
    assert "    @pytest.mark.slow\n    def test_inside(self):" in text
    assert "\n\ndef test_quick():" in text and "\n\ndef test_skipped_once():" in text
    assert text.count("@pytest.mark.slow\ndef test_marked():") == 1 and text.count("@pytest.mark.slow") == 3
    compile(text, str(test_file), "exec")


def test_a_dry_run_lists_and_changes_nothing(tmp_path, capsys):
    test_file, junit = _tree(tmp_path)
    before = sha256_tree(tmp_path)
    mark_slow.main([str(junit), "0.3", "--root", str(tmp_path), "--dry"])
    out = capsys.readouterr().out
    assert "   2 cases   0.50 s, slowest  0.45 s  tests/room/test_x.py::test_heavy" in out
    assert "tests/room/test_x.py::TestGroup.test_inside" in out and "test_quick" not in out
    assert "would mark 2 test function(s) slow" in out
    assert sha256_tree(tmp_path) == before
