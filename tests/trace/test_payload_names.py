"""Payloads carried in range names (the torch route): the Kineto reader turns the plugin's `NAME#PAYLOAD` annotations
back into the range's name and payload, for the plugin's own ranges and the engine ranges only; every other name stays
whole. The oracle is names written out by hand, and a Kineto JSON written by hand."""

from __future__ import annotations

import gzip
import json
import math

import numpy as np

from nsys_cc.trace import open_trace
from nsys_cc.trace.payload_names import split_name, split_payloads


def test_the_plugins_ranges_are_split():
    assert split_name("model_executable()#128") == ("model_executable()", 128.0)
    assert split_name("draft_model_executable()#1") == ("draft_model_executable()", 1.0)
    assert split_name("nsys_cc:step#5") == ("nsys_cc:step", 5.0)
    assert split_name("nsys_cc:iteration#0") == ("nsys_cc:iteration", 0.0)
    assert split_name("model_executable()#-1") == ("model_executable()", -1.0)


def test_engine_ranges_are_split_at_the_last_hash():
    assert split_name("nsys_cc:engine tiny-llama-target#2") == ("nsys_cc:engine tiny-llama-target", 2.0)
    # a label with a hash and digits of its own keeps them: only the last `#N` is the payload
    assert split_name("nsys_cc:engine m#7#3") == ("nsys_cc:engine m#7", 3.0)


def test_other_names_keep_their_hash():
    for name in ("layer#3", "## Call CompiledFxGraph abc ##", "model_executable()", "model_executable()#",
                 "model_executable()#12a", "nsys_cc:engine #4", "execute_context_1(128)_generation_0(0)",
                 "model_executable()#1.5", "xmodel_executable()#3"):
        base, payload = split_name(name)
        assert base == name and math.isnan(payload), name


def test_split_payloads_keeps_order_and_marks_missing_payloads():
    names = ["layer#3", "model_executable()#128", "model_executable()#1", "nsys_cc:engine d#0", "model_executable()#1"]
    bases, payloads = split_payloads(names)
    assert bases == ["layer#3", "model_executable()", "model_executable()", "nsys_cc:engine d", "model_executable()"]
    assert np.isnan(payloads[0]) and payloads[1:].tolist() == [128.0, 1.0, 0.0, 1.0]


def test_no_payload_at_all_gives_the_names_untouched():
    names = ["layer#3", "execute_context_0(0)_generation_1(1)"]
    assert split_payloads(names) == (names, None)
    assert split_payloads([]) == ([], None)


def _annotation(name: str, ts: float, dur: float) -> dict:
    return {"ph": "X", "cat": "user_annotation", "name": name, "pid": 10, "tid": 10, "ts": ts, "dur": dur,
            "args": {}}


def test_the_kineto_reader_gives_names_and_payloads(tmp_path):
    events = [
        {"ph": "M", "name": "process_name", "pid": 10, "tid": 0, "args": {"name": "python"}},
        {"ph": "M", "name": "thread_name", "pid": 10, "tid": 10, "args": {"name": "main"}},
        _annotation("nsys_cc:engine t#0", 100.0, 50.0),
        _annotation("model_executable()#128", 101.0, 10.0),
        _annotation("model_executable()#1", 120.0, 5.0),
        _annotation("layer#3", 130.0, 1.0),
    ]
    path = tmp_path / "hand.pt.trace.json.gz"
    with gzip.open(path, "wt") as fh:
        json.dump({"schemaVersion": 1, "traceEvents": events}, fh)
    with open_trace(path) as trace:
        ranges = trace.nvtx_ranges(nesting=False).sort_values("start_ns")
    got = [(str(n), None if math.isnan(p) else p) for n, p in zip(ranges["name"], ranges["payload"])]
    assert got == [("nsys_cc:engine t", 0.0), ("model_executable()", 128.0), ("model_executable()", 1.0),
                   ("layer#3", None)]
    with open_trace(path) as trace:  # the name filter sees the split names
        only = trace.nvtx_ranges(names=["model_executable()"], nesting=False)
    assert sorted(only["payload"].tolist()) == [1.0, 128.0]

