"""Kernel names as the tables print them (`kernel_text.shorten`): short enough for a terminal, and names that differ
print differently (two FlashAttention kernels cut at 70 characters printed alike)."""

from __future__ import annotations

import pandas as pd

from nsys_cc.report.kernel_text import KERNEL_CHARS, diff_display, kernel_display, shorten

FA = ("void flash::flash_fwd_splitkv_kernel<Flash_fwd_kernel_traits<128, 64, 128, 4, false, false, "
      "cutlass::bfloat16_t, Flash_kernel_traits<128, 64, 128, 4, cutlass::bfloat16_t> >, false, true, false, false, "
      "true, true, false, false>(flash::Flash_fwd_params)")
# Siblings that differ in one template argument: near the end, in the middle, at the start of the arguments.
SIBLINGS = [FA, FA.replace("true, true, false, false>", "true, false, false, false>"),
            FA.replace("<128, 64, 128, 4, false", "<64, 64, 128, 4, false", 1),
            FA.replace("cutlass::bfloat16_t, Flash", "cutlass::half_t, Flash", 1)]


def test_names_that_differ_print_differently_and_fit():
    assert len({s[:KERNEL_CHARS - 1] for s in SIBLINGS}) == 2  # what the old cut printed: three of four alike
    out = shorten(SIBLINGS)
    assert len(set(out)) == len(SIBLINGS)
    assert all(len(s) <= KERNEL_CHARS for s in out)
    # the same name twice prints the same; a short name is left whole
    again = shorten([SIBLINGS[0], "short_kernel", SIBLINGS[0], SIBLINGS[1]])
    assert again[0] == again[2] != again[3] and again[1] == "short_kernel"


def test_a_lone_long_name_keeps_its_head_and_tail():
    (out,) = shorten([FA])
    assert len(out) == KERNEL_CHARS and out.startswith("void flash::flash_fwd_splitkv_kernel")
    assert out.endswith("(flash::Flash_fwd_params)") and out.count("…") == 1


def test_the_tables_use_it():
    table = pd.DataFrame({"kernel": SIBLINGS, "kind": "kernel", "category": "attention", "count": 1,
                          "count_per_range": 1.0, "ms_per_range": 0.1, "mean_ms": 0.1, "share": 0.25})
    assert kernel_display(table)["Kernel"].nunique() == len(SIBLINGS)
    diff = pd.DataFrame({"kernel": SIBLINGS, "category": "attention", "a_count_per_range": 1.0, "a_ms_per_range": 0.1,
                         "b_count_per_range": 1.0, "b_ms_per_range": 0.2, "delta_ms_per_range": 0.1})
    assert diff_display(diff)["Kernel"].nunique() == len(SIBLINGS)
