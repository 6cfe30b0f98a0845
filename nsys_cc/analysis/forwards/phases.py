"""Which forward ranges to keep (warm-up) and which phase each one is (prefill or decode).

Warm-up, in order of precedence:
1. `skip_ranges=N` drops the first N matching ranges (by start time) of the model.
2. Otherwise, when the trace marks warm-up itself — ranges named `nsys_cc:warmup`, which nsys_cc's vLLM plugin opens
   around each warm-up iteration — every forward that starts inside one of them (any thread or process) is dropped;
   and when it marks measured iterations (`nsys_cc:iteration`), every forward that starts outside all of the
   iteration and warm-up ranges is dropped too: those are vLLM's own forwards before the benchmark (with compilation
   on, Model Runner V2's `compile_or_warm_up_model` runs real prefill and decode steps; CUDA-graph capture and
   profile runs on a GPU). The note says how many of each.
3. Otherwise nothing is dropped, and the notes say so.

Phase, in order of precedence (the rule used is reported):
1. payload: the forward range's numeric payload is the number of tokens scheduled in it (nsys_cc's plugin sets
   it). Tokens per sequence = payload / batch, with the batch read from the payload of the enclosing
   `nsys_cc:iteration`/`nsys_cc:warmup` range, or else taken as the smallest payload seen (a decode step schedules
   one token per sequence). More than one token per sequence is prefill, exactly one is decode — except in a
   speculative-decoding trace (it holds `draft_model_executable()` ranges): there a target forward of
   1 < tokens ≤ γ + 1 per sequence is a **verify** forward (the target checking γ draft tokens plus its own),
   where γ + 1 is the most common tokens-per-sequence above 1 (a decoding run verifies far more often than it
   prefills), and only forwards of more tokens are prefill. Used only when every forward's payload is a token count
   (a whole number in 1…2³¹ − 1): payloads such as int64 extremes, inf or 0 are not read as huge prefills — the next
   rule decides, and the rule's detail says why. An iteration payload that is no count is no batch size.
2. step names: what the trace says. A forward whose own name is an engine's step annotation (`--range
   "execute_context_0(0)_generation_1(1)"`, SGLang's `step[DECODE bs=32]`: `step_names`) has the kind it names; else,
   in a PyTorch-profiler trace with the engine's step annotations (`vllm_steps`, the rows `VLLM_STEP_RANGE`), a
   forward that lies inside a step annotation on its thread (a Python frame chosen with `--range`, such as
   `…/gpu_model_runner.py(N): execute_model`), or holds exactly one, has that step's kind — prefill, decode, verify or
   mixed, never inferred. A forward no step names (outside every kept step: its step launched no GPU work, say) is
   `all`: unknown, not guessed.
3. output-len: each benchmark iteration is one prefill followed by N−1 decodes, so the k-th matching range in
   trace order (warm-up included) is prefill when k mod N = 0.
4. inferred, only where nothing names the phase: split the forward times in two groups (the 1-D split that
   minimises within-group variance of log time); if the shorter of the slow group is at least 1.5× the longest of the
   fast group, the slow group is prefill. Confidence: "high" when that gap is ≥ 3×, "medium" when ≥ 1.5×; below 1.5×
   the phase is unknown: every forward's phase is `all`, and only the `all` phase is reported. On a GPU trace the
   split is learnt on the forwards that launched GPU work only: a forward (a step) with no GPU work is never a phase
   (it is `all`), and never the evidence for a "high" split.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from ...contract import DRAFT_FORWARD_RANGE, ITERATION_RANGE, VLLM_STEP_RANGE, WARMUP_RANGE
from ...trace.nvtx import matches
from ..metrics import ALL, COLUMNS, DECODE, GPU_SPAN, MIXED, PREFILL, VERIFY, WALL
from .engine_marks import inside
from .ranges import by_start


@dataclass(frozen=True)
class PhaseRule:
    """How the phases were decided: `rule` is payload | output-len | inferred | unknown."""

    rule: str
    detail: str
    confidence: str = "exact"


# The smallest gap (slowest of the fast group ÷ fastest of the slow group) at which forward times split in two groups.
SPLIT_GAP = 1.5


def containing(starts: np.ndarray, windows: pd.DataFrame) -> np.ndarray:
    """Index into `windows` (sorted by start_ns) of the window containing each start, or -1."""
    if windows.empty:
        return np.full(starts.shape, -1)
    w_start = windows["start_ns"].to_numpy()
    w_end = windows["end_ns"].to_numpy()
    pos = np.searchsorted(w_start, starts, side="right") - 1
    inside = (pos >= 0) & (starts <= w_end[np.clip(pos, 0, None)])
    return np.where(inside, pos, -1)


_containing = containing


MARKER_COLUMNS = ("start_ns", "end_ns", "payload")


def _rows(all_ranges: pd.DataFrame, hit: np.ndarray) -> pd.DataFrame:
    """The rows `hit` of `all_ranges` in MARKER_COLUMNS, by start, numbered from 0: taken column by column (a
    selection of three columns of every range first, then of the rows, cost 3× as much at a small trace's size)."""
    at = np.flatnonzero(hit)
    frame = pd.DataFrame({c: all_ranges[c].array.take(at) for c in MARKER_COLUMNS})
    ordered = by_start(frame)
    return frame if ordered is frame else ordered.reset_index(drop=True)


def markers(all_ranges: pd.DataFrame, names: tuple[str, ...]) -> pd.DataFrame:
    """The ranges named `names` (start_ns, end_ns, payload only: a marker is a window with a payload) by start."""
    return _rows(all_ranges, matches(all_ranges, names))


@dataclass(frozen=True, eq=False)
class Markers:
    """A trace's benchmark markers, selected in one pass (`marker_sets`): `windows` (`iteration_windows`: warm-up and
    measured iterations), `warm` (the warm-up ones) and `iterations` (the measured ones), each as `markers` gives it."""

    windows: pd.DataFrame
    warm: pd.DataFrame
    iterations: pd.DataFrame


def marker_sets(all_ranges: pd.DataFrame) -> Markers:
    """`Markers` of `all_ranges`: what `iteration_windows`, `markers(…, (WARMUP_RANGE,))` and
    `markers(…, (ITERATION_RANGE,))` give, from one match per name."""
    warm, iters = matches(all_ranges, (WARMUP_RANGE,)), matches(all_ranges, (ITERATION_RANGE,))
    return Markers(_rows(all_ranges, warm | iters), _rows(all_ranges, warm), _rows(all_ranges, iters))


def warmup_mask(forwards: pd.DataFrame, all_ranges: pd.DataFrame, skip_ranges: int | None,
                unit: str = "ranges", *, marks: Markers | None = None) -> tuple[np.ndarray, str]:
    """Boolean array (True = warm-up, dropped) over `forwards` (sorted by start) and a sentence saying why;
    `unit` names the rows in it (a model on several ranks has steps, not ranges); `marks`: `marker_sets` of
    `all_ranges` when the caller has them already (a caller that masks several kinds of range of one trace, or also
    reads its iterations, selects the markers once)."""
    n = len(forwards)
    if skip_ranges is not None:
        mask = np.arange(n) < skip_ranges
        return mask, f"dropped the first {min(skip_ranges, n)} of {n} {unit} (skip_ranges={skip_ranges})"
    starts = forwards["start_ns"].to_numpy()
    if marks is None:
        marks = marker_sets(all_ranges)
    warm, n_iters = marks.warm, len(marks.iterations)
    if warm.empty and not n_iters:
        return np.zeros(n, dtype=bool), (
            f"kept all {n} {unit}: the trace marks no warm-up and skip_ranges was not given "
            "(the first forwards may include warm-up)"
        )
    in_warmup = _containing(starts, warm) >= 0
    said = []
    if not warm.empty:
        said.append(f"{int(in_warmup.sum())} that ran inside the trace's {len(warm)} '{WARMUP_RANGE}' iteration(s)")
    outside = np.zeros(n, dtype=bool)
    if n_iters:
        # vLLM's own forwards before the benchmark (compile and kernel warm-up, CUDA-graph capture, profile runs)
        # run outside every benchmark iteration: they are not the benchmark's forwards.
        outside = ~in_warmup & (_containing(starts, marks.windows) < 0)
        if outside.any():
            said.append(f"{int(outside.sum())} that ran outside every '{ITERATION_RANGE}' range (vLLM's own "
                        "compile/warm-up or capture forwards, not the benchmark's)")
    mask = in_warmup | outside
    if not said:
        return mask, f"kept all {n} {unit}: every one ran inside the trace's {n_iters} '{ITERATION_RANGE}' range(s)"
    return mask, f"dropped {int(mask.sum())} of {n} {unit}: " + "; ".join(said)


def iteration_windows(all_ranges: pd.DataFrame) -> pd.DataFrame:
    """The benchmark's iterations, warm-up and measured (`markers`): each forward's batch is its iteration's payload."""
    return markers(all_ranges, (WARMUP_RANGE, ITERATION_RANGE))


def _batch_sizes(forwards: pd.DataFrame, all_ranges: pd.DataFrame,
                 windows: pd.DataFrame | None = None) -> np.ndarray:
    iters = iteration_windows(all_ranges) if windows is None else windows
    pos = _containing(forwards["start_ns"].to_numpy(), iters)
    batch = np.full(len(forwards), np.nan)
    if not iters.empty:
        payload = iters["payload"].to_numpy(dtype=float)
        payload = np.where(is_token_count(payload), payload, np.nan)  # a batch that is no count: as if none
        batch = np.where(pos >= 0, payload[np.clip(pos, 0, None)], np.nan)
    return batch


def tokens_per_sequence(forwards: pd.DataFrame, all_ranges: pd.DataFrame,
                        speculative: bool, windows: pd.DataFrame | None = None) -> tuple[np.ndarray, str]:
    """Tokens per sequence of each forward (its payload ÷ its batch) and where the batch came from: the enclosing
    iteration range's payload, else (a speculative run) 1, else the smallest payload (module docstring)."""
    payload = forwards["payload"].to_numpy(dtype=float)
    batch = _batch_sizes(forwards, all_ranges, windows)
    source = "the enclosing iteration ranges"
    if np.isnan(batch).any() and speculative:
        # The smallest payload of a speculative run is a verify forward (γ + 1 tokens per sequence), not a batch.
        batch = np.where(np.isnan(batch), 1.0, batch)
        source = "an assumed batch of 1 (a speculative run without iteration ranges)"
    elif np.isnan(batch).any():
        distinct = np.unique(payload)
        fallback = distinct.min() if distinct.size > 1 else 1.0
        batch = np.where(np.isnan(batch), fallback, batch)
        source = (
            f"the smallest payload ({fallback:g})" if distinct.size > 1
            else "an assumed batch of 1 (one payload value only)"
        )
    return payload / np.maximum(batch, 1), source


def payload_phases(tokens_per_seq: np.ndarray, speculative: bool, gamma: int | None = None, *,
                   draft_model: bool = True) -> tuple[np.ndarray, float | None]:
    """Phase of each forward from its tokens per sequence (module docstring): more than one is prefill, one is decode;
    in a speculative run 2…γ + 1 is verify, where γ + 1 is `verify_tokens` (or `gamma` + 1 when that is larger: a
    run's last steps may verify fewer draft tokens than the most common size). A proposer without a draft model
    (`draft_model=False`, vLLM's ngram) proposes 0…γ tokens a step, so its most common size above 1 may be a prefill:
    there `gamma` + 1, when known, is the limit. Also that largest verify size (None when no forward is verify)."""
    # the two labels gathered (an object array of 2 M strings made by `np.where(…).astype(object)` costs 0.2 s)
    phase = np.array([DECODE, PREFILL], dtype=object)[(np.asarray(tokens_per_seq) > 1).astype(np.intp)]
    verify = verify_tokens(tokens_per_seq) if speculative else None
    if verify is not None:
        if gamma is not None:
            verify = max(verify, gamma + 1.0) if draft_model else gamma + 1.0
        phase[(tokens_per_seq > 1) & (tokens_per_seq <= verify)] = VERIFY
    return phase, verify


# Below this many forwards the phase column is made as pandas makes it (nothing to save, no pyarrow import).
_ARROW_PHASES = 100_000


def phase_column(phase: np.ndarray):
    """`phase` (labels, one per forward) as the column `frame["phase"] = phase` makes of it: with pandas' Arrow
    strings, the same Arrow array built by pyarrow from the labels at once (pandas' inference of millions of strings
    is 5× slower); as it is otherwise (older pandas, few forwards, a label missing or not a string)."""
    if len(phase) < _ARROW_PHASES or phase.dtype != object:
        return phase
    dtype = pd.Series(phase[:1]).dtype
    if not (isinstance(dtype, pd.StringDtype) and dtype.storage == "pyarrow"):
        return phase
    import pyarrow as pa

    try:  # the system allocator: a fresh 30 MB from pyarrow's default pool (mimalloc) cost 3× as much here
        arr = pa.array(phase, type=pa.large_string(), memory_pool=pa.system_memory_pool())
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        return phase
    return phase if arr.null_count else pd.array(arr, dtype=dtype)


def _by_payload(forwards: pd.DataFrame, all_ranges: pd.DataFrame,
                windows: pd.DataFrame | None = None) -> tuple[np.ndarray, PhaseRule]:
    speculative = bool(matches(all_ranges, (DRAFT_FORWARD_RANGE,)).any())
    tokens_per_seq, source = tokens_per_sequence(forwards, all_ranges, speculative, windows)
    phase, verify = payload_phases(tokens_per_seq, speculative)
    detail = f"token-count payload of each range; batch size from {source}"
    if speculative:
        if verify is not None:
            is_verify = phase == VERIFY
            detail += (f"; a speculative-decoding trace ('{DRAFT_FORWARD_RANGE}' ranges): {int(is_verify.sum())} "
                       f"forwards of 2–{verify:g} tokens per sequence are verify forwards (γ + 1 = {verify:g}, the "
                       "most common size), not prefill")
    return phase, PhaseRule("payload", detail)


def verify_tokens(tokens_per_seq: np.ndarray) -> float | None:
    """γ + 1 of a speculative run: the most common tokens-per-sequence above 1 among its target forwards (ties: the
    smallest); None when no forward has more than one token."""
    t = np.asarray(tokens_per_seq, dtype=float)
    t = t[np.isfinite(t) & (t > 1)]
    if t.size == 0:
        return None
    values, counts = np.unique(t, return_counts=True)
    return float(values[np.argmax(counts)])


def _by_output_len(order: np.ndarray, output_len: int) -> tuple[np.ndarray, PhaseRule]:
    phase = np.where(order % output_len == 0, PREFILL, DECODE)
    return phase, PhaseRule(
        "output-len", f"output_len={output_len}: each iteration is 1 prefill then {output_len - 1} decode forward(s)"
    )


def best_split(values: np.ndarray) -> tuple[float, int]:
    """1-D two-group split of sorted log `values` minimising within-group variance: (gap ratio, size of low group).

    The gap ratio is min(high group) / max(low group); 1.0 when there are fewer than two values.
    """
    v = np.sort(np.asarray(values, dtype=float))
    if v.size < 2 or v[0] <= 0:
        return 1.0, v.size
    x = np.log(v)
    csum, csq = np.cumsum(x), np.cumsum(x * x)
    k = np.arange(1, x.size)  # size of the low group
    low_ss = csq[k - 1] - csum[k - 1] ** 2 / k
    high_n = x.size - k
    high_ss = (csq[-1] - csq[k - 1]) - (csum[-1] - csum[k - 1]) ** 2 / high_n
    best = int(k[np.argmin(low_ss + high_ss)])
    return float(v[best] / v[best - 1]), best


def slow_group(times: np.ndarray, kept: np.ndarray | None = None) -> tuple[np.ndarray | None, float]:
    """The forwards of the slow group of a two-group split of `times` (`best_split`, learnt on the `kept` ones), when
    that group's fastest is at least SPLIT_GAP× the fast group's slowest; else None. Also the gap ratio."""
    times = np.asarray(times, dtype=float)
    learn = times if kept is None else times[kept]
    ratio, n_low = best_split(learn)
    if ratio < SPLIT_GAP:
        return None, ratio
    return times > np.sort(learn)[n_low - 1], ratio


def _inferred(times: np.ndarray, kept: np.ndarray, metric: str) -> tuple[np.ndarray, PhaseRule]:
    slow, ratio = slow_group(times, kept)
    if slow is None:
        return np.full(times.size, ALL, dtype=object), PhaseRule(
            "unknown",
            f"no payload and no output_len, and the {metric} times do not split into two groups "
            f"(largest gap {ratio:.2f}× < {SPLIT_GAP:g}×): prefill and decode cannot be told apart; pass output_len",
            "none",
        )
    phase = np.where(slow, PREFILL, DECODE)
    confidence = "high" if ratio >= 3 else "medium"
    return phase, PhaseRule(
        "inferred",
        f"inferred from {metric} times: {int((phase[kept] == 'prefill').sum())} of {int(kept.sum())} kept forwards "
        f"(≥ {ratio:.1f}× slower than the rest) taken as prefill; pass output_len to state it",
        confidence,
    )


def assign_phases(
    forwards: pd.DataFrame, all_ranges: pd.DataFrame, output_len: int | None, kept: np.ndarray, *,
    windows: pd.DataFrame | None = None
) -> tuple[np.ndarray, PhaseRule]:
    """Phase ("prefill" | "decode" | "verify" | "mixed" | "all" where they cannot be told apart) of every row of
    `forwards` (all matching ranges in trace order, warm-up included, so that positions count from the first
    iteration); the inferred rule learns from the `kept` rows only. `windows`: `iteration_windows(all_ranges)` when
    the caller has them."""
    payload = forwards["payload"].to_numpy(dtype=float)
    if len(forwards) and not np.isnan(payload).any():
        counts = is_token_count(payload)
        if counts.all():
            return _by_payload(forwards, all_ranges, windows)
        # Not token counts (int64 extremes, inf, 0, fractions): never read as huge prefills. Phases by the next rule.
        odd = payload[~counts]
        phase, rule = _without_payload(forwards, all_ranges, output_len, kept)
        note = (f"{odd.size} of {payload.size} forward payloads are not token counts (whole numbers 1…{MAX_TOKENS:,}; "
                f"e.g. {odd[0]:g}), so payloads were not used")
        return phase, PhaseRule(rule.rule, f"{note}; {rule.detail}", rule.confidence)
    return _without_payload(forwards, all_ranges, output_len, kept)


def _by_step_names(forwards: pd.DataFrame, all_ranges: pd.DataFrame) -> tuple[np.ndarray, PhaseRule] | None:
    """Rule 2 (module docstring): the phase each forward's own name, or the engine step annotation around it (or the
    one inside it) on its thread, says; None when nothing names any forward's phase."""
    from .step_names import parse

    phases = (PREFILL, DECODE, VERIFY, MIXED)
    if not len(forwards):
        return None
    names = forwards["name"].astype(str).to_numpy(dtype=object) if "name" in forwards else None
    if names is not None:
        own = {n: parse(n) for n in pd.unique(names)}
        kinds = {n: (p.kind if p is not None else None) for n, p in own.items()}
        if all(k in phases for k in kinds.values()):
            phase = np.array([kinds[n] for n in names], dtype=object)
            return phase, PhaseRule("step names", f"each forward is an engine step annotation naming its requests "
                                                  f"and tokens: {_counted(phase)}")
    if "step_kind" not in all_ranges or "global_tid" not in forwards:
        return None
    steps = all_ranges[matches(all_ranges, (VLLM_STEP_RANGE,)) & all_ranges["step_kind"].notna().to_numpy()]
    if steps.empty:
        return None
    kind = steps["step_kind"].to_numpy(dtype=object)
    phase = np.full(len(forwards), ALL, dtype=object)
    around = inside(steps, forwards)  # the step around each forward
    phase[around >= 0] = kind[around[around >= 0]]
    held = _the_one_step_held(steps, forwards)  # a frame around the annotation, as vLLM's worker frame is
    one = (around < 0) & (held >= 0)
    phase[one] = kind[held[one]]
    named = np.isin(phase, phases)
    if not named.any():
        return None
    unnamed = int((~named).sum())
    detail = (f"the engine's step annotation around each forward names its kind: {_counted(phase)}"
              + (f"; {unnamed} forward(s) lie in no kept step (its step launched no GPU work, or none encloses "
                 "them): phase unknown, counted under all only" if unnamed else ""))
    return phase, PhaseRule("step names", detail)


def _counted(phase: np.ndarray) -> str:
    return ", ".join(f"{int((phase == k).sum())} {k}" for k in (PREFILL, DECODE, VERIFY, MIXED) if (phase == k).any())


# The most tokens one forward can schedule and still be a token count (vLLM's limits are far below).
MAX_TOKENS = 2**31 - 1


def is_token_count(values: np.ndarray) -> np.ndarray:
    """Which values can be a number of tokens: finite whole numbers in 1…MAX_TOKENS."""
    v = np.asarray(values, dtype=float)
    with np.errstate(invalid="ignore"):
        return np.isfinite(v) & (v >= 1) & (v <= MAX_TOKENS) & (np.floor(v) == v)


def _without_payload(forwards: pd.DataFrame, all_ranges: pd.DataFrame, output_len: int | None, kept: np.ndarray
                     ) -> tuple[np.ndarray, PhaseRule]:
    named = _by_step_names(forwards, all_ranges)
    if named is not None:
        return named
    if output_len is not None:
        return _by_output_len(np.arange(len(forwards)), output_len)
    gpu = forwards.get(COLUMNS[GPU_SPAN])
    if gpu is not None and gpu.notna().all() and len(forwards):
        return _inferred(gpu.to_numpy(dtype=float), kept, "GPU span")
    if gpu is not None and gpu.notna().any() and len(forwards):
        # a GPU trace: forwards that launched no GPU work are no phase, and no evidence for one
        working = gpu.notna().to_numpy()
        times = gpu.to_numpy(dtype=float)
        phase, rule = _inferred(np.where(working, times, np.nan), kept & working, "GPU span")
        phase = np.where(working, phase, ALL)
        idle = int((~working).sum())
        return phase, PhaseRule(rule.rule, f"{rule.detail}; {idle} forward(s) launched no GPU work: no phase (all "
                                           "only), and not among the times split", rule.confidence)
    return _inferred(forwards[COLUMNS[WALL]].to_numpy(dtype=float), kept, "wall-clock")


def _the_one_step_held(steps: pd.DataFrame, forwards: pd.DataFrame) -> np.ndarray:
    """For each forward, the position in `steps` of the one step that lies within it on its thread, or −1 (none, or
    several)."""
    out = np.full(len(forwards), -1, dtype=np.int64)
    f_tid, s_tid = (t["global_tid"].to_numpy(dtype=np.int64) for t in (forwards, steps))
    f_start, f_end = forwards["start_ns"].to_numpy(dtype=np.int64), forwards["end_ns"].to_numpy(dtype=np.int64)
    s_start, s_end = steps["start_ns"].to_numpy(dtype=np.int64), steps["end_ns"].to_numpy(dtype=np.int64)
    for tid in np.unique(f_tid):
        mine = np.flatnonzero(s_tid == tid)
        if mine.size:
            mine = mine[np.argsort(s_start[mine], kind="stable")]
            sel = np.flatnonzero(f_tid == tid)
            lo = np.searchsorted(s_start[mine], f_start[sel], side="left")
            hi = np.searchsorted(s_start[mine], f_end[sel], side="right")
            inner = mine[np.minimum(lo, len(mine) - 1)]
            one = (hi - lo == 1) & (s_end[inner] <= f_end[sel])
            out[sel[one]] = inner[one]
    return out
