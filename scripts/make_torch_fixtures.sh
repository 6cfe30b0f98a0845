#!/usr/bin/env bash
# Regenerate fixtures/torch/: PyTorch-profiler (Kineto) traces written by vLLM's own torch profiler on the CPU build
# (issue 42). Called by scripts/make_fixtures.sh; run it alone with `scripts/make_torch_fixtures.sh [OUT_DIR] [PART…]`,
# PART one of tiny, profile, pair (default: all three; about 4 minutes on 2 cores: six vLLM runs of ~30 s). No nsys is
# needed. What each file is: fixtures/torch/README.md.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-fixtures/torch}
shift || true
parts=${*:-tiny profile pair}
py=${PY:-.venv/bin/python}
m=nsys_cc/launch/models
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$out"

# vLLM's own latency benchmark (`vllm bench latency`), in process: it profiles one batch with `--profile` (warm-up
# iterations first, unprofiled) and writes DIR/rank0.<id>.pt.trace.json.gz plus torch's key_averages() table
# (rank0.profiler_out.txt). One engine core in the benchmark's process, one OpenMP thread: the trace stays small.
# Short prompts and outputs keep the files a few hundred KB.
bench() {  # LABEL WITH_STACK ARGS…: one profiled run, its trace copied to OUT/LABEL.pt.trace.json.gz
  local label=$1 stack=$2; shift 2
  local dir=$work/$label
  mkdir -p "$dir"
  env VLLM_ENABLE_V1_MULTIPROCESSING=0 OMP_NUM_THREADS=1 VLLM_CPU_KVCACHE_SPACE=1 VLLM_CPU_OMP_THREADS_BIND=nobind \
    NSYS_CC_PLUGIN=0 "$py" -c '
import sys
from vllm.benchmarks.latency import add_cli_args, main
from vllm.utils.argparse_utils import FlexibleArgumentParser
parser = FlexibleArgumentParser()
add_cli_args(parser)
main(parser.parse_args(sys.argv[1:]))' \
    --load-format dummy --skip-tokenizer-init --disable-detokenize --enforce-eager --kv-cache-memory-bytes 268435456 \
    --batch-size 1 --num-iters-warmup 1 --profile \
    --profiler-config "{\"profiler\": \"torch\", \"torch_profiler_dir\": \"$dir\", \"torch_profiler_with_stack\": $stack}" \
    "$@" > "$work/$label.log" 2>&1 || { tail -30 "$work/$label.log"; exit 1; }
  local traces=("$dir"/*.pt.trace.json.gz)
  [ ${#traces[@]} -eq 1 ] && [ -f "${traces[0]}" ] || { ls -l "$dir"; tail -30 "$work/$label.log"; exit 1; }
  cp "${traces[0]}" "$out/$label.pt.trace.json.gz"
  if [ -f "$dir/rank0.profiler_out.txt" ]; then cp "$dir/rank0.profiler_out.txt" "$out/$label.key_averages.txt"; fi
}

for part in $parts; do
  case $part in
  tiny)
# 1. The tiny target, Python frames on (the step's `sample_tokens` frame needs them): 1 prefill + 5 decode steps.
bench tiny-llama-target true --model $m/tiny-llama-target --input-len 32 --output-len 6
# 2. The smallest draft alone, Python frames off (vLLM's step annotations and the aten ops only).
bench tiny-llama-draft-xs false --model $m/tiny-llama-draft-xs --input-len 32 --output-len 6
# 3. Speculative decoding with the draft model (vLLM's draft_model method, γ = 2), Python frames on (the proposer's
# `…/spec_decode/…: propose` frame needs them): verify steps of 1 + γ tokens.
bench tiny-llama-draft-xs.spec-g2 true --model $m/tiny-llama-target --input-len 32 --output-len 6 \
  --speculative-config "{\"method\": \"draft_model\", \"model\": \"$m/tiny-llama-draft-xs\", \"num_speculative_tokens\": 2}"

# Every trace must hold vLLM's step annotations; the speculative one the proposer's frames.
"$py" - "$out" <<'PY'
import gzip, json, sys
out = sys.argv[1]
for label, frame in (("tiny-llama-target", "sample_tokens"), ("tiny-llama-draft-xs", None),
                     ("tiny-llama-draft-xs.spec-g2", "propose")):
    events = json.load(gzip.open(f"{out}/{label}.pt.trace.json.gz"))["traceEvents"]
    steps = [e["name"] for e in events if e.get("cat") == "user_annotation" and e["name"].startswith("execute_")]
    frames = [e["name"] for e in events if e.get("cat") == "python_function" and frame and e["name"].endswith(frame)]
    print(f"{label}: {len(events)} events, {len(steps)} steps, {len(frames)} '{frame}' frames")
    if not steps or (frame and not frames):
        sys.exit(f"{label}: the trace lacks vLLM's step annotations or the '{frame}' frames")
PY

    ;;
  profile)
# 4. The torch route of the project's own launcher: an interleaved profile directory made by
# `nsys-cc profile --profiler torch` (no nsys), 2 runs of the tiny pair, few iterations: fixtures/torch/profile/, which
# `nsys-cc analyze fixtures/torch/profile` reads as any profile directory. Logs, the report and the paths written
# into status.json are where the run was made, so only what the analysis reads is kept (status.json's paths are not
# read: the files are looked up in the folder itself).
prof=$work/profile
PYTHONPATH=${PYTHONPATH:-$PWD} "$py" -c 'import sys; from nsys_cc.cli import main; main(sys.argv[1:])' \
  profile --profiler torch --target tiny-llama-target \
  --draft tiny-llama-draft-xs --repeat 2 --replicas 1 --input-len 32 --output-len 4 --num-iters-warmup 1 \
  --num-iters 3 --device cpu -o "$prof" > "$work/profile.log" 2>&1 || { tail -30 "$work/profile.log"; exit 1; }
rm -rf "$out/profile"
mkdir -p "$out/profile"
cp "$prof/status.json" "$out/profile/"
for run in "$prof"/run-*/; do
  k=$(basename "$run")
  mkdir -p "$out/profile/$k"
  cp "$run"/trace.pt.trace.json.gz "$run"/done.json "$run"/interleaved.json "$run"/*.bench.json "$out/profile/$k/"
done
ls -l "$out/profile"/*
    ;;
  pair)
# 5. A speculative run measured in place with real acceptance: the known-α pair (real weights built on first use by
# nsys_cc.launch.pair: pair-draft proposing for pair-target-a50, α ≈ 0.50) under vLLM's own torch profiler with Python
# frames on, as a user records it (`--profile --profiler-config '{"profiler": "torch", …, "with_stack": true}'`):
# vLLM's draft_model method at γ = 3, batch 4, prompts of 32 tokens, 10 output tokens (about 5 verify steps per
# request), and the plain target's and the plain draft's runs of the same benchmark. The driver is nsys_cc's (`nsys_cc.vllm.bench`: vLLM's
# latency benchmark with the CPU build's fix for speculative sampling, the plugin off) so that vLLM's counters are
# dumped too (`<label>.metrics.json`, NSYS_CC_METRICS_OUT: the warm-up batch and the profiled one), for α from vLLM
# beside the trace's. Weights are real (`--load-format auto`); vLLM samples at temperature 1.
target=$("$py" -c 'from nsys_cc.launch.pair import path; print(path("pair-target-a50"))')
draft=$("$py" -c 'from nsys_cc.launch.pair import path; print(path("pair-draft"))')
pair_bench() {  # LABEL MODEL ARGS…: one profiled run of the pair's benchmark, its trace and metrics dump copied to OUT
  local label=$1 model=$2; shift 2
  local dir=$work/$label
  mkdir -p "$dir"
  env VLLM_ENABLE_V1_MULTIPROCESSING=0 OMP_NUM_THREADS=1 VLLM_CPU_KVCACHE_SPACE=1 VLLM_CPU_OMP_THREADS_BIND=nobind \
    NSYS_CC_PLUGIN=0 NSYS_CC_METRICS_OUT="$dir/metrics.json" PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" \
    "$py" -m nsys_cc.vllm.bench --load-format auto --skip-tokenizer-init --disable-detokenize --enforce-eager \
    --kv-cache-memory-bytes 268435456 --batch-size 4 --input-len 32 --output-len 10 --num-iters-warmup 1 --profile \
    --profiler-config "{\"profiler\": \"torch\", \"torch_profiler_dir\": \"$dir\", \"torch_profiler_with_stack\": true}" \
    --model "$model" "$@" > "$work/$label.log" 2>&1 || { tail -30 "$work/$label.log"; exit 1; }
  local traces=("$dir"/*.pt.trace.json.gz)
  [ ${#traces[@]} -eq 1 ] && [ -f "${traces[0]}" ] || { ls -l "$dir"; tail -30 "$work/$label.log"; exit 1; }
  cp "${traces[0]}" "$out/$label.pt.trace.json.gz"
  # a plain run's dump holds no spec-decode counters, and a dump beside a trace says it is a speculative run: kept
  # for the speculative run only
  if [[ $label == *.spec-g* ]]; then cp "$dir/metrics.json" "$out/$label.metrics.json"; fi
}
pair_bench pair-target-a50 "$target"
pair_bench pair-draft "$draft"
pair_bench pair-draft.spec-g3 "$target" \
  --speculative-config "{\"method\": \"draft_model\", \"model\": \"$draft\", \"num_speculative_tokens\": 3}"
"$py" - "$out" <<'PY'
import gzip, json, sys
out = sys.argv[1]
for label, frame in (("pair-target-a50", "sample_tokens"), ("pair-draft", "sample_tokens"),
                     ("pair-draft.spec-g3", "propose")):
    events = json.load(gzip.open(f"{out}/{label}.pt.trace.json.gz"))["traceEvents"]
    steps = [e["name"] for e in events if e.get("cat") == "user_annotation" and e["name"].startswith("execute_")]
    frames = [e["name"] for e in events if e.get("cat") == "python_function" and e["name"].endswith(frame)]
    print(f"{label}: {len(events)} events, {len(steps)} steps, {len(frames)} '{frame}' frames")
    if not steps or not frames:
        sys.exit(f"{label}: the trace lacks vLLM's step annotations or the '{frame}' frames")
PY
    ;;
  *)
    echo "unknown part: $part (tiny, profile, pair)" >&2; exit 2
    ;;
  esac
done
ls -l "$out"
