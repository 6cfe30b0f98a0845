#!/usr/bin/env bash
# Regenerate fixtures/vllm/ with the real nsys and vLLM's CPU build (about 2 minutes on 2 cores).
# Called by scripts/make_fixtures.sh; run it alone with `scripts/make_vllm_fixtures.sh [OUT_DIR]`.
# What each file is: fixtures/vllm/README.md.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-fixtures/vllm}
py=${PY:-.venv/bin/python}
nsys_cc=$(dirname "$py")/nsys-cc
nsys=$("$py" -c 'from nsys_cc.trace.nsys import require_nsys; print(require_nsys())')
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$out"

# The benchmark every fixture runs: several decode forwards per iteration, batch 2 so that decode payloads (2)
# differ from 1, and only NVTX traced so that the files stay small.
bench=(--input-len 64 --output-len 4 --batch-size 2 --num-iters-warmup 2 --num-iters 3)

# 1. nsys-cc profile of the three tiny models, one process each (--separate-processes: profile interleaves them in one
# process by default), with the plugin (model_executable(), nsys_cc:logits / nsys_cc:sample and nsys_cc:* ranges).
# Its exit status also reflects the analysis; the fixtures only need each model's checked trace (.done.json).
"$nsys_cc" profile --target tiny-llama-target --draft tiny-llama-draft-s --draft tiny-llama-draft-xs \
  "${bench[@]}" --separate-processes --nsys-trace nvtx --device cpu -o "$work/profile" || true
for m in tiny-llama-target tiny-llama-draft-s tiny-llama-draft-xs; do
  [ -f "$work/profile/$m.done.json" ] || { cat "$work/profile/status.json"; exit 1; }
  cp "$work/profile/$m.sqlite" "$work/profile/$m.bench.json" "$out/"
done
cp "$work/profile/tiny-llama-target.nsys-rep" "$out/"
# A busy machine (CPU shared with other jobs) can make a bigger model look faster: refuse such fixtures.
"$py" - "$out" <<'PY'
import sqlite3, statistics, sys
def decode_median(path):
    rows = sqlite3.connect(path).execute(
        "SELECT e.\"end\" - e.start FROM NVTX_EVENTS e JOIN StringIds s ON s.id = e.textId "
        "WHERE s.value = 'model_executable()' AND e.int64Value = 2").fetchall()
    return statistics.median(r[0] for r in rows)
medians = [decode_median(f"{sys.argv[1]}/{m}.sqlite") for m in ("tiny-llama-target", "tiny-llama-draft-s", "tiny-llama-draft-xs")]
print("median decode forward (ms): target %.2f, draft-s %.2f, draft-xs %.2f" % tuple(m / 1e6 for m in medians))
if not medians[0] > medians[1] > medians[2]:
    sys.exit("decode forwards are not ordered target > draft-s > draft-xs: the machine was too busy; run again")
PY

# 2. The same benchmark with the plugin off and vLLM's own NVTX scopes on (`gpu_model_runner: forward`, …).
env NSYS_CC_PLUGIN=0 VLLM_NVTX_SCOPES_FOR_PROFILING=1 VLLM_ENABLE_V1_MULTIPROCESSING=0 VLLM_CPU_KVCACHE_SPACE=1 \
  VLLM_CPU_OMP_THREADS_BIND=nobind OMP_NUM_THREADS=1 \
  "$nsys" profile -t nvtx -s none --cpuctxsw=none -f true -o "$work/vllm_scopes" \
  "$py" -m nsys_cc.vllm.bench --model nsys_cc/launch/models/tiny-llama-target --load-format dummy \
  "${bench[@]}" --skip-tokenizer-init --disable-detokenize --enforce-eager --gpu-memory-utilization 0.3 \
  --output-json "$out/vllm_scopes.bench.json" > "$work/vllm_scopes.log" 2>&1 \
  || { tail -20 "$work/vllm_scopes.log"; exit 1; }
"$nsys" export --type sqlite -f true -o "$out/vllm_scopes.sqlite" "$work/vllm_scopes.nsys-rep" > "$work/export.log" 2>&1 \
  || { cat "$work/export.log"; exit 1; }
ls -l "$out"
