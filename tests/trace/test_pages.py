"""`nsys_cc.trace.pages`: NumPy's huge-page request is off while nsys_cc reads and analyses, and as it was after."""

from __future__ import annotations

import pytest
from numpy._core.multiarray import _get_madvise_hugepage, _set_madvise_hugepage

from conftest import FIXTURES
from nsys_cc.analysis.coefficient.measure import cost_coefficient
from nsys_cc.errors import NsysCCError
from nsys_cc.trace import open_trace
from nsys_cc.trace.pages import small_pages

VLLM = FIXTURES / "vllm"


@pytest.fixture()
def hugepages(monkeypatch):
    """NumPy's setting put back after the test, whatever the test set."""
    monkeypatch.delenv("NUMPY_MADVISE_HUGEPAGE", raising=False)
    before = _get_madvise_hugepage()
    yield
    _set_madvise_hugepage(before)


@pytest.mark.parametrize("setting", [True, False])
def test_off_inside_and_restored_after(hugepages, setting):
    _set_madvise_hugepage(setting)
    with small_pages():
        assert _get_madvise_hugepage() is False
        with small_pages():  # nested: still off, and the outer block restores the user's setting
            assert _get_madvise_hugepage() is False
        assert _get_madvise_hugepage() is False
    assert _get_madvise_hugepage() is setting


def test_restored_after_an_error(hugepages):
    _set_madvise_hugepage(True)
    with pytest.raises(ZeroDivisionError), small_pages():
        assert _get_madvise_hugepage() is False
        1 / 0  # noqa: B018
    assert _get_madvise_hugepage() is True


def test_the_users_own_choice_is_left_alone(hugepages, monkeypatch):
    _set_madvise_hugepage(True)
    monkeypatch.setenv("NUMPY_MADVISE_HUGEPAGE", "1")
    with small_pages():
        assert _get_madvise_hugepage() is True


def test_reads_and_analysis_run_without_huge_pages_and_give_the_setting_back(hugepages, monkeypatch):
    _set_madvise_hugepage(True)
    seen = []
    from nsys_cc.trace import nvtx

    real = nvtx.read_ranges
    monkeypatch.setattr(nvtx, "read_ranges", lambda *a, **k: seen.append(_get_madvise_hugepage()) or real(*a, **k))
    with open_trace(VLLM / "tiny-llama-draft-s.sqlite") as trace:
        trace.nvtx_ranges()
    cost_coefficient(VLLM / "tiny-llama-draft-s.sqlite", VLLM / "tiny-llama-draft-xs.sqlite")
    assert seen and not any(seen)
    assert _get_madvise_hugepage() is True
    with pytest.raises(NsysCCError):
        cost_coefficient(VLLM / "tiny-llama-draft-s.sqlite", VLLM / "no-such.sqlite")
    assert _get_madvise_hugepage() is True
