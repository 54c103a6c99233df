#!/usr/bin/env bash
# The GPU checks, for a machine with an NVIDIA GPU and its driver (CI has none, so there the
# GPU tests skip): fetches NVRTC and ptxas (scripts/fetch-cuda-tools.sh, as .ci/run does)
# and cuBLAS (the nvidia-cublas-cu12 wheel, unless libcublas.so.12 is already installed),
# makes a missing GPU or NVRTC a failure (KILN_REQUIRE_GPU=1, KILN_REQUIRE_NVRTC=1), runs
# every test whose name holds `cuda` or `gpu` (DriverGpu's, and the CUDA plans' `::cuda`
# variants), the cuda backend's compile tests and the eager CUDA tensor tests on device 0 (KILN_CUDA_DEVICE=0 instead of the
# emulated device they use elsewhere), `kiln bench --backend cuda`, and `kiln fuzz --backend
# cuda` for KILN_GPU_FUZZ_SECONDS (default 60; KILN_GPU_FUZZ_ARGS adds flags, minimised
# divergences go to KILN_GPU_FUZZ_DIR, default target/gpu-fuzz), in release; and the NCCL
# world of size 1 (the nvidia-nccl-cu12 wheel, KILN_NCCL) with DDP over it.
#   bash scripts/gpu-check.sh
# On a GPU machine with no Rust toolchain or network, it runs what scripts/gpu-pack.sh built
# elsewhere (.gpu-pack/pack.tar.xz, or KILN_GPU_PACK): the same tests and bench from prebuilt
# binaries, NVRTC and ptxas from the pack, and the machine's own cuBLAS (12 or 13).
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TERM_COLOR=never

pack="${KILN_GPU_PACK:-.gpu-pack/pack.tar.xz}"
if ! command -v cargo >/dev/null 2>&1; then
  if [ ! -f "$pack" ]; then
    echo "no cargo here and no prebuilt pack at $pack: run scripts/gpu-pack.sh where cargo is"
    exit 1
  fi
  exec bash scripts/gpu-check-prebuilt.sh "$pack"
fi

echo "== GPU =="
if command -v nvidia-smi >/dev/null 2>&1; then
  nvidia-smi --query-gpu=name,driver_version,compute_cap --format=csv,noheader || true
else
  echo "nvidia-smi not found (the tests will say whether libcuda.so.1 loads)"
fi

echo "== NVRTC and ptxas (PyPI wheels) =="
eval "$(bash scripts/fetch-cuda-tools.sh)"
export KILN_REQUIRE_NVRTC=1
echo "KILN_NVRTC=$KILN_NVRTC KILN_PTXAS=$KILN_PTXAS"

echo "== cuBLAS =="
CUBLAS_VERSION=12.9.1.4
if [ -z "${KILN_CUBLAS:-}" ] && ! ldconfig -p 2>/dev/null | grep -q 'libcublas\.so\.12'; then
  DEST="${KILN_CUDA_TOOLS:-$HOME/.cache/kiln/cuda-tools-12.9.86}"
  LIB="$DEST/nvidia/cublas/lib"
  if [ ! -f "$LIB/libcublas.so.12" ]; then
    tmp="$(mktemp -d)"
    trap 'rm -rf "$tmp"' EXIT
    python3 -m pip download --quiet --no-deps --only-binary=:all: \
      "nvidia-cublas-cu12==$CUBLAS_VERSION" -d "$tmp" >&2
    mkdir -p "$DEST"
    for w in "$tmp"/*.whl; do
      python3 -m zipfile -e "$w" "$DEST"
    done
  fi
  export KILN_CUBLAS="$LIB"
fi
echo "KILN_CUBLAS=${KILN_CUBLAS:-unset: libcublas.so.12 from the loader path}"

echo "== tests: cuda, gpu (a missing GPU fails) =="
export KILN_REQUIRE_GPU=1
log="$(mktemp)"
status=0
cargo test --release --workspace --locked -- cuda gpu 2>&1 | tee "$log" || status=$?

echo "== the cuda backend through kiln::compile, and eager CUDA tensors, on device 0 =="
KILN_CUDA_DEVICE=0 cargo test --release --locked -p kiln --test compile_cuda --test cuda_eager \
  2>&1 | tee -a "$log" || status=$?

echo "== NCCL: a world of size 1 on device 0 (kiln's nccl feature; the nvidia-nccl-cu12 wheel) =="
NCCL_VERSION=2.27.3
if [ -z "${KILN_NCCL:-}" ] && ! ldconfig -p 2>/dev/null | grep -q 'libnccl\.so\.2'; then
  DEST="${KILN_CUDA_TOOLS:-$HOME/.cache/kiln/cuda-tools-12.9.86}"
  if [ ! -f "$DEST/nvidia/nccl/lib/libnccl.so.2" ]; then
    tmp_nccl="$(mktemp -d)"
    python3 -m pip download --quiet --no-deps --only-binary=:all: \
      "nvidia-nccl-cu12==$NCCL_VERSION" -d "$tmp_nccl" >&2 || true
    mkdir -p "$DEST"
    for w in "$tmp_nccl"/*.whl; do
      [ -f "$w" ] && python3 -m zipfile -e "$w" "$DEST"
    done
    rm -rf "$tmp_nccl"
  fi
  [ -f "$DEST/nvidia/nccl/lib/libnccl.so.2" ] && export KILN_NCCL="$DEST/nvidia/nccl/lib"
fi
echo "KILN_NCCL=${KILN_NCCL:-unset: libnccl.so.2 from the loader path}"
KILN_REQUIRE_NCCL=1 cargo test --release --locked -p kiln --features nccl --test ddp_nccl \
  2>&1 | tee -a "$log" || status=$?

echo "== kiln bench --backend cuda =="
mkdir -p target
KILN_CUDA_DEVICE=0 cargo run --release --locked -- bench --backend cuda \
  --json target/gpu-bench.json || status=$?

echo "== kiln fuzz --backend cuda =="
fuzz_dir="${KILN_GPU_FUZZ_DIR:-target/gpu-fuzz}"
mkdir -p "$fuzz_dir"
KILN_CUDA_DEVICE=0 cargo run --release --locked -- fuzz --replay tests/regressions/fuzz_cuda_*.kir \
  | tail -1 || status=$?
# shellcheck disable=SC2086 # KILN_GPU_FUZZ_ARGS is a list of flags
KILN_CUDA_DEVICE=0 cargo run --release --locked -- fuzz --backend cuda \
  --seconds "${KILN_GPU_FUZZ_SECONDS:-60}" --regressions "$fuzz_dir" ${KILN_GPU_FUZZ_ARGS:-} \
  || status=$?

echo "== summary =="
passed=$(grep -E '^test result:' "$log" | grep -Eo '[0-9]+ passed' | awk '{s += $1} END {print s + 0}')
failed=$(grep -E '^test result:' "$log" | grep -Eo '[0-9]+ failed' | awk '{s += $1} END {print s + 0}')
skipped=$(grep -c '^skipped' "$log" || true)
echo "passed: $passed, failed: $failed, skip messages: $skipped"
rm -f "$log"
if [ "$status" -ne 0 ]; then
  echo "GPU check FAILED"
  exit "$status"
fi
echo "GPU check passed"
