"""The big-table writers (`nsys_cc.report.table_files`) give what pandas' own writers give, cell for cell."""

from __future__ import annotations

import io
import json

import numpy as np
import pandas as pd
import pytest

from nsys_cc.report import table_files as tables


def _frame(n: int) -> pd.DataFrame:
    i = np.arange(n)
    return pd.DataFrame({
        "range_id": i,
        "name": pd.Categorical.from_codes(i % 4 - 1, ['quote "q", comma', "model_executable()", "ünï ☃"]),
        "start_ns": i * 1_000_000_007,
        "gpu_ops": pd.arrays.IntegerArray(i % 5, mask=i % 2 == 0),
        "payload": np.where(i % 3 == 0, np.nan, i / 7),
        "open_at_end": i % 2 == 0,
    })


@pytest.mark.parametrize("slice_rows", [3, 1_000_000])
def test_json_records_equal_pandas(monkeypatch, slice_rows):
    monkeypatch.setattr(tables, "SLICE_ROWS", slice_rows)
    frame = _frame(20)
    buf = io.BytesIO()
    tables.write_json_records(frame, buf)
    expected = [{k: None if pd.isna(v) else getattr(v, "item", lambda v=v: v)() for k, v in row.items()}
                for row in frame.astype(object).to_dict("records")]
    assert json.loads(buf.getvalue()) == expected  # floats exactly (pandas' to_json rounds to 10 digits)
    assert json.loads(buf.getvalue())[0]["name"] is None  # a missing name is null, the row is kept


@pytest.mark.parametrize("slice_rows", [3, 1_000_000])
def test_csv_equals_pandas(monkeypatch, slice_rows):
    monkeypatch.setattr(tables, "SLICE_ROWS", slice_rows)
    frame = _frame(20)
    buf = io.BytesIO()
    tables.write_csv(frame, buf)
    ours = pd.read_csv(io.BytesIO(buf.getvalue()))
    theirs = pd.read_csv(io.StringIO(frame.to_csv(index=False)))
    pd.testing.assert_frame_equal(ours, theirs)  # same values as read back ("true" and "True" alike)
    assert ours["name"].isna().sum() == 5 and len(ours) == 20


def test_empty_tables():
    frame = _frame(0)
    buf = io.BytesIO()
    tables.write_json_records(frame, buf)
    assert json.loads(buf.getvalue()) == []
    buf = io.BytesIO()
    tables.write_csv(frame, buf)
    assert buf.getvalue().decode().strip() == ",".join(frame.columns)
