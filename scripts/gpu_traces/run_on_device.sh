#!/usr/bin/env bash
# Run on the GPU machine (the device tool runs it from the repository root, $OUT comes back):
#   bash scripts/gpu_traces/run_on_device.sh      (with gpu_pack/ from pack_nsys.sh carried along)
# For each model shape: the workload under `nsys profile -t cuda,nvtx` (osrt made a tiny run's .qdstrm 23 MB, over
# the 16 MB a returned file may have; TRACE=… overrides), eager, then decode with CUDA graphs
# if time allows; the .qdstrm/.nsys-rep files go to $OUT compressed. If the packed nsys (CUPTI 11.8) fails with this
# driver, the nsys inside an Nsight Compute installation on the machine is tried, and every failure is logged.
set -uo pipefail
cd "$(dirname "$0")/../.."
pack=$PWD/gpu_pack
workload=$PWD/scripts/gpu_traces/workload.py
OUT=${OUT:?set by the device tool}
log="$OUT/run.log"
exec > >(tee -a "$log") 2>&1
work=$(mktemp -d)
# nsys must be started through a link in a sibling bin/ of target-linux-x64 (its own check); without the host
# importer beside it, it leaves a .qdstrm, which QdstrmImporter turns into a .nsys-rep back on the CPU machine.
mkdir -p "$work/target-linux-x64" "$work/bin"
tar -C "$work/target-linux-x64" -xJf "$pack/nsys-target.tar.xz"
ln -s ../target-linux-x64/nsys "$work/bin/nsys"
"${PYTHON:-python}" -m pip install -q --no-deps "$pack"/nvtx-0.2.11-*.whl || echo "nvtx wheel install failed"
nvidia-smi -L; "${PYTHON:-python}" -c "import torch, transformers; print(torch.__version__, torch.version.cuda, transformers.__version__)"
nsys="$work/bin/nsys"
run() {  # run NAME ARGS… : one trace under the chosen nsys
  local name=$1; shift
  timeout 150 "$nsys" profile -t "${TRACE:-cuda,nvtx}" -s none --cpuctxsw=none --cuda-graph-trace=node -f true \
    -o "$work/$name" "${PYTHON:-python}" "$workload" "$@" || echo "FAILED: $name (exit $?)"
  [ "$name" = probe ] && return  # at most 8 files come back: the probe only decides which nsys to use
  for f in "$work/$name".qdstrm "$work/$name".nsys-rep; do [ -f "$f" ] && xz -T0 -c "$f" > "$OUT/$(basename "$f").xz"; done
}
run probe --model "${PROBE_MODEL:-llama-68m-shape}" --warmup 1 --iters 1 --decode 2
if ! ls "$work"/probe.qdstrm "$work"/probe.nsys-rep >/dev/null 2>&1; then
  alt=$(ls -d /opt/nvidia/nsight-compute/*/host/target-linux-x64 /usr/local/cuda*/nsight-compute*/host/target-linux-x64 2>/dev/null | head -1)
  echo "packed nsys gave no trace; trying the Nsight Compute one: ${alt:-none found}"
  [ -n "${alt:-}" ] && [ -x "$alt/nsys" ] && mkdir -p "$work/alt/bin" && ln -sfn "$alt" "$work/alt/target-linux-x64" \
    && ln -sfn ../target-linux-x64/nsys "$work/alt/bin/nsys" && nsys="$work/alt/bin/nsys" && run probe --model "${PROBE_MODEL:-llama-68m-shape}" --warmup 1 --iters 1 --decode 2
fi
# EAGER_MODELS / GRAPH_MODELS / PROBE_MODEL override the lists (the CPU dry run uses tiny models).
for m in ${EAGER_MODELS:-llama-2-7b-shape tinyllama-1.1b-shape llama-160m-shape llama-68m-shape}; do
  run "$m-eager" --model "$m" --input-len 128 --decode 8 --warmup 3 --iters 10
done
for m in ${GRAPH_MODELS-llama-2-7b-shape llama-68m-shape}; do
  run "$m-graphs" --model "$m" --input-len 128 --decode 8 --warmup 3 --iters 10 --graphs
done
ls -la "$OUT"
