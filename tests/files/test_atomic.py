"""`nsys_cc.files.atomic`: a file written whole — a reader sees the old content or the new, a failure leaves the old
file as it was and no temporary file behind, a link at the name is replaced (its target never written)."""

from __future__ import annotations

import os
import stat

import pytest

from nsys_cc.files import atomic


def test_a_file_is_written_and_replaced_whole_with_nothing_left_beside(tmp_path):
    p = tmp_path / "status.json"
    assert atomic.write_text(p, "{}\n") == p
    atomic.write_bytes(p, b'{"c": 0.25}\n')
    assert p.read_bytes() == b'{"c": 0.25}\n'
    assert [f.name for f in tmp_path.iterdir()] == ["status.json"]


def test_text_is_written_in_utf8(tmp_path):
    p = atomic.write_text(tmp_path / "r.md", "γ = 3, α ≈ 0.7\n")
    assert p.read_bytes() == b"\xce\xb3 = 3, \xce\xb1 \xe2\x89\x88 0.7\n"


def test_the_mode_is_the_one_asked_less_the_umask(tmp_path):
    old = os.umask(0o027)
    try:
        atomic._UMASK = None  # read again under this umask
        p = atomic.write_text(tmp_path / "a", "x", mode=0o666)
    finally:
        os.umask(old)
        atomic._UMASK = None
    assert stat.S_IMODE(p.stat().st_mode) == 0o640


def test_a_link_at_the_name_is_replaced_and_its_target_never_written(tmp_path):
    target = tmp_path / "users-file"
    target.write_text("mine\n")
    link = tmp_path / "report.md"
    link.symlink_to(target)
    atomic.write_text(link, "the report\n")
    assert not link.is_symlink() and link.read_text() == "the report\n"
    assert target.read_text() == "mine\n"


def test_a_failed_write_keeps_the_old_file_and_leaves_no_temporary(tmp_path, monkeypatch):
    p = tmp_path / "status.json"
    p.write_text("old\n")

    def interrupted(src, dst):
        raise KeyboardInterrupt

    monkeypatch.setattr(atomic.os, "replace", interrupted)
    with pytest.raises(KeyboardInterrupt):
        atomic.write_text(p, "new\n")
    assert p.read_text() == "old\n" and [f.name for f in tmp_path.iterdir()] == ["status.json"]


def test_the_temporary_file_is_hidden_beside_the_file(tmp_path):
    tmp = atomic.temporary_beside(tmp_path / "report.md")
    assert tmp.parent == tmp_path and tmp.name.startswith(".report.md.") and tmp.name.endswith(".tmp")
    assert tmp.read_bytes() == b""


def test_a_full_output_file_system_names_the_file(tmp_path, monkeypatch):
    """A full disk while writing a file under -o said "cannot write the output" and named no file."""
    import errno

    from nsys_cc.files import atomic

    real = os.fsync

    def full(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(atomic.os, "fsync", full)
    with pytest.raises(OSError) as info:
        atomic.write_text(tmp_path / "status.json", "{}")
    monkeypatch.setattr(atomic.os, "fsync", real)
    assert info.value.filename == str(tmp_path / "status.json") and not list(tmp_path.iterdir())
    from nsys_cc.cli import _cannot_write_output

    with pytest.raises(SystemExit) as code:
        _cannot_write_output(info.value)
    assert code.value.code == 2
