"""What says, before any speculative analysis, that a run is speculative: its label and its metrics dump.

A speculative run is labelled `<draft>.spec-g<γ>` (`profile --speculate`; `LABEL_RE`), a proposer without a draft
model by its method (`ngram.spec-g3`, `MODEL_FREE_METHODS`), and such a run leaves vLLM's spec-decode counters in its
metrics dump (`X.metrics.json` beside `X.sqlite`). Every `analyze` asks these questions of each draft, so they live
here, light, and the speculative analysis (`speculative`: `in_place`, `pooled`, `forecast`; `steps`' step tables) is
imported only when a speculative run is among the inputs.
"""

from __future__ import annotations

import os
import re

from ...errors import InputError
from ...trace.registry import trace_stem
from . import acceptance as acceptance_mod

LABEL_RE = re.compile(r"^(?P<draft>.+)\.spec-g(?P<gamma>\d+)$")
# An engine of a tune design (`launch.interleaved.DESIGN_LABEL`): bs<B>[-in<L>].<model>, the cell key first (its batch
# size, and its prompt length where the design names one: `analysis.tune.keys.CellKey.name`), so that a speculative
# engine's label still ends in `.spec-g<γ>`.
DESIGN_LABEL_RE = re.compile(r"^bs(?P<batch>\d+)(?:-in(?P<input_len>\d+))?\.(?P<model>.+)$")
# A design's engines that are no cell of their own, marked in their model part before `.spec-g<k>`: the engine running
# vLLM's whole schedule (`<draft>.schedule.spec-g<k>`) and the one whose schedule gives K = 0 at every batch size
# (`<draft>.k0.spec-g<γ>`: speculation configured, nothing proposed; `analysis.tune.k0`). Neither is a speculative
# cell at γ = k (`design_role`).
SCHEDULE_MARK = ".schedule"
K0_MARK = ".k0"

# vLLM's proposers that run no draft model: their runs hold no draft-forward ranges (nothing to range).
MODEL_FREE_METHODS = ("ngram", "ngram_gpu", "suffix")


def dump_beside(path: str | os.PathLike, dump_path: str | os.PathLike | None = None) -> str | None:
    """The metrics dump of a trace: `dump_path` when given, else `X.metrics.json` beside `X.sqlite` when present."""
    if dump_path is not None:
        return os.fspath(dump_path)
    beside = trace_stem(path) + ".metrics.json"
    return beside if os.path.exists(beside) else None


def model_free_label(label: str) -> bool:
    """Whether a run's label names a proposer without a draft model (`ngram.spec-g3`, as `profile` labels it)."""
    m = LABEL_RE.match(label)
    return m is not None and m.group("draft") in MODEL_FREE_METHODS


def proposes_without_model(path: str | os.PathLike, dump_path: str | os.PathLike | None = None) -> bool:
    """Whether a trace without draft-forward ranges is a speculative run all the same: its metrics dump (beside it,
    or `dump_path`) holds vLLM's spec-decode counters, as a run of a proposer without a draft model (vLLM's
    ngram) leaves them. A plain run dumps no metrics; a dump that cannot be read says nothing."""
    dump = dump_beside(path, dump_path)
    if dump is None:
        return False
    try:
        return acceptance_mod.load(dump).num_speculative_tokens > 0
    except InputError:
        return False


def design_role(label: str) -> str | None:
    """What a tune design's engine is, by its label (`DESIGN_LABEL_RE`): "target" (the plain target of its cell),
    "speculative" (a cell at its γ), "schedule" (vLLM's whole schedule), "k0" (K = 0 at every batch size); None
    when `label` is no design engine's."""
    m = DESIGN_LABEL_RE.match(label)
    if m is None:
        return None
    spec = LABEL_RE.match(m.group("model"))
    if spec is None:
        return "target"
    draft = spec.group("draft")
    return "k0" if draft.endswith(K0_MARK) else "schedule" if draft.endswith(SCHEDULE_MARK) else "speculative"


def design_cell(label: str) -> tuple[int, int | None] | None:
    """(batch size, prompt length or None) of a tune design's engine label; None when it is no design engine's."""
    m = DESIGN_LABEL_RE.match(label)
    if m is None:
        return None
    return int(m.group("batch")), None if m.group("input_len") is None else int(m.group("input_len"))


def refuse_mixed_batch_sizes(labels, where: str) -> None:
    """InputError when `labels` (the engines one analysis takes) are a tune design's engines of several cells
    (`bs<B>[-in<L>].<model>`, `nsys-cc tune`'s `round-<k>/`: batch sizes, or prompt lengths): read together, every
    speculative engine would be measured against the first cell's plain target, and the other cells' targets taken
    for drafts."""
    cells = {c for c in map(design_cell, labels) if c is not None}
    if len(cells) > 1:
        named = ", ".join(f"bs{b}" + ("" if n is None else f"-in{n}") for b, n in sorted(cells, key=lambda c: (
            c[0], -1 if c[1] is None else c[1])))
        raise InputError(f"{where} is a tune design (cells {named} in the same runs, one plain target each): read it "
                         "with `nsys-cc tune` on its tune directory (nsys_cc.tune), or one cell's engines of a run: "
                         "nsys-cc analyze T T --engine bs<B>.<target> --engine bs<B>.<draft>.spec-g<γ> (T: a run's "
                         "trace.sqlite)", param="runs")
