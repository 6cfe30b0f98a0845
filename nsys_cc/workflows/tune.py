"""`nsys_cc.tune` / `nsys-cc tune`: profile a design of (batch size, γ) cells, fit the step cost model across the batch,
forecast every batch size and γ, check the cells it was not fitted on, and write the schedule vLLM's dynamic
speculative decoding takes (`analysis.tune` has the model, the schedule and the reading of tune directories;
`report.tune_text` the words; docs/tune.md the whole story). The facade's `nsys_cc.tune` is this `tune`.

Directory layout (what profiling writes, what reading takes): `DIR/round-1/`, one interleaved profile directory
holding EVERY cell, design and held-out alike, in the same runs: per batch size B the plain target (`bs<B>.<target>`)
and a speculative engine per γ measured there (`bs<B>.<draft>.spec-g<γ>`), one vLLM engine per model serving every
batch size (`launch.interleaved.design_engines`). Cells fitted and cells checked are then timed in the same processes:
measured one batch size per process, minutes apart, processes differed in speed by up to a quarter and the
speculative parts did not follow in proportion, so a fit across processes inherited that (docs/tune.md). When the
schedule's γ was not measured at a measured batch size, `round-2/` (at most `SCHEDULE_ROUNDS` more) holds every cell
so far and those, again in the same runs, and the result is the last round's. Then `DIR/tune.json` (the design, the
held-out cells and every result), `schedule.json`, `forecast.csv`, `checks.csv`, `tune.png`, `report.md`. An older
tune's directory (`bs<B>/`, one profile directory per batch size) and a sweep directory (`bs<B>-in<L>/`) read too.
"""

from __future__ import annotations

import functools
import inspect
import json
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from .. import inputs, progress
from ..analysis.profile_dir.outputs import RUN_GLOB
from ..analysis.tune import directories, schedule
from ..errors import InputError
from ..files import publishing
from ..files.folder import Folder, check_out_dir
from ..formats import done_json, tune_json
from ..report.tune_text import render_text

SCHEDULE_ROUNDS = 3  # at most this many rounds of profiling the schedule's γ where it was not measured
CPU_NOTE = ("vLLM 0.32 reads num_speculative_tokens_per_batch_size only in its V2 GPU model runner; the V1 runner "
            "(the CPU build's) accepts the config and ignores the schedule, so on the CPU the schedule is checked "
            "against the fixed-γ cells measured at each batch size, not run")


_WHOLE = re.compile(r"[0-9]{1,9}")  # ASCII digits only: `isdigit()` takes '²', which `int()` refuses


def _whole(part, name: str, what: str = "a whole number ≥ 1") -> int:
    """`part` (an int, or its decimal text) as a whole number ≥ 1 below a billion; InputError naming `name`."""
    if isinstance(part, int) and not isinstance(part, bool) and 1 <= part < 10**9:
        return part
    text = part.strip() if isinstance(part, str) else None
    if text is None or not _WHOLE.fullmatch(text) or int(text) < 1:
        raise InputError(f"{name}: {part!r} is not {what}", param=name)
    return int(text)


def _items(value, name: str) -> list:
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


def parse_checks(text: str | Sequence | None) -> list[tuple[int, int]]:
    """'4:2,16:3' (or [(4, 2), (16, 3)], or ['4:2', '16:3']) → [(4, 2), (16, 3)] (batch size : γ)."""
    if isinstance(text, str) and not text.replace(",", "").strip():
        raise InputError("check is empty: give cells BATCH:GAMMA (e.g. 4:2)", param="check")
    out = []
    for item in _items(text, "check"):
        if isinstance(item, (tuple, list)):
            if len(item) != 2:
                raise InputError(f"check: {item!r} is not a (batch size, γ) pair", param="check")
            out.append((_whole(item[0], "check", "a batch size ≥ 1"), _whole(item[1], "check", "a γ ≥ 1")))
            continue
        if not isinstance(item, str):
            raise InputError(f"check: {item!r} is not BATCH:GAMMA (e.g. 4:2) or a (batch size, γ) pair",
                             param="check")
        for part in (p.strip() for p in item.split(",")):
            if not part:
                continue
            b, sep, g = part.partition(":")
            if not sep or not (_WHOLE.fullmatch(b.strip()) and _WHOLE.fullmatch(g.strip())) or int(b) < 1 \
                    or int(g) < 1:
                raise InputError(f"check: {part!r} is not BATCH:GAMMA with both whole numbers ≥ 1 (e.g. 4:2)",
                                 param="check")
            out.append((int(b), int(g)))
    return out


def _ints(value, name: str) -> list[int]:
    """The whole numbers ≥ 1 of `value` (`_items`), sorted, each once; None is none (the default). Text that names
    none (`''`, `','`) is an InputError: `tune --batch-size ''` profiled the default design."""
    if isinstance(value, str) and not value.replace(",", "").strip():
        raise InputError(f"{name} is empty: give whole numbers ≥ 1 (e.g. 1,8)", param=name)
    out = []
    for item in _items(value, name):
        for part in (item.split(",") if isinstance(item, str) else [item]):
            if isinstance(part, str) and not part.strip():
                continue
            out.append(_whole(part, name))
    return sorted(set(out))


@dataclass
class TuneReport:
    """The fit (`result`, an `analysis.tune.schedule.TuneResult`) and the files written (`files`, empty without
    out_dir). `trusted`: whether the schedule is recommended (False when a held-out cell missed its measurement by more
    than 10 % or the forecast has no usable interval: `trust_reason` says why, `next_steps` what to measure next; the
    fitted table is then `fitted_schedule`, and `schedule` None)."""

    result: schedule.TuneResult
    files: dict[str, Path] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    @property
    def trusted(self) -> bool:
        return self.result.trusted

    @property
    def trust_reason(self) -> str:
        return self.result.trust_reason

    @property
    def next_steps(self) -> str:
        return self.result.next_steps

    @property
    def schedule(self) -> list[list[int]] | None:
        """The recommended num_speculative_tokens_per_batch_size; None when it is not recommended (`trusted`)."""
        return self.result.schedule if self.result.trusted else None

    @property
    def fitted_schedule(self) -> list[list[int]]:
        """The table the fit gives, recommended or not."""
        return self.result.schedule

    def to_dict(self) -> dict:
        doc = self.result.to_dict()
        doc["notes"] = [*doc["notes"], *self.notes]
        return doc


def _profile_round(target: str, draft: str, out: Path, cells: dict[int, list[int]], *, input_len: int,
                   output_len: int, warmup_iters: int, iters: int, repeat: int, replicas: int, device: str,
                   trace: str | None, force: bool, schedule: str | None = None, profiler: str = "nsys") -> None:
    """Every cell of `cells` (batch size → γ values) in the same interleaved runs, into `out` (a round's directory):
    one vLLM engine per model serves every batch size (`launch.interleaved.design_engines`); with `schedule` (a
    --speculative-config), an engine running it at every batch size besides."""
    from ..launch import interleaved, plan
    from ..launch.commands import BenchOptions

    options = BenchOptions(input_len=input_len, output_len=output_len, warmup_iters=warmup_iters, iters=iters)
    gpu = plan.uses_gpu(device)
    engines = interleaved.design_engines(target, draft, cells, options, gpu, schedule=schedule)
    progress.say(f"tune: {out.name}: " + "; ".join(f"batch {b} γ {','.join(map(str, gs))}"
                                                   for b, gs in sorted(cells.items()))
                 + (", vLLM's schedule at each" if schedule else "") + f", in the same {repeat} interleaved run(s) …")
    done = interleaved.profile_engines(engines, out, options, gpu=gpu, timeout=None, force=force, trace=trace,
                                       nsys_args=(), repeat=repeat, replicas=replicas, profiler=profiler)
    if not any(r.ok for r in done.interleaved):
        raise InputError(f"{out.name}: no interleaved run completed (see {out}/status.json)")
    spec = [mr for mr in done.runs if mr.role == "speculative"]
    if spec and not any(mr.ok for mr in spec):  # nothing to fit: say why here, not "no cell" after the read
        raise InputError(f"{out.name}: no speculative engine has forwards in its runs; {spec[0].model.label}: "
                         f"{spec[0].reason} (see {out}/status.json)")


# The most (batch size, γ) pairs a forecast covers (max_batch_size × max_gamma), and bootstrap values it draws
# (× draws): 1024 × 8 takes ~1 s and ~40 MB here; batch size 40000 ran on for minutes and gigabytes (issue 45).
MAX_FORECAST_CELLS = 8192
MAX_FORECAST_DRAWS = 1 << 25
TUNE_FILES = (tune_json.NAME, tune_json.SCHEDULE_NAME, "forecast.csv", "checks.csv", "report.md", "tune.png")


def _arguments(batch_sizes, speculate, check, workload, max_batch_size, max_gamma, draws) -> tuple:
    """(batch sizes, γ values, checks) of `tune`'s arguments, each checked (InputError naming the parameter), and
    the forecast's size within its bounds (`MAX_FORECAST_CELLS`, `MAX_FORECAST_DRAWS`)."""
    bs, gs = _ints(batch_sizes, "batch_sizes"), _ints(speculate, "speculate")
    checks = parse_checks(check)
    if not isinstance(workload, str) or workload not in schedule.WORKLOADS:
        raise InputError(f"workload must be one of {', '.join(schedule.WORKLOADS)}, not {workload!r}",
                         param="workload")
    for name, v in (("max_batch_size", max_batch_size), ("max_gamma", max_gamma), ("draws", draws)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise InputError(f"{name} must be a whole number ≥ 1, not {v!r}", param=name)
    cells = max_batch_size * max_gamma
    if cells > MAX_FORECAST_CELLS:
        raise InputError(f"max_batch_size × max_gamma = {max_batch_size} × {max_gamma} = {cells} forecast cells: at "
                         f"most {MAX_FORECAST_CELLS} (e.g. max_batch_size {max(1, MAX_FORECAST_CELLS // max_gamma)} "
                         f"with max_gamma {min(max_gamma, MAX_FORECAST_CELLS)}), so that a forecast takes seconds, "
                         "not hours",
                         param="max_batch_size" if max_batch_size >= max_gamma else "max_gamma")
    if cells * draws > MAX_FORECAST_DRAWS:
        raise InputError(f"draws {draws} × {cells} forecast cells: at most {MAX_FORECAST_DRAWS} bootstrap values "
                         f"(draws ≤ {MAX_FORECAST_DRAWS // cells} here)", param="draws")
    return bs, gs, checks


def _one_writer(fn):
    """`tune` that profiles holds `-o`'s lock (`Folder.lock`) from its first file to its report, as every
    writer of a directory does: another nsys-cc writing there waits, then refuses (its arguments checked first)."""

    @functools.wraps(fn)
    def locked(source=None, **kwargs):
        if source is not None or not (kwargs.get("target") and kwargs.get("draft")):
            return fn(source, **kwargs)
        defaults = {k: v.default for k, v in inspect.signature(fn).parameters.items()}
        given = {**defaults, **kwargs}
        _arguments(*(given[k] for k in ("batch_sizes", "speculate", "check", "workload", "max_batch_size",
                                         "max_gamma", "draws")))
        _check_profiling(given)
        out = check_out_dir(_profiled_out(given["out_dir"]), "the tune run")
        with Folder(out).lock("the tune run"):
            return fn(source, **kwargs)

    return locked


def _check_profiling(given: dict) -> None:
    """What the rounds would refuse, before `-o` is made or locked: the benchmark's counts, a sequence longer than
    the models' context (`launch.plan.check_context`: `--input-len 1000000000` reached vLLM) and the environment
    (`launch.environment.check`)."""
    from ..launch import environment, interleaved, plan
    from ..launch.commands import BenchOptions
    from .profile import check_profiler

    check_profiler(given["profiler"], trace=given["trace"])
    options = BenchOptions(input_len=given["input_len"], output_len=given["output_len"],
                           warmup_iters=given["warmup_iters"], iters=given["iters"])
    plan.check_options(options)
    plan.check_context(interleaved.engines_for(given["target"], [given["draft"]]), options)
    environment.check(given["profiler"], gpu=plan.uses_gpu(given["device"]))


def _profiled_out(out_dir) -> str | os.PathLike:
    return "out/tune" if out_dir is None else out_dir


def _round(folder: Folder, k: int) -> Path:
    """`round-<k>/` in the tune directory, a real folder of its own (a link there is refused: its runs, status and
    lock would go wherever it points)."""
    return folder.mkdir(f"{directories.ROUND_PREFIX}{k}")


def _design_of(root: Path) -> dict:
    """The design `tune` recorded in `root/tune.json` ({} without one, or when it is not a tune record); a design
    whose batch sizes, γ values or models are of the wrong kind (a hand edit) is one InputError naming the file."""
    design = tune_json.read_design(root)
    where = f"{os.fspath(root / tune_json.NAME)}: its design's"
    for key, name in (("batch_sizes", "batch sizes"), ("speculate", "γ values")):
        if key in design:
            try:
                design[key] = _ints(design[key], key)
            except InputError as exc:
                raise InputError(f"{where} {name} {design[key]!r} are not whole numbers ≥ 1 ({exc}); fix the file "
                                 "or give --batch-size and --speculate") from None
    for key in ("target", "draft"):
        if key in design and not isinstance(design[key], str):
            raise InputError(f"{where} {key} {design[key]!r} is not a model name; fix the file or give --{key}")
    return design


def _publish_design(out: Path, design: dict) -> None:
    """The tune record with the design alone (`tune.json`), before the first round: the report of the directory
    from now on (the earlier tune's, whose design this may not be, is replaced as a whole; `publishing.publish`)."""
    from ..report.report_files import MANIFEST

    def build(stage: publishing.Stage) -> None:
        with stage.file(tune_json.NAME) as path:
            path.write_text(tune_json.design_text(design))

    publishing.publish(out, build, manifest=MANIFEST, what="the tune report")


@_one_writer
def tune(source: str | os.PathLike | None = None, *, target: str | None = None, draft: str | None = None,
         batch_sizes=None, speculate=None, check=None, out_dir: str | os.PathLike | None = None,
         max_batch_size: int = schedule.DEFAULT_MAX_BATCH, max_gamma: int = schedule.DEFAULT_MAX_GAMMA,
         input_len: int = 128, output_len: int = 32, warmup_iters: int = 2, iters: int = 5, repeat: int = 3,
         replicas: int = 1, device: str = "auto", trace: str | None = None, force: bool = False, seed: int = 0,
         draws: int = schedule.BOOTSTRAP_DRAWS, plot: bool = True, confirm: bool = True,
         workload: str = "server", run_schedule: bool | None = None, profiler: str = "nsys") -> TuneReport:
    """γ per batch size for vLLM's dynamic speculative decoding (module docstring).

    Args:
        source: an existing tune or sweep directory to read (nothing is profiled); None: profile `target` with
            `draft` into `out_dir`.
        target: the target model (as for `profile`), to profile.
        draft: the draft model (as for `profile`).
        batch_sizes: batch sizes of the design the model is fitted on (profiling: default 1, 8; reading: the
            directory's tune.json design; without either every cell is fitted).
        speculate: γ values of the design (every batch size × every γ; profiling: default 1, 3).
        check: extra held-out cells to profile, "B:γ,…" or [(B, γ), …]; every measured cell outside the design
            is held out and checked.
        out_dir: report directory (profiling: the cells too, default out/tune; reading: written only when given).
        max_batch_size: the schedule covers batch sizes 1…max_batch_size.
        max_gamma: γ searched in 1…max_gamma.
        input_len: prompt tokens per sequence (profiling).
        output_len: generated tokens per sequence (profiling).
        warmup_iters: warm-up iterations (profiling).
        iters: measured iterations (profiling).
        repeat: interleaved runs per round (profiling; every cell is in every run).
        replicas: engines of each model per run (profiling).
        device: "auto", "cpu" or "gpu" (profiling).
        trace: nsys -t value (profiling).
        force: profile again cells an earlier run completed.
        seed: seed of the bootstrap intervals.
        draws: bootstrap draws of the intervals.
        plot: draw tune.png.
        confirm: after the fit, profile the benchmark workload's γ at each measured batch size where it was not
            measured (a held-out cell more), so that the schedule is checked against the best fixed γ measured there:
            a new round with every cell so far and those, in the same runs (module docstring).
        workload: whose schedule is `num_speculative_tokens_per_batch_size` and the --speculative-config:
            "server" (steady state, continuous batching: what vLLM's table is for) or "benchmark" (static batches
            of `output_len` tokens, as the measured cells are). Both schedules are in the result
            (`result.schedules`); the schedule check always checks the benchmark's against the measured cells.
        run_schedule: at the end, one round more with every cell and an engine running the benchmark workload's
            whole schedule in its --speculative-config at each measured batch size (vLLM's V2 GPU runner reads the
            table), compared in the schedule check with the fixed-γ cells of that round; None (default): on a GPU
            only (on the CPU, vLLM's V1 runner ignores the table and runs num_speculative_tokens everywhere).
        profiler: what records the rounds' runs (profiling): "nsys", or "torch" (vLLM's torch profiler, no nsys).

    Returns:
        A `TuneReport`; its files (tune.json, schedule.json, forecast.csv, checks.csv, tune.png, report.md). It is
        returned whether or not the schedule is recommended: `report.trusted` is False when a held-out cell missed
        its measurement by more than 10 % or the forecast has no usable interval (`trust_reason` says why,
        `next_steps` what to measure next; `schedule` is then None, `fitted_schedule` the table, and no
        --speculative-config is given; `nsys-cc tune` exits with code 3).
    """
    bs, gs, checks = _arguments(batch_sizes, speculate, check, workload, max_batch_size, max_gamma, draws)
    notes: list[str] = []
    from ..report.report_files import MANIFEST

    if source is None:
        if not target or not draft:
            raise InputError("tune needs --target and --draft to profile, or a directory to read", param="target")
        from .profile import check_profiler

        check_profiler(profiler, trace=trace)
        out = check_out_dir(_profiled_out(out_dir), "the tune run")
        folder = Folder(out)  # every file and round through the one writer, under its lock (`_one_writer`)
        folder.mkdir()
        # a file of the user's where the report goes: refused now, not after hours of profiling
        publishing.check_publishable(out, TUNE_FILES, manifest=MANIFEST, what="the tune report")
        bs, gs = bs or [1, 8], gs or [1, 3]
        profile_round = functools.partial(_profile_round, target, draft, input_len=input_len, output_len=output_len,
                                          warmup_iters=warmup_iters, iters=iters, repeat=repeat, replicas=replicas,
                                          device=device, trace=trace, force=force, profiler=profiler)
        cells: dict[int, list[int]] = {b: list(gs) for b in bs}
        for b, g in checks:
            cells.setdefault(b, [])
            if g not in cells[b]:
                cells[b] = sorted([*cells[b], g])
        from ..launch import plan as launch_plan

        design: dict = {"target": target, "draft": draft, "batch_sizes": bs, "speculate": gs, "check": checks,
                        "device": "gpu" if launch_plan.uses_gpu(device) else "cpu"}
        _publish_design(out, design)
        profile_round(_round(folder, 1), cells)
        root = out
        write_to: Path | None = out
    else:
        if isinstance(source, bytes) or not isinstance(source, (str, os.PathLike)) or not os.fspath(source):
            raise InputError(f"source: give a tune or sweep directory's path, not {type(source).__name__} "
                             f"{source!r}", param="source")
        root = Path(source)
        if not root.is_dir():
            raise InputError(f"{os.fspath(source)} is not a tune or sweep directory")
        design = _design_of(root)
        target = target or design.get("target", "")
        draft = draft or design.get("draft", "")
        write_to = check_out_dir(out_dir, "the tune report") if out_dir is not None else None
        if write_to is not None:  # a file of the user's in the way: refused before the read, not after
            publishing.check_publishable(write_to, TUNE_FILES, manifest=MANIFEST, what="the tune report")
    progress.say(f"tune: analysing the cells in {root} …")
    measured, runs = _read(root, seed)
    if source is not None:  # the design given, else the directory's own (else every cell is fitted)
        bs = bs or list(design.get("batch_sizes", []))
        gs = gs or list(design.get("speculate", []))
    if not schedule.split_design(measured, bs, gs)[0]:
        raise InputError(f"no measured cell is in the design B ∈ {bs} × γ ∈ {gs}")
    want = set(checks)
    missing = sorted(want - {c.key for c in measured})
    if missing:
        notes.append("check cells not measured: " + ", ".join(f"{b}:{g}" for b, g in missing))
    if not draft:  # a directory without tune.json: the draft its speculative engines are labelled after
        draft = next((c.label.split(".spec-g")[0] for c in measured if ".spec-g" in c.label), "")

    def fit(cells: list) -> schedule.TuneResult:
        return schedule.fit_schedule(*schedule.split_design(cells, bs, gs), max_batch_size=max_batch_size,
                                     max_gamma=max_gamma, draws=draws, seed=seed, target=str(target or ""),
                                     draft=str(draft or ""), workload=workload)

    result = fit(measured)
    if source is None and confirm:
        # the benchmark schedule's γ at every measured batch size where it was not measured: profiled, so that the
        # schedule is checked against the best fixed γ there (held out; the design's cells are measured again in
        # the same runs and the model refitted on them). A profiled cell brings its counters (positions past the
        # design's γ), which can move the schedule to a γ not measured yet: then again, at most SCHEDULE_ROUNDS times
        rounds = 0
        while (todo := _unmeasured(result)) and rounds < SCHEDULE_ROUNDS:
            rounds += 1
            # a new round holds every cell measured so far and the new ones, all in the same runs: cells compared
            # or fitted together are then measured in the same processes (processes differ in speed by up to a
            # quarter, and the speculative parts not in proportion: docs/tune.md)
            # and at every measured batch size the schedule's γ ± 1 (within 1…max_gamma): the schedule is then
            # checked against its neighbours, and a refit that moves it by one finds it measured (on the α ≈ 1 pair
            # the γ alone took four rounds, 22 minutes)
            for b, near in _neighbourhood(result, max_gamma).items():
                cells[b] = sorted({*cells.get(b, []), *near})
            progress.say("tune: the schedule's γ was not measured at " + ", ".join(f"{b}:{g}" for b, g in todo.items())
                         + f": round {rounds + 1} measures them and the γ beside the schedule's at every batch "
                         f"size, with every cell so far (at most {SCHEDULE_ROUNDS} such rounds)")
            profile_round(_round(folder, rounds + 1), cells)
            before = len(measured)
            measured, runs = _read(root, seed)
            result = fit(measured)
            if len(measured) <= before:  # the round measured nothing new: another would do the same
                break
        if left := _unmeasured(result):
            notes.append(f"the schedule's γ still not measured after {rounds} round(s): "
                         + ", ".join(f"{b}:{g}" for b, g in left.items()) + " (its check there is n/a)")
    result.draft_path = _draft_path(str(draft or ""))
    if source is None and run_schedule is None:  # the default: on a GPU only
        from ..launch import plan as launch_plan

        run_schedule = launch_plan.uses_gpu(device)
    if source is None and run_schedule:
        config = result.speculative_config(workload="benchmark", untrusted=True)  # measured, not recommended
        if config is None:
            notes.append("schedule run: the benchmark workload's schedule speculates nowhere: nothing to run")
        else:
            here = len(directories.rounds(root)) + 1
            progress.say(f"tune: round {here}: every cell again and vLLM's whole schedule at each batch size")
            profile_round(_round(folder, here), cells, schedule=config)
            measured, runs = _read(root, seed)
            result = fit(measured)  # the last round's cells, as always
            result.draft_path = _draft_path(str(draft or ""))
    recorded = design.get("device")
    device_used: str = recorded if recorded in ("cpu", "gpu") else _device_of(root)
    if runs and (design_dir := directories.latest_round(root)) is not None:  # the last read's round ran the schedule
        table = json.loads(next(iter(_schedule_configs(design_dir)), "{}")).get(
            "num_speculative_tokens_per_batch_size", [])
        result.schedule_check = schedule.with_schedule_runs(result.schedule_check, runs, measured, table,
                                                         device=device_used)
        if table != result.schedules.get("benchmark"):
            notes.append(f"schedule run: the table run, {json.dumps(table)}, is the previous fit's; this round's "
                         f"refit gives the benchmark workload {json.dumps(result.schedules.get('benchmark'))}")
    notes.append(CPU_NOTE if device_used == "cpu" else
                 "on a GPU, `nsys-cc profile --speculative-config` with this schedule runs it (V2 runner); compare "
                 "it with the fixed-γ cells above")
    report = TuneReport(result, notes=notes)
    if write_to is not None:
        report.files = write(report, write_to, plot=plot)
    return report


def _read(root: Path, seed: int) -> tuple[list, list]:
    """(the fixed-γ cells, the engines that ran vLLM's whole schedule) of a tune directory's last round, from one
    read of it (`analysis.tune.directories.read_cells`)."""
    every = directories.read_cells(root, seed=seed, schedule_runs=True)
    cells = [c for c in every if not c.schedule_run]
    if not cells:
        raise InputError(f"{os.fspath(root)}: no speculative cell with forwards in its runs (only the schedule's)")
    return cells, [c for c in every if c.schedule_run]


def _schedule_configs(design_dir: Path) -> list[str]:
    """The --speculative-config of a round's schedule engines, as its runs' records give the command."""
    import shlex

    for done in sorted(design_dir.glob(f"{RUN_GLOB}/{done_json.NAME}")):
        try:
            commands = json.loads(inputs.read_text(done, "run record", errors="replace")).get("commands", "")
            argv = shlex.split(commands) if isinstance(commands, str) else []
        except (InputError, ValueError):
            continue
        out = [argv[i + 1] for i, a in enumerate(argv[:-1])
               if a == "--speculative-config" and "num_speculative_tokens_per_batch_size" in argv[i + 1]]
        if out:
            return out
    return []


def _neighbourhood(result: schedule.TuneResult, max_gamma: int) -> dict[int, list[int]]:
    """Batch size → the benchmark schedule's γ there and the γ beside it (γ − 1, γ + 1 within 1…max_gamma), at every
    measured batch size (γ = 0: 1, the shortest speculation, beside not speculating)."""
    out = {}
    for s in result.schedule_check:
        g = s["schedule_gamma"]
        out[s["batch_size"]] = sorted({x for x in (g - 1, g, g + 1) if 1 <= x <= max_gamma})
    return out


def _unmeasured(result: schedule.TuneResult) -> dict[int, int]:
    """Batch size → the benchmark schedule's γ there, where that γ was not measured at that batch size."""
    return {s["batch_size"]: s["schedule_gamma"] for s in result.schedule_check
            if s["schedule_gamma"] > 0 and s["schedule_gamma"] not in s["measured_gammas"]}


def _draft_path(draft: str) -> str:
    """The folder vLLM loads for `draft` (a known-α pair model or a directory; a hub id as it is; "" when it cannot
    be resolved here, e.g. a shipped dummy-weight shape, which a served config cannot use anyway)."""
    if not draft:
        return ""
    try:
        from ..launch.models import resolve

        m = resolve(draft)
    except Exception:  # an unknown name: the config keeps the name as given
        return ""
    return m.path if m.kind in ("pair", "directory", "hub") else ""


def _device_of(root: Path) -> str:
    runs = f"{RUN_GLOB}/{done_json.NAME}"  # a round's runs; an earlier tune's bs<B>/ or a sweep's bs<B>-in<L>/
    for done in [*root.glob(f"{directories.ROUND_PREFIX}*/{runs}"), *root.glob(f"bs*/{runs}")]:
        try:
            text = inputs.read_text(done, "run record", errors="replace")
        except InputError:
            continue
        # the launcher sets vLLM's CPU variables and, in a shared process, each engine's KV cache bytes on CPU runs
        # only (a variable the user's environment set is not in the record: VLLM_CPU_ alone misread such runs as GPU)
        return "cpu" if "VLLM_CPU_" in text or "--kv-cache-memory-bytes" in text else "gpu"
    return "cpu"


def write(report: TuneReport, out: str | os.PathLike, *, plot: bool = True) -> dict[str, Path]:
    """tune.json (design kept), schedule.json, forecast.csv, checks.csv, report.md and tune.png in `out`, replacing
    the earlier report there as a whole, or nothing changes (`publishing.publish`, the report manifest every command
    shares: a file of the user's in the way is refused, a link is replaced, never written through)."""
    import pandas as pd

    from ..report.report_files import MANIFEST

    out = check_out_dir(out, "the tune report")
    r = report.result
    doc = report.to_dict()
    design = _design_of(out) if out.is_dir() else {}
    if design:
        doc["design"] = design
    names = {"json": tune_json.NAME, "schedule": tune_json.SCHEDULE_NAME, "forecast": "forecast.csv",
             "checks": "checks.csv", "report": "report.md", **({"plot": "tune.png"} if plot else {})}

    def build(stage: publishing.Stage) -> None:
        with stage.file(tune_json.NAME) as path:
            path.write_text(tune_json.text(doc))
        with stage.file(tune_json.SCHEDULE_NAME) as path:
            path.write_text(tune_json.schedule_text(r.schedule_doc()))
        with stage.file("forecast.csv") as path:
            pd.DataFrame(r.forecast).to_csv(path, index=False)
        with stage.file("checks.csv") as path:
            pd.DataFrame(r.checks or [], columns=["batch_size", "gamma", "label", "forecast", "forecast_ci_low",
                                                  "forecast_ci_high", "forecast_iid", "measured", "measured_ci_low",
                                                  "measured_ci_high", "error", "measured_counters", "error_counters",
                                                  "tolerance", "within_precision", "within_10pct"]
                         ).to_csv(path, index=False)
        with stage.file("report.md") as path:
            path.write_text("```\n" + render_text(report.result, report.notes) + "```\n")
        if plot:
            from ..report.tune_plots import plot_tune

            with stage.file("tune.png") as path:
                plot_tune(r, path)

    written = publishing.publish(out, build, manifest=MANIFEST, what="the tune report")
    return {kind: written[name] for kind, name in names.items()}


def validate_with_vllm(schedule) -> list[tuple[int, int, int]]:
    """vLLM's own validator of the schedule (ImportError without vLLM)."""
    from vllm.v1.spec_decode.dynamic.utils import validate_and_normalize_dynamic_sd_schedule

    return validate_and_normalize_dynamic_sd_schedule(schedule)
