#!/usr/bin/env bash
# Regenerate fixtures/spec/ with the real nsys and vLLM's CPU build: speculative decoding traces (issue 12).
# Called by scripts/make_fixtures.sh; run it alone with `scripts/make_spec_fixtures.sh [OUT_DIR] [PART…]`,
# PART one of tiny, pair, scopes, batch, ngram, heads (default: all six). What each file is: fixtures/spec/README.md.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-fixtures/spec}
shift || true
parts=${*:-tiny pair scopes batch ngram heads}
py=${PY:-.venv/bin/python}
nsys_cc=(env PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" "$py" -c 'import sys; from nsys_cc.cli import main; main(sys.argv[1:])')
nsys=$("$py" -c 'from nsys_cc.trace.nsys import require_nsys; print(require_nsys())')
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$out"

# Every speculative fixture runs the same benchmark: 128 prompt + 32 generated tokens (decode steps dominate),
# batch 1, few iterations and only NVTX traced so that the files stay small.
# One process per model (--separate-processes): each run leaves its own <label>.sqlite, as these fixtures are.
bench=(--input-len 128 --output-len 32 --batch-size 1 --num-iters-warmup 1 --num-iters 3 --nsys-trace nvtx --device cpu
       --separate-processes)

# Copy the files of completed runs: LABEL… from DIR (the .metrics.json of speculative runs too).
keep() {
  local dir=$1; shift
  for label in "$@"; do
    [ -f "$dir/$label.done.json" ] || { cat "$dir/status.json"; exit 1; }
    cp "$dir/$label.sqlite" "$dir/$label.bench.json" "$out/"
    if [ -f "$dir/$label.metrics.json" ]; then cp "$dir/$label.metrics.json" "$out/"; fi
  done
}

for part in $parts; do
  case $part in
  tiny)
    # 1. The tiny demo pair (dummy weights: α ≈ 0): plain target, plain draft, speculative γ = 1, 2, 3.
    # The exit status also reflects the analysis; the fixtures only need each run's checked trace (.done.json).
    "${nsys_cc[@]}" profile --target tiny-llama-target --draft tiny-llama-draft-xs --speculate 1,2,3 "${bench[@]}" \
      -o "$work/tiny" || true
    keep "$work/tiny" tiny-llama-target tiny-llama-draft-xs tiny-llama-draft-xs.spec-g{1,2,3}
    ;;
  pair)
    # 2. The known-α pair (real weights built by nsys_cc.launch.pair): pair-draft speculating for pair-target-a50
    # (α = 0.50) at γ = 1, 2, 3, and for pair-target (α = 0.99) at γ = 2; one profile directory per target.
    "${nsys_cc[@]}" profile --target pair-target-a50 --draft pair-draft --speculate 1,2,3 "${bench[@]}" \
      -o "$work/pair-a50" || true
    "${nsys_cc[@]}" profile --target pair-target --draft pair-draft --speculate 2 "${bench[@]}" \
      -o "$work/pair-a99" || true
    mkdir -p "$out/pair-a50" "$out/pair-a99"
    out=$out/pair-a50 keep "$work/pair-a50" pair-target-a50 pair-draft pair-draft.spec-g{1,2,3}
    out=$out/pair-a99 keep "$work/pair-a99" pair-target pair-draft pair-draft.spec-g2
    ;;
  scopes)
    # 3. A speculative run with the plugin off and vLLM's own NVTX scopes on (`llm_engine step: get_output`,
    # `gpu_model_runner: forward`, `gpu_model_runner: draft`, …), γ = 3, metrics dumped too.
    m=nsys_cc/launch/models
    env NSYS_CC_PLUGIN=0 VLLM_NVTX_SCOPES_FOR_PROFILING=1 NSYS_CC_METRICS_OUT="$out/vllm_scopes.spec-g3.metrics.json" \
      VLLM_ENABLE_V1_MULTIPROCESSING=0 VLLM_CPU_KVCACHE_SPACE=1 VLLM_CPU_OMP_THREADS_BIND=nobind OMP_NUM_THREADS=1 \
      PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" \
      "$nsys" profile -t nvtx -s none --cpuctxsw=none -f true -o "$work/vllm_scopes" \
      "$py" -m nsys_cc.vllm.bench --model $m/tiny-llama-target --load-format dummy --input-len 128 --output-len 32 \
      --batch-size 1 --num-iters-warmup 1 --num-iters 2 --skip-tokenizer-init --disable-detokenize --enforce-eager \
      --gpu-memory-utilization 0.3 --output-json "$out/vllm_scopes.spec-g3.bench.json" \
      --speculative-config "{\"method\":\"draft_model\",\"model\":\"$m/tiny-llama-draft-xs\",\"num_speculative_tokens\":3}" \
      > "$work/vllm_scopes.log" 2>&1 || { tail -20 "$work/vllm_scopes.log"; exit 1; }
    "$nsys" export --type sqlite -f true -o "$out/vllm_scopes.spec-g3.sqlite" "$work/vllm_scopes.nsys-rep" \
      > "$work/export.log" 2>&1 || { cat "$work/export.log"; exit 1; }
    ;;
  batch)
    # 4. Batch 4 and two drafts (dummy weights: every sequence of the batch advances in lockstep): the target, two
    # drafts, and each draft speculating at γ = 1 and 3; short prompts and outputs keep the files small.
    "${nsys_cc[@]}" profile --target tiny-llama-target --draft tiny-llama-draft-xs --draft tiny-llama-draft-s \
      --speculate 1,3 --input-len 32 --output-len 8 --batch-size 4 --num-iters-warmup 1 --num-iters 2 \
      --nsys-trace nvtx --device cpu --separate-processes -o "$work/batch4" || true
    mkdir -p "$out/batch4"
    out=$out/batch4 keep "$work/batch4" tiny-llama-target tiny-llama-draft-xs tiny-llama-draft-s \
      tiny-llama-draft-xs.spec-g{1,3} tiny-llama-draft-s.spec-g{1,3}
    ;;
  ngram)
    # 5. A proposer without a draft model: vLLM's ngram (prompt lookup) speculating for `pair-target`, whose almost
    # deterministic output falls into a loop after a few tens of tokens, where the lookup finds its drafts; the plain
    # target beside it.
    "${nsys_cc[@]}" profile --target pair-target \
      --speculative-config '{"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 3, "prompt_lookup_min": 1}' \
      --input-len 32 --output-len 64 --batch-size 1 --num-iters-warmup 1 --num-iters 2 --nsys-trace nvtx --device cpu \
      -o "$work/ngram" || true
    mkdir -p "$out/ngram"
    out=$out/ngram keep "$work/ngram" pair-target ngram.spec-g3
    ;;
  heads)
    # 6. The methods servers run (issue 29): drafters on the target's hidden states, with no standalone run. The
    # shipped EAGLE head on tiny-llama-target at γ = 1 and 3 (its plain target beside it), the EAGLE-3 head at γ = 3,
    # and MTP at γ = 3 with tiny-mimo-target (a target with one MTP layer of its own; its plain run beside it).
    # Short runs (dummy weights: α = 0), in one folder each profile left.
    hbench=(--input-len 32 --output-len 16 --batch-size 1 --num-iters-warmup 1 --num-iters 2 --nsys-trace nvtx --device cpu)
    "${nsys_cc[@]}" profile --target tiny-llama-target --speculative-config '{"method": "eagle"}' --speculate 1,3 \
      "${hbench[@]}" -o "$work/eagle" || true
    "${nsys_cc[@]}" profile --target tiny-llama-target --speculative-config '{"method": "eagle3"}' --speculate 3 \
      "${hbench[@]}" -o "$work/eagle3" || true
    "${nsys_cc[@]}" profile --target tiny-mimo-target --speculative-config '{"method": "mtp"}' --speculate 3 \
      "${hbench[@]}" -o "$work/mtp" || true
    mkdir -p "$out/heads" "$out/heads/mtp"
    out=$out/heads keep "$work/eagle" tiny-llama-target tiny-llama-eagle.spec-g{1,3}
    out=$out/heads keep "$work/eagle3" tiny-llama-eagle3.spec-g3
    out=$out/heads/mtp keep "$work/mtp" tiny-mimo-target mtp.spec-g3
    ;;
  *) echo "unknown part $part (tiny, pair, scopes, batch, ngram, heads)" >&2; exit 2 ;;
  esac
done
ls -l "$out"
