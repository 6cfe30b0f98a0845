"""γ = 0 priced, and the held-out check's verdict.

γ = 0. A bucket of a schedule with K = 0 still runs the speculative engine: on vLLM 0.32's V1 runner (the CPU build)
one catch-up draft forward of 2 tokens per sequence and the spec path's bookkeeping every step; on its V2 GPU runner
with a draft model, the whole γ-step draft (measured on the CPU build; vLLM 0.32's source). So K = 0 is forecast
as plain decoding PLUS the measured overhead per step:
speedup_k0(B, L) = decode(B, L) ÷ (decode(B, L) + overhead(B, L)), never 1.
`K0Price` holds the overhead measured per cell (`analysis.tune.k0.overhead`'s table: batch_size, input_len,
plain_step_ms, k0_step_ms, overhead_ms, …) and prices any (B, L): the overhead at the measured cell, else linear in
B between the measured batch sizes of the nearest measured prompt length (held flat past the ends). Not measured:
`known` False, the price NaN, and the schedule is chosen against plain decoding (speedup 1) with a note that says
so — it is not free, only unmeasured.

Verdict of one held-out cell (forecast f with its interval, measured m with its interval, error = f/m − 1):
- "consistent": |error| ≤ TRUST_ERROR (10 %);
- "refuted": |error| > TRUST_ERROR and the two intervals do not overlap — the measurement contradicts the forecast
  beyond both intervals;
- "imprecise": |error| > TRUST_ERROR but the intervals overlap, or a side has no interval — not precise enough to
  check. `runs_to_decide`: the interleaved runs that would make the intervals part at this error, from the observed
  spread (an interval's half-width falls as 1/√runs; both sides' cells are measured in the same runs):
  ⌈runs × ((h_forecast + h_measured) ÷ |error|)²⌉, h the relative half-widths.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .keys import CellKey

# A held-out cell whose forecast misses its measurement by more than this (and beyond both intervals): the schedule
# is not recommended.
TRUST_ERROR = 0.10
VERDICTS = ("consistent", "refuted", "imprecise")


@dataclass(frozen=True)
class K0Price:
    """The measured K = 0 overhead per step (ms) at (B, L) cells; empty: not measured."""

    cells: tuple[tuple[int, int | None, float], ...] = ()
    source: str = ""

    @property
    def known(self) -> bool:
        return bool(self.cells)

    @classmethod
    def from_table(cls, table, source: str = "") -> K0Price:
        """From `analysis.tune.k0.overhead`'s DataFrame (rows without a finite overhead_ms left out)."""
        if table is None or len(table) == 0:
            return cls((), source)
        rows = []
        for _, r in table.iterrows():
            ms = float(r["overhead_ms"])
            if not math.isfinite(ms):
                continue
            L = r.get("input_len")
            rows.append((int(r["batch_size"]), None if L is None or (isinstance(L, float) and math.isnan(L))
                         else int(L), ms))
        return cls(tuple(sorted(rows, key=lambda x: (x[0], -1 if x[1] is None else x[1]))), source)

    def overhead_ms(self, b: int, input_len: int | None = None) -> float:
        """The overhead per step at (B, L) (module docstring); NaN when not measured."""
        if not self.cells:
            return math.nan
        lens = sorted({L for _, L, _ in self.cells if L is not None})
        at = None
        if lens and input_len is not None:
            at = min(lens, key=lambda L: (abs(L - input_len), L))
        elif lens:
            at = lens[len(lens) // 2]
        pts = sorted((bb, ms) for bb, L, ms in self.cells if L == at or at is None)
        xs = np.array([p[0] for p in pts], dtype=float)
        ys = np.array([p[1] for p in pts], dtype=float)
        return float(np.interp(b, xs, ys))

    def speedup(self, decode_ms: float, b: int, input_len: int | None = None) -> float:
        """K = 0's forecast speedup over plain decoding: decode ÷ (decode + overhead); NaN when not measured."""
        o = self.overhead_ms(b, input_len)
        return decode_ms / (decode_ms + o) if math.isfinite(o) and decode_ms > 0 else math.nan


def _half(value: float, lo: float, hi: float) -> float:
    if not (value > 0 and math.isfinite(lo) and math.isfinite(hi)):
        return math.nan
    return max(value - lo, hi - value) / value


def verdict(forecast: float, f_ci: tuple[float, float], measured: float, m_ci: tuple[float, float],
            runs: int) -> dict:
    """The held-out check's verdict (module docstring): {"verdict", "error", "intervals_overlap",
    "runs_to_decide"} (runs_to_decide 0 unless imprecise; NaN when a side has no interval to scale)."""
    err = forecast / measured - 1 if measured > 0 and math.isfinite(forecast) else math.nan
    h_f, h_m = _half(forecast, *f_ci), _half(measured, *m_ci)
    both = math.isfinite(h_f) and math.isfinite(h_m)
    overlap = bool(both and f_ci[0] <= m_ci[1] and m_ci[0] <= f_ci[1])
    if math.isfinite(err) and abs(err) <= TRUST_ERROR:
        return {"verdict": "consistent", "error": err, "intervals_overlap": overlap, "runs_to_decide": 0}
    if math.isfinite(err) and both and not overlap:
        return {"verdict": "refuted", "error": err, "intervals_overlap": False, "runs_to_decide": 0}
    need = math.nan
    if both and math.isfinite(err) and err != 0 and runs > 0:
        need = math.ceil(runs * ((h_f + h_m) / abs(err)) ** 2)
    return {"verdict": "imprecise", "error": err, "intervals_overlap": overlap, "runs_to_decide": need}


def k0_note(k0: K0Price) -> str:
    if k0.known:
        return ("γ = 0 priced: a bucket with K = 0 is forecast as plain decoding plus the K = 0 overhead measured per "
                "step (" + ", ".join(f"B={b}{'' if L is None else f' L={L}'}: +{ms:.3g} ms" for b, L, ms in k0.cells)
                + "): a γ ≥ 1 is chosen where it beats that, not where it beats plain decoding")
    return ("γ = 0 NOT priced: the K = 0 overhead was not measured (a K = 0 engine against the plain one), so a K = 0 "
            "bucket is compared as plain decoding — it is not free: vLLM still runs a draft forward and the spec "
            "path every step")


def plain_beats(forecast: Sequence[dict], lens: Sequence, k0: K0Price) -> str:
    """Where a plain engine (speculation off for the whole server) beats every schedule: the prompt lengths at
    which no γ ≥ 1 forecasts above 1 at any batch size (a schedule there is all K = 0 buckets, each paying the
    overhead), and the batch sizes where the best schedule forecasts below 1 (its K = 0 bucket's price)."""
    out = []
    for L in lens:
        rows = [r for r in forecast if r.get("input_len") == L]
        spec = [r["speedup"] for r in rows if r["gamma"] >= 1 and math.isfinite(r["speedup"])]
        at = "" if L is None else f" at L={L}"
        if spec and max(spec) <= 1.0:
            out.append(f"a plain engine beats every schedule{at}: no γ forecasts above 1× at any batch size"
                       + (" and K = 0 costs its measured overhead" if k0.known else ""))
            continue
        losing = sorted({r["batch_size"] for r in rows if r["gamma"] == 0 and math.isfinite(r["speedup"])
                         and not any(q["batch_size"] == r["batch_size"] and q["gamma"] >= 1 and q["speedup"] > 1
                                     for q in rows)})
        if losing and k0.known:
            out.append(f"{at.strip() or 'here'}: at B ≥ {losing[0]} the schedule's K = 0 bucket forecasts below 1× "
                       "(its overhead): a server that runs mostly there is faster with speculation off")
    return "; ".join(out)


def imprecise_steps(checks: Sequence[dict]) -> str:
    """What would decide the held-out cells that are not precise enough to check ("" when none is)."""
    loose = [c for c in checks if c.get("verdict") == "imprecise"]
    if not loose:
        return ""
    need = [c["runs_to_decide"] for c in loose if isinstance(c["runs_to_decide"], (int, float))
            and math.isfinite(c["runs_to_decide"])]
    cells = ", ".join(f"{CellKey.from_dict(c).label} γ={c['gamma']} ({c['error']:+.0%}".replace("%", " %")
                      + (f", ≈ {c['runs_to_decide']} runs)" if math.isfinite(c["runs_to_decide"]) else
                         ", no interval to scale: at least 3 runs)") for c in loose)
    return (f"not precise enough to check: {cells} — the forecast misses by more than {TRUST_ERROR:.0%}".replace(
        "%", " %") + " but within the intervals; "
            + (f"measure with --repeat {max(need)} (or --precision) to decide" if need else
               "measure with --repeat 3 or more so every side has an interval"))
