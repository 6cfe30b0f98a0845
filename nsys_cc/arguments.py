"""How the public API reads a list-like argument: one rule, everywhere.

A parameter that takes several things (trace paths, labels, range names, prefixes, acceptance rates, notes) also
takes one thing alone, as a user writes it: a bare string (or path, or number) is a one-item list — never the
characters of the string. `many` is that rule; `one_path` is its mirror for a parameter that takes one trace, which a
user may write as a one-item list. A mapping where a list is expected is refused (its keys would be taken silently).
Every failure is an InputError naming the parameter (`param`), so the CLI can name its flag.

This module imports nothing of the package but its errors: every layer uses it.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import Any

from .errors import InputError

# What counts as one item, never as a collection of items: text and bytes (iterable by character), paths, and
# anything that is not iterable at all (numbers).
ATOMS = (str, bytes, os.PathLike)


def is_one(value: Any) -> bool:
    """Whether `value` is a single item for a list-like parameter (`ATOMS`, or not iterable at all)."""
    return isinstance(value, ATOMS) or not isinstance(value, Iterable)


def many(value: Any, param: str) -> list:
    """`value` as a list: a single item (`is_one`: a string, a path, a number) is a one-item list, any other iterable
    its items (a tuple, a list, a generator, a NumPy array, a pandas Series). A mapping is refused: InputError naming
    `param`."""
    if is_one(value):
        return [value]
    if isinstance(value, Mapping):
        raise InputError(f"{param}: give a list (or one item), not a mapping ({type(value).__name__})", param=param)
    return list(value)


def path_of(value: Any, param: str) -> str:
    """One path as text: a str or os.PathLike; anything else is an InputError naming `param`."""
    if isinstance(value, (str, os.PathLike)):
        return os.fsdecode(os.fspath(value))
    raise InputError(f"{param}: expected a trace path (str or os.PathLike), not {type(value).__name__} {value!r}",
                     param=param)


def paths(value: Any, param: str) -> list[str]:
    """Several paths (`many`'s rule: one path alone is a list of one)."""
    return [path_of(v, param) for v in many(value, param)]


def one_path(value: Any, param: str, *, plural: str | None = None) -> str:
    """One path: a str or os.PathLike, or a list holding exactly one. Several are refused with a message that says
    where they belong (`plural`: the parameter that takes several, if any)."""
    if is_one(value):
        return path_of(value, param)
    items = many(value, param)
    if len(items) == 1:
        return path_of(items[0], param)
    where = f"; several go in {plural}" if plural else ""
    raise InputError(f"{param} is one trace, not {len(items)}: pass one path{where}", param=param)


def file_identity(path: str | os.PathLike) -> tuple:
    """What makes two paths the same file: its device and inode (a hard link, a symlink, `a/../b` and a bind mount
    of one file all give the same), or, when it cannot be stat'ed, its real path. The one rule by which sources are
    compared: a file given as target and draft would give c = 1 from one set of forwards."""
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return ("path", os.path.realpath(path))
    return ("inode", st.st_dev, st.st_ino)
