#!/bin/bash
# E5 of docs/REPEATABILITY.md: K rounds of [default, THP_MEM_ALLOC_ENABLE=1 (torch madvises huge pages)], both models
# in one process alternating by iteration, 30 iterations, output-len 32, no nsys.
set -u
cd "$(dirname "$0")/../.."
M=nsys_cc/launch/models; T=$M/tiny-llama-target; D=$M/tiny-llama-draft-xs
OUT=${OUT:-/work/exp22/e5}; K=${K:-5}; ITERS=${ITERS:-30}
mkdir -p "$OUT"
for k in $(seq 1 "$K"); do
  for kind in plain thp; do
    case $kind in plain) env=();; thp) env=(THP_MEM_ALLOC_ENABLE=1);; esac
    env "${env[@]}" .venv/bin/python benchmarks/repeatability/probe.py --model $T --model $D --alternate --warmup 0 \
      --iters "$ITERS" --output-len 32 --out "$OUT/$k-$kind.json" > "$OUT/$k-$kind.log" 2>&1
    echo "$(date +%T) $k $kind rc=$? load=$(cut -d' ' -f1-3 /proc/loadavg) thp=$(grep AnonHugePages /proc/meminfo | tr -s ' ')"
  done
done
