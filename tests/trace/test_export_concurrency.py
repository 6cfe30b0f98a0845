"""Analyses of one .nsys-rep at once share the export cache safely.

Each process runs the real `nsys-cc` on the real fixture report with one empty cache directory. nsys is reached
through a shim that holds every `nsys export` at a barrier until all processes have arrived, so the exports
really overlap (without it, process start-up skew could let one finish before the other looks at the cache).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import FIXTURES, raw_sql, unchanged
from nsys_cc.trace.export import content_hash

REPORT = FIXTURES / "vllm" / "tiny-llama-target.nsys-rep"
# The fixture export made from REPORT by the same nsys: the shared cache must end with the same tables.
EXPORT = FIXTURES / "vllm" / "tiny-llama-target.sqlite"
NSYS_CC = Path(sys.executable).with_name("nsys-cc")
BARRIER_SECONDS = 120


def alone(tmp_path: Path) -> Path:
    """REPORT alone in a folder of its own: beside it in fixtures/ sits its export, which would be read instead."""
    copy = tmp_path / "in" / REPORT.name
    copy.parent.mkdir()
    shutil.copy2(REPORT, copy)
    return copy


def barrier_nsys(tmp_path: Path, real_nsys: str, parties: int) -> tuple[Path, Path]:
    """A shim for nsys whose `export` waits until `parties` exports have started; returns (shim, arrivals dir)."""
    arrivals = tmp_path / "arrivals"
    arrivals.mkdir()
    shim = tmp_path / "nsys"
    shim.write_text(
        "#!/bin/sh\n"
        'if [ "$1" = export ]; then\n'
        f'  touch "{arrivals}/$$"; i=0\n'
        f'  while [ "$(ls "{arrivals}" | wc -l)" -lt {parties} ] && [ $i -lt {BARRIER_SECONDS * 10} ]; do\n'
        "    sleep 0.1; i=$((i + 1))\n"
        "  done\n"
        "fi\n"
        f'exec "{real_nsys}" "$@"\n'
    )
    shim.chmod(0o755)
    return shim, arrivals


def table_counts(path: Path) -> dict[str, int]:
    names = [r[0] for r in raw_sql(path, "SELECT name FROM sqlite_master WHERE type = 'table'")]
    return {n: raw_sql(path, f'SELECT count(*) FROM "{n}"')[0][0] for n in names}


@pytest.mark.parametrize("parties", [2, 3])
def test_simultaneous_analyses_share_one_export(parties, tmp_path, nsys_bin):
    cache = tmp_path / "cache"
    report = alone(tmp_path)
    shim, arrivals = barrier_nsys(tmp_path, nsys_bin, parties)
    env = {**os.environ, "NSYS": str(shim), "NSYS_CC_CACHE": str(cache)}
    with unchanged(report):
        procs = [
            subprocess.Popen([str(NSYS_CC), "info", "--format", "json", str(report)], env=env, text=True,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            for _ in range(parties)
        ]
        outs = [p.communicate(timeout=BARRIER_SECONDS + 60) for p in procs]
    assert [p.returncode for p in procs] == [0] * parties, [err for _, err in outs]
    assert len(list(arrivals.iterdir())) == parties  # every process ran its own export, all at once
    for _, err in outs:
        assert "exporting tiny-llama-target.nsys-rep to SQLite with nsys" in err
    entry = cache / f"{content_hash(REPORT)}.sqlite"
    # no temporary or partial file left: the export and the record of what it was made from
    assert sorted(p.name for p in cache.iterdir()) == [entry.with_suffix(".json").name, entry.name]
    record = json.loads(entry.with_suffix(".json").read_text())  # whichever process came last wrote both
    assert (record["sqlite_size"], record["sqlite_mtime_ns"]) == (entry.stat().st_size, entry.stat().st_mtime_ns)
    summaries = [json.loads(out) for out, _ in outs]
    assert {s["sqlite_path"] for s in summaries} == {str(entry)}
    assert all(s["tables"] == summaries[0]["tables"] for s in summaries)
    assert table_counts(entry) == table_counts(EXPORT)


def test_interrupted_export_leaves_nothing_in_the_cache(tmp_path, nsys_bin):
    """Ctrl-C while nsys exports: exit 130, one line, and neither the temporary nor a partial export stays."""
    cache = tmp_path / "cache"
    shim, arrivals = barrier_nsys(tmp_path, nsys_bin, parties=2)  # one process: its export waits at the barrier
    env = {**os.environ, "NSYS": str(shim), "NSYS_CC_CACHE": str(cache)}
    proc = subprocess.Popen([str(NSYS_CC), "info", str(alone(tmp_path))], env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + BARRIER_SECONDS
    while not any(arrivals.iterdir()) and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.1)
    assert any(arrivals.iterdir()), proc.communicate()
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert err.splitlines()[-1] == "nsys-cc: interrupted"
    assert "Traceback" not in err
    assert list(cache.iterdir()) == []


def test_a_second_analysis_reuses_the_export_without_nsys(tmp_path, nsys_bin):
    """Once one analysis has stored the export, another one opens it and never runs nsys."""
    cache = tmp_path / "cache"
    env = {**os.environ, "NSYS_CC_CACHE": str(cache)}
    report = alone(tmp_path)
    first = subprocess.run([str(NSYS_CC), "info", str(report)], env=env, capture_output=True, text=True, timeout=300)
    assert first.returncode == 0, first.stderr
    env["NSYS"] = str(tmp_path / "absent-nsys")
    env["PATH"] = "/usr/bin:/bin"
    (tmp_path / "absent-nsys").write_text("#!/bin/sh\nexit 99\n")
    (tmp_path / "absent-nsys").chmod(0o755)
    second = subprocess.run([str(NSYS_CC), "info", str(report)], env=env, capture_output=True, text=True, timeout=300)
    assert second.returncode == 0, second.stderr
    assert "exporting" not in second.stderr
    assert first.stdout == second.stdout
