"""Views of results, bound from above: the analysis returns plain data and the report package lends it its renderings.

`nsys_cc.analysis` imports nothing above it, yet a notebook user expects `res.render()`, `res.figures()`,
`res.write_report(dir)`, `res.to_dict()` and the HTML view (`_repr_html_`) on a result. The result's methods look
their function up here by name; `nsys_cc.report` binds its functions when it is imported, which the package's
facade (`nsys_cc/__init__.py`) does on every import of nsys_cc, at the cost of nothing (the report's modules load
when a view is first used). This module imports nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

_BOUND: dict[str, Callable[..., Any]] = {}


def bind(name: str, function: Callable[..., Any]) -> None:
    """Make `function` the view `name` (`render`, `render_html`, `to_dict`, `figures`, `write_report`)."""
    _BOUND[name] = function


def view(name: str) -> Callable[..., Any]:
    """The function bound as view `name`; a RuntimeError (a broken installation, not a user's input) when none is."""
    try:
        return _BOUND[name]
    except KeyError:
        raise RuntimeError(f"no {name!r} view is bound: nsys_cc.report binds the views when nsys_cc is imported "
                           "(is nsys_cc installed completely?)") from None
