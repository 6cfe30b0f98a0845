#!/usr/bin/env bash
# Build fixtures/src/nvtx_cases.c against nsys's NVTX3 headers, run it under the real nsys, and export:
#   fixtures/nvtx/nvtx_cases.nsys-rep       the report (for the export/cache tests)
#   fixtures/nvtx/nvtx_cases.sqlite         its default (lazy) SQLite export
#   fixtures/nvtx/nvtx_cases_full.sqlite    --lazy=false export: every table of the schema, most empty
# Usage: scripts/make_nvtx_fixture.sh   (from the repository root; NSYS=/path/to/nsys to choose nsys)
set -euo pipefail
cd "$(dirname "$0")/.."
NSYS=${NSYS:-$(command -v nsys || echo .nsys/usr/lib/nsight-systems/bin/nsys)}
[ -x "$NSYS" ] || { echo "make_nvtx_fixture: nsys not found at $NSYS (run \`make nsys\` or set NSYS=)" >&2; exit 2; }
NSYS_ROOT=$(dirname "$(readlink -f "$NSYS")")/..
NVTX_INCLUDE=${NVTX_INCLUDE:-$NSYS_ROOT/target-linux-x64/nvtx/include}
[ -f "$NVTX_INCLUDE/nvtx3/nvToolsExt.h" ] || { echo "make_nvtx_fixture: no NVTX3 headers in $NVTX_INCLUDE" >&2; exit 2; }

out=fixtures/nvtx
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
mkdir -p "$out"

echo "[nvtx fixture] gcc nvtx_cases.c"
gcc -O1 -Wall -Werror -std=c11 -D_GNU_SOURCE -I"$NVTX_INCLUDE" \
  -o "$work/nvtx_cases" fixtures/src/nvtx_cases.c -ldl -lpthread

echo "[nvtx fixture] nsys profile"
# osrt tracing is left out: it adds thousands of OS-call rows the tests do not need.
"$NSYS" profile -t nvtx -s none --cpuctxsw=none -f true -o "$work/nvtx_cases" "$work/nvtx_cases" >"$work/profile.log" 2>&1 \
  || { cat "$work/profile.log" >&2; exit 1; }

echo "[nvtx fixture] nsys export"
for lazy in true false; do
  name=nvtx_cases; [ $lazy = false ] && name=nvtx_cases_full
  "$NSYS" export --type sqlite --lazy=$lazy -f true -o "$work/$name.sqlite" "$work/nvtx_cases.nsys-rep" >"$work/export.log" 2>&1 \
    || { cat "$work/export.log" >&2; exit 1; }
done
mv -f "$work/nvtx_cases.nsys-rep" "$work/nvtx_cases.sqlite" "$work/nvtx_cases_full.sqlite" "$out/"
ls -l "$out"
