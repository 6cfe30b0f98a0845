"""`X.bench.json`: a model's per-iteration latencies, the `--output-json` of vLLM's latency benchmark — beside each
trace `X.sqlite` of a one-process-per-model profile (vLLM writes it), `run-<k>/<label>.bench.json` in an interleaved
run (the benchmark driver writes it, `write`, in the same format): `{"avg_latency", "latencies": [seconds per measured
iteration, in the order they ran], "percentiles": {"10": …, …}}`. `latencies` holds one entry per measured
iteration: perf_counter around one `LLM.generate` call. The forward-share check pairs them with the trace's
iteration ranges; the speculative analysis cross-checks its measured speedup with them."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING

from .. import inputs
from ..errors import InputError

if TYPE_CHECKING:
    import numpy as np

PERCENTILES = (10, 25, 50, 75, 90, 99)


def write(path: Path, latencies: list[float]) -> None:
    """`path` holding `latencies` (seconds) as vLLM's latency benchmark writes them (inside the benchmark's process,
    in the attempt folder it was given)."""
    import numpy as np

    lat = np.asarray(latencies, dtype=float)
    doc = {"avg_latency": float(lat.mean()) if lat.size else None, "latencies": lat.tolist(),
           "percentiles": {str(p): float(v) for p, v in zip(PERCENTILES, np.percentile(lat, PERCENTILES))}
           if lat.size else {}}
    path.write_text(json.dumps(doc, indent=1))


def read_latencies(bench_json: str | os.PathLike) -> np.ndarray:
    """vLLM's per-iteration latencies in seconds (float array, possibly empty) from its latency `--output-json`.
    Raises InputError when the file cannot be read or is not such a file."""
    import numpy as np

    try:
        doc = inputs.load_json(bench_json, "vLLM latency JSON")
        values = doc["latencies"]
        if not isinstance(values, list):
            raise TypeError(f"latencies is a {type(values).__name__}, not a list")
        out = np.asarray([float(x) for x in values], dtype=float)
        bad = np.flatnonzero(~(np.isfinite(out) & (out > 0)))
        if len(bad):  # a time an iteration took is a finite positive number of seconds (issue 45: −76 %–75 %)
            raise ValueError(f"latencies[{bad[0]}] is {values[bad[0]]!r}, not the seconds an iteration took "
                             f"({len(bad)} of {len(out)} are not)")
        return out
    except (InputError, OSError, ValueError, KeyError, TypeError) as exc:
        raise InputError(f"{bench_json} is not a vLLM latency --output-json: {exc}") from None
