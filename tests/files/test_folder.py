"""`nsys_cc.files.folder`: the one writer of `-o DIR` — no write, folder, removal or rename follows a link out of
it; a user's file is never written over; one writer at a time (its lock); the check of a directory argument."""

from __future__ import annotations

import os

import pytest

from conftest import lock_held, sha256_tree
from nsys_cc.errors import InputError
from nsys_cc.files.folder import LOCK_NAME, Folder, check_out_dir, is_inside, is_plain


@pytest.fixture
def out(tmp_path):
    d = tmp_path / "o"
    d.mkdir()
    return d


@pytest.mark.parametrize("name, plain", [("a.csv", True), ("plots/a.png", True), ("", False), (".", False),
                                         ("../a", False), ("a/../b", False), ("/etc/passwd", False)])
def test_a_plain_name_is_relative_and_never_climbs(name, plain):
    assert is_plain(name) is plain


def test_a_name_through_a_link_or_a_file_is_not_inside(out, outside):
    (out / "plots").symlink_to(outside)
    (out / "file").write_text("")
    assert is_inside(out, "a.csv") and is_inside(out, "new/a.png")
    assert not is_inside(out, "plots/a.png") and not is_inside(out, "file/a.png")


def test_a_write_through_a_linked_folder_is_refused_and_nothing_outside_changes(out, outside):
    (out / "plots").symlink_to(outside)
    before = sha256_tree(outside)
    with pytest.raises(InputError, match="a folder on its way is a link or a file"):
        Folder(out).write_text("plots/precious.txt", "overwritten\n")
    with pytest.raises(InputError, match="is a link or a file where nsys-cc needs a folder"):
        Folder(out).mkdir("plots")
    with pytest.raises(InputError, match=f"nsys-cc writes only inside {out}"):
        Folder(out).write_text(outside / "precious.txt", "overwritten\n")
    assert sha256_tree(outside) == before


def test_a_link_where_a_file_is_written_is_replaced_and_a_removed_link_is_removed_itself(out, outside):
    (out / "report.md").symlink_to(outside / "precious.txt")
    (out / "gone").symlink_to(outside)
    Folder(out).write_text("report.md", "the report\n")
    Folder(out).remove("gone")
    Folder(out).remove_tree("also-gone")  # absent: nothing
    assert (out / "report.md").read_text() == "the report\n" and not (out / "report.md").is_symlink()
    assert not os.path.lexists(out / "gone")
    assert (outside / "precious.txt").read_text() == "the user's notes\n"


def test_a_users_file_is_refused_and_nsys_ccs_own_is_written_over(out):
    (out / "status.json").write_text("my own notes\n")
    ours = lambda data: data.startswith(b"{")  # noqa: E731
    with pytest.raises(InputError, match="is in the way: it is not a nsys-cc file"):
        Folder(out).write_own("status.json", '{"new": 1}\n', ours)
    assert (out / "status.json").read_text() == "my own notes\n"
    (out / "status.json").write_text('{"old": 1}\n')
    Folder(out).write_own("status.json", '{"new": 1}\n', ours)
    assert (out / "status.json").read_text() == '{"new": 1}\n'


def test_a_log_is_opened_afresh_never_through_a_link(out, outside):
    (out / "run.log").symlink_to(outside / "precious.txt")
    with Folder(out).open_new("run.log") as fh:
        fh.write("fresh\n")
    assert (out / "run.log").read_text() == "fresh\n" and (outside / "precious.txt").read_text() == "the user's notes\n"


def test_the_lock_holds_this_process_id_and_is_taken_again_inside(out):
    with Folder(out).lock():
        assert (out / LOCK_NAME).read_text() == f"{os.getpid()}\n"
        with Folder(out).lock():  # re-entrant in one process
            pass


def test_a_second_writer_is_refused_naming_the_holder(out):
    with lock_held(out) as holder:
        with pytest.raises(InputError, match=rf"another nsys-cc \(pid {holder.pid}\) is writing {out}"):
            with Folder(out).lock(wait=0):
                pytest.fail("locked twice")


@pytest.mark.parametrize("bad, says", [("", "out_dir is empty"), (b"o", "not bytes"), (3, "not int 3")])
def test_a_directory_argument_that_names_no_directory_is_refused(bad, says):
    with pytest.raises(InputError, match=says):
        check_out_dir(bad)


def test_a_linked_or_file_directory_argument_is_refused(out, outside):
    (out / "link").symlink_to(outside)
    (out / "file").write_text("")
    with pytest.raises(InputError, match="is a symbolic link"):
        check_out_dir(out / "link")
    with pytest.raises(InputError, match="is an existing file"):
        check_out_dir(out / "file")
    assert check_out_dir(str(out / "new")) == out / "new"
