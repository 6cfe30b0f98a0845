"""One profile, run and analysed as `nsys_cc.profile` makes it — the front door's `profile` and every sweep cell alike.

- `profile`: the runs (`launch.profile.profile`: interleaved runs by default, one process per model with `separate`,
  for tensor-parallel models, and for a speculative config without drafts), with the analysis handed down: the
  precision loop's c between runs (`measure`: `analysis.coefficient.of_profile.decode_precision_of`) and the end
  (`finish`);
- `finish`: the analysis of the directory the runs wrote, as `nsys_cc.analyze(out_dir)` makes it
  (`analysis.coefficient.of_profile.analyze_profile`), and its report with the runs' notes and tables.

A sweep cell's directory is therefore a profile directory, and its rows are those of `nsys_cc.analyze(cell_dir)`.
This lives in the sweep floor, the lowest that may build an analysis around the runs (nothing under `launch/`
does), so that the front door (`nsys_cc.front.profile`, `front.finish`) and a cell (`sweep.cell.run_cell`, below the
front door) call the same two functions.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING

from ..arguments import many

if TYPE_CHECKING:
    from ..launch.commands import BenchOptions
    from ..launch.results import ProfileRun


def profile(target: str, drafts: Sequence[str], out_dir: str | os.PathLike, options: BenchOptions | None = None, *,
            acceptance: float | str | Sequence[float | str] = (), seed: int = 0, **runs) -> ProfileRun:
    """The runs of `launch.profile.profile` (`runs`: its keyword arguments, the choice between interleaved and
    separate processes included), then `finish` with `acceptance` and `seed`; the precision loop's c between runs
    with the same `seed`. Returns the `ProfileRun`, its `result` and `report` set when the runs left enough to
    analyse."""
    from ..analysis.coefficient.arguments import check_seed
    from ..analysis.coefficient.of_profile import decode_precision_of
    from ..launch import profile as launch_profile

    check_seed(seed)  # before minutes of profiling, not after
    options = launch_profile.DEFAULT_OPTIONS if options is None else options
    measure = functools.partial(decode_precision_of, output_len=options.output_len, seed=seed)
    done = functools.partial(finish, options=options, acceptance=many(acceptance, "acceptance"), seed=seed)
    return launch_profile.profile(target, drafts, out_dir, options, seed=seed, measure=measure, finish=done, **runs)


def finish(run: ProfileRun, options: BenchOptions | None = None, *, acceptance: Sequence[float | str] = (),
           seed: int = 0) -> ProfileRun:
    """The end of `profile`: the analysis of the directory the runs wrote, as `nsys_cc.analyze(run.out_dir)` makes it
    (`analysis.coefficient.of_profile.analyze_profile`), and its report with the runs' notes and tables (the machine's
    state), when the runs left enough to analyse (`run.analysable`, `launch.results.conclude`). Returns `run`, its
    `result` and `report` set."""
    from .. import progress
    from ..analysis.coefficient.of_profile import analyze_profile
    from ..report import write_report

    if not run.analysable:
        return run
    output_len = None if options is None else options.output_len
    with progress.step(run.step, always=True):
        run.result = analyze_profile(run.out_dir, output_len=output_len, acceptance=acceptance, seed=seed)
    run.report = write_report(run.result, run.out_dir, extra_notes=run.notes, extra_tables=run.tables or None)
    return run
