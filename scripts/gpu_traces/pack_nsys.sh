#!/usr/bin/env bash
# Pack the nsys 2022.4 the GPU-traces run uses on a GPU machine that has none (issue 21): the target side (nsys,
# launcher, injection libraries, CUPTI 11.8, nvlog), and the importer (host-linux-x64/QdstrmImporter with the
# libraries it loads, libpfm and libssh included), so that the device turns each .qdstrm into a .nsys-rep and exports
# it itself — the first command there checks that this import works before any GPU time is spent.
#
# Usage (after `make nsys`):   scripts/gpu_traces/pack_nsys.sh
#   → gpu_pack/nsys.tar.xz (git-ignored, about 32 MB), then with the device tool:
#   run(command="bash scripts/gpu_traces/run_on_device.sh", carry=["gpu_pack"], timeout_s=560)
# Env: NSYS_PREFIX (default .nsys) or NSYS_ROOT (the nsight-systems directory itself); PACK_DIR (default gpu_pack);
# PACK_NO_TAR=1 leaves the unpacked tree PACK_DIR/nsys instead of the archive; XZ_LEVEL (default 6) its compression
# (the CPU dry run in tests/e2e/test_gpu_traces.py packs with 0: fast).
set -euo pipefail
cd "$(dirname "$0")/../.."
root=${NSYS_ROOT:-${NSYS_PREFIX:-.nsys}/usr/lib/nsight-systems}
target=$root/target-linux-x64
host=$root/host-linux-x64
[ -x "$target/nsys" ] && [ -x "$host/QdstrmImporter" ] || { echo "no nsys install under $root: run make nsys" >&2; exit 2; }
out=${PACK_DIR:-gpu_pack}
stage=$out/nsys
rm -rf "$out" && mkdir -p "$stage/bin" "$stage/target-linux-x64" "$stage/host-linux-x64"
parts=(nsys nsys-launcher launcher libLauncher64.so libToolsInjection64.so libToolsInjectionProxy64.so
       libToolsInjectionCuBLAS64_11.so libToolsInjectionCuDNN64_8.so libToolsInjectionMemoryAllocator.so
       libcupti.so.11.8 libnvlog.so nvlog.config.template CudaGpuInfoDumper libnvperf_host.so)
for p in "${parts[@]}"; do cp -L "$target/$p" "$stage/target-linux-x64/"; done
# The importer and every library it loads from the nsys install (symlinks followed: libssh is one), plus libpfm,
# which its libpapi needs and most machines lack; the rest (libc, libstdc++, zlib, OpenSSL 3, Kerberos) is the system's.
cp -L "$host/QdstrmImporter" "$stage/host-linux-x64/"
ldd "$host/QdstrmImporter" | awk '/=>/ {print $1, $3}' | while read -r name path; do
  case "$path" in
    "$host"/*|*/nsight-systems/*|*libpfm.so*) cp -L "$path" "$stage/host-linux-x64/$name" ;;
  esac
done
[ -f "$stage/host-linux-x64/libpfm.so.4" ] || { echo "libpfm.so.4 not found (apt-get install libpfm4)" >&2; exit 2; }
# nsys must be started through a link in a bin/ beside target-linux-x64 (its own check).
ln -s ../target-linux-x64/nsys "$stage/bin/nsys"
if [ -z "${PACK_NO_TAR:-}" ]; then
  tar -C "$out" -cf - nsys | xz -T0 -"${XZ_LEVEL:-6}" > "$out/nsys.tar.xz"
  rm -rf "$stage"
fi
du -sh "$out"/*
