"""`formats.done_json`: the record every run leaves, one shape for both ways of running engines, read back for what
the readers need — the request, the output length, the device, the speculative configs, the trace — from its data,
and from an older record's commands as a shell splits them (the committed fixtures were written before the request
was stored: what they say is checked here against the words of their commands read independently). No module reads a
run record or a stored command with a regular expression (the package is walked)."""

from __future__ import annotations

import ast
import json
import shlex
from pathlib import Path

import pytest

from conftest import FIXTURES, nodes
from nsys_cc.formats import done_json
from nsys_cc.request import ProfileRequest

PACKAGE = Path(__file__).resolve().parents[2] / "nsys_cc"
OLD_RECORDS = sorted(FIXTURES.glob("**/run-*/done.json"))


def _words(record: dict) -> list[str]:
    return shlex.split(record["commands"].split("\n")[0])


def test_the_committed_records_are_older_than_the_stored_request():
    assert OLD_RECORDS and all("request" not in json.loads(p.read_text()) for p in OLD_RECORDS)


@pytest.mark.parametrize("path", OLD_RECORDS[:: max(1, len(OLD_RECORDS) // 6)], ids=lambda p: str(p.parent))
def test_an_older_records_output_length_device_and_configs_are_its_commands_words(path):
    record = done_json.load_run(path.parent)
    assert record is not None and done_json.request_of(record) is None
    words = _words(json.loads(path.read_text()))
    assert done_json.output_len(record) == int(words[words.index("--output-len") + 1])
    cpu = "--kv-cache-memory-bytes" in words or any(w.startswith("VLLM_CPU_") for w in words)
    assert done_json.device(record) == ("cpu" if cpu else "gpu")
    configs = [words[i + 1] for i, w in enumerate(words) if w == "--speculative-config"]
    assert done_json.speculative_configs(record) == configs
    assert done_json.trace_name(record) is None  # an older record names no trace: the reader's legacy rule


def test_a_record_of_today_gives_its_own_data(tmp_path):
    request = ProfileRequest("tiny-llama-target", ["tiny-llama-draft-xs"], tmp_path, output_len=9, device="auto")
    config = '{"method": "draft_model", "num_speculative_tokens": 2}'
    record = done_json.record("VLLM_CPU_KVCACHE_SPACE=1 nsys profile … --output-len 4", request=request.to_dict(),
                              device="gpu", trace="trace.pt.trace.json.gz", recorder={"name": "torch", "version": "2"},
                              models=[{"label": "t", "role": "target"},
                                      {"label": "d.spec-g2", "role": "speculative", "speculative_config": config}])
    done_json.write_run(tmp_path, record)
    back = done_json.load_run(tmp_path)
    # the data wins over the commands' words (which say 4 and a CPU run here)
    assert done_json.request_of(back) == request and done_json.output_len(back) == 9
    assert done_json.device(back) == "gpu" and done_json.speculative_configs(back) == [config]
    assert done_json.trace_name(back) == "trace.pt.trace.json.gz"
    assert done_json.recorder_of(back) == {"name": "torch", "version": "2"}
    assert done_json.commands_of(back) == record["commands"]


@pytest.mark.parametrize("trace, name", [("/elsewhere/run-1/trace.sqlite", "trace.sqlite"), ("..", None), ("", None),
                                         ("/a/..", None), (3, None)])
def test_a_trace_name_is_a_name_in_the_runs_folder(trace, name):
    assert done_json.trace_name({"commands": "", "trace": trace}) == name


def test_an_older_record_names_its_profiler_alone():
    assert done_json.recorder_of({"commands": "", "profiler": "torch"}) == {"name": "torch", "version": None}
    assert done_json.recorder_of({"commands": ""}) is None


@pytest.mark.parametrize("text", ['{"commands": 3}', '{"commands": "x", "request": [1]}', '[1]',
                                  '{"commands": "x", "models": [{"role": "target"}]}'])
def test_a_record_of_another_shape_is_none(tmp_path, text):
    (tmp_path / "done.json").write_text(text)
    assert done_json.load_run(tmp_path) is None


def test_a_stored_request_nsys_cc_did_not_write_is_no_request():
    assert done_json.request_of({"commands": "", "request": {"target": 3}}) is None


# ---- no regular expression reads a run record -----------------------------------------------------------------
RECORD_NAMES = {"done_json", "status_json", "commands_of", "load_run", "load_model", "read_run"}


def regex_reads_of_records(root: Path) -> list[str]:
    """`module:function` of every function of the package that uses `re` and reads a run record (names the formats
    of the records, their readers, or the stored key "commands"), and every module but `formats/done_json.py` that
    spells the key "commands" (the stored command is read there only, never parsed elsewhere)."""
    found = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root.parent).as_posix()
        tree = ast.parse(path.read_text())
        for fn in (n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))):
            names = {n.id for n in ast.walk(fn) if isinstance(n, ast.Name)} | {
                n.attr for n in ast.walk(fn) if isinstance(n, ast.Attribute)}
            uses_re = any(isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "re"
                          for n in ast.walk(fn))
            reads = names & RECORD_NAMES or any(isinstance(n, ast.Constant) and n.value in ("commands", "done.json")
                                                for n in ast.walk(fn))
            if uses_re and reads:
                found.append(f"{rel}:{fn.name}")
        if rel != "nsys_cc/formats/done_json.py" and any(
                isinstance(n, ast.Constant) and n.value == "commands" for n in nodes(path)):
            found.append(f"{rel}: 'commands'")
    return sorted(set(found))


@pytest.mark.slow
def test_no_regular_expression_reads_a_run_record():
    assert regex_reads_of_records(PACKAGE) == []


def test_the_check_finds_a_pattern_over_a_record_and_the_key_spelled_elsewhere(tmp_path):
    pkg = tmp_path / "nsys_cc"
    (pkg / "formats").mkdir(parents=True)
    (pkg / "tune.py").write_text(
        "import re\nfrom .formats import done_json\n"
        "def output_len(d):\n    return re.search(r'--output-len (\\\\d+)', (d / done_json.NAME).read_text())\n"
        "def fine(x):\n    return re.match('bs', x)\n"
        "def commands(doc):\n    return doc.get('commands')\n")
    (pkg / "formats" / "done_json.py").write_text("def commands_of(m):\n    return m.get('commands')\n")
    assert regex_reads_of_records(pkg) == ["nsys_cc/tune.py: 'commands'", "nsys_cc/tune.py:output_len"]
