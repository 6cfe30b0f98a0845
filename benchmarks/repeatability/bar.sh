#!/bin/bash
# The bar of issue 22 (docs/REPEATABILITY.md): three independent DEFAULT profiles, one after another, then their c.
#   benchmarks/repeatability/bar.sh OUT_PREFIX [DRAFT]
set -u
cd "$(dirname "$0")/../.."
prefix=${1:-/tmp/bar}; draft=${2:-tiny-llama-draft-xs}
for k in 1 2 3; do
  start=$(date +%s)
  echo "$(date +%T) profile $k start load=$(cut -d' ' -f1-3 /proc/loadavg)"
  .venv/bin/nsys-cc profile --target tiny-llama-target --draft "$draft" -o "$prefix-$k" --format json ${EXTRA:-} \
    > "$prefix-$k.json" 2> "$prefix-$k.err"
  echo "$(date +%T) profile $k rc=$? $(( $(date +%s) - start )) s load=$(cut -d' ' -f1-3 /proc/loadavg)"
done
.venv/bin/python benchmarks/repeatability/bar_check.py "$prefix" 3
