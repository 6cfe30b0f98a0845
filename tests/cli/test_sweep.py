"""`nsys-cc sweep` (`nsys_cc.cli.sweep`) as a user meets it on the command line: `--help`, a bad or missing flag one
error line (exit 2), and `--dry-run` — one cell per point of the grid, each cell's runs printed, nothing written,
no vLLM needed. (The sweep itself: tests/sweep/.)"""

from __future__ import annotations

import pytest

from conftest import cli_in_process, one_error_line

PAIR = ("--target", "tiny-llama-target", "--draft", "tiny-llama-draft-s", "--device", "cpu")


def test_help_lists_the_grids_axes():
    done = cli_in_process("sweep", "--help")
    assert done.returncode == 0 and done.stdout.startswith("Usage: nsys-cc sweep [OPTIONS]")
    for flag in ("--batch-size N[,N…]", "--input-len N[,N…]", "--speculate G[,G…]", "--target-tp N[,N…]",
                 "--dry-run", "--scheduler"):
        assert flag in done.stdout, flag


@pytest.mark.parametrize("args, says", [
    (("--draft", "tiny-llama-draft-s"), "Missing option '--target'"),
    ((*PAIR, "--batch-size", "0"), "--batch-size must be whole numbers ≥ 1, not '0'"),
    ((*PAIR, "--input-len", "x"), "--input-len must be whole numbers ≥ 1, not 'x'"),
    ((*PAIR, "--bogus"), "No such option '--bogus'"),
])
def test_a_missing_or_bad_flag_is_one_line(args, says):
    one_error_line(cli_in_process("sweep", *args, "--dry-run"), says)


def test_a_dry_run_names_one_cell_per_point_of_the_grid_and_writes_nothing(tmp_path):
    out = tmp_path / "sweep"
    done = cli_in_process("sweep", *PAIR, "--dry-run", "-o", str(out), "--batch-size", "1,8", "--input-len",
                          "128,512")
    assert done.returncode == 0, done.stderr
    cells = [ln for ln in done.stdout.splitlines() if ln.startswith("## cell ")]
    assert cells == [f"## cell bs{b}-in{n}: {out}/bs{b}-in{n}" for b in (1, 8) for n in (128, 512)]
    assert f"-o {out}/bs8-in512/run-1/trace " in done.stdout
    assert not out.exists()
