"""Where a tune cell was measured: its `CellKey`, one field per axis of the design, γ apart (γ is what the schedule
chooses, not where it was measured).

Today the design has one axis, the batch size; a sweep's cell directory also names the prompt length it was profiled
at (`bs8-in128/`), which the key keeps (`input_len`) though the model does not fit it yet. Everything that tune keys
— the design, the held-out checks, the rounds' cells, the cells read from a directory, the checks' and the schedule
check's rows, the report — is keyed by a `CellKey`, so an axis added here (and to what profiles and fits it) reaches
them without a change to the workflow that drives them (`nsys_cc.workflows.tune`).

The key's forms: `name` (`bs8`, `bs8-in128`: a cell directory's name and a design engine's label prefix, as
`nsys-cc sweep` and `nsys-cc tune` write them), `label` (`B=8`, `B=8 L=128`: the report's), `text` (`8`: how
`--check B:γ` writes it), `words` (`batch 8`: progress lines) and `to_dict` (`{"batch_size": 8}`: the axes of a JSON
row, an axis not named left out; `from_dict` reads a row back).
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, fields
from typing import Any

# A cell directory's key (or a design engine's, its label's part before the model): `bs<B>`, then `-in<L>` when the
# prompt length is named; a directory's name may go on after it (`bs8-schedule/`, an older tune's; `bs4-in1024-tp2/`,
# a sweep's with ranks).
_NAME = re.compile(r"bs(?P<batch_size>[0-9]+)(?:-in(?P<input_len>[0-9]+))?(?=$|[-_])")


@functools.total_ordering
@dataclass(frozen=True)
class CellKey:
    """A cell's place in the design: its batch size (sequences per step) and, when known, the prompt length of its
    sequences (`input_len`, tokens; None when the directory does not name it). Ordered by batch size, then prompt
    length (unnamed first)."""

    batch_size: int
    input_len: int | None = None

    def _order(self) -> tuple:
        return tuple(-1 if v is None else v for v in (getattr(self, f.name) for f in fields(self)))

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, CellKey):
            return NotImplemented
        return self._order() < other._order()

    @property
    def name(self) -> str:
        """`bs8`, `bs8-in128`: the cell directory's name, the design engine label's prefix."""
        return f"bs{self.batch_size}" + ("" if self.input_len is None else f"-in{self.input_len}")

    @property
    def label(self) -> str:
        """`B=8`, `B=8 L=128`: how the report names the cell (before its γ)."""
        return " ".join(x for x in (f"B={self.batch_size}", self.beyond_batch) if x)

    @property
    def beyond_batch(self) -> str:
        """`L=128`: the key's axes other than the batch size, as `label` writes them ("" with none): what a plot
        against B says beside a cell."""
        return "" if self.input_len is None else f"L={self.input_len}"

    @property
    def text(self) -> str:
        """`8`, `8@128`: the key as `--check B:γ` / `B@L:γ` writes it."""
        return str(self.batch_size) + ("" if self.input_len is None else f"@{self.input_len}")

    @property
    def words(self) -> str:
        """`batch 8`, `batch 8 input 128`: progress lines."""
        return f"batch {self.batch_size}" + ("" if self.input_len is None else f" input {self.input_len}")

    def to_dict(self) -> dict[str, int]:
        """The key's axes as a JSON row's first columns (`{"batch_size": 8}`); an axis not named is left out."""
        return {f.name: v for f in fields(self) if (v := getattr(self, f.name)) is not None}

    @classmethod
    def from_dict(cls, row: dict[str, Any]) -> CellKey:
        """The key of a row that `to_dict` began (the other columns ignored)."""
        return cls(**{f.name: row[f.name] for f in fields(cls) if row.get(f.name) is not None})

    @classmethod
    def from_name(cls, name: str) -> CellKey | None:
        """The key a cell directory's name starts with (`bs8`, `bs8-in128`, `bs8-schedule`, `bs4-in1024-tp2`), or a
        design engine's label before its model (`bs8` of `bs8.pair-target`); None when it starts with none."""
        m = _NAME.match(name)
        if m is None:
            return None
        return cls(**{k: int(v) for k, v in m.groupdict().items() if v is not None})

    def covers(self, other: CellKey) -> bool:
        """Whether `other` is this design key's cell: equal on every axis this key names (a design of batch sizes
        alone covers a cell at any prompt length)."""
        return all(v is None or v == getattr(other, f.name) for f in fields(self) for v in [getattr(self, f.name)])


def keyed(pairs) -> list[tuple[CellKey, int]]:
    """(batch size, γ) pairs (`--check`'s, a design record's) as (key, γ)."""
    return [(CellKey(int(p[0]), int(p[2]) if len(p) > 2 else None), int(p[1])) for p in pairs]


def pairs(cells) -> list[list[int]]:
    """(key, γ) cells as the [[B, γ], …] a design record holds, [B, γ, L] for a key naming its prompt length (the
    inverse of `keyed`)."""
    return [[key.batch_size, g] + ([] if key.input_len is None else [key.input_len]) for key, g in cells]


def design_text(keys: list[CellKey], gammas: list[int]) -> str:
    """`B ∈ [1, 8] × γ ∈ [1, 3]`: a design in words (its keys' batch sizes, and prompt lengths where named)."""
    lens = sorted({k.input_len for k in keys if k.input_len is not None})
    return (f"B ∈ {sorted({k.batch_size for k in keys})}" + (f" × L ∈ {lens}" if lens else "")
            + f" × γ ∈ {list(gammas)}")
