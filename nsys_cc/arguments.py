"""How the public API reads a list-like argument: one rule, everywhere.

A parameter that takes several things (trace paths, labels, range names, prefixes, acceptance rates, notes) also
takes one thing alone, as a user writes it: a bare string (or path, or number) is a one-item list — never the
characters of the string. `many` is that rule; `one_path` is its mirror for a parameter that takes one trace, which a
user may write as a one-item list. A mapping where a list is expected is refused (its keys would be taken silently).
Whole numbers (`whole_numbers`: `--batch-size 1,8`, [1, 8], 8) and cells of a design (`cell_checks`: `--check
4:2,16:3`, [(4, 2), (16, 3)]) are read here too, the same from a flag's text and from a library call. Every failure is
an InputError naming the parameter (`param`), so the CLI can name its flag.

This module imports nothing of the package but its errors: every layer uses it.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping, Sequence
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


# -- whole numbers and cells ------------------------------------------------------------------------------------------
_WHOLE = re.compile(r"[0-9]{1,9}")  # ASCII digits only: `isdigit()` takes '²', which `int()` refuses


def whole_number(part: Any, name: str, what: str = "a whole number ≥ 1") -> int:
    """`part` (an int, or its decimal text) as a whole number ≥ 1 below a billion; InputError naming `name`."""
    if isinstance(part, int) and not isinstance(part, bool) and 1 <= part < 10**9:
        return part
    text = part.strip() if isinstance(part, str) else None
    if text is None or not _WHOLE.fullmatch(text) or int(text) < 1:
        raise InputError(f"{name}: {part!r} is not {what}", param=name)
    return int(text)


def _items(value: Any, name: str) -> list:
    """The items of `value`: a string (comma-separated), a number, or a list/tuple/set of them (a generator once)."""
    if value is None:
        return []
    if isinstance(value, (str, int)) and not isinstance(value, bool):
        return [value]
    if isinstance(value, (list, tuple, set, frozenset)) or (hasattr(value, "__iter__")
                                                            and not isinstance(value, (bytes, dict, float))):
        return list(value)
    raise InputError(f"{name}: give whole numbers (e.g. 1,8 or [1, 8]), not {type(value).__name__} {value!r}",
                     param=name)


def whole_numbers(value: Any, name: str) -> list[int]:
    """The whole numbers ≥ 1 of `value` ('1,8', [1, 8], 8, ['1', '8']), sorted, each once; None is none (the
    default). Text that names none ('', ',') is an InputError: `tune --batch-size ''` profiled the default design."""
    if isinstance(value, str) and not value.replace(",", "").strip():
        raise InputError(f"{name} is empty: give whole numbers ≥ 1 (e.g. 1,8)", param=name)
    out = []
    for item in _items(value, name):
        for part in (item.split(",") if isinstance(item, str) else [item]):
            if isinstance(part, str) and not part.strip():
                continue
            out.append(whole_number(part, name))
    return sorted(set(out))


def cell_checks(text: str | Sequence | None, name: str = "check") -> list[tuple[int, int]]:
    """'4:2,16:3' (or [(4, 2), (16, 3)], or ['4:2', '16:3']) → [(4, 2), (16, 3)]: cells of a tune design as (batch
    size, γ), in the order given; None is none."""
    if isinstance(text, str) and not text.replace(",", "").strip():
        raise InputError(f"{name} is empty: give cells BATCH:GAMMA (e.g. 4:2)", param=name)
    out = []
    for item in _items(text, name):
        if isinstance(item, (tuple, list)):
            if len(item) != 2:
                raise InputError(f"{name}: {item!r} is not a (batch size, γ) pair", param=name)
            out.append((whole_number(item[0], name, "a batch size ≥ 1"), whole_number(item[1], name, "a γ ≥ 1")))
            continue
        if not isinstance(item, str):
            raise InputError(f"{name}: {item!r} is not BATCH:GAMMA (e.g. 4:2) or a (batch size, γ) pair",
                             param=name)
        for part in (p.strip() for p in item.split(",")):
            if not part:
                continue
            b, sep, g = part.partition(":")
            if not sep or not (_WHOLE.fullmatch(b.strip()) and _WHOLE.fullmatch(g.strip())) or int(b) < 1 \
                    or int(g) < 1:
                raise InputError(f"{name}: {part!r} is not BATCH:GAMMA with both whole numbers ≥ 1 (e.g. 4:2)",
                                 param=name)
            out.append((int(b), int(g)))
    return out
