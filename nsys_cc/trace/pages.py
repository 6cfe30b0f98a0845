"""Ordinary memory pages for the arrays of a big read or analysis (`small_pages`).

NumPy asks the kernel for 2 MB transparent huge pages (`madvise(MADV_HUGEPAGE)`) on every array of 4 MB or more.
Where the kernel's THP defrag mode is `madvise` (a common default, and this project's machines), each first touch of
such an array may compact memory to assemble a huge page before zeroing it: measured on `analyze` of a 15 M-range
NVTX export, 7 s of system time instead of 3.5 s, 14.0 s instead of 11.2 s in all (docs/PERFORMANCE.md). nsys_cc's
arrays are written once and streamed through, which gains nothing from huge pages, so while nsys_cc reads and
analyses it turns NumPy's request off, and restores it afterwards (so a notebook's own arrays keep NumPy's
setting). Set `NUMPY_MADVISE_HUGEPAGE` (NumPy's own switch) to decide yourself: nsys_cc then leaves it alone.
"""

from __future__ import annotations

import contextlib
import functools
import os
import sys
from collections.abc import Callable, Iterator
from typing import TypeVar

F = TypeVar("F", bound=Callable)


def _setter() -> Callable[[bool], bool] | None:
    """NumPy's switch (a private function behind its documented `NUMPY_MADVISE_HUGEPAGE`); None if it has none."""
    import importlib

    for module in ("numpy._core.multiarray", "numpy.core.multiarray"):
        try:
            setter = importlib.import_module(module)._set_madvise_hugepage
        except (ImportError, AttributeError):
            continue
        return setter
    return None


@contextlib.contextmanager
def small_pages() -> Iterator[None]:
    """NumPy's huge-page request off inside the block (unless `NUMPY_MADVISE_HUGEPAGE` is set), as it was after.
    Before NumPy is imported there is no array to page, and NumPy is not imported for this (a CLI verb's `--help`
    loads no NumPy): the reads and analyses that import it run inside `small_pages` of their own."""
    skip = "NUMPY_MADVISE_HUGEPAGE" in os.environ or "numpy" not in sys.modules
    setter = None if skip else _setter()
    if setter is None:
        yield
        return
    before = setter(False)
    try:
        yield
    finally:
        setter(before)


def with_small_pages(func: F) -> F:
    """`func` run inside `small_pages()`."""

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        with small_pages():
            return func(*args, **kwargs)

    return wrapper  # type: ignore[return-value]
