"""Simulated latency of non-SI, SI and DSI decoding (Timor et al., Distributed Speculative Inference, arXiv 2405.14105).

Time is counted in target forwards: one target forward costs 1, one drafter forward costs c (the cost coefficient).
Generating `n_tokens` tokens with lookahead k (γ in Leviathan et al.) and acceptance rate α:

- accepted drafts in one verification: a geometric count of successes with success probability α, capped at the
  number of drafts proposed (0 when α = 0, all when α = 1) — the i.i.d. model behind Leviathan et al. Thm 3.8.
- non-SI: n_tokens × 1.
- SI: until n_tokens exist, propose k' = min(k, remaining − 1) drafts (cost k'·c), verify them (cost 1), gain the
  accepted drafts + 1 token. Its expected speedup n_tokens / cost tends to Thm 3.8's S(α, k, c).
- DSI: the drafter keeps drafting lookahead windows of k' drafts while target servers verify the earlier ones in
  parallel; a round ends at its first rejection (or when nothing is left to draft). A round costs the drafting of its
  windows plus one target forward at the rejection, and never more than the tokens it gains × 1, because DSI also
  runs the target without drafts (so a round whose first draft is rejected costs 1, like non-SI). docs/SPECDEC.md words
  it as "a window is charged when it had an acceptance or the previous one was not yet verified": every window after
  the first starts while its predecessor is still being verified, and an unaccepted first window is covered by the
  cap, so the costs are the same. This follows Timor et al.'s reference simulation.
  Windows are started every k·c and each verification takes 1, so DSI needs ceil(1 / (k·c)) target servers;
  configurations needing more than `servers` are invalid (NaN).

Everything is seeded (`np.random.SeedSequence(seed)` feeds one `np.random.default_rng` per algorithm) and vectorised:
all configurations and repeats advance together, one window per step, with finished lanes dropped.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ...arguments import many
from ...errors import InputError

# Timor et al.'s defaults: 7 target servers; heatmaps clip c ≥ 0.01 and α to [0.01, 0.99].
DEFAULT_SERVERS = 7
C_MIN, ALPHA_MIN, ALPHA_MAX = 0.01, 0.01, 0.99


@dataclass(frozen=True)
class Simulation:
    """Costs (in target forwards) of generating `n_tokens` tokens, broadcast over c, α and k.

    `si_runs`/`dsi_runs` have one more, last axis: the repeats. `dsi_runs` is NaN where DSI would need more target
    servers than given (`valid` False); `servers_needed` = ceil(1 / (k·c)).
    """

    n_tokens: int
    si_runs: np.ndarray
    dsi_runs: np.ndarray
    servers_needed: np.ndarray
    valid: np.ndarray

    @property
    def nonsi(self) -> float:
        return float(self.n_tokens)

    @property
    def si(self) -> np.ndarray:
        """Mean SI cost over the repeats."""
        return self.si_runs.mean(axis=-1)

    @property
    def dsi(self) -> np.ndarray:
        """Mean DSI cost over the repeats (NaN where invalid)."""
        return self.dsi_runs.mean(axis=-1)


def _whole(x, name: str, low: int = 1) -> int:
    if isinstance(x, bool) or int(x) != x or x < low:
        raise InputError(f"{name} must be a whole number ≥ {low}, not {x!r}")
    return int(x)


def _inputs(c, alpha, k) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    try:
        c, alpha, k = (np.asarray(v, dtype=float) for v in (c, alpha, k))
    except (TypeError, ValueError):
        raise InputError("c, α and k must be numbers or arrays of numbers") from None
    if np.any(~(c > 0)) or not np.all(np.isfinite(c)):
        raise InputError("c must be > 0 in the DSI simulation (c = 0 would need infinitely many target servers)")
    if np.any(~((alpha >= 0) & (alpha <= 1))):
        raise InputError("α must lie in [0, 1]")
    if np.any(~(k >= 1)) or np.any(k != np.round(k)):
        raise InputError("the lookahead k must be a whole number ≥ 1")
    c, alpha, k = np.broadcast_arrays(c, alpha, k)
    return c, alpha, k


def _accepted(rng: np.random.Generator, log_alpha: np.ndarray, proposed: np.ndarray) -> np.ndarray:
    # P(G ≥ n) = α^n for G = floor(log U / log α), U uniform on (0, 1]; α = 0 gives 0 and α = 1 (log α = 0) all.
    u = 1.0 - rng.random(log_alpha.shape)
    with np.errstate(divide="ignore", invalid="ignore"):
        g = np.floor(np.log(u) / log_alpha)
    g = np.where(log_alpha == 0.0, np.inf, g)
    return np.minimum(g, proposed)


class _Lanes:
    """Per-lane state of one algorithm; finished lanes are dropped so late steps only touch unfinished ones."""

    def __init__(self, **state: np.ndarray):
        self.state = state
        self.index = np.arange(next(iter(state.values())).size)

    def keep(self, mask: np.ndarray) -> None:
        self.index = self.index[mask]
        self.state = {name: arr[mask] for name, arr in self.state.items()}


def _simulate_si(c, log_alpha, k, n_tokens: int, rng) -> np.ndarray:
    out = np.empty(c.size)
    lanes = _Lanes(c=c, log_alpha=log_alpha, k=k, left=np.full(c.size, float(n_tokens)), cost=np.zeros(c.size))
    while lanes.index.size:
        s = lanes.state
        proposed = np.minimum(s["k"], s["left"] - 1)
        accepted = _accepted(rng, s["log_alpha"], proposed)
        s["cost"] += proposed * s["c"] + 1.0
        s["left"] -= accepted + 1.0
        done = s["left"] <= 0
        out[lanes.index[done]] = s["cost"][done]
        lanes.keep(~done)
    return out


def _simulate_dsi(c, log_alpha, k, n_tokens: int, rng) -> np.ndarray:
    out = np.empty(c.size)
    zeros = np.zeros(c.size)
    lanes = _Lanes(c=c, log_alpha=log_alpha, k=k, toks=zeros.copy(), new=zeros.copy(), drafting=zeros.copy(),
                   cost=zeros.copy())
    while lanes.index.size:
        s = lanes.state
        proposed = np.minimum(s["k"], n_tokens - 1 - s["toks"] - s["new"])
        accepted = _accepted(rng, s["log_alpha"], proposed)
        s["drafting"] += proposed * s["c"]
        s["new"] += accepted
        end = (proposed == 0) | (accepted < proposed)
        gained = s["new"] + 1.0
        s["cost"] += np.where(end, np.minimum(s["drafting"] + 1.0, gained), 0.0)
        s["toks"] += np.where(end, gained, 0.0)
        s["new"] = np.where(end, 0.0, s["new"])
        s["drafting"] = np.where(end, 0.0, s["drafting"])
        done = s["toks"] >= n_tokens
        out[lanes.index[done]] = s["cost"][done]
        lanes.keep(~done)
    return out


def servers_needed(c, k) -> np.ndarray:
    """ceil(1 / (k·c)): target servers DSI keeps busy when a window starts every k·c and a verification takes 1."""
    return np.ceil(1.0 / (np.asarray(k, dtype=float) * np.asarray(c, dtype=float)) - 1e-12).astype(int)


def simulate(c, alpha, k, n_tokens: int = 1000, repeats: int = 10, servers: int | None = DEFAULT_SERVERS,
             seed: int = 0) -> Simulation:
    """Simulate non-SI, SI and DSI for every (c, α, k) of the broadcast inputs, `repeats` times each.

    Args:
        c: drafter forward time ÷ target forward time, > 0.
        alpha: acceptance rate in [0, 1].
        k: lookahead (drafts per window, γ), whole ≥ 1.
        n_tokens: tokens to generate per run.
        repeats: runs per configuration.
        servers: target servers available to DSI; None for unlimited.
        seed: seeds `np.random.default_rng`; the same arguments give the same result.

    Returns:
        A `Simulation` (costs in target forwards; `.si`, `.dsi` are the means over repeats).
    """
    c, alpha, k = _inputs(c, alpha, k)
    n_tokens, repeats = _whole(n_tokens, "n_tokens"), _whole(repeats, "repeats")
    if servers is not None:
        servers = _whole(servers, "servers")
    needed = servers_needed(c, k)
    valid = np.ones(c.shape, dtype=bool) if servers is None else needed <= servers
    lane = lambda x: np.repeat(x.reshape(-1), repeats)  # noqa: E731  one lane per configuration and repeat
    with np.errstate(divide="ignore"):
        log_alpha = np.log(alpha)
    si_rng, dsi_rng = (np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(2))
    si = _simulate_si(lane(c), lane(log_alpha), lane(k), n_tokens, si_rng)
    dsi = np.full(si.size, np.nan)
    ok = lane(valid)
    dsi[ok] = _simulate_dsi(lane(c)[ok], lane(log_alpha)[ok], lane(k)[ok], n_tokens, dsi_rng)
    shape = (*c.shape, repeats)
    return Simulation(n_tokens, si.reshape(shape), dsi.reshape(shape), needed, valid)


@dataclass(frozen=True)
class Heatmaps:
    """Best-lookahead costs on a grid: arrays are indexed [α, c] (rows α, columns c).

    `si`/`dsi` are the mean costs at the lookahead k that minimises each (`si_k`/`dsi_k`; DSI only among the k its
    servers allow, NaN/0 where none does). Speedups follow Timor et al.: X vs Y = cost_Y / cost_X, and the baseline
    is the faster of SI and non-SI in each cell. DSI is never slower than SI at the same k given enough servers; with
    few servers a small c allows only large k, and there DSI can trail SI at its best, smaller k.
    """

    c: np.ndarray
    alpha: np.ndarray
    ks: np.ndarray
    n_tokens: int
    servers: int | None
    si: np.ndarray
    si_k: np.ndarray
    dsi: np.ndarray
    dsi_k: np.ndarray

    @property
    def si_vs_nonsi(self) -> np.ndarray:
        return self.n_tokens / self.si

    @property
    def dsi_vs_si(self) -> np.ndarray:
        return self.si / self.dsi

    @property
    def dsi_vs_nonsi(self) -> np.ndarray:
        return self.n_tokens / self.dsi

    @property
    def dsi_vs_baseline(self) -> np.ndarray:
        return np.minimum(self.si, self.n_tokens) / self.dsi


def _best_over_k(cost: np.ndarray, ks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    filled = np.where(np.isnan(cost), np.inf, cost)
    idx = np.argmin(filled, axis=-1)
    best = np.take_along_axis(cost, idx[..., None], axis=-1)[..., 0]
    return best, np.where(np.isnan(best), 0, ks[idx])


def heatmaps(c_grid: Sequence[float] | np.ndarray, alpha_grid: Sequence[float] | np.ndarray,
             ks: Sequence[int] = range(1, 21), n_tokens: int = 1000, repeats: int = 5,
             servers: int | None = DEFAULT_SERVERS, seed: int = 0) -> Heatmaps:
    """Simulate every (α, c, k) of the grid and keep, per cell, the best k for SI and for DSI.

    c is clipped to ≥ 0.01 and α to [0.01, 0.99], as in Timor et al.'s heatmaps; the clipped grids are returned.
    One number alone is a grid of one (`nsys_cc.arguments.many`).
    """
    c = np.clip(np.asarray(many(c_grid, "c_grid"), dtype=float), C_MIN, None)
    a = np.clip(np.asarray(many(alpha_grid, "alpha_grid"), dtype=float), ALPHA_MIN, ALPHA_MAX)
    kk = np.asarray(many(ks, "ks"), dtype=float)
    if c.ndim != 1 or a.ndim != 1 or kk.ndim != 1 or not (c.size and a.size and kk.size):
        raise InputError("the c grid, the α grid and the lookaheads must be non-empty 1-D sequences")
    sim = simulate(c[None, :, None], a[:, None, None], kk[None, None, :], n_tokens, repeats, servers, seed)
    si, si_k = _best_over_k(sim.si, kk.astype(int))
    dsi, dsi_k = _best_over_k(sim.dsi, kk.astype(int))
    return Heatmaps(c, a, kk.astype(int), sim.n_tokens, servers, si, si_k, dsi, dsi_k)


# The report's DSI grid: coarse enough to simulate in well under a second, fine enough to read.
REPORT_GRID = np.linspace(0.0, 1.0, 25)
REPORT_TOKENS, REPORT_REPEATS = 300, 3


@functools.lru_cache(maxsize=8)
def _report_heatmaps(seed: int) -> Heatmaps:
    return heatmaps(REPORT_GRID, REPORT_GRID, n_tokens=REPORT_TOKENS, repeats=REPORT_REPEATS, seed=seed)


def report_heatmaps(seed: int = 0) -> Heatmaps:
    """The simulated speedups the report draws: `heatmaps` over `REPORT_GRID` for c and α. They depend on the seed
    alone, so each seed is simulated once per process (every report of a sweep or a notebook draws the same maps);
    the caller gets its own copy."""
    return copy.deepcopy(_report_heatmaps(int(seed)))
