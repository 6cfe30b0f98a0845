"""What `benchmarks/run.py` times, one contender per fresh process (so each peak RSS is its own).

`python benchmarks/contenders.py NAME EXPORT [DRAFT]` runs one contender on EXPORT and prints one JSON line:
{"seconds": time of the work itself (imports and interpreter start excluded), ...details}.

- `raw`: the floor. A plain stdlib `sqlite3` scan of exactly the columns the analysis needs (below), each
  table streamed from the cursor into NumPy with `np.fromiter` (the fastest plain-stdlib way we know: no
  row list is kept); NULLs read through `coalesce`. Nothing else: no names resolved, no join, no sort.
- `reader`: nsys_cc's reader alone: open the export and read what `analyze` reads of it.
- `nvtx_raw`: the floor for NVTX-heavy exports: a stdlib `fetchall` of NVTX_EVENTS' start, end, text, textId,
  globalTid, eventType (issue 15's yardstick).
- `ranges`: `nsys-cc ranges EXPORT --range model_executable() --format csv` (output to /dev/null).
- `analyze_many`: `cost_coefficient(EXPORT, [DRAFT, …])` with several big traces (peak memory: about one trace).
- `analyze`: nsys_cc's full `analyze` path, `cost_coefficient(EXPORT, [DRAFT])`: ranges, projection, phases,
  kernel breakdown, coefficient with bootstrap intervals, diagnosis. DRAFT is a small export (its share of
  the time is included).
"""

from __future__ import annotations

import itertools
import json
import sqlite3
import sys
import time
import urllib.parse
from pathlib import Path

# Per table: the integer columns (NULL read as -1) and the text columns the analysis needs.
NEEDED = {
    "NVTX_EVENTS": (
        ["start", "end", "eventType", "globalTid", "endGlobalTid", "textId", "domainId", "int64Value"], ["text"],
        "eventType IN (59, 60, 70, 71)",
    ),
    "StringIds": (["id"], ["value"], None),
    "CUPTI_ACTIVITY_KIND_RUNTIME": (["start", "end", "globalTid", "correlationId"], [], None),
    "CUPTI_ACTIVITY_KIND_KERNEL": (["start", "end", "correlationId", "globalPid", "shortName"], [], None),
    "CUPTI_ACTIVITY_KIND_MEMCPY": (["start", "end", "correlationId", "globalPid", "copyKind"], [], None),
    "CUPTI_ACTIVITY_KIND_MEMSET": (["start", "end", "correlationId", "globalPid"], [], None),
}


def raw_scan(path: str) -> dict:
    import numpy as np

    uri = f"file:{urllib.parse.quote(str(Path(path).resolve()))}?mode=ro&immutable=1"
    conn = sqlite3.connect(uri, uri=True)
    out = {}
    for table, (ints, texts, where) in NEEDED.items():
        cond = f" WHERE {where}" if where else ""
        cols = ", ".join(f'coalesce("{c}", -1)' for c in ints)
        flat = np.fromiter(itertools.chain.from_iterable(conn.execute(f"SELECT {cols} FROM {table}{cond}")), np.int64)
        out[table] = flat.reshape(-1, len(ints))
        for c in texts:
            out[f"{table}.{c}"] = np.fromiter(
                itertools.chain.from_iterable(conn.execute(f'SELECT "{c}" FROM {table}{cond}')), object
            )
    conn.close()
    return {"rows": {k: len(v) for k, v in out.items()}}


def nvtx_raw_scan(path: str) -> dict:
    """The floor for NVTX-heavy exports (issue 15): a stdlib `fetchall` of the NVTX_EVENTS columns a range table
    needs (start, end, text, textId, globalTid, eventType), as a user would write it. Nothing resolved."""
    uri = f"file:{urllib.parse.quote(str(Path(path).resolve()))}?mode=ro&immutable=1"
    conn = sqlite3.connect(uri, uri=True)
    rows = conn.execute("SELECT start, end, text, textId, globalTid, eventType FROM NVTX_EVENTS").fetchall()
    conn.close()
    return {"rows": len(rows)}


def ranges_csv(path: str) -> dict:
    """`nsys-cc ranges EXPORT --range model_executable() --format csv`, its output to /dev/null."""
    import os

    from nsys_cc.cli import main as cli_main

    fd = os.dup(1)
    with open(os.devnull, "wb") as null:
        os.dup2(null.fileno(), 1)
        try:
            cli_main(["ranges", path, "--range", "model_executable()", "--format", "csv"])
        except SystemExit as exc:
            if exc.code:
                raise
        finally:
            sys.stdout.flush()
            os.dup2(fd, 1)
            os.close(fd)
    return {}


def reader(path: str) -> dict:
    """The reads `analyze` makes of one export (see `nsys_cc.analysis.forwards.launches.launches`): NVTX ranges, and
    the API calls' and GPU ops' columns the projection and kernel breakdown need."""
    from nsys_cc.trace import open_trace
    from nsys_cc.trace.cuda import api_times, op_times

    with open_trace(path) as trace:
        ranges = trace.nvtx_ranges()
        api = api_times(trace)
        ops = op_times(trace)
        return {"ranges": len(ranges), "api": len(api["start_ns"]), "ops": len(ops["start_ns"])}


def analyze(path: str, draft: str) -> dict:
    from nsys_cc.analysis.coefficient.measure import cost_coefficient

    result = cost_coefficient(path, [draft])
    c = result.coefficients
    metric = "gpu_span" if (c["metric"] == "gpu_span").any() else "wall"  # NVTX-only exports: wall time only
    row = c[(c["phase"] == "decode") & (c["metric"] == metric)]
    return {"forwards": int(result.target.kept.shape[0]), f"c_decode_{metric}": float(row["c"].iloc[0])}


def analyze_many(path: str, drafts: list[str]) -> dict:
    """`cost_coefficient(EXPORT, DRAFTS)` with several big traces: its peak memory should be about one trace's."""
    from nsys_cc.analysis.coefficient.measure import cost_coefficient

    result = cost_coefficient(path, drafts)
    return {"traces": 1 + len(drafts), "forwards": [int(m.kept.shape[0]) for m in result.models]}


def main(argv: list[str]) -> None:
    name, path, *rest = argv
    if name == "raw":
        run = lambda: raw_scan(path)  # noqa: E731
    elif name == "nvtx_raw":
        run = lambda: nvtx_raw_scan(path)  # noqa: E731
    elif name == "ranges":
        import nsys_cc.analysis.forwards.projection  # noqa: F401
        import nsys_cc.cli  # noqa: F401
        import nsys_cc.report.table_text  # noqa: F401

        run = lambda: ranges_csv(path)  # noqa: E731
    elif name == "reader":
        run = lambda: reader(path)  # noqa: E731
    elif name == "analyze_many":
        from nsys_cc.analysis.coefficient import measure  # noqa: F401  (imports are not the work timed)

        run = lambda: analyze_many(path, rest)  # noqa: E731
    elif name == "analyze":
        from nsys_cc.analysis.coefficient import measure  # noqa: F401  (imports are not the work timed)

        run = lambda: analyze(path, rest[0])  # noqa: E731
    else:
        raise SystemExit(f"unknown contender {name!r}")
    import numpy  # noqa: F401  (imports are not the work timed)

    if name == "reader":
        import nsys_cc.trace  # noqa: F401
    base = _status_mib("VmRSS")
    t0 = time.perf_counter()
    info = run()
    seconds = time.perf_counter() - t0
    print(json.dumps({"seconds": seconds, "peak_rss_mib": _status_mib("VmHWM"), "imports_rss_mib": base, **info}))


def _status_mib(field: str) -> float:
    """A memory figure of this process: VmHWM is the peak since it started its program (`ru_maxrss` would also
    count the pages it had before exec, i.e. a copy of the parent's); VmRSS is the present one."""
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(f"{field}:"):
                return int(line.split()[1]) / 1024
    return float("nan")


if __name__ == "__main__":
    main(sys.argv[1:])
