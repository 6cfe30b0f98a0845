"""Trace sets: many (target, drafts) groups of existing traces — or profile directories — to analyse together, with
the parameters of each.

A trace set is what one `profile` run leaves: its output directory (`profile`: interleaved runs, or one process per
model), or one target trace with one or more draft traces; and the benchmark parameters they were made with. Many of
them come from:

- a sweep directory: its `manifest.json` (written by `nsys-cc sweep`, one set per completed cell: the cell's
  directory, a profile directory; sweeps made before cells made interleaved runs list each cell's traces instead,
  which is still read);
- a manifest file, JSON or CSV, one set per entry/row:

  JSON: a list of objects (or {"trace_sets": [...]}):
      {"name": "bs4-in1024", "profile": "runs/bs4-in1024", "batch_size": 4, "input_len": 1024}
      {"name": "bs4-in1024", "target": "runs/a/target.sqlite", "drafts": ["runs/a/draft.sqlite"],
       "names": ["target", "draft"], "batch_size": 4, "input_len": 1024, "target_tp": 2,
       "output_len": 2, "range_name": "model_executable()",
       "speculative": ["runs/a/draft.spec-g3.sqlite"]}
  CSV: the same keys as columns; `drafts`, `names` and `speculative` hold several values separated by ";".

Each set gives either `profile` (a profile's output directory, analysed as `nsys-cc analyze DIR` reads it: it names
its models itself, so `names`, `drafts` and `speculative` do not go with it) or `target` and `drafts`. `name` defaults
to `set-<row number>`; `names` (labels of the target, the drafts, then the speculative runs) to the file names;
`speculative`: traces of speculative-decoding runs of these drafts (`profile --speculate`; each draft's runs named
`<draft>.spec-g<γ>`, vLLM's metrics dump beside each as `<label>.metrics.json`), analysed in place; `batch_size`,
`input_len`, `target_tp` are carried into the table (empty when not given); `output_len` and `range_name` are passed to
the analysis (as `analyze --output-len/--range`; manifests written before 0.2 say `range`, which is still read; a
profile set without one takes the range `profile` decided, traces without one `model_executable()`). Relative paths
are relative to the manifest's directory. Unknown keys are an error (a typo would otherwise be ignored silently).
"""

from __future__ import annotations

import csv
import json
import os
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from .. import inputs
from ..contract import FORWARD_RANGE
from ..errors import InputError
from ..files import atomic
from ..trace.registry import recognised

MANIFEST_NAME = "manifest.json"
_LIST_SEP = ";"
_INT_KEYS = ("batch_size", "input_len", "target_tp", "output_len")


@dataclass(frozen=True)
class TraceSet:
    """One target trace and its draft traces, or a profile's output directory (`profile`), with what they were
    measured at (None: unknown). `range_name` None: the forward range as `analyze` decides it for the traces."""

    name: str
    target: str = ""
    drafts: tuple[str, ...] = ()
    names: tuple[str, ...] | None = None
    batch_size: int | None = None
    input_len: int | None = None
    target_tp: int | None = None
    output_len: int | None = None
    range_name: str | None = FORWARD_RANGE
    speculative: tuple[str, ...] = ()
    profile: str | None = None

    def __post_init__(self) -> None:
        if self.profile is not None and (self.target or self.drafts or self.speculative or self.names):
            raise InputError(f"trace set {self.name}: a profile directory names its traces and models itself: give "
                             "profile, or target and drafts, not both")
        if self.profile is None and (not self.target or not self.drafts):
            raise InputError(f"trace set {self.name} needs a target and at least one draft (or a profile directory)")

    def to_dict(self, relative_to: str | os.PathLike | None = None) -> dict:
        """The manifest entry; paths under `relative_to` (when given) relative to it, others as they are."""
        def rel(p: str) -> str:
            if relative_to is None:
                return p
            base, full = os.path.abspath(relative_to), os.path.abspath(p)
            return os.path.relpath(full, base) if os.path.commonpath([base, full]) == base else p

        d = asdict(self)
        if self.profile is not None:
            d["profile"], d["target"], d["drafts"] = rel(self.profile), None, None
        else:
            d["target"], d["drafts"] = rel(self.target), [rel(p) for p in self.drafts]
        d["names"] = list(self.names) if self.names else None
        d["speculative"] = [rel(p) for p in self.speculative] or None
        return {k: v for k, v in d.items() if v is not None}


def _entry(raw: dict, index: int, base: Path, where: str) -> TraceSet:
    at = f"{where}: entry {index + 1}"
    fields = set(TraceSet.__dataclass_fields__)
    if None in raw:  # csv.DictReader puts the fields of a row longer than the header under None
        raise InputError(f"{at} has more fields than the header ({len(raw) - 1 + len(raw[None])})")
    unknown = sorted(str(k) for k in set(raw) - fields)
    if unknown:
        raise InputError(f"{at} has unknown key(s) {', '.join(unknown)} (known: {', '.join(sorted(fields))})")
    given = sorted(k for k in ("target", "drafts", "names", "speculative") if raw.get(k) not in (None, "", []))
    if raw.get("profile") not in (None, ""):
        if given:
            raise InputError(f"{at} gives a profile directory and {', '.join(given)}: a profile directory names its "
                             "traces and models itself; give profile, or target and drafts")
    elif not raw.get("target") or not raw.get("drafts"):
        raise InputError(f"{at} needs a target and at least one draft (or a profile directory: profile)")

    def text(key: str, v) -> str:
        if not isinstance(v, (str, int, float)) or isinstance(v, bool):
            raise InputError(f"{at}: {key} must be text, not {type(v).__name__} {_short(v)}")
        out = str(v).strip()
        if not out.isprintable():  # a NUL, a newline, another control character: not a path, nor a name to print
            raise InputError(f"{at}: {key} {_around_control(out)} holds a control character (a path or a name is one "
                                 "line)")
        return out

    def listed(key: str, v) -> tuple[str, ...]:
        if isinstance(v, str):
            items = v.split(_LIST_SEP)
        elif isinstance(v, list):
            items = v
        else:
            raise InputError(f"{at}: {key} must be a list (or one string with ';' between values), not "
                             f"{type(v).__name__} {_short(v)}")
        return tuple(t for t in (text(key, x) for x in items) if t)

    def path(p: str) -> str:
        return os.path.normpath(p if os.path.isabs(p) else base / p)

    values: dict = {"name": text("name", raw.get("name") or f"set-{index + 1}")}
    if raw.get("profile") not in (None, ""):
        values["profile"], values["range_name"] = path(text("profile", raw["profile"])), None
    else:
        values["target"] = path(text("target", raw["target"]))
        values["drafts"] = tuple(path(p) for p in listed("drafts", raw["drafts"]))
        if not values["drafts"]:
            raise InputError(f"{at} needs a target and at least one draft")
    if raw.get("names") not in (None, "", []):
        values["names"] = listed("names", raw["names"])
    if raw.get("speculative") not in (None, "", []):
        values["speculative"] = tuple(path(p) for p in listed("speculative", raw["speculative"]))
    for key in _INT_KEYS:
        v = raw.get(key)
        if v in (None, ""):
            continue
        try:
            number = _whole(v)
        except (TypeError, ValueError, OverflowError):
            raise InputError(f"{at}: {key} must be a whole number, not {_short(v)}") from None
        if number < 1:
            raise InputError(f"{at}: {key} must be ≥ 1, not {number}")
        values[key] = number
    if raw.get("range_name"):
        values["range_name"] = text("range_name", raw["range_name"])
    return TraceSet(**values)


def _short(v) -> str:
    r = repr(v)
    return r if len(r) <= 60 else r[:59] + "…"


def _around_control(v: str) -> str:
    """`v` shortened so that its first control character stays in view (a long path cut at its start would hide it)."""
    if len(repr(v)) <= 60:
        return repr(v)
    i = next(n for n, ch in enumerate(v) if not ch.isprintable())
    start = max(0, i - 30)
    part = repr(v[start:i + 10])
    quote, inside = part[0], part[1:-1]  # the marks go inside the quotes: the text is still one quoted value
    return quote + ("…" if start else "") + inside + ("…" if i + 10 < len(v) else "") + quote


def _whole(v) -> int:
    """A whole number from JSON (an int, or a float without a fraction) or CSV text; never a bool, an inf or 2.5."""
    if isinstance(v, bool):
        raise TypeError(v)
    if isinstance(v, str):
        v = v.strip()
        return int(v) if v.lstrip("+-").isdigit() else _whole(float(v))
    if isinstance(v, float):
        if not v.is_integer():  # also inf and nan
            raise ValueError(v)
        return int(v)
    if isinstance(v, int):
        return v
    raise TypeError(v)


def read_manifest(path: str | os.PathLike) -> list[TraceSet]:
    """The trace sets of a JSON or CSV manifest (see the module docstring)."""
    p = Path(path)
    data = inputs.read_bytes(p, "manifest")  # a regular file only: a FIFO would wait forever
    try:
        text = data.decode("utf-8-sig")  # a spreadsheet's CSV starts with a byte-order mark
    except UnicodeDecodeError as exc:
        raise InputError(f"{p} is not UTF-8 text (byte {exc.start}): save the manifest as UTF-8") from None
    if p.suffix.lower() == ".csv":
        try:
            rows: list[dict] = list(csv.DictReader(text.splitlines()))
        except csv.Error as exc:
            raise InputError(f"{p} is not a CSV manifest: {exc}") from None
    else:
        try:
            doc = json.loads(text)
        except (ValueError, RecursionError) as exc:
            raise InputError(f"{p} is not a JSON manifest: {str(exc)[:200]}") from None
        listed = doc.get("trace_sets") if isinstance(doc, dict) else doc
        if not isinstance(listed, list) or not all(isinstance(r, dict) for r in listed):
            raise InputError(f"{p}: a manifest is a list of objects (or {{\"trace_sets\": [...]}})")
        rows = listed
    if not rows:
        raise InputError(f"{p}: the manifest lists no trace sets")
    sets = [_entry(r, i, p.parent, str(p)) for i, r in enumerate(rows)]
    names = [s.name for s in sets]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise InputError(f"{p}: trace set name(s) given twice: {', '.join(twice)}")
    return sets


def write_manifest(sets: Sequence[TraceSet], path: str | os.PathLike) -> Path:
    """A JSON manifest of `sets`, paths relative to its directory (so the directory can be moved as a whole)."""
    p = Path(path)
    doc = {"trace_sets": [s.to_dict(relative_to=p.parent) for s in sets]}
    return atomic.write_text(p, json.dumps(doc, indent=2) + "\n")


def trace_sets(source: str | os.PathLike) -> list[TraceSet]:
    """The trace sets of a sweep directory (its manifest.json) or of a manifest file."""
    p = Path(source)
    if p.is_dir():
        if not (p / MANIFEST_NAME).is_file():
            raise InputError(f"{p} is a directory without a {MANIFEST_NAME} (a sweep directory has one once a cell "
                             "completed; or give a manifest file)")
        return read_manifest(p / MANIFEST_NAME)
    if not p.exists():
        raise InputError(f"{p} does not exist")
    return read_manifest(p)


# The names a manifest file has (module docstring): JSON, or CSV.
MANIFEST_SUFFIXES = (".json", ".csv")


def is_many(path: str | os.PathLike) -> bool:
    """Whether `path` names many trace sets — a directory, or a manifest file: a .json or .csv file whose content no
    trace format recognises (`trace.registry.recognised`, the one rule: a PyTorch-profiler trace written as `.json`
    is one trace, as is any trace whatever its name) — rather than one trace."""
    p = Path(path)
    try:
        if p.is_dir():
            return True
    except OSError:  # a folder on the way that may not be searched: one trace, whose reader says so in one line
        return False
    if p.suffix.lower() not in MANIFEST_SUFFIXES:
        return False
    try:
        return recognised(p) is None
    except (InputError, OSError):  # missing, not a regular file, unreadable: the manifest reader says what it is
        return True
