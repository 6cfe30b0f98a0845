"""The cells of a sweep and what each one profiles.

A sweep is the product of batch sizes × input lengths (× target tensor-parallel sizes when given); every cell is
one `nsys-cc profile` run of the same target and drafts with that cell's benchmark settings — interleaved runs by
default, one process per model with `separate` or where `profile` needs it —, in its own sub-directory named after
the cell so a person can read it: `bs4-in1024` (and `-tp2` when ranks are swept). That sub-directory is the profile's
output directory, analysed as `nsys-cc analyze` reads one.
The γ values of `speculate` are not cells: one `profile` run does every γ (its speculative runs), as `profile
--speculate` does.
"""

from __future__ import annotations

import dataclasses
import itertools
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import inputs
from ..errors import InputError
from ..launch import recorders
from ..request import BenchOptions, ProfileRequest

# The arguments of how a cell's models run (`SweepSpec`), handed to `profile` when set.
RUN_KEYS = ("separate", "repeat", "replicas", "precision", "max_repeat")


def positive_ints(values: str | Sequence[int] | None, name: str) -> tuple[int, ...]:
    """`values` (numbers, or a comma-separated string such as "1,4,16") as a tuple of distinct whole numbers ≥ 1 in
    the order given; an error naming the parameter `name` otherwise."""
    items = [p.strip() for p in values.split(",") if p.strip()] if isinstance(values, str) else list(values or ())
    out: list[int] = []
    for v in items:
        try:
            number = int(v) if isinstance(v, str) else v
        except ValueError:
            number = None
        if isinstance(number, bool) or not isinstance(number, int) or number < 1:
            raise InputError(f"{name} must be whole numbers ≥ 1, not {v!r}", param=name)
        if number not in out:
            out.append(number)
    return tuple(out)


@dataclass(frozen=True)
class Cell:
    """One point of the grid. `target_tp` is None when the sweep does not set the target's ranks."""

    batch_size: int
    input_len: int
    target_tp: int | None = None

    @property
    def name(self) -> str:
        """The sub-directory name: `bs4-in1024`, `bs4-in1024-tp2`."""
        tp = "" if self.target_tp is None else f"-tp{self.target_tp}"
        return f"bs{self.batch_size}-in{self.input_len}{tp}"


def cells(batch_sizes: str | Sequence[int], input_lens: str | Sequence[int],
          target_tps: str | Sequence[int] | None = None) -> list[Cell]:
    """Every cell, batch size varying slowest (then input length, then ranks); each axis a sequence or a
    comma-separated string."""
    bs = positive_ints(batch_sizes, "batch_sizes")
    lens = positive_ints(input_lens, "input_lens")
    if not bs or not lens:
        raise InputError("give at least one batch size and one input length (batch_sizes, input_lens)",
                         param="batch_sizes" if not bs else "input_lens")
    tps: tuple[int | None, ...] = positive_ints(target_tps, "target_tps") or (None,)
    return [Cell(b, n, t) for b, n, t in itertools.product(bs, lens, tps)]


@dataclass(frozen=True)
class SweepSpec:
    """What every cell profiles: the models and the `profile` options common to all cells.

    `options` holds the benchmark options (by default a profile's, but 2 output tokens: a sweep's cells are many, and
    `nsys-cc sweep --output-len` defaults to 2 too); each cell replaces its batch size and input length. `speculate`
    is the γ list handed to `profile` (empty: plain runs only). `out_dir` is absolute: on a cluster it must be a path
    every worker sees (shared storage), since traces stay where the workers write them.
    """

    target: str
    drafts: tuple[str, ...]
    out_dir: str
    options: BenchOptions = BenchOptions(output_len=2)
    speculate: tuple[int, ...] = ()
    device: str = "auto"
    timeout: float | None = 1800.0
    trace: str | None = None
    nsys_args: tuple[str, ...] = ()
    seed: int = 0
    force: bool = False
    # How each cell runs its models, as for `profile`: interleaved runs (every model in one process per run, `repeat`
    # runs of `replicas` engines each, the precision loop) unless `separate` (one process per model) or a cell needs
    # separate processes (its target on several ranks); None: `profile`'s defaults.
    separate: bool = False
    repeat: int | None = None
    replicas: int | None = None
    precision: float | None = None
    max_repeat: int | None = None
    profiler: str = "nsys"  # what records each cell's runs (`profile --profiler`: one of `launch.recorders.NAMES`)
    # Which sweep invocation this is (set by `run.sweep`): `force` redoes a cell only on that invocation's first
    # attempt, so a cell retried after a lost worker keeps the models the lost attempt completed.
    run_id: str = ""

    def __post_init__(self) -> None:
        if not self.drafts:
            raise InputError("give at least one draft (drafts)")
        if not isinstance(self.out_dir, (str, os.PathLike)) or isinstance(self.out_dir, bytes) \
                or not os.fspath(self.out_dir):  # '' was the current directory
            raise InputError(f"out_dir: give the sweep a directory, not {self.out_dir!r}", param="out_dir")
        object.__setattr__(self, "out_dir", os.path.abspath(self.out_dir))
        object.__setattr__(self, "speculate", positive_ints(self.speculate, "speculate"))
        # the one rule for every bound: 0 or None, no limit
        object.__setattr__(self, "timeout", inputs.seconds(self.timeout, "timeout", param="timeout"))

    def cell(self, cell: Cell) -> CellSpec:
        return CellSpec(self, cell)

    @classmethod
    def of(cls, target: str, drafts, out_dir: str, *, speculate=None, timeout: float | None = None,
           nsys_args=(), **fields: Any) -> SweepSpec:
        """The sweep of `nsys-cc sweep`'s flags, each the field of its name (the benchmark's — `output_len`,
        `warmup_iters`, `iters`, `enforce_eager`, `vllm_args` — make `options`); `speculate` as the flag gives it
        ("3,1"), a `timeout` of 0 no limit."""
        bench = {k: fields.pop(k) for k in [f.name for f in dataclasses.fields(BenchOptions)] if k in fields}
        if "vllm_args" in bench:
            bench["vllm_args"] = tuple(bench["vllm_args"])
        return cls(target, tuple(drafts), out_dir, BenchOptions(**bench),
                   speculate=positive_ints(speculate, "speculate"), timeout=timeout or None,
                   nsys_args=tuple(nsys_args), **fields)


@dataclass(frozen=True)
class CellSpec:
    """One cell of a sweep: where it runs and the exact `profile` arguments (picklable, JSON-able)."""

    sweep: SweepSpec
    cell: Cell

    @property
    def name(self) -> str:
        return self.cell.name

    @property
    def dir(self) -> Path:
        return Path(self.sweep.out_dir) / self.cell.name

    @property
    def options(self) -> BenchOptions:
        return dataclasses.replace(self.sweep.options, batch_size=self.cell.batch_size,
                                   input_len=self.cell.input_len)

    def profile_kwargs(self) -> dict:
        """Keyword arguments of `workflows.profile.profile` (`nsys_cc.profile`'s) besides target, drafts, out_dir and
        options; the runs' own (`RUN_KEYS`) only where the sweep sets them."""
        s = self.sweep
        kwargs: dict = {"device": s.device, "timeout": s.timeout, "force": s.force, "trace": s.trace,
                        "nsys_args": list(s.nsys_args), "seed": s.seed}
        if s.speculate:
            kwargs["speculate"] = list(s.speculate)
        if self.cell.target_tp is not None:
            kwargs["target_tp"] = self.cell.target_tp
        if recorders.get(s.profiler) is not recorders.DEFAULT:  # (a default cell keeps the fingerprint it had before)
            kwargs["profiler"] = s.profiler
        kwargs.update({k: getattr(s, k) for k in RUN_KEYS if getattr(s, k) is not None and getattr(s, k) is not False})
        return kwargs

    def request(self) -> ProfileRequest:
        """The cell's profile, as `nsys_cc.profile` takes it: the sweep's models and options with the cell's batch
        size, input length and ranks, in the cell's directory (a sweep's timeout of None is no limit: 0)."""
        kwargs = self.profile_kwargs()
        kwargs["timeout"] = 0 if self.sweep.timeout is None else self.sweep.timeout
        return ProfileRequest.of(self.sweep.target, self.sweep.drafts, self.dir, self.options, **kwargs)

    def interleaves(self) -> bool:
        """Whether the cell makes interleaved runs, as `profile` chooses (`workflows.profile.choose`, which checks the
        runs' arguments: InputError)."""
        from ..workflows.profile import choose

        return choose(self.request())

    def dry_run(self) -> str:
        """The exact commands the cell's `profile` would run (`workflows.profile.dry_run`: interleaved runs, or one
        block per model, as the cell chooses); runs nothing, creates nothing."""
        from ..workflows.profile import dry_run

        return dry_run(self.request())

    def fingerprint(self) -> dict:
        """What decides whether an earlier run of this cell can be kept (everything but `force` and `seed`). A cell
        in separate processes has the fingerprint cells had before sweeps made interleaved runs, so a sweep directory
        of that layout is kept by a rerun that asks for `separate`; an interleaved cell's says so, with its runs."""
        kwargs = {k: v for k, v in self.profile_kwargs().items() if k not in ("force", "seed", *RUN_KEYS)}
        out = {"target": self.sweep.target, "drafts": list(self.sweep.drafts),
               "options": {k: list(v) if isinstance(v, tuple) else v
                           for k, v in dataclasses.asdict(self.options).items()},
               **kwargs}
        if self.interleaves():
            from ..launch.interleaved import DEFAULT_REPEAT, DEFAULT_REPLICAS

            s = self.sweep
            out["interleaved"] = {"repeat": DEFAULT_REPEAT if s.repeat is None else s.repeat,
                                  "replicas": DEFAULT_REPLICAS if s.replicas is None else s.replicas,
                                  "precision": s.precision, "max_repeat": s.max_repeat}
        return out

    def to_dict(self) -> dict:
        s = dataclasses.asdict(self.sweep)
        s["options"] = dataclasses.asdict(self.sweep.options)
        return {"sweep": s, "cell": dataclasses.asdict(self.cell)}

    @classmethod
    def from_dict(cls, d: dict) -> CellSpec:
        s = dict(d["sweep"])
        opts = dict(s.pop("options"))
        opts["vllm_args"] = tuple(opts.get("vllm_args", ()))
        s.update(drafts=tuple(s["drafts"]), speculate=tuple(s["speculate"]), nsys_args=tuple(s["nsys_args"]),
                 options=BenchOptions(**opts))
        return cls(SweepSpec(**s), Cell(**d["cell"]))
