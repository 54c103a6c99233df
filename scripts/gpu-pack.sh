#!/usr/bin/env bash
# Builds, here, what scripts/gpu-check.sh runs on a GPU machine that has no Rust toolchain or
# network (a lent CUDA box): the release test binaries that hold a `cuda` or `gpu` test, the
# kiln binary for `kiln bench --backend cuda`, and NVRTC and ptxas from the PyPI wheels
# (scripts/fetch-cuda-tools.sh), stripped of debug info and packed into one xz archive:
#   bash scripts/gpu-pack.sh [DIR]          # default DIR: .gpu-pack (ignored by git)
# DIR/tests.tsv lists each binary with the package directory it runs in (cargo runs a test
# binary in its package's root). Copy the repository and DIR to the GPU machine and run
# `bash scripts/gpu-check.sh` there: it finds DIR and runs the binaries instead of cargo.
# The binaries name this checkout's absolute path (env!("CARGO_MANIFEST_DIR")); gpu-check.sh
# links that path to the copy when it is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
root="$PWD"
DEST="${1:-.gpu-pack}"
rm -rf "$DEST"
mkdir -p "$DEST/stage/bin" "$DEST/stage/cuda"

echo "== building the release test binaries and kiln ==" >&2
json="$(mktemp)"
trap 'rm -f "$json"' EXIT
cargo test --release --workspace --locked --no-run --message-format=json >"$json"
cargo build --release --locked --bin kiln >&2

echo "== choosing the binaries with cuda or gpu tests ==" >&2
python3 - "$json" "$root" "$DEST/stage" <<'PY'
import json, os, subprocess, sys
log, root, stage = sys.argv[1:4]
rows, seen = [], set()
for line in open(log):
    msg = json.loads(line)
    if msg.get("reason") != "compiler-artifact" or not msg.get("executable"):
        continue
    if not msg["profile"]["test"]:
        continue
    exe = msg["executable"]
    if exe in seen:
        continue
    seen.add(exe)
    listing = subprocess.run([exe, "--list"], capture_output=True, text=True,
                             check=True).stdout
    names = [l.rsplit(": ", 1)[0] for l in listing.splitlines() if l.endswith(": test")]
    device_tests = [n for n in names if "cuda" in n or "gpu" in n]
    target = msg["target"]["name"]
    # compile_cuda and cuda_eager run whole on device 0 (see gpu-check.sh)
    if not device_tests and target not in ("compile_cuda", "cuda_eager"):
        continue
    pkg_dir = os.path.relpath(os.path.dirname(msg["manifest_path"]), root)
    name = os.path.basename(exe)
    subprocess.run(["strip", "--strip-debug", "-o", os.path.join(stage, "bin", name), exe],
                   check=True)
    rows.append(f"{name}\t{pkg_dir}\t{target}\t{len(device_tests)}")
    print(f"{name:50} {pkg_dir:10} {len(device_tests):4} cuda/gpu tests", file=sys.stderr)
with open(os.path.join(stage, "tests.tsv"), "w") as f:
    f.write("\n".join(rows) + "\n")
PY
strip --strip-debug -o "$DEST/stage/bin/kiln" target/release/kiln
echo "$root" >"$DEST/stage/built-in"

echo "== NVRTC and ptxas (PyPI wheels) ==" >&2
eval "$(bash scripts/fetch-cuda-tools.sh)"
cp "$KILN_NVRTC"/libnvrtc.so.12 "$KILN_NVRTC"/libnvrtc-builtins.so.12.* "$DEST/stage/cuda/"
cp "$KILN_PTXAS" "$DEST/stage/cuda/ptxas"

tar -C "$DEST/stage" -cf - . | xz -9 -T0 >"$DEST/pack.tar.xz"
rm -rf "$DEST/stage"
du -h "$DEST/pack.tar.xz" >&2
