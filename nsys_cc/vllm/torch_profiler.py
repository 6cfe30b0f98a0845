"""The PyTorch profiler around a benchmark: what the drivers (`interleave`, `bench`) run instead of nsys on the torch
route (`profile --profiler torch`).

The launcher sets `NSYS_CC_TORCH_TRACE=PATH` (and `NSYS_CC_TORCH_RANGES=1`, so that the plugin's ranges are
torch.profiler ranges, `torch_backend`); the driver starts the profiler once its engines are built (`start`), runs the
benchmark's iterations, stops it and writes the trace to PATH (`stop`: Kineto's Chrome-trace JSON, gzip-compressed when
PATH ends in `.gz`), before it writes its own records — so a run whose trace is missing is a failed run.

What is recorded (`NSYS_CC_TORCH_SETTINGS`, a comma-separated list of `contract.TORCH_SETTINGS`; empty by default):
activities CPU, plus CUDA when `torch.cuda.is_available()` (the launches, kernels, copies and sets the projection
needs); of the CPU side only the `user_annotation` scope (Kineto's `RecordScope.USER_SCOPE`: the plugin's ranges),
without stacks and shapes — what the analysis reads and nothing more, the least the profiler costs
(`benchmarks/torch_vs_nsys.py`, docs/PERFORMANCE.md). "ops" records every aten operator as well (`cpu_op` events, the
profiler's default), "stack" the Python frames (`with_stack`: `python_function` events), "shapes" the operators' input
shapes (`record_shapes`). Profiling only the user scope needs torch's own `_enable_profiler(…, scopes)`, which
`torch.profiler.profile` does not expose; where this torch lacks it, the public profiler runs (every operator recorded)
and a line on stderr says so.

The trace is written through the one writer (`files.folder.Folder`): torch saves the JSON beside PATH under a
temporary name, which is compressed into a second one and renamed over PATH.
"""

from __future__ import annotations

import gzip
import os
import shutil
import sys
from pathlib import Path
from typing import Any

from .. import inputs
from ..contract import ENV_TORCH_SETTINGS, ENV_TORCH_TRACE, TORCH_SETTINGS
from ..files.folder import Folder

COMPRESS_LEVEL = 6  # gzip's default: a 500 MB trace in ~15 s on the 2-core development machine


def settings_of(text: str) -> frozenset[str]:
    """The settings named in `text` (comma-separated, blanks ignored); ValueError naming the variable and each unknown
    setting as a quoted string (a newline in one stays inside its quotes: the line keeps the variable's name). The
    launcher checks it before the runs (`launch.environment.check`), the driver again (`from_environment`)."""
    names = frozenset(p.strip() for p in text.split(",") if p.strip())
    unknown = sorted(names - set(TORCH_SETTINGS))
    if unknown:
        raise ValueError(f"{ENV_TORCH_SETTINGS}: unknown setting(s) {', '.join(map(repr, unknown))} (known: "
                         f"{', '.join(TORCH_SETTINGS)}, comma-separated)")
    return names


class Recording:
    """One profiled stretch of a benchmark, written to `path` (module docstring)."""

    def __init__(self, path: str | os.PathLike, settings: frozenset[str] = frozenset()):
        self.path = Path(path)
        self.settings = settings
        self._public: Any = None  # torch.profiler.profile, where this torch cannot profile the user scope alone
        self._on = False

    def start(self) -> None:
        import torch

        cuda = torch.cuda.is_available()
        shapes, stack, ops = ("shapes" in self.settings, "stack" in self.settings, "ops" in self.settings)
        try:
            from torch._C._autograd import _enable_profiler, _prepare_profiler
            from torch._C._profiler import (
                ProfilerActivity,
                ProfilerConfig,
                ProfilerState,
                RecordScope,
                _ExperimentalConfig,
            )

            activities = {ProfilerActivity.CPU, *((ProfilerActivity.CUDA,) if cuda else ())}
            config = ProfilerConfig(ProfilerState.KINETO, shapes, False, stack, False, False, _ExperimentalConfig())
            _prepare_profiler(config, activities)
            _enable_profiler(config, activities, set() if ops else {RecordScope.USER_SCOPE})
        except (ImportError, AttributeError, TypeError) as exc:
            print(f"[nsys-cc] torch {torch.__version__} cannot profile the user scope alone ({exc}): every operator "
                  "is recorded too", file=sys.stderr, flush=True)
            from torch.profiler import ProfilerActivity as Activity, profile

            public = profile(activities=[Activity.CPU, *([Activity.CUDA] if cuda else [])], record_shapes=shapes,
                             with_stack=stack)
            public.start()
            self._public = public
        self._on = True

    def stop(self) -> Path:
        """Stop the profiler and write the trace to `path`; returns it."""
        if not self._on:
            raise RuntimeError("the torch profiler was not started")
        self._on = False
        folder = Folder(self.path.parent)
        raw = folder.path(f".{self.path.name}.raw.json")
        folder.remove(raw)
        if self._public is not None:
            self._public.stop()
            self._public.export_chrome_trace(str(raw))
        else:
            from torch._C._autograd import _disable_profiler

            _disable_profiler().save(str(raw))
        if self.path.name.endswith(".gz"):
            packed = f".{self.path.name}.tmp"
            with inputs.open_file(raw, "torch profiler's trace") as src, folder.open_new(packed, "wb") as dst, \
                    gzip.GzipFile(fileobj=dst, mode="wb", compresslevel=COMPRESS_LEVEL, mtime=0) as gz:
                shutil.copyfileobj(src, gz, 1 << 20)
            folder.remove(raw)
            folder.replace(packed, self.path.name)
        else:
            folder.replace(raw, self.path.name)
        return self.path


def from_environment(environ: os._Environ | dict = os.environ) -> Recording | None:
    """The recording the launcher asks for (`NSYS_CC_TORCH_TRACE`, `NSYS_CC_TORCH_SETTINGS`), None when none."""
    path = environ.get(ENV_TORCH_TRACE, "")
    if not path:
        return None
    try:
        return Recording(path, settings_of(environ.get(ENV_TORCH_SETTINGS, "")))
    except ValueError as exc:
        raise SystemExit(str(exc)) from None
