#!/bin/bash
# E2/E3 of docs/REPEATABILITY.md: K rounds of [both models in one process alternating by iteration, by engine step],
# 60 iterations each (all recorded), output-len 32, no nsys.
set -u
cd "$(dirname "$0")/../.."
M=nsys_cc/launch/models; T=$M/tiny-llama-target; D=$M/tiny-llama-draft-xs
OUT=${OUT:-/work/exp22/e2}; K=${K:-4}; ITERS=${ITERS:-60}
mkdir -p "$OUT"
for k in $(seq 1 "$K"); do
  for kind in iter step; do
    case $kind in iter) mode=--alternate;; step) mode=--alternate-steps;; esac
    .venv/bin/python benchmarks/repeatability/probe.py --model $T --model $D $mode --warmup 0 --iters "$ITERS" \
      --output-len 32 --out "$OUT/$k-$kind.json" > "$OUT/$k-$kind.log" 2>&1
    echo "$(date +%T) $k $kind rc=$? load=$(cut -d' ' -f1-3 /proc/loadavg)"
  done
done
