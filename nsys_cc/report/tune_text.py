"""The words of `nsys-cc tune` (`nsys_cc.workflows.tune`): the text it prints and report.md holds (`render_text`).
Its JSON (tune.json, `--format json`) is `nsys_cc.formats.tune_json`'s."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

from ..analysis.tune.keys import CellKey
from ..analysis.tune.schedule import WORKLOADS

if TYPE_CHECKING:
    from ..analysis.tune.schedule import TuneResult

# `nsys-cc tune`'s exit code when the schedule is not recommended (`TuneResult.trusted` False): distinct from 1 (some
# run failed) and 2 (bad input). The text says it where it says why.
UNTRUSTED_EXIT = 3
# ... when the held-out cells are not precise enough to check it (`TuneResult.outcome` "imprecise"): the schedule is
# given, unchecked; the text says the runs that would decide.
IMPRECISE_EXIT = 4


def _x(v: float) -> str:
    return f"{v:.3g}×" if math.isfinite(v) else "n/a"


def _ci(lo: float, hi: float) -> str:
    """" [low–high]" of an interval, " (no interval)" without one (never a bracket around numbers that are none)."""
    return f" [{lo:.3g}–{hi:.3g}]" if math.isfinite(lo) and math.isfinite(hi) else " (no interval)"


def render_text(result: TuneResult, notes: Sequence[str] = ()) -> str:
    """The text `nsys-cc tune` prints (and report.md holds): the step cost model, the forecast per batch size, the
    held-out and schedule checks (each cell named by its key: `B=4`, `B=4 L=128`), the schedule and its
    --speculative-config, the notes (`result`'s, then `notes`)."""
    r = result
    lines = [f"Step cost model (fitted on {len(r.fitted)} cells: "
             + ", ".join(f"{c.key.label} γ={c.gamma}" for c in r.fitted) + "):", "  " + r.cost.describe(),
             "Tokens per step from vLLM's per-position counters: a_i = "
             + ", ".join(f"{a:.3g}" for a in r.tokens.rates)
             + f" (positions 1…{r.tokens.measured_positions}); i.i.d. tail past them with α = {r.tokens.alpha:.3g}",
             "", *_surface_lines(r),
             f"{'B':>4}  {'best γ':>6}  {'speedup [95 % interval]':<26}  {'i.i.d. α':>9}  {'γ=1':>7}  {'γ=2':>7}  "
             f"{'γ=3':>7}  {'γ=4':>7}"]
    by = {(f["batch_size"], f["gamma"]): f for f in r.rows_at()}
    key = "speedup" if r.workload == "server" else "speedup_benchmark"  # the forecast the schedule is chosen on
    lines[-1] += f"   ({r.workload} workload" + ("" if r.context is None else f", prompt length L={r.context}") + ")"
    measured_b = {c.batch_size for c in [*r.fitted, *r.held_out]}
    starts = {s for s, _, _ in r.schedule}
    show = sorted({1, r.max_batch_size, *starts, *(b for b in measured_b if b <= r.max_batch_size)})
    for b in show:
        g = next(gg for s, e, gg in r.schedule if s <= b <= e)
        f = by.get((b, g))
        best = (f"{_x(f[key])}{_ci(f[key + '_ci_low'], f[key + '_ci_high'])}" if f and g else
                f"{_x(f[key])} (K = 0, priced)" if f and math.isfinite(f[key]) else "1× (K = 0 not priced)")
        iid = _x(by[(b, g)]["speedup_iid"]) if f else ""
        row = [_x(by[(b, k)][key]) if (b, k) in by else "" for k in (1, 2, 3, 4)]
        lines.append(f"{b:>4}  {g:>6}  {best:<26}  {iid:>9}  " + "  ".join(f"{v:>7}" for v in row))
    lines.append("")
    lines.append("Held-out check (cells the model was not fitted on):")
    if not r.checks:
        lines.append("  none measured: add --check B:γ (e.g. 4:2,16:3) to profile some")
    for c in r.checks:
        if "verdict" in c:
            lines.append(f"  {CellKey.from_dict(c).label} γ={c['gamma']}: {c['verdict'].upper()}"
                         + (f" (≈ {c['runs_to_decide']} runs would decide)" if c["verdict"] == "imprecise"
                            and math.isfinite(c["runs_to_decide"]) else ""))
        own = (f"{'within' if c['within_precision'] else 'outside'} the runs' own ±{c['tolerance']:.1%}"
               if math.isfinite(c["tolerance"]) else "no interval on either side to compare with")
        lines.append(f"  {CellKey.from_dict(c).label} γ={c['gamma']}: forecast {_x(c['forecast'])}"
                     f"{_ci(c['forecast_ci_low'], c['forecast_ci_high'])} vs measured {_x(c['measured'])} "
                     f"({c['error']:+.1%}; {own}; {'within' if c['within_10pct'] else 'outside'} 10 %)"
                     + (f"; steady state (vLLM's tokens per step): forecast {_x(c['forecast_steady_state'])} vs "
                        f"measured {_x(c['measured_counters'])} ({c['error_counters']:+.1%})"
                        if math.isfinite(c['measured_counters']) else "")
                     + (f"; i.i.d. α: {_x(c['forecast_iid'])}" if abs(c['forecast_iid'] - c['forecast_steady_state'])
                        > 0.005 * c['forecast_steady_state'] else ""))
    other = [w for w in WORKLOADS if w != r.workload]
    lines.append("Schedule check (the benchmark workload's schedule — static batches of "
                 f"{r.output_len or '?'} tokens, as the cells were measured — against the best fixed γ measured at "
                 "each batch size; the server's γ beside it):")
    for s in r.schedule_check:
        m = s["schedule_measured"]
        at = CellKey.from_dict(s).label
        k0 = " (K = 0: speculation on, proposing nothing)" if s["schedule_gamma"] == 0 else ""
        unmeasured = (f" (K = 0's overhead not measured at {at})" if s["schedule_gamma"] == 0 else
                      f" (γ={s['schedule_gamma']} not measured at {at}: measured γ {s['measured_gammas']})")
        lines.append(f"  {at}: benchmark γ={s['schedule_gamma']}{k0} measured {_x(m)}; best fixed "
                     f"γ={s['best_fixed_gamma']} {_x(s['best_fixed_measured'])}"
                     + (f" ({s['gap']:+.1%}; {'within' if s['within_5pct'] else 'outside'} 5 %)" if math.isfinite(m)
                        else unmeasured)
                     + (f"; server γ={s['server_gamma']}"
                        + (f" measured {_x(s['server_measured'])} ({s['server_gap']:+.1%})"
                           if math.isfinite(s['server_measured']) and s['server_gamma'] != s['schedule_gamma']
                           else "") if "server_gamma" in s else "")
                     + (f"; vLLM running the whole schedule: {_x(s['schedule_run_measured'])}"
                        f"{_ci(s['schedule_run_ci_low'], s['schedule_run_ci_high'])} "
                        f"({s['schedule_run_gap']:+.1%} against the best fixed γ"
                        + (f"; {s['schedule_run_note']}" if s["schedule_run_note"] else "") + ")"
                        if "schedule_run_measured" in s else ""))
    lines.append("")
    if not r.trusted:  # the schedule its own check refutes is not handed out
        lines += [f"NOT RECOMMENDED: {r.trust_reason}.", f"Measure next: {r.next_steps}.",
                  "The fitted table below is for inspection only; no --speculative-config is given (exit code "
                  f"{UNTRUSTED_EXIT}).", ""]
    fitted = "" if r.trusted else ", fitted, not recommended"
    lines.append(f"num_speculative_tokens_per_batch_size ({r.workload} workload{fitted}): {json.dumps(r.schedule)}")
    for w in other:
        if w in r.schedules:
            lines.append(f"  {w} workload's schedule{fitted}: {json.dumps(r.schedules[w])} (--workload {w})")
    lines += _context_lines(r)
    if r.plain_beats:
        lines.append(f"plain engine: {r.plain_beats}")
    if r.no_gain_from is not None:
        lines.append(f"no γ pays from batch size {r.no_gain_from} on (up to {r.max_batch_size})")
    cfg = r.speculative_config()
    lines.append(f"--speculative-config '{cfg}'" if cfg else
                 "--speculative-config: none (not recommended: see above)" if not r.trusted else
                 "--speculative-config: none (no batch size speculates)")
    for n in [*r.notes, *notes]:
        lines.append(f"note: {n}")
    return "\n".join(lines) + "\n"


def _surface_lines(r: TuneResult) -> list[str]:
    """The step-cost surface per part: its terms (chosen by held-out error), the held-out RMSE beside the token-only
    model's on the same cells, and why."""
    if not r.surfaces:
        return []
    out = ["Step-cost surface (terms chosen by leave-one-cell-out error; RMSE in ms):"]
    for s in r.surfaces.values():
        held = f"{s.held_out_rmse:.3g}" if math.isfinite(s.held_out_rmse) else "n/a"
        tok = f"{s.token_only_rmse:.3g}" if math.isfinite(s.token_only_rmse) else "n/a"
        out.append(f"  {s.describe()}  held-out RMSE {held} vs token-only {tok} (fit RMSE {s.fit_rmse:.3g}, "
                   f"{s.rows} rows, {s.groups} cells) — {s.why}")
    return [*out, ""]


def _context_lines(r: TuneResult) -> list[str]:
    """The schedule at every measured prompt length (c and γ* over batch × context)."""
    if len(r.by_context) < 2:
        return []
    return [f"  at L={L}: {r.workload} {json.dumps(v[r.workload])}" + ("  ← the schedule above" if L == r.context
                                                                          else "")
            for L, v in r.by_context.items()]
