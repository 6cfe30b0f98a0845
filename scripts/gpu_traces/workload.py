"""LLaMA-shaped forwards for the GPU-traces run: a prefill then decode steps with the KV cache, per model.

Builds `transformers.LlamaForCausalLM` from one of nsys_cc's shipped configs (random weights, no download), batch 1,
and runs `--warmup` then `--iters` iterations of one `--input-len`-token prefill followed by `--decode` steps. NVTX
ranges (pushed with `nvtx_ctypes`, a pure-Python NVTX3 client: no `nvtx` package needed, any Python 3) follow nsys_cc's
conventions, so `nsys-cc analyze` reads the traces as it reads the plugin's:
- `model_executable()` around each target forward, payload = its tokens;
- `nsys_cc:step` around each decode step (its forwards and the step's synchronisation), payload = target tokens;
- `nsys_cc:warmup` / `nsys_cc:iteration` around each iteration, payload 1 (the batch).

`--sync forward` ends each forward range after a device synchronisation (its wall time is the forward's latency);
`--sync step` (the default) synchronises once per step, after the forward ranges, as vLLM does: a range then times the
CPU work of queuing the forward's launches and its GPU work runs past it — the asynchronous shape nsys_cc's GPU
projection is for. `--graphs` replays the decode step as CUDA graphs (`torch.compile(mode="reduce-overhead")`).

`--draft MODEL --gamma G` makes the run speculative in shape (what a `draft_model` speculator does each step, with no
token ever accepted): after the target's prefill the draft prefills the prompt, then every step is one target verify
forward of G + 1 tokens (`model_executable()`, payload G + 1) followed by G one-token draft forwards
(`draft_model_executable()`, payload 1), inside `nsys_cc:step` (payload G + 1).

Runs on the CPU too (float32), which is how it is tested before a GPU run (`tests/e2e/test_gpu_traces.py`).

    python3 workload.py --model llama-68m-shape [--input-len 128] [--decode 8] [--warmup 3] [--iters 10] [--graphs]
                        [--draft llama-68m-shape --gamma 3] [--sync step|forward] [--device cuda|cpu]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch
from nvtx_ctypes import NVTX
from transformers import LlamaConfig, LlamaForCausalLM, StaticCache

REPO = Path(__file__).resolve().parents[2]
FORWARD, DRAFT, STEP = "model_executable()", "draft_model_executable()", "nsys_cc:step"


def model_config(name: str) -> Path:
    """The shipped `config.json` of model `name`, wherever the package keeps its models (found, not imported: the
    GPU machine has no nsys_cc installed)."""
    found = sorted(REPO.glob(f"nsys_cc/**/models/{name}/config.json"))
    if not found:
        raise SystemExit(f"workload: no shipped model {name!r} under {REPO / 'nsys_cc'}")
    return found[0]


def build(name: str, device: torch.device) -> LlamaForCausalLM:
    cfg = LlamaConfig(**json.loads(model_config(name).read_text()))
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    default = torch.get_default_dtype()
    torch.set_default_dtype(dtype)  # built in its dtype: a 7B model never exists in float32 (28 GB) first
    try:
        with torch.device(device):
            model = LlamaForCausalLM(cfg)
    finally:
        torch.set_default_dtype(default)
    return model.to(dtype).eval()


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


class Runner:
    """One model's forwards over its own static KV cache, each inside an NVTX range."""

    def __init__(self, model, device, name: str, cache_len: int, sync_forward: bool, graphs: bool):
        self.model, self.device, self.name, self.sync_forward = model, device, name, sync_forward
        self.cache_len = cache_len
        self.cache = None
        self.step_fn = None
        if graphs:
            compiled = torch.compile(model, mode="reduce-overhead", fullgraph=True)
            self.step_fn = lambda ids, pos, cache: compiled(input_ids=ids, past_key_values=cache, use_cache=True,
                                                            cache_position=pos).logits
        self.vocab = min(model.config.vocab_size, 10000)

    def reset(self) -> None:
        self.cache = StaticCache(config=self.model.config, max_batch_size=1, max_cache_len=self.cache_len,
                                 device=self.device, dtype=next(self.model.parameters()).dtype)

    @torch.inference_mode()
    def forward(self, ids: torch.Tensor, start: int) -> torch.Tensor:
        n = ids.shape[-1]
        pos = torch.arange(start, start + n, device=self.device)
        NVTX.push(self.name, n)
        try:
            if self.step_fn is not None and n == 1:
                logits = self.step_fn(ids, pos, self.cache)
            else:
                logits = self.model(input_ids=ids, past_key_values=self.cache, use_cache=True,
                                    cache_position=pos).logits
            token = logits[:, -1:].argmax(-1)
            if self.sync_forward:
                _sync(self.device)
        finally:
            NVTX.pop()
        return token


def iteration(target: Runner, draft: Runner | None, gamma: int, input_len: int, decode: int) -> None:
    device = target.device
    target.reset()
    prompt = torch.randint(0, target.vocab, (1, input_len), device=device)
    token = target.forward(prompt, 0)
    if draft is not None:
        draft.reset()
        draft.forward(prompt, 0)
    _sync(device)
    pos = input_len
    for _ in range(decode):
        if draft is None:
            NVTX.push(STEP, 1)
            token = target.forward(token, pos)
        else:  # verify the last token and γ proposals (none accepted: one new token per step), then draft γ
            NVTX.push(STEP, gamma + 1)
            proposals = token.repeat(1, gamma + 1)
            token = target.forward(proposals, pos)
            guess = token
            for k in range(gamma):
                guess = draft.forward(guess, pos + k)
        _sync(device)
        NVTX.pop()
        pos += 1


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", required=True, help="a shipped shape, e.g. llama-2-7b-shape")
    p.add_argument("--draft", default=None, help="a shipped shape: run speculative-shaped steps with this draft")
    p.add_argument("--gamma", type=int, default=3, help="draft tokens per step (with --draft)")
    p.add_argument("--input-len", type=int, default=128)
    p.add_argument("--decode", type=int, default=8, help="decode steps per iteration")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--iters", type=int, default=10)
    p.add_argument("--graphs", action="store_true", help="one-token forwards through torch.compile(reduce-overhead)")
    p.add_argument("--sync", choices=("step", "forward"), default="step")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = p.parse_args()
    t0 = time.perf_counter()
    device = torch.device(args.device)
    torch.manual_seed(0)
    # Room for every token a forward writes: newer transformers' StaticCache appends (it ignores cache_position for the
    # write), so a verify step's rejected positions are not overwritten as in vLLM but take new slots.
    cache_len = args.input_len + args.decode * (args.gamma + 1 if args.draft else 1) + 2
    sync_forward = args.sync == "forward"
    target = Runner(build(args.model, device), device, FORWARD, cache_len, sync_forward, args.graphs)
    draft = None
    if args.draft:
        draft = Runner(build(args.draft, device), device, DRAFT, cache_len, sync_forward, args.graphs)
    NVTX.attached  # noqa: B018 (attach now, so the line below says to what)
    print(f"workload: {args.model}{' + ' + args.draft if args.draft else ''} on {device} built in "
          f"{time.perf_counter() - t0:.1f} s; NVTX: {NVTX.status}", flush=True)
    for i in range(args.warmup + args.iters):
        with NVTX.range("nsys_cc:warmup" if i < args.warmup else "nsys_cc:iteration", 1):
            iteration(target, draft, args.gamma, args.input_len, args.decode)
    print(f"workload: {args.warmup} + {args.iters} iterations done in {time.perf_counter() - t0:.1f} s", flush=True)


if __name__ == "__main__":
    main()
