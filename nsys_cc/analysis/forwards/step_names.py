"""What an engine's step annotation says, parsed once for both engines: vLLM's `execute_…` (also written by SGLang)
and SGLang's `step[…]` (the contract's VLLM_STEP_RE, VLLM_DETAILED_STEP_RE, SGLANG_STEP_RE).

A step has a context part (prefill: requests and their prompt tokens, or chunks of them) and a generation part
(decode: requests and their tokens, one each, or 1 + γ each when verifying drafted tokens); the detailed forms also
name each part's KV (context) length summed over its requests (`sk`, SGLang's `c_sk`/`g_sk`). `StepName.kind`:

- prefill: a context part only; decode: a generation part only, one token per request; verify: a generation part only,
  more than one token per request (a speculative run's target checking γ drafted tokens; SGLang's TARGET_VERIFY);
- mixed: both parts (chunked prefill beside running decodes: the usual step when serving, a step kind of its own);
- empty: no tokens at all (vLLM's `…_0(0)_generation_0(0)`, SGLang's IDLE): the step launches no model work;
- draft: a draft model's own forward (SGLang's `draft step[…]`, DRAFT_EXTEND): no step of the target.

Per step: `batch` = requests of both parts, `tokens` = tokens of both parts (unknown for SGLang's plain MIXED and
TARGET_VERIFY, which name the requests only), `context` = the KV length summed over both parts (known in the detailed
forms only: NaN otherwise), `tokens_per_request` = tokens ÷ batch of the step's kind (the payload the step rules read).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from ...contract import CAPTURE_RE, SGLANG_STEP_RE, VLLM_DETAILED_STEP_RE, VLLM_STEP_RE
from ..metrics import DECODE, EMPTY, MIXED, PREFILL, VERIFY

# A draft model's own forward (SGLang's draft worker): not a step of the target.
DRAFT = "draft"
# The step kinds a name can give (`StepName.kind`), in the order tables list them.
KINDS = (PREFILL, DECODE, VERIFY, MIXED, EMPTY, DRAFT)

_STEP = re.compile(VLLM_STEP_RE)
_DETAILED = re.compile(VLLM_DETAILED_STEP_RE)
_SGLANG = re.compile(SGLANG_STEP_RE)
_FIELD = re.compile(r"([a-z_]+)=(\d+)")
_CAPTURE = re.compile(CAPTURE_RE)
# SGLang's forward modes (`ForwardMode`) by the kind of step they are.
_SGLANG_MODES = {"EXTEND": PREFILL, "SPLIT_PREFILL": PREFILL, "DLLM_EXTEND": PREFILL, "DECODE": DECODE,
                 "TARGET_VERIFY": VERIFY, "MIXED": MIXED, "IDLE": EMPTY, "DUMMY_FIRST": EMPTY, "PREBUILT": EMPTY}


@dataclass(frozen=True)
class StepName:
    """What a step annotation says (module docstring); counts NaN where the form does not name them."""

    ctx_requests: float
    ctx_tokens: float
    gen_requests: float
    gen_tokens: float
    ctx_context: float = math.nan
    gen_context: float = math.nan
    form: str = "vllm"  # vllm | vllm detailed | sglang[ draft][ detailed]
    mode: str | None = None  # SGLang's forward mode, as written
    named_batch: float = math.nan  # the batch where the form names it but not its split (SGLang's plain MIXED)

    @property
    def kind(self) -> str:
        """prefill | decode | verify | mixed | empty | draft (module docstring)."""
        if self.mode is not None and (self.mode.startswith("DRAFT") or "draft" in self.form):
            return DRAFT
        if self.mode is not None and self.mode in _SGLANG_MODES:
            fixed = _SGLANG_MODES[self.mode]
            if fixed == DECODE and self.gen_tokens > self.gen_requests:  # MTP's decode of several tokens a request
                return VERIFY
            return fixed
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
    def batch(self) -> float:
        """Requests in the step, both parts."""
        return self.named_batch if not math.isnan(self.named_batch) else _sum(self.ctx_requests, self.gen_requests)

    @property
    def tokens(self) -> float:
        """Tokens the step computes, both parts (NaN where the form does not name them)."""
        return _sum(self.ctx_tokens, self.gen_tokens)

    @property
    def context(self) -> float:
        """The KV (context) length summed over the step's requests, both parts (the detailed forms only)."""
        return _sum(self.ctx_context, self.gen_context)

    @property
    def tokens_per_request(self) -> float:
        """Tokens per request of the step's kind: a prefill's context tokens ÷ its requests, a decode's or verify's
        generation tokens ÷ theirs, a mixed step's all tokens ÷ all requests; NaN for empty and draft steps and
        where the tokens are not named."""
        kind = self.kind
        if kind == PREFILL:
            return _ratio(self.ctx_tokens, self.ctx_requests)
        if kind in (DECODE, VERIFY):
            return _ratio(self.gen_tokens, self.gen_requests)
        if kind == MIXED:
            return _ratio(self.tokens, self.batch)
        return math.nan


def _sum(a: float, b: float) -> float:
    return a + b  # NaN where either part is not named


def _ratio(a: float, b: float) -> float:
    return a / b if b and b > 0 and not math.isnan(a) else math.nan


def parse(name: str) -> StepName | None:
    """The step a step annotation names (any form of either engine, module docstring), or None when `name` is none."""
    m = _STEP.match(name)
    if m is not None:
        return StepName(float(m["ctx_req"]), float(m["ctx_tok"]), float(m["gen_req"]), float(m["gen_tok"]))
    m = _DETAILED.match(name)
    if m is not None:
        return StepName(float(m["ctx_req"]), float(m["ctx_tok"]), float(m["gen_req"]), float(m["gen_tok"]),
                        float(m["ctx_kv"]), float(m["gen_kv"]), form="vllm detailed")
    m = _SGLANG.match(name)
    if m is None:
        return None
    return _sglang(m["mode"], dict(_FIELD.findall(m["fields"])), bool(m["draft"]), "bs=" in m["fields"])


def _sglang(mode: str, fields: dict[str, str], draft: bool, has_bs: bool) -> StepName | None:
    """SGLang's `step[<mode> bs=… …]` (module docstring): the parts from the mode and the fields there are."""
    if not has_bs:
        return None
    nan = math.nan

    def f(key: str) -> float:
        return float(fields[key]) if key in fields else nan

    bs = f("bs")
    detailed = any(k.startswith(("c_", "g_")) for k in fields)
    form = ("sglang draft" if draft else "sglang") + (" detailed" if detailed else "")
    kind = _SGLANG_MODES.get(mode)
    if draft or mode.startswith("DRAFT"):
        return StepName(0.0, 0.0, bs, f("g_sq"), 0.0, f("g_sk"), form=form, mode=mode)
    if kind == PREFILL:
        tokens = f("toks") if "toks" in fields else f("c_sq")
        return StepName(bs, tokens, 0.0, 0.0, f("c_sk"), 0.0 if detailed else nan, form=form, mode=mode)
    if kind in (DECODE, VERIFY):
        tokens = f("g_sq") if "g_sq" in fields else (bs if kind == DECODE else nan)
        return StepName(0.0, 0.0, bs, tokens, 0.0 if detailed else nan, f("g_sk"), form=form, mode=mode)
    if kind == MIXED:
        c_req, g_req = f("c"), f("g")
        if detailed:
            return StepName(c_req, f("c_sq"), g_req, f("g_sq"), f("c_sk"), f("g_sk"), form=form, mode=mode)
        return StepName(nan, nan, nan, nan, form=form, mode=mode, named_batch=bs)
    if kind == EMPTY:
        return StepName(0.0, 0.0, 0.0, 0.0, form=form, mode=mode)
    return None  # a mode nsys_cc does not know: left out, said


def parse_capture(name: str) -> tuple[int, str] | None:
    """(batch, mode) of a CUDA-graph capture annotation (`capture_32_FULL`, SGLang's `capture_32_DECODE`), or None: a
    capture records what a replay runs, not a step."""
    m = _CAPTURE.match(name)
    return None if m is None else (int(m["batch"]), m["mode"])
