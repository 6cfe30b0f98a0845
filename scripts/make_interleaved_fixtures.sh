#!/usr/bin/env bash
# Regenerate fixtures/interleaved/ with the real nsys and vLLM's CPU build: three interleaved runs of `nsys-cc
# profile` (every model in one process per run, two engines per model), about 3 minutes on 2 cores.
# Called by scripts/make_fixtures.sh; run it alone with `scripts/make_interleaved_fixtures.sh [OUT_DIR]`;
# PARTS="runs" or PARTS="spec" makes only the plain runs (run-*) or only spec/ (default: both).
# What each file is: fixtures/interleaved/README.md.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-fixtures/interleaved}
py=${PY:-.venv/bin/python}
nsys_cc=$(dirname "$py")/nsys-cc
parts=" ${PARTS:-runs spec} "
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

if [[ $parts == *" runs "* ]]; then
# Small iterations (batch 2 so that decode payloads, 2, differ from 1), only NVTX traced: small files.
"$nsys_cc" profile --target tiny-llama-target --draft tiny-llama-draft-s --draft tiny-llama-draft-xs \
  --input-len 64 --output-len 4 --batch-size 2 --num-iters-warmup 1 --num-iters 2 --repeat 3 --replicas 2 \
  --nsys-trace nvtx --device cpu -o "$work/profile" > "$work/profile.log" 2>&1 || { tail -20 "$work/profile.log"; exit 1; }
rm -rf "$out"/run-*
for k in 1 2 3; do
  [ -f "$work/profile/run-$k/done.json" ] || { cat "$work/profile/status.json"; exit 1; }
  mkdir -p "$out/run-$k"
  cp "$work/profile/run-$k"/{trace.sqlite,interleaved.json,done.json} "$work/profile/run-$k"/*.bench.json "$out/run-$k/"
done
ls -lR "$out"
fi

if [[ $parts == *" spec "* ]]; then
# Speculative engines interleaved with the plain target (γ = 1, 2, 3), two runs, one engine each: fixtures/interleaved/spec.
spec=${out}/spec
"$nsys_cc" profile --target tiny-llama-target --draft tiny-llama-draft-xs --speculate 1,2,3 \
  --input-len 64 --output-len 6 --batch-size 1 --num-iters-warmup 1 --num-iters 2 --repeat 2 --replicas 1 \
  --nsys-trace nvtx --device cpu -o "$work/spec" > "$work/spec.log" 2>&1 || { tail -20 "$work/spec.log"; exit 1; }
rm -rf "$spec"
for k in 1 2; do
  [ -f "$work/spec/run-$k/done.json" ] || { cat "$work/spec/status.json"; exit 1; }
  mkdir -p "$spec/run-$k"
  cp "$work/spec/run-$k"/{trace.sqlite,interleaved.json,done.json} "$work/spec/run-$k"/*.bench.json \
     "$work/spec/run-$k"/*.metrics.json "$spec/run-$k/"
done
cp "$work/spec/status.json" "$spec/"
ls -lR "$spec"
fi
