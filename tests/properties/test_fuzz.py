"""Fuzzing the reader and the analysis with mutated real exports: never a traceback, never a changed input.

Every case copies a real export (the project's fixtures made by the real nsys 2022.4, plus two public GPU traces
when ../shared/traces/public is present) into tmp_path and mutates the COPY: truncated at a random offset, bytes
flipped, tables or columns dropped, rows deleted or duplicated, values replaced by NULLs, text, blobs, reals,
huge or negative integers, start/end swapped; and hostile shapes: tables named with quotes, SQL or a newline,
forward payloads that are no token count (int64 extremes, ±inf), text with a newline, a mutation left committed in a
-wal file beside the copy; hostile numbers (nested same-name ranges, bad CUDA ends, int64-extreme ranges) and forged
exports (every NVTX row twice, a kernel ending at 2⁶³ − 1, a shared correlationId, zero-length forwards; and in a
profile directory: latencies that are no time, a run listed twice, a run's trace hard-linked as another's, a label
that is a path). Reports (.nsys-rep) get byte-level mutations and go through the real `nsys export`.
The library may then succeed or raise an `NsysCCError`; any other exception is a bug.

`NSYS_CC_FUZZ_CASES` sets the number of cases: default 15 (`make check`, the edit-test loop), `make test` runs 60,
`make fuzz` 2000. Case i uses `random.Random(i)`, so a failure names the seed and the mutations that reproduce it.
"""

from __future__ import annotations

import os
import random
import shutil
import sqlite3
from dataclasses import dataclass
from pathlib import Path

import pytest

from conftest import FIXTURES, PUBLIC, bounded, slow_column, unchanged
from nsys_cc.analysis.coefficient.measure import cost_coefficient
from nsys_cc.analysis.forwards.projection import project
from nsys_cc.analysis.forwards.ranges import range_table
from nsys_cc.errors import NsysCCError
from nsys_cc.trace import open_trace

CASES = int(os.environ.get("NSYS_CC_FUZZ_CASES", "15"))  # 30 once: ~2 s of the loop's CPU


@dataclass(frozen=True)
class Base:
    path: Path
    range_name: str


SQLITE_BASES = [
    Base(FIXTURES / "vllm" / "tiny-llama-target.sqlite", "model_executable()"),
    Base(FIXTURES / "vllm" / "vllm_scopes.sqlite", "gpu_model_runner: forward"),
    Base(FIXTURES / "nvtx" / "nvtx_cases.sqlite", "outer"),
]
# GPU traces (CUDA API, kernels, memcpy) from the public set; used only where that directory exists.
PUBLIC_BASES = [
    Base(PUBLIC / "Sh1mwww__llama3-inference__demo.sqlite", "attention_simulation"),
    Base(PUBLIC / "MohanadOdema__DLProf__nsys_profile.sqlite", "aten::resize_"),
]
REPORT_BASES = [
    Base(FIXTURES / "vllm" / "tiny-llama-target.nsys-rep", "model_executable()"),
    Base(FIXTURES / "nvtx" / "nvtx_cases.nsys-rep", "outer"),
]
# Tables the reader and the analysis touch: mutations aim here most of the time.
READ_TABLES = (
    "NVTX_EVENTS", "StringIds", "EXPORT_META_DATA", "META_DATA_EXPORT", "META_DATA_CAPTURE", "ANALYSIS_DETAILS",
    "CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY",
    "CUPTI_ACTIVITY_KIND_MEMSET", "CUPTI_ACTIVITY_KIND_GRAPH_TRACE", "ENUM_CUDA_MEMCPY_OPER",
)
ODD_VALUES = (
    None, "abc", "", "12", "-7", 0, -1, 1, 59, 60, 75, 2**63 - 1, -(2**63), 2**31, 1.5, -0.0, float("inf"), 1e300,
    b"\x00\xff", "\u0000", "前向 🚀", "x" * 5000, "two\nlines", float("-inf"),
)
# Table names a file may hold: each must be read as one name, never as SQL.
ODD_TABLE_NAMES = (
    'a"b', "x'y", "sp ace", "前向", "t\nu", '" OR 1=1 --',
    't" , (WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT max(x) FROM c) AS z --',
)
# Payload columns of NVTX_EVENTS and values that are no token count.
PAYLOAD_VALUES = (2**63 - 1, -(2**63), float("inf"), float("-inf"), 0, -1, 0.5, 1e300)


def _bases() -> list[Base]:
    bases = list(SQLITE_BASES)
    if PUBLIC.is_dir():
        bases += [b for b in PUBLIC_BASES if b.path.is_file()]
    return bases


def _tables(con: sqlite3.Connection) -> list[str]:
    return [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")]


def _columns(con: sqlite3.Connection, table: str) -> list[str]:
    return [r[1] for r in con.execute(f'PRAGMA table_info("{table}")')]


def _pick_table(rng: random.Random, con: sqlite3.Connection) -> str | None:
    tables = _tables(con)
    read = [t for t in tables if t in READ_TABLES]
    pool = read if read and rng.random() < 0.85 else tables
    return rng.choice(pool) if pool else None


def _relax(con: sqlite3.Connection, table: str, keep: list[str] | None = None) -> None:
    """Rebuild `table` without constraints (NOT NULL, PRIMARY KEY), keeping the columns `keep`, in order."""
    cols = ", ".join(f'"{c}"' for c in (keep if keep is not None else _columns(con, table)))
    con.execute(f'CREATE TABLE "_fuzz" AS SELECT {cols} FROM "{table}"')
    con.execute(f'DROP TABLE "{table}"')
    con.execute(f'ALTER TABLE "_fuzz" RENAME TO "{table}"')


def _sql_mutation(rng: random.Random, con: sqlite3.Connection) -> str:
    table = _pick_table(rng, con)
    if table is None:
        return "no table left"
    cols = _columns(con, table)
    op = rng.choice(["drop_table", "drop_columns", "poison", "poison", "poison", "delete", "duplicate", "swap"])
    if op == "drop_table":
        con.execute(f'DROP TABLE "{table}"')
        return f"drop table {table}"
    if op == "drop_columns":
        gone = rng.sample(cols, k=min(len(cols), rng.randint(1, 2)))
        keep = [c for c in cols if c not in gone]
        if not keep:
            con.execute(f'DROP TABLE "{table}"')
        else:
            _relax(con, table, keep)
        return f"drop columns {gone} of {table}"
    if op == "delete":
        frac = rng.random()
        con.execute(f'DELETE FROM "{table}" WHERE abs(random()) % 1000 < ?', (int(frac * 1000),))
        return f"delete ~{frac:.0%} of {table}"
    _relax(con, table)
    if op == "duplicate":
        con.execute(f'INSERT INTO "{table}" SELECT * FROM "{table}"')
        return f"duplicate rows of {table}"
    rowids = [r[0] for r in con.execute(f'SELECT rowid FROM "{table}"')]
    if not rowids:
        return f"{table} is empty"
    hit = rng.sample(rowids, k=min(len(rowids), rng.choice([1, 2, 5, len(rowids)])))
    marks = ",".join(map(str, hit))
    if op == "swap" and {"start", "end"} <= set(cols):
        con.execute(f'UPDATE "{table}" SET start = "end", "end" = start WHERE rowid IN ({marks})')
        return f"swap start/end of {len(hit)} rows of {table}"
    col = rng.choice(cols)
    value = rng.choice(ODD_VALUES)
    con.execute(f'UPDATE "{table}" SET "{col}" = ? WHERE rowid IN ({marks})', (value,))
    return f"set {table}.{col} = {value!r:.40} in {len(hit)} rows"


def _byte_mutation(rng: random.Random, path: Path) -> str:
    data = bytearray(path.read_bytes())
    if rng.random() < 0.5:
        cut = rng.randrange(len(data))
        path.write_bytes(bytes(data[:cut]))
        return f"truncate at byte {cut} of {len(data)}"
    flips = rng.choice([1, 4, 32, 256])
    lo = 0 if rng.random() < 0.2 else 100  # mostly keep the SQLite header so that pages get parsed
    for _ in range(flips):
        data[rng.randrange(lo, len(data))] ^= rng.randrange(1, 256)
    path.write_bytes(bytes(data))
    return f"flip {flips} bytes"


def _odd_table(rng: random.Random, con: sqlite3.Connection) -> str:
    """A table whose name is quotes, SQL or a newline (and, for the recursive one, the table it names)."""
    name = rng.choice(ODD_TABLE_NAMES)
    quoted = '"' + name.replace('"', '""') + '"'
    con.execute(f"CREATE TABLE {quoted} (v)")
    con.execute(f"INSERT INTO {quoted} VALUES (1), (2)")
    if "t" not in _tables(con):
        con.execute("CREATE TABLE t (v)")
    return f"table named {name!r:.50}"


def _odd_payload(rng: random.Random, con: sqlite3.Connection) -> str:
    """Forward-range payloads that are no token count: int64 extremes, ±inf, 0, fractions."""
    if "NVTX_EVENTS" not in _tables(con):
        return "no NVTX_EVENTS"
    cols = [c for c in ("int64Value", "doubleValue", "uint64Value") if c in _columns(con, "NVTX_EVENTS")]
    if not cols:
        return "no payload column"
    _relax(con, "NVTX_EVENTS")
    col, value = rng.choice(cols), rng.choice(PAYLOAD_VALUES)
    if col == "uint64Value" and isinstance(value, int) and value < 0:
        value = 2**63 - 1
    con.execute(f'UPDATE NVTX_EVENTS SET "{col}" = ? WHERE abs(random()) % 4 = 0 AND eventType = 59', (value,))
    return f"payload {col} = {value!r} in ~1/4 of push/pop ranges"


def _hostile_numbers(rng: random.Random, con: sqlite3.Connection) -> str:
    """Hostile numbers: every push/pop range given a nested child of its own name, a CUDA row with a NULL
    or backwards end, or a range from −2⁶³ to 2⁶³−1 (tests/reliability/test_numbers.py checks each exactly)."""
    shape = rng.choice(["nested", "gpu_end", "extremes"])
    tables = _tables(con)
    if shape == "gpu_end":
        cuda = [t for t in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_MEMCPY")
                if t in tables and {"start", "end"} <= set(_columns(con, t))]
        if not cuda:
            return "no CUDA table for a bad end"
        table = rng.choice(cuda)
        _relax(con, table)
        end = rng.choice(["NULL", "start - 1"])
        con.execute(f'UPDATE "{table}" SET "end" = {end} WHERE abs(random()) % 8 = 0')
        return f"end = {end} in ~1/8 of {table}"
    if "NVTX_EVENTS" not in tables or not {"start", "end", "eventType"} <= set(_columns(con, "NVTX_EVENTS")):
        return "no NVTX_EVENTS for hostile numbers"
    _relax(con, "NVTX_EVENTS")
    if shape == "nested":
        con.execute('INSERT INTO NVTX_EVENTS SELECT * FROM NVTX_EVENTS WHERE eventType = 59 AND "end" - start > 2')
        con.execute('UPDATE NVTX_EVENTS SET start = start + 1, "end" = "end" - 1 WHERE rowid > '
                    '(SELECT max(rowid) FROM NVTX_EVENTS) - changes()')
        return "nested same-name child in every push/pop range"
    con.execute('UPDATE NVTX_EVENTS SET start = ?, "end" = ? WHERE rowid = (SELECT max(rowid) FROM NVTX_EVENTS '
                'WHERE eventType = 59)', (-(2**63), 2**63 - 1))
    return "a range from -2**63 to 2**63-1"


def _crafted_export(rng: random.Random, con: sqlite3.Connection) -> str:
    """Crafted exports (tests/reliability/test_hangs_and_errors.py checks each exactly): every NVTX row twice, a
    kernel ending at 2⁶³ − 1, one correlationId shared by several kernels or launches of a process, zero-length
    forwards."""
    tables = _tables(con)
    shape = rng.choice(["nvtx_twice", "sentinel_end", "shared_correlation", "zero_length"])
    if shape in ("sentinel_end", "shared_correlation"):
        cuda = [t for t in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME") if t in tables]
        if not cuda:
            return f"no CUDA table for {shape}"
        table = rng.choice(cuda)
        cols = _columns(con, table)
        _relax(con, table)
        if shape == "sentinel_end" and "end" in cols:
            con.execute(f'UPDATE "{table}" SET "end" = ? WHERE rowid = (SELECT min(rowid) FROM "{table}")',
                        (2**63 - 1,))
            return f"end = 2**63-1 in one row of {table}"
        if "correlationId" in cols:
            con.execute(f'UPDATE "{table}" SET correlationId = (SELECT min(correlationId) FROM "{table}") '
                        "WHERE abs(random()) % 3 = 0")
            return f"one correlationId for ~1/3 of {table}"
        return f"no column for {shape} in {table}"
    if "NVTX_EVENTS" not in tables or not {"start", "end"} <= set(_columns(con, "NVTX_EVENTS")):
        return "no NVTX_EVENTS for a crafted export"
    _relax(con, "NVTX_EVENTS")
    if shape == "nvtx_twice":
        con.execute("INSERT INTO NVTX_EVENTS SELECT * FROM NVTX_EVENTS")
        return "every NVTX row twice"
    con.execute('UPDATE NVTX_EVENTS SET "end" = start WHERE abs(random()) % 2 = 0')
    return "zero-length ranges (about half)"


def _pending_in_wal(rng: random.Random, path: Path) -> str:
    """Leave `path` as a writer that has not checkpointed leaves it: WAL mode, one more mutation
    committed into `path`-wal only. The writer works on a copy elsewhere; both files are copied while it is open."""
    work = path.parent / "writer"
    work.mkdir()
    db = shutil.copyfile(path, work / path.name)
    con = sqlite3.connect(db)
    try:
        con.execute("PRAGMA journal_mode=WAL")
        con.execute("PRAGMA wal_autocheckpoint=0")
        done = _sql_mutation(rng, con)
        con.commit()
        shutil.copyfile(db, path)
        if Path(f"{db}-wal").exists():
            shutil.copyfile(f"{db}-wal", f"{path}-wal")
    finally:
        con.close()
        shutil.rmtree(work)
    return f"in the -wal only: {done}"


def mutate_sqlite(rng: random.Random, src: Path, dst: Path) -> list[str]:
    """Copy `src` to `dst` and apply 1–3 SQL mutations (now and then an odd table name or odd payloads), sometimes
    one more that stays in a -wal file, then (one time in three) a byte-level one."""
    shutil.copyfile(src, dst)
    done = []
    con = sqlite3.connect(dst)
    try:
        for _ in range(rng.randint(1, 3)):
            done.append(_sql_mutation(rng, con))
            con.commit()
        if rng.random() < 0.2:
            done.append(_odd_table(rng, con))
            con.commit()
        if rng.random() < 0.2:
            done.append(_odd_payload(rng, con))
            con.commit()
        if rng.random() < 0.2:
            done.append(_hostile_numbers(rng, con))
            con.commit()
        if rng.random() < 0.2:
            done.append(_crafted_export(rng, con))
            con.commit()
    finally:
        con.close()
    if rng.random() < 0.15:
        done.append(_pending_in_wal(rng, dst))
    if rng.random() < 1 / 3:
        done.append(_byte_mutation(rng, dst))
    return done


def exercise(path: Path, pristine: Path, range_name: str, cache_dir: Path) -> None:
    """Everything a user can ask of a trace: every reader accessor, the projection, `nsys-cc info`/`ranges`'s
    tables, and c against `pristine` (both ways round)."""
    with open_trace(path, cache_dir=cache_dir) as trace:
        trace.info()
        ranges = trace.nvtx_ranges()
        trace.cuda_api()
        trace.gpu_ops()
        assert len(project(trace)) == len(ranges)
        assert len(range_table(trace)) == len(ranges)
    cost_coefficient(str(path), [str(pristine)], range_name=range_name, acceptance=[0.7])
    cost_coefficient(str(pristine), [str(path)], range_name=range_name, skip_ranges=1, output_len=2)


def _check(seed: int, mutations: list[str], run) -> None:
    try:
        run()
    except NsysCCError as exc:
        message = str(exc)
        assert message and "\n" not in message, f"seed {seed} {mutations}: error message is not one line: {message!r}"
    except Exception as exc:  # the point of the test: name the seed and what was done
        pytest.fail(f"seed {seed}, mutations {mutations}: {type(exc).__name__}: {exc}")


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(CASES))
def test_mutated_export_raises_only_nsys_cc_errors(seed, tmp_path, cache_dir):
    rng = random.Random(seed)
    base = rng.choice(_bases())
    pristine = tmp_path / f"pristine{base.path.suffix}"
    shutil.copyfile(base.path, pristine)
    mutated = tmp_path / f"mutated{base.path.suffix}"
    mutations = mutate_sqlite(rng, base.path, mutated)
    wal = [w for w in [Path(f"{mutated}-wal")] if w.exists()]
    with unchanged(mutated, *wal, pristine, base.path), bounded(300):
        _check(seed, mutations, lambda: exercise(mutated, pristine, base.range_name, cache_dir))
    assert not Path(f"{mutated}-shm").exists()  # reading creates nothing beside the file


# Reports go through a real nsys export per case; a tenth as many cases as the SQLite fuzzing.
@pytest.mark.parametrize("seed", range(max(2, CASES // 10)))
def test_mutated_report_raises_only_nsys_cc_errors(seed, tmp_path, cache_dir, nsys_bin):
    rng = random.Random(10_000 + seed)
    base = rng.choice(REPORT_BASES)
    pristine = tmp_path / "pristine.sqlite"
    shutil.copyfile(base.path.with_suffix(".sqlite"), pristine)
    mutated = tmp_path / "mutated.nsys-rep"
    shutil.copyfile(base.path, mutated)
    mutations = [_byte_mutation(rng, mutated)]
    with unchanged(mutated, pristine):
        _check(seed, mutations, lambda: exercise(mutated, pristine, base.range_name, cache_dir))


# -- the reads and waits: a slow column, and the tool's own files in any shape --------------------------------------
def _slow_column(rng: random.Random, con: sqlite3.Connection) -> str:
    """One NVTX_EVENTS column the reader reads turned into a generated column that costs ~0.3 s a row (a string of
    millions of characters built and scanned per row, its length depending on the row), its values unchanged."""
    column = rng.choice(["end", "start", "textId"])
    slow_column(con, column)
    return f"NVTX_EVENTS.{column} a slow generated column"


# each case spins for its 0.3 s bound: 1 case in `make check`, 4 in `make test`
@pytest.mark.slow
@pytest.mark.parametrize("seed", range(max(1, CASES // 15)))
def test_a_slow_query_is_stopped_by_the_query_bound(seed, tmp_path, cache_dir, monkeypatch):
    """Every query the reader makes is bounded (NSYS_CC_QUERY_TIMEOUT): a column made slow ends in an NsysCCError
    within seconds of the bound, never a wait."""
    rng = random.Random(20_000 + seed)
    base = rng.choice(SQLITE_BASES)
    pristine = tmp_path / "pristine.sqlite"
    shutil.copyfile(base.path, pristine)
    mutated = tmp_path / "mutated.sqlite"
    shutil.copyfile(base.path, mutated)
    con = sqlite3.connect(mutated)
    try:
        mutations = [_slow_column(rng, con)]
        con.commit()
    finally:
        con.close()
    monkeypatch.setenv("NSYS_CC_QUERY_TIMEOUT", "0.3")
    with unchanged(mutated, pristine), bounded(120):
        _check(seed, mutations, lambda: exercise(mutated, pristine, base.range_name, cache_dir))


STATE_KEYS = ("runs", "models", "run", "status", "label", "role", "engines", "commands", "latencies", "stopped_by",
              "draft", "gamma", "speculative", "notes", "machine")


def _random_json(rng: random.Random, depth: int = 0):
    roll = rng.random()
    if depth > 4 or roll < 0.35:
        return rng.choice([None, True, False, 0, -1, 1, 2**63, 1.5, "", "done", "failed", "target", "x\ny", [], {}])
    if roll < 0.65:
        return [_random_json(rng, depth + 1) for _ in range(rng.randint(0, 3))]
    return {rng.choice(STATE_KEYS): _random_json(rng, depth + 1) for _ in range(rng.randint(0, 4))}


def _state_shape(rng: random.Random, path: Path) -> str:
    """`path` replaced by a shape its writer never leaves: a FIFO, a 100k-deep document, random JSON of the right
    words, bytes that are not UTF-8, or nothing."""
    if path.exists() or path.is_symlink():
        path.unlink()
    kind = rng.choice(["fifo", "deep", "json", "json", "bytes", "empty"])
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "deep":
        path.write_text(rng.choice(["[", '{"runs":'])[:1] * 100_000)
    elif kind == "json":
        import json

        path.write_text(json.dumps(_random_json(rng)))
    elif kind == "bytes":
        path.write_bytes(bytes(rng.randrange(256) for _ in range(rng.randint(1, 64))))
    else:
        path.write_bytes(b"")
    return f"{path.parent.name}/{path.name}: {kind}"


def _tampered_profile(rng: random.Random, out: Path, run: str) -> str:
    """Tampered profile directories: latencies that are no time, a status.json listing a run twice, a
    run's trace hard-linked as another's, a model label that is a path."""
    import json

    shape = rng.choice(["latencies", "run_twice", "linked_trace", "path_label"])
    if shape == "latencies":
        bench = rng.choice(sorted((out / run).glob("*.bench.json")))
        doc = json.loads(bench.read_text())
        doc["latencies"] = [rng.choice([-0.5, 0.0, -1e9, 1e-300]) for _ in doc["latencies"]]
        bench.write_text(json.dumps(doc))
        return f"{run}/{bench.name}: latencies that are no time"
    if shape == "linked_trace":
        other = next(p for p in sorted(out.glob("run-*")) if p.name != run)
        (other / "trace.sqlite").unlink()
        os.link(out / run / "trace.sqlite", other / "trace.sqlite")
        return f"{other.name}/trace.sqlite a hard link of {run}'s"
    runs = sorted(int(p.name.split("-")[1]) for p in out.glob("run-*"))
    labels = ["tiny-llama-target", "tiny-llama-draft-s", "tiny-llama-draft-xs"]
    if shape == "path_label":
        labels[rng.randrange(len(labels))] = rng.choice(["../t", "a/b", "..", "x\ny"])
    listed = [*runs, runs[0]] if shape == "run_twice" else runs
    (out / "status.json").write_text(json.dumps({
        "runs": [{"run": k, "status": "done"} for k in listed], "stopped_by": "repeat",
        "models": [{"role": "target" if i == 0 else "draft", "label": lab, "status": "done"}
                   for i, lab in enumerate(labels)]}))
    return f"status.json: {shape}"


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(max(3, CASES // 5)))
def test_a_profiles_own_files_of_any_shape_raise_only_nsys_cc_errors(seed, tmp_path):
    """A profile directory (the real interleaved fixture) with its status.json, a run's done.json, interleaved.json
    or a bench JSON replaced by a FIFO, a deep or misshapen document, or garbage: `analyze` answers or raises an
    NsysCCError of one line, never waits."""
    from nsys_cc.analysis.coefficient.of_profile import analyze_profile

    rng = random.Random(30_000 + seed)
    out = tmp_path / "O"
    shutil.copytree(FIXTURES / "interleaved", out, ignore=shutil.ignore_patterns("spec", "README.md"))
    run = rng.choice(sorted(p.name for p in out.glob("run-*")))
    names = ["status.json", f"{run}/done.json", f"{run}/interleaved.json",
             *[f"{run}/{p.name}" for p in sorted((out / run).glob("*.bench.json"))]]
    mutations = [_state_shape(rng, out / rng.choice(names)) for _ in range(rng.randint(1, 2))]
    with bounded(120):
        _check(seed, mutations, lambda: analyze_profile(out))


@pytest.mark.parametrize("seed", range(max(2, CASES // 5)))
def test_a_tampered_profile_directory_raises_only_nsys_cc_errors_and_reads_nothing_outside(seed, tmp_path):
    """Tampered shapes of a profile directory: the analysis answers or raises one NsysCCError line, and reads
    nothing outside the directory (the files beside it are hashed before and after)."""
    from nsys_cc.analysis.coefficient.of_profile import analyze_profile

    rng = random.Random(40_000 + seed)
    out = tmp_path / "O"
    shutil.copytree(FIXTURES / "interleaved", out, ignore=shutil.ignore_patterns("spec", "README.md"))
    shutil.copyfile(FIXTURES / "vllm" / "tiny-llama-target.sqlite", tmp_path / "t.sqlite")  # what `../t` names
    run = rng.choice(sorted(p.name for p in out.glob("run-*")))
    mutations = [_tampered_profile(rng, out, run)]
    with bounded(120), unchanged(tmp_path / "t.sqlite"):
        _check(seed, mutations, lambda: analyze_profile(out))
