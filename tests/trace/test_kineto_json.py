"""The streaming document reader (`nsys_cc.trace.kineto_json`): the fast parser (msgspec, in batches) and the exact
one (the standard library, one value at a time) give the same trace; every layout a writer may choose, and every
place a batch may end, reads the same; what msgspec will not take is read exactly; the document's own errors name
the byte they are at. The oracle of the tricky layouts is the whole document read by `json.loads` (numbers as
Decimal) and plain Python.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
from decimal import Decimal
from pathlib import Path

import gpu_shaped_kineto as gsk
import pandas as pd
import pytest

from conftest import FIXTURES
from nsys_cc.errors import InputError
from nsys_cc.trace import KinetoTrace, kineto_json, kineto_stream, open_trace

TORCH = FIXTURES / "torch"
DRAFT = TORCH / "tiny-llama-draft-xs.pt.trace.json.gz"
ACCESSORS = ("nvtx_ranges", "python_frames", "cuda_api", "kernels", "memops", "gpu_ops", "processes", "threads",
             "devices")


def everything(path: Path) -> dict:
    """Every table of the trace (as CSV text, with dtypes and categories), its info, counts and metadata."""
    out = {}
    with open_trace(path) as trace:
        for name in ACCESSORS:
            frame = getattr(trace, name)()
            text = io.StringIO()
            frame.to_csv(text)
            cats = {c: list(frame[c].cat.categories) for c in frame if isinstance(frame[c].dtype, pd.CategoricalDtype)}
            out[name] = (hashlib.sha256(text.getvalue().encode("utf-8", "surrogatepass")).hexdigest(),
                         dict(frame.dtypes.astype(str)), repr(cats))
        out["info"] = repr(trace.info().to_dict())
        out["counts"] = dict(trace.event_counts)
        out["metadata"] = repr(dict(trace.metadata))
    return out


@pytest.fixture(scope="module")
def gpu_draft(tmp_path_factory) -> Path:
    return gsk.add_gpu_work(DRAFT, tmp_path_factory.mktemp("json") / "gpu.pt.trace.json.gz", gsk.vllm_plan(),
                            frames=gsk.vllm_frame).path


@pytest.mark.slow
def test_the_exact_parser_alone_gives_the_same_trace(gpu_draft, monkeypatch):
    want = everything(gpu_draft)
    monkeypatch.setattr(kineto_json.Document, "_fast", lambda self, index: 0)
    assert everything(gpu_draft) == want


@pytest.mark.parametrize("span", [600, 5_000, 70_000])
def test_batches_ending_anywhere_give_the_same_trace(gpu_draft, monkeypatch, span):
    want = everything(gpu_draft)
    monkeypatch.setattr(kineto_json, "MAX_SPAN", span)
    monkeypatch.setattr(kineto_stream, "CHUNK", span // 3 + 7)  # pieces that end mid-event, mid-string, mid-number
    assert everything(gpu_draft) == want


# -- layouts and tricky text -------------------------------------------------------------------------------------------
def _x(cat: str, name, ts: str, dur: str, pid=7, tid=7, args=None) -> dict:
    e = {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": gsk._Raw(ts), "dur": gsk._Raw(dur)}
    if args is not None:
        e["args"] = args
    return e


TRICKY = [
    {"ph": "M", "name": "process_name", "pid": 7, "tid": 0, "args": {"name": "engine \u00e9 }, {"}},
    _x("user_annotation", 'step "one" }, {"ph": "X"}', "1.000", "90.000", args={"nested": [{"a": 1}, {"b": [2, {}]}]}),
    _x("python_function", "vllm/v1/x.py(1): f }]", "2.000", "10.500"),
    _x("python_function", "vllm/v1/x.py(2): g \\ \u2603", "3", "4"),  # whole µs
    _x("python_function", "vllm/v1/x.py(3): h", "1733456789012.345", "0.001"),
    _x("cuda_runtime", "cudaLaunchKernel", "4.000", "1.000", args={"correlation": 9, "cbid": 211}),
    _x("kernel", "k<int, }>", "6.000", "2.000", pid=0, tid=7,
       args={"device": 0, "stream": 7, "correlation": 9, "grid": [1, 2, 3], "block": [4, 5, 6],
             "registers per thread": 32, "shared memory": 0, "context": 1}),
    _x("cpu_op", "aten::mm", "5.000", "1.000", args=[]),  # args that is no object: read exactly
    _x("cpu_op", "aten::add", "5.500", "1.000", pid=gsk._Raw("1.5"),
       args={"device": "cuda:0", "Input Dims": [[1, 2], []]}),
    {"ph": "i", "cat": "cpu_instant_event", "name": "x", "pid": 7, "tid": 7, "ts": gsk._Raw("7.250"), "s": "t"},
    {"ph": "f", "id": 9, "pid": 0, "tid": 7, "ts": gsk._Raw("6.000"), "cat": "ac2g", "name": "ac2g", "bp": "e"},
]


def dump(value, *, compact: bool = False, indent: int | None = None, ascii: bool = False, level: int = 0) -> str:
    """`value` as JSON laid out as asked, numbers' texts (`gsk._Raw`) as written."""
    if isinstance(value, gsk._Raw):
        return str.__str__(value)
    if not isinstance(value, (dict, list)):
        return json.dumps(value, ensure_ascii=ascii)
    parts = [dump(v, compact=compact, indent=indent, ascii=ascii, level=level + 1) for v in
             (value.values() if isinstance(value, dict) else value)]
    if isinstance(value, dict):
        parts = [json.dumps(k, ensure_ascii=ascii) + (":" if compact else ": ") + p for k, p in zip(value, parts)]
    opening, closing = "{}" if isinstance(value, dict) else "[]"
    if indent is None:
        return opening + ("," if compact else ", ").join(parts) + closing
    pad = "\n" + " " * indent * (level + 1)
    return opening + pad + ("," + pad).join(parts) + "\n" + " " * indent * level + closing


def layouts(events: list[dict]) -> dict[str, bytes]:
    """The same document as writers lay it out: Kineto's own, compact, indented (ASCII escapes), metadata after the
    events, CRLF line ends, a byte order mark, gzip."""
    meta = {"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "GPU"}], "with_stack": 1}
    doc = {**meta, "traceEvents": events}
    kineto = gsk._dumps(doc).encode()
    return {
        "kineto": kineto,
        "compact": dump(doc, compact=True).encode(),
        "ascii-indented": dump(doc, indent=4, ascii=True).encode(),
        "events-first": dump({"traceEvents": events, **meta}).encode(),
        "crlf": kineto.replace(b"\n", b"\r\n"),
        "bom": b"\xef\xbb\xbf" + kineto,
        "gzip": gzip.compress(kineto),
    }


def oracle(text: bytes) -> dict:
    """What the trace holds, from the whole document read at once by the standard library, in plain Python."""
    doc = json.loads(gzip.decompress(text) if text[:2] == b"\x1f\x8b" else text.decode("utf-8-sig"),
                     parse_float=Decimal)

    def ns(v) -> int:
        return int(Decimal(v) * 1000)

    events = doc["traceEvents"]
    x = [(i, e) for i, e in enumerate(events) if e.get("ph") == "X"]
    return {
        "ranges": [(i, e["name"], ns(e["ts"]), ns(e["dur"])) for i, e in x if e["cat"] == "user_annotation"],
        "frames": [(i, e["name"], ns(e["ts"]), ns(e["dur"])) for i, e in x if e["cat"] == "python_function"],
        "kernels": [(e["name"], ns(e["ts"]), e["args"]["grid"], e["args"]["correlation"]) for _, e in x
                    if e["cat"] == "kernel"],
        "processes": {e["pid"]: e["args"]["name"] for e in events if e.get("name") == "process_name"},
    }


def read(path: Path) -> dict:
    with open_trace(path) as trace:
        r, f, k = trace.nvtx_ranges(), trace.python_frames(), trace.kernels()
        return {
            "ranges": list(zip(r["range_id"], r["name"].astype(str), r["start_ns"], r["duration_ns"])),
            "frames": list(zip(f["range_id"], f["name"].astype(str), f["start_ns"], f["duration_ns"])),
            "kernels": [(n, s, [gx, gy, gz], c) for n, s, gx, gy, gz, c in
                        zip(k["name"].astype(str), k["start_ns"], k["grid_x"], k["grid_y"], k["grid_z"],
                            k["correlation_id"])],
            "processes": dict(zip(trace.processes()["pid"], trace.processes()["name"])),
        }


@pytest.mark.parametrize("fast", [True, False], ids=["fast", "exact-only"])
def test_every_layout_reads_as_the_whole_document_says(tmp_path, monkeypatch, fast):
    if not fast:
        monkeypatch.setattr(kineto_json.Document, "_fast", lambda self, index: 0)
    monkeypatch.setattr(kineto_json, "MAX_SPAN", 300)  # batches end between any two events
    for name, text in layouts(TRICKY).items():
        path = tmp_path / f"{name}.json"
        path.write_bytes(text)
        assert read(path) == oracle(text), name


def test_what_msgspec_will_not_take_is_read_exactly_and_only_that(tmp_path, monkeypatch):
    exact: list[str] = []
    value = kineto_json.Document.value
    monkeypatch.setattr(kineto_json.Document, "value", lambda self, what: exact.append(what) or value(self, what))
    path = tmp_path / "odd.json"
    many = [_x("python_function", f"vllm/f.py({k}): f", f"{k}.000", "0.500") for k in range(10, 2000)]
    path.write_text(gsk._dumps({"traceEvents": [*many[:900], TRICKY[7], *many[900:]]}))  # args [] in the middle
    with open_trace(path) as trace:
        assert len(trace.python_frames()) == len(many)
    assert [w for w in exact if w.startswith("traceEvents[")] == ["traceEvents[900]"]


# -- the document's own errors --------------------------------------------------------------------------------------
@pytest.mark.parametrize(("text", "message"), [
    (b"{\x00\x00", "is not JSON (truncated, or not a PyTorch-profiler trace): Expecting property name enclosed in "
                   "double quotes at byte 1"),
    (b'{"traceEvents": [{"ph": "X"}', "it ends at byte 28 where ',' or ']' should follow"),
    (b'{"traceEvents": [{"ph": "X"},]}', "Expecting value at byte 29"),
    (b'{"traceEvents": []} x', "Extra data at byte 20"),
    (b'{"traceEvents": [], "traceEvents": []}', "holds two 'traceEvents' lists"),
    (b'{"traceEvents": 5}', "'traceEvents' is not a list of events"),
    (b'{"schemaVersion": 1}', "is a JSON object without 'traceEvents'"),
    (b'"trace"', "is a JSON string, not an object with 'traceEvents'"),
    (b"[1, 2]", "is a JSON array, not an object with 'traceEvents'"),
    (b'{"a": NaN, "traceEvents": []}', "NaN is not a JSON number"),
    (b'{"traceEvents": [{"ph": "X", "ts": Infinity}]}', "Infinity is not a JSON number"),
])
def test_the_documents_errors_are_one_line_naming_the_byte(tmp_path, text, message):
    path = tmp_path / "bad.json"
    path.write_bytes(text)
    with pytest.raises(InputError) as exc:
        KinetoTrace(path)  # the reader itself: open_trace refuses what does not open like JSON before it
    assert message in str(exc.value) and str(path) in str(exc.value) and "\n" not in str(exc.value)
