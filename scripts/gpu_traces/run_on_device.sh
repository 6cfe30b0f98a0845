#!/usr/bin/env bash
# The GPU-traces run (issue 21), on the GPU machine: the device tool runs it from the repository root with gpu_pack/
# (scripts/gpu_traces/pack_nsys.sh) carried along, and brings $OUT back:
#   run(command="bash scripts/gpu_traces/run_on_device.sh", carry=["gpu_pack"], timeout_s=560)
#
# The machine (docs/REAL_STACK.md): Python 3.12 as python3, torch 2.11+cu130, transformers, no `nvtx` package (the
# workload pushes its ranges with nvtx_ctypes.py), no vLLM, no internet, no nsys on PATH, 10 minutes per command.
#
# 1. Probe (first, before any long run): a one-iteration trace of the small model, imported (.qdstrm → .nsys-rep)
#    and exported here; the run stops at once, saying why, when the import or export fails, when no NVTX range was
#    recorded, or (on a GPU) when no kernel was — then the nsys of an Nsight Compute installation is tried once.
# 2. The traces, most useful first, each skipped when what is left of DEADLINE seconds (default 450) cannot hold its
#    time limit: the target eager (llama-2-7b-shape), the draft eager (llama-68m-shape), the two speculating
#    (target verify + γ = 3 draft forwards per step), the draft's decode steps as CUDA graphs traced node by node, and
#    the same traced whole (--cuda-graph-trace=graph: GRAPH_TRACE rows, no kernel metrics).
# Every trace is summarised (scripts/gpu_traces/summarize.py: forward/draft/step ranges, kernels, graph-node kernels,
# GRAPH_TRACE rows and cudaGraphLaunch calls) into $OUT/summary.tsv, and comes back as $OUT/NAME.nsys-rep.xz; the
# log is $OUT/run.log. Back on the CPU machine: xz -d, nsys export, nsys-cc analyze (fixtures/gpu/, item 7).
#
# Env overrides (the CPU dry run in tests/e2e/test_gpu_traces.py sets them): PACK (default gpu_pack), PYTHON (python3),
# TARGET_MODEL, DRAFT_MODEL, RUNS (names below, in order), INPUT_LEN, DECODE, WARMUP, ITERS, TRACE (nsys -t, default
# cuda,nvtx: osrt made a small run's .qdstrm 23 MB, over what comes back), DEADLINE, EXPECT_GPU (auto|0|1).
set -uo pipefail
cd "$(dirname "$0")/../.."
repo=$PWD
OUT=${OUT:?set by the device tool}
mkdir -p "$OUT"
exec > >(tee -a "$OUT/run.log") 2>&1
started=$SECONDS
pack=${PACK:-$repo/gpu_pack}
py=${PYTHON:-python3}
workload=$repo/scripts/gpu_traces/workload.py
summarize=$repo/scripts/gpu_traces/summarize.py
target_model=${TARGET_MODEL:-llama-2-7b-shape}
draft_model=${DRAFT_MODEL:-llama-68m-shape}
runs=${RUNS:-target-eager draft-eager spec-g3 draft-graphs-node draft-graphs-whole}
common=(--input-len "${INPUT_LEN:-128}" --decode "${DECODE:-8}" --warmup "${WARMUP:-2}" --iters "${ITERS:-5}")
deadline=${DEADLINE:-450}
work=$(mktemp -d)

fatal() { echo "FATAL: $*"; echo "elapsed: $((SECONDS - started)) s"; ls -la "$OUT"; exit 3; }

if [ -f "$pack/nsys.tar.xz" ]; then
  # Python's tarfile and lzma rather than tar -J: the machine may have no xz.
  "$py" -c "import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2], filter='tar')" \
    "$pack/nsys.tar.xz" "$work" || fatal "cannot unpack $pack/nsys.tar.xz"
  nsys_dir=$work/nsys
elif [ -d "$pack/nsys" ]; then
  nsys_dir=$pack/nsys
else
  fatal "no nsys pack at $pack (run scripts/gpu_traces/pack_nsys.sh and carry gpu_pack)"
fi
nsys=$nsys_dir/bin/nsys
importer=$nsys_dir/host-linux-x64/QdstrmImporter
expect_gpu=${EXPECT_GPU:-auto}
if [ "$expect_gpu" = auto ]; then
  if nvidia-smi -L 2>/dev/null | grep -q GPU; then expect_gpu=1; else expect_gpu=0; fi
fi
echo "== $(date -u +%FT%TZ) nsys $("$nsys" --version 2>&1 | tail -1); GPU expected: $expect_gpu"
nvidia-smi -L 2>/dev/null
"$py" -c "import sys, torch, transformers; print('python', sys.version.split()[0], 'torch', torch.__version__, \
'cuda', torch.version.cuda, 'transformers', transformers.__version__)" || fatal "$py cannot import torch/transformers"
"$py" "$summarize" --header > "$OUT/summary.tsv"

# compress SRC DST: xz format with Python's lzma (the machine may have no xz).
compress() {
  "$py" - "$1" "$2" <<'EOF'
import lzma, shutil, sys
with open(sys.argv[1], "rb") as src, lzma.open(sys.argv[2], "wb", preset=6) as dst:
    shutil.copyfileobj(src, dst)
EOF
}

# profile NAME LIMIT GRAPH_TRACE ARGS…: one trace under $nsys, imported, exported, summarised, compressed into $OUT.
profile() {
  local name=$1 limit=$2 graph_trace=$3; shift 3
  local left=$((deadline - (SECONDS - started)))
  if ((left < limit)); then
    echo "SKIPPED: $name (its limit is ${limit} s, ${left} s left of ${deadline} s)"
    return 1
  fi
  echo "== $name: $* (limit ${limit} s, $((SECONDS - started)) s elapsed)"
  local attempt rc
  for attempt in 1 2 3; do
    timeout "$limit" "$nsys" profile -t "${TRACE:-cuda,nvtx}" -s none --cpuctxsw=none \
      --cuda-graph-trace="$graph_trace" -f true -o "$work/$name" "$py" "$workload" "$@" > "$work/$name.log" 2>&1
    rc=$?
    tr '\r' '\n' < "$work/$name.log" | grep -v '^\[\|^Processing\|^Importing\|^ *$'  # progress bars out
    # nsys 2022.4 sometimes fails to start when another nsys session starts at the same moment: start it again.
    # Its signs: nsys_cc.launch.process.nsys_start_failure (an exception of nsys's, or nothing but "End of file").
    if ((rc != 0)) && [ ! -f "$work/$name.qdstrm" ] && { grep -q "SystemException\|Local Endpoint is not available" \
        "$work/$name.log" || [ "$(grep -v '^ *$' "$work/$name.log")" = "End of file" ]; }; then
      echo "nsys failed to start (attempt $attempt); again"; sleep "$attempt"; continue
    fi
    break
  done
  ((rc == 0)) || echo "FAILED: $name: nsys profile exited $rc"
  if [ ! -f "$work/$name.nsys-rep" ] && [ -f "$work/$name.qdstrm" ]; then
    "$importer" -i "$work/$name.qdstrm" > "$work/$name.import.log" 2>&1 || {
      echo "IMPORT FAILED: $name: $(grep -v '^Processing\|^\[' "$work/$name.import.log" | tail -3)"; return 2; }
  fi
  [ -f "$work/$name.nsys-rep" ] || { echo "NO REPORT: $name (no .nsys-rep, no .qdstrm)"; return 2; }
  "$nsys" export --type sqlite -f true -o "$work/$name.sqlite" "$work/$name.nsys-rep" > "$work/$name.export.log" 2>&1 \
    || { echo "EXPORT FAILED: $name: $(tail -3 "$work/$name.export.log")"; return 2; }
  "$py" "$summarize" "$work/$name.sqlite" | tee -a "$OUT/summary.tsv"
  [ "$name" = probe ] || compress "$work/$name.nsys-rep" "$OUT/$name.nsys-rep.xz"
}

# probe_column NAME: a column of the probe's summary line
probe_column() {
  "$py" - "$work/probe.sqlite" "$1" "$summarize" <<'EOF'
import importlib.util, sys
spec = importlib.util.spec_from_file_location("summarize", sys.argv[3])
mod = importlib.util.module_from_spec(spec); spec.loader.exec_module(mod)
print(mod.summary(sys.argv[1])[sys.argv[2]])
EOF
}

probe_ok() {
  profile probe 120 node --model "$draft_model" --input-len 32 --decode 2 --warmup 0 --iters 1 || return 1
  (($(probe_column forwards) > 0)) || { echo "PROBE: no NVTX range recorded (nvtx_ctypes could not attach?)"; return 1; }
  if ((expect_gpu)) && (($(probe_column kernels) == 0)); then
    echo "PROBE: no kernel recorded: CUPTI of $("$nsys" --version 2>&1 | tail -1) recorded no CUDA activity here"
    return 1
  fi
}

if ! probe_ok; then
  alt=$(ls -d /opt/nvidia/nsight-compute/*/host/target-linux-x64 /usr/local/cuda*/nsight-compute*/host/target-linux-x64 \
        2>/dev/null | head -1)
  [ -n "$alt" ] && [ -x "$alt/nsys" ] || fatal "the packed nsys failed the probe (above) and no other nsys was found"
  echo "the packed nsys failed the probe; trying the one of Nsight Compute: $alt"
  mkdir -p "$work/alt/bin" && ln -sfn "$alt" "$work/alt/target-linux-x64" && ln -sfn ../target-linux-x64/nsys "$work/alt/bin/nsys"
  nsys=$work/alt/bin/nsys
  importer=$(ls "$alt"/../host-linux-x64/QdstrmImporter 2>/dev/null | head -1)
  [ -n "$importer" ] || importer=$nsys_dir/host-linux-x64/QdstrmImporter
  probe_ok || fatal "no nsys here records an importable trace with CUDA activity (see the probe lines above)"
fi
echo "probe passed: traces import and export here ($((SECONDS - started)) s elapsed)"

for run in $runs; do
  case "$run" in
    target-eager) profile "$run" 150 node --model "$target_model" "${common[@]}" ;;
    draft-eager) profile "$run" 90 node --model "$draft_model" "${common[@]}" ;;
    spec-g3) profile "$run" 150 node --model "$target_model" --draft "$draft_model" --gamma 3 "${common[@]}" ;;
    draft-graphs-node) profile "$run" 150 node --model "$draft_model" --graphs "${common[@]}" ;;
    draft-graphs-whole) profile "$run" 150 graph --model "$draft_model" --graphs "${common[@]}" ;;
    *) echo "unknown run $run" ;;
  esac
done
echo "== done in $((SECONDS - started)) s"
column -t "$OUT/summary.tsv" 2>/dev/null || cat "$OUT/summary.tsv"
ls -la "$OUT"
