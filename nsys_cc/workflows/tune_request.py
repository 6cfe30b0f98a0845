"""What `tune` is asked, as one typed value: `TuneRequest`. `nsys-cc tune` makes it from its flags (each flag's
destination is the field of the same name: `--batch-size` → `batch_sizes`, `--no-plot` → `plot`), the library from
`nsys_cc.tune`'s keywords (the same names), and `nsys_cc.workflows.tune.tune` takes it whole.

A request is checked when it is made (`__post_init__`): the design's batch sizes, γ values and held-out cells read
by `nsys_cc.arguments`' rules (a flag's text and a library value alike), the workload, and the forecast's size within
its bounds; each failure an InputError naming the field, which the CLI writes as its flag. What only profiling needs
(the benchmark's counts, the models' context, the profiler and the environment) is checked by
`check_profiling`, before `-o` is made or locked.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..analysis.tune import keys, schedule
from ..arguments import cell_checks, whole_numbers
from ..errors import InputError

if TYPE_CHECKING:
    from ..request import BenchOptions

# The most (batch size, γ) pairs a forecast covers (max_batch_size × max_gamma), and bootstrap values it draws
# (× draws): 1024 × 8 takes ~1 s and ~40 MB here; batch size 40000 ran on for minutes and gigabytes.
MAX_FORECAST_CELLS = 8192
MAX_FORECAST_DRAWS = 1 << 25
DEFAULT_DESIGN = ((1, 8), (1, 3))  # profiling without a design: B ∈ {1, 8} × γ ∈ {1, 3}
DEFAULT_OUT = "out/tune"


@dataclass(frozen=True)
class TuneRequest:
    """What `tune` is asked (module docstring). Profiling when `source` is None.

    Attributes:
        source: an existing tune or sweep directory to read (nothing is profiled); None: profile `target` with
            `draft` into `out_dir`.
        target: the target model (as for `profile`), to profile.
        draft: the draft model (as for `profile`).
        batch_sizes: batch sizes of the design the model is fitted on (profiling: default 1, 8; reading: the
            directory's tune.json design; without either every cell is fitted). "1,8", [1, 8] or 8.
        speculate: γ values of the design (every batch size × every γ; profiling: default 1, 3).
        check: extra held-out cells to profile, "B:γ,…" or [(B, γ), …]; every measured cell outside the design
            is held out and checked.
        out_dir: report directory (profiling: the cells too, default out/tune; reading: written only when given).
        max_batch_size: the schedule covers batch sizes 1…max_batch_size.
        max_gamma: γ searched in 1…max_gamma.
        input_len: prompt tokens per sequence (profiling): one value, or several ("128,1024") — a second design
            axis: the design's cells are then every (batch size, prompt length), `CellKey(B, L)`.
        context: the prompt length L whose schedule is vLLM 0.32's table and the --speculative-config (default:
            the median of the measured prompt lengths).
        precision: measure each round's runs until the speedup's interval is within ±precision (as `profile
            --precision`), at most `max_repeat` runs.
        max_repeat: the most runs a precision may take.
        output_len: generated tokens per sequence (profiling).
        warmup_iters: warm-up iterations (profiling).
        iters: measured iterations (profiling).
        repeat: interleaved runs per round (profiling; every cell is in every run).
        replicas: engines of each model per run (profiling).
        device: "auto", "cpu" or "gpu" (profiling).
        profiler: what records the rounds' runs (profiling): "nsys", or "torch" (vLLM's torch profiler, no nsys).
        trace: nsys -t value (profiling).
        force: profile again cells an earlier run completed.
        plot: draw tune.png.
        confirm: after the fit, profile the benchmark workload's γ at each measured batch size where it was not
            measured (a held-out cell more), so that the schedule is checked against the best fixed γ measured there:
            a new round with every cell so far and those, in the same runs (`nsys_cc.workflows.tune`).
        workload: whose schedule is `num_speculative_tokens_per_batch_size` and the --speculative-config:
            "server" (steady state, continuous batching: what vLLM's table is for) or "benchmark" (static batches
            of `output_len` tokens, as the measured cells are). Both schedules are in the result
            (`result.schedules`); the schedule check always checks the benchmark's against the measured cells.
        run_schedule: at the end, one round more with every cell and an engine running the benchmark workload's
            whole schedule in its --speculative-config at each measured batch size (vLLM 0.32's runners, V1 on the
            CPU and V2 on a GPU, both read the table), compared in the schedule check with the fixed-γ cells of that
            round; None (default): on a GPU only.
        seed: seed of the bootstrap intervals.
        draws: bootstrap draws of the intervals.
    """

    source: str | os.PathLike | None = None
    target: str | None = None
    draft: str | None = None
    batch_sizes: Sequence[int] = ()
    speculate: Sequence[int] = ()
    check: Sequence[tuple[int, int]] = ()
    out_dir: str | os.PathLike | None = None
    max_batch_size: int = schedule.DEFAULT_MAX_BATCH
    max_gamma: int = schedule.DEFAULT_MAX_GAMMA
    input_len: int | Sequence[int] = 128
    context: int | None = None
    precision: float | None = None
    max_repeat: int | None = None
    output_len: int = 32
    warmup_iters: int = 2
    iters: int = 5
    repeat: int = 3
    replicas: int = 1
    device: str = "auto"
    profiler: str = "nsys"
    trace: str | None = None
    force: bool = False
    plot: bool = True
    confirm: bool = True
    workload: str = "server"
    run_schedule: bool | None = None
    seed: int = 0
    draws: int = schedule.BOOTSTRAP_DRAWS

    def __post_init__(self) -> None:
        """The design read by `nsys_cc.arguments`' rules (`batch_sizes` and `speculate` as sorted whole numbers,
        `check` as (batch size, γ) pairs: each also taken as text, "1,8" and "4:2,16:3", or one number; none
        given: []), the workload, and the forecast's size checked."""
        set_ = object.__setattr__
        set_(self, "batch_sizes", whole_numbers(self.batch_sizes, "batch_sizes"))
        set_(self, "speculate", whole_numbers(self.speculate, "speculate"))
        set_(self, "input_len", _lengths(self.input_len))
        set_(self, "check", _checks_at(self.check))
        if not isinstance(self.workload, str) or self.workload not in schedule.WORKLOADS:
            raise InputError(f"workload must be one of {', '.join(schedule.WORKLOADS)}, not {self.workload!r}",
                             param="workload")
        for name in ("max_batch_size", "max_gamma", "draws"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise InputError(f"{name} must be a whole number ≥ 1, not {v!r}", param=name)
        self._check_forecast_size()

    def _check_forecast_size(self) -> None:
        b, g = self.max_batch_size, self.max_gamma
        cells = b * g
        if cells > MAX_FORECAST_CELLS:
            raise InputError(f"max_batch_size × max_gamma = {b} × {g} = {cells} forecast cells: at most "
                             f"{MAX_FORECAST_CELLS} (e.g. max_batch_size {max(1, MAX_FORECAST_CELLS // g)} with "
                             f"max_gamma {min(g, MAX_FORECAST_CELLS)}), so that a forecast takes seconds, not hours",
                             param="max_batch_size" if b >= g else "max_gamma")
        if cells * self.draws > MAX_FORECAST_DRAWS:
            raise InputError(f"draws {self.draws} × {cells} forecast cells: at most {MAX_FORECAST_DRAWS} bootstrap "
                             f"values (draws ≤ {MAX_FORECAST_DRAWS // cells} here)", param="draws")

    @property
    def input_lens(self) -> tuple[int, ...]:
        """The prompt lengths of the design (`input_len` as checked: sorted whole numbers)."""
        v = self.input_len
        return (v,) if isinstance(v, int) else tuple(v)

    @property
    def profiling(self) -> bool:
        """Whether the request profiles (no `source` to read)."""
        return self.source is None

    @property
    def profiled_out(self) -> str | os.PathLike:
        """Where a profiling tune writes: `out_dir`, default out/tune."""
        return DEFAULT_OUT if self.out_dir is None else self.out_dir

    def design(self, recorded: dict | None = None) -> tuple[list[keys.CellKey], list[int]]:
        """(the design's cell keys, its γ values): the request's, else (reading) the `recorded` design of the
        directory, else (profiling) the default; [] where neither names one (every cell is fitted)."""
        rec = recorded or {}
        default = DEFAULT_DESIGN if self.profiling else ((), ())
        bs = self.batch_sizes or list(rec.get("batch_sizes", [])) or list(default[0])
        gs = self.speculate or list(rec.get("speculate", [])) or list(default[1])
        lens = list(self.input_lens) if self.profiling else list(rec.get("input_lens", []))
        if len(lens) >= 2:  # a second axis: every (B, L)
            return [keys.CellKey(b, L) for b in bs for L in lens], list(gs)
        return [keys.CellKey(b) for b in bs], list(gs)

    @property
    def checks(self) -> list[tuple[keys.CellKey, int]]:
        """The held-out cells asked for, (key, γ), in the order given."""
        return [(keys.CellKey(int(c[0]), int(c[2]) if len(c) > 2 else None), int(c[1])) for c in self.check]

    def check_profiling(self) -> None:
        """What the rounds would refuse, before `-o` is made or locked: the profiler and its trace option, the
        benchmark's counts, a sequence longer than the models' context (`launch.plan.check_context`:
        `--input-len 1000000000` reached vLLM) and the environment (`launch.environment.check`)."""
        from ..launch import environment, interleaved, plan, recorders
        from .profile import check_profiler

        check_profiler(self.profiler, trace=self.trace)
        options = self.bench_options()
        plan.check_options(options)
        plan.check_context(interleaved.engines_for(str(self.target), [str(self.draft)]), options)
        environment.check(recorders.get(self.profiler), gpu=self.uses_gpu)

    def bench_options(self) -> BenchOptions:
        """The benchmark's options of every round's runs (`request.BenchOptions`)."""
        from ..request import BenchOptions

        return BenchOptions(input_len=max(self.input_lens), output_len=self.output_len, warmup_iters=self.warmup_iters,
                            iters=self.iters)

    @property
    def uses_gpu(self) -> bool:
        """Whether the rounds run on the GPU (`device`, "auto": when one is here)."""
        from ..launch import plan

        return plan.uses_gpu(self.device)


def _checks_at(value) -> list[tuple]:
    """`--check`'s cells: `B:γ` (any prompt length) and `B@L:γ` (at prompt length L), text or pairs/triples
    (B, γ[, L]); as (B, γ) or (B, γ, L) tuples in the order given."""
    if isinstance(value, str) and "@" not in value:
        return list(cell_checks(value))
    items = value.split(",") if isinstance(value, str) else list(value or [])
    plain, out = [], []
    for item in items:
        if isinstance(item, str) and "@" in item:
            b, _, rest = item.strip().partition("@")
            L, sep, g = rest.partition(":")
            (bb, gg), = cell_checks(f"{b}:{g}") if sep else cell_checks("x")
            out.append((bb, gg, whole_numbers(L, "check")[0]))
        elif isinstance(item, (tuple, list)) and len(item) == 3:
            (bb, gg), = cell_checks([tuple(item[:2])])
            out.append((bb, gg, whole_numbers(item[2], "check")[0]))
        else:
            plain.append(item)
    return [*cell_checks(plain), *out] if plain or not out else out


def _lengths(value) -> tuple[int, ...]:
    """`input_len` as sorted prompt lengths ≥ 1 ("128,1024", [128, 1024] or 128); no upper bound here — a length
    past the models' context is refused by `check_profiling`, with the context named."""
    items = value.split(",") if isinstance(value, str) else [value] if isinstance(value, int) else list(value)
    out = set()
    for item in items:
        text = item.strip() if isinstance(item, str) else item
        if isinstance(text, bool) or not (isinstance(text, int) or (isinstance(text, str) and text.isdigit())) \
                or int(text) < 1:
            raise InputError(f"input_len: {item!r} is not a whole number ≥ 1 (e.g. 128 or 128,1024)",
                             param="input_len")
        out.add(int(text))
    if not out:
        raise InputError("input_len is empty: give prompt lengths ≥ 1 (e.g. 128,1024)", param="input_len")
    return tuple(sorted(out))
