"""Round 5 (issue 52): what `profile` (every route: nsys and torch, interleaved and one process per model), `tune` and
`sweep` may write, replace and remove — only under `-o`, never through a link, and only files nsys-cc can prove it
wrote — each case a test that fails without its fix. Files outside `-o` and the user's own are hashed before and
after."""

from __future__ import annotations

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


# -- the -o lock --------------------------------------------------------------------------------------------------------
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
