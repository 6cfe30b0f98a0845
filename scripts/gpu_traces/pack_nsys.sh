#!/usr/bin/env bash
# Pack what nsys 2022.4 needs to trace CUDA on a GPU machine that has no nsys (the GPU-traces issue):
# the target-side nsys, launcher, injection libraries, CUPTI 11.8 and nvlog, plus the nvtx 0.2.11 wheel
# (the newest nvtx that nsys 2022.4 records). Output: gpu_pack/ (git-ignored), about 25 MB with xz.
# Usage: scripts/gpu_traces/pack_nsys.sh   (after `make nsys`); then, with the device tool:
#   run(command="bash scripts/gpu_traces/run_on_device.sh", carry=["gpu_pack"], timeout_s=560)
# and back here: .nsys/.../host-linux-x64/QdstrmImporter -i X.qdstrm (when only .qdstrm came back), nsys export.
set -euo pipefail
cd "$(dirname "$0")/../.."
src=.nsys/usr/lib/nsight-systems/target-linux-x64/
[ -x "$src/nsys" ] || { echo "no nsys install under .nsys: run make nsys" >&2; exit 2; }
out=gpu_pack
rm -rf "$out" && mkdir -p "$out"
parts=(nsys nsys-launcher launcher libLauncher64.so libToolsInjection64.so libToolsInjectionProxy64.so
       libToolsInjectionCuBLAS64_11.so libToolsInjectionCuDNN64_8.so libToolsInjectionMemoryAllocator.so
       libcupti.so.11.8 libnvlog.so nvlog.config.template CudaGpuInfoDumper libnvperf_host.so)
tar -C "$src" -cJf "$out/nsys-target.tar.xz" "${parts[@]}"
.venv/bin/pip download -q --no-deps -d "$out" nvtx==0.2.11
du -sh "$out"/*
