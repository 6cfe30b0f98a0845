"""Numbers and messages: a hostile trace or argument never changes a number without a word, never gets an
unclear error or a traceback (docs/reliability.md, "Numbers never change without a word").

Inputs are copies of the real fixtures (fixtures/, made by the real nsys 2022.4 and vLLM's CPU build) with hostile rows
added by plain sqlite3; the expected numbers come from plain SQL on the copy, never from the code under test. GPU rows
are added to copies of real CPU traces by `gpu_shaped` (they are not GPU traces).
"""

from __future__ import annotations

import math
import os
import shutil
import sqlite3
import statistics
import subprocess
import sys

import pytest
from gpu_shaped import FORWARD, add_gpu_work, steady

from conftest import FIXTURES, cli_in_process, raw_sql, unchanged
from nsys_cc.analysis.coefficient.measure import cost_coefficient
from nsys_cc.errors import NsysCCError

TARGET = FIXTURES / "vllm" / "tiny-llama-target.sqlite"
DRAFT = FIXTURES / "vllm" / "tiny-llama-draft-xs.sqlite"
SPEC_TARGET = FIXTURES / "spec" / "tiny-llama-target.sqlite"
SPEC_DRAFT = FIXTURES / "spec" / "tiny-llama-draft-xs.sqlite"


CLI = "import sys; from nsys_cc.cli import main; sys.exit(main())"


def cli(*args: str) -> subprocess.CompletedProcess:
    """The CLI's answer, in this process (`conftest.cli_in_process`): these cases check the line it says and its exit
    status, the same code path as a real process's; the real process itself (start-up, a traceback printed by the
    interpreter, a real file descriptor) is checked by `test_x01_output_to_a_full_device_is_one_line` here and
    `tests/reliability/test_bad_input.py::test_real_process_prints_no_traceback`."""
    return cli_in_process(*args)


def one_error_line(proc: subprocess.CompletedProcess) -> str:
    """The single `nsys-cc: error:` line of a refused command (exit 2, no traceback)."""
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    assert "Traceback" not in proc.stderr, proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    errors = [ln for ln in lines if ln.startswith("nsys-cc: error:")]
    assert len(errors) == 1, proc.stderr
    return errors[0]


def _forward_id(path) -> int:
    return raw_sql(path, "SELECT id FROM StringIds WHERE value = ?", (FORWARD,))[0][0]


# -- A18: nested same-name ranges are not forwards ------------------------------------------------------------------

def _nest_children(src, dst) -> int:
    """Copy `src` and give every forward a child range of the same name, 1 µs inside it on its thread (payload
    copied, as a re-entrant hook would push it); the number added."""
    shutil.copyfile(src, dst)
    con = sqlite3.connect(dst)
    try:
        cur = con.execute(
            "INSERT INTO NVTX_EVENTS (start, end, eventType, globalTid, textId, domainId, int64Value) "
            "SELECT start + 1000, end - 1000, eventType, globalTid, textId, domainId, int64Value FROM NVTX_EVENTS "
            "WHERE textId = ? AND end - start > 2000", (_forward_id(src),))
        con.commit()
        return cur.rowcount
    finally:
        con.close()


def test_a18_nested_same_name_ranges_count_once_with_a_note(tmp_path):
    """Without the fix every forward counts twice (decode N 9 → 18 on this fixture) and the median moves."""
    nested = tmp_path / "t.sqlite"
    added = _nest_children(TARGET, nested)
    assert added > 0
    with unchanged(nested, DRAFT):
        result = cost_coefficient(str(nested), [str(DRAFT)], names=["t", "d"])
    model = result.models[0]
    # Plain SQL: the forwards of the pristine fixture are exactly the outer ranges.
    outer = raw_sql(TARGET, "SELECT start, end FROM NVTX_EVENTS WHERE textId = ? ORDER BY start",
                    (_forward_id(TARGET),))
    assert len(model.forwards) == len(outer)
    assert sorted(zip(model.forwards["start_ns"], model.forwards["end_ns"])) == [tuple(r) for r in outer]
    kept = model.kept
    assert statistics.median(kept["end_ns"] - kept["start_ns"]) == statistics.median(
        [e - s for s, e in outer if s in set(kept["start_ns"])])
    decode = result.summary.query("model == 't' and phase == 'decode' and metric == 'wall'")["count"].item()
    assert decode == 9  # the fixture's decode forwards (README of fixtures/vllm), not 18
    (note,) = [n for n in result.notes if "nested inside another of the same name" in n]
    assert f"dropped {added} 'model_executable()' range(s)" in note
    assert not any("nested" in n for n in result.notes if n.startswith("d:"))


def test_a18_overlapping_same_name_ranges_that_do_not_nest_are_both_forwards(tmp_path):
    """Only containment drops a range: two same-name ranges that merely overlap (start/end ranges may) both count."""
    path = tmp_path / "t.sqlite"
    shutil.copyfile(TARGET, path)
    fid = _forward_id(TARGET)
    (s, e, tid), = raw_sql(TARGET, "SELECT start, end, globalTid FROM NVTX_EVENTS WHERE textId = ? "
                                   "ORDER BY start DESC LIMIT 1", (fid,))
    con = sqlite3.connect(path)
    con.execute("INSERT INTO NVTX_EVENTS (start, end, eventType, globalTid, textId) VALUES (?, ?, 60, ?, ?)",
                (s + (e - s) // 2, e + (e - s), tid, fid))
    con.commit()
    con.close()
    result = cost_coefficient(str(path), [str(DRAFT)], names=["t", "d"])
    n = raw_sql(TARGET, "SELECT count(*) FROM NVTX_EVENTS WHERE textId = ?", (fid,))[0][0]
    assert len(result.models[0].forwards) == n + 1
    assert not any("nested" in x for x in result.notes)


# -- K02: backwards or endless GPU rows are dropped, with a note ----------------------------------------------------

def _relaxed(path, table: str) -> None:
    """Recreate `table` of the SQLite file at `path` without NOT NULL (a schema that lets `end` be NULL)."""
    con = sqlite3.connect(path)
    try:
        cols = [r[1] for r in con.execute(f"PRAGMA table_info({table})")]
        con.execute(f"ALTER TABLE {table} RENAME TO old_t")
        con.execute(f"CREATE TABLE {table} ({', '.join(cols)})")
        con.execute(f"INSERT INTO {table} SELECT * FROM old_t ORDER BY rowid")
        con.execute("DROP TABLE old_t")
        con.commit()
    finally:
        con.close()


# each damage and each table in `make check` (a NULL kernel end, a backwards runtime call), the other two pairings in
# `make test` (two GPU-shaped traces built and analysed twice per case)
@pytest.mark.parametrize("table, damage", [
    ("CUPTI_ACTIVITY_KIND_KERNEL", "null"), ("CUPTI_ACTIVITY_KIND_RUNTIME", "backwards"),
    ("CUPTI_ACTIVITY_KIND_KERNEL", "sentinel"),  # an end at 2⁶³ − 1: a sentinel, not a time
    pytest.param("CUPTI_ACTIVITY_KIND_KERNEL", "backwards", marks=pytest.mark.slow),
    pytest.param("CUPTI_ACTIVITY_KIND_RUNTIME", "null", marks=pytest.mark.slow)])
def test_k02_gpu_rows_ending_before_they_start_are_dropped_with_a_note(tmp_path, table, damage):
    """Without the fix a NULL end reads as 0 (ms per range −1744.6 once) and a backwards kernel as a negative
    time: the damaged trace must give exactly the numbers of the trace with that row deleted by plain SQL."""
    shaped = add_gpu_work(SPEC_TARGET, tmp_path / "t.sqlite", steady(1.5, names=(FORWARD,)), names=(FORWARD,))
    draft = add_gpu_work(SPEC_DRAFT, tmp_path / "d.sqlite", steady(1.5, names=(FORWARD,)), names=(FORWARD,))
    damaged, pruned = tmp_path / "damaged.sqlite", tmp_path / "pruned.sqlite"
    shutil.copyfile(shaped.path, damaged)
    _relaxed(damaged, table)
    # a row in the middle of the trace (a kept forward's)
    (rowid,), = raw_sql(damaged, f"SELECT rowid FROM {table} ORDER BY start LIMIT 1 OFFSET "
                                 f"(SELECT count(*) / 2 FROM {table})")
    con = sqlite3.connect(damaged)
    con.execute(f"UPDATE {table} SET end = " + {"null": "NULL", "backwards": "start - 5000",
                                                 "sentinel": str(2**63 - 1)}[damage] + " WHERE rowid = ?", (rowid,))
    con.commit()
    con.close()
    shutil.copyfile(damaged, pruned)
    con = sqlite3.connect(pruned)
    con.execute(f"DELETE FROM {table} WHERE rowid = ?", (rowid,))
    con.commit()
    con.close()
    with unchanged(damaged):
        got = cost_coefficient(str(damaged), [str(draft.path)], names=["t", "d"])
    want = cost_coefficient(str(pruned), [str(draft.path)], names=["t", "d"])
    cols = ["model", "phase", "metric", "count", "median_ms", "mean_ms"]
    assert got.summary[cols].equals(want.summary[cols])
    assert list(got.models[0].kept["phase"]) == list(want.models[0].kept["phase"])
    for metric in ("kernel_sum_ns", "gpu_busy_ns"):
        assert (got.models[0].kept[metric].fillna(-1) >= 0).all()
    (note,) = [n for n in got.notes if "whose end is missing or before their start" in n]
    assert f"1 of {table}" in note and note.startswith("t: ")


# slow (two real processes on a GPU-shaped trace): the readers' drop and note are the quick K02 test's above
@pytest.mark.slow
def test_k02_ranges_says_which_damaged_rows_its_projection_left_out(tmp_path):
    """`nsys-cc ranges` projects through the same readers: its table is the pruned trace's, and stderr says so."""
    shaped = add_gpu_work(SPEC_TARGET, tmp_path / "t.sqlite", steady(1.5, names=(FORWARD,)), names=(FORWARD,))
    damaged, pruned = tmp_path / "damaged.sqlite", tmp_path / "pruned.sqlite"
    shutil.copyfile(shaped.path, damaged)
    _relaxed(damaged, "CUPTI_ACTIVITY_KIND_KERNEL")
    con = sqlite3.connect(damaged)
    con.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET end = NULL WHERE rowid IN (2, 5)")
    con.commit()
    con.close()
    shutil.copyfile(damaged, pruned)
    con = sqlite3.connect(pruned)
    con.execute("DELETE FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE rowid IN (2, 5)")
    con.commit()
    con.close()
    got = cli("ranges", str(damaged), "--format", "csv")
    want = cli("ranges", str(pruned), "--format", "csv")
    assert got.returncode == want.returncode == 0, got.stderr
    assert got.stdout == want.stdout
    assert ("note: dropped 2 CUDA row(s) whose end is missing or before their start, or past 2⁶² ns (2 of "
            "CUPTI_ACTIVITY_KIND_KERNEL)") in got.stderr and "dropped" not in want.stderr


def test_k02_every_cuda_reader_drops_the_damaged_rows(tmp_path):
    """`kernels()`, `memops()`, `cuda_api()` and `gpu_ops()` leave out exactly the rows plain SQL finds damaged."""
    from nsys_cc.trace import open_trace

    shaped = add_gpu_work(SPEC_TARGET, tmp_path / "t.sqlite", steady(1.5, names=(FORWARD,)), names=(FORWARD,))
    path = shaped.path
    for table in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME"):
        _relaxed(path, table)
    con = sqlite3.connect(path)
    con.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET end = NULL WHERE rowid IN (2, 5)")
    con.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET end = start - 1 WHERE rowid = 7")
    con.execute("UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET end = start - 1 WHERE rowid = 3")
    con.commit()
    con.close()
    good = "end IS NOT NULL AND end >= start"
    n_kernels = raw_sql(path, f"SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE {good}")[0][0]
    n_api = raw_sql(path, f"SELECT count(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME WHERE {good}")[0][0]
    starts = [r[0] for r in raw_sql(path, f"SELECT start FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE {good} ORDER BY rowid")]
    with open_trace(path) as trace:
        assert len(trace.kernels()) == n_kernels and list(trace.kernels()["start_ns"]) == starts
        assert (trace.kernels()["duration_ns"] >= 0).all()
        assert len(trace.cuda_api()) == n_api
        ops = trace.gpu_ops()
        assert len(ops) == n_kernels and (ops["duration_ns"] >= 0).all()
    with open_trace(path) as trace:  # the projection's own read (no frame loaded first)
        from nsys_cc.trace.cuda import api_times, dropped_rows, op_times

        assert len(op_times(trace)["start_ns"]) == n_kernels
        assert len(api_times(trace)["start_ns"]) == n_api
        assert dropped_rows(trace) == {"CUPTI_ACTIVITY_KIND_KERNEL": 3, "CUPTI_ACTIVITY_KIND_RUNTIME": 1}


# -- N14: the same file through a hard link -------------------------------------------------------------------------

@pytest.mark.parametrize("link", ["hard", "symbolic"])
def test_n14_a_link_to_the_target_given_as_draft_is_refused(tmp_path, link):
    """Without the fix a hard link (another real path, the same inode) gives c = 1.000 from one set of forwards."""
    target = tmp_path / "t.sqlite"
    shutil.copyfile(TARGET, target)
    other = tmp_path / "sub" / "d.sqlite"
    other.parent.mkdir()
    (os.link if link == "hard" else os.symlink)(target, other)
    with pytest.raises(NsysCCError, match="given twice"):
        cost_coefficient(str(target), [str(other)])
    with unchanged(tmp_path):
        line = one_error_line(cli("analyze", str(target), str(other)))
    assert "given twice" in line


def test_n14_compare_kernels_knows_a_hard_link_is_the_same_trace(tmp_path):
    from nsys_cc.analysis.kernels.compare import kernel_diff

    target = tmp_path / "t.sqlite"
    shutil.copyfile(TARGET, target)
    os.link(target, tmp_path / "h.sqlite")
    with pytest.raises(NsysCCError, match="same trace"):
        kernel_diff(str(target), str(tmp_path / "h.sqlite"))


# -- L26: the speedup model refuses a lone NaN or inf, naming the parameter ----------------------------------------

@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
@pytest.mark.parametrize("call, param", [
    (lambda v: __import__("nsys_cc.analysis.theory.speedup", fromlist=["x"]).best_gamma(alpha=v, c=0.3), "alpha"),
    (lambda v: __import__("nsys_cc.analysis.theory.speedup", fromlist=["x"]).best_gamma(alpha=0.8, c=v), "c"),
    (lambda v: __import__("nsys_cc.analysis.theory.speedup", fromlist=["x"]).walltime_factor(0.8, 3, v), "c"),
    (lambda v: __import__("nsys_cc.analysis.theory.speedup", fromlist=["x"]).walltime_factor(0.8, v, 0.3), "gamma"),
    (lambda v: __import__("nsys_cc.analysis.theory.speedup", fromlist=["x"]).expected_tokens(v, 3), "alpha"),
    (lambda v: __import__("nsys_cc.analysis.theory.speedup", fromlist=["x"]).operations_factor(0.8, 3, v), "c_hat"),
    (lambda v: __import__("nsys_cc.analysis.speculative.forecast", fromlist=["x"]).expected_tokens(v, 3), "alpha"),
    (lambda v: __import__("nsys_cc.analysis.speculative.forecast", fromlist=["x"]).StepCostModel(
        10.0, 1.0, 5.0, 0.5, 1.0, 0.1).best_gamma(v), "alpha"),
])
def test_l26_a_lone_nan_or_inf_is_refused_naming_the_parameter(call, param, bad):
    """Without the fix best_gamma(alpha=nan) returned (0, nan) and walltime_factor(c=inf) 0.0, while α = 2 raised."""
    with pytest.raises(NsysCCError) as err:
        call(bad)
    assert err.value.param == param


def test_l26_an_array_may_still_mark_a_value_not_measured_with_nan():
    """The documented broadcast (a draft without a measurement is NaN) is kept: only a lone NaN is refused."""
    from nsys_cc.analysis.theory.speedup import best_gamma

    g, s = best_gamma([0.8, math.nan], 0.1)
    assert g[1] == 0 and math.isnan(s[1])
    # hand arithmetic: S(0.8, γ, 0.1) = (1 − 0.8^(γ+1)) / (0.2 (0.1γ + 1)): 2.4595 at γ = 5, 2.4696 at 6, 2.4477 at 7
    assert g[0] == 6 and s[0] == pytest.approx((1 - 0.8**7) / 0.2 / 1.6)


# -- A05: an impossible range is called what it is -----------------------------------------------------------------

def test_a05_a_range_spanning_the_int64_extremes_is_not_called_backwards(tmp_path):
    """Without the fix end − start overflowed int64 and the line said "start -9223372036854775808 > end
    9223372036854775807", which is false: the range runs forwards, its timestamps are impossible."""
    path = tmp_path / "t.sqlite"
    shutil.copyfile(TARGET, path)
    con = sqlite3.connect(path)
    con.execute("INSERT INTO NVTX_EVENTS (start, end, eventType, globalTid, textId) "
                "SELECT ?, ?, 59, globalTid, textId FROM NVTX_EVENTS WHERE textId = ? LIMIT 1",
                (-(2**63), 2**63 - 1, _forward_id(TARGET)))
    con.commit()
    con.close()
    with unchanged(path):
        line = one_error_line(cli("analyze", str(path), str(DRAFT)))
    assert "impossible timestamps" in line and ">" not in line.split("damaged")[0].split("NVTX_EVENTS row")[1]
    assert str(-(2**63)) in line and str(2**63 - 1) in line


def test_a05_a_range_that_truly_ends_before_it_starts_is_still_called_so(tmp_path):
    path = tmp_path / "t.sqlite"
    shutil.copyfile(TARGET, path)
    con = sqlite3.connect(path)
    con.execute("UPDATE NVTX_EVENTS SET end = start - 7 WHERE rowid = (SELECT min(rowid) FROM NVTX_EVENTS "
                "WHERE textId = ?)", (_forward_id(TARGET),))
    con.commit()
    con.close()
    line = one_error_line(cli("analyze", str(path), str(DRAFT)))
    assert "end before they start" in line


# -- N04, N10: a file name is said on one line, whatever it holds or however long ---------------------------------

# each name escaped by the same code: the newline in `make check`, the others in `make test`
@pytest.mark.parametrize("name", ["a\nb.sqlite", *(pytest.param(n, marks=pytest.mark.slow) for n in (
    "tab\there.sqlite", "esc\x1b[31mred.sqlite", "cr\rx.sqlite"))])
def test_n04_a_control_character_in_a_file_name_stays_one_escaped_line(tmp_path, name):
    """Without the fix `nope\\nx.sqlite: no such file` printed as two lines, the second without `nsys-cc: error:`."""
    proc = cli("analyze", str(tmp_path / name), str(DRAFT))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    (line,) = proc.stderr.splitlines()
    assert line.startswith("nsys-cc: error:") and repr(name)[1:-1] in line and "no such file" in line


def test_n04_an_existing_trace_with_a_newline_in_its_name_is_analysed(tmp_path):
    path = tmp_path / "a\nb.sqlite"
    shutil.copyfile(TARGET, path)
    with unchanged(tmp_path):
        proc = cli("analyze", str(path), str(DRAFT))
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize("where", ["name", "path", "out"])
def test_n10_a_name_or_path_too_long_is_one_line(tmp_path, where):
    """Without the fix os.stat raised ENAMETOOLONG through the CLI: a traceback, exit 1."""
    long_name = str(tmp_path / ("x" * 300 + ".sqlite"))
    long_path = str(tmp_path / ("d/" * 2100 + "a.sqlite"))
    args = {"name": [long_name, str(DRAFT)], "path": [long_path, str(DRAFT)],
            "out": [str(TARGET), str(DRAFT), "-o", str(tmp_path / ("o" * 300))]}[where]
    with unchanged(tmp_path, TARGET, DRAFT):
        line = one_error_line(cli("analyze", *args))
    assert "file name too long" in line and len(line) < 400


@pytest.mark.slow
def test_x01_output_to_a_full_device_is_one_line(tmp_path):
    """`analyze … > /dev/full`: ENOSPC is one line and exit 2 (it held already; a test keeps it)."""
    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full on this system")
    with open("/dev/full", "w") as full:
        proc = subprocess.run([sys.executable, "-c", CLI, "analyze", str(TARGET), str(DRAFT)], stdout=full,
                              stderr=subprocess.PIPE, text=True, timeout=300)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    (line,) = proc.stderr.splitlines()
    assert line == "nsys-cc: error: cannot write the output: No space left on device"


# -- A01: zero-length forwards ------------------------------------------------------------------------------------

@pytest.mark.slow
def test_a01_zero_length_target_forwards_answer_without_a_traceback(tmp_path):
    """Without the fix the diagnosis divided by the target's median wall time (0): ZeroDivisionError, exit 1."""
    path = tmp_path / "z.sqlite"
    shutil.copyfile(TARGET, path)
    con = sqlite3.connect(path)
    con.execute("UPDATE NVTX_EVENTS SET end = start WHERE textId = ?", (_forward_id(TARGET),))
    con.commit()
    con.close()
    with unchanged(path, DRAFT):
        result = cost_coefficient(str(path), [str(DRAFT)], names=["z", "d"])
        proc = cli("analyze", str(path), str(DRAFT))
    assert proc.returncode == 0 and "internal error" not in proc.stderr, proc.stderr
    kept = result.models[0].kept
    assert ((kept["end_ns"] - kept["start_ns"]) == 0).all()
    d = result.diagnosis
    assert len(d) and d["c_wall"].isna().all()  # no ratio to a target that took no time, said as NaN


def test_a18_ranges_never_closed_are_not_taken_for_nested_ones(tmp_path):
    """Ranges left open at the end of the capture all end at the last NVTX timestamp, so each later one would look
    nested in the first: they are dropped as never closed (their own note), never as nested."""
    path = tmp_path / "t.sqlite"
    shutil.copyfile(TARGET, path)
    fid = _forward_id(TARGET)
    (last,), = raw_sql(TARGET, "SELECT max(rowid) FROM NVTX_EVENTS WHERE textId = ?", (fid,))
    con = sqlite3.connect(path)
    # the last forward and a child of it both left open: the parent is the outermost, the child is nested only if
    # an open end counted as a real one
    con.execute("INSERT INTO NVTX_EVENTS (start, end, eventType, globalTid, textId) SELECT start + 10, NULL, 59, "
                "globalTid, textId FROM NVTX_EVENTS WHERE rowid = ?", (last,))
    con.execute("UPDATE NVTX_EVENTS SET end = NULL WHERE rowid = ?", (last,))
    con.commit()
    con.close()
    result = cost_coefficient(str(path), [str(DRAFT)], names=["t", "d"])
    (note,) = [n for n in result.notes if n.startswith("t:") and "never closed" in n]
    assert "dropped 2 range(s) never closed" in note and "nested" not in note


@pytest.mark.slow
def test_zero_length_draft_forwards_give_no_c_not_zero(tmp_path):
    """Round 4, still failing: every draft forward zero-length gave c_forward 0.0, and c (its token's) 0.189 —
    the logits and sampling alone, over the target's whole token — where the trace as recorded gives 0.653, without
    a word. A metric with no time is no c: NaN, said."""
    path = tmp_path / "zd.sqlite"
    shutil.copyfile(DRAFT, path)
    con = sqlite3.connect(path)
    con.execute("UPDATE NVTX_EVENTS SET end = start WHERE textId = ?", (_forward_id(DRAFT),))
    con.commit()
    con.close()
    with unchanged(path, TARGET):
        result = cost_coefficient(str(TARGET), [str(path)], names=["t", "zd"])
    kept = result.models[1].kept
    assert ((kept["end_ns"] - kept["start_ns"]) == 0).all()  # the oracle: the trace's own forwards take no time
    co = result.coefficients
    assert len(co) and co["c"].isna().all() and co["c_forward"].isna().all(), co[["phase", "c", "c_forward"]]
    assert any(n.startswith("zd: every kept forward takes 0 ns of wall") and "NaN" in n for n in result.notes)
    assert result.diagnosis["c_wall"].isna().all()
    # the target alike (A01): no c to a target that took no time
    both = cost_coefficient(str(path), [str(DRAFT)], names=["zt", "d"])
    assert both.coefficients["c"].isna().all() and both.coefficients["c_forward"].isna().all()


@pytest.mark.slow
def test_a_correlation_id_shared_by_two_calls_moves_no_kernel(tmp_path):
    """Round 4, still failing: two launch calls of different forwards given one correlationId (with their kernels):
    every kernel of both went to the latest call, so one forward lost its kernels and another gained them. Each
    kernel now goes to the latest of them that started before it (a launch precedes its work): every forward keeps
    its own kernels, as the rows written say, and the damage is said."""
    from gpu_shaped import FORWARD, add_gpu_work, steady

    shaped = add_gpu_work(FIXTURES / "spec" / "tiny-llama-target.sqlite", tmp_path / "t.sqlite",
                          steady(1.5, names=(FORWARD,)), names=(FORWARD,))
    draft = add_gpu_work(FIXTURES / "spec" / "tiny-llama-draft-xs.sqlite", tmp_path / "d.sqlite",
                         steady(1.5, names=(FORWARD,)), names=(FORWARD,))
    damaged = shutil.copyfile(shaped.path, tmp_path / "damaged.sqlite")
    calls = raw_sql(damaged, "SELECT rowid, correlationId FROM CUPTI_ACTIVITY_KIND_RUNTIME ORDER BY start")
    (_, a_id), (b_row, b_id) = calls[len(calls) // 3], calls[2 * len(calls) // 3]
    con = sqlite3.connect(damaged)
    con.execute("UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET correlationId = ? WHERE rowid = ?", (a_id, b_row))
    con.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET correlationId = ? WHERE correlationId = ?", (a_id, b_id))
    con.commit()
    con.close()
    with unchanged(damaged):
        got = cost_coefficient(str(damaged), [str(draft.path)], names=["t", "d"])
    want = {w.range.start: w.kernels for w in shaped.of(FORWARD)}  # the rows written, counted in plain Python
    forwards = got.models[0].forwards
    have = dict(zip(forwards["start_ns"].astype(int), forwards["kernels"].astype(int)))
    assert have == {s: want[s] for s in have}, "a forward's kernel count changed"
    assert any("2 CUDA API calls share their process's correlationId" in n for n in got.notes)
