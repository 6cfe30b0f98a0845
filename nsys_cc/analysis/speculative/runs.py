"""One speculative run read in place: its engine steps (`SpecRun`, `load_run`: the run's step table from its forward
ranges, `forwards.steps`), the draft it belongs to (`draft_of`), and the per-step arrays of its tokens and figures on
one metric, pooled over runs (`metric_figures`: each a median with its interval). Definitions: `in_place`.

Tokens per step and α from the steps alone (`request_lives`, `censored_alpha`, `tokens_in_place`): where the forwards
are the engine's step annotations (a PyTorch-profiler trace of vLLM or SGLang), each step names its batch, and a
batch of requests started by one prefill shrinks as its requests end: a request that leaves after its n-th verify step
took n steps to make its T = output − 1 tokens. Its last step is cut by max_tokens (or the request's end): it made
only what was left, which says nothing of a rejection. So α is the maximum-likelihood α of the requests' step counts
with the last step censored: P(n | T, α, γ) = P(S_{n−1} < T) − P(S_n < T), S_n the tokens of n uncut steps (each 1 + the
accepted drafts, of the truncated geometric law of α and γ); tokens per step = E(α, γ) at that α — what an uncut step
makes. Only where whole requests end inside the trace (each life starts with its prefill there, ends before a later
prefill or with the trace's last step, and no request joins without a prefill: a serving trace's mixed steps are
not read so), and the output length is known (the plain run's steps per prefill, or `output_len`); otherwise α is not
measured here (NaN, said): vLLM's metrics dump or the user's α gives it."""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ...errors import InputError
from ...trace.registry import trace_stem
from ..forwards import sglang_steps
from ..forwards.steps import (
    StepTable,
    metric_columns,
    part_columns,
    read_step_table,
    step_table,
    step_time_column,
    with_latencies,
)
from ..metrics import DECODE, VERIFY, WALL
from ..profile_dir import acceptance as acceptance_mod
from ..profile_dir.spec_labels import LABEL_RE
from ..stats import Pooled, pooled_median, runs_median_ci, runs_ratio_of_medians
from ..theory.speedup import expected_tokens


def alpha_from_tokens(tokens_per_step: float, gamma: int) -> float:
    """The α whose expected tokens per step E(α, γ) equals `tokens_per_step` (bisection; E rises with α)."""
    if not (math.isfinite(tokens_per_step) and gamma >= 1):
        return math.nan
    if tokens_per_step <= 1:
        return 0.0
    if tokens_per_step >= gamma + 1:
        return 1.0
    lo, hi = 0.0, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        if float(expected_tokens(mid, gamma)) < tokens_per_step:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


@dataclass
class SpecRun:
    """One speculative run as read: its label, draft, γ, steps and vLLM's counters and latencies."""

    name: str
    draft: str
    gamma: int
    path: str
    steps: StepTable
    acceptance: acceptance_mod.AcceptanceStats | None
    dump_path: str | None
    latencies_s: np.ndarray | None
    notes: list[str] = field(default_factory=list)


def request_lives(steps: pd.DataFrame) -> tuple[list[int] | None, str]:
    """From a run's steps (`StepTable.steps`: kind and batch, by start), the verify steps each request took, for the
    requests whose whole life the trace holds (module docstring), and what was read; None (with why) where the steps
    cannot say: no batch named, no prefill, a request joining without one, a step of another kind among them."""
    if "batch" not in steps or steps["batch"].isna().all():
        return None, "its steps name no batch (not an engine's step annotations)"
    rows = steps.sort_values("start_ns", kind="stable")
    kinds, batch = rows["kind"].to_numpy(dtype=object), rows["batch"].to_numpy(dtype=float)
    if not (kinds == "prefill").any():
        return None, "its trace holds no prefill step (a window of a longer run: no request's life is whole in it)"
    if kinds[0] != "prefill":
        return None, "its first step is no prefill (the trace starts inside the requests' lives)"
    lives: list[int] = []
    live, n = 0, 0
    for kind, b in zip(kinds, batch):
        if not np.isfinite(b):
            return None, "a step names no batch"
        if kind == "prefill":
            if live:
                lives += [n] * live  # a new batch after the last one: the rest ended with the last step
            live, n = int(b), 0
        elif kind in ("verify", "decode"):
            if b > live:
                return None, "requests join without a prefill (a serving trace: chunked prefills, mixed steps)"
            lives += [n] * (live - int(b))  # those that left ended with the step before
            live, n = int(b), n + 1
        else:
            return None, f"a {kind} step among its steps (a serving trace: requests do not start together)"
    lives += [n] * live
    return lives, f"{len(lives)} request(s) from {int((kinds == 'prefill').sum())} prefill(s) to their last step"


def _step_pmf(alpha: float, gamma: int) -> np.ndarray:
    """P(a step makes k tokens), k = 0 … γ + 1 (k = 1 + the accepted drafts: truncated geometric)."""
    k = np.arange(gamma + 2, dtype=float)
    pmf = np.where((k >= 1) & (k <= gamma), alpha ** np.maximum(k - 1, 0) * (1 - alpha), 0.0)
    pmf[gamma + 1] = alpha ** gamma
    return pmf


def _log_likelihood(alpha: float, counts: dict[int, int], tokens: int, gamma: int) -> float:
    """log P(the requests took their step counts | T = `tokens` each, α, γ), the last step censored."""
    pmf = _step_pmf(alpha, gamma)
    below = np.zeros(tokens)  # P(S_n = s) for s < T: the distribution of n uncut steps' tokens, below T
    below[0] = 1.0
    cdf = [1.0]  # P(S_n < T), n = 0, 1, …
    for _ in range(max(counts)):
        below = np.convolve(below, pmf)[:tokens]
        cdf.append(float(below.sum()))
    total = 0.0
    for n, many in counts.items():
        p = cdf[n - 1] - cdf[n] if n >= 1 else 0.0
        total += many * math.log(max(p, 1e-300))
    return total


def censored_alpha(lives: Sequence[int], tokens: int, gamma: int) -> float:
    """The maximum-likelihood α of requests that took `lives` verify steps each to make `tokens` tokens (after the
    prefill's), each last step censored (module docstring); NaN where no α explains them (a count no step law
    gives: more steps than tokens, fewer than T ÷ (γ + 1))."""
    counts: dict[int, int] = {}
    for n in lives:
        counts[int(n)] = counts.get(int(n), 0) + 1
    if not counts or tokens < 1 or gamma < 1:
        return math.nan
    if min(counts) < 1 or max(counts) > tokens or min(counts) < math.ceil(tokens / (gamma + 1)):
        return math.nan
    grid = np.linspace(1e-4, 1 - 1e-4, 41)
    ll = [_log_likelihood(a, counts, tokens, gamma) for a in grid]
    i = int(np.argmax(ll))
    lo, hi = grid[max(i - 1, 0)], grid[min(i + 1, len(grid) - 1)]
    golden = (math.sqrt(5) - 1) / 2
    for _ in range(40):  # golden section inside the best grid cell's neighbours
        a, b = hi - golden * (hi - lo), lo + golden * (hi - lo)
        if _log_likelihood(a, counts, tokens, gamma) >= _log_likelihood(b, counts, tokens, gamma):
            hi = b
        else:
            lo = a
    # the ends themselves: every request took a step per token (α 0), or the fewest steps there can be (α 1)
    best = max((0.0, 1.0, (lo + hi) / 2), key=lambda x: _log_likelihood(x, counts, tokens, gamma))
    return best


def tokens_in_place(run: SpecRun, output_len: float) -> tuple[float, float, str]:
    """(tokens per uncut verify step, α, what was read) of a run whose steps are the engine's step annotations, from
    its requests' lives (module docstring); NaNs with why where α is not measured here."""
    # every forward, not only the steps: a forward that closes no step (the last of a run read from one forward to the
    # next) still ends its requests' lives
    forwards = run.steps.forwards
    lives, said = request_lives(forwards if forwards is not None and len(forwards) else run.steps.steps)
    # where else α comes from: vLLM's counters (nsys_cc reads vLLM's dump, not SGLang's), or the user
    elsewhere = ("take it from vLLM's metrics dump (spec_metrics) or give it (acceptance)"
                 if run.steps.engine != sglang_steps.MARKS.engine else "give it (acceptance)")
    if lives is None:
        return math.nan, math.nan, f"{run.name}: α is not measured here — {said}: {elsewhere}"
    if not math.isfinite(output_len) or output_len < 2:
        return math.nan, math.nan, (f"{run.name}: α is not measured here — the output length is unknown (give "
                                    f"output_len, or the plain target's trace of whole requests): {elsewhere}")
    tokens = int(round(output_len)) - 1
    alpha = censored_alpha(lives, tokens, run.gamma)
    if not math.isfinite(alpha):
        return math.nan, math.nan, (
            f"{run.name}: α is not measured here — its {said} took {min(lives)}–{max(lives)} verify steps for "
            f"{tokens} tokens each, which no acceptance gives at γ = {run.gamma} (the trace cut a request, or the "
            f"output length differs): {elsewhere}")
    tps = float(expected_tokens(alpha, run.gamma))
    span = f"{min(lives)}" if min(lives) == max(lives) else f"{min(lives)}–{max(lives)}"
    return tps, alpha, (f"{run.name}: α {alpha:.3f} and {tps:.2f} tokens per step from its {said} — {tokens} tokens "
                        f"each in {span} verify steps, each request's last step cut by its length (max_tokens) and "
                        "not counted as a rejection (maximum likelihood, censored)")


def draft_of(name: str, drafts: Sequence[str], model: bool = True) -> str:
    """The draft a speculative run belongs to: the label before `.spec-g<γ>` when it is one of `drafts` (or, for a
    proposer without a draft model, `model=False`, whatever it is: `ngram`), else the only draft, else that label (a
    draft without a plain run: no standalone c)."""
    m = LABEL_RE.match(name)
    if m and (m.group("draft") in drafts or not model):
        return m.group("draft")
    if len(drafts) == 1:
        return drafts[0]
    if m:
        return m.group("draft")
    raise InputError(f"speculative trace {name!r}: cannot tell its draft; label it '<draft>.spec-g<γ>' (names=)")


def load_run(path: str, name: str, draft: str, range_name: str, dump_path: str | None = None, *,
             ranges: pd.DataFrame | None = None) -> SpecRun:
    """Read one speculative run: its steps, the metrics dump (`dump_path`, else `X.metrics.json` beside the
    trace when present) and vLLM's latencies (`X.bench.json`). `ranges`: the trace's ranges as already read
    (`ranges.marked_ranges`); without them the trace at `path` is opened and read here."""
    notes: list[str] = []
    beside = trace_stem(path) + ".metrics.json"
    if dump_path is None and os.path.exists(beside):
        dump_path = beside
    stats = acceptance_mod.load(dump_path) if dump_path else None
    gamma_label = LABEL_RE.match(name)
    gamma = stats.num_speculative_tokens if stats is not None else None
    if ranges is None:
        table = read_step_table(path, range_name, gamma=gamma, speculative=True)
    else:
        table = with_latencies(step_table(ranges, range_name, gamma=gamma, speculative=True), path)
    if table.draft_forwards.empty:
        notes.append(f"{name}: no draft-model forwards (a proposer without a draft model, such as ngram): a draft "
                     "forward costs nothing here, the proposer's work is in the time outside the forwards")
    if gamma is None:
        gamma = table.gamma_from_payload
        if gamma is None and gamma_label:
            gamma = int(gamma_label.group("gamma"))
            notes.append(f"{name}: γ = {gamma} from its label (no metrics dump, no verify payload)")
    if gamma is None:
        raise InputError(f"{path}: cannot tell γ (no metrics dump, no verify payload, no '.spec-g<γ>' label)")
    if gamma_label and int(gamma_label.group("gamma")) != gamma:
        notes.append(f"{name}: its label says γ = {gamma_label.group('gamma')}, the run used γ = {gamma}")
    if stats is None:
        notes.append(f"{name}: no metrics dump ({os.path.basename(beside)}): α inferred from the tokens per step")
    notes += [f"{name}: {n}" for n in table.notes]
    return SpecRun(name, draft, int(gamma), str(path), table, stats, dump_path, table.latencies_s, notes)


def draft_forwards_of(run: SpecRun, verify: pd.DataFrame, metric: str = WALL, *, later: bool = False) -> np.ndarray:
    """One draft forward's `metric` (ms) for each draft range inside `verify` (the run's verify steps): the range's
    value ÷ the forwards it holds (a fused multi-step graph holds γ − 1, `steps.forwards_held`); with vLLM's scopes
    (one draft range per step) a step's drafts ÷ γ. `later`: only the ranges after each step's first (the catch-up)."""
    _, drafts, _, one = metric_columns(metric)
    if run.steps.steps["draft_forwards"].isna().all():  # vLLM scopes: one draft range per step
        return np.array([]) if later else verify[drafts].to_numpy(dtype=float) / run.gamma
    fw = run.steps.draft_forwards
    inside = fw["step"].isin(verify["step"].to_numpy()).to_numpy()
    if later and "position" in fw:
        inside = inside & (fw["position"].to_numpy() > 0)
    if one not in fw:
        return np.full(int(inside.sum()), np.nan)
    held = fw["forwards"].to_numpy(dtype=float) if "forwards" in fw else np.ones(len(fw))
    return fw[one].to_numpy(dtype=float)[inside] / held[inside]


def token_basis(plain: StepTable, run: SpecRun) -> str:
    """"token" when both the plain target run and the speculative run have the target's logits or sampling ranges
    (the in-place figures then price tokens: forward + logits + sampling), else "forward" (the forwards alone)."""
    target_parts = {"target_logits", "target_sample"}
    return "token" if target_parts & set(plain.parts) and target_parts & set(run.steps.parts) else "forward"


def _nan0(frame: pd.DataFrame, column: str) -> np.ndarray:
    return np.nan_to_num(frame[column].to_numpy(dtype=float), nan=0.0) if column in frame else np.zeros(len(frame))


def token_of_target(steps: pd.DataFrame, metric: str, basis: str) -> np.ndarray:
    """Per step, the target's token on `metric`: its forward, plus its logits and sampling on the token basis."""
    target = steps[metric_columns(metric)[0]].to_numpy(dtype=float)
    if basis != "token":
        return target
    cols = part_columns(metric)
    return target + _nan0(steps, cols["target_logits"]) + _nan0(steps, cols["target_sample"])


def token_arrays(run: SpecRun, verify: pd.DataFrame, metric: str, basis: str) -> dict[str, np.ndarray]:
    """The per-step (per-forward for `draft_later`) arrays the token figures of a run are medians of, on `metric`:
    `draft_token` (the step's draft work ÷ γ: its draft forwards, plus their logits and sampling on the token basis),
    `verify_token` (`token_of_target`), `draft_catchup` (the step's first draft forward, where it has one of its own),
    `draft_later` (each later draft forward, a fused range divided by the forwards it holds), `draft_logits`,
    `draft_sample` (the step's ÷ γ), `verify_logits`, `verify_sample` and `propose` (the proposer's CPU time in the
    step; NaN when the trace has no proposing ranges)."""
    _, drafts, _, _ = metric_columns(metric)
    cols = part_columns(metric)
    work = verify[drafts].to_numpy(dtype=float)
    if basis == "token":
        work = work + _nan0(verify, cols["draft_logits"]) + _nan0(verify, cols["draft_sample"])
    catchup = verify[cols["draft_catchup"]].to_numpy(dtype=float) if cols["draft_catchup"] in verify else np.array([])
    out = {"draft_token": work / run.gamma, "verify_token": token_of_target(verify, metric, basis),
           "draft_catchup": catchup[np.isfinite(catchup)],
           "draft_later": draft_forwards_of(run, verify, metric, later=True)}
    for part, col in (("draft_logits", "draft_logits"), ("draft_sample", "draft_sample")):
        values = verify[cols[col]].to_numpy(dtype=float) if cols[col] in verify else np.full(len(verify), np.nan)
        out[part] = values / run.gamma
    for part, col in (("verify_logits", "target_logits"), ("verify_sample", "target_sample"), ("propose", "propose")):
        out[part] = verify[cols[col]].to_numpy(dtype=float) if cols[col] in verify else np.full(len(verify), np.nan)
    return out


def _finite(values: np.ndarray) -> np.ndarray:
    return values[np.isfinite(values)]


def by_run(frame: pd.DataFrame) -> dict[int, pd.DataFrame]:
    """A step frame's rows by run (its `run` column: runs pooled by `pooled.pool_tables`), ascending; one run
    (number 1) without the column."""
    if "run" not in frame.columns or frame.empty:
        return {1: frame}
    runs = frame["run"].to_numpy()
    return {int(k): frame[runs == k] for k in np.unique(runs)}


def step_times_by_run(steps: pd.DataFrame, metric: str) -> dict[int, np.ndarray]:
    """The steps' times on `metric` (`steps.step_time_column`: on a GPU metric each step's start to the end of its GPU
    work), by run (`by_run`)."""
    return {k: x[step_time_column(metric, x)].to_numpy(dtype=float) for k, x in by_run(steps).items()}


def pooled_by_run(per_run: Mapping[int, np.ndarray], seed: int, interval: bool = True) -> Pooled:
    """`stats.runs_median_ci` of arrays keyed by run number: each run's median, pooled (one run: its bootstrap)."""
    keys = sorted(per_run)
    return runs_median_ci([per_run[k] for k in keys], seed=seed, numbers=keys, interval=interval)


def pooled_ratio_by_run(num: Mapping[int, np.ndarray], den: Mapping[int, np.ndarray], seed: int) -> Pooled:
    """`stats.runs_ratio_of_medians` of arrays keyed by run number, over the runs both sides have: each run's ratio
    of medians (like with like: the same process), pooled (one run: its bootstrap)."""
    keys = sorted(set(num) & set(den))
    return runs_ratio_of_medians([num[k] for k in keys], [den[k] for k in keys], seed=seed, numbers=keys)


def median_by_run(values, runs) -> float:
    """The median of step values pooled over their runs (`stats.pooled_median`: each run's, then their geometric
    mean); `runs` the run number of each value (None: one run)."""
    return pooled_median(np.asarray(values, dtype=float), None if runs is None else np.asarray(runs))


def runs_column(frame: pd.DataFrame):
    return frame["run"].to_numpy() if "run" in frame.columns else None


def metric_figures(run: SpecRun, verify: pd.DataFrame, decode: pd.DataFrame, metric: str,
                   seed: int, basis: str = "forward") -> dict[str, Pooled]:
    """The BY_METRIC_FIGURES of one run on `metric`, each a `stats.Pooled` (median, low, high, and each run's own
    value): `verify` its verify steps, `decode` the plain run's decode steps, `basis` "token" or "forward"
    (`token_basis`; module docstring). Steps whose value of the metric is unknown are left out. Runs pooled
    (`pooled`: a `run` column) give each figure per run — a median, or a ratio of medians within the run — then
    their geometric mean (`stats.runs_ratio_of_medians`, `stats.runs_median_ci`); one run, its steps' bootstrap."""
    target, drafts, other, _ = metric_columns(metric)
    v_runs, d_runs = by_run(verify), by_run(decode)
    v_target = {k: v[target].to_numpy(dtype=float) for k, v in v_runs.items()}
    d_target = {k: d[target].to_numpy(dtype=float) for k, d in d_runs.items()}
    draft_fw = {k: draft_forwards_of(run, v, metric) for k, v in v_runs.items()}
    tok = {k: token_arrays(run, v, metric, basis) for k, v in v_runs.items()}
    d_token = {k: token_of_target(d, metric, basis) for k, d in d_runs.items()}

    def each(key: str) -> dict[int, np.ndarray]:
        return {k: t[key] for k, t in tok.items()}

    forward_c = pooled_ratio_by_run(draft_fw, v_target, seed)
    return {"draft_forward_ms": pooled_by_run(draft_fw, seed), "verify_ms": pooled_by_run(v_target, seed),
            "decode_ms": pooled_by_run(d_target, seed),
            "verify_factor": pooled_ratio_by_run(v_target, d_target, seed),
            "c_in_place": (pooled_ratio_by_run(each("draft_token"), each("verify_token"), seed) if basis == "token"
                           else forward_c),
            "other_ms": pooled_by_run({k: v[other].to_numpy(dtype=float) for k, v in v_runs.items()}, seed),
            "c_in_place_forward": forward_c,
            "c_in_place_decode": pooled_ratio_by_run(each("draft_token"), d_token, seed),
            "draft_catchup_ms": pooled_by_run(each("draft_catchup"), seed),
            "draft_later_ms": pooled_by_run(each("draft_later"), seed),
            "draft_token_ms": pooled_by_run(each("draft_token"), seed),
            "verify_token_ms": pooled_by_run(each("verify_token"), seed),
            "decode_token_ms": pooled_by_run(d_token, seed),
            "propose_ms": pooled_by_run({k: _finite(x) for k, x in each("propose").items()}, seed),
            # the token's parts on this metric (NaN where the trace has no range of the part)
            **{f"{part}_ms": pooled_by_run({k: _finite(x) for k, x in each(part).items()}, seed)
               for part in ("draft_logits", "draft_sample", "verify_logits", "verify_sample")},
            # the steps' times: on wall their CPU time (launch time on a GPU trace), on a GPU metric from a step's
            # start to the end of its GPU work (`steps.step_time_column`)
            "step_ms": pooled_by_run({k: v[step_time_column(metric, v)].to_numpy(dtype=float)
                                      for k, v in v_runs.items()}, seed),
            "decode_step_ms": pooled_by_run({k: d[step_time_column(metric, d)].to_numpy(dtype=float)
                                             for k, d in d_runs.items()}, seed)}


def run_metrics(plain: StepTable, run: SpecRun) -> list[str]:
    """The metrics a run is measured on: wall, then each GPU metric both its steps and the plain run's have."""
    return [m for m in run.steps.metrics if m in plain.metrics]


def nan_median(values) -> float:
    v = np.asarray(values, dtype=float)
    v = v[~np.isnan(v)]
    return float(np.median(v)) if v.size else math.nan


def tokens_per_step(run: SpecRun, output_len: float) -> tuple[float, float]:
    """(tokens per verify step from the trace, the metrics' 1 + accepted ÷ drafts): `in_place`'s tokens_per_step and
    tokens_per_step_metrics."""
    metrics = run.acceptance.mean_acceptance_length if run.acceptance is not None else math.nan
    if named_steps(run):  # the engine's step annotations: the requests' lives, each last step censored (`runs`)
        return tokens_in_place(run, output_len)[0], metrics
    after_prefill = run.steps.steps[run.steps.steps["kind"].isin((VERIFY, DECODE))]
    counted = after_prefill[after_prefill["iteration"] >= 0]
    if math.isfinite(output_len) and len(counted) and run.steps.rule != "forward to forward":
        # the mean, not the median: an iteration's time is the sum of its steps, so the benchmark's expected
        # iteration is the mean step count; a median of whole steps jumps by one (6.6 → 7 at B = 8, γ = 5 when 3
        # of 5 iterations wait for a straggler) and biases the measured speedup low
        per_iter = counted.groupby("iteration").size().mean()
        return (output_len - 1) / per_iter, metrics
    if math.isfinite(output_len) and math.isfinite(run.steps.forwards_per_iteration):
        # every forward but the prefill is a step, counted or not (the last one closes none)
        return (output_len - 1) / (run.steps.forwards_per_iteration - 1), metrics
    return metrics, metrics


def named_steps(run: SpecRun) -> bool:
    """Whether the run's steps are an engine's step annotations (they name each step's batch: `runs.request_lives`)."""
    steps = run.steps.steps
    return "batch" in steps.columns and bool(steps["batch"].notna().any())
