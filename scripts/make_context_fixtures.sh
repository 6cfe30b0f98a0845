#!/usr/bin/env bash
# Regenerate fixtures/context/: the step's total context (Σ KV length, issue 51) as each route records it, one small
# benchmark of the tiny target (batch 2, prompts of 32 tokens, 4 output tokens: a prefill and 3 decode steps per
# iteration) — the plugin's `nsys_cc:step_context` under nsys and on the torch route, and vLLM's own detailed step
# annotations (`detailed_trace_annotation`: `execute_<n>_context_…(sq…sk…)_generation_…(sq…sk…)`). Called by
# scripts/make_fixtures.sh; run it alone with `scripts/make_context_fixtures.sh [OUT_DIR]` (about a minute and a half
# on 2 cores). What each file is: fixtures/context/README.md.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-fixtures/context}
py=${PY:-.venv/bin/python}
m=nsys_cc/launch/models
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$out"
bench=(--input-len 32 --output-len 4 --batch-size 2 --num-iters-warmup 1 --num-iters 2)
cli() { PYTHONPATH=${PYTHONPATH:-$PWD} "$py" -c 'import sys; from nsys_cc.cli import main; main(sys.argv[1:])' "$@"; }

# 1. The plugin under nsys (NVTX only): its step ranges with their context range inside (profile needs a draft: the
# smallest runs beside, in its own process, and only the target's trace is kept).
cli profile --target tiny-llama-target --draft tiny-llama-draft-xs "${bench[@]}" --separate-processes --nsys-trace nvtx --device cpu \
  -o "$work/nsys" > "$work/nsys.log" 2>&1 || true
[ -f "$work/nsys/tiny-llama-target.sqlite" ] || { tail -30 "$work/nsys.log"; exit 1; }
cp "$work/nsys/tiny-llama-target.sqlite" "$out/plugin.sqlite"

# 2. The plugin on the torch route (`--profiler torch`, no nsys): the same ranges as Kineto user annotations, each
# payload in its name (`nsys_cc:step_context#70`).
cli profile --profiler torch --target tiny-llama-target --draft tiny-llama-draft-xs "${bench[@]}" --separate-processes --device cpu \
  -o "$work/torch" > "$work/torch.log" 2>&1 || true
traces=("$work"/torch/tiny-llama-target*.pt.trace.json.gz)
[ -f "${traces[0]}" ] || { ls -R "$work/torch"; tail -30 "$work/torch.log"; exit 1; }
cp "${traces[0]}" "$out/plugin.pt.trace.json.gz"

# 3. vLLM's own detailed step annotations (the plugin off), vLLM's latency benchmark profiling one batch.
dir=$work/vllm
env VLLM_ENABLE_V1_MULTIPROCESSING=0 OMP_NUM_THREADS=1 VLLM_CPU_KVCACHE_SPACE=1 VLLM_CPU_OMP_THREADS_BIND=nobind \
  NSYS_CC_PLUGIN=0 "$py" -c '
import sys
from vllm.benchmarks.latency import add_cli_args, main
from vllm.utils.argparse_utils import FlexibleArgumentParser
parser = FlexibleArgumentParser()
add_cli_args(parser)
main(parser.parse_args(sys.argv[1:]))' \
  --model $m/tiny-llama-target --load-format dummy --skip-tokenizer-init --disable-detokenize --enforce-eager \
  --kv-cache-memory-bytes 268435456 --input-len 32 --output-len 4 --batch-size 2 --num-iters-warmup 1 --profile \
  --profiler-config "{\"profiler\": \"torch\", \"torch_profiler_dir\": \"$dir\", \"torch_profiler_with_stack\": false, \
\"detailed_trace_annotation\": true}" > "$work/vllm.log" 2>&1 || { tail -30 "$work/vllm.log"; exit 1; }
traces=("$dir"/*.pt.trace.json.gz)
[ ${#traces[@]} -eq 1 ] && [ -f "${traces[0]}" ] || { ls -l "$dir"; tail -30 "$work/vllm.log"; exit 1; }
cp "${traces[0]}" "$out/vllm-detailed.pt.trace.json.gz"
ls -l "$out"
