"""The engines' own step annotations in a PyTorch-profiler (Kineto) trace, read as the forwards of the analysis:
no plugin and no `range_name` needed — vLLM's, and SGLang's (`sglang_steps`, which says what differs).

vLLM's worker annotates every engine step it executes while its torch profiler runs (`gpu_worker.py`,
`annotate_profile`) with what the step schedules: `execute_context_<n>(<tokens>)_generation_<m>(<tokens>)` — n
context requests (a prompt, or a chunk of one) with their tokens, m generation requests with theirs; a count may be
followed by `_<number>`s, as in `execute_context_1(888_788544)_generation_0(0)` — or, with
`detailed_trace_annotation`, `execute_<total>_context_<n>(sq<tokens>sk<kv>…)_generation_<m>(sq<tokens>sk<kv>…)`, each
part's KV (context) length summed over its requests besides. A step's name gives its kind, its batch (requests of both
parts), its tokens and, in the detailed form, its context (`step_names`):

- prefill: context requests only; decode: generation requests only, one token each; verify: generation requests only,
  more than one token each (1 + γ: a speculative run's target checking γ drafted tokens);
- mixed: both context and generation requests (chunked prefill beside running decodes, the usual step when serving):
  a step kind, and a phase, of its own (`metrics.MIXED`), measured with its token counts — never taken for a prefill;
- empty: no tokens at all (`…_0(0)_generation_0(0)`: the step launches no work), dropped with a note. A name that
  starts like a step (`execute_`) but does not parse is left out, named in a note.
- On a trace with GPU work, a step that launched none on its own thread (the projection's rule) is dropped with a
  note: a step with no GPU work is never a phase.

`read(trace)` reads the steps once per open trace (`VllmSteps`) and `marked(trace)` gives the rows that
`ranges.marked_ranges` adds to the trace's ranges, under the contract's VLLM_*_RANGE names (the engine's step, its
sampling, its proposing, its engine step: the same names for SGLang's), so that the analysis reads them as it reads
the plugin's ranges:

- each kept step as a forward (`VLLM_STEP_RANGE`), payload = its tokens per request (context tokens ÷ requests for a
  prefill, generation tokens ÷ requests for decode and verify, all ÷ all for a mixed step), and its kind, batch,
  tokens and context (`STEP_ROW_COLUMNS`: the step rules (`steps`) and the c table (`phases_of`) take the kind from
  the name). A prefill of no more tokens per request than a decode (one) or, in a speculative run, than a verify
  (1 + γ) would read as one by its payload: it is left out, with a note;
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

Python frames are matched by their module path (`trace.frame_paths`: the file from the package's root, whatever the
install prefix), read by their prefixes (`VLLM_FRAME_PREFIXES`, SGLang's `SGLANG_FRAME_PREFIXES`). This module
imports nothing of the analysis above the projection (`ranges` reads it lazily).
"""

from __future__ import annotations

import re
import weakref
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ...contract import (
    FORWARD_RANGE,
    SGLANG_FRAME_PREFIXES,
    SGLANG_STEP_PREFIXES,
    VLLM_ENGINE_STEP_FRAME_RE,
    VLLM_ENGINE_STEP_RANGE,
    VLLM_FRAME_PREFIXES,
    VLLM_PROPOSE_FRAME_RE,
    VLLM_PROPOSE_RANGE,
    VLLM_SAMPLE_FRAME_RE,
    VLLM_SAMPLE_RANGE,
    VLLM_STEP_PREFIX,
    VLLM_STEP_RANGE,
)
from ...errors import InputError
from ..metrics import ALL, DECODE, EMPTY, GPU_BUSY, GPU_SPAN, LAUNCH_TIME, MIXED, PREFILL, VERIFY, WALL
from . import sglang_steps
from .engine_marks import (
    ENGINE_COLUMN,
    ROW_COLUMNS,
    EngineMarks,
    hits,
    label as marker_label,
    outermost,
    row_frame,
    sampling,
)
from .step_names import StepName, parse

__all__ = ["ROW_COLUMNS", "STEP_COLUMNS", "STEP_ROW_COLUMNS", "StepName", "VllmSteps", "parse", "read", "marked"]

# The columns of `VllmSteps.steps`: every step annotation, parsed, and whether it is a forward (`why` it is not).
STEP_COLUMNS = ["range_id", "name", "start_ns", "end_ns", "kind", "ctx_requests", "ctx_tokens", "gen_requests",
                "gen_tokens", "batch", "tokens", "context", "tokens_per_request", "kept", "why"]
# What a forward row (`VLLM_STEP_RANGE`) carries besides ROW_COLUMNS: its step's kind, batch, tokens and context.
STEP_ROW_COLUMNS = ["step_kind", "batch", "step_tokens", "context"]
# Names quoted in notes are cut to this length.
NAME_CHARS = 80

VLLM_MARKS = EngineMarks("vLLM", (VLLM_STEP_PREFIX,), VLLM_FRAME_PREFIXES, re.compile(VLLM_SAMPLE_FRAME_RE),
                         re.compile(VLLM_PROPOSE_FRAME_RE), re.compile(VLLM_ENGINE_STEP_FRAME_RE))
_STEP_PREFIXES = (VLLM_STEP_PREFIX, *SGLANG_STEP_PREFIXES)


def _quoted(name: str) -> str:
    return repr(name if len(name) <= NAME_CHARS else name[: NAME_CHARS - 1] + "…")


@dataclass(frozen=True, eq=False)
class VllmSteps:
    """The engine steps of one trace (`read`): `steps` (STEP_COLUMNS, every step annotation), `rows` (the ranges
    `marked` adds), `notes` (what was left out and why), `python_frames` (the trace has Python frames),
    `sampled` (steps with a sampling frame after them), `speculative` (proposer frames found), `engine` (the engine
    that wrote the steps: "vLLM" or "SGLang")."""

    steps: pd.DataFrame
    rows: pd.DataFrame
    notes: tuple[str, ...]
    python_frames: bool
    sampled: int
    speculative: bool
    engine: str = "vLLM"

    @property
    def forwards(self) -> pd.DataFrame:
        """The steps kept as forwards."""
        return self.steps[self.steps["kept"].to_numpy(dtype=bool)]


_READ: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def read(trace) -> VllmSteps | None:
    """The engine steps of an open PyTorch-profiler trace (read once per trace object, kept while it lives); None for
    a trace of a format engines write no steps into (`Trace.capabilities.engine_steps`) or one without step
    annotations (`execute_…`, SGLang's `step[…]`)."""
    if not trace.capabilities.engine_steps:
        return None
    if trace not in _READ:
        _READ[trace] = _read(trace)
    return _READ[trace]


def marked(trace) -> pd.DataFrame | None:
    """The rows (ROW_COLUMNS, the forwards with STEP_ROW_COLUMNS too) that `ranges.marked_ranges` adds to a torch
    trace's ranges: its steps as forwards, their sampling, the proposing, the engine's steps (module docstring); None
    when the trace has no engine steps."""
    found = read(trace)
    return None if found is None else found.rows


def step_columns(trace, forwards: pd.DataFrame) -> dict[str, np.ndarray]:
    """STEP_ROW_COLUMNS of each of `forwards` (rows of `VLLM_STEP_RANGE`, by `range_id`): its step's kind, batch,
    tokens and context (NaN, or None for the kind, where the row is no kept step)."""
    found = read(trace)
    ids = forwards["range_id"].to_numpy()
    out: dict[str, np.ndarray] = {}
    if found is None:
        return out
    kept = found.forwards.set_index("range_id")
    for col, src in zip(STEP_ROW_COLUMNS, ("kind", "batch", "tokens", "context")):
        values = kept[src].reindex(ids).to_numpy()
        out[col] = values.astype(object) if col == "step_kind" else values.astype(float)
    return out


def _read(trace) -> VllmSteps | None:
    ranges = trace.nvtx_ranges(prefixes=[*_STEP_PREFIXES, *VLLM_FRAME_PREFIXES, *SGLANG_FRAME_PREFIXES],
                               nesting=False, warn=False)
    is_frame = (ranges["domain"] != "").to_numpy(dtype=bool)
    names_all = ranges["name"].astype(str)
    annotations = ranges[~is_frame & names_all.str.startswith(_STEP_PREFIXES).to_numpy(dtype=bool)]
    if annotations.empty:
        return None
    frames = ranges[is_frame]
    marks = sglang_steps.MARKS if sglang_steps.is_sglang(annotations, frames) else VLLM_MARKS
    proposers = outermost(frames[hits(frames, marks.propose)])
    notes: list[str] = []
    if marks is sglang_steps.MARKS:
        annotations, parsed, said = sglang_steps.target_steps(annotations, proposers)
        notes += said
    else:
        annotations = annotations[annotations["name"].astype(str).str.startswith(VLLM_STEP_PREFIX).to_numpy()]
        cache = {n: parse(n) for n in pd.unique(annotations["name"].astype(str))}
        parsed = [cache[n] for n in annotations["name"].astype(str)]
    if annotations.empty:
        return None
    steps = _step_frame(annotations, parsed)
    kind = steps["kind"].to_numpy(dtype=object)
    why = np.full(len(steps), "", dtype=object)
    why[pd.isna(kind)] = "unparsed"
    why[kind == EMPTY] = EMPTY
    speculative = not proposers.empty
    # A prefill whose tokens per request would read as a decode (one) or a verify (up to 1 + γ) by its payload.
    verify = (kind == VERIFY) & (why == "")
    per_request = steps["tokens_per_request"].to_numpy(dtype=float)
    limit = float(np.nanmax(per_request[verify])) if verify.any() and np.isfinite(per_request[verify]).any() else 1.0
    short = (kind == PREFILL) & (why == "") & (per_request <= limit)
    why[short] = "short prefill"
    if trace.has_cuda:  # a step that launched no GPU work on its own thread is no forward of a GPU run
        from .projection import project

        candidate = np.flatnonzero(why == "")
        src = annotations.iloc[candidate]
        ops = pd.to_numeric(project(trace, src)["gpu_ops"], errors="coerce").fillna(0).to_numpy()
        why[candidate[ops <= 0]] = "no GPU work"
    kept = why == ""
    steps["kept"], steps["why"] = kept, why
    _drop_notes(steps, notes, limit, speculative, marks.engine)
    python_frames = trace.count("python_frames") > 0
    if not speculative and ((kind == VERIFY) & kept).any():
        notes.append(f"its steps verify more than one token per request (a speculative run: "
                     f"{int(((kind == VERIFY) & kept).sum())} verify steps) but the trace holds no proposer frame "
                     f"({marker_label(VLLM_PROPOSE_RANGE, marks.engine)!r}: {_why_no_frame(python_frames, marks)}): "
                     "they are measured as plain steps, not in place; profile with stacks "
                     "(torch_profiler_with_stack) to measure the run in place")
    forwards = row_frame(annotations[kept], VLLM_STEP_RANGE, payload=per_request[kept])
    for col, src in zip(STEP_ROW_COLUMNS, ("kind", "batch", "tokens", "context")):
        forwards[col] = steps[src].to_numpy()[kept]
    samples = outermost(frames[hits(frames, marks.sample)])
    sampled = sampling(frames, samples, proposers) if not samples.empty else row_frame(samples, VLLM_SAMPLE_RANGE)
    engine = outermost(frames[hits(frames, marks.step)])
    added = [forwards, sampled, row_frame(proposers, VLLM_PROPOSE_RANGE), row_frame(engine, VLLM_ENGINE_STEP_RANGE)]
    out = pd.concat([a for a in added if len(a)] or [forwards], ignore_index=True)
    out[ENGINE_COLUMN] = marks.engine  # the words of its notes (`engine_marks.label`)
    return VllmSteps(steps[STEP_COLUMNS], out, tuple(notes), python_frames, len(samples), speculative, marks.engine)


def _step_frame(annotations: pd.DataFrame, parsed: list[StepName | None]) -> pd.DataFrame:
    """STEP_COLUMNS (less kept and why) of `annotations`, what each names (`parsed`, None: not a step's form)."""
    def col(attr: str) -> list:
        return [np.nan if p is None else getattr(p, attr) for p in parsed]

    return pd.DataFrame({
        "range_id": annotations["range_id"].to_numpy(), "name": annotations["name"].astype(str).to_numpy(),
        "start_ns": annotations["start_ns"].to_numpy(), "end_ns": annotations["end_ns"].to_numpy(),
        "kind": np.array([None if p is None else p.kind for p in parsed], dtype=object),
        **{c: np.array(col(c), dtype=float) for c in ("ctx_requests", "ctx_tokens", "gen_requests", "gen_tokens",
                                                     "batch", "tokens", "context", "tokens_per_request")}})


def _why_no_frame(python_frames: bool, marks: EngineMarks = VLLM_MARKS) -> str:
    """Why a trace holds no proposer frame: recorded without Python stacks only when it holds no Python frame at all;
    else its frames name no proposer module nsys_cc knows (a proposer of another version or engine)."""
    if not python_frames:
        return "the trace holds no Python frames: recorded without Python stacks"
    known = ("vllm/v1/spec_decode/….py, vllm/v1/worker/gpu/spec_decode/…: propose" if marks is VLLM_MARKS else
             "sglang/srt/speculative/….py: draft, forward_draft_extend_after_decode, …")
    return (f"the trace holds Python frames, but none of a proposer module nsys_cc knows ({known}, from the package's "
            "root whatever the install prefix)")


def _drop_notes(steps: pd.DataFrame, notes: list[str], limit: float, speculative: bool, engine: str) -> None:
    """One note per reason a step annotation is not a forward (module docstring)."""
    why = steps["why"].to_numpy(dtype=object)
    n_all = len(steps)

    def some(mask: np.ndarray) -> str:
        names = list(dict.fromkeys(steps["name"].to_numpy(dtype=object)[mask]))
        shown = ", ".join(_quoted(n) for n in names[:3])
        return f"{shown}{', …' if len(names) > 3 else ''}"

    for reason, text in (
        ("unparsed", f"named like {engine}'s steps ({', '.join(map(repr, _STEP_PREFIXES))}…) but not in a form "
                     "nsys_cc reads (execute_context_<n>(<tokens>)_generation_<m>(<tokens>), its detailed form with "
                     "sq/sk fields, SGLang's step[<MODE> bs=<n> …]): left out"),
        (EMPTY, f"schedule no tokens (…_0(0)_generation_0(0), IDLE: {engine} steps that launch no work): dropped"),
        ("short prefill", f"are prefills of at most {limit:g} token(s) per request: their payload would read as a "
                          f"{'verify' if speculative else 'decode'} step's, so they are left out"),
        ("no GPU work", f"launched no GPU work from their own thread although the trace holds GPU activity ({engine} "
                        "steps with nothing to run on this rank, or work launched from another thread): dropped — a "
                        "step with no GPU work is no phase"),
    ):
        mask = why == reason
        if mask.any():
            notes.append(f"{int(mask.sum())} of its {n_all} {engine} steps {text} ({some(mask)})")
    mixed = (steps["kind"].to_numpy(dtype=object) == MIXED) & (why == "")
    if mixed.any():
        notes.append(f"{int(mixed.sum())} of its {n_all} {engine} steps hold both context (prefill) and generation "
                     "requests (chunked prefill beside running decodes): measured as mixed steps, a phase of their "
                     f"own with their token counts ({some(mixed)})")


def notes(trace, label: str) -> list[str]:
    """The notes on `trace`'s vLLM steps (what was left out and why), each naming the model `label`."""
    found = read(trace)
    return [] if found is None else [f"{label}: {n}" for n in found.notes]


def forward_note(label: str, engine: str | None = None) -> str:
    """What `ranges.forward_range` says when it measures a torch trace's engine steps (`engine`: the engine that wrote
    them, `engine_marks.engine_of`; SGLang's are named as SGLang writes them)."""
    if engine is not None and marker_label(VLLM_STEP_RANGE, engine) != VLLM_STEP_RANGE:
        what = (f"{engine}'s own forward annotations ({marker_label(VLLM_STEP_RANGE, engine)!r}, the forward range "
                f"{VLLM_STEP_RANGE!r} as the results name it")
    else:
        what = f"the engine's own step annotations ({VLLM_STEP_RANGE!r}: vLLM's, or SGLang's step[…]"
    return (f"{label}: no {FORWARD_RANGE!r} ranges (a PyTorch-profiler trace, no plugin): measured {what}; one per "
            "step, its phase, batch, tokens and context read from its name) as the forwards; choose another range "
            "with range_name")


def token_note(trace) -> str:
    """How a token of a torch trace's engine steps is made, when no sampling frame follows its steps."""
    found = read(trace)
    engine = None if found is None else found.engine
    sample = marker_label(VLLM_SAMPLE_RANGE, engine)
    if found is None or found.python_frames:
        return (f"the trace has Python frames but no sampling frame ({sample!r}) after its steps (the profile stopped "
                f"before {engine or 'the engine'} sampled?): a token is the step alone — c is the steps' c")
    return ("the trace has no Python frames (recorded without stacks, torch_profiler_with_stack off): a token is the "
            f"step alone, without the sampling after it ({sample!r}) — c is the steps' c; record with "
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
            VERIFY: "verify (more than one token per generation request: 1 + γ)",
            MIXED: "mixed (context and generation requests: chunked prefill beside decodes)"}
    counts = ", ".join(f"{int((phase == k).sum())} {text}" for k, text in what.items() if (phase == k).any())
    detail = f"{found.engine}'s step annotation names each step's requests and tokens: {counts or 'none'}"
    return phase, detail


def prefill_proposing_note(label: str, steps) -> str | None:
    """The proposing after a prefill, kept apart (it runs over the prompt): its medians per metric, from a speculative
    run's step table (`steps.StepTable` of `VLLM_STEP_RANGE` forwards); None without such a step."""
    table = steps.steps
    pre = table[table["kind"] == PREFILL]
    if pre.empty or not np.isfinite(pre["draft_ms"].to_numpy(dtype=float)).any():
        return None
    parts: list[str] = []
    # the headline first (gpu_span on a GPU trace), then gpu_busy, then the CPU time: launch time on a GPU trace
    for metric in (GPU_SPAN, GPU_BUSY, WALL):
        col = "draft_ms" if metric == WALL else f"draft_{metric}_ms"
        if col in pre and np.isfinite(pre[col].to_numpy(dtype=float)).any():
            on = LAUNCH_TIME if metric == WALL and parts else metric
            parts.append(f"{np.nanmedian(pre[col].to_numpy(dtype=float)):.3f} ms on {on}")
    return (f"{label}: the proposing after the prefill step ({len(pre)} of them: the first drafts, over the prompt) "
            f"took {', '.join(parts)} (median) — kept apart: the proposing per step and per drafted token are the "
            "verify steps'")


def in_place_notes(label: str, steps) -> list[str]:
    """What a reader of a torch trace's speculative run measured in place must know: the first proposing (after the
    prefill, over the prompt) kept apart, and where the tokens per step come from (in the words of the engine that
    wrote the trace, `steps.engine`)."""
    out = [n for n in (prefill_proposing_note(label, steps),) if n]
    vllm = getattr(steps, "engine", None) != sglang_steps.MARKS.engine
    counted = ("vLLM's metrics dump (spec_metrics)" if vllm else
               "the α you give (acceptance: nsys_cc reads vLLM's counters, not SGLang's)")
    if not (steps.steps["kind"] == PREFILL).any():
        out.append(f"{label}: its trace holds no prefill step (a window of a longer run): it does not say how many "
                   f"tokens a step produced — tokens per step, α and the measured speedup come from {counted} where "
                   "given, else they are unknown")
        return out
    one_batch = ("vLLM's latency benchmark with --profile profiles one batch" if vllm else
                 "a profile of one batch from its prompts to its last tokens")
    out.append(f"{label}: tokens per step and α from the trace: each request's verify steps (its batch shrinks as "
               "requests end) for its output tokens (the plain target's steps per prefill, or output_len), the last "
               "step of each request cut by its length and not counted as a rejection — only where whole requests "
               f"end inside the trace ({one_batch}); {counted} otherwise")
    return out


def refuse_unmeasurable(trace, path: str, name: str, *, draft: bool) -> None:
    """InputError (one line) for a torch trace whose vLLM steps give nothing to measure: none of them is a forward
    (each one's reason said), or — given as a draft — its steps verify drafted tokens (a speculative run) while it
    holds no proposer frame to measure them in place by."""
    found = read(trace)
    if found is None:
        return
    if found.forwards.empty:
        counts = found.steps["why"].value_counts()
        said = {"unparsed": "not in a form nsys_cc reads", EMPTY: "schedule no tokens (…_0(0)_generation_0(0))",
                "short prefill": "are prefills too short to tell from a decode or verify step",
                "no GPU work": "launched no GPU work on their own thread"}
        why = "; ".join(f"{n} {said[k]}" for k, n in counts.items())
        raise InputError(f"{path}: none of its {len(found.steps)} {found.engine} step annotations is a forward to "
                         "measure "
                         f"({why}); choose a range with range_name", param="range_name")
    if draft and not found.speculative and (found.forwards["kind"] == VERIFY).any():
        marks = sglang_steps.MARKS if found.engine == sglang_steps.MARKS.engine else VLLM_MARKS
        raise InputError(f"{path} ({name}): its {found.engine} steps verify more than one token per request (a "
                         "speculative run) but it holds no proposer frame "
                         f"({marker_label(VLLM_PROPOSE_RANGE, found.engine)!r}: "
                         f"{_why_no_frame(found.python_frames, marks)}"
                         "): it can be measured neither as a plain draft nor in place; profile it with stacks "
                         "(torch_profiler_with_stack) or leave it out", param="drafts")


def missing_note(trace) -> str | None:
    """Why a torch trace's default forward range found nothing, for `ranges.not_found`: it holds no engine step
    annotations, or is a CUDA-graph capture trace (None when it holds steps)."""
    if not trace.capabilities.engine_steps or read(trace) is not None:
        return None
    from .step_names import parse_capture

    captures = [(n, c) for n in pd.unique(trace.nvtx_ranges(nesting=False)["name"].astype(str))
                if (c := parse_capture(n)) is not None]
    if captures:
        said = ", ".join(f"{n!r} (batch {c[0]}, {c[1]})" for n, c in captures[:3])
        return (f"it is a CUDA-graph capture trace: its {said} record the kernels a replay runs, no step to measure; "
                "analyse the trace of the run that replays them")
    return (f"the PyTorch-profiler trace holds no vLLM step annotations ({VLLM_STEP_RANGE!r}, which vLLM's worker "
            "writes while its torch profiler runs), nor SGLang's (step[…])")
