"""γ per batch size: the speculative step cost model across the batch, tokens per step from vLLM's per-position
counters, the schedule vLLM's dynamic speculative decoding takes, and its check on cells it was not fitted on.

Cells. A cell is one (batch size B, γ) measured in place: a speculative engine of an interleaved profile at batch B
against the plain target of the same runs (`spec_runs`). Per cell, the medians over verify steps (and their
intervals across runs) of: one draft forward, the verify forward of γ + 1 tokens per sequence, the time outside
forwards, and the plain target's decode step; the measured speedup; vLLM's per-position acceptance counters.

Cost model (times in ms, T = B·(γ + 1) the tokens a verify forward processes):

    decode_step(B)  = p0 + p1·B               a plain decode step (forward of B tokens + time around it)
    catchup(B, γ)   = k0 + k1·B·(γ + 1 + e)   the step's first draft forward, over the tokens just verified
    later(B)        = l0 + l1·B               each of its γ − 1 later draft forwards, one token per sequence
    verify(B, γ)    = v0 + v1·B·(γ + 1)       the verify forward: linear in the tokens it verifies, above a floor v0
    other(B, γ)     = o0 + o1·B + o2·B·γ      outside forwards: per-step fixed cost, per sequence, per draft token
    step(B, γ)      = catchup(B, γ) + (γ − 1)·later(B) + verify(B, γ) + other(B, γ)
    speedup(B, γ)   = E(γ) · decode_step(B) / step(B, γ)

The draft's forwards are priced apart (issue 29's in-place split: `draft_catchup_ms`, `draft_later_ms`) because they
are not alike: vLLM's draft proposer first runs the draft over the tokens the target just verified (its payload,
`draft_catchup_tokens`, is B·(γ + 1 + e) tokens: e = 1 for vLLM 0.32's draft_model proposer, read from the cells as
the median payload ÷ B − (γ + 1)), then γ − 1 forwards of one token per sequence. A single per-forward price
(d0 + d1·B, the median forward) is right at the design's γ but wrong away from it: at γ = 1 the only forward is the
catch-up, at γ = 3 the median is a later one, and at γ = 7 the catch-up carries 8 tokens a sequence. Where the cells
have no split (vLLM's own scopes trace: one draft range a step; a live window), the draft is priced per forward,
draft(B) = d0 + d1·B, γ per step, and `BatchCostModel.draft_rule` says which was used.

Why linear in tokens above a floor: a forward's cost on the CPU build and on a GPU is a fixed part (launches, weight
reads, Python) that dominates at few tokens, plus a part proportional to the tokens once compute is the limit (the
GPU's flat region is the floor; a roofline's knee is the point where the line rises above it). Each slope is fitted
non-negative (more tokens never cost less; a falling fit is noise), by least squares over the cells' medians.
The four cells of B ∈ {1, 8} × γ ∈ {1, 3} identify every coefficient: verify sees T = 2, 4, 16, 32; the catch-up
sees B·(γ + 2) = 3, 5, 24, 40; the later forwards B = 1, 8 (the γ = 3 cells); other sees B·γ = 1, 3, 8, 24 at B = 1, 8.

Tokens per step E(γ) from the per-position counters (`vllm:spec_decode_num_accepted_tokens_per_pos`): pooled over
the cells (a draft's position i is accepted with the same probability whatever γ it was drafted with: the draft
proposes position by position), a_i = Σ accepted at i ÷ Σ drafts of cells with γ > i (made non-increasing: an
accepted prefix of i + 1 tokens needs one of i), E(γ) = 1 + Σ_{i<γ} a_i. Past the largest measured position K the
i.i.d. tail: a_i = a_{K−1}·α^(i−K+1), α the pooled i.i.d. maximum-likelihood estimate (Thm 3.8's α). `E_iid(γ)` =
(1 − α^(γ+1)) / (1 − α) is given beside it everywhere.

Intervals: a parametric bootstrap — each cell's medians drawn from normals whose 95 % half-widths are their
intervals across runs, each position's acceptance from its Beta posterior, the model refitted per draw; the 2.5 and
97.5 percentiles of the forecast speedup.

Schedule: for each B in 1…max_batch_size the γ in 1…max_gamma of the highest forecast speedup, 0 (do not speculate)
where none forecasts more than 1; consecutive batch sizes with one γ become one inclusive range, as vLLM's
`num_speculative_tokens_per_batch_size` takes them (`vllm/v1/spec_decode/dynamic/utils.py` validates it). One
schedule per workload (`WORKLOADS`): a server's on the steady-state forecast (E(γ)), a benchmark's on the static
batch of the cells' output length (`TokensModel.static_batch`); the schedule check compares the benchmark's with
the measured cells (they are static-batch benchmarks).
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from ... import inputs
from ...errors import InputError
from ..profile_dir.acceptance import AcceptanceStats

DEFAULT_MAX_GAMMA = 8
WORKLOADS = ("server", "benchmark")  # steady state (continuous batching) | static batches of the cells' length
DEFAULT_MAX_BATCH = 32
BOOTSTRAP_DRAWS = 400
Z95 = 1.959963984540054
# More than this share of the bootstrap's refits blowing up (a step cost at or below 0, or not finite, somewhere on
# the grid): its percentiles are not read as an interval (`forecast_intervals`).
MAX_FAILED_DRAWS = 0.05
# A held-out cell whose forecast misses its measurement by more than this: the schedule is not recommended.
TRUST_ERROR = 0.10


@dataclass(frozen=True)
class Cell:
    """One measured (batch size, γ): medians over its verify steps (ms), their 95 % intervals, the measured speedup
    with its interval, and its spec-decode counters (None without them)."""

    batch_size: int
    gamma: int
    draft_forward_ms: float
    verify_ms: float
    other_ms: float
    decode_step_ms: float
    measured_speedup: float
    measured_ci: tuple[float, float] = (math.nan, math.nan)
    draft_forward_ci: tuple[float, float] = (math.nan, math.nan)
    verify_ci: tuple[float, float] = (math.nan, math.nan)
    other_ci: tuple[float, float] = (math.nan, math.nan)
    decode_step_ci: tuple[float, float] = (math.nan, math.nan)
    tokens_per_step: float = math.nan
    acceptance: AcceptanceStats | None = None
    label: str = ""
    source: str = ""
    # the measured step ratio at vLLM's tokens per step (its counters): the cost check without the benchmark's
    # stragglers (a static batch waits for its slowest sequence, so the trace's tokens per step fall with B)
    measured_counters_speedup: float = math.nan
    output_len: int = 0  # tokens generated per sequence in the benchmark (0: unknown)
    # the draft's forwards apart (module docstring): the step's first (catch-up) forward, its payload (tokens), one
    # later forward (NaN at γ = 1: there is none); NaN throughout where the trace has no split
    draft_catchup_ms: float = math.nan
    draft_catchup_ci: tuple[float, float] = (math.nan, math.nan)
    draft_catchup_tokens: float = math.nan
    draft_later_ms: float = math.nan
    draft_later_ci: tuple[float, float] = (math.nan, math.nan)
    # an engine running vLLM's whole schedule (`SCHEDULE_MARK` in its label; `gamma` is its num_speculative_tokens):
    # not a fixed-γ cell, never fitted or checked, compared with the fixed-γ cells of its round (`with_schedule_runs`)
    schedule_run: bool = False
    replayed_runs: int = 0  # runs whose counters replay another run's exactly, counted once (`spec_runs.pool_stats`)

    @property
    def key(self) -> tuple[int, int]:
        return (self.batch_size, self.gamma)

    def to_dict(self) -> dict:
        return {"batch_size": self.batch_size, "gamma": self.gamma, "label": self.label, "source": self.source,
                "draft_forward_ms": self.draft_forward_ms, "verify_ms": self.verify_ms, "other_ms": self.other_ms,
                "decode_step_ms": self.decode_step_ms, "draft_catchup_ms": self.draft_catchup_ms,
                "draft_catchup_tokens": self.draft_catchup_tokens, "draft_later_ms": self.draft_later_ms,
                "tokens_per_step": self.tokens_per_step,
                "measured_speedup": self.measured_speedup, "measured_ci_low": self.measured_ci[0],
                "measured_ci_high": self.measured_ci[1],
                "accepted_per_position": list(self.acceptance.accepted_per_position) if self.acceptance else None,
                "num_drafts": self.acceptance.num_drafts if self.acceptance else None}


def _sd(value: float, ci: tuple[float, float]) -> float:
    lo, hi = ci
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return 0.0
    return max(hi - lo, 0.0) / (2 * Z95)


# --- tokens per step --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class TokensModel:
    """Expected tokens per step from per-position acceptance (module docstring). `rates[i]`: probability that the first
    i + 1 draft tokens are accepted, positions 0…K−1 measured; `alpha`: the i.i.d. α for the tail and for E_iid."""

    rates: tuple[float, ...]
    alpha: float
    drafts: tuple[int, ...] = ()       # drafts that reached each position (the counters' denominators)
    accepted: tuple[int, ...] = ()
    judged: tuple[int, int] = (0, 0)   # (accepted, rejections): the i.i.d. model's trials

    @property
    def measured_positions(self) -> int:
        return len(self.rates)

    def rate(self, i: int) -> float:
        k = len(self.rates)
        if i < k:
            return self.rates[i]
        last = self.rates[-1] if k else 1.0
        return last * self.alpha ** (i - k + 1)

    def expected(self, gamma: int) -> float:
        """E(γ) = 1 + Σ_{i<γ} a_i; i.i.d. tail past the measured positions."""
        return 1.0 + sum(self.rate(i) for i in range(int(gamma)))

    def static_batch(self, gamma: int, batch: int, tokens: int) -> float:
        """Tokens per sequence per step in a benchmark iteration: `batch` sequences generating `tokens` tokens each
        after the prefill, the batch stepping until its slowest sequence is done (what the trace's tokens per step
        measure: tokens ÷ verify steps per iteration). Below E(γ) where the last step of a sequence is cut short
        (vLLM stops a sequence at its max_tokens: accepted tokens past it are dropped) or the batch waits for a
        straggler. Exact, not sampled: the distribution of a sequence's tokens after s steps (each step 1 … γ + 1
        tokens, P(≥ j + 1) = a_j; capped at `tokens`) gives F(s) = P(done within s steps); the batch's steps are the
        maximum of `batch` independent sequences, E = Σ_s (1 − F(s)^batch); the result is tokens ÷ E."""
        if tokens <= 0 or gamma < 1 or batch < 1:
            return math.nan
        p_ge = np.array([1.0, *(self.rate(i) for i in range(gamma)), 0.0])  # P(accepted ≥ j), j = 0 … γ + 1
        p_k = np.clip(p_ge[:-1] - p_ge[1:], 0, None)  # P(k + 1 tokens in a step), k = 0 … γ
        p_k = p_k / p_k.sum()
        dist = np.zeros(tokens + 1)  # P(tokens so far = t), t capped at `tokens`
        dist[0] = 1.0
        expected_steps = 0.0
        for _ in range(tokens):  # at least one token a step: done within `tokens` steps
            expected_steps += 1.0 - dist[tokens] ** batch
            nxt = np.zeros_like(dist)
            nxt[tokens] = dist[tokens]
            for k, pk in enumerate(p_k):
                if pk:
                    moved = dist[:tokens] * pk
                    idx = np.minimum(np.arange(tokens) + k + 1, tokens)
                    np.add.at(nxt, idx, moved)
            dist = nxt
        return float(tokens / expected_steps)

    def expected_iid(self, gamma: int) -> float:
        a = self.alpha
        return float(gamma) + 1.0 if a >= 1.0 else (1.0 - a ** (gamma + 1)) / (1.0 - a)

    def draw(self, rng: np.random.Generator) -> TokensModel:
        """One draw from the counters' Beta posteriors (the rates kept non-increasing)."""
        if not self.drafts:
            return self
        r = [float(rng.beta(a + 0.5, max(n - a, 0) + 0.5)) for a, n in zip(self.accepted, self.drafts)]
        rates = tuple(np.minimum.accumulate(r).tolist())
        acc, rej = self.judged
        alpha = float(rng.beta(acc + 0.5, rej + 0.5)) if acc + rej else self.alpha
        return TokensModel(rates, alpha, self.drafts, self.accepted, self.judged)


def tokens_model(cells: Sequence[Cell]) -> TokensModel:
    """The pooled per-position acceptance of `cells` (module docstring). Cells without counters are skipped; with
    none at all, α is estimated from each cell's measured tokens per step (E_iid inverted) and the rates are i.i.d."""
    known = [c for c in cells if c.acceptance is not None and c.acceptance.accepted_per_position]
    if not known:
        alphas = [_alpha_from_tokens(c.tokens_per_step, c.gamma) for c in cells]
        alphas = [a for a in alphas if math.isfinite(a)]
        if not alphas:
            raise InputError("no cell has vLLM's spec-decode counters or tokens per step: α is unknown")
        return TokensModel((), float(np.mean(alphas)))
    width = max(len(c.acceptance.accepted_per_position) for c in known if c.acceptance)
    acc, drafts = [0] * width, [0] * width
    rejected = accepted_total = 0
    for c in known:
        s = c.acceptance
        assert s is not None
        for i, n in enumerate(s.accepted_per_position):
            acc[i] += n
            drafts[i] += s.num_drafts
        accepted_total += s.num_accepted
        rejected += s.num_drafts - s.accepted_per_position[-1]
    raw = [a / n if n else math.nan for a, n in zip(acc, drafts)]
    rates = tuple(np.minimum.accumulate(np.nan_to_num(raw, nan=0.0)).tolist())
    alpha = accepted_total / (accepted_total + rejected) if accepted_total + rejected else 1.0
    return TokensModel(rates, float(alpha), tuple(drafts), tuple(acc), (accepted_total, rejected))


def _alpha_from_tokens(tokens: float, gamma: int) -> float:
    if not math.isfinite(tokens) or gamma < 1:
        return math.nan
    lo, hi = 0.0, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        e = (1 - mid ** (gamma + 1)) / (1 - mid)
        lo, hi = (mid, hi) if e < tokens else (lo, mid)
    return (lo + hi) / 2


# --- cost model -------------------------------------------------------------------------------------------------

def _nnls_slopes(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Least squares y ≈ x·β with β[0] (the intercept) free and every other β ≥ 0: the best of the fits with each
    subset of slopes forced to 0 whose free slopes come out non-negative (few columns: all subsets)."""
    keep = np.isfinite(y) & np.isfinite(x).all(axis=1)
    x, y = x[keep], y[keep]
    p = x.shape[1]
    if len(y) == 0:
        return np.full(p, np.nan)
    best, best_sse = np.zeros(p), math.inf
    for k in range(p - 1, -1, -1):
        for free in itertools.combinations(range(1, p), k):
            cols = [0, *free]
            beta_f, *_ = np.linalg.lstsq(x[:, cols], y, rcond=None)
            if (beta_f[1:] < -1e-12).any():
                continue
            beta = np.zeros(p)
            beta[cols] = beta_f
            sse = float(((x @ beta - y) ** 2).sum())
            if sse < best_sse - 1e-12:
                best, best_sse = beta, sse
    return best


def _line(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """y ≈ a + b·x with b ≥ 0 (`_nnls_slopes`); with one distinct finite x the slope is unidentified: 0, a the mean."""
    keep = np.isfinite(x) & np.isfinite(y)
    if np.unique(x[keep]).size < 2:
        return np.array([float(np.mean(y[keep])) if keep.any() else math.nan, 0.0])
    return _nnls_slopes(np.column_stack([np.ones_like(x), x]), y)


DRAFT_RULES = ("catch-up and later", "per forward")  # how the draft's forwards are priced (module docstring)


@dataclass(frozen=True)
class BatchCostModel:
    """The step cost model across batch size (module docstring); coefficients in ms. `catchup` and `later` (with the
    catch-up payload's extra tokens per sequence `catchup_extra`) price the draft's forwards apart where the cells
    measured them; without them (`draft_rule` "per forward") every draft forward costs `draft`."""

    decode: tuple[float, float]
    draft: tuple[float, float]
    verify: tuple[float, float]
    other: tuple[float, float, float]
    catchup: tuple[float, float] | None = None
    later: tuple[float, float] | None = None
    catchup_extra: float = 0.0

    @property
    def draft_rule(self) -> str:
        return DRAFT_RULES[0] if self.catchup is not None and self.later is not None else DRAFT_RULES[1]

    def decode_step_ms(self, b):
        return self.decode[0] + self.decode[1] * np.asarray(b, dtype=float)

    def draft_ms(self, b):
        return self.draft[0] + self.draft[1] * np.asarray(b, dtype=float)

    def catchup_tokens(self, b, g):
        return np.asarray(b, dtype=float) * (np.asarray(g, dtype=float) + 1 + self.catchup_extra)

    def drafts_ms(self, b, g):
        """The draft's forwards of one step: the catch-up and γ − 1 later ones, or γ at the per-forward price."""
        g = np.asarray(g, dtype=float)
        if self.catchup is None or self.later is None:
            return g * self.draft_ms(b)
        later = self.later[0] + self.later[1] * np.asarray(b, dtype=float)
        return self.catchup[0] + self.catchup[1] * self.catchup_tokens(b, g) + (g - 1) * later

    def verify_ms(self, b, g):
        return self.verify[0] + self.verify[1] * np.asarray(b, dtype=float) * (np.asarray(g, dtype=float) + 1)

    def other_ms(self, b, g):
        b, g = np.asarray(b, dtype=float), np.asarray(g, dtype=float)
        return self.other[0] + self.other[1] * b + self.other[2] * b * g

    def step_ms(self, b, g):
        return self.drafts_ms(b, g) + self.verify_ms(b, g) + self.other_ms(b, g)

    def to_dict(self) -> dict:
        out = {"draft_rule": self.draft_rule,
               "decode_step_ms": {"intercept": self.decode[0], "per_sequence": self.decode[1]},
               "draft_forward_ms": {"intercept": self.draft[0], "per_sequence": self.draft[1]},
               "verify_ms": {"intercept": self.verify[0], "per_token": self.verify[1]},
               "other_ms": {"intercept": self.other[0], "per_sequence": self.other[1],
                            "per_draft_token": self.other[2]}}
        if self.catchup is not None and self.later is not None:
            out["draft_catchup_ms"] = {"intercept": self.catchup[0], "per_token": self.catchup[1],
                                       "extra_tokens_per_sequence": self.catchup_extra}
            out["draft_later_ms"] = {"intercept": self.later[0], "per_sequence": self.later[1]}
        return out

    def describe(self) -> str:
        d, v, o, p = self.draft, self.verify, self.other, self.decode
        if self.catchup is not None and self.later is not None:
            k, lt, e = self.catchup, self.later, self.catchup_extra
            drafts = (f"catch-up({k[0]:.3g} + {k[1]:.3g}·B(γ+{1 + e:.3g})) + (γ−1) × later({lt[0]:.3g} + "
                      f"{lt[1]:.3g}·B)")
        else:
            drafts = f"γ × draft({d[0]:.3g} + {d[1]:.3g}·B)"
        return (f"step(B, γ) = {drafts} + verify({v[0]:.3g} + {v[1]:.3g}·B(γ+1)) + "
                f"outside({o[0]:.3g} + {o[1]:.3g}·B + {o[2]:.3g}·Bγ) ms, against a plain decode step of "
                f"{p[0]:.3g} + {p[1]:.3g}·B ms")


# fit_cost's parts: the Cell field of each part's median and of its 95 % interval (the bootstrap's spread)
PART_FIELDS = {"draft": ("draft_forward_ms", "draft_forward_ci"), "verify": ("verify_ms", "verify_ci"),
               "other": ("other_ms", "other_ci"), "decode": ("decode_step_ms", "decode_step_ci"),
               "catchup": ("draft_catchup_ms", "draft_catchup_ci"), "later": ("draft_later_ms", "draft_later_ci")}
COST_PARTS = tuple(PART_FIELDS)  # fit_cost's `values` keys


def cell_values(cells: Sequence[Cell]) -> dict[str, np.ndarray]:
    """The cells' medians `fit_cost` fits, keyed by COST_PARTS, in cell order."""
    return {k: np.array([getattr(c, value) for c in cells], dtype=float) for k, (value, _) in PART_FIELDS.items()}


def _catchup_extra(cells: Sequence[Cell]) -> float:
    """e of the catch-up payload B·(γ + 1 + e): the median over the cells that measured it (0 when none did)."""
    e = [c.draft_catchup_tokens / c.batch_size - (c.gamma + 1) for c in cells
         if math.isfinite(c.draft_catchup_tokens) and c.batch_size > 0]
    return float(np.median(e)) if e else 0.0


def fit_cost(cells: Sequence[Cell], values: dict[str, np.ndarray] | None = None) -> BatchCostModel:
    """`BatchCostModel` by non-negative-slope least squares over the cells' medians (`values` replaces them, for the
    bootstrap: arrays in cell order keyed by COST_PARTS, as `cell_values` gives them). The draft is priced as
    catch-up and later forwards when every cell measured its catch-up forward and a cell of γ ≥ 2 its later ones;
    else per forward."""
    if not cells:
        raise InputError("no cell to fit the cost model on")
    b = np.array([c.batch_size for c in cells], dtype=float)
    g = np.array([c.gamma for c in cells], dtype=float)
    v = values or cell_values(cells)
    one = np.ones_like(b)
    # a plain decode step is measured once per batch size (the same plain engine in every cell of that B)
    ub = np.unique(b)
    dec = np.array([np.nanmean(v["decode"][b == x]) for x in ub])
    decode = _nnls_slopes(np.column_stack([np.ones_like(ub), ub]), dec)
    draft = _nnls_slopes(np.column_stack([one, b]), v["draft"])
    verify = _nnls_slopes(np.column_stack([one, b * (g + 1)]), v["verify"])
    if np.unique(g).size >= 2:
        other = _nnls_slopes(np.column_stack([one, b, b * g]), v["other"])
    else:  # one γ seen (a live window): per sequence and per draft token are one column; outside time held per B
        other = np.append(_nnls_slopes(np.column_stack([one, b]), v["other"]), 0.0)
    catchup = later = None
    extra = 0.0
    catch_v, later_v = v.get("catchup"), v.get("later")
    if (catch_v is not None and later_v is not None and np.isfinite(catch_v).all()
            and np.isfinite(later_v[g >= 2]).any()):
        extra = _catchup_extra(cells)
        k = _line(b * (g + 1 + extra), catch_v)
        lt = _line(np.where(g >= 2, b, np.nan), later_v)
        catchup, later = (float(k[0]), float(k[1])), (float(lt[0]), float(lt[1]))
    return BatchCostModel((float(decode[0]), float(decode[1])), (float(draft[0]), float(draft[1])),
                          (float(verify[0]), float(verify[1])),
                          (float(other[0]), float(other[1]), float(other[2])), catchup, later, extra)


def speedup(cost: BatchCostModel, tokens: TokensModel, b, g, *, iid: bool = False, output_len: int = 0) -> float:
    """Forecast speedup at (B, γ): steady state (E(γ), a server's continuous batch), or with `output_len` a benchmark
    iteration of B sequences of that many tokens (`TokensModel.static_batch`)."""
    step = float(cost.step_ms(b, g))
    if output_len > 1:
        e = tokens.static_batch(int(g), int(b), output_len - 1)
    else:
        e = tokens.expected_iid(int(g)) if iid else tokens.expected(int(g))
    return e * float(cost.decode_step_ms(b)) / step if step > 0 else math.nan


# --- the whole fit: forecasts, checks, schedule -----------------------------------------------------------------

@dataclass
class TuneResult:
    """What `tune` gives: the model, forecasts per (B, γ), the held-out checks, the schedule and its check."""

    cost: BatchCostModel
    tokens: TokensModel
    fitted: list[Cell]
    held_out: list[Cell]
    forecast: list[dict]
    checks: list[dict]
    schedule: list[list[int]]
    schedule_check: list[dict]
    no_gain_from: int | None
    max_batch_size: int
    max_gamma: int
    draft: str = ""
    target: str = ""
    notes: list[str] = field(default_factory=list)
    draft_path: str = ""  # what vLLM's config names as the draft model (its folder), when known
    workload: str = "server"  # whose schedule `schedule` is (WORKLOADS)
    schedules: dict[str, list[list[int]]] = field(default_factory=dict)  # every workload's schedule
    output_len: int = 0  # the benchmark workload's tokens per sequence (the measured cells'; 0: unknown)
    # Whether the schedule is recommended (`trust`): False when a held-out cell missed by more than TRUST_ERROR or the
    # forecast has no usable interval; `trust_reason` says why, `next_steps` what to measure next. `schedule` and
    # `schedules` are the fitted tables either way; `speculative_config()` and the JSON give them only when trusted.
    trusted: bool = True
    trust_reason: str = ""
    next_steps: str = ""
    interval_note: str = ""  # why the forecast rows have no interval ("" when they have)

    def speculative_config(self, method: str = "draft_model", workload: str | None = None, *,
                           untrusted: bool = False) -> str | None:
        """vLLM's --speculative-config with the schedule (of `workload`, default the result's own; None when no
        batch size speculates, or when the schedule is not recommended — `trusted` False — unless `untrusted`: the
        fitted table, e.g. to measure it)."""
        if not self.trusted and not untrusted:
            return None
        schedule = self.schedules.get(workload, self.schedule) if workload else self.schedule
        k = max((g for _, _, g in schedule), default=0)
        if k == 0:
            return None
        doc: dict = {"method": method}
        if self.draft_path or self.draft:
            doc["model"] = self.draft_path or self.draft
        doc["num_speculative_tokens"] = k
        doc["num_speculative_tokens_per_batch_size"] = schedule
        return json.dumps(doc)

    def schedule_doc(self) -> dict:
        """schedule.json: the schedule to use and its --speculative-config — both null when it is not recommended
        (`trusted`, `trust_reason`), the fitted tables then under `fitted_num_speculative_tokens_per_batch_size`."""
        doc: dict = {"trusted": self.trusted,
                     "num_speculative_tokens_per_batch_size": self.schedule if self.trusted else None,
                     "speculative_config": self.speculative_config(), "workload": self.workload,
                     "schedules": {w: sch if self.trusted else None for w, sch in self.schedules.items()}}
        if not self.trusted:
            doc.update({"fitted_num_speculative_tokens_per_batch_size": self.schedule,
                        "fitted_schedules": dict(self.schedules), "not_recommended": self.trust_reason,
                        "next_steps": self.next_steps})
        return doc

    def to_dict(self) -> dict:
        return {"trusted": self.trusted, "trust_reason": self.trust_reason or None,
                "next_steps": self.next_steps or None,
                "num_speculative_tokens_per_batch_size": self.schedule if self.trusted else None,
                **({} if self.trusted else {"fitted_num_speculative_tokens_per_batch_size": self.schedule}),
                "speculative_config": self.speculative_config(), "workload": self.workload,
                "schedules": {w: {"num_speculative_tokens_per_batch_size": sch if self.trusted else None,
                                  **({} if self.trusted else {"fitted_num_speculative_tokens_per_batch_size": sch}),
                                  "speculative_config": self.speculative_config(workload=w)}
                              for w, sch in self.schedules.items()},
                "forecast_interval_note": self.interval_note or None,
                "benchmark_output_len": self.output_len,
                "no_gain_from_batch_size": self.no_gain_from, "max_batch_size": self.max_batch_size,
                "max_gamma": self.max_gamma, "target": self.target, "draft": self.draft,
                "model": self.cost.to_dict(), "model_text": self.cost.describe(),
                "tokens": {"per_position": list(self.tokens.rates), "alpha_iid": self.tokens.alpha,
                           "measured_positions": self.tokens.measured_positions,
                           "extrapolation": "i.i.d. tail: a_i = a_(K-1) * alpha^(i-K+1) past the measured K"},
                "forecast": self.forecast, "checks": self.checks, "schedule_check": self.schedule_check,
                "fitted_cells": [c.to_dict() for c in self.fitted],
                "held_out_cells": [c.to_dict() for c in self.held_out], "notes": self.notes}


def _draws(cells: Sequence[Cell], tokens: TokensModel, n: int, seed: int):
    rng = np.random.default_rng(seed)
    base = cell_values(cells)
    sds = {k: np.array([_sd(getattr(c, value), getattr(c, ci)) for c in cells])
           for k, (value, ci) in PART_FIELDS.items()}
    out = []
    for _ in range(n):
        vals = {k: base[k] + rng.standard_normal(len(cells)) * sds[k] for k in COST_PARTS}
        out.append((fit_cost(cells, vals), tokens.draw(rng)))
    return out


@dataclass(frozen=True)
class ForecastIntervals:
    """The bootstrap's percentiles of the steady-state forecast over a grid of (B, γ) (`forecast_intervals`): `low`,
    `high` indexed [i_b, i_g] (NaN where there is no usable interval), the draws made and those dropped because
    their refit blew up, and `reason`: why there is no interval anywhere ("" when there are intervals)."""

    low: np.ndarray
    high: np.ndarray
    draws: int
    failed: int
    reason: str = ""
    outside: int = 0  # grid points whose estimate fell outside its own percentiles: no interval there

    @property
    def usable(self) -> bool:
        return not self.reason and self.outside == 0


def _grid_speedups(cost: BatchCostModel, tokens: TokensModel, bs: Sequence[int], gs: Sequence[int]) -> np.ndarray:
    """The steady-state forecast over bs × gs ([i_b, i_g]); NaN where the step costs nothing or less, or the decode
    step does (a refit that blew up)."""
    b = np.asarray(bs, dtype=float)[:, None]
    g = np.asarray(gs, dtype=float)[None, :]
    step = np.asarray(cost.step_ms(b, g), dtype=float)
    dec = np.asarray(cost.decode_step_ms(b), dtype=float)
    e = np.array([tokens.expected(int(x)) for x in gs])[None, :]
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where((step > 0) & (dec > 0), e * dec / step, np.nan)


def forecast_intervals(draws, bs: Sequence[int], gs: Sequence[int], estimate: np.ndarray | None = None,
                       cells: Sequence[Cell] = ()) -> ForecastIntervals:
    """The bootstrap's 2.5 and 97.5 percentiles of the steady-state speedup for every (B, γ) of bs × gs, per draw
    one vectorised step(B, γ) over the grid (what `speedup` computes, cell by cell). A draw whose refit blew up —
    a step or decode step at or below 0, or not finite, anywhere on the grid: a negative or infinite speedup — is
    dropped and counted, not read as a percentile; with more than MAX_FAILED_DRAWS of them, or fitted `cells` whose
    medians have no interval (the bootstrap would then vary the acceptance alone), there is no interval at all (NaN,
    and `reason` says why). A grid point whose `estimate` lies outside its own percentiles gets none either."""
    nb, ng = len(bs), len(gs)
    nan = np.full((nb, ng), np.nan)
    missing = _cells_without_interval(cells)
    if missing:
        return ForecastIntervals(nan, nan.copy(), len(draws), 0, missing)
    grids = [_grid_speedups(cost, tokens, bs, gs) for cost, tokens in draws]
    ok = [x for x in grids if np.isfinite(x).all() and (x > 0).all()]
    failed = len(grids) - len(ok)
    if not grids or failed > MAX_FAILED_DRAWS * len(grids):
        return ForecastIntervals(nan, nan.copy(), len(grids), failed,
                                 f"{failed} of {len(grids)} bootstrap refits blew up (a step cost at or below 0 "
                                 f"somewhere from B = 1 to {max(bs)}): the cells' medians are too uncertain for the "
                                 "model's slopes, and percentiles of the rest would not be a 95 % interval")
    stack = np.stack(ok)
    low, high = np.percentile(stack, 2.5, axis=0), np.percentile(stack, 97.5, axis=0)
    outside = 0
    if estimate is not None:
        bad = ~((low <= estimate) & (estimate <= high)) | ~(low > 0)
        outside = int(bad.sum())
        low, high = np.where(bad, np.nan, low), np.where(bad, np.nan, high)
    return ForecastIntervals(low, high, len(grids), failed, "", outside)


def _cells_without_interval(cells: Sequence[Cell]) -> str:
    """Why the fitted cells give the bootstrap nothing to draw from ("" when each has an interval on every part it
    measured): cells of two runs have none (`stats`: their two values, no interval)."""
    lacking = [c for c in cells if any(math.isfinite(getattr(c, value)) and not all(map(math.isfinite, getattr(c, ci)))
                                       for value, ci in PART_FIELDS.values())]
    if not lacking:
        return ""
    return (f"{len(lacking)} of the {len(cells)} fitted cells have no interval on their medians (two runs give their "
            "two values, no interval), so the bootstrap would vary the acceptance alone")


def _interval(intervals: ForecastIntervals, bs: Sequence[int], gs: Sequence[int], b: int,
              g: int) -> tuple[float, float]:
    """The forecast interval of (b, γ) from the grid's, NaN off the grid."""
    if b not in bs or g not in gs:
        return (math.nan, math.nan)
    i, j = list(bs).index(b), list(gs).index(g)
    return (float(intervals.low[i, j]), float(intervals.high[i, j]))


def _rel_half(value: float, ci: tuple[float, float]) -> float:
    lo, hi = ci
    if not (value > 0 and math.isfinite(lo) and math.isfinite(hi)):
        return math.nan
    return max(value - lo, hi - value) / value


def schedule_ranges(best: Sequence[int]) -> list[list[int]]:
    """[[start, end, γ], …] (inclusive, 1-based) from the best γ of batch sizes 1, 2, …"""
    out: list[list[int]] = []
    for i, g in enumerate(best, 1):
        if out and out[-1][2] == g:
            out[-1][1] = i
        else:
            out.append([i, i, int(g)])
    return out


def _no_gain_from(best: Sequence[int]) -> int | None:
    no_gain = None
    for i in range(len(best), 0, -1):
        if best[i - 1] != 0:
            break
        no_gain = i
    return no_gain


def tune(fitted: Sequence[Cell], held_out: Sequence[Cell] = (), *, max_batch_size: int = DEFAULT_MAX_BATCH,
         max_gamma: int = DEFAULT_MAX_GAMMA, draws: int = BOOTSTRAP_DRAWS, seed: int = 0, target: str = "",
         draft: str = "", workload: str = "server", output_len: int | None = None) -> TuneResult:
    """Fit on `fitted`, forecast every B ≤ max_batch_size and γ ≤ max_gamma, check `held_out`, choose the schedule.

    Two schedules are chosen (`WORKLOADS`): the server's, on the steady-state forecast (E(γ) tokens per step: a
    continuously batched server, what vLLM's table is for), and the benchmark's, on the static-batch forecast of B
    sequences of `output_len` tokens waiting for the slowest (default: the measured cells' output length) — what a
    measured cell is. `workload` says which one is `schedule` (and the --speculative-config); the schedule check
    compares the benchmark's with the measured cells, like with like."""
    if max_batch_size < 1 or max_gamma < 1:
        raise InputError("max_batch_size and max_gamma must be ≥ 1")
    if workload not in WORKLOADS:
        raise InputError(f"workload must be one of {', '.join(WORKLOADS)}, not {workload!r}", param="workload")
    fitted = list(fitted)
    if not fitted:
        raise InputError("no measured cell to fit on")
    notes: list[str] = []
    if len({c.batch_size for c in fitted}) < 2:
        notes.append("the fit saw one batch size: every per-sequence and per-token slope is 0 (the model does not "
                     "extrapolate in B; profile a second batch size)")
    cells_all = [*fitted, *held_out]
    if replays := [c for c in cells_all if c.replayed_runs]:
        why = "(vLLM seeds every run alike: the same tokens, the same drafts), counted once"
        counts = {c.replayed_runs for c in replays}
        if len(replays) == len(cells_all) and len(counts) == 1:
            notes.append(f"in every cell the spec-decode counters of {counts.pop()} run(s) replay another run's "
                         f"exactly {why}")
        else:
            notes.append(f"the spec-decode counters of {len(replays)} cell(s) replay another run's exactly {why}: "
                         + ", ".join(f"B={c.batch_size} γ={c.gamma} ({c.replayed_runs} of its runs)" for c in replays))
    n_out = int(output_len) if output_len is not None else max((c.output_len for c in cells_all), default=0)
    cost = fit_cost(fitted)
    tokens = tokens_model(cells_all)  # counters of every cell: acceptance does not depend on the cost fit
    boot = _draws(fitted, tokens, draws, seed)
    gammas = range(1, max_gamma + 1)
    batches = range(1, max_batch_size + 1)
    intervals = forecast_intervals(boot, batches, gammas, _grid_speedups(cost, tokens, batches, gammas), fitted)
    ci_low, ci_high = intervals.low, intervals.high
    forecast: list[dict] = []
    best: dict[str, list[int]] = {"server": [], "benchmark": []}
    for b in range(1, max_batch_size + 1):
        row_best = {"server": (0, 1.0), "benchmark": (0, 1.0)}
        for g in gammas:
            s = speedup(cost, tokens, b, g)
            e_bench = tokens.static_batch(g, b, n_out - 1) if n_out > 1 else tokens.expected(g)
            s_bench = s * e_bench / tokens.expected(g)  # the same step, the benchmark's tokens per step
            lo, hi = float(ci_low[b - 1, g - 1]), float(ci_high[b - 1, g - 1])
            scale = s_bench / s if s > 0 else math.nan
            forecast.append({"batch_size": b, "gamma": g, "alpha": tokens.alpha,
                             "tokens_per_step": tokens.expected(g), "tokens_per_step_iid": tokens.expected_iid(g),
                             "speedup": s, "speedup_ci_low": lo, "speedup_ci_high": hi,
                             "speedup_iid": speedup(cost, tokens, b, g, iid=True),
                             "tokens_per_step_benchmark": e_bench,
                             "speedup_benchmark": s_bench, "speedup_benchmark_ci_low": lo * scale,
                             "speedup_benchmark_ci_high": hi * scale,
                             "step_ms": float(cost.step_ms(b, g)), "decode_step_ms": float(cost.decode_step_ms(b))})
            for w, v in (("server", s), ("benchmark", s_bench)):
                if math.isfinite(v) and v > row_best[w][1]:
                    row_best[w] = (g, v)
        for w in best:
            best[w].append(row_best[w][0])
    schedules = {w: schedule_ranges(best[w]) for w in WORKLOADS}
    if n_out <= 1:
        notes.append("the benchmark's output length is unknown: its schedule is the server's (steady state)")
    no_gain = _no_gain_from(best[workload])
    if no_gain == 1 and best[workload][0] == 0:
        notes.append("no γ pays at any batch size: the schedule speculates nowhere (run without --speculative-config)")
    checks = []
    for c in held_out:
        # like against like: the cell is a benchmark of static batches of output_len tokens; its forecast too
        f = speedup(cost, tokens, c.batch_size, c.gamma, output_len=c.output_len)
        steady = speedup(cost, tokens, c.batch_size, c.gamma)
        here = (intervals if intervals.reason else
                forecast_intervals(boot, [c.batch_size], [c.gamma], np.array([[steady]]), fitted))
        ci = (math.nan, math.nan) if here.reason else _interval(here, [c.batch_size], [c.gamma], c.batch_size, c.gamma)
        if c.output_len > 1 and steady > 0:
            ci = (ci[0] * f / steady, ci[1] * f / steady)
        err = f / c.measured_speedup - 1 if c.measured_speedup > 0 else math.nan
        halves = [_rel_half(c.measured_speedup, c.measured_ci), _rel_half(f, ci)]
        # the runs' own precision: NaN where neither side has an interval (two runs), not ±0 %
        tol = (math.hypot(*(h if math.isfinite(h) else 0.0 for h in halves)) if any(map(math.isfinite, halves))
               else math.nan)
        checks.append({"batch_size": c.batch_size, "gamma": c.gamma, "label": c.label, "output_len": c.output_len,
                       "forecast": f, "forecast_steady_state": steady, "forecast_ci_low": ci[0],
                       "forecast_ci_high": ci[1],
                       "forecast_iid": speedup(cost, tokens, c.batch_size, c.gamma, iid=True),
                       "measured": c.measured_speedup, "measured_ci_low": c.measured_ci[0],
                       "measured_ci_high": c.measured_ci[1], "error": err,
                       "measured_counters": c.measured_counters_speedup,
                       "error_counters": (steady / c.measured_counters_speedup - 1 if c.measured_counters_speedup > 0
                                          else math.nan), "tolerance": tol,
                       "within_precision": bool(math.isfinite(err) and abs(err) <= tol),
                       "within_10pct": bool(math.isfinite(err) and abs(err) <= TRUST_ERROR)})
    # the measured cells are benchmarks: the benchmark workload's schedule is the one they can check
    sched_check = schedule_check(cells_all, best["benchmark"], server=best["server"])
    if intervals.failed and not intervals.reason:
        notes.append(f"{intervals.failed} of {intervals.draws} bootstrap refits blew up (a step cost at or below 0 "
                     "somewhere on the grid): dropped, the intervals are the percentiles of the rest")
    if intervals.outside and not intervals.reason:
        notes.append(f"{intervals.outside} of {intervals.low.size} forecasts lie outside their own bootstrap "
                     "percentiles (the refits are skewed there): no interval is given for them")
    reason, advice = trust(checks, intervals, held_out, fitted)
    return TuneResult(cost, tokens, fitted, list(held_out), forecast, checks, schedules[workload], sched_check,
                      no_gain, max_batch_size, max_gamma, draft, target, notes, workload=workload,
                      schedules=schedules, output_len=n_out, trusted=not reason, trust_reason=reason,
                      next_steps=advice, interval_note=intervals.reason)


def trust(checks: Sequence[dict], intervals: ForecastIntervals, held_out: Sequence[Cell],
          fitted: Sequence[Cell] = ()) -> tuple[str, str]:
    """(why the schedule is not recommended, what to measure next), ("", "") when it is: a held-out cell whose
    forecast misses its measurement by more than TRUST_ERROR refutes the model the schedule comes from, and a
    forecast without usable intervals (`forecast_intervals`) says nothing of how far it may be off."""
    why, next_steps = [], []
    misses = [c for c in checks if not c["within_10pct"]]
    if misses:
        worst = max(misses, key=lambda c: abs(c["error"]) if math.isfinite(c["error"]) else math.inf)
        why.append(f"{len(misses)} of {len(checks)} held-out cell(s) miss their measurement by more than "
                   f"{TRUST_ERROR:.0%}".replace("%", " %") + " — " + "; ".join(
                       f"B={c['batch_size']} γ={c['gamma']}: forecast {c['forecast']:.3g}× vs measured "
                       f"{c['measured']:.3g}× ({c['error']:+.0%})".replace("%)", " %)") for c in misses)
                   + ": the cost model the schedule comes from does not forecast cells it was not fitted on")
        fit_b = sorted({c.batch_size for c in fitted})
        beyond = sorted({c["batch_size"] for c in misses if fit_b and not fit_b[0] <= c["batch_size"] <= fit_b[-1]})
        if beyond:
            wider = ",".join(map(str, sorted({*fit_b, *beyond})))
            next_steps.append(f"the design's batch sizes span {fit_b[0]}–{fit_b[-1]} and B = "
                              f"{', '.join(map(str, beyond))} lies beyond them: fit on a design that covers the batch "
                              f"sizes you serve (e.g. --batch-size {wider}) and keep other cells as checks (--check)")
        next_steps.append(f"measure again on a quiet machine with at least 3 interleaved runs (--repeat 3 or more), "
                          f"the missed cell kept as a check (--check {worst['batch_size']}:{worst['gamma']}), so every "
                          "cell has an interval across runs: a miss larger than that is the model's, a smaller one "
                          "the machine's")
    if intervals.reason:
        why.append(f"the forecast has no usable interval: {intervals.reason}")
        if "no interval on their medians" in intervals.reason:
            if not misses:  # the advice on a miss says it already
                next_steps.append("profile at least 3 interleaved runs (--repeat 3) so every cell's medians have an "
                                  "interval across runs")
        else:
            next_steps.append("measure more iterations and runs per cell (--num-iters, --repeat) so the cells' "
                              "medians pin the model's slopes down")
    elif intervals.outside:
        why.append(f"{intervals.outside} forecast(s) lie outside their own bootstrap interval (the refits are "
                   "skewed): the forecast's precision is unknown there")
        next_steps.append("measure more runs per cell (--repeat) so the refits settle around the fit")
    if not why:
        return "", ""
    if not held_out and not misses:
        next_steps.append("add held-out cells (--check B:γ) to check the forecast on")
    return "; ".join(why), "; ".join(dict.fromkeys(next_steps))


def schedule_check(cells: Sequence[Cell], best: Sequence[int], *, server: Sequence[int] | None = None) -> list[dict]:
    """Per measured batch size: the schedule's γ (`best`, per batch size 1, 2, …: the benchmark workload's) against
    the best fixed γ measured there (γ = 0 is the plain target: speedup 1). The schedule's measured speedup is
    unknown (NaN) when its γ was not measured at that B. `server`: the server workload's γ per batch size, shown
    beside it (with its measured speedup where that γ was measured; not what the bar checks)."""

    def at(seq: Sequence[int], b: int) -> int:
        return seq[b - 1] if b <= len(seq) else (seq[-1] if seq else 0)

    out = []
    for b in sorted({c.batch_size for c in cells}):
        here = {c.gamma: c.measured_speedup for c in cells if c.batch_size == b}
        here.setdefault(0, 1.0)
        g_best = max(here, key=lambda g: here[g])
        g_sched = at(best, b)
        m = here.get(g_sched, math.nan)
        gap = m / here[g_best] - 1 if math.isfinite(m) else math.nan
        row = {"batch_size": b, "workload": "benchmark", "schedule_gamma": g_sched, "schedule_measured": m,
               "best_fixed_gamma": g_best, "best_fixed_measured": here[g_best], "gap": gap,
               "within_5pct": bool(math.isfinite(gap) and gap >= -0.05), "measured_gammas": sorted(here)}
        if server is not None:
            g_server = at(server, b)
            m_server = here.get(g_server, math.nan)
            row.update({"server_gamma": g_server, "server_measured": m_server,
                        "server_gap": m_server / here[g_best] - 1 if math.isfinite(m_server) else math.nan})
        out.append(row)
    return out


def with_schedule_runs(rows: Sequence[dict], runs: Sequence[Cell], cells: Sequence[Cell], table: Sequence,
                       *, device: str) -> list[dict]:
    """The schedule check's rows with the engines that ran vLLM's whole schedule (`table`, one engine serving every
    batch size) beside them: per batch size its measured speedup and interval, and its gap to the best fixed γ
    measured in the same round (`cells`: that round's fixed-γ cells; γ = 0 is the plain target). On the CPU vLLM
    0.32's V1 runner ignores the table, so the engine ran its num_speculative_tokens at every batch size: said in
    `schedule_run_note`."""
    by_b = {c.batch_size: c for c in runs}
    out = []
    for row in rows:
        row = dict(row)
        run = by_b.get(row["batch_size"])
        if run is not None:
            here = {c.gamma: c.measured_speedup for c in cells if c.batch_size == row["batch_size"]}
            here.setdefault(0, 1.0)
            best = max(here.values())
            row.update({"schedule_run_measured": run.measured_speedup, "schedule_run_ci_low": run.measured_ci[0],
                        "schedule_run_ci_high": run.measured_ci[1], "schedule_run_gap": run.measured_speedup / best - 1,
                        "schedule_run_table": [list(r) for r in table],
                        "schedule_run_note": "" if device == "gpu" else
                        f"the CPU build's V1 runner ignores the table: γ = {run.gamma} ran at every batch size"})
        out.append(row)
    return out


# --- reading measured cells -------------------------------------------------------------------------------------

_CELL_DIR = r"bs(\d+)(?:$|[-_])"


def batch_of_dir(name: str) -> int | None:
    """The batch size a cell directory is named after (`bs8`, sweep's `bs8-in128`), else None."""
    import re

    m = re.match(_CELL_DIR, name)
    return int(m.group(1)) if m else None


def _counters(directory, label: str) -> tuple[AcceptanceStats | None, int]:
    """The spec-decode counters of engine `label` over the runs of `directory`, replays counted once, and how many
    runs were replays."""
    from pathlib import Path

    from ..profile_dir import acceptance as acceptance_mod
    from ..speculative.pooled import pool_stats, replayed_runs

    d = Path(directory)
    paths = sorted(d.glob(f"run-*/{label}.metrics.json")) or sorted(d.glob(f"{label}.metrics.json"))
    if not paths:
        return None, 0
    stats = [acceptance_mod.load(p) for p in paths]
    return pool_stats(stats), replayed_runs(stats)


def _ci(row, col: str) -> tuple[float, float]:
    lo, hi = row.get(f"{col}_ci_low", math.nan), row.get(f"{col}_ci_high", math.nan)
    return (float(lo) if lo is not None else math.nan, float(hi) if hi is not None else math.nan)


def _num(row, col: str) -> float:
    x = row.get(col, math.nan)
    return float(x) if x is not None else math.nan


def _output_len(directory) -> int:
    """The benchmark's --output-len, from the launcher's record of the commands (0 when it cannot be read)."""
    import re
    from pathlib import Path

    for done in sorted(Path(directory).glob("run-*/done.json")) + sorted(Path(directory).glob("*.done.json")):
        try:
            m = re.search(r"--output-len[\"', =]+(\d+)", inputs.read_text(done, "run record", errors="replace"))
        except InputError:
            continue
        if m:
            return int(m.group(1))
    return 0


SCHEDULE_MARK = ".schedule"  # a schedule engine's label: bs<B>.<draft>.schedule.spec-g<k> (`launch.interleaved`)


def _cell(row, b: int, sub, label: str, source: str) -> Cell:
    """A cell from a row of the speculative table (`SpeculativeAnalysis.table`) of batch size `b`; its counters and
    the benchmark's output length from `sub`, the profile directory, under the engine `label`."""
    acceptance, replayed = _counters(sub, label)
    return Cell(
        batch_size=b, gamma=int(row["gamma"]), draft_forward_ms=float(row["draft_forward_ms"]),
        verify_ms=float(row["verify_ms"]), other_ms=float(row["other_ms"]),
        decode_step_ms=float(row["decode_step_ms"]), measured_speedup=float(row["measured_speedup"]),
        measured_ci=_ci(row, "measured_speedup"), draft_forward_ci=_ci(row, "draft_forward_ms"),
        verify_ci=_ci(row, "verify_ms"), other_ci=_ci(row, "other_ms"),
        decode_step_ci=_ci(row, "decode_step_ms"), tokens_per_step=float(row["tokens_per_step"]),
        acceptance=acceptance, replayed_runs=replayed, label=label, source=source,
        measured_counters_speedup=float(row["tokens_per_step_metrics"]) * float(row["decode_step_ms"])
        / float(row["step_ms"]), output_len=_output_len(sub),
        draft_catchup_ms=_num(row, "draft_catchup_ms"), draft_catchup_ci=_ci(row, "draft_catchup_ms"),
        draft_catchup_tokens=_num(row, "draft_catchup_tokens"), draft_later_ms=_num(row, "draft_later_ms"),
        draft_later_ci=_ci(row, "draft_later_ms"))


def design_labels(directory) -> dict[int, tuple[str, list[str]]] | None:
    """A tune design's profile directory (every cell in the same runs, `launch.interleaved.design_engines`): batch
    size → (its plain target's label, its speculative engines' labels), of the engines with forwards in every
    completed run; None when `directory` is not one (no engine labelled `bs<B>.…`)."""
    from ..profile_dir import outputs
    from ..profile_dir.spec_labels import DESIGN_LABEL_RE, LABEL_RE

    if not outputs.is_profile_output(directory):
        return None
    out = outputs.read_output(directory)
    if not out.interleaved:
        return None
    by_b: dict[int, tuple[str, list[str]]] = {}
    found = False
    for m in out.models:
        match = DESIGN_LABEL_RE.match(m.label)
        if match is None:
            continue
        found = True
        if not m.done:
            continue
        b = int(match.group("batch"))
        target, spec = by_b.get(b, ("", []))
        if LABEL_RE.match(match.group("model")):
            spec = [*spec, m.label]
        else:
            target = m.label
        by_b[b] = (target, spec)
    return {b: v for b, v in sorted(by_b.items()) if v[0] and v[1]} if found else None


def _read_design(directory, labels: dict[int, tuple[str, list[str]]], seed: int) -> list[Cell]:
    """The cells of a design directory: at each batch size its speculative engines against its plain target of the
    same runs (`coefficient.cost_coefficient_runs` with those engines, as `analyze` reads a profile)."""
    import os

    from ..coefficient.over_runs import cost_coefficient_runs
    from ..profile_dir.spec_labels import DESIGN_LABEL_RE

    cells: list[Cell] = []
    for b, (target, spec) in labels.items():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            result = cost_coefficient_runs(os.fspath(directory), names=[target, *spec], seed=seed)
        table = getattr(result.speculative, "table", None)
        if table is None or table.empty:
            continue
        for _, row in table.iterrows():
            label = str(row["name"])
            cell = _cell(row, b, directory, label, f"{os.fspath(directory)}:{label}")
            cells.append(dataclasses.replace(cell, label=DESIGN_LABEL_RE.sub(r"\g<model>", label),
                                             schedule_run=SCHEDULE_MARK + ".spec-g" in label))
    return cells


ROUND_PREFIX = "round-"  # a tune's rounds: round-1/, round-2/, … (`nsys_cc.tuning`)


def rounds(directory) -> list:
    """The `round-<k>/` directories of a tune directory, in order of k (none when it is not a directory)."""
    import re
    from pathlib import Path

    root = Path(directory)
    found = [(int(m.group(1)), p) for p in root.iterdir()
             if p.is_dir() and (m := re.fullmatch(ROUND_PREFIX + r"(\d+)", p.name))] if root.is_dir() else []
    return [p for _, p in sorted(found)]


def _latest_design(directory):
    """(the last `round-<k>/` of a tune directory with a design's cells in it, its `design_labels`), or None."""
    return next(((p, labels) for p in reversed(rounds(directory)) if (labels := design_labels(p))), None)


def latest_round(directory):
    """The last `round-<k>/` of a tune directory with a design's cells in it (every cell of a round is measured in
    the same runs; a later round holds the earlier's cells and more), None without one."""
    found = _latest_design(directory)
    return found[0] if found else None


def read_cells(directory, *, seed: int = 0, schedule_runs: bool = False) -> list[Cell]:
    """Every speculative cell of a tune (or sweep) directory. A tune's: its last round (`latest_round`), or a design
    directory itself, every cell measured in the same interleaved runs (`design_labels`); an older tune's or a
    sweep's: each sub-directory named `bs<B>…` is a profile directory analysed as `nsys_cc.analyze` does, one cell
    per speculative engine in it. The engines that ran vLLM's whole schedule (`Cell.schedule_run`) only with
    `schedule_runs` (they are no fixed-γ cell)."""
    import os
    from pathlib import Path

    from ..coefficient.sources import analyze_source as analyze  # what nsys_cc.analyze does with a profile directory

    root = Path(directory)
    if not root.is_dir():
        raise InputError(f"{os.fspath(directory)} is not a directory")
    labels = design_labels(root)
    found = (root, labels) if labels else _latest_design(root)
    if found is not None:
        design, labels = found
        cells = [c for c in _read_design(design, labels, seed) if schedule_runs or not c.schedule_run]
        if not cells:
            raise InputError(f"{os.fspath(design)}: no speculative cell with forwards in its runs")
        return cells
    cells = []
    subs = sorted((p for p in root.iterdir() if p.is_dir() and batch_of_dir(p.name) is not None),
                  key=lambda p: (batch_of_dir(p.name), p.name))
    if not subs:
        raise InputError(f"{os.fspath(directory)} has no cell directory (round-<k>/ or bs<B>/, as `nsys-cc tune` "
                         "or `nsys-cc sweep` write them)")
    for sub in subs:
        b = batch_of_dir(sub.name)
        assert b is not None
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                result = analyze(os.fspath(sub), seed=seed)
        except InputError as exc:  # a cell not profiled yet, or broken: the others still count
            from ... import progress

            progress.say(f"tune: {sub.name} skipped: {exc}")
            continue
        spec = getattr(result, "speculative", None)
        if spec is None or spec.table.empty:
            continue
        for _, row in spec.table.iterrows():
            label = str(row["name"])
            cells.append(_cell(row, b, sub, label, os.fspath(sub)))
    if not cells:
        raise InputError(f"{os.fspath(directory)}: no speculative run in its cell directories")
    return cells


def split_design(cells: Sequence[Cell], batch_sizes: Sequence[int] | None,
                 gammas: Sequence[int] | None) -> tuple[list[Cell], list[Cell]]:
    """(fitted, held out): the cells of the design B × γ and the rest (every cell fitted without a design)."""
    if not batch_sizes and not gammas:
        return list(cells), []
    bs = set(batch_sizes or {c.batch_size for c in cells})
    gs = set(gammas or {c.gamma for c in cells})
    fit = [c for c in cells if c.batch_size in bs and c.gamma in gs]
    return fit, [c for c in cells if not (c.batch_size in bs and c.gamma in gs)]
