"""What a `profile` left in its output directory, as the analysis reads it: which models it profiled, which of them
completed, and for interleaved runs which runs completed. Nothing here measures
(`nsys_cc.analysis.coefficient.source_kinds` does).

`O/status.json` (`formats.status_json`) says which of two layouts `O` has, which runs and models completed, the
profile's request and which recorder made its traces:

- **interleaved runs** (the default `profile`): completed run k is the folder `O/run-<k>/`: its trace (named by the
  run's entry, "trace": `trace.sqlite` under nsys, `trace.pt.trace.json.gz` under the torch profiler) holds every
  model (told apart by their engines' windows, `analysis.forwards.engines`), `<label>.bench.json` and (a speculative
  engine) `<label>.metrics.json` are each model's own, `done.json` (written last) lists the run's engines and how each
  fared, its trace and recorder (`formats.done_json`). A directory of such run folders without a `status.json` (copied
  runs, `fixtures/interleaved/`) is read from the folders' `done.json`.
- **one process per model** (`profile --separate`, tensor-parallel models, a speculative config alone): each model's
  entry names its trace (`O/L.sqlite`, `O/L.pt.trace.json.gz`; older files: "sqlite"), its forward range, its
  `O/L.bench.json` and `O/L.metrics.json`.

Which trace a run left is read from its record, never guessed: only a record written before records named their
trace (no "trace" in the status entry or the done.json) is read by which of its recorder's files is there. Paths
recorded in these files are absolute where `profile` ran; the files are looked up in `O` itself, so a profile
directory that was moved or copied reads the same. A status file that is not what `profile` writes is an InputError
naming it.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from ...errors import InputError
from ...formats import done_json, status_json
from ...request import ProfileRequest
from ...trace.registry import trace_named
from .spec_labels import LABEL_RE

# Run k of an interleaved profile keeps its files in `run-<k>/`, its trace under the label `trace` (written by
# `launch.interleaved_run`, which takes these names from here).
RUN_PREFIX = "run-"
RUN_GLOB = RUN_PREFIX + "*"  # every run's folder
RUN_TRACE_LABEL = "trace"
RUN_TRACE = RUN_TRACE_LABEL + ".sqlite"  # what a run under nsys leaves: the export of `trace.nsys-rep`
RUN_DIR_RE = re.compile(rf"^{re.escape(RUN_PREFIX)}(?P<k>[1-9][0-9]*)$")
DONE_STATES = ("done", "resumed")

__all__ = ["OutputModel", "ProfileOutput", "RunFolder", "is_profile_output", "read_output", "run_engines",
           "run_number", "run_trace"]


@dataclass(frozen=True)
class OutputModel:
    """One model of a profile: its label and role (target | draft | speculative), a speculative run's draft and γ,
    its status ("done" when it has forwards in every completed run; with one process per model also "resumed",
    complete from an earlier call) and why not; with one process per model, its trace and the forward range
    `profile` found in it."""

    label: str
    role: str
    status: str = "done"
    reason: str = ""
    draft: str | None = None
    gamma: int | None = None
    trace: Path | None = None
    range_name: str | None = None

    @property
    def done(self) -> bool:
        return self.status in DONE_STATES

    @property
    def speculative(self) -> bool:
        return self.role == "speculative"


@dataclass(frozen=True)
class RunFolder:
    """A completed interleaved run: its number k (the `run-<k>` folder's) and folder, and its trace's name as its
    record gives it (None: a record written before records named it)."""

    number: int
    dir: Path
    trace_name: str | None = None

    @property
    def trace(self) -> Path:
        """The run's trace: the one its record names; for an older record, `run_trace` (the first trace suffix
        found)."""
        if self.trace_name is not None:
            return self.dir / self.trace_name
        return run_trace(self.dir)


@dataclass(frozen=True)
class ProfileOutput:
    """A profile's output directory as read (module docstring): `interleaved` or not, its models in the order they
    were profiled (target first), and with interleaved runs the completed ones in order."""

    path: Path
    interleaved: bool
    models: tuple[OutputModel, ...]
    runs: tuple[RunFolder, ...] = ()
    stopped_by: str | None = None
    request: ProfileRequest | None = None  # the profile's request, as stored (None: written before it was)
    recorder: dict | None = None  # which recorder made the traces, {"name", "version"} (None: not said)

    @property
    def done(self) -> list[OutputModel]:
        """The models with forwards in every completed run (one process each: those that completed)."""
        return [m for m in self.models if m.done]


def run_trace(folder: str | os.PathLike) -> Path:
    """The trace of the interleaved run in `folder`: `trace` with the first trace suffix found (`trace_named`:
    `trace.sqlite` under nsys, the torch route's `trace.pt.trace.json.gz`), else `trace.sqlite` (which says it is
    missing)."""
    return trace_named(folder, RUN_TRACE_LABEL) or Path(folder) / RUN_TRACE


def run_number(path: str | os.PathLike) -> int | None:
    """k of a folder named `run-<k>` (k ≥ 1), else None."""
    m = RUN_DIR_RE.match(Path(path).name)
    return int(m.group("k")) if m else None


def _status(path: Path):
    """The parsed status.json of `path`, None when there is none (a missing file, not a broken one)."""
    return status_json.read(path)


def _run_folders(path: Path) -> list[Path]:
    """The `run-<k>` folders of `path` that hold a `done.json` (a completed run), by k."""
    try:
        found = [p for p in path.iterdir() if run_number(p) is not None and (p / done_json.NAME).is_file()]
    except OSError:
        return []
    return sorted(found, key=lambda p: run_number(p) or 0)


def is_profile_output(path: str | os.PathLike) -> bool:
    """Whether `path` is a profile's output directory (module docstring): a directory with a `status.json` that is
    a profile's (an object with its runs, or a list of models), or with completed `run-<k>/` folders."""
    p = Path(path)
    try:
        if not p.is_dir():
            return False
    except OSError:  # not searchable (a folder on the way the user may not enter): no profile's, as far as we see
        return False
    try:
        doc = _status(p)
    except InputError:
        return (p / status_json.NAME).exists()  # a broken status file is still a profile's: reading it says why
    if doc is not None and _run_folders(p):
        return True  # completed runs beside a status.json: a profile's, whatever the file says (reading it tells)
    if isinstance(doc, (dict, list)):
        return doc != [] and status_json.has_its_shape(doc)
    return bool(_run_folders(p))


def _wrong(path: Path, why: str) -> InputError:
    return InputError(f"{path / status_json.NAME} is not a profile's status file ({why}): analyse the traces one by "
                      "one, or profile again")


def _text(entry: dict, key: str, path: Path, required: bool = True) -> str | None:
    value = entry.get(key)
    if value is None and not required:
        return None
    if not isinstance(value, str) or not value:
        raise _wrong(path, f"a model's {key!r} is {value!r}")
    return value


def label_problem(label: str) -> str | None:
    """Why `label` cannot be a model's label in a profile directory (its files are `<label>.*` there), or None: one
    line of printable text that names no other folder (no `/`, not `.` or `..`: a status label `../t` made `analyze`
    read traces outside the directory, issue 45)."""
    if not label.strip() or not label.isprintable():
        return "not one line of printable text"
    if "/" in label or "\\" in label or label in (".", "..") or label.startswith(".."):
        return "a path, not a name (its files would be read outside the directory)"
    return None


def _model(entry, path: Path, *, separate: bool) -> OutputModel:
    if not isinstance(entry, dict):
        raise _wrong(path, f"a model entry is {type(entry).__name__}, not an object")
    label = _text(entry, "label", path) or ""
    if (problem := label_problem(label)) is not None:
        raise _wrong(path, f"the model label {label!r} is {problem}")
    role = _text(entry, "role", path) or ""
    if role not in ("target", "draft", "speculative"):
        raise _wrong(path, f"model {label!r} has the role {role!r}")
    m = LABEL_RE.match(label)
    draft = entry.get("draft") or (m.group("draft") if m and role == "speculative" else None)
    gamma = entry.get("gamma") or (int(m.group("gamma")) if m and role == "speculative" else None)
    if gamma is not None and (isinstance(gamma, bool) or not isinstance(gamma, int)):
        raise _wrong(path, f"model {label!r} has γ {gamma!r}")
    trace = None
    if separate:
        recorded = entry.get("trace") or entry.get("sqlite")  # `trace`: either route's; older files: `sqlite`
        name = Path(recorded).name if isinstance(recorded, str) and recorded else f"{label}.sqlite"
        trace = path / name
    reason = entry.get("reason")
    return OutputModel(label, role, str(entry.get("status") or ""), reason if isinstance(reason, str) else "",
                       draft if isinstance(draft, str) else None, gamma, trace,
                       entry.get("range") if separate and isinstance(entry.get("range"), str) else None)


def run_engines(run_dir: str | os.PathLike) -> dict[str, str] | None:
    """The engines of an interleaved run's folder, in the run's order (target first), each with how it fared
    ("done" or why not), from its `done.json`; None when the folder has none."""
    done = Path(run_dir) / done_json.NAME
    if not done.is_file():
        return None
    doc = done_json.read_run(run_dir)
    engines = doc.get("engines") if isinstance(doc, dict) else None
    if not isinstance(engines, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                                 for k, v in engines.items()):
        raise InputError(f"{done} is not an interleaved run's record (no 'engines' by label): profile again")
    for label in engines:  # the file's fault, said as such (not the --name a user never gave)
        if (problem := label_problem(label)) is not None:
            raise InputError(f"{done} is not an interleaved run's record: the engine label {label!r} is {problem}; "
                             "profile again")
    return engines


def _from_runs(path: Path) -> ProfileOutput:
    """An interleaved profile without a status.json, from its run folders' done.json."""
    folders = _run_folders(path)
    per_run = [(f, run_engines(f) or {}) for f in folders]
    labels = list(dict.fromkeys(label for _, engines in per_run for label in engines))
    models = []
    for i, label in enumerate(labels):
        missing = [f"run {run_number(f)}: {engines.get(label, 'not in this run')}" for f, engines in per_run
                   if engines.get(label) != "done"]
        m = LABEL_RE.match(label)
        role = "target" if i == 0 else "speculative" if m else "draft"
        models.append(OutputModel(label, role, "failed" if missing else "done", "; ".join(missing),
                                  m.group("draft") if m else None, int(m.group("gamma")) if m else None))
    records = [done_json.load_run(f) for f in folders]
    runs = tuple(RunFolder(run_number(f) or 0, f, done_json.trace_name(r) if r is not None else None)
                 for f, r in zip(folders, records))
    _one_file_per_run(path, runs)
    first = next((r for r in records if r is not None), None)
    return ProfileOutput(path, True, tuple(models), runs, request=done_json.request_of(first) if first else None,
                         recorder=done_json.recorder_of(first) if first else None)


def _one_file_per_run(path: Path, runs) -> None:
    """InputError when two runs' traces are one file (a hard link, a linked folder): it was pooled as two runs."""
    seen: dict[tuple[int, int], RunFolder] = {}
    for run in runs:
        try:
            st = os.stat(run.trace)
        except OSError:
            continue  # a missing trace is the reader's to say
        first = seen.setdefault((st.st_dev, st.st_ino), run)
        if first is not run:
            raise InputError(f"{run.trace} is the same file as {first.trace} (a link): one run's trace would count as "
                             f"two runs; remove {run.dir.name}/ from {path}, or profile again")


def read_output(path: str | os.PathLike) -> ProfileOutput:
    """The profile output directory `path` as read (module docstring). InputError when it is not one, or its
    status file is not what `profile` writes."""
    p = Path(path)
    if not p.is_dir():
        raise InputError(f"{p} is not a directory (a profile's output directory holds its status.json)")
    doc = _status(p)
    if doc is None:
        if not _run_folders(p):
            raise InputError(f"{p} holds no {status_json.NAME} and no completed run-<k>/ folder: it is not a "
                             "profile's output")
        return _from_runs(p)
    request, recorder = status_json.request_of(doc), status_json.recorder_of(doc)
    if status_json.is_separate(doc):
        entries = status_json.models_of(doc)
        if not isinstance(entries, list):
            raise _wrong(p, "its 'models' is not a list")
        return ProfileOutput(p, False, tuple(_model(e, p, separate=True) for e in entries), request=request,
                             recorder=recorder)
    if not isinstance(doc, dict) or not isinstance(doc.get("runs"), list):
        raise _wrong(p, "neither a list of models nor an object with its runs")
    runs = _completed_runs(p, doc["runs"])
    _one_file_per_run(p, runs)
    models = doc.get("models", [])
    if not isinstance(models, list):
        raise _wrong(p, "its 'models' is not a list")
    stopped = doc.get("stopped_by")
    return ProfileOutput(p, True, tuple(_model(e, p, separate=False) for e in models), tuple(runs),
                         stopped if isinstance(stopped, str) else None, request, recorder)


def _completed_runs(p: Path, entries: list) -> list[RunFolder]:
    """The completed runs a status file lists, each with the trace its entry names."""
    runs = []
    seen: set[int] = set()
    for r in entries:
        if not isinstance(r, dict) or isinstance(r.get("run"), bool) or not isinstance(r.get("run"), int) \
                or r["run"] < 1:
            raise _wrong(p, f"a run entry is {r!r}")
        if r["run"] in seen:  # pooled twice it counted as two runs (issue 45: N 36 → 48)
            raise _wrong(p, f"run {r['run']} is listed twice")
        seen.add(r["run"])
        if r.get("status") in DONE_STATES:
            runs.append(RunFolder(r["run"], p / f"{RUN_PREFIX}{r['run']}", done_json.trace_name(r)))
    return runs
