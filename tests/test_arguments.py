"""`nsys_cc.arguments`: one rule for a list-like argument, and the whole numbers and design cells a flag's text and a
library value give alike. Expectations written by hand."""

from __future__ import annotations

import pytest

from nsys_cc.arguments import cell_checks, many, one_path, whole_number, whole_numbers
from nsys_cc.errors import InputError


def test_one_item_is_a_list_of_one_and_a_mapping_is_refused():
    assert many("a.sqlite", "traces") == ["a.sqlite"]
    assert many(("a", "b"), "traces") == ["a", "b"]
    assert one_path(["t.sqlite"], "target") == "t.sqlite"
    with pytest.raises(InputError, match="not a mapping") as got:
        many({"a": 1}, "traces")
    assert got.value.param == "traces"


@pytest.mark.parametrize("value,expected", [
    ("1,8", [1, 8]), ("8, 1,8", [1, 8]), (8, [8]), ([8, "1"], [1, 8]), (["1,8", 4], [1, 4, 8]), (None, []),
    ((x for x in (3, 2)), [2, 3]), ("007", [7]),
])
def test_whole_numbers_from_text_or_values_sorted_once(value, expected):
    assert whole_numbers(value, "batch_sizes") == expected


@pytest.mark.parametrize("value,match", [
    ("", r"^batch_sizes is empty"), (" , ", r"^batch_sizes is empty"), ("²", r"^batch_sizes: '²' is not"),
    ("0", r"^batch_sizes: '0' is not"), ([True], r"^batch_sizes: True is not"), (1.5, r"^batch_sizes: give whole"),
    (b"1,8", r"^batch_sizes: give whole"), ({"a": 1}, r"^batch_sizes: give whole"), (10**9, r"is not a whole"),
])
def test_what_is_no_whole_number_is_one_error_naming_the_parameter(value, match):
    with pytest.raises(InputError, match=match) as got:
        whole_numbers(value, "batch_sizes")
    assert got.value.param == "batch_sizes"


def test_a_whole_number_says_what_it_should_be():
    assert whole_number(" 12 ", "check") == 12
    with pytest.raises(InputError, match=r"^check: -1 is not a γ ≥ 1$"):
        whole_number(-1, "check", "a γ ≥ 1")


@pytest.mark.parametrize("value,expected", [
    ("4:2, 16:3", [(4, 2), (16, 3)]), ([(4, 2), (16, 3)], [(4, 2), (16, 3)]), (["4:2", "16:3"], [(4, 2), (16, 3)]),
    ([[4, "2"]], [(4, 2)]), ("16:3,4:2,16:3", [(16, 3), (4, 2), (16, 3)]), (None, []),
])
def test_cells_in_the_order_given(value, expected):
    assert cell_checks(value) == expected


@pytest.mark.parametrize("value,match", [
    ("4", "not BATCH:GAMMA"), ("4:0", "not BATCH:GAMMA"), ("a:2", "not BATCH:GAMMA"), ("4:2:1", "not BATCH:GAMMA"),
    ("²:1", "not BATCH:GAMMA"), ("", "check is empty"), ([(4, 2, 1)], r"not a \(batch size, γ\) pair"),
    ([4.5], "not BATCH:GAMMA"), ([(0, 2)], "is not a batch size ≥ 1"),
])
def test_a_cell_that_is_none_is_one_error_naming_the_parameter(value, match):
    with pytest.raises(InputError, match=match) as got:
        cell_checks(value)
    assert got.value.param == "check"
