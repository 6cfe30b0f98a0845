"""`nsys_cc.tune` / `nsys-cc tune`: profile a design of cells — (cell key, γ), the key today a batch size — fit the step
cost model across the batch, forecast every batch size and γ, check the cells it was not fitted on, and write the
schedule vLLM's dynamic speculative decoding takes. What it is asked is one `TuneRequest` (`workflows.tune_request`:
the CLI's flags, the library's keywords); `analysis.tune` has the model, the schedule, the cell keys and the reading
of tune directories and their records; `report.tune_text` the words, `report.tune_files` the report directory;
docs/tune.md the whole story. The facade's `nsys_cc.tune` is this `tune`.

Directory layout (what profiling writes, what reading takes): `DIR/round-1/`, one interleaved profile directory
holding EVERY cell, design and held-out alike, in the same runs: per cell key (batch size B) the plain target
(`bs<B>.<target>`) and a speculative engine per γ measured there (`bs<B>.<draft>.spec-g<γ>`), one vLLM engine per
model serving every batch size (`launch.interleaved.design_engines`). Cells fitted and cells checked are then timed in
the same processes: measured one batch size per process, minutes apart, processes differed in speed by up to a
quarter and the speculative parts did not follow in proportion, so a fit across processes inherited that
(docs/tune.md). When the schedule's γ was not measured at a measured cell, `round-2/` (at most `SCHEDULE_ROUNDS`
more) holds every cell so far and those, again in the same runs, and the result is the last round's. Then
`DIR/tune.json` (the design — what was asked, and the table each schedule round ran —, the held-out cells and every
result), `schedule.json`, `forecast.csv`, `checks.csv`, `tune.png`, `report.md`. An older tune's directory (`bs<B>/`,
one profile directory per batch size) and a sweep directory (`bs<B>-in<L>/`) read too.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from .. import progress
from ..analysis.tune import directories, keys, records, schedule
from ..analysis.tune.keys import CellKey
from ..errors import InputError
from ..files.folder import Folder, check_out_dir
from ..formats import tune_json
from ..report import tune_files
from .tune_request import TuneRequest

SCHEDULE_ROUNDS = 3  # at most this many rounds of profiling the schedule's γ where it was not measured
CPU_NOTE = ("vLLM 0.32's V1 runner (the CPU build's) applies num_speculative_tokens_per_batch_size every step — K as "
            "the table gives at the step's batch size, K = 0 as one catch-up draft forward that proposes nothing; on "
            "the CPU the schedule is checked against the fixed-γ cells measured at each batch size, and run with "
            "--run-schedule")
GPU_NOTE = ("on a GPU, `nsys-cc profile --speculative-config` with this schedule runs it (V2 runner); compare it with "
            "the fixed-γ cells above")

Cells = dict[CellKey, list[int]]  # a round's cells: each cell key and the γ values measured there


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
        """The tune record (`formats.tune_json.record`): what `--format json` prints and tune.json holds."""
        return tune_json.record(self.result, self.notes)

    def write(self, out: str | os.PathLike, *, plot: bool = True) -> dict[str, Path]:
        """The report directory in `out` (`report.tune_files.write`: replaced as a whole), its files by kind."""
        return tune_files.write(self.result, self.notes, out, plot=plot)


def tune(request: TuneRequest | str | os.PathLike | None = None, /, **keywords) -> TuneReport:
    """γ per batch size for vLLM's dynamic speculative decoding (module docstring).

    Args:
        request: what to do, a `TuneRequest` (its fields replaced by any `keywords`); or, with the request's fields
            as keywords, its `source`: a tune or sweep directory to read (nothing is profiled), None to profile
            `target` with `draft` into `out_dir`. `nsys_cc.tune("out/tune")`, `nsys_cc.tune(target=…, draft=…,
            batch_sizes=[1, 8], speculate=[1, 3], check="4:2,16:3", out_dir=…)`.
        **keywords: `TuneRequest`'s fields (source, target, draft, batch_sizes, speculate, check, out_dir,
            max_batch_size, max_gamma, input_len, output_len, warmup_iters, iters, repeat, replicas, device,
            profiler, trace, force, plot, confirm, workload, run_schedule, seed, draws), each documented there.

    Returns:
        A `TuneReport`; its files (tune.json, schedule.json, forecast.csv, checks.csv, tune.png, report.md). It is
        returned whether or not the schedule is recommended: `report.trusted` is False when a held-out cell missed
        its measurement by more than 10 % or the forecast has no usable interval (`trust_reason` says why,
        `next_steps` what to measure next; `schedule` is then None, `fitted_schedule` the table, and no
        --speculative-config is given; `nsys-cc tune` exits with code 3).
    """
    if isinstance(request, TuneRequest):
        req = replace(request, **keywords) if keywords else request
    else:
        req = TuneRequest(**keywords) if request is None else TuneRequest(request, **keywords)
    if not req.profiling:
        return _tuned(req, None)
    if not req.target or not req.draft:
        raise InputError("tune needs --target and --draft to profile, or a directory to read", param="target")
    req.check_profiling()  # what the rounds would refuse, before -o is made or locked
    out = check_out_dir(req.profiled_out, "the tune run")
    # as every writer of a directory: -o's lock from the first file to the report (another nsys-cc writing there
    # waits, then refuses)
    with Folder(out).lock("the tune run"):
        return _tuned(req, Folder(out))


def _tuned(req: TuneRequest, folder: Folder | None) -> TuneReport:
    """The tune of `req`: profiling into `folder` (its rounds, then the report there), or reading `req.source`."""
    notes: list[str] = []
    if folder is not None:
        root, design, cells = _start(req, folder)
        write_to: Path | None = root
    else:
        root, design, write_to = _source(req)
        cells = {}
    progress.say(f"tune: analysing the cells in {root} …")
    measured, runs = _read(root, req.seed)
    design_keys, gammas = req.design(design)
    if not schedule.split_design(measured, design_keys, gammas)[0]:
        raise InputError(f"no measured cell is in the design {keys.design_text(design_keys, gammas)}")
    notes += _missing_checks(req.checks, measured)
    target = req.target or design.get("target", "")
    # a directory without tune.json: the draft its speculative engines are labelled after
    draft = req.draft or design.get("draft", "") or next(
        (c.label.split(".spec-g")[0] for c in measured if ".spec-g" in c.label), "")

    def fit(cells_read: list) -> schedule.TuneResult:
        return schedule.fit_schedule(*schedule.split_design(cells_read, design_keys, gammas),
                                     max_batch_size=req.max_batch_size, max_gamma=req.max_gamma, draws=req.draws,
                                     seed=req.seed, target=str(target or ""), draft=str(draft or ""),
                                     workload=req.workload, context=req.context, k0=_k0_price(root))

    result = fit(measured)
    if folder is not None and req.confirm:
        measured, runs, result = _confirming_rounds(req, folder, cells, measured, runs, result, fit, notes)
    result.draft_path = _draft_path(str(draft or ""))
    if folder is not None and (req.uses_gpu if req.run_schedule is None else req.run_schedule):
        found = _schedule_round(req, folder, design, cells, result, fit, notes)
        if found is not None:
            measured, runs, result = found
            result.draft_path = _draft_path(str(draft or ""))
    device = records.device(root)
    _with_schedule_runs(root, result, runs, measured, device, notes)
    notes.append(CPU_NOTE if device == "cpu" else GPU_NOTE)
    report = TuneReport(result, notes=notes)
    if write_to is not None:
        report.files = report.write(write_to, plot=req.plot)
    return report


def _start(req: TuneRequest, folder: Folder) -> tuple[Path, dict, Cells]:
    """A profiling tune's start: `-o` made, the report's names checked (a file of the user's where the report goes:
    refused now, not after hours of profiling), the design recorded (tune.json, published before anything else) and
    round 1 profiled: every cell of the design and of the checks, in the same runs. (its root, design, cells)."""
    folder.mkdir()  # every file and round through the one writer, under its lock (`tune`)
    tune_files.check_publishable(folder.root)
    design_keys, gammas = req.design()
    cells: Cells = {k: list(gammas) for k in design_keys}
    for key, g in req.checks:
        cells.setdefault(key, [])
        if g not in cells[key]:
            cells[key] = sorted([*cells[key], g])
    design: dict = {"target": req.target, "draft": req.draft, "batch_sizes": [k.batch_size for k in design_keys],
                    "speculate": gammas, "check": keys.pairs(req.checks), "device": "gpu" if req.uses_gpu else "cpu",
                    "input_len": max(req.input_lens), "input_lens": list(req.input_lens), "output_len": req.output_len}
    tune_files.publish_design(folder.root, design)
    _profile_round(req, _round(folder, 1), cells)  # with K = 0 engines: its price (`_profile_round`)
    return folder.root, design, cells


def _source(req: TuneRequest) -> tuple[Path, dict, Path | None]:
    """A read tune's source checked: (its directory, the design recorded there, where to write the report — None
    without out_dir; a file of the user's in the way refused before the read, not after)."""
    source = req.source
    if isinstance(source, bytes) or not isinstance(source, (str, os.PathLike)) or not os.fspath(source):
        raise InputError(f"source: give a tune or sweep directory's path, not {type(source).__name__} {source!r}",
                         param="source")
    root = Path(source)
    if not root.is_dir():
        raise InputError(f"{os.fspath(source)} is not a tune or sweep directory")
    design = tune_json.checked_design(root)
    write_to = check_out_dir(req.out_dir, "the tune report") if req.out_dir is not None else None
    if write_to is not None:
        tune_files.check_publishable(write_to)
    return root, design, write_to


def _missing_checks(checks: list[tuple[CellKey, int]], measured: list) -> list[str]:
    """A note naming the held-out cells asked for that no measured cell is (none: no note)."""
    missing = [(key, g) for key, g in sorted(set(checks))
               if not any(key.covers(c.key) and c.gamma == g for c in measured)]
    return ["check cells not measured: " + ", ".join(f"{k.text}:{g}" for k, g in missing)] if missing else []


def _confirming_rounds(req: TuneRequest, folder: Folder, cells: Cells, measured: list, runs: list,
                       result: schedule.TuneResult, fit: Callable, notes: list[str]) -> tuple:
    """The benchmark schedule's γ at every measured cell where it was not measured: profiled, so that the schedule
    is checked against the best fixed γ there (held out; the design's cells are measured again in the same runs and
    the model refitted on them). A profiled cell brings its counters (positions past the design's γ), which can move
    the schedule to a γ not measured yet: then again, at most SCHEDULE_ROUNDS times. (measured, runs, result) of the
    last round; `cells` and `notes` grow in place."""
    rounds = 0
    while (todo := _unmeasured(result)) and rounds < SCHEDULE_ROUNDS:
        rounds += 1
        # a new round holds every cell measured so far and the new ones, all in the same runs: cells compared or
        # fitted together are then measured in the same processes (processes differ in speed by up to a quarter,
        # and the speculative parts not in proportion: docs/tune.md); and at every measured cell the schedule's
        # γ ± 1 (within 1…max_gamma): the schedule is then checked against its neighbours, and a refit that moves it
        # by one finds it measured (on the α ≈ 1 pair the γ alone took four rounds, 22 minutes)
        for key, near in _neighbourhood(result, req.max_gamma).items():
            cells[key] = sorted({*cells.get(key, []), *near})
        progress.say("tune: the schedule's γ was not measured at " + ", ".join(f"{k.text}:{g}" for k, g in todo.items())
                     + f": round {rounds + 1} measures them and the γ beside the schedule's at every batch "
                     f"size, with every cell so far (at most {SCHEDULE_ROUNDS} such rounds)")
        _profile_round(req, _round(folder, rounds + 1), cells)
        before = len(measured)
        measured, runs = _read(folder.root, req.seed)
        result = fit(measured)
        if len(measured) <= before:  # the round measured nothing new: another would do the same
            break
    if left := _unmeasured(result):
        notes.append(f"the schedule's γ still not measured after {rounds} round(s): "
                     + ", ".join(f"{k.text}:{g}" for k, g in left.items()) + " (its check there is n/a)")
    return measured, runs, result


def _schedule_round(req: TuneRequest, folder: Folder, design: dict, cells: Cells, result: schedule.TuneResult,
                    fit: Callable, notes: list[str]) -> tuple | None:
    """One round more with every cell and, at each, an engine running the benchmark workload's whole schedule (its
    --speculative-config; measured, not recommended: the untrusted table too); the table it ran recorded in the
    tune record (`schedule_runs`). (measured, runs, result) of that round; None when the schedule speculates
    nowhere (a note says so)."""
    config = result.speculative_config(workload="benchmark", untrusted=True)
    if config is None:
        notes.append("schedule run: the benchmark workload's schedule speculates nowhere: nothing to run")
        return None
    here = len(directories.rounds(folder.root)) + 1
    progress.say(f"tune: round {here}: every cell again and vLLM's whole schedule at each batch size")
    round_dir = _round(folder, here)
    table = json.loads(config)["num_speculative_tokens_per_batch_size"]
    design["schedule_runs"] = {**design.get("schedule_runs", {}), round_dir.name: table}
    tune_files.publish_design(folder.root, design)
    _profile_round(req, round_dir, cells, schedule=config)
    measured, runs = _read(folder.root, req.seed)
    return measured, runs, fit(measured)  # the last round's cells, as always


def _with_schedule_runs(root: Path, result: schedule.TuneResult, runs: list, measured: list, device: str,
                        notes: list[str]) -> None:
    """The schedule check with the engines that ran vLLM's whole schedule in the last round read (none: unchanged),
    and a note when the table they ran is not the one this refit gives."""
    last = directories.latest_round(root)
    if not runs or last is None:
        return
    table = records.schedule_table(last)
    result.schedule_check = schedule.with_schedule_runs(result.schedule_check, runs, measured, table, device=device)
    if table != result.schedules.get("benchmark"):
        notes.append(f"schedule run: the table run, {json.dumps(table)}, is the previous fit's; this round's "
                     f"refit gives the benchmark workload {json.dumps(result.schedules.get('benchmark'))}")


def _profile_round(req: TuneRequest, out: Path, cells: Cells, *, schedule: str | None = None) -> None:
    """Every cell of `cells` (cell key → γ values) in the same interleaved runs, into `out` (a round's directory):
    one vLLM engine per model serves every batch size (`launch.interleaved.design_engines`); with `schedule` (a
    --speculative-config), an engine running it at every batch size besides. The round's request (its records store
    it) is a profile of the target and the draft in `out`, without a time limit."""
    from ..launch import interleaved, orchestrator
    from ..request import ProfileRequest

    request = ProfileRequest(str(req.target), (str(req.draft),), out, input_len=max(req.input_lens),
                             output_len=req.output_len, warmup_iters=req.warmup_iters, iters=req.iters,
                             repeat=req.repeat, replicas=req.replicas, device=req.device, trace=req.trace,
                             force=req.force, profiler=req.profiler, timeout=0, precision=req.precision,
                             max_repeat=req.max_repeat)
    # every (B, L) of the design in one engine per model (labels bs<B>[-in<L>].<model>); in the first round a K = 0
    # engine besides (speculation configured, vLLM's schedule giving 0 everywhere: `analysis.tune.k0.overhead` reads it)
    engines = interleaved.design_engines(str(req.target), str(req.draft), cells, request.options,
                                         req.uses_gpu, schedule=schedule,
                                         k0=out.name == f"{directories.ROUND_PREFIX}1")
    progress.say(f"tune: {out.name}: " + "; ".join(f"{k.words} γ {','.join(map(str, gs))}"
                                                   for k, gs in sorted(cells.items()))
                 + (", vLLM's schedule at each" if schedule else "") + f", in the same {req.repeat} interleaved "
                 "run(s) …")
    done = orchestrator.run(interleaved.Interleaved(request, engines, gpu=req.uses_gpu))
    if not any(r.ok for r in done.interleaved):
        raise InputError(f"{out.name}: no interleaved run completed (see {out}/status.json)")
    spec = [mr for mr in done.runs if mr.role == "speculative"]
    if spec and not any(mr.ok for mr in spec):  # nothing to fit: say why here, not "no cell" after the read
        raise InputError(f"{out.name}: no speculative engine has forwards in its runs; {spec[0].model.label}: "
                         f"{spec[0].reason} (see {out}/status.json)")


def _k0_price(root: Path):
    """The K = 0 overhead measured in the tune's rounds (`analysis.tune.k0.overhead` of its first round, where the
    K = 0 engines ran), as `verdict.K0Price`; unmeasured (empty) where none ran."""
    from ..analysis.tune import k0
    from ..analysis.tune.verdict import K0Price

    first = next(iter(directories.rounds(root)), root)
    try:
        return K0Price.from_table(k0.overhead(first), str(first))
    except InputError:
        return K0Price()


def _round(folder: Folder, k: int) -> Path:
    """`round-<k>/` in the tune directory, a real folder of its own (a link there is refused: its runs, status and
    lock would go wherever it points)."""
    return folder.mkdir(f"{directories.ROUND_PREFIX}{k}")


def _read(root: Path, seed: int) -> tuple[list, list]:
    """(the fixed-γ cells, the engines that ran vLLM's whole schedule) of a tune directory's last round, from one
    read of it (`analysis.tune.directories.read_cells`)."""
    every = directories.read_cells(root, seed=seed, schedule_runs=True)
    cells = [c for c in every if not c.schedule_run]
    if not cells:
        raise InputError(f"{os.fspath(root)}: no speculative cell with forwards in its runs (only the schedule's)")
    return cells, [c for c in every if c.schedule_run]


def _neighbourhood(result: schedule.TuneResult, max_gamma: int) -> Cells:
    """Cell key → the benchmark schedule's γ there and the γ beside it (γ − 1, γ + 1 within 1…max_gamma), at every
    measured cell key (γ = 0: 1, the shortest speculation, beside not speculating)."""
    out = {}
    for s in result.schedule_check:
        g = s["schedule_gamma"]
        out[CellKey.from_dict(s)] = sorted({x for x in (g - 1, g, g + 1) if 1 <= x <= max_gamma})
    return out


def _unmeasured(result: schedule.TuneResult) -> dict[CellKey, int]:
    """Cell key → the benchmark schedule's γ there, where that γ was not measured at that key."""
    return {CellKey.from_dict(s): s["schedule_gamma"] for s in result.schedule_check
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


def validate_with_vllm(schedule) -> list[tuple[int, int, int]]:
    """vLLM's own validator of the schedule (ImportError without vLLM)."""
    from vllm.v1.spec_decode.dynamic.utils import validate_and_normalize_dynamic_sd_schedule

    return validate_and_normalize_dynamic_sd_schedule(schedule)
