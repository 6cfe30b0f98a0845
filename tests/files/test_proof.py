"""`nsys_cc.files.proof`: only what nsys-cc can prove it wrote (a file whose sha256 a record lists for its name; a
link; a folder of proven things) is removed; everything else stays and is named."""

from __future__ import annotations

import os

import pytest

from nsys_cc.files import proof

# sha256 of b"abc" and of b"" (FIPS 180-2 and the empty message's published digest)
ABC = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
EMPTY = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"


@pytest.fixture
def run(tmp_path):
    """A run folder: trace.sqlite ("abc"), logs/run.log (""), a link, and done.json (the record, skipped)."""
    d = tmp_path / "run-1"
    (d / "logs").mkdir(parents=True)
    (d / "trace.sqlite").write_bytes(b"abc")
    (d / "logs" / "run.log").write_bytes(b"")
    (d / "latest").symlink_to(d / "trace.sqlite")
    (d / "done.json").write_text("{}")
    return d


def test_a_files_digest_is_its_sha256_and_a_link_is_not_read(tmp_path, run):
    assert proof.sha256(run / "trace.sqlite") == ABC
    with pytest.raises(OSError):
        proof.sha256(run / "latest")


def test_digests_list_every_regular_file_by_its_relative_name(run):
    assert proof.digests(run, skip=("done.json",)) == {"trace.sqlite": ABC, "logs/run.log": EMPTY}


def test_a_file_is_proven_only_by_the_digest_recorded_for_its_name(run):
    accept = proof.by_digest({"trace.sqlite": ABC}, None, {"logs/run.log": ABC})  # the log's digest is not its own
    assert proof.unproven(run, accept) == ["done.json", "logs/run.log"]
    assert proof.unproven(run, proof.by_digest({"trace.sqlite": ABC, "logs/run.log": EMPTY, "done.json": "x"})) == [
        "done.json"]


def test_an_edited_file_is_the_users_and_stays_with_its_folder(run):
    (run / "trace.sqlite").write_bytes(b"abd")
    left = proof.remove_proven(run, proof.by_digest({"trace.sqlite": ABC, "logs/run.log": EMPTY}))
    assert left == ["done.json", "trace.sqlite"]
    assert sorted(p.name for p in run.iterdir()) == ["done.json", "trace.sqlite"]  # the log, its folder, the link gone


def test_a_folder_whose_files_are_all_proven_is_removed_whole_and_a_links_target_is_kept(tmp_path, run):
    outside = tmp_path / "outside.txt"
    outside.write_text("the user's\n")
    (run / "to-outside").symlink_to(outside)
    (run / "done.json").unlink()
    assert proof.remove_proven(run, proof.by_digest({"trace.sqlite": ABC, "logs/run.log": EMPTY})) == []
    assert not run.exists() and outside.read_text() == "the user's\n"


def test_a_fifo_is_never_proven(run):
    os.mkfifo(run / "pipe")
    assert "pipe" in proof.unproven(run, lambda name, path: True)


def test_a_missing_folder_holds_nothing_unproven(tmp_path):
    assert proof.unproven(tmp_path / "absent", lambda name, path: False) == []


def test_a_few_names_for_a_line():
    assert proof.shown(["a", "b"]) == "a, b"
    assert proof.shown(["a", "b", "c", "d", "e", "f", "g"]) == "a, b, c and 4 more"
