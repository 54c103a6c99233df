#!/usr/bin/env bash
# scripts/gpu-check.sh on a GPU machine with no Rust toolchain or network: runs the release
# binaries scripts/gpu-pack.sh built elsewhere (the archive is $1) with the same filters and
# devices as the cargo path, NVRTC and ptxas from the pack (the PyPI wheels' 12.9), and the
# machine's own cuBLAS: libcublas.so.12 where installed, else the CUDA 13 one, offered under
# the .so.12 names the loader asks for (the cuBLAS calls kiln makes are in both).
#   bash scripts/gpu-check-prebuilt.sh .gpu-pack/pack.tar.xz
# Leases on such machines are short: KILN_GPU_TEST_TIMEOUT (seconds per test binary) and
# KILN_GPU_BENCH_TIMEOUT bound each part (default 600), KILN_GPU_BENCH_ARGS adds bench flags;
# `kiln fuzz --backend cuda` runs KILN_GPU_FUZZ_SECONDS (default 60) within KILN_GPU_FUZZ_TIMEOUT
# (default 300, minimising included), KILN_GPU_FUZZ_ARGS adds flags (--grad), and writes
# minimised divergences to KILN_GPU_FUZZ_DIR (default target/gpu-fuzz).
# On an H100 the tests took about a minute; the full bench did not finish in 150 s (the
# eager side and the limit probes run on the host); `KILN_GPU_BENCH_ARGS=--quick` took ~25 s.
# On an H200 (driver 580, cuBLAS 13 from the image's torch) the whole check with --quick and
# 60 s of fuzzing took 133 s.
set -uo pipefail
cd "$(dirname "$0")/.."
pack="$1"
work="$(mktemp -d)"
python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' "$pack" "$work"
chmod +x "$work"/bin/* "$work/cuda/ptxas"

# the binaries read files under the checkout they were built in (env!("CARGO_MANIFEST_DIR"))
built_in="$(cat "$work/built-in")"
if [ ! -e "$built_in" ]; then
  mkdir -p "$(dirname "$built_in")"
  ln -s "$PWD" "$built_in"
fi
echo "built in $built_in, running in $PWD ($(realpath "$built_in"))"
# the CLI tests run the kiln binary where cargo put it; insta finds snapshots from the
# workspace root (cargo tells it that; here nobody does), and must not write .snap.new files
mkdir -p target/release
cp "$work/bin/kiln" target/release/kiln
export INSTA_WORKSPACE_ROOT="$PWD" INSTA_UPDATE=no

echo "== GPU =="
nvidia-smi --query-gpu=name,driver_version,compute_cap --format=csv,noheader || true

echo "== NVRTC and ptxas (from the pack) =="
export KILN_NVRTC="$work/cuda/libnvrtc.so.12" KILN_PTXAS="$work/cuda/ptxas" KILN_REQUIRE_NVRTC=1
export LD_LIBRARY_PATH="$work/cuda${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
echo "KILN_NVRTC=$KILN_NVRTC KILN_PTXAS=$KILN_PTXAS"

echo "== cuBLAS =="
if [ -z "${KILN_CUBLAS:-}" ] && ! ldconfig -p 2>/dev/null | grep -q 'libcublas\.so\.12'; then
  found="$(find /usr/local /opt /usr/lib -name 'libcublas.so.1[23]' 2>/dev/null | sort | head -1)"
  if [ -z "$found" ]; then
    echo "no libcublas.so.12 or .so.13 on this machine"
  else
    dir="$(dirname "$found")"
    ver="${found##*.so.}"
    shim="$work/cublas"
    mkdir -p "$shim"
    ln -s "$dir/libcublas.so.$ver" "$shim/libcublas.so.12"
    ln -s "$dir/libcublasLt.so.$ver" "$shim/libcublasLt.so.12"
    export KILN_CUBLAS="$shim" LD_LIBRARY_PATH="$shim:$dir:$LD_LIBRARY_PATH"
    echo "cuBLAS $ver from $dir"
  fi
fi
echo "KILN_CUBLAS=${KILN_CUBLAS:-unset: libcublas.so.12 from the loader path}"

export KILN_REQUIRE_GPU=1
log="$work/test.log"
status=0
echo "== tests: cuda, gpu (a missing GPU fails) =="
while IFS=$'\t' read -r name dir target count; do
  [ "$count" -gt 0 ] || continue
  echo "-- $target ($dir)"
  (cd "$dir" && timeout "${KILN_GPU_TEST_TIMEOUT:-600}" "$work/bin/$name" cuda gpu) 2>&1 | tee -a "$log" || status=1
done <"$work/tests.tsv"

echo "== the cuda backend through kiln::compile, and eager CUDA tensors, on device 0 =="
while IFS=$'\t' read -r name dir target count; do
  case "$target" in compile_cuda | cuda_eager) ;; *) continue ;; esac
  echo "-- $target ($dir)"
  (cd "$dir" && KILN_CUDA_DEVICE=0 timeout "${KILN_GPU_TEST_TIMEOUT:-600}" "$work/bin/$name") 2>&1 | tee -a "$log" || status=1
done <"$work/tests.tsv"

echo "== kiln bench --backend cuda =="
mkdir -p target
# shellcheck disable=SC2086 # KILN_GPU_BENCH_ARGS is a list of flags
KILN_CUDA_DEVICE=0 timeout "${KILN_GPU_BENCH_TIMEOUT:-600}" "$work/bin/kiln" bench --backend cuda \
  --json target/gpu-bench.json ${KILN_GPU_BENCH_ARGS:-} || {
  rc=$?
  echo "kiln bench exited with status $rc"
  status=1
}

echo "== kiln fuzz --backend cuda =="
# random graphs compiled for the GPU against eager (and gradients with --grad); each
# divergence is minimised into KILN_GPU_FUZZ_DIR as a .kir regression file
fuzz_dir="${KILN_GPU_FUZZ_DIR:-target/gpu-fuzz}"
mkdir -p "$fuzz_dir"
# the cuda backend's regression files (found on a GPU, checked in CI on the emulated device)
KILN_CUDA_DEVICE=0 timeout "${KILN_GPU_TEST_TIMEOUT:-600}" "$work/bin/kiln" fuzz --replay \
  tests/regressions/fuzz_cuda_*.kir | tail -1 || status=1
# shellcheck disable=SC2086 # KILN_GPU_FUZZ_ARGS is a list of flags
KILN_CUDA_DEVICE=0 timeout "${KILN_GPU_FUZZ_TIMEOUT:-300}" "$work/bin/kiln" fuzz --backend cuda \
  --seconds "${KILN_GPU_FUZZ_SECONDS:-60}" --regressions "$fuzz_dir" ${KILN_GPU_FUZZ_ARGS:-} || {
  rc=$?
  echo "kiln fuzz exited with status $rc"
  status=1
}

echo "== summary =="
passed=$(grep -E '^test result:' "$log" | grep -Eo '[0-9]+ passed' | awk '{s += $1} END {print s + 0}')
failed=$(grep -E '^test result:' "$log" | grep -Eo '[0-9]+ failed' | awk '{s += $1} END {print s + 0}')
skipped=$(grep -c '^skipped' "$log" || true)
echo "passed: $passed, failed: $failed, skip messages: $skipped"
if [ "$status" -ne 0 ]; then
  echo "GPU check FAILED"
  exit "$status"
fi
echo "GPU check passed"
