"""The Kineto reader: every frame of a PyTorch-profiler trace equals an independent recomputation from the
raw JSON (json.load + plain Python, times through `decimal`), times are exact to the nanosecond where float64 is not,
the frames have the export's columns and dtypes, bad files give one line, and the trace verbs take these files.

Traces: the project's real CPU torch traces (fixtures/torch/, vLLM's own torch profiler on its CPU build), GPU-shaped
copies of them with known GPU work (tests/gpu_shaped_kineto.py: never GPU traces), and the public real GPU trace of a
vLLM prefill step on a B200 (skipped when absent; never committed).
"""

from __future__ import annotations

import functools
import gzip
import json
import os
import shutil
import warnings
from collections import defaultdict
from decimal import Decimal
from pathlib import Path

import gpu_shaped_kineto as gsk
import numpy as np
import pandas as pd
import pytest

from conftest import FIXTURES, PUBLIC, cli_in_process, said, unchanged
from nsys_cc.errors import InputError, TraceClosedError
from nsys_cc.trace import KinetoTrace, open_trace, sqlite_source
from nsys_cc.trace.frames import TABLES, names
from nsys_cc.trace.kineto_events import ns_of

TORCH = FIXTURES / "torch"
TARGET = TORCH / "tiny-llama-target.pt.trace.json.gz"
DRAFT = TORCH / "tiny-llama-draft-xs.pt.trace.json.gz"
SPEC = TORCH / "tiny-llama-draft-xs.spec-g2.pt.trace.json.gz"
B200_NAME = "AMD-AGI__TraceLens__b200_eager_trace.pt.trace.json.gz"


def public_b200() -> Path:
    for folder in (PUBLIC, Path("/work/shared/traces/public")):
        if (folder / B200_NAME).is_file():
            return folder / B200_NAME
    pytest.skip(f"the public B200 Kineto trace {B200_NAME} is not here (it lives outside the repository)")


@pytest.fixture(scope="module")
def gpu_shaped(tmp_path_factory) -> gsk.GpuShapedKineto:
    return gsk.add_gpu_work(TARGET, tmp_path_factory.mktemp("kineto") / "gpu.pt.trace.json.gz", gsk.mixed())


# -- the oracle: the raw JSON read with json.load, numbers as Decimal, in plain Python --------------------------------
@functools.cache
def raw_events(path: Path) -> list[dict]:
    """Read once a session per file (the B200 trace takes ~0.4 s): callers only read the events."""
    opener = gzip.open if path.read_bytes()[:2] == b"\x1f\x8b" else open
    with opener(path, "rt", encoding="utf-8", errors="replace") as fh:
        return json.load(fh, parse_float=Decimal)["traceEvents"]


def ns(value) -> int:
    return int((Decimal(value) * 1000).to_integral_value())


def complete(events: list[dict], *cats: str) -> list[tuple[int, dict]]:
    return [(i, e) for i, e in enumerate(events) if e.get("ph") == "X" and e.get("cat") in cats]


def oracle_ranges(events: list[dict], cat: str = "user_annotation") -> list[dict]:
    """Ranges of `cat` with their nesting among the ranges of `cat` on their thread (a call stack walked in order of
    start, then longer first, then position: the parent is the innermost earlier range that contains it)."""
    rows = [{"range_id": i, "name": e["name"], "start_ns": ns(e["ts"]), "end_ns": ns(e["ts"]) + ns(e["dur"]),
             "pid": e["pid"], "tid": e["tid"]} for i, e in complete(events, cat)]
    by_thread = defaultdict(list)
    for r in rows:
        by_thread[(r["pid"], r["tid"])].append(r)
    for group in by_thread.values():
        group.sort(key=lambda r: (r["start_ns"], -r["end_ns"], r["range_id"]))
        stack: list[dict] = []  # the ranges open at r's start, outermost first (the thread's call stack)
        for r in group:
            while stack and not (stack[-1]["start_ns"] <= r["start_ns"] and r["end_ns"] <= stack[-1]["end_ns"]):
                stack.pop()
            r["level"] = len(stack)
            r["parent_id"] = stack[-1]["range_id"] if stack else None
            stack.append(r)
    return rows


def launches_by_correlation(events: list[dict]) -> dict[int, dict]:
    out: dict[int, dict] = {}
    for _, e in complete(events, "cuda_runtime", "cuda_driver"):
        out.setdefault(e["args"].get("correlation", 0), e)
    return out


def oracle_kernels(events: list[dict]) -> list[dict]:
    launch = launches_by_correlation(events)
    rows = []
    for _, e in complete(events, "kernel"):
        a = e["args"]
        by = launch.get(a["correlation"])
        rows.append({"start_ns": ns(e["ts"]), "end_ns": ns(e["ts"]) + ns(e["dur"]), "device_id": a["device"],
                     "context_id": a["context"], "stream_id": a["stream"], "correlation_id": a["correlation"],
                     "pid": by["pid"] if by else e["pid"], "name": e["name"], "demangled_name": e["name"],
                     "grid_x": a["grid"][0], "grid_y": a["grid"][1], "grid_z": a["grid"][2],
                     "block_x": a["block"][0], "block_y": a["block"][1], "block_z": a["block"][2],
                     "graph_node_id": a.get("graph node id"), "registers_per_thread": a["registers per thread"],
                     "static_shared_memory": a["shared memory"], "dynamic_shared_memory": 0})
    return rows


DIRECTIONS = {"HtoD": "Host-to-Device", "DtoH": "Device-to-Host", "DtoD": "Device-to-Device",
              "HtoH": "Host-to-Host", "PtoP": "Peer-to-Peer"}


def oracle_memops(events: list[dict]) -> list[dict]:
    launch = launches_by_correlation(events)
    rows = []
    for cat, kind in (("gpu_memcpy", "memcpy"), ("gpu_memset", "memset")):
        for _, e in complete(events, cat):
            a = e["args"]
            by = launch.get(a["correlation"])
            rows.append({"kind": kind, "start_ns": ns(e["ts"]), "end_ns": ns(e["ts"]) + ns(e["dur"]),
                         "device_id": a["device"], "stream_id": a["stream"], "correlation_id": a["correlation"],
                         "pid": by["pid"] if by else e["pid"], "bytes": a["bytes"],
                         "copy_kind": DIRECTIONS[e["name"].split()[1]] if kind == "memcpy" else None})
    return rows


def as_rows(frame: pd.DataFrame, columns: list[str]) -> list[dict]:
    out = []
    for rec in frame[columns].to_dict("records"):
        out.append({k: (None if v is pd.NA or (isinstance(v, float) and np.isnan(v)) else
                        int(v) if isinstance(v, (np.integer, int)) and not isinstance(v, bool) else v)
                    for k, v in rec.items()})
    return out


TRACES = [pytest.param(TARGET, id="target"), pytest.param(DRAFT, id="draft"), pytest.param(SPEC, id="spec"),
          pytest.param("gpu_shaped", id="gpu-shaped"), pytest.param("b200", id="public-b200")]


@pytest.fixture(params=TRACES)
def trace_path(request, gpu_shaped) -> Path:
    if request.param == "gpu_shaped":
        return gpu_shaped.path
    if request.param == "b200":
        return public_b200()
    return request.param


# -- every frame equals the raw JSON ----------------------------------------------------------------------------------
@pytest.mark.slow
def test_ranges_equal_the_raw_json(trace_path):
    events = raw_events(trace_path)
    with unchanged(trace_path), open_trace(trace_path) as trace:
        got = trace.nvtx_ranges()
    want = oracle_ranges(events)
    assert len(want) > 0
    assert as_rows(got, ["range_id", "name", "start_ns", "end_ns", "pid", "tid", "level", "parent_id"]) == want
    assert (got["duration_ns"] == got["end_ns"] - got["start_ns"]).all()
    assert set(got["domain"]) == {""} and (got["qualified_name"] == got["name"]).all()
    assert not got["ended_on_other_thread"].any() and got["payload"].isna().all()
    # the thread's global id is nsys's layout: the PID and TID fields decode to the event's own ids
    gtid = got["global_tid"].to_numpy()
    assert ((gtid >> 24) == got["pid"].to_numpy()).all() and ((gtid & 0xFFFFFF) == got["tid"].to_numpy()).all()


@pytest.mark.slow
def test_launches_and_gpu_ops_equal_the_raw_json(trace_path):
    events = raw_events(trace_path)
    with open_trace(trace_path) as trace:
        api, kernels, memops, ops = trace.cuda_api(), trace.kernels(), trace.memops(), trace.gpu_ops()
        graphs = trace.graph_launches()
    runtime = [(e, "runtime") for _, e in complete(events, "cuda_runtime")]
    driver = [(e, "driver") for _, e in complete(events, "cuda_driver")]
    want_api = [{"start_ns": ns(e["ts"]), "end_ns": ns(e["ts"]) + ns(e["dur"]), "pid": e["pid"], "tid": e["tid"],
                 "correlation_id": e["args"].get("correlation", 0), "name": e["name"], "api": kind}
                for e, kind in runtime + driver]
    assert as_rows(api, list(want_api[0]) if want_api else ["start_ns"]) == want_api
    want_k = oracle_kernels(events)
    assert as_rows(kernels, list(want_k[0]) if want_k else ["start_ns"]) == want_k
    want_m = oracle_memops(events)
    assert as_rows(memops, list(want_m[0]) if want_m else ["start_ns"]) == want_m
    assert len(graphs) == 0  # Kineto records a graph's kernels one by one, never a graph-level row
    # gpu_ops: the kernels, then the copies and sets, named as an export names them
    want_ops = ([("kernel", k["name"], k["start_ns"], k["end_ns"], k["pid"]) for k in want_k]
                + [(m["kind"], f"[CUDA memcpy {m['copy_kind']}]" if m["kind"] == "memcpy" else "[CUDA memset]",
                    m["start_ns"], m["end_ns"], m["pid"]) for m in want_m])
    assert list(zip(ops["kind"].astype(str), ops["name"].astype(str), ops["start_ns"], ops["end_ns"],
                    ops["pid"])) == want_ops
    # the process of a GPU op is its launch's (Kineto files it under the device): the join the projection makes
    if len(ops):
        gtid = dict(zip(zip(api["pid"], api["correlation_id"]), api["global_tid"]))
        for pid, corr, gpid in zip(ops["pid"], ops["correlation_id"], ops["global_pid"]):
            assert gpid == gtid[(pid, corr)] & -(1 << 24)


@pytest.mark.slow
def test_frames_have_the_columns_and_dtypes_of_an_export(gpu_shaped, fixtures_dir, tmp_path):
    import gpu_shaped as gs

    export = gs.add_gpu_work(fixtures_dir / "vllm" / "tiny-llama-target.sqlite", tmp_path / "t.sqlite",
                             gs.steady(graph="node")).path
    with open_trace(gpu_shaped.path) as kineto, open_trace(export) as nsys:
        assert sqlite_source(kineto) is None and sqlite_source(nsys) is nsys
        for table, columns in TABLES.items():
            a, b = getattr(kineto, table)(), getattr(nsys, table)()
            assert list(a.columns) == names(columns) == list(b.columns), table
            for col in a.columns:
                da, db = a[col].dtype, b[col].dtype
                same = (isinstance(da, pd.CategoricalDtype) and isinstance(db, pd.CategoricalDtype)) or da == db
                assert same, (table, col, da, db)
            if table != "graph_launches":
                assert len(a) > 0, table


@pytest.mark.slow
def test_python_frames_only_when_asked_for(trace_path):
    events = raw_events(trace_path)
    frames = oracle_ranges(events, "python_function")
    with open_trace(trace_path) as trace:
        whole = trace.nvtx_ranges()
        everything = trace.python_frames()
        assert as_rows(everything, ["range_id", "name", "start_ns", "end_ns", "pid", "tid", "level",
                                    "parent_id"]) == frames
        if not frames:
            return
        assert not set(whole["range_id"]) & {f["range_id"] for f in frames}
        prefix = frames[len(frames) // 2]["name"][:12]
        picked = trace.nvtx_ranges(prefixes=[prefix])
        exact = trace.nvtx_ranges(names=[frames[0]["name"]], nesting=False)
    want = sorted([f for f in frames if f["name"].startswith(prefix)]
                  + [r for r in oracle_ranges(events) if r["name"].startswith(prefix)],
                  key=lambda r: (r["start_ns"], r["range_id"]))
    assert picked["range_id"].tolist() == [r["range_id"] for r in want]
    frame_rows = picked[picked["domain"] == "python_function"]
    assert (frame_rows["qualified_name"] == "python_function:" + frame_rows["name"].astype(str)).all()
    assert set(exact["range_id"]) == {f["range_id"] for f in frames if f["name"] == frames[0]["name"]}
    assert exact["level"].isna().all()


def test_a_name_that_matches_nothing_warns_with_the_closest_names():
    from nsys_cc.errors import NsysCCWarning

    with open_trace(TARGET) as trace:
        with pytest.warns(NsysCCWarning, match=r"no NVTX range named 'execute_context_1\(128\)_generation_0\(1\)'.*"
                                               r"closest names: 'execute_context_1\(32\)_generation_0\(0\)'"):
            empty = trace.nvtx_ranges(names=["execute_context_1(128)_generation_0(1)"])
        assert empty.empty
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert trace.nvtx_ranges(names=["nope"], warn=False).empty


def test_spec_fixture_holds_the_proposer_and_sampling_frames():
    with open_trace(SPEC) as trace:
        steps = trace.nvtx_ranges()
        frames = trace.nvtx_ranges(prefixes=["vllm/v1/spec_decode/", "vllm/v1/worker/gpu_model_runner.py("])
    assert steps["name"].astype(str).str.startswith("execute_context_").all()
    names_ = frames.loc[frames["domain"] == "python_function", "name"].astype(str)
    assert names_.str.endswith(": propose").sum() >= 3 and names_.str.endswith(": sample_tokens").sum() >= 3


# -- exact times ------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("text", "expected"), [
    ("1733456789012.345", 1733456789012345), ("5728761211901.987", 5728761211901987), ("-0.001", -1),
    ("0.000", 0), ("1.2345", 1234), ("1.2355", 1236), ("1e3", 1_000_000), ("1.5E-3", 2), ("2.5e-3", 2), (12, 12_000),
    ("123456789012345678.901", 123456789012345678901),
])
def test_ns_of_is_exact(text, expected):
    assert ns_of(text) == expected


@pytest.mark.parametrize("bad", [1.5, True, None, "abc", "1.2.3", [1], "1_0.000", "\u0663.000", "--1.000", "+1.000"])
def test_ns_of_refuses_what_is_no_number_text(bad):
    with pytest.raises((TypeError, ValueError, ArithmeticError)):
        ns_of(bad)


def test_times_where_float64_is_wrong_are_read_exactly(tmp_path):
    # ts values of real traces have 16-17 significant digits; past 2**53 ns a float64 of the µs misses the ns
    starts = [9007199254740993, 12345678901234567, 17334567890123457, 9999999999999999]
    assert all(round(float(gsk.us(s)) * 1000) != s for s in starts)
    events = [{"ph": "X", "cat": "user_annotation", "name": f"r{k}", "pid": 1, "tid": 1, "ts": gsk._Raw(gsk.us(s)),
               "dur": gsk._Raw("0.001")} for k, s in enumerate(starts)]
    path = tmp_path / "exact.json"
    path.write_text(gsk._dumps({"traceEvents": events}))
    with open_trace(path) as trace:
        got = trace.nvtx_ranges()
    assert got["start_ns"].tolist() == starts and got["duration_ns"].tolist() == [1] * len(starts)


@pytest.mark.slow
def test_the_fixtures_times_are_those_the_decimal_text_says():
    # the reader's fast path (joined and parsed as integers) against Decimal on every time of a real trace
    events = raw_events(SPEC)
    want = [ns(e["ts"]) for _, e in complete(events, "python_function")]
    with open_trace(SPEC) as trace:
        assert trace.python_frames(nesting=False)["start_ns"].tolist() == want


# -- what a trace is, opened by its content ---------------------------------------------------------------------------
def test_recognised_by_content_whatever_the_name(tmp_path):
    plain = tmp_path / "trace.bin"
    plain.write_bytes(gzip.decompress(DRAFT.read_bytes()))
    packed = tmp_path / "no-suffix"
    shutil.copyfile(DRAFT, packed)
    with unchanged(plain, packed), open_trace(plain) as a, open_trace(packed) as b, open_trace(DRAFT) as c:
        for t in (a, b, c):
            assert isinstance(t, KinetoTrace) and t.format == "kineto"
        assert a.nvtx_ranges().equals(c.nvtx_ranges()) and b.nvtx_ranges().equals(c.nvtx_ranges())


@pytest.mark.slow
def test_info_says_what_the_file_holds(gpu_shaped):
    events = raw_events(gpu_shaped.path)
    counts: dict[str, int] = defaultdict(int)
    for e in events:
        counts[e["cat"] if "cat" in e else f"({e['ph']} events)"] += 1
    with open_trace(gpu_shaped.path) as trace:
        info = trace.info()
        assert trace.count("cuda_api") == len(trace.cuda_api()) and trace.count("gpu_ops") == len(trace.gpu_ops())
        processes, threads, devices = trace.processes(), trace.threads(), trace.devices()
    assert info.format == "kineto" and info.sqlite_path is None and info.nsys_version is None
    assert info.has_cuda and info.has_nvtx and info.schema_version == "1"
    assert dict(info.tables) == dict(counts)
    d = info.details
    assert d["versions"]["cuda_runtime_version"] == "12.4" and d["versions"]["cupti_version"] == "24"
    assert d["rank"] == 0 and d["world_size"] == 1 and d["with_stack"] is True
    steps = [e["name"] for _, e in complete(events, "user_annotation")]
    assert d["ranges"] == {n: steps.count(n) for n in set(steps)}
    assert d["python_frames"] == len(complete(events, "python_function"))
    assert devices.to_dict("records") == [{"device_id": 0, "name": "NVIDIA H100 80GB HBM3",
                                           "total_memory": 85029158912, "compute_major": 9, "compute_minor": 0,
                                           "sms": 132}]
    assert {0: "GPU 0"}.items() <= dict(zip(processes["pid"], processes["name"])).items()
    main = threads[threads["ranges"] > 0].iloc[0]
    assert main["launches"] == len([1 for _, e in complete(events, "cuda_runtime", "cuda_driver")
                                    if (e["pid"], e["tid"]) == (main["pid"], main["tid"])])
    json.dumps(info.to_dict())  # plain data


def test_a_cpu_trace_has_no_cuda_and_empty_gpu_frames():
    with open_trace(DRAFT) as trace:
        assert not trace.has_cuda and trace.has_nvtx and trace.count("cuda_api") == 0
        assert trace.info().details["with_stack"] is not True and trace.info().details["python_frames"] == 0
        for table in ("cuda_api", "kernels", "memops", "gpu_ops"):
            assert len(getattr(trace, table)()) == 0


@pytest.mark.slow
def test_frames_handed_out_are_the_callers(gpu_shaped):
    with open_trace(gpu_shaped.path) as trace:
        first = trace.kernels()
        first["start_ns"] = 0
        assert (trace.kernels()["start_ns"] > 0).all()
    with pytest.raises(TraceClosedError):
        trace.kernels()
    assert trace.info().has_cuda  # info stays


# -- bad input: one line, the file untouched --------------------------------------------------------------------------
def _doc(events: list[dict], **top) -> str:
    return gsk._dumps({"schemaVersion": 1, **top, "traceEvents": events})


def _x(cat: str, name: str, ts: str, dur: str, **args) -> dict:
    return {"ph": "X", "cat": cat, "name": name, "pid": 7, "tid": 7, "ts": gsk._Raw(ts), "dur": gsk._Raw(dur),
            "args": args}


KERNEL = _x("kernel", "k", "10.000", "1.000", device=0, stream=7, correlation=1)
LAUNCH = _x("cuda_runtime", "cudaLaunchKernel", "5.000", "1.000", correlation=1)
STEP = _x("user_annotation", "step", "1.000", "20.000")


def bad_files(tmp_path: Path) -> list[tuple[Path, str]]:
    good = gzip.decompress(DRAFT.read_bytes())
    cases = {
        "truncated.pt.trace.json.gz": (DRAFT.read_bytes()[: len(DRAFT.read_bytes()) // 2], "truncated gzip"),
        "cut.json": (good[: len(good) // 2], "is not JSON"),
        "cut-inside.json.gz": (gzip.compress(good[: len(good) // 3]), "is gzip-compressed text that is not JSON"),
        "no-events.json": (b'{"schemaVersion": 1, "deviceProperties": []}', "without 'traceEvents'"),
        "array.json": (b'[{"ph": "X"}]', "is a JSON array, not an object with 'traceEvents'"),
        "events-not-list.json": (b'{"traceEvents": {"a": 1}}', "'traceEvents' is not a list"),
        "event-not-object.json": (b'{"traceEvents": [1, 2]}', "traceEvents[0] is not an event"),
        "cat-not-name.json": (b'{"traceEvents": [{"cat": ["x"], "ph": "X"}]}', "has a 'cat' that is not a name"),
        "nan.json": (_doc([STEP]).replace('"dur": 20.000', '"dur": NaN').encode(), "NaN is not a JSON number"),
        "infinity.json": (_doc([STEP]).replace('"ts": 1.000', '"ts": -Infinity').encode(),
                          "-Infinity is not a JSON number"),
        "huge-float.json": (_doc([STEP]).replace('"ts": 1.000', '"ts": 1e400').encode(),
                            "has a ts ('1e400') that is no time in microseconds"),
        "huge-int.json": (_doc([STEP]).replace('"ts": 1.000', '"ts": 123456789012345678901234567890').encode(),
                          "that is no time in microseconds"),
        "negative-dur.json": (_doc([_x("kernel", "k", "10.000", "-1.000", device=0, stream=7, correlation=1)]).encode(),
                              "has a negative duration"),
        "no-ts.json": (_doc([{k: v for k, v in STEP.items() if k != "ts"}]).encode(), "has no 'ts'"),
        "name-not-text.json": (_doc([STEP]).replace('"name": "step"', '"name": 5').encode(),
                               "has a name that is not text"),
        "pid-not-int.json": (_doc([STEP]).replace('"pid": 7', '"pid": "seven"').encode(), "pid that is not an integer"),
        "stream-not-int.json": (_doc([_x("kernel", "k", "10.000", "1.000", device=0, stream="x", correlation=1)])
                                .encode(), "args.stream (stream) that is not an integer"),
        "duplicate-kernel.json": (_doc([STEP, LAUNCH, KERNEL, KERNEL]).encode(), "1 GPU event(s) appear twice"),
        "duplicate-range.json": (_doc([STEP, STEP]).encode(), "1 user_annotation event(s) appear twice"),
        "duplicate-launch.json": (_doc([STEP, LAUNCH, LAUNCH, KERNEL]).encode(), "1 CUDA API event(s) appear twice"),
        "deep.json": (b'{"traceEvents": []}'.replace(b"[]", b"[" * 100_000 + b"]" * 100_000), "nested too deep"),
        "gzipped-sqlite.gz": (gzip.compress((FIXTURES / "nvtx" / "nvtx_cases.sqlite").read_bytes()),
                              "neither an Nsight Systems SQLite export nor a .nsys-rep report"),
        "blank.json": (b"   \n\t ", "is neither an Nsight Systems SQLite export"),
    }
    out = []
    for name, (data, message) in cases.items():
        (tmp_path / name).write_bytes(data)
        out.append((tmp_path / name, message))
    return out


def test_bad_files_give_one_line_and_are_left_as_they_were(tmp_path):
    for path, message in bad_files(tmp_path):
        with unchanged(path):
            with pytest.raises(InputError) as exc:
                open_trace(path)
            result = cli_in_process("info", str(path))
        text = str(exc.value)
        assert "\n" not in text and message in text and str(path) in text, (path.name, text)
        assert result.returncode == 2, (path.name, result.stderr)
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("nsys-cc: error: ") and message in lines[0], lines


def test_text_that_is_not_utf8_is_read_with_replacement_characters(tmp_path):
    path = tmp_path / "latin.json"
    path.write_bytes(_doc([STEP]).replace('"step"', '"st\\u00e9p"').encode().replace(b"\\u00e9", b"\xe9"))
    with open_trace(path) as trace:
        assert trace.nvtx_ranges()["name"].tolist() == ["st\ufffdp"]


def test_a_huge_decompressed_trace_is_refused_before_it_is_parsed(tmp_path, monkeypatch):
    monkeypatch.setenv("NSYS_CC_MAX_TRACE_BYTES", "1000")
    with pytest.raises(InputError, match=r"holds more than 1,000 bytes of JSON uncompressed.*NSYS_CC_MAX_TRACE_BYTES"):
        open_trace(DRAFT)
    monkeypatch.setenv("NSYS_CC_MAX_TRACE_BYTES", "lots")
    with pytest.raises(InputError, match="NSYS_CC_MAX_TRACE_BYTES must be a whole number of bytes"):
        open_trace(DRAFT)


def test_older_kineto_spellings_and_stream_tids(tmp_path):
    # older Kineto: "Runtime"/"Kernel" categories, no args.device/stream (the device is the pid, the tid "stream 7")
    events = [STEP, {**LAUNCH, "cat": "Runtime"},
              {"ph": "X", "cat": "Kernel", "name": "k", "pid": 3, "tid": "stream 9", "ts": gsk._Raw("10.000"),
               "dur": gsk._Raw("2.000"), "args": {"correlation": 1}},
              {"ph": "i", "cat": "kernel", "name": "instant", "pid": 3, "tid": 9, "ts": gsk._Raw("11.000")}]
    path = tmp_path / "old.json"
    path.write_text(_doc(events))
    with open_trace(path) as trace:
        k = trace.kernels()
        assert k[["device_id", "stream_id", "pid", "duration_ns"]].values.tolist() == [[3, 9, 7, 2000]]
        assert trace.cuda_api()["api"].tolist() == ["runtime"]


# -- the trace verbs --------------------------------------------------------------------------------------------------
def test_info_verb(gpu_shaped):
    table = cli_in_process("info", str(gpu_shaped.path))
    assert table.returncode == 0, table.stderr
    assert "PyTorch profiler (Kineto) trace, schema 1" in table.stdout
    assert "NVIDIA H100 80GB HBM3 × 1" in table.stdout and "CUDA data       yes" in table.stdout
    as_json = cli_in_process("info", str(gpu_shaped.path), "--format", "json")
    with open_trace(gpu_shaped.path) as trace:
        assert json.loads(as_json.stdout) == json.loads(json.dumps(trace.info().to_dict()))


def test_ranges_verb_gives_the_projection(gpu_shaped):
    import io

    result = cli_in_process("ranges", str(gpu_shaped.path), "--range", gsk.STEP, "--format", "csv")
    assert result.returncode == 0, result.stderr
    table = pd.read_csv(io.StringIO(result.stdout))
    work = gpu_shaped.of(gsk.STEP)
    assert table["range_id"].tolist() == [w.range.index for w in work]
    assert table["proj_duration_ns"].tolist() == [w.span_ns for w in work]
    assert table["gpu_busy_ns"].tolist() == [w.busy_ns for w in work]
    assert table["gpu_ops"].tolist() == [w.launches for w in work]


def test_kernels_verb_on_a_torch_trace(gpu_shaped):
    result = cli_in_process("kernels", str(gpu_shaped.path), "--range", gsk.STEP, "--format", "json")
    assert result.returncode == 0, result.stderr
    rows = json.loads(result.stdout)
    steps = gpu_shaped.of(gsk.STEP)
    totals: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for w in steps:
        for start, end, _kind, name in w.ops:
            totals[name][0] += 1
            totals[name][1] += end - start
    assert {r["kernel"]: r["count"] for r in rows} == {n: c for n, (c, _) in totals.items()}
    for r in rows:  # every step is kept (none is marked warm-up): per range = the total over the steps
        assert r["ms_per_range"] == pytest.approx(totals[r["kernel"]][1] / 1e6 / len(steps), rel=1e-12)


@pytest.mark.slow
def test_trace_verbs_default_range_reads_vllms_steps_and_else_give_one_line(gpu_shaped, tmp_path):
    """The default range of a torch trace is vLLM's own step annotations (tests/analysis/forwards/test_vllm_steps.py
    checks the numbers); a torch trace without them gets one line naming both what is missing and what it holds."""
    for args in (["kernels", str(gpu_shaped.path)], ["analyze", str(TARGET), str(DRAFT)]):
        result = cli_in_process(*args)
        assert result.returncode == 0, result.stderr
    doc = gsk.load(DRAFT)
    for e in doc["traceEvents"]:
        if e.get("cat") == "user_annotation":
            e["name"] = "my_step_" + e["name"]
    bare = tmp_path / "bare.json"
    bare.write_text(json.dumps(doc))
    for args in (["kernels", str(bare)], ["analyze", str(TARGET), str(bare)]):
        result = cli_in_process(*args)
        assert result.returncode == 2
        (line,) = said(result.stderr)
        assert "no range named 'model_executable()' and the PyTorch-profiler trace holds no vLLM step annotations" \
            in line and "my_step_execute_context_" in line, line


# -- fuzz: mutated torch traces raise only the project's errors -------------------------------------------------------
FUZZ_CASES = int(os.environ.get("NSYS_CC_FUZZ_CASES", "15"))
ODD_VALUES = [None, True, False, -1, 0, 2**63, -(2**70), 10**30, "", "x", "1.5", "stream 3", [], {}, [1, 2, 3],
              [1, "a", None], {"a": [1]}, gsk._Raw("1e400"), gsk._Raw("-0.000"), gsk._Raw("12345678901234567890.123"),
              gsk._Raw("-5.000"), gsk._Raw("0.5"), gsk._Raw("1E+3")]
EVENT_KEYS = ["ph", "cat", "name", "pid", "tid", "ts", "dur", "args"]
ARG_KEYS = ["correlation", "device", "stream", "context", "grid", "block", "bytes", "graph node id",
            "registers per thread", "shared memory"]


@pytest.fixture(scope="module")
def fuzz_base(tmp_path_factory) -> str:
    """A small GPU-shaped torch trace as JSON text (the draft's steps, with every kind of GPU work)."""
    shaped = gsk.add_gpu_work(DRAFT, tmp_path_factory.mktemp("fuzz") / "base.json", gsk.mixed(), gzipped=False)
    return shaped.path.read_text()


def mutate(rng, text: str) -> tuple[bytes, list[str]]:
    doc = json.loads(text, parse_float=gsk._Raw)
    events = doc["traceEvents"]
    read = [e for e in events if e.get("cat") in ("user_annotation", "cuda_runtime", "cuda_driver", "kernel",
                                                   "gpu_memcpy", "python_function") or e.get("ph") == "M"]
    done = []
    for _ in range(rng.randint(1, 4)):
        kind = rng.choice(["value", "arg", "drop", "duplicate", "top", "cat"])
        e = rng.choice(read if rng.random() < 0.85 else events)  # mostly the events the reader keeps
        if kind == "value":
            key, value = rng.choice(EVENT_KEYS), rng.choice(ODD_VALUES)
            e[key] = value
        elif kind == "arg":
            key, value = rng.choice(ARG_KEYS), rng.choice(ODD_VALUES)
            if not isinstance(e.get("args"), dict):
                e["args"] = {}
            e["args"][key] = value
        elif kind == "drop":
            key = rng.choice(EVENT_KEYS)
            e.pop(key, None)
            value = None
        elif kind == "duplicate":
            events.insert(rng.randrange(len(events) + 1), dict(e))
            key, value = "event", None
        elif kind == "cat":
            key, value = "cat", rng.choice(["Kernel", "RUNTIME", "gpu_memset", "cuda_driver", "python_function"])
            e["cat"] = value
        else:
            key, value = rng.choice(["deviceProperties", "distributedInfo", "schemaVersion", "with_stack",
                                     "cuda_runtime_version"]), rng.choice(ODD_VALUES)
            doc[key] = value
        done.append(f"{kind} {key}={value!r:.30}")
    data = gsk._dumps(doc).encode()
    if rng.random() < 0.2:
        cut = rng.randrange(len(data))
        data = data[:cut]
        done.append(f"cut at {cut}")
    if rng.random() < 0.2:
        at = rng.randrange(len(data))
        data = data[:at] + bytes([rng.randrange(256)]) + data[at + 1:]
        done.append(f"byte {at} changed")
    if rng.random() < 0.3:
        data = gzip.compress(data)
        done.append("gzipped")
    return data, done


@pytest.mark.parametrize("seed", range(FUZZ_CASES))
def test_mutated_torch_traces_raise_only_nsys_cc_errors(seed, fuzz_base, tmp_path):
    import random

    from nsys_cc.analysis.forwards.projection import project
    from nsys_cc.analysis.forwards.ranges import marked_ranges, range_table
    from nsys_cc.contract import FORWARD_RANGE
    from nsys_cc.errors import NsysCCError

    data, mutations = mutate(random.Random(seed), fuzz_base)
    path = tmp_path / "mutated.pt.trace.json"
    path.write_bytes(data)
    try:
        with unchanged(path), open_trace(path) as trace:
            trace.info().to_dict()
            for table in (*TABLES, "python_frames", "processes", "threads", "devices"):
                getattr(trace, table)()
            project(trace)
            range_table(trace)
            trace.nvtx_ranges(prefixes=["vllm/", "execute_"], nesting=True)
            marked_ranges(trace, FORWARD_RANGE)  # vLLM's step annotations read as the analysis reads them
    except NsysCCError as exc:
        assert "\n" not in str(exc), (seed, mutations)
    except Exception as exc:  # a bug: say which seed and mutations reproduce it
        raise AssertionError(f"seed {seed}, mutations {mutations}: {type(exc).__name__}: {exc}") from exc
