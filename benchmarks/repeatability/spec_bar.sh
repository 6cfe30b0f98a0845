#!/bin/bash
# The speculative part of issue 22's bar (docs/REPEATABILITY.md): N default profiles with --speculate 1,2,3, one after
# another; the forecast fitted on γ 1 and 3 against the held-out γ = 2 run of each.
#   benchmarks/repeatability/spec_bar.sh OUT_PREFIX [N]
set -u
cd "$(dirname "$0")/../.."
prefix=${1:-/tmp/specbar}; n=${2:-3}
for k in $(seq 1 "$n"); do
  start=$(date +%s)
  echo "$(date +%T) profile $k start load=$(cut -d' ' -f1-3 /proc/loadavg)"
  .venv/bin/nsys-cc profile --target tiny-llama-target --draft tiny-llama-draft-xs --speculate 1,2,3 \
    -o "$prefix-$k" --format json ${EXTRA:-} > "$prefix-$k.json" 2> "$prefix-$k.err"
  echo "$(date +%T) profile $k rc=$? $(( $(date +%s) - start )) s load=$(cut -d' ' -f1-3 /proc/loadavg)"
done
.venv/bin/python benchmarks/repeatability/spec_check.py "$prefix" "$n"
