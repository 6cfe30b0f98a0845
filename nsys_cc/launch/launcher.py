"""One process per model, the way the profile workflow (`nsys_cc.workflows.profile`) takes with `separate`,
tensor-parallel models and a speculative config without drafts: profile each model in turn under nsys with vLLM's
latency benchmark, then hand the directory to `finish` (the workflow's analysis, as `analyze` makes it, and the
report).

For every model in turn (target first): `nsys profile … python -m nsys_cc.vllm.bench …` with the NVTX plugin
on, `nsys export` to SQLite, a check that the trace holds forward ranges, then a `<label>.done.json` marker.
Everything lands in the output directory as `<label>.{nsys-rep,sqlite,bench.json,log,done.json}`, plus
`status.json` (each model's state, rewritten after every model) and the report of `nsys_cc.report`.

Reliability: a model that fails (bad config, crash, `timeout` seconds exceeded, no forward ranges) is recorded
with its reason and log, and the next model still runs; Ctrl-C stops the current model's processes, writes
`status.json` and the report on the models completed so far (when there are enough), then re-raises. A rerun
with the same output directory skips every model whose marker records the same commands (`force` redoes them).
A new attempt never touches the results of an earlier one until it completed: it writes its trace set in a fresh
folder under `<out>/.nsys-cc-attempts/` (the commands `--dry-run` prints, with that folder in place of the output
directory) and renames it over the earlier files only when the model completed; a failed or interrupted attempt leaves
the earlier trace set, its marker and the report made of them as they were (`<label>.log` is the latest attempt's).
Only files nsys-cc can prove it wrote are ever replaced (`resume.in_the_way`: a user's own `<label>.log` or trace
there is refused before the first run).
The report is written when the target and at least one draft completed; its notes list the models that did not.

Speculative runs (`speculate`, a list of γ, and/or `speculative_config`, vLLM's JSON): after the plain runs, for
each draft D and γ one run of the target with `--speculative-config {"method": "draft_model", "model": D,
"num_speculative_tokens": γ}` (fields of `speculative_config` as the base, so other proposers work too), labelled
`<D>.spec-g<γ>`, role "speculative", with vLLM's metrics dumped to `<label>.metrics.json`. `speculative_config`
without `speculate` is one run with that JSON as given, labelled after its draft model (or its method, e.g.
`ngram.spec-g3`) and its `num_speculative_tokens`. Every run uses the same benchmark options. The plain analysis
compares the plain runs; the speculative traces are handed on as `ProfileOutcome.speculative`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence

from .. import progress
from ..files.folder import Folder, check_out_dir
from . import environment
from .commands import UNDER, BenchOptions, nsys_for
from .plan import config_models, describe, plan, uses_gpu
from .process import preflight, prepare, run_model
from .results import ProfileOutcome, conclude, write_status
from .resume import clean_attempts, is_complete, refuse_in_the_way

DEFAULT_TIMEOUT_S = 1800


def profile_separately(target: str, drafts: Sequence[str], out_dir: str | os.PathLike,
                       options: BenchOptions = BenchOptions(), *, device: str = "auto",
                       timeout: float | None = DEFAULT_TIMEOUT_S, force: bool = False,
                       trace: str | None = None, nsys_args: Sequence[str] = (), seed: int = 0,
                       speculate: Sequence[int] = (), speculative_config: str | None = None, target_tp: int = 1,
                       draft_tp: int = 1, finish: Callable[[ProfileOutcome], ProfileOutcome] | None = None,
                       profiler: str = "nsys") -> ProfileOutcome:
    """Profile the target and every draft, one process per model, then hand the directory to `finish` (the
    workflow's analysis and report, `workflows.profile.finish`; none: the runs only; see the module docstring).
    The profile workflow (`nsys_cc.profile`, `nsys-cc profile`) times every model in one process per run, over
    several runs, and comes here for what it cannot interleave and for `separate`.

    Args:
        target, drafts: model names (shipped shapes, directories with a config.json, Hugging Face ids).
        out_dir: where traces, bench JSON files, logs, status.json and the report go (created).
        options: the benchmark's options. device: "auto" (GPU when `nvidia-smi -L` lists one), "cpu" or "gpu".
        timeout: seconds allowed per model for the benchmark and for the export (None: no limit).
        force: profile again models that an earlier run completed. trace: nsys `-t` instead of the default.
        nsys_args: extra `nsys profile` options. seed: the analysis' bootstrap seed, checked before the runs (the
            analysis is `finish`'s, which binds it).
        speculate: γ values of the speculative runs (each draft with `draft_model`); speculative_config: vLLM's
            speculative config JSON, the base of those runs, or alone one more run (module docstring).
        target_tp, draft_tp: tensor-parallel ranks of the target and of each draft (one process each when 1).
        finish: called with the `ProfileOutcome` (`results.conclude`) at the end, Ctrl-C included, when it is
            `analysable`; it analyses the directory and writes the report (`workflows.profile.finish`).
        profiler: "nsys", or "torch": vLLM's torch profiler instead, no nsys needed (`commands`).
    Returns:
        A `ProfileOutcome`; `result`/`report` stay None when the target or every draft failed, or without `finish`.
    """
    from ..analysis.coefficient.arguments import check_seed

    check_seed(seed)  # before minutes of profiling, not after
    check_out_dir(out_dir, "the profile run")
    gpu = uses_gpu(device)
    nsys = nsys_for(profiler)
    runs = plan(target, drafts, out_dir, options, nsys=nsys, gpu=gpu, trace=trace, nsys_args=nsys_args,
                speculate=speculate, speculative_config=speculative_config, target_tp=target_tp, draft_tp=draft_tp,
                profiler=profiler)
    for warning in [*environment.check(profiler, gpu=gpu, tp=max(target_tp, draft_tp)), *preflight(nsys)]:
        progress.say(f"warning: {warning}")
    out = runs[0].files.out_dir
    refuse_in_the_way(runs)  # a file of the user's at a name a run writes: refused now, nothing changed
    prepare(out, [m for r in runs for m in (r.model, *config_models(r.commands.profile))])
    with Folder(out).lock("the profile run"):  # one writer per out_dir, as the interleaved runs
        for note in clean_attempts(out):  # what killed calls' attempts left (an orphan's still running: left)
            progress.say(f"note: {note}")
        return _profile_models(runs, out, force=force, gpu=gpu, timeout=timeout, finish=finish, profiler=profiler)


def _profile_models(runs, out, *, force: bool, gpu: bool, timeout: float | None, finish, profiler: str = "nsys"):
    try:
        for i, run in enumerate(runs, 1):
            where = f"[{i}/{len(runs)}] {describe(run)}"
            if not force and is_complete(run):
                run.status = "resumed"
                progress.say(f"{where}: already complete in {out} (force=True profiles it again)")
                continue
            progress.say(f"{where}: profiling under {UNDER[profiler]} ({'GPU' if gpu else 'CPU'}) …")
            run_model(run, timeout=timeout)
            if run.status == "resumed":  # a rerun that failed, the earlier trace set kept
                progress.say(f"{where}: {run.reason}")
            elif run.ok:
                progress.say(f"{where}: profiled in {run.seconds:.1f} s")
            else:
                progress.say(f"{where}: FAILED after {run.seconds:.1f} s: {run.reason} (log: {run.files.log})")
            write_status(out, runs)
    except KeyboardInterrupt:
        for run in runs:
            if run.status == "planned":
                run.status = "not run"
        write_status(out, runs)
        partial = conclude(runs, out)
        if finish is not None and partial.analysable:
            partial = finish(partial)
        if partial.report is not None:
            progress.say(f"interrupted: report on the models completed so far: {partial.report}")
        raise
    done = conclude(runs, out)
    return finish(done) if finish is not None and done.analysable else done

