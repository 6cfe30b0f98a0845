"""What one profile is asked to do, as data: `ProfileRequest`, made once — by `nsys-cc profile` from its flags, by
`nsys_cc.profile` from its arguments, by a sweep for each cell, by `tune` for each round — and passed whole to the
profile workflow and the launcher (`nsys_cc.workflows.profile`, `nsys_cc.launch`), then stored as data in the records
a profile leaves (`status.json`, each run's `done.json`: `formats.status_json`, `formats.done_json`), where the
analysis and `tune` read it back (`from_dict`) instead of parsing the commands.

A field is the flag of the same name, as in sqlite-utils: `batch_size` is `--batch-size`, `warmup_iters`
`--num-iters-warmup` (its click `dest`), so an error naming the field (`InputError.param`) names the flag on the
command line. `BenchOptions`, what one benchmark run does, is the request's benchmark part (`options`), the same for
every model of a profile.

This module imports nothing of the package above the base (`arguments`, `errors`, `inputs`): every layer, the
readers of the records included, takes it.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from . import inputs
from .arguments import many
from .errors import InputError

DEFAULT_OUT_DIR = "out/profile"
# Seconds allowed per run (per model with one process each) for the benchmark and for the export, unless a request
# says otherwise (`timeout`: None is this, 0 no limit).
DEFAULT_TIMEOUT_S = 1800.0


@dataclass(frozen=True, kw_only=True)
class BenchOptions:
    """What one benchmark run does (the same for every model of a `profile` call): the benchmark fields of a
    `ProfileRequest`, defined here once (a request is its benchmark options and the rest; `options` gives them).

    input_len / output_len: prompt and generated tokens per sequence; batch_size: sequences per iteration;
    warmup_iters / iters: unmeasured and measured iterations (one `LLM.generate` call each);
    enforce_eager: on a GPU, run vLLM eagerly instead of with its CUDA graphs (the default; a CPU run is always
    eager); vllm_args: extra benchmark options. Keywords only.
    """

    input_len: int = 128
    output_len: int = 32
    batch_size: int = 1
    warmup_iters: int = 5
    iters: int = 5
    enforce_eager: bool = False
    vllm_args: tuple[str, ...] = ()


BENCH_FIELDS = tuple(f.name for f in dataclasses.fields(BenchOptions))


@dataclass(frozen=True)
class ProfileRequest(BenchOptions):
    """One profile: the models, where its files go, the benchmark, how the runs are made and what records them, and
    the analysis' own arguments (`nsys_cc.profile`'s docstring says each; the fields are its keywords and the flags
    of `nsys-cc profile`).

    List-like fields take one item alone too (`drafts="d"`: one draft; `arguments.many`) and are kept as tuples.
    Checked where they are used, before any run (`workflows.profile.check`): this is data, not its rules. The
    benchmark fields (`input_len` … `vllm_args`) are `BenchOptions`', keywords only; `target`, `drafts` and `out_dir`
    may be given by position.
    """

    target: str
    drafts: Sequence[str] = ()  # (kept as a tuple: `__post_init__`)
    out_dir: str | os.PathLike = DEFAULT_OUT_DIR  # (kept as text)
    device: str = "auto"
    timeout: float | None = None  # None: DEFAULT_TIMEOUT_S; 0: no limit
    force: bool = False
    trace: str | None = None
    nsys_args: Sequence[str] = ()
    acceptance: Sequence[float | str] = ()
    seed: int = 0
    speculate: Sequence[int] | str = ()  # (kept as γ values: `parse_gammas`; read them as `gammas`)
    speculative_config: str | None = None
    target_tp: int = 1
    draft_tp: int = 1
    repeat: int | None = None
    precision: float | None = None
    max_repeat: int | None = None
    replicas: int | None = None
    separate: bool = False
    profiler: str = "nsys"

    def __post_init__(self) -> None:
        for name in ("drafts", "vllm_args", "nsys_args"):
            object.__setattr__(self, name, tuple(str(v) for v in many(getattr(self, name), name)))
        object.__setattr__(self, "acceptance", () if self.acceptance is None else tuple(many(self.acceptance,
                                                                                             "acceptance")))
        object.__setattr__(self, "speculate", parse_gammas(self.speculate))
        if not isinstance(self.out_dir, (str, os.PathLike)) or isinstance(self.out_dir, bytes):
            raise InputError(f"out_dir: give a directory, not {type(self.out_dir).__name__} {self.out_dir!r}",
                             param="out_dir")
        object.__setattr__(self, "out_dir", os.fsdecode(os.fspath(self.out_dir)))

    @classmethod
    def of(cls, target: str, drafts: Any = (), out_dir: str | os.PathLike = DEFAULT_OUT_DIR,
           options: BenchOptions | None = None, **fields: Any) -> ProfileRequest:
        """The request of `nsys_cc.profile`'s arguments: `options` (a `BenchOptions`, default the request's own
        benchmark defaults) unpacked into the benchmark fields, the other keywords the fields of their names."""
        bench = {} if options is None else {k: getattr(options, k) for k in BENCH_FIELDS}
        return cls(target, drafts, out_dir, **bench, **fields)

    @property
    def gammas(self) -> list[int]:
        """The γ values of the speculative runs (`speculate`), ascending."""
        return [int(g) for g in self.speculate]

    @property
    def options(self) -> BenchOptions:
        """The benchmark part: what one run of each model does."""
        return BenchOptions(**{name: getattr(self, name) for name in BENCH_FIELDS})

    def replace(self, **changes: Any) -> ProfileRequest:
        """This request with some fields changed (a sweep's cell, a tune round)."""
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        """The request as JSON data, as the records store it (tuples as lists): the models and `out_dir`, the
        benchmark, then the rest, in the order of their definitions."""
        names = ["target", "drafts", "out_dir", *BENCH_FIELDS]
        names += [f.name for f in dataclasses.fields(self) if f.name not in names]
        return {name: list(v) if isinstance(v := getattr(self, name), tuple) else v for name in names}

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any], where: str = "the stored request") -> ProfileRequest:
        """The request a record stored (`to_dict`); fields a newer nsys-cc added are ignored, a missing one takes
        its default. InputError (naming `where`) when a field has the wrong kind of value."""
        inputs.check_shape(doc, SHAPE, where)
        known = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in doc.items() if k in known and (v is not None or k in NULLABLE)})


# What a stored request holds, field by field (`inputs.check_shape`): what `from_dict` accepts.
_NUMBER = (int, float)
SHAPE = {"target": str, "drafts": inputs.Optional(inputs.ListOf(str)), "out_dir": inputs.Optional(str),
         "input_len": inputs.Optional(int), "output_len": inputs.Optional(int), "batch_size": inputs.Optional(int),
         "warmup_iters": inputs.Optional(int), "iters": inputs.Optional(int),
         "enforce_eager": inputs.Optional(bool), "vllm_args": inputs.Optional(inputs.ListOf(str)),
         "device": inputs.Optional(str), "timeout": inputs.Optional(_NUMBER), "force": inputs.Optional(bool),
         "trace": inputs.Optional(str), "nsys_args": inputs.Optional(inputs.ListOf(str)),
         "acceptance": inputs.Optional(inputs.ListOf((float, str))), "seed": inputs.Optional(int),
         "speculate": inputs.Optional(inputs.ListOf(int)), "speculative_config": inputs.Optional(str),
         "target_tp": inputs.Optional(int), "draft_tp": inputs.Optional(int), "repeat": inputs.Optional(int),
         "precision": inputs.Optional(_NUMBER), "max_repeat": inputs.Optional(int),
         "replicas": inputs.Optional(int), "separate": inputs.Optional(bool), "profiler": inputs.Optional(str)}
# The fields whose stored null is a value (None), not a missing field.
NULLABLE = ("timeout", "trace", "speculative_config", "repeat", "precision", "max_repeat", "replicas")



def parse_gammas(value: str | Sequence[int] | None) -> tuple[int, ...]:
    """γ values as a request keeps them (`speculate`): from "1,3" (`--speculate 1,3`) or a sequence of whole
    numbers, each ≥ 1, duplicates dropped, ascending; none (None, ()) is none. InputError naming `speculate`."""
    if value is None or (not isinstance(value, str) and not many(value, "speculate")):
        return ()
    parts = [p.strip() for p in value.split(",")] if isinstance(value, str) else many(value, "speculate")
    found = set()
    for part in parts:
        if part == "":
            continue
        try:
            gamma = int(part)
        except (TypeError, ValueError):
            raise InputError(f"speculate: {part!r} is not a whole number of speculative tokens",
                             param="speculate") from None
        if gamma < 1:
            raise InputError(f"speculate: γ must be ≥ 1, not {gamma}", param="speculate")
        found.add(gamma)
    if not found:
        raise InputError("speculate: give at least one γ, e.g. 1,3", param="speculate")
    return tuple(sorted(found))
