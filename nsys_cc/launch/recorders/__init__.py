"""The recorders of a profile's runs, one module each (`nsys`: Nsight Systems, the default; `torch`: vLLM's torch
profiler), and this registry — the one list of the values `--profiler` (a request's `profiler`) takes.

Everything that differs between the two is the recorder's (`base.Recorder`): its commands, environment, trace file
name, export, binary and version, what it refuses and warns of. The launcher asks `get(request.profiler)` and never
tests the name; the run records store which recorder made each trace and its version (`formats.done_json`,
`formats.status_json`), and the readers take the trace's name from there. Adding a recorder is a module here and a
line in `RECORDERS`.
"""

from __future__ import annotations

from ...errors import InputError
from .base import Recorder
from .nsys import NSYS
from .torch import TORCH

RECORDERS: tuple[Recorder, ...] = (NSYS, TORCH)  # the first is the default
NAMES = tuple(r.name for r in RECORDERS)
DEFAULT = RECORDERS[0]


def get(name: str | None) -> Recorder:
    """The recorder called `name` (None: the default), else InputError naming the parameter `profiler`."""
    if name is None:
        return DEFAULT
    for recorder in RECORDERS:
        if recorder.name == name:
            return recorder
    raise InputError(f"profiler must be {' or '.join(NAMES)}, not {name!r}", param="profiler")
