"""A result's text: the renderings of a `CostCoefficientResult` — table (terminal), markdown, csv, json, html —
that `res.render()` and `nsys-cc analyze` print.

The table mirrors the seed's hand-made one (Model | Phase | Time (ms) | Cost Coefficient) and adds the GPU metrics,
each with its 95 % interval. Times are medians over the kept forwards of that phase.
"""

from __future__ import annotations

import html
import io
import json
import math

import pandas as pd

from ..analysis.coefficient.result import CostCoefficientResult
from ..analysis.forwards.engine_marks import label as marker_label
from ..analysis.metrics import BY_NAME, C_METRICS, METRIC_NAMES, WALL
from ..analysis.stats import STAT_NAMES
from . import gpu_time_text, kernel_text, run_plots, step_text, token_text
from .render_formats import FORMATS as FORMATS, format_of  # FORMATS' home is render_formats.py
from .sentence_text import interval_text, with_diagnosis, with_verdicts
from .table_text import markdown_table, text_table

SHARE_TITLE = ("Forward share (how much of each benchmark iteration the forward ranges cover, against vLLM's own "
               "latencies)")
RUNS_TITLE = ("c per run (each run's forwards only; the table above pools the runs: its c is the geometric mean of "
              "these, its interval — from three runs — the spread between them)")


def _speculative_text():
    """The speculative runs' text (`speculative_text`), imported when a result has them or JSON is asked for: it
    imports the speculative analysis, which a plain `analyze` never needs."""
    from . import speculative_text

    return speculative_text


def _num(x: float) -> float | None:
    return None if x is None or (isinstance(x, float) and math.isnan(x)) else float(x)


def result_to_dict(result: CostCoefficientResult) -> dict:
    """The documented JSON shape: models (with per-phase statistics) and coefficients, plus notes and diagnosis."""
    # Each (model, phase, metric)'s statistics looked up by key, the first row of it as a filter would find it (a
    # filter of the summary per cell was most of a small trace's JSON).
    stat_cols = [f"{s}_ms" for s in STAT_NAMES]
    stats: dict[tuple, tuple] = {}
    for r in result.summary[["model", "phase", "metric", *stat_cols]].itertuples(index=False):
        stats.setdefault((r[0], r[1], r[2]), r[3:])
    tokens = token_text.phase_records(result)
    models = []
    for m in result.models:
        phases = {}
        for phase in m.phases:
            entry: dict = {"count": m.phase_count(phase)}
            for metric in METRIC_NAMES:
                row = stats.get((m.name, phase, metric))
                entry[f"{metric}_ms"] = None if row is None else {s: _num(v) for s, v in zip(STAT_NAMES, row)}
            entry["token"] = tokens.get((m.name, phase), {})  # the token's median and its split
            phases[phase] = entry
        models.append({
            "name": m.name, "role": m.role, "path": m.path, "range": m.range_name, "nsys_version": m.nsys_version,
            "trace_format": m.trace_format, "recorder": None if m.recorder is None else m.recorder.name,
            "recorder_version": None if m.recorder is None else m.recorder.version,
            "has_cuda": m.has_cuda, "trace": None if m.description is None else m.description.to_dict(),
            "token_parts": m.token_parts or None,
            "gpu_loss": None if m.gpu_loss is None else m.gpu_loss.to_dict(),
            "ranges_matched": int(len(m.forwards)), "ranges_kept": int(m.forwards["kept"].sum()),
            "warmup": m.warmup_note, "phase_rule": m.phase_rule.rule, "phase_rule_detail": m.phase_rule.detail,
            "phase_confidence": m.phase_rule.confidence, "phases": phases,
            "ranks": 1 if m.ranks is None else m.ranks.count,
            **({} if m.ranks is None else {"per_rank": _records(result.ranks[result.ranks["model"] == m.name])}),
        })
    coefficients = [
        {"draft": r.draft, "phase": r.phase, "metric": r.metric, "c": _num(r.c),
         "ci95": [_num(r.ci_low), _num(r.ci_high)], "draft_median_ms": _num(r.draft_median_ms),
         "target_median_ms": _num(r.target_median_ms), **token_text.coefficient_record(r)}
        for r in result.coefficients.itertuples()
    ]
    out = {
        "range": _json_range(result), "seed": result.seed, "models": models, "coefficients": coefficients,
        "diagnosis": with_diagnosis(result)[["draft", "phase", "diagnosis"]].to_dict(orient="records"),
        "headline_metric": result.headline, "metric_names": gpu_time_text.metric_names(result.headline),
        "gpu_time": gpu_time_text.records(result),
        "gpu_time_words": gpu_time_text.lines(result),
        "mismatches": _records_all(getattr(result, "mismatches", pd.DataFrame())),
        "notes": list(result.notes),
    }
    if result.acceptance:
        out["speedup"] = json.loads(with_verdicts(headline_verdicts(result)).to_json(orient="records"))
    out.update(_speculative_text().to_json(result.speculative))
    if not result.runs.empty:
        out["runs"] = [{"draft": r.draft, "phase": r.phase, "metric": r.metric, "run": int(r.run), "c": _num(r.c),
                        "ci95": [_num(r.ci_low), _num(r.ci_high)], "draft_median_ms": _num(r.draft_median_ms),
                        "target_median_ms": _num(r.target_median_ms), "n_draft": int(r.n_draft),
                        "n_target": int(r.n_target), "basis": getattr(r, "basis", None),
                        "c_forward": _num(getattr(r, "c_forward", math.nan))} for r in result.runs.itertuples()]
    if not result.forward_share.empty:
        out["forward_share"] = json.loads(result.forward_share.to_json(orient="records"))
    out["kernel_diff"] = kernel_text.records(result.kernel_diff)
    return out


def _json_range(result: CostCoefficientResult) -> str | list[str]:
    """The forward range's name, or the names per model ([target, *drafts]) when the traces were given different
    ones."""
    names = [m.range_name for m in result.models]
    return names[0] if len(set(names)) == 1 else names


def _records_all(df: pd.DataFrame) -> list[dict]:
    return json.loads(df.to_json(orient="records")) if len(df) else []


def traces_line(result: CostCoefficientResult) -> str | None:
    """Where each trace ran (`ModelForwards.description`), one line, when it matters: any trace with GPU work, or a
    difference between them (`result.mismatches`); None on CPU traces alike (their output stays as it was)."""
    described = [(m.name, m.description) for m in result.models if m.description is not None]
    differ = getattr(result, "mismatches", pd.DataFrame())
    if not described or (all(d.platform == "CPU" for _, d in described) and differ.empty):
        return None
    texts = {name: str(d) for name, d in described}
    if len(set(texts.values())) == 1 and len(texts) > 1:
        return f"Traces: every model: {next(iter(texts.values()))}"
    return "Traces: " + "; ".join(f"{name}: {text}" for name, text in texts.items())


def _records(df: pd.DataFrame) -> list[dict]:
    return json.loads(df.drop(columns=["model", "role"]).to_json(orient="records"))


def rank_display(result: CostCoefficientResult) -> pd.DataFrame:
    """The per-rank table for people: one row per model on several ranks, phase and rank (`ranks.rank_table`);
    columns that are empty for every rank are left out."""
    def ms(x: float) -> str:
        return "–" if x is None or math.isnan(x) else f"{x:.3f}"

    def pct(x: float) -> str:
        return "–" if x is None or math.isnan(x) else f"{x:.0%}"

    table = pd.DataFrame([{
        "Model": r.model, "Phase": r.phase, "Rank": r.rank, "PID": r.pid, "Device": r.device or "–",
        "Forwards": r.forwards, f"{gpu_time_text.label(WALL, result.headline)} (ms)": ms(r.wall_ms),
        "GPU busy (ms)": ms(r.gpu_busy_ms),
        "Comm mean (ms)": ms(r.comm_mean_ms), "Comm share": pct(r.comm_share), "All-reduce (ms)": ms(r.allreduce_ms),
        "All-reduce share": pct(r.allreduce_share), "Last": f"{r.last_forwards} ({pct(r.last_share)})",
        "Lag (ms)": ms(r.lag_ms), "Lag p90 (ms)": ms(r.lag_p90_ms), "Start offset (ms)": ms(r.start_offset_ms),
    } for r in result.ranks.itertuples()])
    # Columns no rank has a value for (GPU columns on a CPU trace, the CPU all-reduce on a GPU one) are left out.
    return table.loc[:, [c for c in table.columns if not (table[c] == "–").all()]]


def display_table(result: CostCoefficientResult) -> pd.DataFrame:
    """One row per model and phase: count, median time per metric (ms) and c with its interval per metric."""
    summary, tokens = result.summary, result.tokens
    metrics = shown_metrics(result)
    # The first row of each (model, phase, metric), looked up by key (a filter of each table per cell cost ~1 ms a
    # cell, most of a small trace's rendering): the token's median (its forward's when the model has no
    # logits/sampling) when there are tokens, else the summary's.
    medians: dict[tuple, tuple] = {}
    if tokens.empty:
        for r in summary[["model", "phase", "metric", "count", "median_ms"]].itertuples(index=False):
            medians.setdefault((r[0], r[1], r[2]), (r[3], r[4]))
    else:
        for r in tokens[["model", "phase", "metric", "count", "token_median_ms"]].itertuples(index=False):
            medians.setdefault((r[0], r[1], r[2]), (r[3], r[4]))
    cs: dict[tuple, tuple] = {}
    for r in result.coefficients[["draft", "phase", "metric", "c", "ci_low", "ci_high"]].itertuples(index=False):
        cs.setdefault((r[0], r[1], r[2]), (r[3], r[4], r[5]))
    per_run = token_text.run_values(result)
    rows = []
    for m in result.models:
        for phase in m.phases:
            row = {"Model": m.name, "Role": m.role, "Phase": phase, "N": len(m.phase_rows(phase))}
            for metric in metrics:
                s = medians.get((m.name, phase, metric))
                # No value of the metric in this phase (kernel metrics of graphs recorded whole): not available.
                label = metric_label(result, metric)
                row[f"{label} (ms)"] = ("–" if s is None else "n/a" if not s[0] else f"{s[1]:.3f}")
                if not result.drafts:  # one trace described alone: no c
                    continue
                if m.role == "target":
                    row[f"c {label}"] = "1 (target)"
                else:
                    c = cs.get((m.name, phase, metric))
                    row[f"c {label}"] = ("–" if c is None else interval_text(
                        c[0], c[1], c[2], per_run.get((m.name, phase, metric), ())))
            rows.append(row)
    return pd.DataFrame(rows)


def shown_metrics(result: CostCoefficientResult) -> list[str]:
    """The metrics of the c table in the order shown: the headline first (on a GPU trace the GPU span, then the other
    GPU metrics, then wall as the launch time; `analysis.coefficient.gpu_time`), else the registry's order."""
    present = [m for m in C_METRICS if m in set(result.summary["metric"])]
    if result.headline == WALL or result.headline not in present:
        return present
    return [result.headline, *(m for m in present if m not in (result.headline, WALL)), WALL]


def metric_label(result: CostCoefficientResult, metric: str) -> str:
    """A metric's name in the c table: wall is the launch time where c is headlined on the GPU
    (`gpu_time_text.label`)."""
    return gpu_time_text.label(metric, result.headline)


def _headline_words(result: CostCoefficientResult) -> str:
    """What the table heads with: GPU time on a GPU trace (the CPU's time named as launch time)."""
    if result.headline == WALL:
        return ""
    return (f"; on the GPU: {'c on ' if result.drafts else ''}{BY_NAME[result.headline].label} heads (the GPU's time), "
            f"'{gpu_time_text.LAUNCH_LABEL}' is each range's CPU time, the time to launch its work")


def _long_csv(result: CostCoefficientResult) -> str:
    coef = result.coefficients.rename(columns={"draft": "model"})
    coef = coef[["model", "phase", "metric", "c", "ci_low", "ci_high",
                 *[c for c in ("basis", "c_forward", "c_forward_ci_low", "c_forward_ci_high") if c in coef]]]
    table = result.summary.merge(coef, on=["model", "phase", "metric"], how="left")
    if not result.tokens.empty:  # the token's median and its split beside the forwards' statistics
        split = result.tokens.drop(columns=["role", "count"]).rename(columns={"basis": "token_basis"})
        table = table.merge(split, on=["model", "phase", "metric"], how="left")
    buf = io.StringIO()
    table.to_csv(buf, index=False)
    return buf.getvalue()


def _range_words(result: CostCoefficientResult) -> str:
    """The forward range as the header names it: each model's, an engine's own step annotations named as that engine
    writes them (`engine_marks.label`: SGLang's `step[…]`, not vLLM's name the results keep)."""
    names = dict.fromkeys(marker_label(m.range_name, getattr(m.description, "engine", None)) for m in result.models)
    return " / ".join(map(repr, names))


def _c_words(result: CostCoefficientResult) -> str:
    """What c is: the token's (forward + logits + sampling) where a pair has them, else the forwards'."""
    if not result.drafts:
        return "one trace described alone (no draft: no c); times are medians of its forwards' tokens"
    if token_text.any_token(result):
        return ("c = median(draft token) / median(target token), a token = its forward + logits + sampling (times: the "
                "token's medians; c of the forward alone in the split below)")
    return "c = median(draft) / median(target)"


def _interval_words(result: CostCoefficientResult) -> str:
    """What the intervals in the table are: one run's bootstrap, across runs, or none (two runs: their values)."""
    coef = result.coefficients
    if not result.drafts:
        return "medians of one run"
    runs = int(coef["runs"].max()) if len(coef) and "runs" in coef else 1
    if runs >= 3:
        return f"c pools {runs} runs (each run's c, their geometric mean), 95 % interval across runs"
    if runs == 2:
        return "c pools 2 runs (each run's c, their geometric mean): no interval, the runs' values beside it"
    return "95 % bootstrap interval"


def headline_verdicts(result: CostCoefficientResult) -> pd.DataFrame:
    """The verdicts a person reads (text, markdown, HTML, JSON `speedup`): each draft's on the headline metric — on a
    GPU trace the GPU span, never its launch time beside it ("slows decoding down: c = 0.760 > α" on launch
    time stood beside the GPU verdict) —, or on wall where a draft has no c on the headline (said in its line).
    `result.verdicts` keeps every metric's."""
    v = result.verdicts
    if v.empty:
        return v
    keep = []
    for _draft, rows in v.groupby("draft", sort=False):
        head = rows[(rows["metric"] == result.headline) & ~rows["outcome"].isin(("no-phase", "no-measurement"))]
        keep.append(head if len(head) or result.headline == WALL else rows[rows["metric"] == WALL])
    return pd.concat(keep) if keep else v.iloc[0:0]


def _verdict_lines(result: CostCoefficientResult) -> list[str]:
    """Speedup verdicts on the headline metric (`headline_verdicts`)."""
    v = with_verdicts(headline_verdicts(result))
    return [f"{r.draft} ({gpu_time_text.words(r.metric, result.headline)} c, {r.phase}): {r.verdict}"
            + ("" if r.metric == result.headline else f" (no c on {gpu_time_text.words(result.headline, None)})")
            for r in v.itertuples()]


def render(result: CostCoefficientResult, fmt: str = "table") -> str:
    """The result as text in `fmt` (table | markdown | csv | json, in any case; md for markdown; html: the
    notebook's view, `render_html`); any other `fmt` is an InputError naming them."""
    fmt = format_of(fmt, (*FORMATS, "html"))
    if fmt == "html":
        return render_html(result)
    if fmt == "json":
        return json.dumps(result_to_dict(result), indent=2, ensure_ascii=False)
    if fmt == "csv":
        return _long_csv(result)
    table = display_table(result)
    ranks = rank_display(result)
    if fmt == "markdown":
        traces = traces_line(result)
        parts = [f"{_c_words(result)}{_headline_words(result)}.", *([traces] if traces else []), "",
                 markdown_table(table)]
        split = token_text.split_table(result)
        if not split.empty:
            parts += ["", f"**{token_text.SPLIT_TITLE}**", "", markdown_table(split)]
        steps, more = step_text.display(result)
        if not steps.empty:
            parts += ["", f"**{step_text.TITLE}**", "", markdown_table(steps)] + (["", more] if more else [])
        if not ranks.empty:
            parts += ["", "**Ranks** (each rank's own forward ranges in the kept forwards; last = finished last)", "",
                      markdown_table(ranks)]
        if gpu_time_text.lines(result):
            parts += ["", f"**{gpu_time_text.TITLE}**", ""] + [f"- {x}" for x in gpu_time_text.lines(result)]
        parts += ["", "**Diagnosis**", ""]
        parts += [f"- {r.draft} ({r.phase}): {r.diagnosis}" for r in with_diagnosis(result).itertuples()]
        if result.acceptance:
            parts += ["", "**Speedup**", ""] + [f"- {line}" for line in _verdict_lines(result)]
        if not result.runs.empty:
            parts += ["", f"**{RUNS_TITLE}**", "", markdown_table(run_plots.run_table(result))]
        for title, body in kernel_text.report_sections(result.kernel_diff):
            parts += ["", f"**{title}**", "", markdown_table(body)]
        if result.speculative is not None:
            for title, body in _speculative_text().sections(result.speculative):
                if len(body):
                    parts += ["", f"**{title}**", ""]
                    parts += [markdown_table(body)] if isinstance(body, pd.DataFrame) else [f"- {x}" for x in body]
        if not result.forward_share.empty:
            parts += ["", f"**{SHARE_TITLE}**", "", markdown_table(result.forward_share)]
        parts += ["", "**Notes**", ""] + [f"- {n}" for n in result.notes]
        return "\n".join(parts) + "\n"
    traces = traces_line(result)
    parts = [f"Forward range: {_range_words(result)}; {_c_words(result)}; {_interval_words(result)}"
             f"{_headline_words(result)}", *([traces] if traces else []), "", text_table(table), ""]
    split = token_text.split_table(result)
    if not split.empty:
        parts += [f"{token_text.SPLIT_TITLE}:", "", text_table(split), ""]
    steps, more = step_text.display(result)
    if not steps.empty:
        parts += [f"{step_text.TITLE}:", "", text_table(steps), *([more] if more else []), ""]
    if not ranks.empty:
        parts += ["Ranks: each rank's own forward ranges in the kept forwards; Last = forwards it finished last; Lag = "
                  "its end − the forward's first end", "", text_table(ranks), ""]
    if not result.runs.empty:
        parts += [f"{RUNS_TITLE}:", "", text_table(run_plots.run_table(result)), ""]
    if gpu_time_text.lines(result):
        parts += [f"{gpu_time_text.TITLE}:"] + [f"* {x}" for x in gpu_time_text.lines(result)]
        parts += [""] if result.drafts else []
    parts += [f"* {r.draft} ({r.phase}): {r.diagnosis}" for r in with_diagnosis(result).itertuples()]
    if result.acceptance:
        parts += [""] + [f"* {line}" for line in _verdict_lines(result)]
    if result.speculative is not None:
        parts += ["", _speculative_text().HEADER]
        for title, body in _speculative_text().sections(result.speculative):
            if len(body):
                parts += ["", f"{title}:"]
                parts += [text_table(body)] if isinstance(body, pd.DataFrame) else [f"* {x}" for x in body]
    parts += [""] + [f"note: {n}" for n in result.notes]
    return "\n".join(parts) + "\n"


def _html_list(lines: list[str]) -> str:
    return "<ul>" + "".join(f"<li>{html.escape(line)}</li>" for line in lines) + "</ul>"


def render_html(result: CostCoefficientResult) -> str:
    """A notebook's view of the result, as HTML: what `render("table")` prints — the table, the per-rank table, the
    diagnosis, the verdicts, the speculative runs measured in place (runs, measured vs predicted speedup, the forecast
    and its check) — with the report's kernels of each draft against the target's (GPU traces), then the notes."""
    parts = [f"<p><b>Cost coefficient</b> — forward range <code>{html.escape(result.range_name)}</code>; "
             f"{html.escape(_c_words(result))}; {html.escape(_interval_words(result) + _headline_words(result))}</p>",
             *([f"<p>{html.escape(traces_line(result) or '')}</p>"] if traces_line(result) else []),
             display_table(result).to_html(index=False, escape=True)]
    split = token_text.split_table(result)
    if not split.empty:
        parts += [f"<p><b>{html.escape(token_text.SPLIT_TITLE)}</b></p>", split.to_html(index=False, escape=True)]
    ranks = rank_display(result)
    if not ranks.empty:
        parts += ["<p><b>Ranks</b> (each rank's own forward ranges in the kept forwards; last = finished last)</p>",
                  ranks.to_html(index=False, escape=True)]
    if gpu_time_text.lines(result):
        parts += [f"<p><b>{html.escape(gpu_time_text.TITLE)}</b></p>", _html_list(gpu_time_text.lines(result))]
    lines = [f"{r.draft} ({r.phase}): {r.diagnosis}" for r in with_diagnosis(result).itertuples()]
    if result.acceptance:
        lines += _verdict_lines(result)
    parts.append(_html_list(lines))
    for title, body in kernel_text.report_sections(result.kernel_diff):
        parts += [f"<p><b>{html.escape(title)}</b></p>", body.to_html(index=False, escape=True)]
    if result.speculative is not None:
        parts.append(f"<p><b>{html.escape(_speculative_text().HEADER)}</b></p>")
        for title, body in _speculative_text().sections(result.speculative):
            if len(body):
                parts.append(f"<p><i>{html.escape(title)}</i></p>")
                parts.append(body.to_html(index=False, escape=True) if isinstance(body, pd.DataFrame)
                             else _html_list(list(body)))
    parts += ["<p><b>Notes</b></p>", _html_list(list(result.notes))]
    return "\n".join(parts)
