"""What a GPU-traces export holds, one tab-separated line per trace (stdlib only: runs on the GPU machine too).

Columns: trace, nsys (the exporting version), forwards (`model_executable()` ranges), drafts
(`draft_model_executable()`), steps (`nsys_cc:step`), cuda_api (CUDA API rows), graph_launches (`cudaGraphLaunch`
API rows), kernels (kernel rows), graph_kernels (kernel rows of graph nodes: `--cuda-graph-trace=node`),
graph_trace (whole-graph rows: `--cuda-graph-trace=graph`). `--header` prints the column names first.

    python3 summarize.py [--header] X.sqlite [Y.sqlite …]
"""

from __future__ import annotations

import sqlite3
import sys
from pathlib import Path

COLUMNS = ["trace", "nsys", "forwards", "drafts", "steps", "cuda_api", "graph_launches", "kernels", "graph_kernels",
           "graph_trace"]


def _count(con: sqlite3.Connection, tables: set[str], table: str, where: str = "", join: str = "") -> int:
    if table not in tables:
        return 0
    return int(con.execute(f"SELECT count(*) FROM {table} t {join} {where}").fetchone()[0])


def summary(path: str | Path) -> dict[str, object]:
    con = sqlite3.connect(f"file:{Path(path).resolve()}?mode=ro", uri=True)
    try:
        tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        meta = "META_DATA_EXPORT" if "META_DATA_EXPORT" in tables else "EXPORT_META_DATA"
        version = con.execute(f"SELECT value FROM {meta} WHERE name = 'EXPORT_PRODUCT_VERSION'").fetchone()
        names = "LEFT JOIN StringIds s ON s.id = t.textId"

        def ranges(name: str) -> int:
            return _count(con, tables, "NVTX_EVENTS", f"WHERE t.eventType IN (59, 60) AND "
                                                      f"trim(coalesce(t.text, s.value), ':') = '{name}'", names)

        return {
            "trace": Path(path).name,
            "nsys": version[0] if version else "?",
            "forwards": ranges("model_executable()"),
            "drafts": ranges("draft_model_executable()"),
            "steps": ranges("nsys_cc:step"),
            "cuda_api": _count(con, tables, "CUPTI_ACTIVITY_KIND_RUNTIME"),
            "graph_launches": _count(con, tables, "CUPTI_ACTIVITY_KIND_RUNTIME",
                                     "WHERE s.value LIKE 'cudaGraphLaunch%'", "JOIN StringIds s ON s.id = t.nameId"),
            "kernels": _count(con, tables, "CUPTI_ACTIVITY_KIND_KERNEL"),
            "graph_kernels": _count(con, tables, "CUPTI_ACTIVITY_KIND_KERNEL", "WHERE t.graphNodeId IS NOT NULL"),
            "graph_trace": _count(con, tables, "CUPTI_ACTIVITY_KIND_GRAPH_TRACE"),
        }
    finally:
        con.close()


def main(argv: list[str]) -> int:
    if argv and argv[0] == "--header":
        print("\t".join(COLUMNS))
        argv = argv[1:]
    for path in argv:
        row = summary(path)
        print("\t".join(str(row[c]) for c in COLUMNS), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
