"""Bulk column reads from an export into NumPy, and the globalTid/globalPid decoding.

Reads go through the raw DBAPI cursor of a SQLAlchemy connection: one query per group of columns of
one type, flattened with `np.fromiter` (no per-row Python objects are kept). Nullable integer columns
are read through `coalesce(col, NULL_INT)` so they stay int64; `NULL_INT` marks SQL NULL.

globalTid / globalPid (Nsight Systems' serialized GlobalId):
- PID = (globalTid >> 24) & 0xFFFFFF, TID = globalTid & 0xFFFFFF;
- globalPid == globalTid & PID_MASK (the TID bits zeroed); bits above 48 hold a VM/host id, so
  rows are compared on the masked values, never on the decoded PID alone.
"""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd

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


def read_ints(conn, sql: str, ncols: int, params: tuple = ()) -> np.ndarray:
    """Run `sql` (every selected value an integer, never NULL) and return an (n, ncols) int64 array."""
    cur = conn.cursor()
    try:
        cur.execute(sql, params)
        flat = np.fromiter(itertools.chain.from_iterable(cur), dtype=np.int64)
    finally:
        cur.close()
    return flat.reshape(-1, ncols)


def read_floats(conn, sql: str, ncols: int, params: tuple = ()) -> np.ndarray:
    """Run `sql` (every value a number, never NULL) and return an (n, ncols) float64 array."""
    cur = conn.cursor()
    try:
        cur.execute(sql, params)
        flat = np.fromiter(itertools.chain.from_iterable(cur), dtype=np.float64)
    finally:
        cur.close()
    return flat.reshape(-1, ncols)


def read_objects(conn, sql: str, params: tuple = ()) -> np.ndarray:
    """Run a one-column `sql` and return its values as an object array (None for NULL)."""
    cur = conn.cursor()
    try:
        cur.execute(sql, params)
        return np.fromiter(itertools.chain.from_iterable(cur), dtype=object)
    finally:
        cur.close()


def nullable(values: np.ndarray) -> pd.array:
    """An int64 array that uses NULL_INT for NULL → pandas nullable Int64."""
    values = np.asarray(values, dtype=np.int64)
    return pd.arrays.IntegerArray(values, mask=values == NULL_INT)


def categorical(codes_source: np.ndarray, labels: dict[int, str]) -> pd.Categorical:
    """Map integer ids to a Categorical through `labels`; ids missing from `labels` (or NULL_INT) become NaN.

    Only the distinct ids are looked up, so a column of millions of rows costs one dictionary lookup
    per distinct name.
    """
    uniq, inverse = np.unique(codes_source, return_inverse=True)
    names = np.array([labels.get(int(u)) for u in uniq], dtype=object)
    codes_u, cats = pd.factorize(names, use_na_sentinel=True)
    codes = codes_u[inverse] if len(uniq) else np.empty(0, dtype=np.int64)
    return pd.Categorical.from_codes(codes, categories=pd.Index(cats, dtype=object))


def categorical_values(values: np.ndarray) -> pd.Categorical:
    """Object array of strings (None for NULL) → Categorical with the distinct strings as categories."""
    codes, cats = pd.factorize(values, use_na_sentinel=True)
    return pd.Categorical.from_codes(codes, categories=pd.Index(cats, dtype=object))
