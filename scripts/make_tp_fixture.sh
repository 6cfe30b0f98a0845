#!/usr/bin/env bash
# Regenerate fixtures/tp/ with the real nsys and vLLM's CPU build: tiny-llama-target on 2 tensor-parallel ranks
# (`nsys-cc profile --target-tp 2`, two worker processes). About 3 minutes on 2 cores.
# Called by scripts/make_fixtures.sh; run it alone with `scripts/make_tp_fixture.sh [OUT_DIR]`.
# What each file is: fixtures/tp/README.md.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-fixtures/tp}
py=${PY:-.venv/bin/python}
nsys_cc=$(dirname "$py")/nsys-cc
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$out"

# The benchmark of fixtures/vllm (so the TP target can be compared with its drafts), only NVTX traced (small files).
bench=(--input-len 64 --output-len 4 --batch-size 2 --num-iters-warmup 2 --num-iters 3)
# The smallest draft is profiled too because `profile` needs one; only the target's files are kept.
"$nsys_cc" profile --target tiny-llama-target --target-tp 2 --draft tiny-llama-draft-xs \
  "${bench[@]}" --nsys-trace nvtx --device cpu -o "$work/profile" || true
m=tiny-llama-target.tp2
[ -f "$work/profile/$m.done.json" ] || { cat "$work/profile/status.json"; tail -30 "$work/profile/$m.log"; exit 1; }
cp "$work/profile/$m.sqlite" "$work/profile/$m.bench.json" "$out/"
# Both ranks must have recorded every forward: one model_executable() range per rank per step, in two processes.
"$py" - "$out/$m.sqlite" <<'PY'
import sqlite3, sys
rows = sqlite3.connect(sys.argv[1]).execute(
    "SELECT e.globalTid >> 24 & 16777215, count(*) FROM NVTX_EVENTS e JOIN StringIds s ON s.id = e.textId "
    "WHERE s.value = 'model_executable()' GROUP BY 1").fetchall()
print("model_executable() ranges per process:", dict(rows))
if len(rows) != 2 or rows[0][1] != rows[1][1]:
    sys.exit("expected the same number of forward ranges in exactly 2 processes")
PY
ls -l "$out"
