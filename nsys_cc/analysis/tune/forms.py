"""The schedule in the forms the engines take, from the best γ per batch size at each prompt length
(`TuneResult.by_context`). Each form is a dict {"engine", "status", "note", "schedule" (None where the schedule
cannot be expressed), "why_not"}; `report.tune_files` writes each to its own file with that header.

- vLLM 0.32 (`vllm_0_32`): `speculative_config.num_speculative_tokens_per_batch_size`, [[bs_lo, bs_hi, K], …] at one
  context (the user's `--context`, default the median measured prompt length): inclusive ranges from 1, K ≥ 0,
  every K clamped by vLLM to num_speculative_tokens. Merged (vLLM #32374, in 0.32.0); checked with vLLM's own
  validator where vLLM is installed (`workflows.tune.validate_with_vllm`).
- vLLM #48944 (`vllm_48944`): the same field with [bs_lo, bs_hi, ctx_lo, ctx_hi, K] rows — an OPEN pull request
  (RFC #48627 open): not in any release. Context ranges here split halfway between the measured prompt lengths
  (in tokens of one sequence's context: prompt + generated), the last to `max_model_len` (given, else 2^31 − 1).
- TensorRT-LLM (`tensorrt_llm`): `speculative_config.draft_len_schedule`, {max_batch_size: draft_len}: B up to a key
  takes its value, above the last key 0; its validator (`DecodingBaseConfig.validate_draft_len_schedule_and_sort`)
  wants keys ≥ 1, values ≥ 0, every value ≤ max_draft_len and the smallest key's value EQUAL to max_draft_len —
  a schedule whose K at B = 1 is below a larger batch's K cannot be written (said in `why_not`). Merged (#8194,
  #10860, #12262; PyTorch backend); the first release holding it was not confirmed.
- SGLang (`sglang`): no fixed-schedule field; `--speculative-adaptive --speculative-adaptive-config FILE.json` with
  integer-string keys = batch-size lower bounds, one candidate step per key pins the γ
  ({"1": {"candidate_steps": [3]}, "8": {"candidate_steps": [1]}}); adaptive (#21599) and batch-size-aware (#24055)
  merged; EAGLE/EAGLE3 with topk 1 only (SGLang's docs). K = 0 as a candidate step is accepted by the current code.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

INT_MAX = 2**31 - 1


def _at(schedule: Sequence[Sequence[int]], b: int) -> int:
    for lo, hi, k in schedule:
        if lo <= b <= hi:
            return int(k)
    return int(schedule[-1][2]) if schedule else 0


def vllm_0_32(schedule: Sequence[Sequence[int]], context: int | None) -> dict:
    return {"engine": "vLLM ≥ 0.32 (num_speculative_tokens_per_batch_size, merged in #32374)", "status": "merged",
            "note": ("the schedule at one context: prompt length L = " + ("?" if context is None else str(context))
                     + "; vLLM looks it up by the number of requests scheduled in a step (prefills count)"),
            "schedule": [list(map(int, r)) for r in schedule], "why_not": None}


def vllm_48944(by_context: Mapping, *, output_len: int = 0, max_model_len: int | None = None) -> dict:
    """[bs_lo, bs_hi, ctx_lo, ctx_hi, K] rows of every prompt length's schedule (module docstring)."""
    lens = sorted(L for L in by_context if L is not None)
    top = max_model_len or INT_MAX
    rows, why = [], None
    if not lens:
        why = "the cells name no prompt length: no context axis to write"
    else:
        # a sequence's context over a benchmark: L … L + n; the bounds halfway between the measured lengths
        mids = [(a + output_len + b) // 2 for a, b in zip(lens, lens[1:])]
        lo = 0
        for i, L in enumerate(lens):
            hi = mids[i] if i < len(mids) else top
            for bs_lo, bs_hi, k in by_context[L]:
                rows.append([int(bs_lo), int(bs_hi), lo, hi, int(k)])
            lo = hi + 1
    return {"engine": "vLLM PR #48944 (num_speculative_tokens_per_batch_size with context rows)",
            "status": "OPEN pull request, not merged, in no vLLM release (RFC #48627 open)",
            "note": "rows [bs_lo, bs_hi, ctx_lo, ctx_hi, K], inclusive; ctx in tokens of one sequence's context",
            "schedule": rows or None, "why_not": why}


def tensorrt_llm(schedule: Sequence[Sequence[int]], max_batch_size: int) -> dict:
    """`draft_len_schedule` {max_bs: K} of one context's schedule, or why it cannot be written."""
    ks = [_at(schedule, b) for b in range(1, max_batch_size + 1)]
    max_draft = max(ks, default=0)
    why = None
    if max_draft == 0:
        why = "no batch size speculates: run TensorRT-LLM without speculative decoding"
    elif ks[0] != max_draft:
        why = (f"the schedule's K at B = 1 is {ks[0]} but a larger batch's is {max_draft}: TensorRT-LLM's validator "
               "wants the smallest key's value equal to max_draft_len")
    out: dict[int, int] = {}
    if why is None:
        for b, k in enumerate(ks, 1):
            if b == len(ks) or ks[b] != k:
                if k:
                    out[b] = k
        # above the last key TensorRT-LLM drafts 0: a schedule whose tail speculates keeps its last key at max B
    return {"engine": "TensorRT-LLM (speculative_config.draft_len_schedule; PyTorch backend)",
            "status": "merged (#8194, #10860, #12262); first release holding it not confirmed",
            "note": f"{{max_batch_size: draft_len}}; above the last key: 0; max_draft_len = {max_draft}",
            "schedule": None if why else {str(k): v for k, v in out.items()}, "max_draft_len": max_draft,
            "why_not": why}


def sglang(schedule: Sequence[Sequence[int]]) -> dict:
    """`--speculative-adaptive-config` JSON pinning one candidate step per batch-size lower bound."""
    doc = {str(int(lo)): {"candidate_steps": [int(k)]} for lo, _, k in schedule}
    return {"engine": "SGLang (--speculative-adaptive --speculative-adaptive-config FILE.json)",
            "status": "adaptive speculative decoding merged (#21599, #24055); EAGLE/EAGLE3 topk 1 only",
            "note": "keys: batch-size lower bounds; one candidate step per key pins γ (no adaptation)",
            "schedule": doc, "why_not": None}


def every_form(schedule: Sequence[Sequence[int]], by_context: Mapping, context: int | None, max_batch_size: int,
               *, output_len: int = 0) -> dict[str, dict]:
    """Every form, by file stem."""
    return {"vllm-0.32": vllm_0_32(schedule, context),
            "vllm-pr48944": vllm_48944(by_context, output_len=output_len),
            "tensorrt-llm": tensorrt_llm(schedule, max_batch_size), "sglang": sglang(schedule)}
