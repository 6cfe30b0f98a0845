"""Bulk column reads from an export into NumPy, and the globalTid/globalPid decoding.

`read_columns(trace, table, exprs)` returns one NumPy array per SQL expression over a table's rows in rowid
order. Names stay integer ids (StringIds ids, or codes into a table of distinct texts) until the end.

Two engines, same results (tests compare them on every fixture):
- Arrow (when `adbc_driver_sqlite` and `pyarrow` import): ADBC's SQLite driver steps the query in C and fills
  Arrow buffers, so no Python object is made per row or per value; big tables are split into rowid ranges
  read on parallel threads (the driver releases the GIL), one read-only connection each. Measured (docs/
  PERFORMANCE.md) at 3–4× the speed of the stdlib cursor on one core, more with two.
- stdlib: the Trace's sqlite3 cursor, flattened with `np.fromiter` (no row list is kept). Used for tables of at
  most SMALL_ROWS rows (importing the Arrow engine costs about 0.1 s, more than it saves on them), when the Arrow
  engine is not installed, when `NSYS_CC_READER=stdlib`, and for any read the Arrow engine refuses (it types a
  column from its first rows and stops at a value of another type, which odd exports can hold; the stdlib cursor
  reads it as the old code did). `NSYS_CC_READER=arrow` uses the Arrow engine at every size.
Integer expressions must never be NULL: wrap nullable columns in `coalesce(col, NULL_INT)` (`NULL_INT`
marks SQL NULL). The stdlib cursor remains the way in for everything else (schema, metadata, small reads).

globalTid / globalPid (Nsight Systems' serialized GlobalId):
- PID = (globalTid >> 24) & 0xFFFFFF, TID = globalTid & 0xFFFFFF;
- globalPid == globalTid & PID_MASK (the TID bits zeroed); bits above 48 hold a VM/host id, so
  rows are compared on the masked values, never on the decoded PID alone.
"""

from __future__ import annotations

import itertools
import os
import time
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pandas as pd

from .. import progress
from ..errors import InputError
from .source import ENV_QUERY_TIMEOUT, TraceSource, query_timeout, quote_identifier, readonly_uri

# Marks SQL NULL in int64 columns read through coalesce(); no timestamp, id or count takes this value.
NULL_INT = -(2**63)
# globalTid & PID_MASK == globalPid of the same process (nsys joins GPU rows to API rows this way).
# 0xFFFFFFFFFF000000 as a signed int64 (what SQLite and NumPy hold), i.e. every bit but the TID field.
PID_MASK = -(1 << 24)
# The PID field alone: what nsys uses to look up NVTX domains per process.
PID_FIELD_MASK = 0x0000FFFFFF000000


def decode_pid(global_id: np.ndarray) -> np.ndarray:
    """PID field (bits 24–47) of globalTid/globalPid values."""
    return (global_id >> 24) & 0xFFFFFF


def decode_tid(global_tid: np.ndarray) -> np.ndarray:
    """TID field (bits 0–23) of globalTid values."""
    return global_tid & 0xFFFFFF


ENGINE_ENV = "NSYS_CC_READER"
# Tables with more rows than this are read as several rowid ranges in parallel (Arrow engine only).
PART_ROWS = 400_000
# Rows per Arrow batch from the driver (its default, 1024, costs more per row).
BATCH_ROWS = 16_384
# Tables of at most this many rows are read with the stdlib cursor unless NSYS_CC_READER=arrow: the Arrow engine's
# import (adbc, pyarrow's dataset module) costs more than it saves there (`nsys-cc analyze` of two small traces).
SMALL_ROWS = 50_000


def arrow_available() -> bool:
    """True when the Arrow engine (adbc_driver_sqlite + pyarrow) can be imported."""
    try:
        import adbc_driver_sqlite.dbapi  # noqa: F401
        import pyarrow  # noqa: F401
    except ImportError:
        return False
    return True


ENGINE_CHOICES = ("arrow", "stdlib")


def _choice() -> str:
    """`NSYS_CC_READER` as set ("" when unset or empty): "arrow" or "stdlib"; any other value is one InputError naming
    the variable (a typo such as `NSYS_CC_READER=sdtlib` silently read with the default engine before)."""
    choice = os.environ.get(ENGINE_ENV, "").strip().lower()
    if choice and choice not in ENGINE_CHOICES:
        raise InputError(f"{ENGINE_ENV}={os.environ[ENGINE_ENV]!r}: set it to one of {', '.join(ENGINE_CHOICES)}, "
                         "or leave it unset (Arrow for large tables when installed)")
    return choice


def engine() -> str:
    """The engine bulk reads use now: "arrow" or "stdlib" (`NSYS_CC_READER=stdlib` forces the latter)."""
    if _choice() == "stdlib":
        return "stdlib"
    return "arrow" if arrow_available() else "stdlib"


def engine_for(rows: int) -> str:
    """The engine a read of a table of `rows` rows uses: `engine()`, but the stdlib cursor for a small table unless
    `NSYS_CC_READER=arrow` asks for Arrow at every size (the Arrow engine is not even imported then)."""
    choice = _choice()
    if choice == "stdlib" or (choice != "arrow" and rows <= SMALL_ROWS):
        return "stdlib"
    return "arrow" if arrow_available() else "stdlib"


def _workers() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


def read_columns(
    trace: TraceSource, table: str, exprs: Sequence[str], *, where: str | None = None, floats: Sequence[int] = (),
    texts: Sequence[int] = (), out: Sequence[np.ndarray | None] | None = None
) -> list:
    """Evaluate `exprs` over the rows of `table` (those satisfying `where`) in rowid order.

    Expression i gives an int64 array, a float64 array when i is in `floats`, or when i is in `texts` a pair
    (codes, values): `values[codes[j]]` is row j's text, code -1 meaning NULL (distinct texts are made once, not
    once per row). Integer and float expressions must not be NULL. `out` (without `where`): arrays of the table's
    row count to fill for some integer/float expressions (None for the others), e.g. slices of one array that
    several tables fill, so the rows are not copied again to be put together.
    """
    rows = trace.rows(table)
    kinds = ["text" if i in texts else "float" if i in floats else "int" for i in range(len(exprs))]
    dests = list(out) if out is not None else [None] * len(exprs)
    if not rows:
        return [d if d is not None else _empty(k) for d, k in zip(dests, kinds)]
    with progress.step(f"reading {table}", rows=rows):
        result = None
        if engine_for(rows) == "arrow":
            try:
                result = _read_arrow(trace, table, exprs, kinds, where, rows, dests)
            except Exception:  # noqa: BLE001 — any refusal: the stdlib cursor reads it (and reports real errors)
                result = None
        if result is None:
            result = _read_stdlib(trace, table, exprs, kinds, where)
    for i, dest in enumerate(dests):
        if dest is not None and result[i] is not dest:
            dest[...] = result[i]
            result[i] = dest
    return result


def _empty(kind: str):
    if kind == "text":
        return np.empty(0, np.int64), np.empty(0, dtype=object)
    return np.empty(0, np.float64 if kind == "float" else np.int64)


def _sql(table: str, exprs: Sequence[str], where: str | None) -> str:
    cond = f" WHERE {where}" if where else ""
    return f"SELECT {', '.join(exprs)} FROM {quote_identifier(table)}{cond} ORDER BY rowid"


def _read_stdlib(trace, table, exprs, kinds, where) -> list:
    out: list = [None] * len(exprs)
    with trace.reading() as conn:
        for kind, dtype in (("int", np.int64), ("float", np.float64)):
            idx = [i for i, k in enumerate(kinds) if k == kind]
            if idx:
                cur = conn.cursor()
                try:
                    cur.execute(_sql(table, [exprs[i] for i in idx], where))
                    flat = np.fromiter(itertools.chain.from_iterable(cur), dtype=dtype).reshape(-1, len(idx))
                finally:
                    cur.close()
                for j, i in enumerate(idx):
                    out[i] = np.ascontiguousarray(flat[:, j])
        for i in (i for i, k in enumerate(kinds) if k == "text"):
            cur = conn.cursor()
            try:
                cur.execute(_sql(table, [exprs[i]], where))
                values = np.fromiter(itertools.chain.from_iterable(cur), dtype=object)
            finally:
                cur.close()
            codes, uniq = pd.factorize(values, use_na_sentinel=True)
            out[i] = codes.astype(np.int64), np.asarray(uniq, dtype=object)
    return out


def _uri(trace: TraceSource) -> str:
    return readonly_uri(trace.sqlite_path)


def _rowids(trace, table: str) -> tuple[int, int]:
    with trace.reading() as conn:
        # Two subqueries: each is one b-tree descent, while `min(rowid), max(rowid)` together scan the table.
        name = quote_identifier(table)
        lo, hi = conn.execute(f"SELECT (SELECT min(rowid) FROM {name}), (SELECT max(rowid) FROM {name})").fetchone()
    return int(lo), int(hi)


def _read_arrow(trace, table, exprs, kinds, where, rows, dests) -> list:
    """Each rowid range on its own thread, its batches converted as they come into preallocated arrays: the data
    is copied once and the driver's buffers are reused batch after batch instead of piling up. Without `where`,
    over rowids without gaps (nsys never deletes), row r goes to index r − lo and `dests` are filled directly;
    otherwise each range fills its own region of arrays sized to the rowid span, closed up at the end."""
    lo, hi = _rowids(trace, table)
    exact = where is None and hi - lo + 1 == rows
    size = rows if exact else hi - lo + 1
    out = [d if exact and d is not None else np.empty(size, np.float64 if k == "float" else np.int64)
           for d, k in zip(dests, kinds)]
    texts = [i for i, k in enumerate(kinds) if k == "text"]
    # A text expression is read as coalesce(text, '') plus its NULL flag: the driver types a column from its
    # first rows, and a column that starts with NULLs would be typed as something else than text.
    sql_exprs = []
    for e, k in zip(exprs, kinds):
        sql_exprs += [f"coalesce({e}, '')", f"({e}) IS NULL"] if k == "text" else [e]
    uri = _uri(trace)
    parts = _parts(lo, hi + 1)

    def read(bound: tuple[int, int]) -> tuple[int, list[dict[str, int]]]:
        first, stop = bound
        cond = f"rowid >= {first} AND rowid < {stop}" + (f" AND ({where})" if where else "")
        start = at = first - lo
        seen: list[dict[str, int]] = [{} for _ in texts]  # per text expression: text → code in this range
        for batch in _arrow_batches(uri, _sql(table, sql_exprs, cond)):
            n, j = batch.num_rows, 0
            for i, dest in enumerate(out):
                if kinds[i] == "text":
                    dest[at:at + n] = _text_codes(batch.column(j), batch.column(j + 1), seen[texts.index(i)])
                    j += 2
                else:
                    dest[at:at + n] = _arrow_numpy(batch.column(j), dest.dtype)
                    j += 1
            at += n
        if exact and at != stop - lo:
            raise ValueError(f"{table}: rowids {first}–{stop - 1} gave {at - start} rows")
        return at - start, seen

    done = _in_parallel(read, parts)
    # Texts: one code per distinct text over all ranges (the first range's codes stay as they are).
    values: list[dict[str, int]] = [{} for _ in texts]
    for (first, _), (count, seen) in zip(parts, done):
        region = slice(first - lo, first - lo + count)
        for t, i in enumerate(texts):
            remap = np.array([values[t].setdefault(v, len(values[t])) for v in seen[t]] + [-1], np.int64)
            if not np.array_equal(remap[:-1], np.arange(len(seen[t]))):
                out[i][region] = remap[out[i][region]]
    if not exact:  # close up the regions, then give back the unused tail
        at = 0
        for (first, _), (count, _) in zip(parts, done):
            if first - lo != at:
                for arr in out:
                    arr[at:at + count] = arr[first - lo:first - lo + count]
            at += count
        for arr in out:
            arr.resize(at, refcheck=False)
    result: list = list(out)
    for t, i in enumerate(texts):
        result[i] = (out[i], np.array(list(values[t]), dtype=object))
    return result


def _text_codes(text, null, seen: dict[str, int]) -> np.ndarray:
    """Codes of one batch's texts in `seen` (text → code, extended with the batch's new texts); -1 for NULL."""
    import pyarrow.compute as pc

    enc = pc.dictionary_encode(text)
    remap = np.array([seen.setdefault(v, len(seen)) for v in enc.dictionary.to_pylist()], np.int64)
    codes = remap[enc.indices.to_numpy(zero_copy_only=False)] if len(remap) else np.zeros(len(text), np.int64)
    return np.where(_arrow_numpy(null, np.int64) == 1, -1, codes)


def _parts(first: int, stop: int) -> list[tuple[int, int]]:
    """[first, stop) rowids cut into as many ranges as there are cores, each of at least PART_ROWS rowids."""
    parts = max(1, min(_workers(), -(-(stop - first) // PART_ROWS)))
    step = -(-(stop - first) // parts)
    return [(first + k * step, min(stop, first + (k + 1) * step)) for k in range(parts)]


def _in_parallel(work, items: list) -> list:
    """`work` over `items`, on one thread per item when there are several; results in order."""
    if len(items) == 1:
        return [work(items[0])]
    with ThreadPoolExecutor(len(items)) as pool:
        return list(pool.map(work, items))


def _arrow_numpy(col, dtype) -> np.ndarray:
    """A non-null Arrow array of the expected type as NumPy (refused otherwise, so the caller falls back)."""
    import pyarrow as pa

    if len(col) == 0:
        return np.empty(0, dtype)
    if col.null_count:
        raise ValueError("NULL in a column read as non-null")
    ok = pa.types.is_int64(col.type) or (dtype == np.float64 and pa.types.is_floating(col.type))
    if not ok:
        raise ValueError(f"column typed {col.type}, expected {np.dtype(dtype)}")
    return np.asarray(col.to_numpy(zero_copy_only=False), dtype=dtype)


def _arrow_batches(uri: str, sql: str) -> Iterator:
    """Record batches of `sql` from a fresh read-only ADBC connection (one per thread), closed at the end."""
    import adbc_driver_sqlite.dbapi as adbc

    conn = adbc.connect(uri)
    try:
        cur = conn.cursor()
        try:
            cur.adbc_statement.set_options(**{"adbc.sqlite.query.batch_rows": str(BATCH_ROWS)})
            cur.execute(sql)
            # ADBC has no progress handler: the bound is checked between batches (`connection.connect` for the rest)
            limit, start = query_timeout(), time.monotonic()
            for batch in cur.fetch_record_batch():
                if limit is not None and time.monotonic() - start > limit:
                    raise InputError(f"{uri}: a query ran longer than {limit:g} s and was stopped; set "
                                     f"{ENV_QUERY_TIMEOUT}=SECONDS for a longer bound (0: none)")
                yield batch
        finally:
            cur.close()
    finally:
        conn.close()


def nullable(values: np.ndarray) -> pd.array:
    """An int64 array that uses NULL_INT for NULL → pandas nullable Int64."""
    values = np.asarray(values, dtype=np.int64)
    return pd.arrays.IntegerArray(values, mask=values == NULL_INT)


def categorical(codes_source: np.ndarray, labels: Mapping[int, str]) -> pd.Categorical:
    """Map integer ids to a Categorical through `labels`; ids missing from `labels` (or NULL_INT) become NaN.

    Only the distinct ids are looked up (found by hashing, not sorting), so a column of millions of rows costs
    one dictionary lookup per distinct name.
    """
    inverse, uniq = pd.factorize(np.asarray(codes_source, dtype=np.int64), use_na_sentinel=False)
    names = np.array([labels.get(int(u)) for u in uniq], dtype=object)
    codes_u, cats = pd.factorize(names, use_na_sentinel=True)
    codes = codes_u[inverse] if len(uniq) else np.empty(0, dtype=np.int64)
    return pd.Categorical.from_codes(codes, categories=pd.Index(cats, dtype=object))


def categorical_values(values: np.ndarray) -> pd.Categorical:
    """Object array of strings (None for NULL) → Categorical with the distinct strings as categories."""
    codes, cats = pd.factorize(values, use_na_sentinel=True)
    return pd.Categorical.from_codes(codes, categories=pd.Index(cats, dtype=object))
