"""`profile` and `dry_run`, the product's main path (`nsys_cc.profile`, `nsys-cc profile`, and each cell of
`nsys-cc sweep`): the choice between interleaved runs (`launch.interleaved`, the default) and one process per model
(`launch.launcher`).

`profile` chooses: interleaved runs, or one process per model (`launcher.profile`) with `separate`, for
tensor-parallel models, and for a speculative config without a draft. It runs and says what the runs did; the analysis
of the directory written and its report are the front door's (`nsys_cc.front.profile`, the facade's `nsys_cc.profile`
and the CLI's: this `profile`, then `nsys_cc.analyze(out_dir)`, then the report), handed down as `finish` (and the
precision loop's c between runs as `measure`): nothing under launch/ builds an analysis.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path

from .. import atomic, inputs
from ..arguments import many
from ..errors import InputError
from . import plan
from .commands import BenchOptions
from .interleaved import (
    DEFAULT_OPTIONS,
    DEFAULT_REPEAT,
    DEFAULT_REPLICAS,
    dry_run_interleaved,
    profile_interleaved,
    validate,
)
from .results import ProfileRun


def interleaves(speculate: Sequence[int] = (), speculative_config: str | None = None, target_tp: int = 1,
                draft_tp: int = 1, separate: bool = False, drafts: Sequence[str] = ("draft",)) -> bool:
    """Whether `profile` makes interleaved runs (every model in one process): yes unless asked for one process per
    model (`separate`), or a model runs on several tensor-parallel ranks, or a speculative config runs without a plain
    draft to compare (ngram alone). Speculative engines join the interleaved runs."""
    del speculate, speculative_config
    return not (separate or target_tp != 1 or draft_tp != 1 or not drafts)


def refuse_repeat(repeat: int | None, precision: float | None, max_repeat: int | None, replicas: int | None,
                   separate: bool, speculative_config: str | None, speculate: Sequence[int]) -> None:
    """InputError when runs are asked for where one process per model runs (`interleaves` is False)."""
    if (repeat or 1) != 1 or precision is not None or max_repeat is not None or (replicas or 1) != 1:
        why = ("separate" if separate else "speculative_config without drafts"
               if speculative_config is not None and not speculate else "target_tp")
        raise InputError(f"repeat, precision, max_repeat and replicas need interleaved runs, which {why} does not "
                         "make yet (one process per model)", param="repeat")


def choose(drafts: Sequence[str], *, speculate: Sequence[int] = (), speculative_config: str | None = None,
           target_tp: int = 1, draft_tp: int = 1, repeat: int | None = None, precision: float | None = None,
           max_repeat: int | None = None, replicas: int | None = None, separate: bool = False) -> bool:
    """Whether `profile` makes interleaved runs with these arguments (`interleaves`), after the checks `profile` makes
    of them before it starts (InputError): for a caller that checks many profiles before any runs (a sweep's
    cells)."""
    if interleaves(speculate, speculative_config, target_tp, draft_tp, separate, drafts):
        validate(DEFAULT_REPEAT if repeat is None else repeat, precision, max_repeat,
                 DEFAULT_REPLICAS if replicas is None else replicas)
        return True
    refuse_repeat(repeat, precision, max_repeat, replicas, separate, speculative_config, speculate)
    return False


def profile(target: str, drafts: Sequence[str], out_dir: str | os.PathLike, options: BenchOptions | None = None, *,
            device: str = "auto", timeout: float | None = None, force: bool = False, trace: str | None = None,
            nsys_args: Sequence[str] = (), seed: int = 0, speculate: Sequence[int] = (),
            speculative_config: str | None = None, target_tp: int = 1, draft_tp: int = 1, repeat: int | None = None,
            precision: float | None = None, max_repeat: int | None = None, replicas: int | None = None,
            separate: bool = False, measure: Callable[[Path, list[str]], dict[str, float]] | None = None,
            finish: Callable[[ProfileRun], ProfileRun] | None = None) -> ProfileRun:
    """Profile the target and every draft with vLLM under nsys, then hand the directory to `finish`: what
    `nsys-cc profile` does through the front door (`nsys_cc.front.profile`, which gives `finish` and `measure`).

    By default every model is timed in one process per run (their iterations interleaved, `replicas` engines of each),
    `repeat` runs one after another (default `DEFAULT_REPEAT`), c pooled over the runs with an interval across them;
    speculative runs (`speculate`, `speculative_config` with drafts) join the same processes. One process per model
    (`launcher.profile`) when `separate`, for tensor-parallel models and for a speculative config without drafts.

    Args:
        target: the target model, as for `launcher.profile` (so are `drafts`, `device`, `force`, `trace`,
            `nsys_args`, `seed` — checked before the runs —, `speculate`, `speculative_config`, `target_tp` and
            `draft_tp`).
        timeout: seconds per run (per model with one process each; default `launcher.DEFAULT_TIMEOUT_S`).
        options: the benchmark's options (default `DEFAULT_OPTIONS`: 32 output tokens).
        repeat: interleaved runs (≥ 1).
        precision: keep adding runs until every draft's decode c interval lies within ±precision·c (e.g. 0.05), at
            most `max_repeat` runs (default `DEFAULT_MAX_REPEAT`).
        replicas: engines of each model in a run (default `DEFAULT_REPLICAS`).
        separate: one process per model (repeat 1 only).
        measure: with a `precision`, each draft's decode c precision from the runs so far
            (`analysis.coefficient.of_profile.decode_precision_of`); required with a precision.
        finish: the analysis and report of the directory, when it holds enough (`ProfileRun.analysable`);
            none: the runs only (`result` and `report` stay None).
    Returns:
        A `results.ProfileRun` (with `interleaved`, the runs, and `stopped_by`, what ended them).
    """
    from ..analysis.coefficient.arguments import check_seed
    from . import launcher

    check_seed(seed)  # before minutes of profiling, not after
    drafts, speculate = [str(d) for d in many(drafts, "drafts")], many(speculate, "speculate")
    nsys_args = [str(a) for a in many(nsys_args, "nsys_args")]
    options = DEFAULT_OPTIONS if options is None else options
    # the one rule for every bound: nan, inf or a negative number never reaches the benchmark (issue 32, P10/P11)
    timeout = inputs.seconds(timeout, "timeout", default=launcher.DEFAULT_TIMEOUT_S, param="timeout") or 0
    if not interleaves(speculate, speculative_config, target_tp, draft_tp, separate, drafts):
        refuse_repeat(repeat, precision, max_repeat, replicas, separate, speculative_config, speculate)
        return launcher.profile(target, drafts, out_dir, options, device=device, timeout=timeout or None, force=force,
                                trace=trace, nsys_args=nsys_args, seed=seed, speculate=speculate,
                                speculative_config=speculative_config, target_tp=target_tp, draft_tp=draft_tp,
                                finish=finish)
    if precision is not None and measure is None:
        raise TypeError("launch.profile.profile(precision=…) needs measure= (nsys_cc.profile gives it)")
    atomic.check_out_dir(out_dir, "the profile run")
    return profile_interleaved(target, drafts, out_dir, options, device=device, timeout=timeout or None, force=force,
                               trace=trace, nsys_args=nsys_args,
                               repeat=DEFAULT_REPEAT if repeat is None else repeat, precision=precision,
                               max_repeat=max_repeat, replicas=DEFAULT_REPLICAS if replicas is None else replicas,
                               speculate=speculate, speculative_config=speculative_config, measure=measure,
                               finish=finish)


def dry_run(target: str, drafts: Sequence[str], out_dir: str | os.PathLike, options: BenchOptions | None = None, *,
            device: str = "auto", trace: str | None = None, nsys_args: Sequence[str] = (),
            speculate: Sequence[int] = (), speculative_config: str | None = None, target_tp: int = 1,
            draft_tp: int = 1, repeat: int | None = None, precision: float | None = None,
            max_repeat: int | None = None, replicas: int | None = None, separate: bool = False) -> str:
    """The exact commands `profile` would run (runs nothing, creates nothing): an interleaved run's, or one block
    per model (`plan.dry_run`)."""
    from ..trace.nsys import find_nsys
    options = DEFAULT_OPTIONS if options is None else options
    if not interleaves(speculate, speculative_config, target_tp, draft_tp, separate, drafts):
        refuse_repeat(repeat, precision, max_repeat, replicas, separate, speculative_config, speculate)
        return plan.dry_run(target, drafts, out_dir, options, device=device, trace=trace, nsys_args=nsys_args,
                            speculate=speculate, speculative_config=speculative_config, target_tp=target_tp,
                            draft_tp=draft_tp)
    return dry_run_interleaved(target, drafts, out_dir, options, nsys=find_nsys() or "nsys",
                               gpu=plan.uses_gpu(device), trace=trace, nsys_args=nsys_args,
                               repeat=DEFAULT_REPEAT if repeat is None else repeat, precision=precision,
                               max_repeat=max_repeat, replicas=DEFAULT_REPLICAS if replicas is None else replicas,
                               speculate=speculate, speculative_config=speculative_config)
