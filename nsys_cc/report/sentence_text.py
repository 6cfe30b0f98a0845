"""Sentences: the sentences and number formats a reader sees, shared by every text module. Analysis hands over
numbers; they are phrased here.

- `sig3`, `fmt_speedup`: numbers as the reports print them; `interval_text` a pooled number with its interval, or
  its runs' values where the runs give none.
- `verdict`: one sentence on what a cost coefficient c means at an acceptance rate α (Leviathan et al. Cor. 3.9,
  Thm 3.8), from `analysis.theory.speedup.judge`'s numbers; `verdict_of` phrases a `Judgement` or a row of
  `analysis.theory.speedup.verdicts`, `with_verdicts` adds the `verdict` column to that table.
- `diagnosis_text`: where a draft's forward time goes, in sentences, from `analysis.coefficient.diagnosis`'s numbers;
  `with_diagnosis` adds the `diagnosis` column to the result's diagnosis table.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from ..analysis.theory.speedup import Judgement

if TYPE_CHECKING:  # pandas is not loaded for words alone (`nsys-cc speedup` prints its verdicts without it)
    import pandas as pd


def sig3(x: float) -> str:
    """x rounded (never truncated) to 3 significant digits, trailing zeros kept: 0.688, 0.500, 0.0660, 1.23."""
    s = f"{x:#.3g}"
    return s[:-1] if s.endswith(".") else s


def _missing(x) -> bool:
    return x is None or (isinstance(x, float) and math.isnan(x))


def fixed3(x: float) -> str:
    return f"{x:.3f}"


def interval_text(value: float, low: float, high: float, runs=(), digits=fixed3) -> str:
    """A pooled number as the tables print it: `value [low–high]` with its interval; without one, the runs' own
    values beside it in words — "(runs 0.146 and 0.231)", never bracketed as a bound — when it pools two or more
    runs (`runs`), else "[no interval]"; "–" without a value."""
    if _missing(value):
        return "–"
    if not (_missing(low) or _missing(high)):
        return f"{digits(value)} [{digits(low)}–{digits(high)}]"
    found = sorted(float(r) for r in runs if not _missing(r))
    if len(found) == 2:
        return f"{digits(value)} (runs {digits(found[0])} and {digits(found[1])})"
    if len(found) > 2:
        return f"{digits(value)} (runs {digits(found[0])} to {digits(found[-1])})"
    return f"{digits(value)} [no interval]"


def alpha_text(a: float) -> str:
    return f"{a:.2f}" if abs(a - round(a, 2)) < 1e-12 else f"{a:.3g}"


def fmt_speedup(s: float) -> str:
    """S to 3 significant digits, more only when rounding would turn a gain or a loss into a flat 1."""
    for digits in range(3, 7):
        text = f"{s:.{digits}g}"
        if float(text) != 1.0 or s == 1.0:
            break
    return text


def _gamma_text(g: int, lo: int, hi: int, max_gamma: int) -> str:
    text = f"best γ = {g}"
    if lo and hi and lo != hi:
        text += f" ({lo}–{hi})"
    if g == max_gamma:
        text += " (the search bound: S still grows with γ)"
    return text


def verdict(*, c: float, c_low: float, c_high: float, alpha: float, best_gamma: int, best_gamma_low: int,
            best_gamma_high: int, best_speedup: float, best_speedup_low: float, best_speedup_high: float,
            max_gamma: int, alpha_low: float = math.nan, alpha_high: float = math.nan, **_ignored) -> str:
    """One plain sentence: does this draft speed decoding up at α, with which γ, by how much (Cor. 3.9, Thm 3.8).
    A measured α (`alpha_low`, `alpha_high`: its interval) is written with its interval, and the speedup's interval
    carries it."""
    a = alpha_text(alpha)
    if not (math.isnan(alpha_low) or math.isnan(alpha_high)):
        a += f" [{alpha_text(alpha_low)}–{alpha_text(alpha_high)}]"
    has_ci = not (math.isnan(c_low) or math.isnan(c_high))
    has_speedup_ci = not (math.isnan(best_speedup_low) or math.isnan(best_speedup_high))
    if math.isnan(c):
        return f"no measurement of c: no verdict at α = {a}"
    if alpha > c:
        text = _gamma_text(best_gamma, best_gamma_low, best_gamma_high, max_gamma)
        text += f" gives {fmt_speedup(best_speedup)}×"
        if has_speedup_ci:
            text += f" ({fmt_speedup(best_speedup_low)}–{fmt_speedup(best_speedup_high)}×)"
        text += f" at α = {a}"
        if has_ci and c_high >= alpha:
            text += (f"; but c's interval reaches {sig3(c_high)} ≥ α, where it would not speed decoding up "
                     f"(needs α > {sig3(c_high)} to be sure)")
        return text
    if c >= 1:
        text = (f"never speeds decoding up at c = {sig3(c)}: a draft no faster than the target (c ≥ 1) "
                f"loses at every α and γ")
    elif alpha == c:
        text = f"cannot speed decoding up at α = {a}: c = {sig3(c)} = α, the break-even point; needs α > {sig3(c)}"
    else:
        text = f"slows decoding down at α = {a}: c = {sig3(c)} > α; needs α > {sig3(c)}"
    if has_ci and c_low < alpha:
        text += (f" (c's interval {sig3(c_low)}–{sig3(c_high)} reaches below α: at best "
                 f"{fmt_speedup(best_speedup_high)}× with γ = {best_gamma_high})")
    return text


def free_draft_verdict(alpha: float) -> str:
    """c = 0 (a draft of negligible cost, as the paper's bigram example): S(α, γ, 0) = E(α, γ)."""
    a = alpha_text(alpha)
    if alpha == 0:
        return f"a free draft (c = 0) whose tokens are never accepted (α = {a}) gains nothing: S = 1 at every γ"
    if alpha == 1:
        return "c = 0 and α = 1: S = γ + 1 grows without bound, so the best γ is unbounded (as large as you can verify)"
    within = max(1, math.ceil(math.log(0.01) / math.log(alpha)) - 1)
    return (f"c = 0 (a draft of negligible cost): S = E(α, γ) grows with every γ, so the best γ is unbounded; "
            f"S approaches 1/(1 − α) = {fmt_speedup(1 / (1 - alpha))}× at α = {a} and is within 1 % of it from "
            f"γ = {within}")


def _int(x) -> int:
    try:
        return 0 if x is None or x != x else int(x)  # NaN: not equal to itself
    except TypeError:  # pandas' NA, whose comparisons are NA too
        return 0


def _in_place_text(get, has) -> str | None:
    """The measured part of a verdict where the draft ran in place (`speculative.verdicts_in_place`): the runs'
    speedups first, then their cost model's forecast at α; None without runs."""
    if not has("in_place_gammas") or not get("in_place_gammas") or get("in_place_gammas") != get("in_place_gammas"):
        return None
    lo, hi = float(get("measured_low")), float(get("measured_high"))
    measured = ("–" if math.isnan(lo) else f"{fmt_speedup(lo)}×" if lo == hi else
                f"{fmt_speedup(lo)}–{fmt_speedup(hi)}×")
    text = f"measured in place at γ {get('in_place_gammas')}: {measured}"
    s = float(get("in_place_speedup"))
    if not math.isnan(s):
        g = _int(get("in_place_best_gamma"))
        text += (f"; those runs' cost model at α = {alpha_text(float(get('alpha')))}: best γ = {g} gives "
                 f"{fmt_speedup(s)}× ({'speeds decoding up' if s > 1 else 'slows decoding down'})")
    return text


def verdict_of(j) -> str:
    """The verdict sentence of a `Judgement` or of one row (a namedtuple or Series) of `speedup.verdicts`. A row of a
    draft measured in place (`speculative.verdicts_in_place`) says the measured speedups and their cost model's
    forecast first, then what Thm 3.8 with c alone would say, and that it leaves out what the runs measured."""
    by_name = isinstance(j, Judgement) or hasattr(j, "_fields")  # a namedtuple row; a Series is read by key
    get = (lambda k: getattr(j, k)) if by_name else j.__getitem__
    fields: tuple = tuple(j._fields) if hasattr(j, "_fields") else tuple(getattr(j, "index", ()))
    measured = None if isinstance(j, Judgement) else _in_place_text(get, lambda k: k in fields)
    if measured is not None:
        alone = _verdict_c_alone(j, get, fields, outcome_key="outcome_c_alone")
        return (f"{measured}; Thm 3.8 with c alone would say: {alone} — it leaves out what the runs measured (the "
                "verify step's cost above a decode step's, the time outside the forwards)")
    return _verdict_c_alone(j, get, fields)


def _verdict_c_alone(j, get, fields: tuple, outcome_key: str = "outcome") -> str:
    """The Thm 3.8 verdict sentence of a Judgement or a verdicts row (`verdict_of`)."""
    outcome = get(outcome_key)
    alpha = float(get("alpha"))
    if outcome == "no-phase":
        return f"no {get('phase')} or all-phase measurement of c: no verdict"
    if outcome == "no-measurement":
        return f"no measurement of c: no verdict at α = {alpha_text(alpha)}"
    if outcome in ("unbounded", "no-gain"):
        return free_draft_verdict(alpha)
    c = float(get("c"))
    if alpha == 1 and 0 < c < 1:  # judge's best_gamma_unbounded: no γ is best, `best_gamma` gave its search bound
        return (f"every draft token is accepted (α = 1), so S = (γ + 1)/(γc + 1) grows with every γ towards 1/c = "
                f"{fmt_speedup(1 / c)}× at c = {sig3(c)}: the best γ is unbounded (as large as you can verify)")
    row = not isinstance(j, Judgement)  # the table names the best speedup `speedup`
    best = "speedup" if row else "best_speedup"
    a_lo, a_hi = (math.nan, math.nan) if not row or "alpha_low" not in fields \
        else (float(get("alpha_low")), float(get("alpha_high")))
    return verdict(c=float(get("c")), c_low=float(get("c_low")), c_high=float(get("c_high")), alpha=alpha,
                   best_gamma=_int(get("best_gamma")), best_gamma_low=_int(get("best_gamma_low")),
                   best_gamma_high=_int(get("best_gamma_high")), best_speedup=float(get(best)),
                   best_speedup_low=float(get(f"{best}_low")), best_speedup_high=float(get(f"{best}_high")),
                   max_gamma=_int(get("max_gamma")), alpha_low=a_lo, alpha_high=a_hi)


def with_verdicts(verdicts: pd.DataFrame) -> pd.DataFrame:
    """`speedup.verdicts`'s table with a `verdict` column: the sentence of each row."""
    return verdicts.assign(verdict=[verdict_of(r) for _, r in verdicts.iterrows()])


def _category_text(both: pd.DataFrame) -> str | None:
    if both.empty:
        return None
    top, most = both["draft"].idxmax(), both["saved"].idxmax()
    per_cat = ", ".join(f"{cat} {row.draft:.3f} vs {row.target:.3f}" for cat, row in both.iterrows())
    return (
        f"Its largest category is {top} ({both.at[top, 'draft']:.3f} ms per forward vs {both.at[top, 'target']:.3f} ms "
        f"for the target); the draft saves most in {most} ({both.at[most, 'saved']:.3f} ms per forward); "
        f"per category, draft vs target ms per forward: {per_cat}."
    )


def _top_kernels_text(top: pd.DataFrame) -> str | None:
    if top.empty:
        return None
    from .kernel_text import shorten

    names = shorten(top["name"], 60)
    return "Top kernels: " + "; ".join(
        f"{names[i]} ({r.category}, {r.calls_per_forward:.3g}× {r.mean_duration_ms * 1e3:.1f} µs = "
        f"{r.time_per_forward_ms:.3f} ms per forward)" for i, r in enumerate(top.itertuples())
    ) + "."


def _replay_text(share: float, graphs: bool, kernels: float, launches: float) -> str:
    """How a forward's kernels were launched: replayed as CUDA graphs (how many from how few launches) or one by one."""
    if graphs and share > 0:
        return (f"{share:.0%} of its kernels are CUDA-graph replays ({kernels:.0f} kernels from {launches:.0f} "
                "launches per forward)")
    if graphs:
        return "its forwards replay CUDA graphs recorded whole"
    return f"its kernels are launched one by one ({kernels:.0f} kernels from {launches:.0f} launches per forward)"


def _gap_text(row, on_gpu: str) -> str | None:
    """Whose launch time makes c on launch time and c on the GPU span disagree (`diagnosis.launch_side`)."""
    side = getattr(row, "launch_side", None)
    if side not in ("draft", "target"):
        return None
    ratio = row.launch_ratio if side == "draft" else row.target_launch_ratio
    who = "the draft's" if side == "draft" else "the target's"
    launch, span = ((row.wall_ms, row.gpu_span_ms) if side == "draft" else (row.target_wall_ms, row.target_gpu_span_ms))
    how = (f"its GPU work spans {1 / ratio:.1f}× its launch time ({span:.3f} ms of GPU span launched in {launch:.3f} "
           "ms: the GPU runs on after the CPU has moved on)" if ratio < 1 else
           f"its launch time is {ratio:.1f}× its GPU span ({launch:.3f} ms against {span:.3f} ms: CPU work that "
           "launches nothing)")
    return (f"c of the forwards is {row.c_wall:.3g} on launch time but {row.c_gpu_span:.3g} on {on_gpu}: the gap "
            f"comes from {who} launch time — {how}; the GPU c is the answer.")


def _advice_text(row) -> str | None:
    """What would lower a launch-bound draft's cost, from the evidence: graphs only where it does not replay them."""
    if row.boundness not in ("launch-bound", "partly launch-bound"):
        return None
    if row.graphs:
        return ("Its GPU idles between launches although its kernels are replayed as CUDA graphs: the gaps lie "
                "between the replays or in its eager parts (sampling, bookkeeping), not in launching its kernels.")
    return ("Its GPU idles between launches the CPU is slow to make: CUDA graphs or fewer, fused kernels would lower "
            "its cost.")


def diagnosis_text(result, row) -> str:
    """The diagnosis of one draft in sentences, from a row of `result.diagnosis` (`analysis.coefficient.diagnosis`) and
    the result's kernel tables: its GPU's busy share of its GPU span and its class, how its kernels were launched
    (graph replays counted), whose launch time makes the two c's disagree, advice only where the evidence supports
    it."""
    if not row.gpu:
        why = (f"CPU-only trace ({row.cpu_only_models})" if row.cpu_only_models
               else "no GPU work launched inside the forward ranges on their own threads")
        return (f"{row.phase}: {why}, wall-clock time only: median forward {row.wall_ms:.3f} ms vs "
                f"{row.target_wall_ms:.3f} ms for the target (c of the forwards = {row.c_wall:.3g}).")
    on_gpu = "GPU span"
    busy = f"GPU busy {row.gpu_busy_ms:.3f} ms of its {row.gpu_span_ms:.3f} ms {on_gpu} ({row.busy_share:.0%})"
    if row.outlives_range:  # the work outlives the range: its launch time is no base for a share
        busy += (f", longer than the range's {row.wall_ms:.3f} ms launch time: its GPU work runs past the range that "
                 "launched it")
    else:
        busy += f", launched in {row.wall_ms:.3f} ms"
    parts = [
        f"{row.phase}: {row.boundness}: {busy}; "
        f"{_replay_text(row.replayed_share, row.graphs, row.kernels_per_forward, row.launches_per_forward)}; "
        f"{row.kernels_per_forward:.0f} kernels per forward vs {row.target_kernels_per_forward:.0f} for the target; "
        f"launch API calls {row.launch_api_ms:.3f} ms; GPU idle inside its span {row.gpu_idle_ms:.3f} ms."
    ]
    for text in (_gap_text(row, on_gpu), _advice_text(row)):
        if text:
            parts.append(text)
    from ..analysis.coefficient.diagnosis import category_comparison, top_kernels

    for text in (_category_text(category_comparison(result.categories, result.target.name, row.draft, row.phase)),
                 _top_kernels_text(top_kernels(result.kernel_summary, row.draft, row.phase))):
        if text:
            parts.append(text)
    return " ".join(parts)


def with_diagnosis(result) -> pd.DataFrame:
    """`result.diagnosis` with a `diagnosis` column: the sentences of each draft."""
    d = result.diagnosis
    return d.assign(diagnosis=[diagnosis_text(result, r) for r in d.itertuples()])
