"""LLaMA-shaped forwards for the GPU-traces issue: a prefill then decode steps with the KV cache, per model.

Builds `transformers.LlamaForCausalLM` from one of nsys_cc's shipped configs (random weights, no download),
batch 1, and runs `--warmup` then `--iters` iterations of one `--input-len`-token prefill followed by `--decode`
one-token decode steps. Each forward is an NVTX push/pop range `model_executable()` whose payload is its token
count, each iteration an `nsys_cc:warmup` / `nsys_cc:iteration` range with payload 1 (the batch) — the conventions
`nsys-cc analyze` reads, so warm-up is dropped and phases come from the payloads. Each forward range ends after a
device synchronisation, so its wall time is the forward's latency, not only the CPU time to launch it. `--graphs`
replays the decode step as a CUDA graph (static KV cache). Runs on the CPU too (float32), which is how it is
tested before a GPU run.

    python workload.py --model llama-68m-shape [--input-len 128] [--decode 8] [--warmup 3] [--iters 10] [--graphs]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import nvtx
import torch
from transformers import LlamaConfig, LlamaForCausalLM, StaticCache

MODELS = Path(__file__).resolve().parents[2] / "nsys_cc" / "profile" / "models"


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def build(name: str, device: torch.device) -> LlamaForCausalLM:
    cfg = LlamaConfig(**json.loads((MODELS / name / "config.json").read_text()))
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    with torch.device(device):
        model = LlamaForCausalLM(cfg).to(dtype)
    return model.eval()


@torch.inference_mode()
def iteration(model, device, input_len: int, decode: int, graph_step=None) -> None:
    vocab = model.config.vocab_size
    ids = torch.randint(0, min(vocab, 10000), (1, input_len), device=device)
    cache = StaticCache(config=model.config, max_batch_size=1, max_cache_len=input_len + decode + 1,
                        device=device, dtype=next(model.parameters()).dtype)
    with nvtx.annotate("model_executable()", payload=input_len):
        out = model(input_ids=ids, past_key_values=cache, use_cache=True,
                    cache_position=torch.arange(input_len, device=device))
        _sync(device)
    token = out.logits[:, -1:].argmax(-1)
    for step in range(decode):
        pos = torch.tensor([input_len + step], device=device)
        with nvtx.annotate("model_executable()", payload=1):
            if graph_step is not None:
                token = graph_step(token, pos, cache)
            else:
                out = model(input_ids=token, past_key_values=cache, use_cache=True, cache_position=pos)
                token = out.logits[:, -1:].argmax(-1)
            _sync(device)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", required=True, help="a shipped shape, e.g. llama-2-7b-shape")
    p.add_argument("--input-len", type=int, default=128)
    p.add_argument("--decode", type=int, default=8, help="decode steps per iteration")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--iters", type=int, default=10)
    p.add_argument("--graphs", action="store_true", help="decode steps through torch.compile(mode='reduce-overhead')")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = p.parse_args()
    device = torch.device(args.device)
    torch.manual_seed(0)
    model = build(args.model, device)
    graph_step = None
    if args.graphs:
        compiled = torch.compile(model, mode="reduce-overhead", fullgraph=True)

        def graph_step(token, pos, cache):
            out = compiled(input_ids=token, past_key_values=cache, use_cache=True, cache_position=pos)
            return out.logits[:, -1:].argmax(-1)

    for i in range(args.warmup + args.iters):
        name = "nsys_cc:warmup" if i < args.warmup else "nsys_cc:iteration"
        with nvtx.annotate(name, payload=1):
            iteration(model, device, args.input_len, args.decode, graph_step)


if __name__ == "__main__":
    main()
