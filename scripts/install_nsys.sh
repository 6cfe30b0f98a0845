#!/usr/bin/env bash
# Install real NVIDIA Nsight Systems 2022.4 (Debian bookworm non-free) into a project-local prefix.
# No system-wide install: the .debs are unpacked with dpkg -x. Recipe: docs/REAL_STACK.md.
# Usage: scripts/install_nsys.sh [PREFIX]   (default: .nsys)
set -euo pipefail
PREFIX=$(realpath -m "${1:-.nsys}")
NSYS_BIN="$PREFIX/usr/lib/nsight-systems/bin/nsys"
if [ -x "$NSYS_BIN" ] && "$NSYS_BIN" --version >/dev/null 2>&1; then
  echo "nsys already installed: $NSYS_BIN"; exit 0
fi
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
mkdir -p "$work/parts" "$work/lists/partial" "$work/cache/archives/partial"
# A private sources file with the non-free component; the system's apt configuration is left alone.
sed -E 's/^Components:.*/Components: main contrib non-free/' /etc/apt/sources.list.d/debian.sources > "$work/parts/debian.sources"
# Run as root, apt drops to its sandbox user `_apt` for downloads, which cannot write into our private (root-owned)
# temporary directories, and prints "W: Download is performed unsandboxed as root …" for every file. Say so up front:
# the downloads stay in $work, which only root can write, so the sandbox would protect nothing here.
SANDBOX=()
if [ "$(id -u)" = 0 ]; then SANDBOX=(-oAPT::Sandbox::User=root); fi
APT=(-oDir::Etc::SourceList=/dev/null -oDir::Etc::SourceParts="$work/parts" -oDir::State::Lists="$work/lists"
     -oDir::Cache="$work/cache" -oDebug::NoLocking=1 "${SANDBOX[@]}")
echo "[nsys] apt update (private lists with non-free)"
apt-get "${APT[@]}" -qq update
echo "[nsys] downloading nsight-systems, nsight-systems-target"
(cd "$work" && apt-get "${APT[@]}" -qq download nsight-systems nsight-systems-target)
if ! ldconfig -p | grep -q 'libssh.so.4 '; then
  echo "[nsys] installing libssh-4"
  apt-get "${SANDBOX[@]}" -qq update && DEBIAN_FRONTEND=noninteractive apt-get "${SANDBOX[@]}" -qq install -y libssh-4 >/dev/null
fi
mkdir -p "$PREFIX"
for deb in "$work"/*.deb; do dpkg -x "$deb" "$PREFIX"; done
# The packages expect to live at /: point them at the system libssh and the host importer.
ln -sf /usr/lib/x86_64-linux-gnu/libssh.so.4 "$PREFIX/usr/lib/x86_64-linux-gnu/libssh.so.4"
ln -sfn ../../nsight-systems/host-linux-x64 "$PREFIX/usr/lib/x86_64-linux-gnu/nsight-systems/host-linux-x64"
"$NSYS_BIN" --version
echo "nsys installed: $NSYS_BIN"
