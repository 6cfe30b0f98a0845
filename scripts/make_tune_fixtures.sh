#!/usr/bin/env bash
# Regenerate fixtures/tune/ with the real nsys and vLLM's CPU build: the layout `nsys-cc tune` writes (one interleaved
# `nsys-cc profile` directory per batch size, bs<B>/, plain target + draft + one speculative engine per γ), small:
# two runs, one engine per model, 1 warm-up + 2 measured iterations, 8 output tokens, NVTX only.
# Design cells B ∈ {1, 8} × γ ∈ {1, 3}; held-out cells 4:2 and 16:3. Called by scripts/make_fixtures.sh;
# alone: `scripts/make_tune_fixtures.sh [OUT_DIR]`; PAIRS="a50" makes only the α ≈ 0.5 pair (default: a50 a99).
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-fixtures/tune}
py=${PY:-.venv/bin/python}
nsys_cc=$(dirname "$py")/nsys-cc
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cells=${CELLS:-"1:1,3 8:1,3 4:2 16:3"}
for pair in ${PAIRS-a50 a99}; do
  for cell in $cells; do
    b=${cell%%:*}; g=${cell#*:}
    d="$work/$pair/bs$b"
    target=pair-target-$pair; [ "$pair" = a99 ] && target=pair-target   # α ≈ 0.996 built in
    "$nsys_cc" profile --target "$target" --draft pair-draft --speculate "$g" \
      --input-len 32 --output-len 8 --batch-size "$b" --num-iters-warmup 1 --num-iters 2 --repeat 2 --replicas 1 \
      --nsys-trace nvtx --device cpu -o "$d" > "$work/$pair-bs$b.log" 2>&1 || { tail -20 "$work/$pair-bs$b.log"; exit 1; }
    dest="$out/$pair/bs$b"
    rm -rf "$dest"
    for k in 1 2; do
      [ -f "$d/run-$k/done.json" ] || { cat "$d/status.json"; exit 1; }
      mkdir -p "$dest/run-$k"
      cp "$d/run-$k"/{trace.sqlite,interleaved.json,done.json} "$d/run-$k"/*.bench.json "$d/run-$k"/*.metrics.json \
         "$dest/run-$k/"
    done
    cp "$d/status.json" "$dest/"
    echo "fixtures: $dest"
  done
done
# The layout `nsys-cc tune` writes since every cell is measured in the same runs: one interleaved profile directory,
# round-1/, holding per batch size the plain target (bs<B>.<target>) and each speculative engine (bs<B>.<draft>.spec-g<γ>),
# one vLLM engine per model serving every batch size. Same sizes as above; the design and the held-out cells together.
for pair in ${DESIGN_PAIRS:-a99}; do
  target=pair-target-$pair; [ "$pair" = a99 ] && target=pair-target
  d="$work/$pair-design"
  "$nsys_cc" tune --target "$target" --draft pair-draft --batch-size 1,8 --speculate 1,3 --check 4:2,16:3 \
    --input-len 32 --output-len 8 --num-iters-warmup 1 --num-iters 2 --repeat 2 --replicas 1 --nsys-trace nvtx \
    --device cpu --no-confirm --run-schedule --no-plot -o "$d" > "$work/$pair-design.log" 2>&1 \
    || { tail -20 "$work/$pair-design.log"; exit 1; }
  dest="$out/$pair-design"
  rm -rf "$dest"
  for r in 1 2; do   # round-2: every cell again and vLLM's whole schedule at each batch size (--run-schedule)
    for k in 1 2; do
      [ -f "$d/round-$r/run-$k/done.json" ] || { cat "$d/round-$r/status.json"; exit 1; }
      mkdir -p "$dest/round-$r/run-$k"
      cp "$d/round-$r/run-$k"/{trace.sqlite,interleaved.json,done.json} "$d/round-$r/run-$k"/*.bench.json \
         "$d/round-$r/run-$k"/*.metrics.json "$dest/round-$r/run-$k/"
    done
    cp "$d/round-$r/status.json" "$dest/round-$r/"
  done
  python3 -c "import json,sys; d=json.load(open(sys.argv[1])); json.dump({'design': d['design']}, open(sys.argv[2], 'w'), indent=1)" \
    "$d/tune.json" "$dest/tune.json"
  echo "fixtures: $dest"
done
