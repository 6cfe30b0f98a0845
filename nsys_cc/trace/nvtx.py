"""NVTX ranges of an export as one DataFrame (`Trace.nvtx_ranges()`).

Rows: NVTX_EVENTS rows of eventType 59 (push/pop), 60 (start/end), 70 and 71 (their NVTXT twins), in
rowid order. Columns (times are int64 ns on the session timeline):

- `range_id`: the NVTX_EVENTS rowid (nsys's RangeId in `nvtxgpuproj`).
- `name`: the range's message: the registered string (`textId` → StringIds) or else the inline `text`
  (nsys's order); one leading ":" is dropped (newer nsys writes the default domain as ":name"), but
  not a leading "::".
- `domain`: name of the NVTX domain (`domainId` matched to the eventType 75 row of the same domainId in
  the same process, the earliest if several) or "" for the default domain.
- `qualified_name`: "domain:name", or `name` in the default domain — the name nsys 2022.4's reports show.
- `range_style`: "push/pop" (59, 70) or "start/end" (60, 71): nsys's "Style" (not named `style`, which
  pandas' `DataFrame.style` would hide from attribute access).
- `start_ns`, `end_ns`, `duration_ns` = end_ns - start_ns.
- `open_at_end`: the range was still open when the capture ended. Two ways exports say so:
  `end` NULL — `end_ns` is then what nsys 2022.4's `nvtxsum.py`/`nvtxgpuproj.py` use,
  `max(max(start), max(end))` over all NVTX_EVENTS rows (marks, domain rows and all), i.e. the last
  NVTX timestamp; or `end` exactly equal to the end of the trace (`ANALYSIS_DETAILS.duration`, the
  timeline's last ns), where nsys 2022.4's exporter closes ranges left open at exit — `end_ns` is
  then kept as written, as nsys's reports do.
- `global_tid`, `pid`, `tid`: the thread the range started on (pid/tid decoded from globalTid).
- `end_global_tid` (nullable): set by nsys only for a start/end range that ended on another thread;
  `ended_on_other_thread` is True exactly then. nsys does not project such ranges onto the GPU.
- `level`, `parent_id` (nullable): nesting on the range's own thread as `nvtxgpuproj` defines it (shortest
  enclosing range; see `nesting.py`).
- `payload` (float64, NaN when none): the first set of int64Value, uint64Value, doubleValue, int32Value,
  uint32Value, floatValue (in that order); integers above 2**53 lose precision.
- `category` (nullable): the NVTX category id.
"""

from __future__ import annotations

from collections.abc import Collection

import numpy as np
import pandas as pd

from . import frame_paths
from .bulk import (
    NULL_INT,
    PID_FIELD_MASK,
    decode_pid,
    decode_tid,
    nullable,
    read_columns,
)
from .nesting import NO_PARENT, nest
from .source import TraceSource

PUSHPOP, STARTEND, NVTXT_PUSHPOP, NVTXT_STARTEND = 59, 60, 70, 71
DOMAIN_CREATE = 75
RANGE_TYPES = (PUSHPOP, STARTEND, NVTXT_PUSHPOP, NVTXT_STARTEND)
PAYLOAD_COLUMNS = ("int64Value", "uint64Value", "doubleValue", "int32Value", "uint32Value", "floatValue")

COLUMNS = {
    "range_id": "int64",
    "name": "category",
    "domain": "category",
    "qualified_name": "category",
    "range_style": "category",
    "start_ns": "int64",
    "end_ns": "int64",
    "duration_ns": "int64",
    "global_tid": "int64",
    "pid": "int64",
    "tid": "int64",
    "end_global_tid": "Int64",
    "ended_on_other_thread": "bool",
    "level": "int64",
    "parent_id": "Int64",
    "payload": "float64",
    "category": "Int64",
    "open_at_end": "bool",
}

_WHERE = f"eventType IN ({', '.join(map(str, RANGE_TYPES))})"


def empty_ranges(nesting: bool = True) -> pd.DataFrame:
    """A frame with no rows and the columns of `read_ranges` (`level` nullable without `nesting`)."""
    types = COLUMNS if nesting else {**COLUMNS, "level": "Int64"}
    return pd.DataFrame({c: pd.Series(dtype=t) for c, t in types.items()})


def read_ranges(trace: TraceSource, names: Collection[str] | None = None, *, prefixes: Collection[str] = (),
                nesting: bool = True) -> pd.DataFrame:
    """Every NVTX range of `trace` (see the module docstring for the columns), or with `names` / `prefixes` only
    those that `matches` picks (SQLite leaves the others out of the read: on an NVTX-heavy trace the cost is that
    of the rows asked for, plus one scan). `nesting=False` skips `level` and `parent_id` (both <NA>, nullable):
    nesting needs every range of a thread, so a partial read would otherwise read all rows' times as well."""
    if not trace.has_table("NVTX_EVENTS"):
        return empty_ranges(nesting)
    partial = names is not None or bool(prefixes)
    cols = set(trace.columns("NVTX_EVENTS"))
    payload = [c for c in PAYLOAD_COLUMNS if c in cols]
    any_payload = f"coalesce({', '.join(payload)}, NULL)" if payload else "NULL"

    def read(domain_zero: bool) -> list:
        ranges_where = (f"{_WHERE} AND {_name_filter(trace, names or (), prefixes, domain_zero=domain_zero)}"
                        if partial else _WHERE)
        # The domain rows (eventType 75, a few) come in the same scan; they name the domains and are then set aside.
        where = f"({ranges_where}) OR (eventType = {DOMAIN_CREATE} AND domainId IS NOT NULL)"
        return read_columns(
            trace,
            "NVTX_EVENTS",
            [
                "rowid", "start", f"coalesce(end, {NULL_INT})", "eventType", "coalesce(globalTid, 0)",
                f"coalesce(endGlobalTid, {NULL_INT})", f"coalesce(textId, {NULL_INT})",
                f"coalesce(domainId, {NULL_INT})", f"coalesce(category, {NULL_INT})", f"{any_payload} IS NOT NULL",
                f"coalesce(CAST({any_payload} AS REAL), 0.0)",
                "text",
            ],
            where=where,
            floats=(10,),
            texts=(11,),
        )

    columns = read(False)
    dom = columns[3] == DOMAIN_CREATE
    if partial and (columns[7][dom] == 0).any():  # a domain created with the default domain's id: read its parts too
        columns = read(True)
        dom = columns[3] == DOMAIN_CREATE
    domains = _domains(trace, dom, columns)
    if dom.any():
        keep = ~dom
        columns = [(c[0][keep], c[1]) if isinstance(c, tuple) else c[keep] for c in columns]
    rowid, start, end, etype, gtid, end_gtid, text_id, domain_id, category, has_payload, values, text = columns
    if len(rowid) == 0:
        return empty_ranges(nesting)
    no_end = end == NULL_INT
    with trace.reading() as conn:
        trace_end = (
            conn.execute("SELECT max(duration) FROM ANALYSIS_DETAILS").fetchone()[0]
            if "duration" in trace.columns("ANALYSIS_DETAILS")
            else None
        )

    end = _closed(trace, end)
    open_at_end = no_end | (end == trace_end) if trace_end is not None else no_end
    other_thread = end_gtid != NULL_INT

    if not nesting:
        level = parent_id = np.full(len(rowid), NULL_INT)  # <NA> once made nullable below
    elif not partial:
        level, parent_id = _nesting(rowid, gtid, start, end, ~other_thread)
    else:  # over every range of the trace, then taken for the rows read
        level, parent_id = _nesting_of(trace, rowid)

    name = _names(trace, text_id, text)
    domain = _domain_names(domains, domain_id, gtid)
    frame = pd.DataFrame(
        {
            "range_id": rowid,
            "name": name,
            "domain": domain,
            "qualified_name": _qualified(name, domain),
            "range_style": pd.Categorical.from_codes(
                np.isin(etype, (STARTEND, NVTXT_STARTEND)).astype(np.int8), categories=["push/pop", "start/end"]
            ),
            "start_ns": start,
            "end_ns": end,
            "duration_ns": end - start,
            "global_tid": gtid,
            "pid": decode_pid(gtid),
            "tid": decode_tid(gtid),
            "end_global_tid": nullable(end_gtid),
            "ended_on_other_thread": other_thread,
            "level": level if nesting else nullable(level),
            "parent_id": nullable(parent_id),
            "payload": np.where(has_payload == 1, values, np.nan),
            "category": nullable(category),
            "open_at_end": open_at_end,
        },
        copy=False,  # the arrays are this frame's alone: no consolidating copy (0.5 GB at 6 M ranges)
    )
    if partial:  # the SQL filter lets a few more through (it cannot resolve names or domains): now exactly
        hit = matches(frame, names or (), prefixes)
        if not hit.all():
            frame = frame[hit].reset_index(drop=True)
        frame = names_of_rows(frame)
    return frame


def names_of_rows(frame: pd.DataFrame) -> pd.DataFrame:
    """`frame` (some of a trace's ranges) with the names, domains and qualified names of its own rows as categories,
    not every name of the trace (`value_counts()` would list each of the others at 0)."""
    for col in ("name", "domain", "qualified_name"):
        if col in frame and isinstance(frame[col].dtype, pd.CategoricalDtype):
            used = _used_categories(frame[col].array)
            if used is not None:
                frame[col] = pd.Series(used, index=frame.index, name=col)
    return frame


def _used_categories(cat: pd.Categorical) -> pd.Categorical | None:
    """`cat` with only the categories its rows use, in their order (as `remove_unused_categories`, which hashes every
    row: 0.3 s a column at 4 M rows; the codes counted and mapped here, a tenth of it); None when it uses them all."""
    codes = cat.codes
    present = codes >= 0
    used = np.bincount(codes[present], minlength=len(cat.categories)) > 0
    if used.all():
        return None
    new = (np.cumsum(used) - 1).astype(codes.dtype)[np.where(present, codes, 0)]
    new[~present] = -1
    return pd.Categorical.from_codes(new, cat.categories[used], ordered=cat.ordered)


def without_nesting(ranges: pd.DataFrame) -> pd.DataFrame:
    """`ranges` with `level` and `parent_id` <NA> (nullable), as a read with `nesting=False` gives them."""
    return ranges.assign(level=nullable(np.full(len(ranges), NULL_INT)),
                         parent_id=nullable(np.full(len(ranges), NULL_INT)))


def clean_name(name: str) -> str:
    """A range name as nsys_cc writes it: one leading ":" dropped (newer nsys writes the default domain as
    ":name"), not a leading "::"."""
    return name[1:] if name.startswith(":") and not name.startswith("::") else name


def matches(ranges: pd.DataFrame, names: Collection[str], prefixes: Collection[str] = ()) -> np.ndarray:
    """Rows of `ranges` whose `name` or `qualified_name` equals one of `names` (each taken through
    `clean_name`), or whose `name` starts with one of `prefixes`: a boolean array, worked out per category. The one
    rule by which the package picks ranges by name (a frame without `qualified_name` is matched on `name`). A Python
    frame's name (`<file>.py(<line>): <function>`, a PyTorch-profiler trace's `python_function`) is also compared by
    its module path (`frame_paths`): a name or prefix that holds a path matches the frame whatever its install prefix
    (`vllm/v1/spec_decode/` matches `/home/u/code/vllm/vllm/v1/spec_decode/eagle.py(237): propose`)."""
    wanted = {clean_name(n) for n in names}
    wanted_mod = {frame_paths.module_name(n) for n in wanted if frame_paths.is_path_like(n)}
    prefix_mod = tuple(frame_paths.module_prefix(p) for p in prefixes if frame_paths.is_path_like(p))
    by_module = bool(wanted_mod or prefix_mod)
    hit = np.zeros(len(ranges), dtype=bool)
    for col in ("name", "qualified_name"):
        if col not in ranges:
            continue
        cat = ranges[col].array
        if not isinstance(cat, pd.Categorical):
            cat = pd.Categorical(ranges[col])
        cats = [str(c) for c in cat.categories]

        def frame_hit(c: str) -> bool:
            if ".py(" not in c:
                return False
            m = frame_paths.module_name(c)
            return m in wanted_mod or m.startswith(prefix_mod)

        ok = np.array([c in wanted or (col == "name" and (any(c.startswith(p) for p in prefixes)
                                                          or (by_module and frame_hit(c)))) for c in cats]
                      + [False], dtype=bool)
        at = np.flatnonzero(ok)
        if len(at) <= 4:  # a few categories (the usual case): compared with the codes, not gathered per row (30×)
            for code in at:
                hit |= cat.codes == code
        else:
            hit |= ok[cat.codes]  # code -1 (no name) → the appended False
    return hit


def _sql_text(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def _name_filter(trace: TraceSource, names: Collection[str], prefixes: Collection[str], *,
                 domain_zero: bool = False) -> str:
    """An SQL condition on NVTX_EVENTS rows that keeps at least every range `matches` would pick: the raw text
    (registered or inline) equal to a wanted name, to it with a leading ":", or starting with a prefix (with or
    without ":"); or, in a domain other than the default one, equal to any part of a wanted name after a ":" (a name
    in a domain, asked for as "domain:name": `nsys_cc:sample` is the range `sample` of a domain `nsys_cc`, never a
    default-domain `sample`, which an NVTX-heavy program may write millions of). The default domain is domainId 0
    (or NULL); `domain_zero`: an eventType 75 row created a domain with id 0, so the parts are asked for there too."""
    whole: set[str] = set()
    parts: set[str] = set()
    for n in map(clean_name, names):
        whole |= {n, ":" + n}
        parts |= {q for i, ch in enumerate(n) if ch == ":" for q in (n[i + 1:], ":" + n[i + 1:])}
    parts -= whole
    starts = sorted({q for p in prefixes for q in (p, ":" + p)})
    cols = trace.columns("NVTX_EVENTS")
    with_ids = "textId" in cols and trace.has_table("StringIds")

    def on(col: str, raw: set[str], with_starts: bool) -> list[str]:
        conds = [f"{col} IN ({', '.join(map(_sql_text, sorted(raw)))})"] if raw else []
        return conds + ([f"substr({col}, 1, {len(p)}) = {_sql_text(p)}" for p in starts] if with_starts else [])

    def text_is(raw: set[str], with_starts: bool) -> list[str]:
        conds = on("text", raw, with_starts) if "text" in cols else []
        if with_ids and on("value", raw, with_starts):
            conds.append(f"textId IN (SELECT id FROM StringIds WHERE {' OR '.join(on('value', raw, with_starts))})")
        return conds

    conds = text_is(whole, True)
    in_domain = text_is(parts, False)
    if in_domain:
        domain = "" if domain_zero or "domainId" not in cols else " AND coalesce(domainId, 0) != 0"
        conds.append(f"(({' OR '.join(in_domain)}){domain})")
    return f"({' OR '.join(conds)})" if conds else "0"


def _nesting(rowid, gtid, start, end, eligible) -> tuple[np.ndarray, np.ndarray]:
    """Level and parent range id (NULL_INT when none) of every range."""
    parent_pos, level = nest(gtid, start, end, eligible)
    return level, np.where(parent_pos == NO_PARENT, NULL_INT, rowid[np.maximum(parent_pos, 0)])


def _closed(trace: TraceSource, end: np.ndarray) -> np.ndarray:
    """`end` with NULL (a range still open when the capture ended) replaced by the last NVTX timestamp, as nsys's
    reports do (a scan of the whole table, made only when some range has no end)."""
    no_end = end == NULL_INT
    if not no_end.any():
        return end
    with trace.reading() as conn:
        last = conn.execute("SELECT max(start), max(end) FROM NVTX_EVENTS").fetchone()
    return np.where(no_end, max(v for v in last if v is not None), end)


def _nesting_of(trace: TraceSource, rowid: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Level and parent id of the ranges `rowid` (ascending), nested among every range of the trace: their
    times, threads and end threads are read for all rows (integers only, no names)."""
    all_id, all_start, all_end, all_gtid, all_end_gtid = read_columns(
        trace, "NVTX_EVENTS",
        ["rowid", "start", f"coalesce(end, {NULL_INT})", "coalesce(globalTid, 0)",
         f"coalesce(endGlobalTid, {NULL_INT})"],
        where=_WHERE,
    )
    all_end = _closed(trace, all_end)
    level, parent = _nesting(all_id, all_gtid, all_start, all_end, all_end_gtid == NULL_INT)
    at = np.searchsorted(all_id, rowid)
    return level[at], parent[at]


def _names(trace: TraceSource, text_id: np.ndarray, text: tuple[np.ndarray, np.ndarray]) -> pd.Categorical:
    """The registered string of `text_id` when StringIds has it, else the inline text; worked out once per
    distinct (id, text) pair, not once per row."""
    text_codes, text_values = text
    strings = trace.strings() if (text_id != NULL_INT).any() else {}
    id_codes, ids = pd.factorize(text_id)  # by hashing: no sort of millions of ids
    registered = [strings.get(int(i)) for i in ids]
    # Label per row: the registered string's position among `ids` when found, else len(ids) + the text's code,
    # -1 for neither; only labels some row has become categories (two gathers and a count over the rows).
    found = np.array([r is not None for r in registered], dtype=bool)
    key = np.where(found[id_codes], id_codes, np.where(text_codes >= 0, len(ids) + text_codes, -1))
    labels = [*registered, *text_values.tolist()]
    used = np.bincount(key + 1, minlength=len(labels) + 1)[1:] > 0
    return _from_labels(key, [clean_name(u) if u is not None and ok else None for u, ok in zip(labels, used)])


def _from_labels(codes: np.ndarray, labels: list) -> pd.Categorical:
    """Row i gets labels[codes[i]] (NaN for code -1 or a None label); equal labels share one category."""
    label_codes, cats = pd.factorize(np.array(labels, dtype=object))
    label_codes = np.append(label_codes, -1)  # index -1 → missing
    return pd.Categorical.from_codes(label_codes[codes], categories=pd.Index(cats, dtype=object))


def _domains(trace: TraceSource, dom: np.ndarray, columns: list) -> pd.DataFrame:
    """The eventType 75 rows (`dom`) of the read `columns`: (domainId, PID field of globalTid) → domain name (the
    inline text, else the registered string), the earliest (start, rowid) per key."""
    rowid, start, _, _, gtid, _, text_id, domain_id, *_, (text_codes, text_values) = columns
    at = np.flatnonzero(dom)
    if not len(at):  # no domain created (most traces): the empty table, without building and de-duplicating one
        return pd.DataFrame({"domain_id": np.array([], np.int64), "pid_field": np.array([], np.int64),
                             "domain": pd.Series([], dtype=object)})
    at = at[np.lexsort((rowid[at], start[at]))]
    strings = trace.strings() if (text_id[at] != NULL_INT).any() else {}
    names = [text_values[c] if c >= 0 else strings.get(int(i)) for c, i in zip(text_codes[at], text_id[at])]
    frame = pd.DataFrame({"domain_id": domain_id[at], "pid_field": gtid[at] & PID_FIELD_MASK,
                          "domain": pd.Series(names, dtype=object)})
    return frame.drop_duplicates(["domain_id", "pid_field"]).astype({"domain_id": "int64", "pid_field": "int64"})


def _domain_names(domains: pd.DataFrame, domain_id: np.ndarray, gtid: np.ndarray) -> pd.Categorical:
    """Each row's domain name ("" for the default domain): looked up once per distinct (domainId, process)."""
    if domains.empty:
        return pd.Categorical.from_codes(np.zeros(len(domain_id), np.int8), categories=pd.Index([""], dtype=object))
    d_codes, d_uniq = pd.factorize(domain_id)
    p_codes, p_uniq = pd.factorize(gtid & PID_FIELD_MASK)
    pair_codes, pairs = pd.factorize(d_codes.astype(np.int64) * len(p_uniq) + p_codes)
    keys = pd.DataFrame({"domain_id": np.asarray(d_uniq)[pairs // len(p_uniq)],
                         "pid_field": np.asarray(p_uniq)[pairs % len(p_uniq)]})
    found = keys.merge(domains, on=["domain_id", "pid_field"], how="left")["domain"].fillna("")
    codes, cats = pd.factorize(found.to_numpy(dtype=object))
    return pd.Categorical.from_codes(codes[pair_codes], categories=pd.Index(cats, dtype=object))


def _qualified(name: pd.Categorical, domain: pd.Categorical) -> pd.Categorical:
    if list(domain.categories) == [""]:  # every range in the default domain: the qualified name is the name
        return name
    combined = name.codes.astype(np.int64) * (len(domain.categories) + 1) + (domain.codes + 1)
    inverse, uniq = pd.factorize(combined)  # by hashing: no sort of millions of keys
    labels = []
    for key in uniq.tolist():
        n_code, d_code = divmod(key, len(domain.categories) + 1)
        n = name.categories[n_code] if n_code >= 0 else None
        d = domain.categories[d_code - 1] if d_code > 0 else ""
        labels.append(None if n is None else (f"{d}:{n}" if d else n))
    return _from_labels(inverse, labels)


def warn_no_such_names(trace, names: Collection[str]) -> None:
    """The NsysCCWarning of a read by names that found none (either reader: `trace` has `path` and `nvtx_ranges`):
    the trace's closest names (difflib), else its most frequent ones."""
    import difflib
    import warnings

    from ..errors import NsysCCWarning

    every = trace.nvtx_ranges(nesting=False)
    counts = every["qualified_name"].dropna().astype(str).value_counts()
    known = list(counts.index)
    near = list(dict.fromkeys(m for n in names for m in difflib.get_close_matches(n, known, n=5, cutoff=0.4)))[:5]
    listed = near or known[:5]
    what = "closest names" if near else "names in the trace" if known else "the trace has no named NVTX range"
    warnings.warn(f"{trace.path}: no NVTX range named {', '.join(map(repr, names))}: an empty frame; {what}"
                  + (f": {', '.join(map(repr, listed))}" if listed else ""), NsysCCWarning, stacklevel=3)
