"""Every bad input gets one clear line and exit code 2, and no input file ever changes.

The corpus is built at test time in tmp_path from the project's real fixtures (made by the real nsys 2022.4):
copies that are truncated, overwritten, renamed, or edited with SQL. The SQL edits make files nsys itself would
not write (a dropped table or column, text where nsys writes integers, ranges left open, negative or Unicode
names…): they stand in for damaged or unusual exports on the error paths, and for the valid-but-unusual cases the
results are compared with the untouched fixture's. Each error case runs through the real CLI (`analyze`, and
`info`/`ranges` where the failure is the file's) with click's CliRunner; a few run as a real `nsys-cc` process to
show that no traceback reaches stderr. Every file a case reads is hashed before and after.
"""

from __future__ import annotations

import gzip
import json
import os
import random
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from click.testing import CliRunner

from conftest import FIXTURES, bounded, raw_sql, sha256_tree, unchanged
from nsys_cc.cli import cli
from nsys_cc.errors import InputError
from nsys_cc.trace import export as export_mod

VLLM = FIXTURES / "vllm"
TARGET = VLLM / "tiny-llama-target.sqlite"
DRAFT = VLLM / "tiny-llama-draft-s.sqlite"
REPORT = VLLM / "tiny-llama-target.nsys-rep"
NSYS_CC = Path(sys.executable).with_name("nsys-cc")
FORWARD = "model_executable()"
FORWARD_NAME_SQL = f"(SELECT id FROM StringIds WHERE value = '{FORWARD}')"
REPORT_HEADER = b"NVIDIA Tegra Profiler Report 1.\n"


# -- building inputs ---------------------------------------------------------------------------------------
def derive(src: Path, dst: Path, *sql: str) -> Path:
    """A copy of `src` at `dst` with `sql` run on the COPY."""
    shutil.copyfile(src, dst)
    con = sqlite3.connect(dst)
    try:
        for statement in sql:
            con.execute(statement)
        con.commit()
    finally:
        con.close()
    return dst


def unconstrained(table: str) -> list[str]:
    """SQL that rebuilds `table` without its NOT NULL constraints, so that a test can put NULLs where nsys never
    does."""
    return [f"CREATE TABLE _copy AS SELECT * FROM {table}", f"DROP TABLE {table}",
            f"ALTER TABLE _copy RENAME TO {table}"]


def cut(src: Path, dst: Path, size: int) -> Path:
    dst.write_bytes(src.read_bytes()[:size])
    return dst


def newer_report(dst: Path) -> Path:
    """The fixture report with the version header of a report written by nsys 2024.6.2 (the header nsys checks)."""
    data = REPORT.read_bytes()
    assert data.startswith(REPORT_HEADER)
    dst.write_bytes(b"NVIDIA Tegra Profiler Report 2024@6@2@225-246235244400v0.\n" + data[len(REPORT_HEADER):])
    return dst


# -- the corpus of errors ------------------------------------------------------------------------------------
@dataclass
class Case:
    """An input and what the CLI must say: `runs` maps verb → arguments, `expect` a regex (or verb → regex) the one
    error line must match after "nsys-cc: error: "; `reads` are hashed before and after."""

    runs: dict[str, list[str]]
    expect: str | dict[str, str]
    reads: list[Path] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    patch: Callable[[pytest.MonkeyPatch], None] | None = None

    def pattern(self, verb: str) -> str:
        return self.expect[verb] if isinstance(self.expect, dict) else self.expect


def on_file(bad: Path | str, expect: str | dict[str, str], verbs=("analyze", "info", "ranges"), **kw) -> Case:
    """A case about one file: as the target of `analyze` (against a good draft), and as the FILE of info/ranges."""
    args = {"analyze": [str(bad), str(DRAFT)], "info": [str(bad)], "ranges": [str(bad)]}
    reads = [Path(bad)] if Path(bad).is_file() or Path(bad).is_dir() else []
    return Case({v: args[v] for v in verbs}, expect, reads=[*reads, DRAFT], **kw)


def analyze(*args: str | Path, expect: str, reads: list[Path] = (), **kw) -> Case:
    return Case({"analyze": [str(a) for a in args]}, expect, reads=[TARGET, DRAFT, *reads], **kw)


FILE_VERBS = ("analyze", "info", "ranges")  # the file cannot be opened at all
READ_VERBS = ("analyze", "ranges")  # it opens, but its NVTX ranges cannot be read
BUILDERS: dict[str, Callable[[Path], Case]] = {}
VERBS: dict[str, tuple[str, ...]] = {}
RUNS_NSYS: set[str] = set()  # cases whose input is a .nsys-rep the real nsys must try to export


def case(*verbs: str, nsys: bool = False):
    """Register a builder of a Case whose runs are exactly `verbs` (default: analyze only); `nsys`: the case runs
    the real nsys (its test asks for `nsys_bin`, which makes it an `nsys` test)."""

    def register(builder: Callable[[Path], Case]) -> Callable[[Path], Case]:
        BUILDERS[builder.__name__] = builder
        VERBS[builder.__name__] = verbs or ("analyze",)
        if nsys:
            RUNS_NSYS.add(builder.__name__)
        return builder

    return register


@case(*FILE_VERBS)
def missing_path(tmp: Path) -> Case:
    return on_file(tmp / "missing.sqlite", r"missing\.sqlite: no such file$")


@case(*FILE_VERBS)
def a_directory(tmp: Path) -> Case:
    (tmp / "dir.sqlite").mkdir()
    (tmp / "dir.sqlite" / "inside.txt").write_text("x")
    return on_file(tmp / "dir.sqlite", r"dir\.sqlite is not a file$")


@case(*FILE_VERBS)
def a_character_device(tmp: Path) -> Case:
    return on_file("/dev/null", r"^/dev/null is not a file$")


@case(*FILE_VERBS)
def broken_symlink(tmp: Path) -> Case:
    (tmp / "broken.sqlite").symlink_to(tmp / "nowhere.sqlite")
    return on_file(tmp / "broken.sqlite", r"broken\.sqlite: no such file$")


@case(*FILE_VERBS)
def empty_file(tmp: Path) -> Case:
    (tmp / "empty.sqlite").write_bytes(b"")
    return on_file(tmp / "empty.sqlite", r"empty\.sqlite is empty \(0 bytes\): not an Nsight Systems export$")


@case(*FILE_VERBS)
def random_bytes_named_sqlite(tmp: Path) -> Case:
    # seeded: os.urandom once began with "{" (1 run in ~100), and the file was then taken for a JSON trace
    (tmp / "random.sqlite").write_bytes(random.Random(0).randbytes(8192))
    return on_file(tmp / "random.sqlite", r"random\.sqlite is neither an Nsight Systems SQLite export nor a \.nsys-rep")


@case(*FILE_VERBS)
def gzipped_export(tmp: Path) -> Case:
    (tmp / "t.sqlite.gz").write_bytes(gzip.compress(TARGET.read_bytes(), compresslevel=1))
    return on_file(tmp / "t.sqlite.gz", r"t\.sqlite\.gz is neither an Nsight Systems SQLite export")


@case(*FILE_VERBS)
def json_given_as_a_trace(tmp: Path) -> Case:
    shutil.copyfile(VLLM / "tiny-llama-target.bench.json", tmp / "bench.json")
    # a JSON file is read as a possible PyTorch-profiler trace: the line says what it lacks
    return on_file(tmp / "bench.json", r"bench\.json is a JSON object without 'traceEvents': neither a "
                   r"PyTorch-profiler \(Kineto\) trace nor an Nsight Systems export$")


@case(*FILE_VERBS)
def truncated_export(tmp: Path) -> Case:
    bad = cut(TARGET, tmp / "half.sqlite", TARGET.stat().st_size // 2)
    return on_file(bad, r"half\.sqlite is a corrupt or truncated SQLite file: database disk image is malformed$")


@case(*FILE_VERBS)
def truncated_inside_first_page(tmp: Path) -> Case:
    bad = cut(TARGET, tmp / "head.sqlite", 2000)
    return on_file(bad, r"head\.sqlite is a corrupt or truncated SQLite file")


@case(*FILE_VERBS)
def schema_page_zeroed(tmp: Path) -> Case:
    data = bytearray(TARGET.read_bytes())
    data[100:4096] = bytes(3996)
    (tmp / "zeroed.sqlite").write_bytes(bytes(data))
    return on_file(tmp / "zeroed.sqlite", r"zeroed\.sqlite is a corrupt or truncated SQLite file")


@case(*FILE_VERBS)
def sqlite_that_is_not_an_export(tmp: Path) -> Case:
    con = sqlite3.connect(tmp / "app.sqlite")
    con.execute("CREATE TABLE users (name TEXT)")
    con.execute("INSERT INTO users VALUES ('a')")
    con.commit()
    con.close()
    return on_file(tmp / "app.sqlite", r"app\.sqlite is not an Nsight Systems SQLite export: no EXPORT_META_DATA")


@case(*FILE_VERBS)
def zero_byte_report(tmp: Path) -> Case:
    (tmp / "empty.nsys-rep").write_bytes(b"")
    return on_file(tmp / "empty.nsys-rep", r"empty\.nsys-rep is empty \(0 bytes\): not an Nsight Systems report$")


@case(*FILE_VERBS, nsys=True)
def report_newer_than_nsys(tmp: Path) -> Case:
    bad = newer_report(tmp / "newer.nsys-rep")
    return on_file(bad, r"newer\.nsys-rep was written by nsys 2024\.6\.2, installed nsys is 2022\.4\.\d.*"
                        r"export it with nsys ≥ 2024\.6 .*and pass the \.sqlite$")


@case(*FILE_VERBS, nsys=True)
def truncated_report(tmp: Path) -> Case:
    bad = cut(REPORT, tmp / "cut.nsys-rep", REPORT.stat().st_size // 3)
    return on_file(bad, r"nsys could not export .*cut\.nsys-rep \(is it a complete \.nsys-rep\?\): Exportation error")


@case(*FILE_VERBS, nsys=True)
def random_bytes_named_report(tmp: Path) -> Case:
    (tmp / "random.nsys-rep").write_bytes(random.Random(1).randbytes(4096))
    return on_file(tmp / "random.nsys-rep", r"nsys could not export .*random\.nsys-rep .*Exportation error")


@case(*FILE_VERBS)
def report_without_nsys(tmp: Path) -> Case:
    shutil.copyfile(REPORT, tmp / "r.nsys-rep")
    return on_file(tmp / "r.nsys-rep",
                   r"r\.nsys-rep needs nsys to export: run `make nsys` or pass an existing \.sqlite$",
                   patch=lambda mp: mp.setattr(export_mod, "find_nsys", lambda: None))


@case(*FILE_VERBS)
def nsys_that_cannot_run(tmp: Path) -> Case:
    shutil.copyfile(REPORT, tmp / "r.nsys-rep")
    fake = tmp / "nsys"
    fake.write_text("#!/no/such/interpreter\n")
    fake.chmod(0o755)
    return on_file(tmp / "r.nsys-rep", rf"^cannot run nsys at {re.escape(str(fake))}: ", env={"NSYS": str(fake)})


@case(*FILE_VERBS)
def cache_entry_is_a_directory(tmp: Path) -> Case:
    cache = tmp / "blocked-cache"
    (cache / f"{export_mod.content_hash(REPORT)}.sqlite").mkdir(parents=True)
    shutil.copyfile(REPORT, tmp / "r.nsys-rep")
    return on_file(tmp / "r.nsys-rep",
                   r"^the export cache entry .*blocked-cache/[0-9a-f]{64}\.sqlite is not a file: remove it$",
                   env={"NSYS_CC_CACHE": str(cache)})


@case(*FILE_VERBS)
def no_writable_cache_anywhere(tmp: Path) -> Case:
    """A cache path under a regular file cannot be created (read-only for root too), and neither can the fallback."""
    (tmp / "file").write_text("not a directory")
    shutil.copyfile(REPORT, tmp / "r.nsys-rep")

    def patch(mp: pytest.MonkeyPatch) -> None:
        mp.setattr(tempfile, "tempdir", str(tmp / "file" / "tmp"))

    return on_file(tmp / "r.nsys-rep",
                   r"^cannot write the export cache .*file/cache nor .*: .*; "
                   r"set NSYS_CC_CACHE to a writable directory$",
                   env={"NSYS_CC_CACHE": str(tmp / "file" / "cache")}, patch=patch)


@case(*READ_VERBS)
def nvtx_events_without_a_column(tmp: Path) -> Case:
    bad = derive(TARGET, tmp / "nocol.sqlite", "ALTER TABLE NVTX_EVENTS DROP COLUMN textId")
    return on_file(bad, r"nocol\.sqlite is not a complete Nsight Systems export \(no such column: textId\): export it "
                        r"again with `nsys export --type sqlite`$", verbs=READ_VERBS)


@case(*READ_VERBS)
def text_where_nsys_writes_integers(tmp: Path) -> Case:
    bad = derive(TARGET, tmp / "text.sqlite", "UPDATE NVTX_EVENTS SET start = 'soon' WHERE rowid = 3")
    return on_file(bad, r"text\.sqlite holds a value an Nsight Systems export never has \(ValueError: .*'soon'\): "
                        r"the file is damaged$", verbs=READ_VERBS)


@case(*READ_VERBS)
def null_start_time(tmp: Path) -> Case:
    bad = derive(TARGET, tmp / "null.sqlite", *unconstrained("NVTX_EVENTS"),
                 "UPDATE NVTX_EVENTS SET start = NULL WHERE rowid = 2")
    return on_file(bad, r"null\.sqlite holds a value an Nsight Systems export never has \(TypeError: ",
                   verbs=READ_VERBS)


@case(*READ_VERBS)
def timestamp_beyond_64_bits(tmp: Path) -> Case:
    bad = derive(TARGET, tmp / "huge.sqlite", *unconstrained("NVTX_EVENTS"),
                 "UPDATE NVTX_EVENTS SET start = 1e30 WHERE rowid = 3")
    return on_file(bad, r"huge\.sqlite holds a value an Nsight Systems export never has \(OverflowError: ",
                   verbs=READ_VERBS)


@case(*READ_VERBS)
def text_in_a_row_that_is_not_a_range(tmp: Path) -> Case:
    """Text in the start of the domain-destroy row, and a range left open (so the last NVTX timestamp is needed: SQL's
    max(start) then returns text, compared with integers later). Without an open range that row is never read."""
    bad = derive(TARGET, tmp / "marktext.sqlite", "UPDATE NVTX_EVENTS SET start = 'later' WHERE eventType = 76",
                 "UPDATE NVTX_EVENTS SET end = NULL WHERE rowid = (SELECT max(rowid) FROM NVTX_EVENTS "
                 "WHERE eventType = 59)")
    return on_file(bad, r"marktext\.sqlite holds a value an Nsight Systems export never has \(TypeError: ",
                   verbs=READ_VERBS)


@case(*READ_VERBS)
def blob_as_a_range_name(tmp: Path) -> Case:
    # The forwards' name: a range the reads cannot skip (SQLite leaves ranges of other names out of them).
    bad = derive(TARGET, tmp / "blob.sqlite", "UPDATE StringIds SET value = x'00ff' WHERE value = 'model_executable()'")
    return on_file(bad, r"blob\.sqlite holds a value an Nsight Systems export never has \(TypeError: ",
                   verbs=READ_VERBS)


@case(*READ_VERBS)
def ranges_ending_before_they_start(tmp: Path) -> Case:
    bad = derive(TARGET, tmp / "backwards.sqlite",
                 f"UPDATE NVTX_EVENTS SET end = start - 5 WHERE textId = {FORWARD_NAME_SQL}")
    return on_file(bad, r"backwards\.sqlite: 20 NVTX range\(s\) end before they start \(first: NVTX_EVENTS row \d+, "
                        r"start \d+ > end \d+\): the export is damaged$", verbs=READ_VERBS)


@case()
def export_without_nvtx_events(tmp: Path) -> Case:
    bad = derive(TARGET, tmp / "nonvtx.sqlite", "DROP TABLE NVTX_EVENTS")
    return analyze(bad, DRAFT, expect=r"nonvtx\.sqlite: no NVTX range named 'model_executable\(\)': the trace has no "
                                      r"NVTX_EVENTS table \(profile with `nsys profile -t nvtx`\)$", reads=[bad])


@case()
def nvtx_events_empty(tmp: Path) -> Case:
    bad = derive(TARGET, tmp / "none.sqlite", "DELETE FROM NVTX_EVENTS")
    return analyze(bad, DRAFT, expect=r"none\.sqlite: no NVTX range named 'model_executable\(\)': the trace has no "
                                      r"NVTX ranges$", reads=[bad])


@case()
def export_without_string_ids(tmp: Path) -> Case:
    bad = derive(TARGET, tmp / "nostrings.sqlite", "DROP TABLE StringIds")
    return analyze(bad, DRAFT, reads=[bad],
                   expect=r"nostrings\.sqlite: no NVTX range named 'model_executable\(\)': none of its 85 NVTX ranges "
                          r"has a name \(registered names need the StringIds table\)$")


@case("analyze", "ranges")
def zero_ranges_of_the_name(tmp: Path) -> Case:
    return Case(
        {"analyze": [str(TARGET), str(DRAFT), "--range", "model_executable"],
         "ranges": [str(TARGET), "--range", "model_executable"]},
        {"analyze": r"tiny-llama-target\.sqlite: no NVTX range named 'model_executable'; closest names: "
                    r"'model_executable\(\)' \(choose one with --range\)$",
         "ranges": r"tiny-llama-target\.sqlite: no NVTX range named 'model_executable'; "
                   r"closest names: 'model_executable\(\)'$"},
        reads=[TARGET, DRAFT],
    )


@case()
def name_like_nothing_in_the_trace(tmp: Path) -> Case:
    return analyze(TARGET, DRAFT, "--range", "前向 ✓ 🚀",
                   expect=r"tiny-llama-target\.sqlite: no NVTX range named '前向 ✓ 🚀'; names in the trace: "
                          r"'model_executable\(\)', 'nsys_cc:logits', 'nsys_cc:sample', 'nsys_cc:step', "
                          r"'nsys_cc:iteration' \(choose one with --range\)$")


@case()
def unicode_name_close_to_one_in_the_trace(tmp: Path) -> Case:
    bad = derive(TARGET, tmp / "unicode.sqlite", f"UPDATE StringIds SET value = '前向 ✓ 🚀' WHERE value = '{FORWARD}'")
    return analyze(bad, DRAFT, "--range", "前向 ✓",
                   expect=r"unicode\.sqlite: no NVTX range named '前向 ✓'; closest names: '前向 ✓ 🚀'", reads=[bad])


@case()
def very_long_names_are_shortened(tmp: Path) -> Case:
    long_name = "x" * 100_000
    bad = derive(TARGET, tmp / "long.sqlite", f"UPDATE StringIds SET value = '{long_name}' WHERE value = '{FORWARD}'")
    return analyze(bad, DRAFT, "--range", "x" * 5000,
                   expect=r"long\.sqlite: no NVTX range named 'x{79}…'; closest names: 'x{79}…' \(choose one with "
                          r"--range\)$", reads=[bad])


@case()
def all_ranges_skipped(tmp: Path) -> Case:
    return analyze(TARGET, DRAFT, "--skip-ranges", "100",
                   expect=r"tiny-llama-target\.sqlite: all 20 'model_executable\(\)' ranges were dropped as warm-up "
                          r"\(dropped the first 20 of 20 ranges \(--skip-ranges=100\)\); lower --skip-ranges$")


@case()
def forward_ranges_never_closed(tmp: Path) -> Case:
    bad = derive(TARGET, tmp / "open.sqlite", f"UPDATE NVTX_EVENTS SET end = NULL WHERE textId = {FORWARD_NAME_SQL}")
    return analyze(bad, DRAFT, expect=r"open\.sqlite: every 'model_executable\(\)' range left after warm-up was never "
                                      r"closed \(the capture ended inside it\)", reads=[bad])


@case()
def target_given_twice(tmp: Path) -> Case:
    return analyze(TARGET, TARGET, expect=r"tiny-llama-target\.sqlite is given twice "
                                          r"\(as '.*tiny-llama-target\.sqlite' too\): each model needs its own trace$")


@case()
def target_given_twice_through_a_symlink(tmp: Path) -> Case:
    (tmp / "alias.sqlite").symlink_to(TARGET)
    return analyze(TARGET, tmp / "alias.sqlite", expect=r"alias\.sqlite is given twice")


@case()
def bad_second_draft(tmp: Path) -> Case:
    bad = cut(DRAFT, tmp / "draft-cut.sqlite", 50_000)
    return analyze(TARGET, DRAFT, bad, expect=r"draft-cut\.sqlite is a corrupt or truncated SQLite file", reads=[bad])


@case()
def negative_skip_ranges(tmp: Path) -> Case:
    return analyze(TARGET, DRAFT, "--skip-ranges", "-1", expect=r"^--skip-ranges must be ≥ 0, not -1$")


@case()
def zero_output_len(tmp: Path) -> Case:
    return analyze(TARGET, DRAFT, "--output-len", "0", expect=r"^--output-len must be ≥ 1, not 0$")


@case()
def names_do_not_match_traces(tmp: Path) -> Case:
    return analyze(TARGET, DRAFT, "--name", "only-one",
                   expect=r"^--name has 1 label\(s\) for 2 traces: give one per trace or none$")


@case()
def acceptance_outside_0_1(tmp: Path) -> Case:
    return analyze(TARGET, DRAFT, "--acceptance", "1.5", expect=r"^--acceptance: 1\.5 is outside \[0, 1\]$")


@case()
def acceptance_not_a_number(tmp: Path) -> Case:
    return analyze(TARGET, DRAFT, "--acceptance", "high", expect=r"^--acceptance: 'high' is not a number$")


@case()
def metrics_dump_missing(tmp: Path) -> Case:
    return analyze(TARGET, DRAFT, "--metrics", tmp / "gone.json", expect=r"^metrics dump not found: .*gone\.json$")


@case()
def metrics_dump_not_json(tmp: Path) -> Case:
    (tmp / "metrics.json").write_bytes(TARGET.read_bytes()[:4096])
    return analyze(TARGET, DRAFT, "--metrics", tmp / "metrics.json", expect=r"metrics\.json is not a JSON metrics dump",
                   reads=[tmp / "metrics.json"])


# -- labels, outputs, hangs, odd arguments ---------------------------------------------------------------------------
@case()
def the_same_label_twice(tmp: Path) -> Case:
    """It used to be accepted, and the target's rows got the draft's c."""
    return analyze(TARGET, DRAFT, "--name", "a", "--name", "a",
                   expect=r"^--name: 'a' given to more than one trace: each trace needs a label of its own$")


@case()
def a_label_with_a_newline(tmp: Path) -> Case:
    return analyze(TARGET, DRAFT, "--name", "t", "--name", "d\nx",
                   expect=r"^--name: 'd\\nx' is not a label \(one line of printable text\)$")


def _fallback_cache(tmp: Path, make: Callable[[Path], None]) -> Case:
    """The preferred cache cannot be written (under a file); the shared fallback in the temp dir was made by
    `make` before this user's first use — holding an 'export' of the report that is really another trace."""
    (tmp / "file").write_text("not a directory")
    shutil.copyfile(REPORT, tmp / "r.nsys-rep")
    shared = tmp / "shared-tmp"
    shared.mkdir()
    fallback = shared / f"nsys_cc-exports-{os.getuid()}"
    make(fallback)
    if fallback.is_dir():
        shutil.copyfile(DRAFT, fallback / f"{export_mod.content_hash(REPORT)}.sqlite")

    def patch(mp: pytest.MonkeyPatch) -> None:
        mp.setattr(tempfile, "tempdir", str(shared))

    return on_file(tmp / "r.nsys-rep", rf"^the export cache {re.escape(str(fallback))} is not private: .* — someone "
                                        r"else may have made it; remove it, or set NSYS_CC_CACHE to a directory of "
                                        r"your own$",
                   env={"NSYS_CC_CACHE": str(tmp / "file" / "cache")}, patch=patch)


@case(*FILE_VERBS)
def fallback_cache_made_by_another_user(tmp: Path) -> Case:
    def make(folder: Path) -> None:
        folder.mkdir(mode=0o700)
        os.chown(folder, 4242, 4242) if os.getuid() == 0 else None

    c = _fallback_cache(tmp, make)
    if os.getuid() != 0:  # only root can give a folder away: the mode makes it not private instead
        (tmp / "shared-tmp" / f"nsys_cc-exports-{os.getuid()}").chmod(0o777)
    return c


@case(*FILE_VERBS)
def fallback_cache_open_to_everyone(tmp: Path) -> Case:
    def make(folder: Path) -> None:
        folder.mkdir()
        folder.chmod(0o777)

    return _fallback_cache(tmp, make)


@case(*FILE_VERBS)
def fallback_cache_is_a_link(tmp: Path) -> Case:
    def make(folder: Path) -> None:
        (tmp / "attacker").mkdir(mode=0o700)
        folder.symlink_to(tmp / "attacker")

    return _fallback_cache(tmp, make)


def _hanging_nsys(tmp: Path) -> Path:
    fake = tmp / "nsys"
    fake.write_text(f"#!/bin/sh\n{sys.executable} -c 'import time; time.sleep(600)' hanging-export-{tmp.name} &\n"
                    "wait\n")
    fake.chmod(0o755)
    return fake


@case(*FILE_VERBS)
def nsys_export_that_hangs(tmp: Path) -> Case:
    """An export that never ends (a cold cache and a stuck nsys) used to wait forever."""
    shutil.copyfile(REPORT, tmp / "r.nsys-rep")
    c = on_file(tmp / "r.nsys-rep", r"^nsys export of .*r\.nsys-rep did not finish within 0\.3 s \(--timeout=0\.3\); "
                                    r"allow more time \(0: no limit\), or export it yourself and pass the \.sqlite$",
                env={"NSYS": str(_hanging_nsys(tmp))})
    c.runs = {verb: [*args, "--timeout", "0.3"] for verb, args in c.runs.items()}
    return c


@case()
def metrics_dump_is_a_fifo(tmp: Path) -> Case:
    """Nobody writes the pipe: reading it used to wait forever."""
    os.mkfifo(tmp / "metrics.json")
    return analyze(TARGET, DRAFT, "--metrics", tmp / "metrics.json",
                   expect=r"^the metrics dump .*metrics\.json is a FIFO \(named pipe\), not a file$")


@case()
def metrics_dump_is_a_directory(tmp: Path) -> Case:
    (tmp / "metrics.json").mkdir()
    return analyze(TARGET, DRAFT, "--metrics", tmp / "metrics.json",
                   expect=r"^the metrics dump .*metrics\.json is a directory, not a file$")


def _manifest(tmp: Path, name: str, content: bytes | str, expect: str) -> Case:
    path = tmp / name
    path.write_bytes(content.encode() if isinstance(content, str) else content)
    return Case({"analyze": [str(path)]}, expect, reads=[path, TARGET, DRAFT])


def _sets(**entry) -> str:
    return json.dumps([{"target": str(TARGET), "drafts": [str(DRAFT)], **entry}])


@case()
def manifest_with_a_number_where_a_list_belongs(tmp: Path) -> Case:
    return _manifest(tmp, "m.json", _sets(drafts=5),
                     r"m\.json: entry 1: drafts must be a list \(or one string with ';' between values\), not int 5$")


@case()
def manifest_batch_size_beyond_any_number(tmp: Path) -> Case:
    return _manifest(tmp, "m.json", _sets().replace('"drafts"', '"batch_size": 1e999, "drafts"'),
                     r"m\.json: entry 1: batch_size must be a whole number, not inf$")


@case()
def manifest_that_is_not_utf8(tmp: Path) -> Case:
    return _manifest(tmp, "m.csv", f"target,drafts\n{TARGET},{DRAFT}\n".encode() + b"\xff\xfe\xe9\n",
                     r"m\.csv is not UTF-8 text \(byte \d+\): save the manifest as UTF-8$")


@case()
def manifest_with_a_nul_byte(tmp: Path) -> Case:
    return _manifest(tmp, "m.csv", f"target,drafts\n{TARGET},{DRAFT}\0x\n",
                     r"m\.csv(: entry 1: drafts '.*\\x00x' holds a control character| is not a CSV manifest: .*NUL)")


@case()
def manifest_with_a_nul_byte_in_json(tmp: Path) -> Case:
    return _manifest(tmp, "m.json", _sets(name="a\0b"), r"entry 1: name 'a\\x00b' holds a control character")


@case()
def manifest_row_longer_than_its_header(tmp: Path) -> Case:
    return _manifest(tmp, "m.csv", f"target,drafts\n{TARGET},{DRAFT},surplus,more\n",
                     r"m\.csv: entry 1 has more fields than the header \(4\)$")


@case()
def manifest_with_a_newline_in_a_set_name(tmp: Path) -> Case:
    """It used to break the printed table."""
    return _manifest(tmp, "m.json", _sets(name="two\nlines"), r"m\.json: entry 1: name 'two\\nlines' holds a control "
                                                               r"character \(a path or a name is one line\)$")


@case()
def manifest_nested_beyond_reason(tmp: Path) -> Case:
    return _manifest(tmp, "m.json", "[" * 100_000 + "]" * 100_000, r"m\.json is not a JSON manifest: ")


@case()
def manifest_is_a_fifo(tmp: Path) -> Case:
    os.mkfifo(tmp / "sets.json")
    return Case({"analyze": [str(tmp / "sets.json")]},
                r"^the manifest .*sets\.json is a FIFO \(named pipe\), not a file$")


@case()
def negative_seed(tmp: Path) -> Case:
    return analyze(TARGET, DRAFT, "--seed", "-1", expect=r"^--seed must be a whole number ≥ 0, not -1$")


@case()
def option_value_of_the_wrong_type(tmp: Path) -> Case:
    """click's own refusals are one line too, not its usage text."""
    return analyze(TARGET, DRAFT, "--skip-ranges", "many",
                   expect=r"^Invalid value for '--skip-ranges': 'many' is not a valid integer\. \(nsys-cc analyze -h "
                          r"lists the options\)$")


CASE_RUNS = [(name, verb) for name, verbs in VERBS.items() for verb in verbs]
# A case that waits for its bound (the hanging export: 0.3 s each) runs one verb in `make check`, the others in
# `make test`: the bound is the same code for every verb.
WAITS = {"nsys_export_that_hangs"}
NSYS_FREE_RUNS = [(name, verb) if name not in WAITS or verb == "analyze" else
                  pytest.param(name, verb, marks=pytest.mark.slow)
                  for name, verb in CASE_RUNS if name not in RUNS_NSYS]
NSYS_RUNS = [(name, verb) for name, verb in CASE_RUNS if name in RUNS_NSYS]


def test_the_corpus_is_big_enough():
    assert len(BUILDERS) >= 30
    assert len(CASE_RUNS) >= 60


def invoke(args: list[str], env: dict[str, str]):
    return CliRunner().invoke(cli, args, env={"NSYS_CC_QUIET": "1", **env})


def assert_one_error_line(result, pattern: str) -> str:
    assert result.exit_code == 2, (result.exit_code, result.stdout, result.stderr)
    assert isinstance(result.exception, SystemExit)
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("nsys-cc: error: "), lines[0]
    assert re.search(pattern, lines[0].removeprefix("nsys-cc: error: ")), (pattern, lines[0])
    return lines[0]


def check_one_error_line(name: str, verb: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    c = BUILDERS[name](tmp_path)
    assert tuple(c.runs) == VERBS[name]
    if c.patch:
        c.patch(monkeypatch)
    env = {"NSYS_CC_CACHE": str(tmp_path / "cache"), **c.env}
    with unchanged(*c.reads), bounded(120):
        result = invoke([verb, *c.runs[verb]], env)
    assert_one_error_line(result, c.pattern(verb))


@pytest.mark.parametrize("name,verb", NSYS_FREE_RUNS)
def test_bad_input_gives_one_line_and_exit_2(name, verb, tmp_path, monkeypatch):
    check_one_error_line(name, verb, tmp_path, monkeypatch)


@pytest.mark.parametrize("name,verb", NSYS_RUNS)
def test_bad_report_gives_one_line_and_exit_2(name, verb, tmp_path, monkeypatch, nsys_bin):
    check_one_error_line(name, verb, tmp_path, monkeypatch)


# A real process for a few cases: what a user sees, with the progress lines that CliRunner's quiet mode hides. Every
# case also runs in this process above; the first two are in `make check`, the others (`slow`) in `make test` only.
SUBPROCESS_CASES = [
    ("truncated_export", "analyze"),
    ("random_bytes_named_sqlite", "info"),
    ("report_newer_than_nsys", "analyze"),
    ("text_where_nsys_writes_integers", "ranges"),
    ("ranges_ending_before_they_start", "analyze"),
    ("very_long_names_are_shortened", "analyze"),
    ("export_without_string_ids", "analyze"),
]
IN_CHECK = {("truncated_export", "analyze"), ("random_bytes_named_sqlite", "info")}


def _subprocess_param(name: str, verb: str):
    marks = [pytest.mark.nsys] if name in RUNS_NSYS else []
    marks += [] if (name, verb) in IN_CHECK else [pytest.mark.slow]
    return pytest.param(name, verb, marks=marks)


@pytest.mark.slow
@pytest.mark.parametrize("name,verb", [_subprocess_param(*c) for c in SUBPROCESS_CASES])
def test_real_process_prints_no_traceback(name, verb, tmp_path, request):
    if name in RUNS_NSYS:
        request.getfixturevalue("nsys_bin")  # the real nsys: skip or fail as every nsys test does
    c = BUILDERS[name](tmp_path)
    env = {**os.environ, "NSYS_CC_CACHE": str(tmp_path / "cache"), **c.env}
    env.pop("NSYS_CC_DEBUG", None)
    with unchanged(*c.reads):
        done = subprocess.run([str(NSYS_CC), verb, *c.runs[verb]], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 2, done.stderr
    assert done.stdout == ""
    assert "Traceback" not in done.stderr
    lines = [ln for ln in done.stderr.splitlines() if not ln.startswith("[nsys-cc] ")]
    assert len(lines) == 1 and lines[0].startswith("nsys-cc: error: "), done.stderr
    assert re.search(c.pattern(verb), lines[0].removeprefix("nsys-cc: error: "))
    assert len(lines[0]) < 400


# -- unusual but valid inputs: same answer as the untouched fixture ------------------------------------------------
def c_values(*args: str | Path, env: dict[str, str] | None = None, key: str = "c") -> dict[tuple, float]:
    """{(draft position, phase, metric): c} from `analyze --format json` (draft labels differ between copies); `key`:
    "c_forward" for the forwards' c alone."""
    result = invoke(["analyze", *map(str, args), "--format", "json"], env or {})
    assert result.exit_code == 0, result.stderr
    doc = json.loads(result.stdout)
    drafts = [m["name"] for m in doc["models"]][1:]
    return {(drafts.index(c["draft"]), c["phase"], c["metric"]): c[key] for c in doc["coefficients"]}


@pytest.fixture(scope="module")
def reference() -> dict[tuple, float]:
    return c_values(TARGET, DRAFT)


@pytest.mark.slow
def test_names_only_inline_give_the_same_c(tmp_path, reference):
    """nsys writes unregistered names into `text` and registered ones into StringIds; move every name inline."""
    inline = derive(TARGET, tmp_path / "inline.sqlite",
                    "UPDATE NVTX_EVENTS SET text = (SELECT value FROM StringIds WHERE id = textId), textId = NULL "
                    "WHERE textId IS NOT NULL")
    with unchanged(inline, DRAFT):
        assert c_values(inline, DRAFT) == reference


@pytest.mark.slow
def test_negative_timestamps_give_the_same_c(tmp_path, reference):
    """Events before the capture range have negative times; shift every NVTX event 30 s into the negative."""
    shifted = derive(TARGET, tmp_path / "negative.sqlite",
                     "UPDATE NVTX_EVENTS SET start = start - 30000000000, end = end - 30000000000")
    with unchanged(shifted, DRAFT):
        assert c_values(shifted, DRAFT) == reference


@pytest.mark.slow
@pytest.mark.parametrize("name", ["前向 ✓ 🚀", "y" * 10_000, "with 'quotes' and \"double\" and \\ and %s", ":lead"])
def test_unicode_and_very_long_range_names(tmp_path, reference, name):
    renamed = []
    for path in (TARGET, DRAFT):
        copy = tmp_path / path.name
        shutil.copyfile(path, copy)
        con = sqlite3.connect(copy)
        con.execute("UPDATE StringIds SET value = ? WHERE value = ?", (name, FORWARD))  # a parameter: quotes in name
        con.commit()
        con.close()
        renamed.append(copy)
    with unchanged(*renamed):
        # ":lead" is also what newer nsys prints for the default domain: the query may name it with or without ":"
        # A range of the user's own gets no logits/sampling added: its c is the forwards' c.
        assert c_values(*renamed, "--range", name) == c_values(TARGET, DRAFT, key="c_forward")


def test_odd_file_names(tmp_path, reference):
    odd = tmp_path / "dir with space ?#%20 ü"
    odd.mkdir()
    target = odd / "tar get?#%20ü.sqlite"
    shutil.copyfile(TARGET, target)
    with unchanged(target, DRAFT):
        assert c_values(target, DRAFT) == reference


def test_one_forward_never_closed_is_dropped_with_a_note(tmp_path):
    last = f"(SELECT max(rowid) FROM NVTX_EVENTS WHERE textId = {FORWARD_NAME_SQL})"
    bad = derive(TARGET, tmp_path / "lastopen.sqlite", f"UPDATE NVTX_EVENTS SET end = NULL WHERE rowid = {last}")
    with unchanged(bad, DRAFT):
        result = invoke(["analyze", str(bad), str(DRAFT), "--format", "json"], {})
    assert result.exit_code == 0, result.stderr
    doc = json.loads(result.stdout)
    assert any("dropped 1 range(s) never closed" in n for n in doc["notes"])
    target = doc["models"][0]
    assert target["phases"]["all"]["count"] == 11  # 20 forwards − 8 in warm-up − the open one


def test_invalid_utf8_in_a_name_is_read_with_replacement_characters(tmp_path, reference):
    """NVTX messages are the application's bytes: a Latin-1 "itération" is not UTF-8."""
    bad = derive(TARGET, tmp_path / "latin1.sqlite",
                 "UPDATE StringIds SET value = CAST(x'6974e9726174696f6e' AS TEXT) WHERE value = 'nsys_cc:iteration'")
    with unchanged(bad, DRAFT):
        assert c_values(bad, DRAFT) == reference
        result = invoke(["ranges", str(bad), "--format", "csv"], {})
    assert result.exit_code == 0, result.stderr
    assert "it\ufffdration" in result.stdout


def test_report_named_sqlite_is_exported(tmp_path, reference, nsys_bin):
    disguised = tmp_path / "report.sqlite"
    shutil.copyfile(REPORT, disguised)
    with unchanged(disguised, DRAFT):
        assert c_values(disguised, DRAFT, env={"NSYS_CC_CACHE": str(tmp_path / "cache")}) == reference


def test_unwritable_cache_falls_back_with_a_progress_line(tmp_path, monkeypatch, reference, nsys_bin):
    (tmp_path / "file").write_text("x")
    fallback = tmp_path / "tmp"
    fallback.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(fallback))
    report = tmp_path / "r.nsys-rep"
    shutil.copyfile(REPORT, report)
    with unchanged(report, DRAFT):
        result = CliRunner().invoke(cli, ["info", str(report)], env={"NSYS_CC_CACHE": str(tmp_path / "file" / "c")})
    assert result.exit_code == 0, result.stderr
    assert f"export cache {tmp_path / 'file' / 'c'} is not writable; using {fallback}" in result.stderr
    assert [p.name for p in fallback.rglob("*.sqlite")] == [f"{export_mod.content_hash(REPORT)}.sqlite"]


def test_empty_leftover_in_the_cache_is_exported_again(tmp_path, reference, nsys_bin):
    cache = tmp_path / "cache"
    cache.mkdir()
    entry = cache / f"{export_mod.content_hash(REPORT)}.sqlite"
    entry.write_bytes(b"")
    report = shutil.copyfile(REPORT, tmp_path / REPORT.name)  # alone: its export sits beside it in fixtures/
    assert c_values(report, DRAFT, env={"NSYS_CC_CACHE": str(cache)}) == reference
    assert entry.read_bytes()[:16] == b"SQLite format 3\x00"


# -- GPU traces (public, outside the repository) ---------------------------------------------------------------
GPU_TRACE = "Sh1mwww__llama3-inference__demo.sqlite"


@pytest.mark.slow
def test_gpu_trace_without_cuda_tables_gives_wall_time_only(tmp_path, public_dir):
    src = public_dir / GPU_TRACE
    intact = [shutil.copyfile(src, tmp_path / f"intact{i}.sqlite") for i in range(2)]
    cupti = [r[0] for r in sqlite3.connect(f"file:{src}?mode=ro", uri=True).execute(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name LIKE 'CUPTI_ACTIVITY_KIND_%'")]
    assert "CUPTI_ACTIVITY_KIND_KERNEL" in cupti
    stripped = derive(src, tmp_path / "nocuda.sqlite", *[f"DROP TABLE {t}" for t in cupti])
    with unchanged(*intact, stripped):
        full = c_values(intact[0], intact[1], "--range", "attention_simulation")
        wall_only = c_values(stripped, intact[1], "--range", "attention_simulation")
        result = invoke(["analyze", str(stripped), str(intact[1]), "--range", "attention_simulation",
                         "--format", "json"], {})
    assert {k[2] for k in full} == {"wall", "gpu_span", "kernel_sum", "gpu_busy"}
    assert wall_only == {k: v for k, v in full.items() if k[2] == "wall"}
    assert any("nocuda: no CUDA tables in the trace" in n for n in json.loads(result.stdout)["notes"])


@pytest.mark.slow
def test_ranges_that_launch_no_gpu_work_give_wall_time_only_without_warnings(tmp_path, public_dir):
    """On this trace the `prefetch_h2d_wk` ranges make no CUDA call on their own thread: nothing projects onto the
    GPU, so c is on wall time only, a note says why, and no NumPy warning reaches the user."""
    copies = [shutil.copyfile(public_dir / GPU_TRACE, tmp_path / f"copy{i}.sqlite") for i in range(2)]
    with unchanged(*copies), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = invoke(["analyze", *map(str, copies), "--range", "prefetch_h2d_wk", "--format", "json"], {})
    assert result.exit_code == 0, result.stderr
    assert [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)] == []
    doc = json.loads(result.stdout)
    assert {c["metric"] for c in doc["coefficients"]} == {"wall"}
    assert any("none of its 13 'prefetch_h2d_wk' ranges launched GPU work" in n for n in doc["notes"])


def test_wal_mode_export_is_read_without_side_files(tmp_path, reference):
    """A copy switched to WAL journaling (as a tool that opened it read-write might leave it): same c, and reading
    it creates no -wal or -shm file next to it."""
    folder = tmp_path / "wal"
    folder.mkdir()
    wal = derive(TARGET, folder / "wal.sqlite", "PRAGMA journal_mode=WAL")
    assert wal.read_bytes()[18:20] == b"\x02\x02"  # the header's read/write versions: 2 = WAL
    assert [p.name for p in folder.iterdir()] == ["wal.sqlite"]
    with unchanged(folder, DRAFT):
        assert c_values(wal, DRAFT) == reference


# -- labels made from file names, reruns, reports written over ------------------------------------------------------
def test_labels_made_from_file_names_never_meet(tmp_path):
    """Two traces called x get x#1 and x#2 — unless a third trace is called x#2: then x#1, x#3, x#2 (it used to be
    x#1, x#2, x#2, and two models' rows were mixed)."""
    paths = []
    for sub, name in (("a", "x"), ("b", "x"), ("c", "x#2")):
        (tmp_path / sub).mkdir()
        paths.append(shutil.copyfile(TARGET if sub == "a" else DRAFT, tmp_path / sub / f"{name}.sqlite"))
    with unchanged(*paths):
        result = invoke(["analyze", *map(str, paths), "--format", "json"], {})
    assert result.exit_code == 0, result.stderr
    assert [m["name"] for m in json.loads(result.stdout)["models"]] == ["x#1", "x#3", "x#2"]


# -- the report directory: inputs never written, the report replaced as a whole ---------------------------------------
@pytest.fixture(scope="module")
def small_result():
    from nsys_cc import cost_coefficient

    return cost_coefficient(TARGET, [DRAFT])


def _report_files(out: Path) -> dict[str, str]:
    """What a reader finds in the report directory (links followed; the generations in .nsys_cc_report/ left out:
    an edited file leaves its generation for its name, the same bytes there, round 4)."""
    return {k: v for k, v in sha256_tree(out).items() if not k.startswith(("inputs", "mine", ".nsys_cc_report/"))}


@pytest.mark.slow  # 4 s or more on 2 cores: in `make test`, not the edit-test loop (`make check` ≤ 60 s)
def test_a_link_in_the_report_directory_is_replaced_not_written_through(tmp_path, small_result):
    """`DIR/summary.csv` linked to the input trace: the report used to be written through the link, over the trace."""
    from nsys_cc.report import write_report

    trace = shutil.copyfile(TARGET, tmp_path / "target.sqlite")
    out = tmp_path / "out"
    out.mkdir()
    for name in ("summary.csv", "report.md", ".nsys_cc_report.json"):
        (out / name).symlink_to(trace)
    (out / "plots").mkdir()
    (out / "plots" / "coefficients.png").symlink_to(trace)
    with unchanged(trace):
        write_report(small_result, out)
    # every link left is the report's own, into its generation inside `out` (round 4: replaced as a whole)
    inside = out.resolve()
    assert all(p.resolve().is_relative_to(inside) for p in out.rglob("*") if p.is_symlink())
    assert (out / "summary.csv").read_text().startswith("model,")


@pytest.mark.slow  # 4 s or more on 2 cores: in `make test`, not the edit-test loop (`make check` ≤ 60 s)
def test_a_stale_manifest_never_removes_an_input(tmp_path, small_result):
    """`-o` = the folder of the inputs, holding an earlier report's manifest that lists `draft.sqlite` (by name, as
    the first manifests did, or even with the file's real hash): the input stays."""
    from nsys_cc.report import write_report
    from nsys_cc.report.report_files import MANIFEST

    for i, files in enumerate((["draft.sqlite", "notes.csv"], {"draft.sqlite": export_mod.content_hash(DRAFT),
                                                                 "notes.csv": "0" * 64})):
        out = tmp_path / f"inputs{i}"
        out.mkdir()
        draft = shutil.copyfile(DRAFT, out / "draft.sqlite")
        target = shutil.copyfile(TARGET, out / "target.sqlite")
        (out / "notes.csv").write_text("the user's own table\n")
        (out / MANIFEST).write_text(json.dumps({"format": "nsys_cc.report_manifest", "version": 1 + i, "files": files}))
        with unchanged(draft, target, out / "notes.csv"):
            write_report(small_result, out)
        assert (out / "report.md").is_file()


@pytest.mark.slow  # 4 s or more on 2 cores: in `make test`, not the edit-test loop (`make check` ≤ 60 s)
def test_only_files_the_report_wrote_are_removed_or_replaced(tmp_path, small_result):
    from nsys_cc import cost_coefficient
    from nsys_cc.report import write_report
    from nsys_cc.report.report_files import MANIFEST

    out = tmp_path / "out"
    write_report(cost_coefficient(TARGET, [DRAFT], acceptance=[0.7]), out)
    assert (out / "speedup.csv").is_file()
    # a file of the earlier report changed by hand: never removed, even when the new report does not write it again
    (out / "speedup.csv").write_text("edited\n")
    write_report(small_result, out)
    assert (out / "speedup.csv").read_text() == "edited\n"
    manifest = json.loads((out / MANIFEST).read_text())
    assert manifest["version"] == 3 and "speedup.csv" not in manifest["files"]
    assert not (out / "speedup.csv").is_symlink()  # edited through its link: now the user's own plain file
    assert all(export_mod.content_hash(out / name) == digest for name, digest in manifest["files"].items())
    # a file in the way that it did not write: refused, and nothing changes
    (out / "summary.csv").write_text("the user's summary\n")  # through the report's link (round 4)
    before = _report_files(out)
    with pytest.raises(InputError, match=r"summary\.csv is in the way: nsys-cc did not write it, or it changed since "
                                         r"\(move it away or choose another out_dir\); nothing was changed$"):
        write_report(small_result, out)
    assert _report_files(out) == before


@pytest.mark.slow  # 4 s or more on 2 cores: in `make test`, not the edit-test loop (`make check` ≤ 60 s)
def test_a_link_on_the_way_out_of_the_directory_is_refused(tmp_path, small_result):
    from nsys_cc.report import write_report

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    out = tmp_path / "out"
    out.mkdir()
    (out / "plots").symlink_to(elsewhere)
    with pytest.raises(InputError, match=r"a folder on its way is a link or a file"):
        write_report(small_result, out)
    assert list(elsewhere.iterdir()) == []
    from nsys_cc.files.folder import LOCK_NAME  # the -o lock (hidden, empty but for a pid) stays: a lock file is reused

    assert sorted(p.name for p in out.iterdir() if p.name != LOCK_NAME) == ["plots"]


@pytest.mark.slow  # 4 s or more on 2 cores: in `make test`, not the edit-test loop (`make check` ≤ 60 s)
def test_ctrl_c_while_writing_leaves_the_earlier_report(tmp_path, small_result, monkeypatch):
    """It used to leave `plots/` alone (the report's other files gone or half written)."""
    from matplotlib.figure import Figure

    from nsys_cc import cost_coefficient
    from nsys_cc.report import write_report

    out = tmp_path / "out"
    write_report(cost_coefficient(TARGET, [DRAFT], acceptance=[0.7]), out)
    before = sha256_tree(out)
    saved = []

    def interrupted(self, path, **kw):
        saved.append(path)
        if len(saved) == 2:
            raise KeyboardInterrupt
        Path(path).write_bytes(b"png")

    monkeypatch.setattr(Figure, "savefig", interrupted)
    with pytest.raises(KeyboardInterrupt):
        write_report(small_result, out)
    assert sha256_tree(out) == before
    assert [p.name for p in out.iterdir() if p.name.startswith(".nsys_cc_report.json.tmp")] == []


@pytest.mark.slow  # 4 s or more on 2 cores: in `make test`, not the edit-test loop (`make check` ≤ 60 s)
def test_ctrl_c_while_putting_files_in_place_waits_for_the_last_one(tmp_path, small_result, monkeypatch):
    """SIGINT in the middle of the renames: they all happen first, then KeyboardInterrupt — the new report whole."""
    import signal

    from nsys_cc import cost_coefficient
    from nsys_cc.files import atomic
    from nsys_cc.report import write_report

    out = tmp_path / "out"
    write_report(cost_coefficient(TARGET, [DRAFT], acceptance=[0.7]), out)
    real_replace, calls = os.replace, []

    def replace(src, dst):
        calls.append(dst)
        if len(calls) == 1:  # the first rename (round 4: the one that shows the new report)
            os.kill(os.getpid(), signal.SIGINT)
        real_replace(src, dst)

    monkeypatch.setattr(atomic.os, "replace", replace)
    with pytest.raises(KeyboardInterrupt):
        write_report(small_result, out)
    monkeypatch.undo()
    fresh = tmp_path / "fresh"
    write_report(small_result, fresh)
    ignore = ("report.md", "report.json", ".nsys_cc_report.json")  # they hold the time they were written

    def shown(d):  # the report's names (its generations are in .nsys_cc_report/)
        return {k: v for k, v in sha256_tree(d).items() if k not in ignore and not k.startswith(".nsys_cc_report/")}

    assert shown(out) == shown(fresh)
    assert not (out / "speedup.csv").exists()


@pytest.mark.slow  # 4 s or more on 2 cores: in `make test`, not the edit-test loop (`make check` ≤ 60 s)
def test_a_file_too_large_is_named_and_nothing_else_changes(tmp_path):
    """A real `nsys-cc analyze -o` under a file-size limit (as a full disk would fail it): one line naming the file
    that could not be written; the earlier report stays byte for byte, no staging folder is left."""
    import resource
    import signal

    out = tmp_path / "out"
    first = invoke(["analyze", str(TARGET), str(DRAFT), "--acceptance", "0.7", "-o", str(out)], {})
    assert first.exit_code == 0, first.stderr
    before = sha256_tree(out)

    def limited():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # EFBIG instead of being killed
        resource.setrlimit(resource.RLIMIT_FSIZE, (20_000, 20_000))

    env = {**os.environ, "NSYS_CC_QUIET": "1"}
    with unchanged(TARGET, DRAFT):
        done = subprocess.run([str(NSYS_CC), "analyze", str(TARGET), str(DRAFT), "-o", str(out), "--format", "csv"],
                              capture_output=True, text=True, env=env, preexec_fn=limited, timeout=300)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    assert re.fullmatch(rf"nsys-cc: error: cannot write {re.escape(str(out))}/\S+: File too large; nothing in "
                        rf"{re.escape(str(out))} was changed", lines[0]), lines[0]
    assert sha256_tree(out) == before
    assert not [p for p in out.iterdir() if ".tmp-" in p.name]


@pytest.mark.parametrize("verb", ["analyze", "analyze-many", "profile", "sweep"])
def test_output_naming_a_file_is_one_error_line(tmp_path, verb):
    """`-o` naming an existing file (here the target trace itself) got click's usage text; nothing is run."""
    target = shutil.copyfile(TARGET, tmp_path / "target.sqlite")
    manifest = tmp_path / "sets.json"
    manifest.write_text(json.dumps([{"target": str(target), "drafts": [str(DRAFT)]}]))
    args = {"analyze": ["analyze", str(target), str(DRAFT)], "analyze-many": ["analyze", str(manifest)],
            "profile": ["profile", "--target", "tiny-llama-target", "--draft", "tiny-llama-draft-s", "--device", "cpu"],
            "sweep": ["sweep", "--target", "tiny-llama-target", "--draft", "tiny-llama-draft-s", "--device", "cpu",
                      "--batch-size", "1"]}[verb]
    with unchanged(target, manifest):
        result = invoke([*args, "-o", str(target)], {})
    assert_one_error_line(result, rf"^--output {re.escape(str(target))} is an existing file: .* needs a directory")


# -- SQLite side files: committed data in a -wal, a hot -journal ----------------------------------------------------
def _with_open_writer(src: Path, folder: Path, mode: str, *sql: str) -> Path:
    """A copy of `src` in `folder`, as a writer that has not finished leaves it: in WAL mode with `sql` committed into
    the -wal only (`mode` "wal"), or in rollback mode with `sql` half done (`mode` "journal": pages already written
    into the file, the originals in a hot -journal). The files are copied while the writer still holds them."""
    work = folder.parent / f"{folder.name}-writer"
    work.mkdir()
    db = shutil.copyfile(src, work / src.name)
    con = sqlite3.connect(db, isolation_level=None)
    try:
        if mode == "wal":
            con.execute("PRAGMA journal_mode=WAL")
            con.execute("PRAGMA wal_autocheckpoint=0")
            con.execute("BEGIN")
            for statement in sql:
                con.execute(statement)
            con.execute("COMMIT")
        else:
            con.execute("PRAGMA cache_size=1")  # spill changed pages into the file before the commit
            con.execute("BEGIN")
            for statement in sql:
                con.execute(statement)
        folder.mkdir()
        for side in ("", "-wal", "-journal"):
            if Path(f"{db}{side}").exists():
                shutil.copyfile(f"{db}{side}", folder / f"{src.name}{side}")
    finally:
        con.close()
    return folder / src.name


SLOWER_FORWARDS = f"UPDATE NVTX_EVENTS SET end = start + 3 * (end - start) WHERE textId = {FORWARD_NAME_SQL}"


@pytest.mark.slow
def test_committed_data_in_a_wal_file_is_read(tmp_path, reference):
    """It used to be read without the -wal (an immutable connection ignores it): c differed without a word. The
    files are unchanged and no -shm appears beside them."""
    wal = _with_open_writer(TARGET, tmp_path / "wal", "wal", SLOWER_FORWARDS)
    assert sorted(p.name for p in wal.parent.iterdir()) == [TARGET.name, f"{TARGET.name}-wal"]
    assert wal.read_bytes()[18:20] == b"\x02\x02"
    direct = derive(TARGET, tmp_path / "direct.sqlite", SLOWER_FORWARDS)  # the oracle: the same change, in the file
    expected = c_values(direct, DRAFT)
    assert expected != reference
    with unchanged(wal.parent, DRAFT):
        assert c_values(wal, DRAFT) == expected
        info = invoke(["info", str(wal), "--format", "json"], {})
    assert info.exit_code == 0 and json.loads(info.stdout)["sqlite_path"] == str(wal)


def test_a_hot_journal_is_rolled_back_not_read_half_done(tmp_path, reference):
    """A writer stopped mid-transaction left changed pages in the file and the originals in -journal: the committed
    data is the original, so c is the reference's."""
    pad = ("CREATE TABLE pad AS WITH RECURSIVE r(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM r WHERE i < 20000) "
           "SELECT i, randomblob(200) AS b FROM r")  # enough changed pages to spill into the file
    half = _with_open_writer(TARGET, tmp_path / "hot", "journal", SLOWER_FORWARDS, pad)
    assert (half.parent / f"{TARGET.name}-journal").stat().st_size > 0
    assert half.read_bytes() != TARGET.read_bytes()  # the half-done change is in the file itself
    with unchanged(half.parent, DRAFT):
        assert c_values(half, DRAFT) == reference


def test_the_private_copy_goes_with_the_trace(tmp_path):
    from nsys_cc import open_trace

    wal = _with_open_writer(TARGET, tmp_path / "wal", "wal", SLOWER_FORWARDS)
    trace = open_trace(wal)
    copy = trace.sqlite_path
    assert copy.parent != wal.parent and copy.is_file() and (copy.parent.stat().st_mode & 0o777) == 0o700
    trace.close()
    assert not copy.parent.exists()


# -- the export cache: private, entries checked, exports bounded in time ---------------------------------------------
# a real process tree waited on past a 1.5 s timeout (idle): in `make test`; the loop keeps the hanging export's one
# line (`nsys_export_that_hangs` in the corpus above)
@pytest.mark.slow
def test_a_hanging_export_is_stopped_with_everything_it_started(tmp_path, monkeypatch):
    from conftest import processes_mentioning
    from nsys_cc.errors import ExportError

    report = shutil.copyfile(REPORT, tmp_path / "r.nsys-rep")
    monkeypatch.setenv("NSYS", str(_hanging_nsys(tmp_path)))
    monkeypatch.setenv("NSYS_CC_EXPORT_TIMEOUT", "1.5")
    with unchanged(report), pytest.raises(ExportError, match=r"did not finish within 1\.5 s \(timeout=1\.5\)"):
        export_mod.export_report(report, cache_dir=tmp_path / "cache")
    deadline = time.monotonic() + 30  # a killed process takes a moment to be gone; the loop ends when it is
    while processes_mentioning(f"hanging-export-{tmp_path.name}") and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not processes_mentioning(f"hanging-export-{tmp_path.name}")
    assert [p.name for p in (tmp_path / "cache").iterdir()] == []  # no half export left


def test_the_export_timeout_has_a_default_and_refuses_nonsense(monkeypatch):
    monkeypatch.delenv("NSYS_CC_EXPORT_TIMEOUT", raising=False)
    assert export_mod.export_timeout() == export_mod.DEFAULT_EXPORT_TIMEOUT_S == 1800
    monkeypatch.setenv("NSYS_CC_EXPORT_TIMEOUT", "0")
    assert export_mod.export_timeout() is None
    for bad in ("soon", "-1", "nan"):
        monkeypatch.setenv("NSYS_CC_EXPORT_TIMEOUT", bad)
        with pytest.raises(InputError, match="NSYS_CC_EXPORT_TIMEOUT"):
            export_mod.export_timeout()


def test_an_entry_not_made_from_the_report_is_exported_again(tmp_path, reference, nsys_bin):
    """Entries are checked against the record beside them: one put there by something else (no record), or changed
    since it was exported, is not read — the report is exported again."""
    cache = tmp_path / "cache"
    report = shutil.copyfile(REPORT, tmp_path / "r.nsys-rep")
    env = {"NSYS_CC_CACHE": str(cache)}
    with unchanged(report):
        assert c_values(report, DRAFT, env=env) == reference
        entry = cache / f"{export_mod.content_hash(REPORT)}.sqlite"
        record = json.loads(entry.with_suffix(".json").read_text())
        assert record["report_sha256"] == export_mod.content_hash(REPORT)
        assert record["sqlite_size"] == entry.stat().st_size
        for tamper in ("replace", "no record"):
            shutil.copyfile(DRAFT, entry)  # another trace under the report's name
            if tamper == "no record":
                entry.with_suffix(".json").unlink()
            assert c_values(report, DRAFT, env=env) == reference
            assert entry.read_bytes()[:16] == b"SQLite format 3\x00" and entry.stat().st_size != DRAFT.stat().st_size


# -- names from the file reach SQL quoted ----------------------------------------------------------------------------
ENDLESS = 't" , (WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT max(x) FROM c) AS z --'


@pytest.mark.parametrize("name", ['a"b', ENDLESS, "x'y; DROP TABLE NVTX_EVENTS"])
def test_a_table_name_is_one_name_whatever_it_holds(tmp_path, reference, name):
    """`SELECT count(*) FROM "{name}"` made a table named a"b a "corrupt" file, and a crafted name an endless query.
    Each is counted as the table it is, and the analysis is the untouched trace's."""
    quoted = '"' + name.replace('"', '""') + '"'
    odd = derive(TARGET, tmp_path / "odd.sqlite", f"CREATE TABLE {quoted} (v INTEGER)",
                 f"INSERT INTO {quoted} VALUES (1), (2), (3)", "CREATE TABLE t (v INTEGER)")  # what ENDLESS names
    assert raw_sql(odd, f"SELECT count(*) FROM {quoted}") == [(3,)]
    with unchanged(odd, DRAFT), bounded(60):
        info = invoke(["info", str(odd), "--format", "json"], {})
        assert info.exit_code == 0, info.stderr
        assert json.loads(info.stdout)["tables"][name] == 3 and json.loads(info.stdout)["tables"]["t"] == 0
        assert c_values(odd, DRAFT) == reference


# -- live mode: a bad setting never takes the server down ------------------------------------------------------------
@pytest.mark.vllm
@pytest.mark.parametrize("value", ["9" * 40, "1e999", "0", "-5", "many"])
def test_a_bad_live_window_gives_one_warning_and_the_default(value, monkeypatch, caplog):
    """A huge NSYS_CC_LIVE_WINDOW raised OverflowError inside vLLM's API server start (deque maxlen), and the server
    did not start. Every logger vLLM builds gets the default window; the log says so once."""
    import logging

    from nsys_cc.live import stat_logger as metrics

    monkeypatch.setenv(metrics.ENV_WINDOW, value)
    monkeypatch.setattr(metrics, "_warned", set())
    with caplog.at_level(logging.WARNING, logger="vllm.nsys_cc.live"):
        loggers = [metrics.LiveStatLogger(None, engine_index=i) for i in range(3)]
    assert [lg.window.maxlen for lg in loggers] == [metrics.DEFAULT_WINDOW] * 3
    warnings_ = [r.getMessage() for r in caplog.records if r.name == "vllm.nsys_cc.live"]
    assert len(warnings_) == 1 and metrics.ENV_WINDOW in warnings_[0] and "using 256" in warnings_[0]


# -- no traceback: file names that are not UTF-8, a reader that goes away, Ctrl-C with workers, extremes --------------
@pytest.mark.slow  # 4 s or more on 2 cores: in `make test`, not the edit-test loop (`make check` ≤ 60 s)
def test_file_names_that_are_not_utf8(tmp_path, reference):
    """A file name is bytes; one that is not UTF-8 used to end in an internal error (UnicodeEncodeError)."""
    folder = os.fsencode(tmp_path)
    target = os.fsdecode(folder + b"/t\xff\xfe.sqlite")
    shutil.copyfile(TARGET, target)
    env = {**os.environ, "NSYS_CC_QUIET": "1", "NSYS_CC_CACHE": str(tmp_path / "cache")}
    env.pop("NSYS_CC_DEBUG", None)
    with unchanged(tmp_path, DRAFT):
        ok = subprocess.run([str(NSYS_CC), "analyze", target, str(DRAFT), "--format", "json"], capture_output=True,
                            env=env, timeout=300)
        missing = subprocess.run([str(NSYS_CC), "info", os.fsdecode(folder + b"/gone\xff.sqlite")],
                                 capture_output=True, env=env, timeout=300)
    assert ok.returncode == 0, ok.stderr
    doc = json.loads(ok.stdout)
    drafts = [m["name"] for m in doc["models"]][1:]
    assert {(drafts.index(c["draft"]), c["phase"], c["metric"]): c["c"] for c in doc["coefficients"]} == reference
    assert doc["models"][0]["name"] == "t??"
    assert doc["models"][0]["path"] == target  # written as the escape \udcff, read back as the same name
    assert missing.returncode == 2 and missing.stdout == b""
    line = missing.stderr.decode("utf-8", "replace").splitlines()
    assert len(line) == 1 and line[0].startswith("nsys-cc: error: ") and "no such file" in line[0], line


# a real process each (~0.7 s of CPU): `make check` keeps a verb that reads traces and one that reads none; the
# two other verbs, the same exit through `main`, are `make test`'s
@pytest.mark.parametrize("args", [
    ["analyze", str(TARGET), str(DRAFT), "--format", "json"],
    pytest.param(["info", str(TARGET)], marks=pytest.mark.slow),
    pytest.param(["ranges", str(TARGET)], marks=pytest.mark.slow),
    ["speedup", "--c", "0.2", "--acceptance", "0.1,0.5,0.9"],
])
def test_a_reader_that_goes_away_ends_the_command_quietly(args):
    """`nsys-cc … | head -1`: the reader closes the pipe; the command stops with no message and exit status 141
    (128 + SIGPIPE), as Unix tools do — it used to print an internal error (BrokenPipeError)."""
    read, write = os.pipe()
    os.close(read)
    env = {**os.environ, "NSYS_CC_QUIET": "1"}
    env.pop("NSYS_CC_DEBUG", None)
    try:
        done = subprocess.run([str(NSYS_CC), *args], stdout=write, stderr=subprocess.PIPE, text=True, env=env,
                              timeout=300)
    finally:
        os.close(write)
    assert (done.returncode, done.stderr) == (141, "")


@pytest.mark.slow  # 4 s or more on 2 cores: in `make test`, not the edit-test loop (`make check` ≤ 60 s)
def test_ctrl_c_while_workers_analyse_many_sets_is_one_line(tmp_path):
    """SIGINT reaches every process of the terminal's group; the workers used to print a traceback each. Now the
    parent alone answers (one line, exit 130) and no worker is left."""
    from conftest import processes_mentioning

    marker = f"ctrl-c-{tmp_path.name}"
    manifest = tmp_path / f"{marker}.json"
    manifest.write_text(json.dumps([{"name": f"set-{i}", "target": str(TARGET), "drafts": [str(DRAFT)]}
                                    for i in range(60)]))
    env = {**os.environ, "NSYS_CC_PROGRESS": "1"}
    env.pop("NSYS_CC_QUIET", None)
    env.pop("NSYS_CC_DEBUG", None)
    proc = subprocess.Popen([str(NSYS_CC), "analyze", str(manifest), "--jobs", "2"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env, start_new_session=True)
    err = []
    deadline = time.monotonic() + 240  # only against a hang: the loop ends once the first set is done
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        err.append(line)
        if "[set 1/60]" in line or not line:
            break
    os.killpg(proc.pid, signal.SIGINT)  # as the terminal does: the whole group
    out, rest = proc.communicate(timeout=120)
    stderr = "".join(err) + rest
    assert proc.returncode == 130, stderr
    assert "Traceback" not in stderr and "KeyboardInterrupt" not in stderr, stderr
    assert stderr.rstrip().splitlines()[-1] == "nsys-cc: interrupted"
    deadline = time.monotonic() + 30
    while processes_mentioning(marker) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not processes_mentioning(marker)


def test_speedup_over_a_huge_range_of_gamma_needs_no_array(tmp_path):
    """`speedup --c 0 --max-gamma 1e9` built an array of 1e9 values (MemoryError, or the OOM killer); the search is
    now block by block. The answer for γ up to 1e18 is the one found over 1…65536 (the maximum lies far below)."""
    from nsys_cc.analysis.theory import speedup

    for alpha, c in ((0.8, 0.0), (0.6, 0.05), (0.99, 0.01), (1.0, 0.5), (1.0, 2.0), (0.0, 0.1), (0.9, 1e308)):
        small = speedup.best_gamma(alpha, c, max_gamma=speedup.SCAN_CHUNK)
        huge = speedup.best_gamma(alpha, c, max_gamma=10**18)
        if alpha == 1.0 and c < 1:  # S rises with every γ: the largest searched
            assert huge == (10**18, pytest.approx((10**18 + 1) / (10**18 * c + 1)))
        else:
            assert (int(huge[0]), float(huge[1])) == (int(small[0]), float(small[1])), (alpha, c)
    for args in (["--c", "0", "--max-gamma", "1e9"], ["--c", "0.01", "--max-gamma", "1000000000000"]):
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            result = invoke(["speedup", *args, "--acceptance", "0.8", "--format", "json"], {})
        assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["best_gamma"] == speedup.best_gamma(0.8, 0.01)[0]


def test_a_cost_coefficient_near_the_float_limit_gives_no_numpy_warning():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        result = invoke(["speedup", "--c", "1e308", "--acceptance", "0.8", "--gamma", "3", "--ci", "1e307,1e308",
                         "--format", "json"], {})
    assert result.exit_code == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["best_gamma"] == 1 and doc["speedup"] == 0.0 and doc["verdict"].startswith("never")


# -- numbers that are not what they claim ----------------------------------------------------------------------------
def _first_forward(column: str, value: str) -> str:
    return (f"UPDATE NVTX_EVENTS SET int64Value = NULL, {column} = {value} WHERE rowid = (SELECT min(rowid) FROM "
            f"NVTX_EVENTS WHERE textId = {FORWARD_NAME_SQL})")


@pytest.mark.slow
@pytest.mark.parametrize("column, value", [("int64Value", "9223372036854775807"),
                                           ("int64Value", "-9223372036854775808"),
                                           ("doubleValue", "9e999"), ("int64Value", "0")])
def test_a_payload_that_is_no_token_count_is_not_a_prefill(tmp_path, column, value):
    """int64 max/min or +inf in one forward's payload used to make it a prefill without a word. Now payloads are not
    used and the phases are those of the same trace without payloads (the oracle), with a note saying why."""
    odd = derive(TARGET, tmp_path / "odd.sqlite", *unconstrained("NVTX_EVENTS"), _first_forward(column, value))
    bare = derive(TARGET, tmp_path / "bare.sqlite", "UPDATE NVTX_EVENTS SET int64Value = NULL WHERE textId = "
                                                     f"{FORWARD_NAME_SQL}")
    assert raw_sql(odd, f"SELECT count(*) FROM NVTX_EVENTS WHERE textId = {FORWARD_NAME_SQL} AND {column} = {value}"
                   if value != "9e999" else f"SELECT count(*) FROM NVTX_EVENTS WHERE {column} > 1e308") == [(1,)]
    with unchanged(odd, bare, DRAFT):
        got = invoke(["analyze", str(odd), str(DRAFT), "--format", "json", "--output-len", "3"], {})
        want = invoke(["analyze", str(bare), str(DRAFT), "--format", "json", "--output-len", "3"], {})
    assert got.exit_code == 0 and want.exit_code == 0, got.stderr
    got_doc, want_doc = json.loads(got.stdout), json.loads(want.stdout)
    assert got_doc["coefficients"] == want_doc["coefficients"]
    assert {p: v["count"] for p, v in got_doc["models"][0]["phases"].items()} == \
        {p: v["count"] for p, v in want_doc["models"][0]["phases"].items()}
    rule = json.dumps(got_doc["models"][0])
    assert "1 of 20 forward payloads are not token counts" in rule


@pytest.mark.slow
def test_duplicated_rows_are_counted_once_with_a_note(tmp_path, reference):
    """Every forward row inserted twice: N used to double silently. The c is the untouched trace's; a note says."""
    doubled = derive(TARGET, tmp_path / "doubled.sqlite", *unconstrained("NVTX_EVENTS"),
                     f"INSERT INTO NVTX_EVENTS SELECT * FROM NVTX_EVENTS WHERE textId = {FORWARD_NAME_SQL}")
    assert raw_sql(doubled, f"SELECT count(*) FROM NVTX_EVENTS WHERE textId = {FORWARD_NAME_SQL}") == [(40,)]
    with unchanged(doubled, DRAFT):
        assert c_values(doubled, DRAFT) == reference
        result = invoke(["analyze", str(doubled), str(DRAFT), "--format", "json"], {})
    doc = json.loads(result.stdout)
    assert doc["models"][0]["phases"]["all"]["count"] == 12  # 20 forwards − 8 in warm-up, as the untouched trace
    assert any("dropped 20 duplicated row(s) of 'model_executable()'" in n for n in doc["notes"])


@pytest.mark.slow  # 4 s or more on 2 cores: in `make test`, not the edit-test loop (`make check` ≤ 60 s)
def test_many_drafts_give_few_readable_plots(tmp_path):
    """300 drafts used to give 305 PNGs, some 100 000 px wide. Beyond 8 drafts the plots show the target and the 8
    drafts of lowest c; report.md says so and every table keeps all of them."""
    import struct

    from nsys_cc import cost_coefficient
    from nsys_cc.report import write_report
    from nsys_cc.report.figure_files import MAX_PLOTTED_DRAFTS

    drafts = [shutil.copyfile(DRAFT if i % 3 else VLLM / "tiny-llama-draft-xs.sqlite", tmp_path / f"d{i}.sqlite")
              for i in range(12)]
    result = cost_coefficient(TARGET, drafts, acceptance=[0.7])
    # the oracle: the drafts' decode wall-clock c from the coefficients table, lowest first (ties: given order)
    coef = result.coefficients.query("metric == 'wall' and phase == 'decode'")
    by_c = sorted(range(12), key=lambda i: (float(coef.set_index("draft").at[f"d{i}", "c"]), i))
    expected = {f"d{i}" for i in by_c[:MAX_PLOTTED_DRAFTS]}
    out = tmp_path / "out"
    write_report(result, out)
    pngs = sorted(p.name for p in (out / "plots").iterdir())
    assert {p[len("speedup_"):-4] for p in pngs if p.startswith("speedup_")} == expected
    # forward times, coefficients, time breakdown, token split, break-even, DSI
    assert len(pngs) == MAX_PLOTTED_DRAFTS + 6
    for png in pngs:
        width, height = struct.unpack(">II", (out / "plots" / png).read_bytes()[16:24])
        assert width <= 5000 and height <= 2000, (png, width, height)
    assert "Note: the plots show 8 of the 12 drafts, those of lowest c" in (out / "report.md").read_text()
    assert len(set(pd_read(out / "coefficients.csv")["draft"])) == 12


def pd_read(path: Path):
    import pandas as pd

    return pd.read_csv(path)


@pytest.mark.slow
def test_gpu_ops_whose_names_the_export_lacks(tmp_path, public_dir):
    """Found by the fuzzing: without StringIds every kernel name is missing, which ended in a ValueError (a negative
    code counted by np.bincount). The ops count under one label; the c are the untouched trace's."""
    src = public_dir / GPU_TRACE
    intact = shutil.copyfile(src, tmp_path / "intact.sqlite")
    nameless = derive(src, tmp_path / "nameless.sqlite", "DROP TABLE StringIds")
    args = ["--range", "attention_simulation"]
    with unchanged(intact, nameless):
        assert c_values(nameless, intact, *args) == c_values(intact, shutil.copyfile(src, tmp_path / "b.sqlite"),
                                                             *args)
        from nsys_cc import cost_coefficient

        kernels = cost_coefficient(nameless, intact, range_name="attention_simulation").kernel_summary
    names = set(kernels.loc[kernels["model"] == "nameless", "name"].astype(str))
    assert "(name not in the export)" in names
