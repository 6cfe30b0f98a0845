"""SGLang's own markers in a PyTorch-profiler trace (its `/start_profile` endpoint, `SGLANG_TORCH_PROFILER_DIR`, one
`<id>-TP-<rank>[-<stage>].trace.json.gz` per rank), read as vLLM's are (`vllm_steps`, which calls this module for a
trace SGLang wrote): no plugin and no `range_name` needed. Names from SGLang's source (python/sglang/srt/).

- Its model runner annotates each forward (`ModelRunner.forward`, `profile_utils.build_step_span_name`):
  `step[DECODE bs=32]`, a prefill `step[EXTEND bs=2 toks=14721]`, `step[MIXED bs=…]`, a speculative verify
  `step[TARGET_VERIFY bs=…]`, `step[IDLE bs=0]`; with roofline fields (`c_sq= c_sk= …`, `g_sq= g_sk= …`) in newer
  versions; a draft worker's forwards `step[DRAFT_EXTEND …]`, prefixed `draft ` in newer versions (`step_names`).
  Newer versions also annotate each scheduler step with vLLM's detailed form `execute_<total>_context_…(sq…sk…)
  _generation_…(sq…sk…)` around the forward — both are in the public MI300X SGLang decode trace.
- The forwards of the target are the `step[…]` annotations (forward and logits, as vLLM's `execute_…` step is), not
  the draft's: not `draft step[…]` nor DRAFT_EXTEND, and not inside a proposing frame (an older draft worker's
  forwards are plain `step[DECODE …]` there); where the trace has no `step[…]`, its `execute_…` annotations. A
  forward takes the counts of the `execute_…` annotation around it where that one names the same kind (batch, tokens,
  the KV length summed: `step[DECODE bs=32]` inside `execute_32_…_generation_32(sq32sk32785…)` is a decode step of
  batch 32 over a context of 32,785 tokens).
- Its sampling runs after the forward, outside `step[…]`: `ModelRunner.sample` (`sglang/srt/model_executor/
  model_runner.py(…): sample`); a speculative verify's rejection sampling `EagleVerifyInput.verify` (V2 `sample`) in
  `sglang/srt/speculative/eagle_info.py` — the token's sampling (`SGLANG_SAMPLE_FRAME_RE`).
- Its speculative workers (EAGLE, EAGLE-3, MTP/NEXTN, STANDALONE draft models: `sglang/srt/speculative/eagle_worker.py`,
  `eagle_worker_v2.py`, `standalone_worker.py`, `multi_layer_eagle_worker.py`) propose in `draft` (the draft's
  decode forwards, often one CUDA graph) and, after the verify, `forward_draft_extend_after_decode` (V2
  `_draft_extend_for_decode`: the draft's forward over the accepted tokens); after a prefill `forward_draft_extend`
  (V2 `_draft_extend_for_prefill`): the first proposing, over the prompt (`SGLANG_PROPOSE_FRAME_RE`). The proposing of
  a step is the sum of its proposing frames (`contract.DRAFT_STEP_RANGES`), per drafted token ÷ γ.
- The scheduler's step: `sglang/srt/managers/scheduler.py(…): run_batch` (or `_run_batch_inner`), the step's window
  (`SGLANG_ENGINE_STEP_FRAME_RE`): the forward, its sampling, the proposing; what lies outside them in it is the step's
  outside time.

SGLang's CPU backend does not run here: the SGLang-shaped test traces (`tests/gpu_shaped_kineto.py`) are built from
these names with known GPU work, and the public decode trace is the real one.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from ...contract import (
    SGLANG_ENGINE_STEP_FRAME_RE,
    SGLANG_FRAME_PREFIXES,
    SGLANG_PROPOSE_FRAME_RE,
    SGLANG_SAMPLE_FRAME_RE,
    SGLANG_STEP_PREFIXES,
    VLLM_STEP_PREFIX,
)
from ...trace import frame_paths
from .engine_marks import EngineMarks, inside
from .step_names import DRAFT, StepName, parse

MARKS = EngineMarks("SGLang", (*SGLANG_STEP_PREFIXES, VLLM_STEP_PREFIX), SGLANG_FRAME_PREFIXES,
                    re.compile(SGLANG_SAMPLE_FRAME_RE), re.compile(SGLANG_PROPOSE_FRAME_RE),
                    re.compile(SGLANG_ENGINE_STEP_FRAME_RE))
# The package an SGLang frame's module path starts with (`frame_paths`).
_PACKAGE = "sglang/"


def is_sglang(annotations: pd.DataFrame, frames: pd.DataFrame) -> bool:
    """Whether SGLang wrote the trace: it holds its `step[…]` annotations, or Python frames of its package."""
    names = annotations["name"].astype(str)
    if names.str.startswith(SGLANG_STEP_PREFIXES).any():
        return True
    return any(frame_paths.module_name(n).startswith(_PACKAGE) for n in pd.unique(frames["name"].astype(str)))


def target_steps(annotations: pd.DataFrame, proposers: pd.DataFrame
                 ) -> tuple[pd.DataFrame, list[StepName | None], list[str]]:
    """The annotations that are the target's forwards (module docstring), what each names (its counts from the
    `execute_…` around it where that names the same kind), and notes on what else was left aside."""
    names = annotations["name"].astype(str).to_numpy(dtype=object)
    sg = np.array([n.startswith(SGLANG_STEP_PREFIXES) for n in names], dtype=bool)
    notes: list[str] = []
    if not sg.any():
        chosen = annotations
        return chosen, [parse(n) for n in names], notes
    steps, outer = annotations[sg], annotations[~sg]
    parsed = [parse(n) for n in names[sg]]
    drafted = np.array([p is not None and p.kind == DRAFT for p in parsed], dtype=bool)
    in_proposing = inside(proposers, steps) >= 0 if len(proposers) else np.zeros(len(steps), dtype=bool)
    draft = drafted | in_proposing
    if draft.any():
        notes.append(f"{int(draft.sum())} of its SGLang forward annotations (step[…]) are the draft worker's (draft "
                     "step[…], DRAFT_EXTEND, or inside its proposing frames): part of the proposing, not steps of the "
                     "target")
    steps = steps[~draft]
    parsed = [p for p, d in zip(parsed, draft) if not d]
    if len(outer) and len(steps):
        around = inside(outer, steps)
        outer_names = outer["name"].astype(str).to_numpy(dtype=object)
        for i, k in enumerate(around):
            own = parsed[i]
            if k < 0 or own is None:
                continue
            wider = parse(outer_names[k])
            if wider is not None and wider.kind == own.kind:
                parsed[i] = wider
    return steps, parsed, notes
