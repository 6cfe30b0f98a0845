"""γ per batch size: the speculative step cost model across the batch, tokens per step from vLLM's per-position
counters, the schedule vLLM's dynamic speculative decoding takes, and its check on cells it was not fitted on.

Cells. A cell is one (batch size B, γ) measured in place: a speculative engine of an interleaved profile at batch B
against the plain target of the same runs (`speculative.pooled`). Per cell, the medians over verify steps (and their
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

The draft's forwards are priced apart (the in-place split of a token's cost: `draft_catchup_ms`, `draft_later_ms`)
because they are not alike: vLLM's draft proposer first runs the draft over the tokens the target just verified
(its payload, `draft_catchup_tokens`, is B·(γ + 1 + e) tokens: e = 1 for vLLM 0.32's draft_model proposer, read from
the cells as the median payload ÷ B − (γ + 1)), then γ − 1 forwards of one token per sequence. A single per-forward
price (d0 + d1·B, the median forward) is right at the design's γ but wrong away from it: at γ = 1 the only forward is
the catch-up, at γ = 3 the median is a later one, and at γ = 7 the catch-up carries 8 tokens a sequence. Where the cells
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

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ...errors import InputError
from ..profile_dir.acceptance import AcceptanceStats
from .keys import CellKey

Z95 = 1.959963984540054


@dataclass(frozen=True)
class Cell:
    """One measured cell, (`key`, γ): where it was measured (its batch size, and its prompt length when known: a
    `CellKey`), the medians over its verify steps (ms) and their 95 % intervals, the measured speedup with its
    interval, and its spec-decode counters (None without them)."""

    key: CellKey
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
    # runs whose counters replay another run's exactly, counted once (`speculative.pooled.pool_stats`)
    replayed_runs: int = 0
    # Σ context (KV length summed over the sequences) of its verify steps, mean, where the step table measured it
    # (NaN: not measured; `context_of` then takes B·(L + n/2))
    context: float = math.nan
    runs: int = 0  # interleaved runs the cell was measured in (0: unknown)

    @property
    def batch_size(self) -> int:
        """The sequences of each step: the model's B."""
        return self.key.batch_size

    @property
    def context_tokens(self) -> float:
        """Σ context of the cell's steps: measured (`context`) where known, else `context_of` its B, L and n."""
        if math.isfinite(self.context):
            return self.context
        return float(context_of(self.batch_size, self.key.input_len, self.output_len))

    def to_dict(self) -> dict:
        return {**self.key.to_dict(), "gamma": self.gamma, "label": self.label, "source": self.source,
                "draft_forward_ms": self.draft_forward_ms, "verify_ms": self.verify_ms, "other_ms": self.other_ms,
                "decode_step_ms": self.decode_step_ms, "draft_catchup_ms": self.draft_catchup_ms,
                "draft_catchup_tokens": self.draft_catchup_tokens, "draft_later_ms": self.draft_later_ms,
                "tokens_per_step": self.tokens_per_step,
                "measured_speedup": self.measured_speedup, "measured_ci_low": self.measured_ci[0],
                "measured_ci_high": self.measured_ci[1],
                "accepted_per_position": list(self.acceptance.accepted_per_position) if self.acceptance else None,
                "num_drafts": self.acceptance.num_drafts if self.acceptance else None}


def context_of(b, input_len, output_len: int = 0):
    """Σ context of a step of B sequences of prompt L generating n tokens, over its decode steps on average:
    B·(L + n/2) (0 where L is unknown: the model is then across the batch alone)."""
    if input_len is None:
        return 0.0 * np.asarray(b, dtype=float)
    return np.asarray(b, dtype=float) * (np.asarray(input_len, dtype=float) + max(int(output_len), 0) / 2)


def sd_from_interval(value: float, ci: tuple[float, float]) -> float:
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


CONTEXT_PARTS = ("decode", "draft", "verify")  # the parts that may carry a context slope (`surface` chooses)


@dataclass(frozen=True)
class BatchCostModel:
    """The step cost model across batch size (module docstring); coefficients in ms. `catchup` and `later` (with the
    catch-up payload's extra tokens per sequence `catchup_extra`) price the draft's forwards apart where the cells
    measured them; without them (`draft_rule` "per forward") every draft forward costs `draft`. `context`: ms per
    token of Σ context (KV length summed over the step's sequences, `s` below) of the plain decode step, of each
    draft forward and of the verify forward — 0 where the surface's held-out error did not keep the term
    (`surface.fit_cells`) or the cells saw one context; `context_parts` the parts that kept it."""

    decode: tuple[float, float]
    draft: tuple[float, float]
    verify: tuple[float, float]
    other: tuple[float, float, float]
    catchup: tuple[float, float] | None = None
    later: tuple[float, float] | None = None
    catchup_extra: float = 0.0
    context: tuple[float, float, float] = (0.0, 0.0, 0.0)
    context_parts: tuple[str, ...] = ()

    @property
    def draft_rule(self) -> str:
        return DRAFT_RULES[0] if self.catchup is not None and self.later is not None else DRAFT_RULES[1]

    def decode_step_ms(self, b, s=0.0):
        return self.decode[0] + self.decode[1] * np.asarray(b, dtype=float) + self.context[0] * np.asarray(s, float)

    def draft_ms(self, b, s=0.0):
        return self.draft[0] + self.draft[1] * np.asarray(b, dtype=float) + self.context[1] * np.asarray(s, float)

    def catchup_tokens(self, b, g):
        return np.asarray(b, dtype=float) * (np.asarray(g, dtype=float) + 1 + self.catchup_extra)

    def drafts_ms(self, b, g, s=0.0):
        """The draft's forwards of one step: the catch-up and γ − 1 later ones, or γ at the per-forward price."""
        g = np.asarray(g, dtype=float)
        if self.catchup is None or self.later is None:
            return g * self.draft_ms(b, s)
        ctx = self.context[1] * np.asarray(s, float)
        later = self.later[0] + self.later[1] * np.asarray(b, dtype=float) + ctx
        return self.catchup[0] + self.catchup[1] * self.catchup_tokens(b, g) + ctx + (g - 1) * later

    def verify_ms(self, b, g, s=0.0):
        return (self.verify[0] + self.verify[1] * np.asarray(b, dtype=float) * (np.asarray(g, dtype=float) + 1)
                + self.context[2] * np.asarray(s, float))

    def other_ms(self, b, g):
        b, g = np.asarray(b, dtype=float), np.asarray(g, dtype=float)
        return self.other[0] + self.other[1] * b + self.other[2] * b * g

    def step_ms(self, b, g, s=0.0):
        return self.drafts_ms(b, g, s) + self.verify_ms(b, g, s) + self.other_ms(b, g)

    def to_dict(self) -> dict:
        out = {"draft_rule": self.draft_rule,
               "decode_step_ms": {"intercept": self.decode[0], "per_sequence": self.decode[1],
                                  "per_context_token": self.context[0]},
               "draft_forward_ms": {"intercept": self.draft[0], "per_sequence": self.draft[1],
                                    "per_context_token": self.context[1]},
               "verify_ms": {"intercept": self.verify[0], "per_token": self.verify[1],
                             "per_context_token": self.context[2]},
               "other_ms": {"intercept": self.other[0], "per_sequence": self.other[1],
                            "per_draft_token": self.other[2]},
               "context_parts": list(self.context_parts)}
        if self.catchup is not None and self.later is not None:
            out["draft_catchup_ms"] = {"intercept": self.catchup[0], "per_token": self.catchup[1],
                                       "extra_tokens_per_sequence": self.catchup_extra}
            out["draft_later_ms"] = {"intercept": self.later[0], "per_sequence": self.later[1]}
        return out

    def describe(self) -> str:
        d, v, o, p = self.draft, self.verify, self.other, self.decode
        cd, cf, cv = (f" + {k:.3g}·S" if k else "" for k in self.context)
        if self.catchup is not None and self.later is not None:
            k, lt, e = self.catchup, self.later, self.catchup_extra
            drafts = (f"catch-up({k[0]:.3g} + {k[1]:.3g}·B(γ+{1 + e:.3g}){cf}) + (γ−1) × later({lt[0]:.3g} + "
                      f"{lt[1]:.3g}·B{cf})")
        else:
            drafts = f"γ × draft({d[0]:.3g} + {d[1]:.3g}·B{cf})"
        return (f"step(B, γ{', S' if any(self.context) else ''}) = {drafts} + verify({v[0]:.3g} + "
                f"{v[1]:.3g}·B(γ+1){cv}) + outside({o[0]:.3g} + {o[1]:.3g}·B + {o[2]:.3g}·Bγ) ms, against a plain "
                f"decode step of {p[0]:.3g} + {p[1]:.3g}·B{cd} ms"
                + (" (S = Σ context tokens of the step)" if any(self.context) else ""))


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


def fit_cost(cells: Sequence[Cell], values: dict[str, np.ndarray] | None = None,
             context: Sequence[str] | None = None) -> BatchCostModel:
    """`BatchCostModel` by non-negative-slope least squares over the cells' medians (`values` replaces them, for the
    bootstrap: arrays in cell order keyed by COST_PARTS, as `cell_values` gives them). The draft is priced as
    catch-up and later forwards when every cell measured its catch-up forward and a cell of γ ≥ 2 its later ones;
    else per forward. `context`: the parts given a Σ context column (chosen by held-out
    error by `surface.context_parts`; none by default; the bootstrap passes the fit's own, so a refit varies the
    coefficients, not the terms)."""
    if not cells:
        raise InputError("no cell to fit the cost model on")
    b = np.array([c.batch_size for c in cells], dtype=float)
    g = np.array([c.gamma for c in cells], dtype=float)
    s = np.array([c.context_tokens for c in cells], dtype=float)
    parts = tuple(context or ())
    v = values or cell_values(cells)
    one = np.ones_like(b)

    def cols(part: str, *xs):
        return np.column_stack([*xs, s] if part in parts else list(xs))

    def split(beta, part: str) -> tuple[tuple[float, float], float]:
        return (float(beta[0]), float(beta[1])), float(beta[2]) if part in parts else 0.0

    # a plain decode step is measured once per cell key (the same plain engine in every cell of that key)
    keys = sorted({(x, y) for x, y in zip(b, s)})
    kb = np.array([k[0] for k in keys])
    ks = np.array([k[1] for k in keys])
    dec = np.array([np.nanmean(v["decode"][(b == x) & (s == y)]) for x, y in keys])
    decode, c_dec = split(_nnls_slopes(np.column_stack([np.ones_like(kb), kb, ks] if "decode" in parts
                                                       else [np.ones_like(kb), kb]), dec), "decode")
    draft, c_draft = split(_nnls_slopes(cols("draft", one, b), v["draft"]), "draft")
    verify, c_ver = split(_nnls_slopes(cols("verify", one, b * (g + 1)), v["verify"]), "verify")
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
        if "draft" in parts:  # one context slope per draft forward, the catch-up's and the later ones' alike
            k, lt, c_draft = _draft_with_context(b, g, s, extra, catch_v, later_v)
        else:
            k, lt = _line(b * (g + 1 + extra), catch_v), _line(np.where(g >= 2, b, np.nan), later_v)
        catchup, later = (float(k[0]), float(k[1])), (float(lt[0]), float(lt[1]))
    return BatchCostModel(decode, draft, verify, (float(other[0]), float(other[1]), float(other[2])), catchup, later,
                          extra, (c_dec, c_draft, c_ver), parts)


def _draft_with_context(b, g, s, extra, catch_v, later_v):
    """(catch-up line, later line, one context slope) fitted together: rows of the catch-up (intercept k0, slope on
    its tokens) and of the later forwards (intercept l0, slope on B), one column of Σ context shared."""
    later_rows = (g >= 2) & np.isfinite(later_v)
    n_c, n_l = len(b), int(later_rows.sum())
    x = np.zeros((n_c + n_l, 5))
    x[:n_c, 0], x[:n_c, 1], x[:n_c, 4] = 1.0, b * (g + 1 + extra), s
    x[n_c:, 2], x[n_c:, 3], x[n_c:, 4] = 1.0, b[later_rows], s[later_rows]
    y = np.concatenate([catch_v, later_v[later_rows]])
    # both intercepts free: `_nnls_slopes` keeps column 0 free; l0 is kept ≥ 0 with the slopes (a forward costs)
    beta = _nnls_slopes(x, y)
    return beta[[0, 1]], beta[[2, 3]], float(beta[4])


def speedup(cost: BatchCostModel, tokens: TokensModel, b, g, *, iid: bool = False, output_len: int = 0,
            s: float = 0.0) -> float:
    """Forecast speedup at (B, γ) and Σ context `s`: steady state (E(γ), a server's continuous batch), or with
    `output_len` a benchmark iteration of B sequences of that many tokens (`TokensModel.static_batch`)."""
    step = float(cost.step_ms(b, g, s))
    if output_len > 1:
        e = tokens.static_batch(int(g), int(b), output_len - 1)
    else:
        e = tokens.expected_iid(int(g)) if iid else tokens.expected(int(g))
    return e * float(cost.decode_step_ms(b, s)) / step if step > 0 else math.nan
