"""`nsys_cc.report.render_formats.format_of`: a format named in any case or by its short name is one of the four;
anything else is an error naming them, never a silent fall back to the text table."""

from __future__ import annotations

import pytest

from nsys_cc.errors import InputError
from nsys_cc.report.render_formats import format_of


@pytest.mark.parametrize("given, fmt", [("table", "table"), (" JSON ", "json"), ("md", "markdown"), ("MD", "markdown"),
                                        ("text", "table"), ("txt", "table"), ("Csv", "csv")])
def test_a_format_in_any_case_or_short_name(given, fmt):
    assert format_of(given) == fmt


@pytest.mark.parametrize("given", ["xml", "", None, 3, "tables"])
def test_anything_else_is_an_error_naming_the_formats(given):
    with pytest.raises(InputError, match=r"^fmt must be one of table, markdown, csv, json \(or md\), not ") as err:
        format_of(given)
    assert err.value.param == "fmt"


def test_a_verb_with_fewer_formats_refuses_the_others():
    assert format_of("json", ("table", "json")) == "json"
    with pytest.raises(InputError, match="fmt must be one of table, json"):
        format_of("csv", ("table", "json"))
