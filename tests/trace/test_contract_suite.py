"""One contract over every reader: whatever its format, a trace gives the same tables (columns and dtypes), its own
rows in them, the projection of its ranges onto the GPU by nsys's rule, and — a profile's runs — the same phases and c.

The same assertions run on every sample, parametrised by format and origin (`SAMPLES`: an Nsight Systems export and
report, a PyTorch-profiler trace — real CPU fixtures, GPU-shaped copies with known GPU work (tests/gpu_shaped*.py:
never GPU traces), and the real public GPU traces of ../shared/traces/public, skipped without them), and on the two
interleaved profiles the two routes left (`PROFILES`). The oracles read the files themselves — SQLite through the
standard library, Kineto JSON through `json` with its times as decimals — into one neutral shape (`Raw`), from which
the expected figures are computed in plain Python; nothing of `nsys_cc` but the code under test is used. A new format
joins by a sample here and a `raw_<name>` reader of its files.
"""

from __future__ import annotations

import gzip
import json
import math
import os
import re
import sqlite3
import statistics
from bisect import bisect_left, bisect_right
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path

import gpu_shaped as gs
import gpu_shaped_kineto as gsk
import pandas as pd
import pytest

import nsys_cc
from conftest import FIXTURES, PUBLIC
from nsys_cc.analysis.forwards.projection import project
from nsys_cc.contract import ENGINE_RANGE_PREFIX, PAYLOAD_RANGES
from nsys_cc.trace import frames, open_trace
from nsys_cc.trace.registry import FORMATS

KINETO_FIXTURE = FIXTURES / "torch" / "tiny-llama-target.pt.trace.json.gz"
EXPORT_FIXTURE = FIXTURES / "vllm" / "tiny-llama-target.sqlite"


# -- the samples: (format, how the file is made) -----------------------------------------------------------------------
def _report(tmp: Path) -> Path:
    """fixtures/nvtx's report with its export beside it, newer (as `nsys export` leaves them): read without nsys."""
    report = tmp / "nvtx_cases.nsys-rep"
    report.write_bytes((FIXTURES / "nvtx" / "nvtx_cases.nsys-rep").read_bytes())
    export = tmp / "nvtx_cases.sqlite"
    export.write_bytes((FIXTURES / "nvtx" / "nvtx_cases.sqlite").read_bytes())
    stamp = report.stat().st_mtime + 10
    os.utime(export, (stamp, stamp))
    return report


def _public(name: str) -> Callable[[Path], Path]:
    def made(tmp: Path) -> Path:
        path = PUBLIC / name
        if not path.is_file():
            pytest.skip(f"public traces not found at {PUBLIC} (they live outside the repository)")
        return path

    return made


SAMPLES: dict[str, tuple[str, Callable[[Path], Path]]] = {
    "nsys-export": ("nsys", lambda tmp: EXPORT_FIXTURE),
    "nsys-report": ("nsys", _report),
    "nsys-gpu-shaped": ("nsys", lambda tmp: gs.add_gpu_work(EXPORT_FIXTURE, tmp / "gpu.sqlite", gs.steady()).path),
    "nsys-gpu-shaped-graph": ("nsys", lambda tmp: gs.add_gpu_work(EXPORT_FIXTURE, tmp / "graph.sqlite",
                                                                  gs.steady(graph="node")).path),
    "nsys-public-gpu": ("nsys", _public("Sh1mwww__llama3-inference__real_inference_simulation.sqlite")),
    "kineto": ("kineto", lambda tmp: KINETO_FIXTURE),
    "kineto-gpu-shaped": ("kineto", lambda tmp: gsk.add_gpu_work(KINETO_FIXTURE, tmp / "gpu.pt.trace.json.gz",
                                                                 gsk.mixed()).path),
    "kineto-public-gpu": ("kineto", _public("AMD-AGI__TraceLens__b200_eager_trace.pt.trace.json.gz")),
    "kineto-public-graph": ("kineto",
                            _public("AMD-AGI__TraceLens__inference_vllm_decode_full__graph_execution.json.gz")),
}
PUBLIC_SAMPLES = {k for k in SAMPLES if "public" in k}
PARAMS = [pytest.param(k, marks=pytest.mark.public if k in PUBLIC_SAMPLES else ()) for k in SAMPLES]


def test_every_registered_format_has_samples():
    assert {fmt for fmt, _ in SAMPLES.values()} == {f.name for f in FORMATS}
    assert {fmt for fmt, _folder, _name in PROFILES.values()} == {f.name for f in FORMATS}
    assert set(RAW) == {f.name for f in FORMATS}


# -- the oracle's neutral shape ---------------------------------------------------------------------------------------
@dataclass
class Raw:
    """What the file holds, read by the oracle: ranges (id, name, payload or None, thread, start, end or None, ended
    on another thread), CUDA calls (thread, process, correlation id, start, end), GPU ops (process or None, correlation
    id, kind, start, end). A thread and a process are opaque keys; times are ns."""

    ranges: list[tuple]
    calls: list[tuple]
    ops: list[tuple]


def raw_nsys(path: Path) -> Raw:
    """An export (a report: its export beside it) read with sqlite3 and SQL."""
    path = path.with_suffix(".sqlite")
    con = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)
    con.text_factory = lambda b: b.decode("utf-8", "replace")
    try:
        tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        ranges = []
        if "NVTX_EVENTS" in tables:
            strings = "LEFT JOIN StringIds s ON s.id = e.textId" if "StringIds" in tables else ""
            value = "coalesce(s.value, e.text)" if strings else "e.text"
            for rid, name, payload, gtid, start, end, end_gtid in con.execute(
                    f"SELECT e.rowid, {value}, e.int64Value, e.globalTid, e.start, e.\"end\", e.endGlobalTid "
                    f"FROM NVTX_EVENTS e {strings} WHERE e.eventType IN (59, 60, 70, 71)"):
                if isinstance(name, str) and name.startswith(":") and not name.startswith("::"):
                    name = name[1:]  # newer nsys's default domain (`nvtx`)
                ranges.append((rid, name, payload, gtid, start, end, end_gtid is not None and end_gtid != gtid))
        calls = [(gtid, gtid >> 24, corr, start, end) for table in ("CUPTI_ACTIVITY_KIND_RUNTIME",
                                                                     "CUPTI_ACTIVITY_KIND_DRIVER") if table in tables
                 for gtid, corr, start, end in con.execute(
                     f"SELECT globalTid, correlationId, start, \"end\" FROM {table}")]
        ops = [(gpid >> 24, corr, kind, start, end)
               for table, kind in (("KERNEL", "kernel"), ("MEMCPY", "memcpy"), ("MEMSET", "memset"),
                                   ("GRAPH_TRACE", "graph")) if f"CUPTI_ACTIVITY_KIND_{table}" in tables
               for gpid, corr, start, end in con.execute(
                   f"SELECT globalPid, correlationId, start, \"end\" FROM CUPTI_ACTIVITY_KIND_{table}")]
    finally:
        con.close()
    return Raw(ranges, calls, ops)


def _ns(value) -> int:
    return int((Decimal(value) * 1000).to_integral_value())


_PAYLOAD = re.compile(r"^(?P<name>.+)#(?P<payload>-?\d+)$")
OP_KINDS = {"kernel": "kernel", "gpu_memcpy": "memcpy", "gpu_memset": "memset"}


def raw_kineto(path: Path) -> Raw:
    """A Kineto trace read with `json`, its times as decimals; the plugin's `name#payload` annotations split (the
    contract's form), a GPU op in the process of the call carrying its correlation id."""
    data = path.read_bytes()
    doc = json.loads(gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data, parse_float=Decimal)
    ranges, calls, ops = [], [], []
    for i, e in enumerate(doc["traceEvents"]):
        if e.get("ph") != "X":
            continue
        cat, start = e.get("cat"), _ns(e["ts"]) if "ts" in e else None
        if cat == "user_annotation":
            name, payload = e["name"], None
            m = _PAYLOAD.match(name)
            if m and (m["name"] in PAYLOAD_RANGES or m["name"].startswith(ENGINE_RANGE_PREFIX)):
                name, payload = m["name"], int(m["payload"])
            ranges.append((i, name, payload, (e["pid"], e["tid"]), start, start + _ns(e["dur"]), False))
        elif cat in ("cuda_runtime", "cuda_driver"):
            calls.append(((e["pid"], e["tid"]), e["pid"], e["args"].get("correlation"), start, start + _ns(e["dur"])))
        elif cat in OP_KINDS:
            ops.append((None, e["args"].get("correlation"), OP_KINDS[cat], start, start + _ns(e["dur"])))
    first = {}
    for _thread, pid, corr, _s, _e in calls:
        first.setdefault(corr, pid)
    ops = [(first.get(corr), corr, kind, s, e) for _p, corr, kind, s, e in ops]
    return Raw(ranges, calls, ops)


RAW: dict[str, Callable[[Path], Raw]] = {"nsys": raw_nsys, "kineto": raw_kineto}


@pytest.fixture(scope="module")
def sample(tmp_path_factory):
    """(format, path, the open trace, the oracle's Raw) of the sample named by the test's parameter, made once."""
    made: dict = {}

    def get(key: str):
        if key not in made:
            fmt, make = SAMPLES[key]
            path = make(tmp_path_factory.mktemp(key))
            made[key] = (fmt, path, open_trace(path), RAW[fmt](path))
        return made[key]

    yield get
    for _fmt, _path, trace, _raw in made.values():
        trace.close()


def _dtype(series: pd.Series) -> str:
    return "category" if isinstance(series.dtype, pd.CategoricalDtype) else str(series.dtype)


@pytest.mark.slow
@pytest.mark.parametrize("key", PARAMS)
def test_every_table_has_the_documented_columns_and_one_dtype_per_column(sample, key):
    fmt, _path, trace, _raw = sample(key)
    _, _, reference, _ = sample("nsys-gpu-shaped")  # every reader's dtypes are this export's
    assert trace.format == fmt
    for accessor, columns in frames.TABLES.items():
        got, want = getattr(trace, accessor)(), getattr(reference, accessor)()
        assert list(got.columns) == frames.names(columns), accessor
        assert {c: _dtype(got[c]) for c in got} == {c: _dtype(want[c]) for c in want}, accessor


@pytest.mark.slow
@pytest.mark.parametrize("key", PARAMS)
def test_the_tables_hold_the_files_own_rows(sample, key):
    _fmt, _path, trace, raw = sample(key)
    api = trace.cuda_api()
    assert Counter(zip(api["start_ns"], api["end_ns"], api["correlation_id"])) == \
        Counter((s, e, corr) for _t, _p, corr, s, e in raw.calls)
    ops = trace.gpu_ops()
    assert Counter(zip(ops["kind"].astype(str), ops["start_ns"], ops["end_ns"], ops["correlation_id"])) == \
        Counter((kind, s, e, corr) for _p, corr, kind, s, e in raw.ops)
    ranges = trace.nvtx_ranges()
    assert sorted(ranges["range_id"]) == sorted(r[0] for r in raw.ranges)
    got = {rid: (name, start, end) for rid, name, start, end in
           zip(ranges["range_id"], ranges["name"].astype(str), ranges["start_ns"], ranges["end_ns"])}
    for rid, name, _payload, _thread, start, end, _other in raw.ranges:
        if end is not None:  # a range open at the end of the capture gets the capture's end (`nvtx`)
            assert got[rid] == (name, start, end), rid
    assert trace.count("cuda_api") == len(raw.calls) and trace.count("gpu_ops") == len(raw.ops)


def projection_oracle(raw: Raw) -> dict[int, tuple]:
    """nsys's `nvtxgpuproj` rule on the raw rows, per range id: (GPU ops = launching calls with work, first op start,
    last op end, kernel time summed), None where the range launched nothing or is not projected. A call holds the ops
    of its (process, correlation id) — the latest-starting call of several —, a range the calls on its thread that lie
    inside it."""
    stands: dict[tuple, tuple] = {}
    for call in raw.calls:
        key = (call[1], call[2])
        if key not in stands or call[3] >= stands[key][3]:
            stands[key] = call
    work: dict[tuple, list] = {}
    for proc, corr, kind, s, e in raw.ops:
        if (proc, corr) in stands:
            work.setdefault(stands[(proc, corr)], []).append((kind, s, e))
    by_thread: dict = {}
    for call in stands.values():
        if call in work:
            by_thread.setdefault(call[0], []).append(call)
    for calls in by_thread.values():
        calls.sort(key=lambda c: (c[3], c[4]))
    starts = {t: [c[3] for c in calls] for t, calls in by_thread.items()}
    out: dict[int, tuple | None] = {}
    for rid, _name, _payload, thread, start, end, other in raw.ranges:
        held = []
        if end is not None and not other and thread in by_thread:
            at = starts[thread]
            held = [c for c in by_thread[thread][bisect_left(at, start):bisect_right(at, end)] if c[4] <= end]
        if not held:
            out[rid] = None
            continue
        done = [w for c in held for w in work[c]]
        out[rid] = (len(held), min(s for _k, s, _e in done), max(e for _k, _s, e in done),
                    sum(e - s for k, s, e in done if k == "kernel"))
    return out


def _na(value):
    return None if pd.isna(value) else int(value)


@pytest.mark.slow
@pytest.mark.parametrize("key", PARAMS)
def test_the_projection_is_nsys_rule_on_the_files_rows(sample, key):
    _fmt, _path, trace, raw = sample(key)
    want = projection_oracle(raw)
    proj = project(trace)
    got = {int(r.range_id): None if pd.isna(r.gpu_ops) else
           (int(r.gpu_ops), _na(r.proj_start_ns), _na(r.proj_end_ns), _na(r.kernel_sum_ns))
           for r in proj.itertuples()}
    open_ids = {r[0] for r in raw.ranges if r[5] is None}  # their end is the capture's: not the file's
    assert {k: v for k, v in got.items() if k not in open_ids} == {k: v for k, v in want.items() if k not in open_ids}
    if key.endswith(("gpu-shaped", "graph", "public-gpu")):
        assert any(v is not None for v in want.values()), "the sample launches GPU work inside its ranges"


# -- a profile's runs: phases and c -----------------------------------------------------------------------------------
PROFILES = {
    "nsys-interleaved": ("nsys", FIXTURES / "interleaved", "trace.sqlite"),
    "kineto-interleaved": ("kineto", FIXTURES / "torch" / "profile", "trace.pt.trace.json.gz"),
}
FORWARD, WARMUP, PARTS = "model_executable()", "nsys_cc:warmup", ("nsys_cc:logits", "nsys_cc:sample")


def tokens_of(raw: Raw, label: str) -> dict[str, list[int]]:
    """One engine's measured tokens by phase, ns: its forwards inside its engine's windows and outside every warm-up
    range, each plus the logits and sampling ranges between its end and the next forward's start; a forward of the
    engine's batch (its fewest tokens) is a decode, one of more tokens a prefill (docs/definitions.md)."""
    def named(name: str) -> list[tuple]:
        return sorted((start, end, payload) for _i, n, payload, _t, start, end, _o in raw.ranges if n == name)

    windows, warm = named(f"{ENGINE_RANGE_PREFIX}{label}"), named(WARMUP)
    forwards = named(FORWARD)
    parts = [p for name in PARTS for p in named(name)]
    mine = [(i, f) for i, f in enumerate(forwards) if any(s <= f[0] <= e for s, e, _ in windows)
            and not any(s <= f[0] <= e for s, e, _ in warm)]
    batch = min(f[2] for _i, f in mine)
    out: dict[str, list[int]] = {"prefill": [], "decode": []}
    for i, (start, end, payload) in mine:
        until = forwards[i + 1][0] if i + 1 < len(forwards) else math.inf
        token = end - start + sum(e - s for s, e, _ in parts if end <= s < until)
        out["decode" if payload == batch else "prefill"].append(token)
    return out


@pytest.mark.slow
@pytest.mark.parametrize("key", list(PROFILES))
def test_a_profiles_phases_and_c_are_its_runs(key):
    fmt, folder, name = PROFILES[key]
    runs = [RAW[fmt](run / name) for run in sorted(folder.glob("run-*"))]
    result = nsys_cc.analyze(folder)
    target = result.models[0].name
    assert result.models[0].role == "target" and len(runs) >= 2
    for model in result.models:
        for phase in ("prefill", "decode"):
            assert model.phase_count(phase) == sum(len(tokens_of(r, model.name)[phase]) for r in runs), \
                (model.name, phase)
    for draft in (m.name for m in result.models[1:]):
        for phase in ("prefill", "decode"):
            per_run = [statistics.median(tokens_of(r, draft)[phase]) / statistics.median(tokens_of(r, target)[phase])
                       for r in runs]
            (c,) = result.coefficients.query("draft == @draft and phase == @phase and metric == 'wall'")["c"]
            assert c == pytest.approx(math.prod(per_run) ** (1 / len(per_run)), rel=1e-9), (draft, phase)
    assert {m.trace_format for m in result.models} == {fmt}
