"""vLLM's own step annotations in a PyTorch-profiler (Kineto) trace, read as the forwards of the analysis (issue 42):
no plugin and no `range_name` needed.

vLLM's worker annotates every engine step it executes while its torch profiler runs (`gpu_worker.py`,
`annotate_profile`) with what the step schedules: `execute_context_<n>(<tokens>)_generation_<m>(<tokens>)` — n
context requests (a prompt, or a chunk of one) with their tokens, m generation requests with theirs; a count may be
followed by `_<number>`s, as in `execute_context_1(888_788544)_generation_0(0)` — or, with
`detailed_trace_annotation`, `execute_<total>_context_<n>(sq<tokens>sk…sqsq…sqsk…)_generation_<m>(sq<tokens>sk…)`
(the contract's `VLLM_STEP_RE`, `VLLM_DETAILED_STEP_RE`). A step's name gives its kind (`StepName.kind`):

- prefill: context requests only; decode: generation requests only, one token each; verify: generation requests only,
  more than one token each (1 + γ: a speculative run's target checking γ drafted tokens);
- mixed: both context and generation requests (chunked prefill beside running decodes): a phase of neither, kept
  apart — not a forward — with a note; empty: no tokens at all (`…_0(0)_generation_0(0)`: the step launches no work),
  dropped with a note. A name that starts like a step (`execute_`) but does not parse is left out, named in a note.
- On a trace with GPU work, a step that launched none on its own thread (the projection's rule) is dropped with a note.

`read(trace)` reads the steps once per open trace (`VllmSteps`) and `marked(trace)` gives the rows that
`ranges.marked_ranges` adds to the trace's ranges, under the contract's VLLM_*_RANGE names, so that the analysis reads
them as it reads the plugin's ranges:

- each kept step as a forward (`VLLM_STEP_RANGE`), payload = its tokens per request (context tokens ÷ requests for a
  prefill, generation tokens ÷ requests for decode and verify), from which the step rules (`steps`) tell prefill,
  decode and verify as from the plugin's payload; the phases of the c table come from the names (`phases_of`). A
  prefill of no more tokens per request than a decode (one) or, in a speculative run, than a verify (1 + γ) would read
  as one by its payload: it is left out, with a note;
- the sampling after each step (`VLLM_SAMPLE_RANGE`), where the trace has Python frames (`with_stack`): the runner's
  `sample_tokens` frame (`VLLM_SAMPLE_FRAME_RE`, V1's `gpu_model_runner.py` or V2's `gpu/model_runner.py`), less the
  proposing inside it: in a speculative run vLLM proposes the next drafts inside `sample_tokens`, and the outermost
  frame there that holds a proposer frame (V1's `propose_draft_token_ids`, else the proposer itself) is cut out — the
  pieces before and after it are the sampling (`token`: a token = the step + its sampling);
- the proposing (`VLLM_PROPOSE_RANGE`): the outermost `…/spec_decode/….py(…): propose` frames (draft_model, EAGLE and
  MTP all go through vLLM's proposer; V2's speculators too): one range per step around all of its draft forwards, as
  vLLM's draft scope is (`contract.DRAFT_STEP_RANGES`). A trace that has them is a speculative run, measured in place
  (`speculative`): the proposing per step, and ÷ γ per drafted token. What the proposer's caller does around it (V1's
  `prepare_inputs_padded`, …) is neither the sampling nor the proposing: it is in the step's outside time;
- the engine's steps (`VLLM_ENGINE_STEP_RANGE`): `vllm/v1/engine/core.py(…): step` frames, present where the engine
  core ran in the profiled process (`VLLM_ENABLE_V1_MULTIPROCESSING=0`); without them a step runs from one forward to
  the next (`steps`, "forward to forward").

Python frames are matched by the names torch's profiler gives them (paths relative to `sys.path`, such as
`vllm/v1/worker/gpu_model_runner.py(4303): sample_tokens`), read by their prefixes (`VLLM_FRAME_PREFIXES`).
This module imports nothing of the analysis above the projection (`ranges` reads it lazily).
"""

from __future__ import annotations

import re
import weakref
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ...contract import (
    FORWARD_RANGE,
    VLLM_DETAILED_STEP_RE,
    VLLM_ENGINE_STEP_FRAME_RE,
    VLLM_ENGINE_STEP_RANGE,
    VLLM_FRAME_PREFIXES,
    VLLM_PROPOSE_FRAME_RE,
    VLLM_PROPOSE_RANGE,
    VLLM_SAMPLE_FRAME_RE,
    VLLM_SAMPLE_RANGE,
    VLLM_STEP_PREFIX,
    VLLM_STEP_RANGE,
    VLLM_STEP_RE,
)
from ...errors import InputError
from ...trace import frame_paths
from ..metrics import ALL, DECODE, EMPTY, GPU_BUSY, GPU_SPAN, MIXED, PREFILL, VERIFY

# The columns of the rows `marked` adds (`ranges.MARKED_COLUMNS`).
ROW_COLUMNS = ["range_id", "name", "qualified_name", "start_ns", "end_ns", "duration_ns", "global_tid", "pid", "tid",
               "ended_on_other_thread", "payload", "open_at_end"]
# The columns of `VllmSteps.steps`: every step annotation, parsed, and whether it is a forward (`why` it is not).
STEP_COLUMNS = ["range_id", "name", "start_ns", "end_ns", "kind", "ctx_requests", "ctx_tokens", "gen_requests",
                "gen_tokens", "tokens_per_request", "kept", "why"]
# Names quoted in notes are cut to this length.
NAME_CHARS = 80

_STEP = re.compile(VLLM_STEP_RE)
_DETAILED = re.compile(VLLM_DETAILED_STEP_RE)
_SAMPLE, _PROPOSE, _ENGINE = (re.compile(p) for p in (VLLM_SAMPLE_FRAME_RE, VLLM_PROPOSE_FRAME_RE,
                                                       VLLM_ENGINE_STEP_FRAME_RE))


@dataclass(frozen=True)
class StepName:
    """What a vLLM step annotation says: context requests and their tokens, generation requests and theirs."""

    ctx_requests: int
    ctx_tokens: int
    gen_requests: int
    gen_tokens: int

    @property
    def kind(self) -> str:
        """prefill | decode | verify | mixed | empty (module docstring)."""
        ctx = self.ctx_requests > 0 and self.ctx_tokens > 0
        gen = self.gen_requests > 0 and self.gen_tokens > 0
        if ctx and gen:
            return MIXED
        if ctx:
            return PREFILL
        if gen:
            return DECODE if self.gen_tokens <= self.gen_requests else VERIFY
        return EMPTY

    @property
    def tokens_per_request(self) -> float:
        """Tokens per request of the step's kind (NaN for mixed and empty steps)."""
        kind = self.kind
        if kind == PREFILL:
            return self.ctx_tokens / self.ctx_requests
        if kind in (DECODE, VERIFY):
            return self.gen_tokens / self.gen_requests
        return float("nan")


def parse(name: str) -> StepName | None:
    """The step a vLLM step annotation names (either form, module docstring), or None when `name` is none."""
    m = _STEP.match(name) or _DETAILED.match(name)
    if m is None:
        return None
    return StepName(int(m["ctx_req"]), int(m["ctx_tok"]), int(m["gen_req"]), int(m["gen_tok"]))


def _quoted(name: str) -> str:
    return repr(name if len(name) <= NAME_CHARS else name[: NAME_CHARS - 1] + "…")


@dataclass(frozen=True, eq=False)
class VllmSteps:
    """The vLLM steps of one trace (`read`): `steps` (STEP_COLUMNS, every step annotation), `rows` (the ranges
    `marked` adds), `notes` (what was left out and why), `python_frames` (the trace has Python frames),
    `sampled` (steps with a sampling frame after them), `speculative` (proposer frames found)."""

    steps: pd.DataFrame
    rows: pd.DataFrame
    notes: tuple[str, ...]
    python_frames: bool
    sampled: int
    speculative: bool

    @property
    def forwards(self) -> pd.DataFrame:
        """The steps kept as forwards."""
        return self.steps[self.steps["kept"].to_numpy(dtype=bool)]


_READ: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def read(trace) -> VllmSteps | None:
    """The vLLM steps of an open PyTorch-profiler trace (read once per trace object, kept while it lives); None for
    another format or a trace without step annotations (`execute_…`)."""
    if getattr(trace, "format", None) != "kineto":
        return None
    if trace not in _READ:
        _READ[trace] = _read(trace)
    return _READ[trace]


def marked(trace) -> pd.DataFrame | None:
    """The rows (ROW_COLUMNS) that `ranges.marked_ranges` adds to a torch trace's ranges: its vLLM steps as forwards,
    their sampling, the proposing, the engine's steps (module docstring); None when the trace has no vLLM steps."""
    found = read(trace)
    return None if found is None else found.rows


def _row_frame(src: pd.DataFrame, name: str, start: np.ndarray | None = None, end: np.ndarray | None = None,
               payload: np.ndarray | None = None) -> pd.DataFrame:
    """Rows named `name` (ROW_COLUMNS) at the threads and ids of `src`, with its times or the ones given."""
    start = src["start_ns"].to_numpy(dtype=np.int64) if start is None else start
    end = src["end_ns"].to_numpy(dtype=np.int64) if end is None else end
    n = len(start)
    return pd.DataFrame({
        "range_id": src["range_id"].to_numpy(dtype=np.int64), "name": [name] * n, "qualified_name": [name] * n,
        "start_ns": start, "end_ns": end, "duration_ns": end - start,
        "global_tid": src["global_tid"].to_numpy(dtype=np.int64), "pid": src["pid"].to_numpy(dtype=np.int64),
        "tid": src["tid"].to_numpy(dtype=np.int64), "ended_on_other_thread": np.zeros(n, dtype=bool),
        "payload": np.full(n, np.nan) if payload is None else np.asarray(payload, dtype=float),
        "open_at_end": np.zeros(n, dtype=bool)}, columns=ROW_COLUMNS)


def _hits(frames: pd.DataFrame, pattern: re.Pattern) -> np.ndarray:
    """Rows of `frames` whose module name (`frame_paths.module_name`: the file from its package's root, whatever the
    install prefix) matches `pattern`, worked out per distinct name."""
    return frame_paths.hits(frames["name"], pattern)


def _outermost(frames: pd.DataFrame) -> pd.DataFrame:
    """The frames of `frames` (one function) that lie inside no other of them on their thread: a recursive call, or a
    wrapper of the same name, is part of the outer one."""
    if len(frames) < 2:
        return frames
    f = frames.sort_values(["global_tid", "start_ns", "end_ns"], ascending=[True, True, False], kind="stable")
    gtid = f["global_tid"].to_numpy()
    end = f["end_ns"].to_numpy()
    first = np.r_[True, gtid[1:] != gtid[:-1]]
    reach = pd.Series(end).groupby(np.cumsum(first)).cummax().to_numpy()
    before = np.r_[np.iinfo(np.int64).min, reach[:-1]]
    before[first] = np.iinfo(np.int64).min
    return f[end > before]


def _inside(outer: pd.DataFrame, inner: pd.DataFrame) -> np.ndarray:
    """For each row of `inner`, the position in `outer` (by start; one thread's rows do not overlap) of the row that
    holds it on its thread, or −1."""
    out = np.full(len(inner), -1, dtype=np.int64)
    if outer.empty or inner.empty:
        return out
    o_tid, o_start, o_end = (outer[c].to_numpy(dtype=np.int64) for c in ("global_tid", "start_ns", "end_ns"))
    i_tid, i_start, i_end = (inner[c].to_numpy(dtype=np.int64) for c in ("global_tid", "start_ns", "end_ns"))
    for tid in np.unique(i_tid):
        mine = np.flatnonzero(o_tid == tid)
        if not mine.size:
            continue
        mine = mine[np.argsort(o_start[mine], kind="stable")]
        sel = np.flatnonzero(i_tid == tid)
        k = np.searchsorted(o_start[mine], i_start[sel], side="right") - 1
        cand = mine[np.maximum(k, 0)]
        ok = (k >= 0) & (i_end[sel] <= o_end[cand])
        out[sel[ok]] = cand[ok]
    return out


def _sampling(frames: pd.DataFrame, samples: pd.DataFrame, proposers: pd.DataFrame) -> pd.DataFrame:
    """The sampling rows (`VLLM_SAMPLE_RANGE`): each `sample_tokens` frame less the outermost frame inside it that
    holds a proposer frame (module docstring), as the pieces before and after that frame."""
    if proposers.empty:
        return _row_frame(samples, VLLM_SAMPLE_RANGE)
    owner = _inside(samples, proposers)
    cut: dict[int, list[tuple[int, int]]] = {}
    order = np.lexsort((frames["start_ns"].to_numpy(), frames["global_tid"].to_numpy()))
    f_tid, f_start, f_end = (frames[c].to_numpy(dtype=np.int64)[order] for c in ("global_tid", "start_ns", "end_ns"))
    s_start, s_end = samples["start_ns"].to_numpy(dtype=np.int64), samples["end_ns"].to_numpy(dtype=np.int64)
    s_tid = samples["global_tid"].to_numpy(dtype=np.int64)
    p_start, p_end = proposers["start_ns"].to_numpy(dtype=np.int64), proposers["end_ns"].to_numpy(dtype=np.int64)
    # per proposer, the frames of its thread that start inside its sampling frame and no later than it (a window of
    # the frames sorted by thread and start): those that also end after it hold it
    tids, first = np.unique(f_tid, return_index=True)
    block = dict(zip(tids.tolist(), zip(first.tolist(), [*first[1:].tolist(), len(f_tid)])))
    for k, s in enumerate(owner):
        if s < 0:
            continue
        a0, b0 = block.get(int(s_tid[s]), (0, 0))
        lo = a0 + int(np.searchsorted(f_start[a0:b0], s_start[s], side="left"))
        hi = a0 + int(np.searchsorted(f_start[a0:b0], p_start[k], side="right"))
        w = np.arange(lo, hi)
        w = w[(f_end[w] >= p_end[k]) & (f_end[w] <= s_end[s]) & ~((f_start[w] == s_start[s]) & (f_end[w] == s_end[s]))]
        a, b = (int(f_start[w].min()), int(f_end[w].max())) if w.size else (int(p_start[k]), int(p_end[k]))
        cut.setdefault(int(s), []).append((a, b))
    pieces: list[tuple[int, int, int]] = []  # (sample frame, start, end)
    for i in range(len(samples)):
        t = int(s_start[i])
        for lo, hi in sorted(cut.get(i, [])):
            if lo > t:
                pieces.append((i, t, lo))
            t = max(t, hi)
        if t < s_end[i] or not cut.get(i):
            pieces.append((i, t, int(s_end[i])))
    idx = [p[0] for p in pieces]
    starts, ends = [p[1] for p in pieces], [p[2] for p in pieces]
    return _row_frame(samples.iloc[idx], VLLM_SAMPLE_RANGE, np.array(starts, dtype=np.int64),
                      np.array(ends, dtype=np.int64))


def _read(trace) -> VllmSteps | None:
    ranges = trace.nvtx_ranges(prefixes=[VLLM_STEP_PREFIX, *VLLM_FRAME_PREFIXES], nesting=False, warn=False)
    is_frame = (ranges["domain"] != "").to_numpy(dtype=bool)
    annotations = ranges[~is_frame & ranges["name"].str.startswith(VLLM_STEP_PREFIX).to_numpy(dtype=bool)]
    if annotations.empty:
        return None
    frames = ranges[is_frame]
    names = annotations["name"].astype(str).tolist()
    parsed = {n: parse(n) for n in dict.fromkeys(names)}
    rows = []
    for r, name in zip(annotations.itertuples(index=False), names):
        p = parsed[name]
        rows.append({"range_id": r.range_id, "name": name, "start_ns": r.start_ns, "end_ns": r.end_ns,
                     "kind": None if p is None else p.kind,
                     "ctx_requests": np.nan if p is None else p.ctx_requests,
                     "ctx_tokens": np.nan if p is None else p.ctx_tokens,
                     "gen_requests": np.nan if p is None else p.gen_requests,
                     "gen_tokens": np.nan if p is None else p.gen_tokens,
                     "tokens_per_request": np.nan if p is None else p.tokens_per_request})
    steps = pd.DataFrame(rows)
    kind = steps["kind"].to_numpy(dtype=object)
    why = np.full(len(steps), "", dtype=object)
    why[pd.isna(kind)] = "unparsed"
    why[kind == EMPTY] = EMPTY
    why[kind == MIXED] = MIXED
    notes: list[str] = []

    proposers = _outermost(frames[_hits(frames, _PROPOSE)])
    speculative = not proposers.empty
    # A prefill whose tokens per request would read as a decode (one) or a verify (up to 1 + γ) by its payload.
    verify = (kind == VERIFY) & (why == "")
    limit = float(np.nanmax(steps["tokens_per_request"].to_numpy(dtype=float)[verify])) if verify.any() else 1.0
    short = (kind == PREFILL) & (why == "") & (steps["tokens_per_request"].to_numpy(dtype=float) <= limit)
    why[short] = "short prefill"
    if trace.has_cuda:  # a step that launched no GPU work on its own thread is no forward of a GPU run
        from .projection import project

        candidate = np.flatnonzero(why == "")
        src = annotations.iloc[candidate]
        ops = pd.to_numeric(project(trace, src)["gpu_ops"], errors="coerce").fillna(0).to_numpy()
        why[candidate[ops <= 0]] = "no GPU work"
    kept = why == ""
    steps["kept"], steps["why"] = kept, why
    _drop_notes(steps, notes, limit, speculative)
    python_frames = int(trace.event_counts.get("python_function", 0)) > 0
    if not speculative and ((kind == VERIFY) & kept).any():
        notes.append(f"its steps verify more than one token per request (a speculative run: "
                     f"{int(((kind == VERIFY) & kept).sum())} verify steps) but the trace holds no proposer frame "
                     f"({VLLM_PROPOSE_RANGE!r}: {_why_no_frame(python_frames)}): they are measured as plain steps, "
                     "not in place; profile with stacks (torch_profiler_with_stack) to measure the run in place")

    forwards = _row_frame(annotations[kept], VLLM_STEP_RANGE,
                          payload=steps["tokens_per_request"].to_numpy(dtype=float)[kept])
    samples = _outermost(frames[_hits(frames, _SAMPLE)])
    sampling = _sampling(frames, samples, proposers) if not samples.empty else _row_frame(samples, VLLM_SAMPLE_RANGE)
    engine = _outermost(frames[_hits(frames, _ENGINE)])
    added = [forwards, sampling, _row_frame(proposers, VLLM_PROPOSE_RANGE), _row_frame(engine, VLLM_ENGINE_STEP_RANGE)]
    out = pd.concat([a for a in added if len(a)] or [forwards], ignore_index=True)
    return VllmSteps(steps[STEP_COLUMNS], out, tuple(notes), python_frames, len(samples), speculative)


def _why_no_frame(python_frames: bool) -> str:
    """Why a trace holds no proposer frame: recorded without Python stacks only when it holds no Python frame at all;
    else its frames name no proposer module nsys_cc knows (a proposer of another version or engine)."""
    if not python_frames:
        return "the trace holds no Python frames: recorded without Python stacks"
    return ("the trace holds Python frames, but none of a proposer module nsys_cc knows (vllm/v1/spec_decode/….py, "
            "vllm/v1/worker/gpu/spec_decode/…: propose, from the package's root whatever the install prefix)")


def _drop_notes(steps: pd.DataFrame, notes: list[str], limit: float, speculative: bool) -> None:
    """One note per reason a step annotation is not a forward (module docstring)."""
    why = steps["why"].to_numpy(dtype=object)
    n_all = len(steps)

    def some(mask: np.ndarray) -> str:
        names = list(dict.fromkeys(steps["name"].to_numpy(dtype=object)[mask]))
        shown = ", ".join(_quoted(n) for n in names[:3])
        return f"{shown}{', …' if len(names) > 3 else ''}"

    for reason, text in (
        ("unparsed", f"named like vLLM's steps ({VLLM_STEP_PREFIX!r}…) but not in a form nsys_cc reads "
                     "(execute_context_<n>(<tokens>)_generation_<m>(<tokens>), or its detailed form with sq/sk "
                     "fields): left out"),
        (EMPTY, "schedule no tokens (…_0(0)_generation_0(0): vLLM steps that launch no work): dropped"),
        (MIXED, "hold both context (prefill) and generation requests (chunked prefill beside running decodes): "
                "a phase of neither, kept apart — not counted as forwards of any phase"),
        ("short prefill", f"are prefills of at most {limit:g} token(s) per request: their payload would read as a "
                          f"{'verify' if speculative else 'decode'} step's, so they are left out"),
        ("no GPU work", "launched no GPU work from their own thread although the trace holds GPU activity (vLLM "
                        "steps with nothing to run on this rank, or work launched from another thread): dropped"),
    ):
        mask = why == reason
        if mask.any():
            notes.append(f"{int(mask.sum())} of its {n_all} vLLM steps {text} ({some(mask)})")


def notes(trace, label: str) -> list[str]:
    """The notes on `trace`'s vLLM steps (what was left out and why), each naming the model `label`."""
    found = read(trace)
    return [] if found is None else [f"{label}: {n}" for n in found.notes]


def forward_note(label: str) -> str:
    """What `ranges.forward_range` says when it measures a torch trace's vLLM steps."""
    return (f"{label}: no {FORWARD_RANGE!r} ranges (a PyTorch-profiler trace, no plugin): measured vLLM's own step "
            f"annotations ({VLLM_STEP_RANGE!r}, one per engine step, its phase and tokens read from its name) as the "
            "forwards; choose another range with range_name")


def token_note(trace) -> str:
    """How a token of a torch trace's vLLM steps is made, when no sampling frame follows its steps."""
    found = read(trace)
    if found is None or found.python_frames:
        return (f"the trace has Python frames but no sampling frame ({VLLM_SAMPLE_RANGE!r}) after "
                "its steps (the profile stopped before vLLM sampled?): a token is the step alone — c is the steps' c")
    return ("the trace has no Python frames (recorded without stacks, torch_profiler_with_stack off): a token is the "
            f"step alone, without the sampling after it ({VLLM_SAMPLE_RANGE!r}) — c is the steps' c; record with "
            "stacks for a token's cost")


def phases_of(trace, forwards: pd.DataFrame) -> tuple[np.ndarray, str]:
    """The phase of each of `forwards` (rows of `VLLM_STEP_RANGE`, by their `range_id`) from its step's name, and the
    rule's detail; NaN-free: a row that is no kept step (none should be) gets `all`."""
    found = read(trace)
    if found is None:
        raise ValueError("not a trace with vLLM steps")
    kinds = dict(zip(found.forwards["range_id"].to_numpy(), found.forwards["kind"].to_numpy(dtype=object)))
    phase = np.array([kinds.get(int(r), ALL) for r in forwards["range_id"].to_numpy()], dtype=object)
    what = {PREFILL: "prefill (context requests only)", DECODE: "decode (one token per generation request)",
            VERIFY: "verify (more than one token per generation request: 1 + γ)"}
    counts = ", ".join(f"{int((phase == k).sum())} {text}" for k, text in what.items() if (phase == k).any())
    detail = f"vLLM's step annotation names each step's requests and tokens: {counts or 'none'}"
    return phase, detail


def prefill_proposing_note(label: str, steps) -> str | None:
    """The proposing after a prefill, kept apart (it runs over the prompt): its medians per metric, from a speculative
    run's step table (`steps.StepTable` of `VLLM_STEP_RANGE` forwards); None without such a step."""
    table = steps.steps
    pre = table[table["kind"] == PREFILL]
    if pre.empty or not np.isfinite(pre["draft_ms"].to_numpy(dtype=float)).any():
        return None
    parts = [f"{np.nanmedian(pre['draft_ms'].to_numpy(dtype=float)):.3f} ms on wall"]
    for metric in (GPU_SPAN, GPU_BUSY):
        col = f"draft_{metric}_ms"
        if col in pre and np.isfinite(pre[col].to_numpy(dtype=float)).any():
            parts.append(f"{np.nanmedian(pre[col].to_numpy(dtype=float)):.3f} ms on {metric}")
    return (f"{label}: the proposing after the prefill step ({len(pre)} of them: the first drafts, over the prompt) "
            f"took {', '.join(parts)} (median) — kept apart: the proposing per step and per drafted token are the "
            "verify steps'")


def in_place_notes(label: str, steps) -> list[str]:
    """What a reader of a torch trace's speculative run measured in place must know: the first proposing (after the
    prefill, over the prompt) kept apart, and where the tokens per step come from."""
    out = [n for n in (prefill_proposing_note(label, steps),) if n]
    if not (steps.steps["kind"] == PREFILL).any():
        out.append(f"{label}: its trace holds no prefill step (a window of a longer run): it does not say how many "
                   "tokens a step produced — tokens per step, α and the measured speedup come from vLLM's metrics dump "
                   "(spec_metrics) where given, else they are unknown")
        return out
    out.append(f"{label}: tokens per step from the trace = (output tokens − 1) ÷ its verify steps per request, the "
               "output tokens being the plain target's steps per prefill (its trace holds no iteration markers): right "
               "when both traces hold whole requests of the same benchmark (vLLM's latency benchmark with --profile "
               "profiles one batch); vLLM's metrics dump (spec_metrics) gives them otherwise")
    return out


def refuse_unmeasurable(trace, path: str, label: str, *, draft: bool) -> None:
    """InputError (one line) for a torch trace whose vLLM steps give nothing to measure: none of them is a forward
    (each one's reason said), or — given as a draft — its steps verify drafted tokens (a speculative run) while it
    holds no proposer frame to measure them in place by."""
    found = read(trace)
    if found is None:
        return
    if found.forwards.empty:
        counts = found.steps["why"].value_counts()
        said = {"unparsed": "not in a form nsys_cc reads", EMPTY: "schedule no tokens (…_0(0)_generation_0(0))",
                MIXED: "mix prefill and decode requests (kept apart)",
                "short prefill": "are prefills too short to tell from a decode or verify step",
                "no GPU work": "launched no GPU work on their own thread"}
        why = "; ".join(f"{n} {said[k]}" for k, n in counts.items())
        raise InputError(f"{path}: none of its {len(found.steps)} vLLM step annotations is a forward to measure "
                         f"({why}); choose a range with range_name", param="range_name")
    if draft and not found.speculative and (found.forwards["kind"] == VERIFY).any():
        raise InputError(f"{path} ({label}): its vLLM steps verify more than one token per request (a speculative run) "
                         f"but it holds no proposer frame ({VLLM_PROPOSE_RANGE!r}: {_why_no_frame(found.python_frames)}"
                         "): it can be measured neither as a plain draft nor in place; profile it with stacks "
                         "(torch_profiler_with_stack) or leave it out", param="drafts")


def missing_note(trace) -> str | None:
    """Why a torch trace's default forward range found nothing, for `ranges.not_found`: it holds no vLLM step
    annotations (None when it does)."""
    if getattr(trace, "format", None) != "kineto" or read(trace) is not None:
        return None
    return (f"the PyTorch-profiler trace holds no vLLM step annotations ({VLLM_STEP_RANGE!r}, which vLLM's worker "
            "writes while its torch profiler runs)")
