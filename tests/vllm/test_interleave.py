"""How the interleaving driver ends (`nsys_cc.vllm.interleave.leave`): through C's `exit`, skipping vLLM's shutdown,
only when every engine is in its process and it has no child process. That the trace keeps every range after such an
end is checked on real runs by tests/e2e/test_profile_interleaved.py (exact forward counts per engine in every run)."""

from __future__ import annotations

import subprocess
import sys

from nsys_cc.vllm.interleave import _has_children, fast_exit_allowed

IN_PROCESS = {"VLLM_ENABLE_V1_MULTIPROCESSING": "0"}


def test_the_fast_end_needs_in_process_engines_and_no_child():
    assert fast_exit_allowed(IN_PROCESS, lambda: False)
    assert not fast_exit_allowed(IN_PROCESS, lambda: True)  # an engine-core or worker process runs
    assert not fast_exit_allowed({}, lambda: False)  # vLLM's default: engine cores are processes
    assert not fast_exit_allowed({"VLLM_ENABLE_V1_MULTIPROCESSING": "1"}, lambda: False)


def test_a_child_process_is_seen_while_it_runs():
    # In a fresh process: a test worker may hold children (or unreaped ones) that earlier tests left, so "no child
    # before and after" is only true of a process that started none.
    code = ("import subprocess, sys; from nsys_cc.vllm.interleave import _has_children; before = _has_children(); "
            "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(30)']); "
            "during = _has_children(); child.kill(); child.wait(); print(before, during, _has_children())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.split() == ["False", "True", "False"], out.stderr


def test_without_procs_children_lists_a_child_is_assumed(tmp_path):
    assert _has_children(tmp_path / "missing")  # no /proc: cannot tell
    assert _has_children(tmp_path)  # a task folder without children lists (a kernel without them)
    (tmp_path / "1").mkdir()
    (tmp_path / "1" / "children").write_text("")
    assert not _has_children(tmp_path)
    (tmp_path / "1" / "children").write_text("4242 ")
    assert _has_children(tmp_path)


def test_a_program_that_leaves_fast_keeps_its_exit_status_and_output(tmp_path):
    out = tmp_path / "written.txt"
    code = ("import sys; from nsys_cc.vllm.interleave import leave; "
            f"open({str(out)!r}, 'w').write('done'); print('unflushed', end=''); sys.stderr.write('err'); leave(); "
            "sys.exit(3)")  # only reached when leave() returned
    fast = subprocess.run([sys.executable, "-c", code], env={**IN_PROCESS, "PATH": "/usr/bin:/bin"},
                          capture_output=True, text=True, timeout=120)
    assert (fast.returncode, fast.stdout, fast.stderr) == (0, "unflushed", "err")
    assert out.read_text() == "done"
    slow = subprocess.run([sys.executable, "-c", code], env={"PATH": "/usr/bin:/bin"}, capture_output=True,
                          text=True, timeout=120)
    assert slow.returncode == 3  # vLLM's shutdown (Python's own end) where processes may need it


def test_a_shared_engine_serves_every_batch_size_and_prompt_length():
    from nsys_cc.vllm.interleave import shared_engines

    def group(label, *options):
        return label, ["--model", "/m/t", "--num-iters", "2", *options]

    spec = ("--speculative-config", '{"num_speculative_tokens":2}')
    groups = [group("bs1-in32.t", "--batch-size", "1", "--input-len", "32"),
              group("bs1-in32.t.spec-g2", "--batch-size", "1", "--input-len", "32", *spec),
              group("bs4-in64.t", "--batch-size=4", "--input-len=64"),
              group("bs4-in64.t.spec-g2", "--input-len", "64", "--batch-size", "4", *spec),
              group("bs1-in32.t", "--batch-size", "1", "--input-len", "32")]
    # by hand: the plain target built by group 0 and shared by group 2 (another cell); γ = 2 by 1, shared by 3; group
    # 4 is a second instance at group 0's cell: an engine of its own
    assert shared_engines(groups) == [0, 1, 0, 1, 4]
    other = [group("a", "--batch-size", "1", "--input-len", "32"),
             group("b", "--batch-size", "1", "--input-len", "32", "--max-model-len", "512")]
    assert shared_engines(other) == [0, 1]  # other options: never shared
