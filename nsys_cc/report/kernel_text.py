"""Kernel tables as text (`nsys_cc.kernels`, `nsys_cc.kernel_diff`, a result's `kernel_diff`): what `nsys-cc kernels`
prints, and the report's "where the draft saves time" section.

`--format json` is a list of rows (the table's columns: `kernel_tables.KERNEL_COLUMNS`, or `kernel_tables.DIFF_COLUMNS`
for two sets of ranges; NaN is null), `csv` the same rows; `table` and `markdown` put a head line on what was compared
above the rows (kernel names past KERNEL_CHARS shortened in the middle, so that names that differ stay different:
`shorten`; times in ms per range) and the notes under them. The notes of
json and csv go to stderr (`notes`), so that stdout stays the rows alone.
"""

from __future__ import annotations

import io
import json
import math
import os

import pandas as pd

from .render_formats import format_of
from .table_text import markdown_table, text_table

FORMATS = ("table", "json", "csv", "markdown")
# Longest kernel name printed in a table (C++ template names run to kilobytes); json and csv keep every character.
KERNEL_CHARS = 70
# Rows per draft in the report's section (the CSV and JSON have them all).
REPORT_ROWS = 10


def _cut(name: str, width: int) -> str:
    """`name` in at most `width` characters: its head and its tail around one ellipsis (a kernel's template arguments
    and parameter list sit in the middle; its name, and often what tells it from its siblings, at either end)."""
    if len(name) <= width:
        return name
    tail = (width - 1) * 2 // 5
    return name[: width - 1 - tail] + "…" + name[len(name) - tail:]


def _window(name: str, at: int, width: int) -> str:
    """`name` in at most `width` characters showing position `at` (where it parts from a sibling): its head, the
    stretch around `at`, its tail, between ellipses."""
    if len(name) <= width:
        return name
    head, tail = width // 4, width // 6
    middle = width - head - tail - 2
    start = max(head, min(at - middle // 3, len(name) - tail - middle))
    if start <= head:  # the difference lies in the head: one ellipsis after the window
        return name[: width - 1 - tail] + "…" + name[len(name) - tail:]
    if start + middle >= len(name) - tail:  # it lies in the tail
        return name[:head] + "…" + name[len(name) - (width - head - 1):]
    return name[:head] + "…" + name[start:start + middle] + "…" + name[len(name) - tail:]


def shorten(names, width: int = KERNEL_CHARS) -> list[str]:
    """Each name in at most `width` characters (`_cut`), names that would print alike shown where they part (issue
    49: two FlashAttention kernels that differ in one template argument printed the same): different names stay
    different (a name's number among its look-alikes is added where even that is not enough)."""
    names = [str(n) for n in names]
    out = [_cut(n, width) for n in names]
    groups: dict[str, set[str]] = {}
    for n, s in zip(names, out):
        groups.setdefault(s, set()).add(n)
    for i, (n, s) in enumerate(zip(names, out)):
        alike = groups[s] - {n}
        if alike:
            at = max(len(os.path.commonprefix([n, o])) for o in alike)
            out[i] = _window(n, at, width)
    seen: dict[str, list[str]] = {}
    for n, s in zip(names, out):
        if n not in seen.setdefault(s, []):
            seen[s].append(n)
    return [s if len(seen[s]) == 1 else f"{_cut(n, width - 4)} #{seen[s].index(n) + 1}" for n, s in zip(names, out)]


def _ms(x: float) -> str:
    return "–" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.4f}"


def _signed(x: float) -> str:
    return "–" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:+.4f}"


def _calls(x: float) -> str:
    return f"{x:.3g}"


def _pct(x: float) -> str:
    return "–" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.1%}"


def kernel_display(table: pd.DataFrame) -> pd.DataFrame:
    """One trace's kernel table (`nsys_cc.kernels`) for people."""
    short = shorten(table["kernel"]) if len(table) else []
    return pd.DataFrame([{
        "Kernel": short[i], "Kind": r.kind, "Category": r.category, "Count": r.count,
        "Calls/range": _calls(r.count_per_range), "ms/range": _ms(r.ms_per_range), "Mean (ms)": _ms(r.mean_ms),
        "Share": _pct(r.share),
    } for i, r in enumerate(table.itertuples(index=False))],
        columns=["Kernel", "Kind", "Category", "Count", "Calls/range", "ms/range", "Mean (ms)", "Share"])


def diff_display(table: pd.DataFrame, a: str = "A", b: str = "B") -> pd.DataFrame:
    """Two sets of ranges compared (`nsys_cc.kernel_diff`) for people; `a`, `b`: how the columns name the sides."""
    columns = ["Kernel", "Category", f"{a} calls/range", f"{a} ms/range", f"{b} calls/range", f"{b} ms/range",
               f"Δ ms/range ({b} − {a})"]
    short = shorten(table["kernel"]) if len(table) else []
    return pd.DataFrame([dict(zip(columns, (
        short[i], r.category, _calls(r.a_count_per_range), _ms(r.a_ms_per_range), _calls(r.b_count_per_range),
        _ms(r.b_ms_per_range), _signed(r.delta_ms_per_range))))
        for i, r in enumerate(table.itertuples(index=False))], columns=columns)


def _plain(v):
    if hasattr(v, "item"):  # NumPy scalars
        v = v.item()
    return None if isinstance(v, float) and not math.isfinite(v) else v


def records(table: pd.DataFrame) -> list[dict]:
    """The rows as JSON objects (every column; NaN as None; numbers at full precision)."""
    return [{c: _plain(v) for c, v in zip(table.columns, row)} for row in table.itertuples(index=False)]


def notes(table: pd.DataFrame) -> list[str]:
    """The notes of a kernel table (its `.attrs`)."""
    return list(table.attrs.get("notes", ()))


def _head(table: pd.DataFrame) -> str:
    at = table.attrs
    if "a" in at:
        phase_b = at.get("phase_b", at["phase"])
        if phase_b == at["phase"]:
            return (f"A = {at['a']}: {at['a_range_name']!r} in {at['a_trace']} ({at['a_ranges']} kept ranges); "
                    f"B = {at['b']}: {at['b_range_name']!r} in {at['b_trace']} ({at['b_ranges']} kept ranges); phase "
                    f"{at['phase']}; per range = per kept range of that phase; Δ = B − A (< 0: B takes less time)")
        return (f"A = {at['a']}: {at['a_range_name']!r} in {at['a_trace']} ({at['a_ranges']} kept {at['phase']} "
                f"ranges); B = {at['b']}: {at['b_range_name']!r} in {at['b_trace']} ({at['b_ranges']} kept {phase_b} "
                f"ranges); per range = per kept range of each side's phase; Δ = B − A (< 0: B takes less time)")
    if "trace" in at:
        return (f"{at['trace']}: GPU ops launched inside {at['range_name']!r} ({at['ranges']} kept ranges, phase "
                f"{at['phase']}); per range = per kept range of that phase")
    return ""


def render(table: pd.DataFrame, fmt: str = "table") -> str:
    """A kernel table (`kernels`) or a comparison (`kernel_diff`) as `fmt` (FORMATS, any case; md for markdown),
    ending with a newline."""
    fmt = format_of(fmt, FORMATS)
    diff = "delta_ms_per_range" in table.columns
    if fmt == "json":
        return json.dumps(records(table), indent=2, ensure_ascii=False) + "\n"
    if fmt == "csv":
        buf = io.StringIO()
        table.to_csv(buf, index=False)
        return buf.getvalue()
    shown = diff_display(table) if diff else kernel_display(table)
    numbers = {c for c in shown.columns if c not in ("Kernel", "Kind", "Category")}
    if fmt == "markdown":
        body = markdown_table(shown) if len(shown) else "_no GPU operation in these ranges_"
        lines = [_head(table), "", body, ""] + [f"- note: {n}" for n in notes(table)]
    else:
        body = text_table(shown, right=numbers) if len(shown) else "no GPU operation in these ranges"
        lines = [_head(table), "", body, ""] + [f"note: {n}" for n in notes(table)]
    return "\n".join(lines).rstrip("\n") + "\n"


def report_sections(kernel_diff: pd.DataFrame) -> list[tuple[str, pd.DataFrame]]:
    """The report's kernel section: per draft, its top REPORT_ROWS kernels against the target's (a = target,
    b = draft), titled with the phase."""
    out = []
    for draft, rows in kernel_diff.groupby("draft", sort=False):
        phase = rows["phase"].iloc[0]
        shown = (f"all {len(rows)} GPU ops" if len(rows) <= REPORT_ROWS else
                 f"the {REPORT_ROWS} largest differences of {len(rows)}; kernel_diff.csv has all")
        title = f"Kernels: {draft} against the target, per {phase} forward ({shown}; Δ < 0: the draft saves time)"
        out.append((title, diff_display(rows.head(REPORT_ROWS), "Target", "Draft")))
    return out
