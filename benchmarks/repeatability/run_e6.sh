#!/bin/bash
# E6 of docs/REPEATABILITY.md: K processes each holding TWO engines of each model (T, D, T, D), alternating by
# iteration, 20 iterations, output-len 32, no nsys: do two instances of one model in one process differ?
set -u
cd "$(dirname "$0")/../.."
M=nsys_cc/launch/models; T=$M/tiny-llama-target; D=$M/tiny-llama-draft-xs
OUT=${OUT:-/work/exp22/e6}; K=${K:-4}; ITERS=${ITERS:-20}
mkdir -p "$OUT"
for k in $(seq 1 "$K"); do
  .venv/bin/python benchmarks/repeatability/probe.py --model $T --model $D --model $T --model $D --alternate \
    --warmup 0 --iters "$ITERS" --output-len 32 --out "$OUT/$k-twice.json" > "$OUT/$k-twice.log" 2>&1
  echo "$(date +%T) $k rc=$? load=$(cut -d' ' -f1-3 /proc/loadavg)"
done
