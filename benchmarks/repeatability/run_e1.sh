#!/bin/bash
# E1/E2 of docs/REPEATABILITY.md: K rounds of [target alone, draft alone, both in one process alternating],
# 12 iterations each (no warm-up split: every iteration is recorded), output-len 32, no nsys.
set -u
cd "$(dirname "$0")/../.."
M=nsys_cc/launch/models; T=$M/tiny-llama-target; D=$M/tiny-llama-draft-xs
OUT=${OUT:-/work/exp22/e1}; K=${K:-6}
mkdir -p "$OUT"
for k in $(seq 1 "$K"); do
  for kind in t d both; do
    case $kind in t) args="--model $T";; d) args="--model $D";; both) args="--model $T --model $D --alternate";; esac
    .venv/bin/python benchmarks/repeatability/probe.py $args --warmup 0 --iters 12 --output-len 32 \
      --out "$OUT/$k-$kind.json" > "$OUT/$k-$kind.log" 2>&1
    echo "$(date +%T) $k $kind rc=$? load=$(cut -d' ' -f1-3 /proc/loadavg)"
  done
done
