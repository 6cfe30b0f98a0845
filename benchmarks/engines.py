"""Which SQLite reader to read big exports with: the candidates timed on the same columns of one export.

`python benchmarks/engines.py [--kernels 1M] [--repeat 3]` reads the integer columns the projection needs from the
API and kernel tables (RUNTIME: start, end, globalTid, correlationId; KERNEL: start, end, correlationId,
globalPid, shortName) with each reader installed, each in a fresh process, and prints the median time and peak
RSS. Candidates: the stdlib cursor (`fetchall` into `np.array`, and streamed with `np.fromiter`), apsw (streamed
with `np.fromiter`), connectorx (Arrow), ADBC's SQLite driver (Arrow) on one thread, and nsys_cc's reader
(`bulk.read_columns`: ADBC, rowid ranges on parallel threads, batches copied into the output arrays). Also
`floor`: SQLite alone decoding those values (`SELECT total(…)`), which no SQLite-based reader can beat.
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import subprocess
import sys
import time
import urllib.parse
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

QUERIES = {
    "CUPTI_ACTIVITY_KIND_RUNTIME": ["start", "end", "globalTid", "correlationId"],
    "CUPTI_ACTIVITY_KIND_KERNEL": ["start", "end", "correlationId", "globalPid", "shortName"],
}
CANDIDATES = ("floor", "stdlib_fetchall", "stdlib_fromiter", "apsw", "connectorx", "adbc", "nsys_cc")


def _sql(table: str, cols: list[str]) -> str:
    return f"SELECT {', '.join(cols)} FROM {table}"


def run(name: str, path: str) -> None:
    """One candidate in this process; prints {"seconds", "peak_rss_mib"} (imports excluded)."""
    import numpy as np

    uri = f"file:{urllib.parse.quote(str(Path(path).resolve()))}?mode=ro&immutable=1"
    if name == "floor":
        import sqlite3

        conn = sqlite3.connect(uri, uri=True)
        work = lambda: [conn.execute(f"SELECT {', '.join(f'total({c})' for c in cols)} FROM {t}").fetchall()  # noqa: E731
                        for t, cols in QUERIES.items()]
    elif name.startswith("stdlib"):
        import sqlite3

        conn = sqlite3.connect(uri, uri=True)
        if name == "stdlib_fetchall":
            work = lambda: [np.array(conn.execute(_sql(t, c)).fetchall(), np.int64) for t, c in QUERIES.items()]  # noqa: E731
        else:
            work = lambda: [np.fromiter(itertools.chain.from_iterable(conn.execute(_sql(t, c))), np.int64)  # noqa: E731
                            for t, c in QUERIES.items()]
    elif name == "apsw":
        import apsw

        conn = apsw.Connection(uri, flags=apsw.SQLITE_OPEN_READONLY | apsw.SQLITE_OPEN_URI)
        work = lambda: [np.fromiter(itertools.chain.from_iterable(conn.execute(_sql(t, c))), np.int64)  # noqa: E731
                        for t, c in QUERIES.items()]
    elif name == "connectorx":
        import connectorx as cx

        work = lambda: [cx.read_sql(f"sqlite://{Path(path).resolve()}", _sql(t, c), return_type="arrow")  # noqa: E731
                        for t, c in QUERIES.items()]
    elif name == "adbc":
        import adbc_driver_sqlite.dbapi as adbc

        def work():
            conn = adbc.connect(uri)
            out = []
            for t, c in QUERIES.items():
                cur = conn.cursor()
                cur.execute(_sql(t, c))
                out.append(cur.fetch_arrow_table())
                cur.close()
            conn.close()
            return out
    elif name == "nsys_cc":
        from nsys_cc.trace import bulk, open_trace

        trace = open_trace(path)
        work = lambda: [bulk.read_columns(trace, t, c) for t, c in QUERIES.items()]  # noqa: E731
    else:
        raise SystemExit(f"unknown candidate {name}")
    t0 = time.perf_counter()
    work()
    seconds = time.perf_counter() - t0
    rss = next(int(line.split()[1]) / 1024 for line in open("/proc/self/status") if line.startswith("VmHWM"))
    print(json.dumps({"seconds": seconds, "peak_rss_mib": rss}))


def main(argv: list[str] | None = None) -> None:
    import generate
    from run import parse_size, warm_cache

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--kernels", default="1M")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--one", nargs=2, metavar=("NAME", "EXPORT"), help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.one:
        run(*a.one)
        return
    path = generate.ensure(generate.Shape(kernels=parse_size(a.kernels)))
    warm_cache(path)
    times: dict[str, list] = {c: [] for c in CANDIDATES}
    rss: dict[str, list] = {c: [] for c in CANDIDATES}
    for _ in range(a.repeat):
        for c in CANDIDATES:
            done = subprocess.run([sys.executable, __file__, "--one", c, str(path)], capture_output=True, text=True)
            if done.returncode != 0:
                times[c] = None
                continue
            if times[c] is not None:
                r = json.loads(done.stdout.strip().splitlines()[-1])
                times[c].append(r["seconds"])
                rss[c].append(r["peak_rss_mib"])
    base = statistics.median(times["stdlib_fromiter"])
    print(f"{path.name}: median of {a.repeat}")
    print("| reader | seconds | ÷ stdlib fromiter | peak RSS |\n|---|---:|---:|---:|")
    for c in CANDIDATES:
        if not times[c]:
            print(f"| {c} | not installed | | |")
            continue
        t = statistics.median(times[c])
        print(f"| {c} | {t:.2f} | {t / base:.2f}× | {statistics.median(rss[c]):.0f} MiB |")


if __name__ == "__main__":
    main()
