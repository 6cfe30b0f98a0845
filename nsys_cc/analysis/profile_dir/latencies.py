"""vLLM's own per-iteration latencies: where the `--output-json` of its latency benchmark (`X.bench.json`) sits, read
by `formats.bench_json`.

`nsys-cc profile` leaves `X.bench.json` beside each trace `X.sqlite` (and `X.metrics.json` beside a speculative run).
`latencies` holds one entry per measured iteration, in seconds: perf_counter around one `LLM.generate` call. The
forward-share check (`nsys_cc.analysis.profile_dir.forward_share`) pairs them with the trace's iteration ranges; the
speculative analysis cross-checks its measured speedup with them (`nsys_cc.analysis.speculative.in_place`).
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from ...errors import InputError
from ...formats.bench_json import read_latencies
from ...trace.registry import trace_stem


def model_stem(trace: str | os.PathLike, engine: str | None = None) -> str:
    """Where a model's own files sit, without their suffix (`X.bench.json`, `X.metrics.json`): beside its trace
    `X.sqlite`, `X`; for the engine labelled `engine` of an interleaved run's trace (`run-<k>/trace.sqlite`, which
    holds every model), `run-<k>/<engine>`: `profile` writes `<label>.bench.json` and `<label>.metrics.json` in the
    run's folder."""
    if engine is None:
        return trace_stem(trace)
    return os.path.join(os.path.dirname(os.fspath(trace)), engine)


def bench_json_of(trace: str | os.PathLike) -> Path:
    """`X.bench.json` beside the trace `X.sqlite` (or `X.nsys-rep`)."""
    return Path(trace_stem(trace) + ".bench.json")


def latencies_beside(trace: str | os.PathLike) -> tuple[np.ndarray | None, str | None]:
    """The latencies of `X.bench.json` beside the trace, None when there is none or it holds none; and a note when
    there is one that cannot be read (what it says instead of the numbers)."""
    path = bench_json_of(trace)
    if not path.exists():
        return None, None
    try:
        values = read_latencies(path)
    except InputError as exc:
        return None, f"{exc}: vLLM's latencies left out"
    return (values if values.size else None), None
