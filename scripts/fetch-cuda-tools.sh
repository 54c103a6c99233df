#!/usr/bin/env bash
# Downloads NVRTC and ptxas from PyPI (the nvidia-cuda-nvrtc-cu12 and nvidia-cuda-nvcc-cu12
# wheels, one version, matching cudarc's cuda-12090 feature) into a cache directory, once,
# and prints the environment kiln reads:
#   eval "$(bash scripts/fetch-cuda-tools.sh)"   # sets KILN_NVRTC and KILN_PTXAS
# The directory is $1, else $KILN_CUDA_TOOLS, else ~/.cache/kiln/cuda-tools-<version>.
set -euo pipefail
VERSION=12.9.86
DEST="${1:-${KILN_CUDA_TOOLS:-$HOME/.cache/kiln/cuda-tools-$VERSION}}"
NVRTC="$DEST/nvidia/cuda_nvrtc/lib/libnvrtc.so.12"
PTXAS="$DEST/nvidia/cuda_nvcc/bin/ptxas"
if [ ! -f "$NVRTC" ] || [ ! -f "$PTXAS" ]; then
  tmp="$(mktemp -d)"
  trap 'rm -rf "$tmp"' EXIT
  python3 -m pip download --quiet --no-deps --only-binary=:all: \
    "nvidia-cuda-nvrtc-cu12==$VERSION" "nvidia-cuda-nvcc-cu12==$VERSION" -d "$tmp" >&2
  mkdir -p "$DEST"
  for w in "$tmp"/*.whl; do
    python3 -m zipfile -e "$w" "$DEST"
  done
fi
chmod +x "$PTXAS"
echo "export KILN_NVRTC=$DEST/nvidia/cuda_nvrtc/lib"
echo "export KILN_PTXAS=$PTXAS"
