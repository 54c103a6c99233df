#!/usr/bin/env bash
# Every test of kiln: the Rust workspace, then the PyTorch backend (python/) built by maturin,
# installed, and its pytest suites (backend, models, FX translation, the OpInfo sweep).
# Python packages come pinned from PyPI (scripts/python-deps.sh). The MiniLM and NVRTC tests
# skip unless scripts/fetch-minilm.sh and scripts/fetch-cuda-tools.sh ran (see .ci/run). With
# Open MPI installed (mpicc; Debian: openmpi-bin libopenmpi-dev libclang-dev) kiln is built with
# its `mpi` feature and the data-parallel tests run as `mpirun -np 2` jobs; KILN_REQUIRE_MPI=1
# makes a missing MPI an error instead.
set -euo pipefail
cd "$(dirname "$0")/.."
# NCCL is loaded at run time, so its feature builds anywhere (its tests skip without a GPU)
features=(--features kiln/nccl)
if command -v mpicc >/dev/null 2>&1 && command -v mpirun >/dev/null 2>&1; then
  features=(--features kiln/mpi,kiln/nccl)
elif [ "${KILN_REQUIRE_MPI:-0}" = 1 ]; then
  echo "KILN_REQUIRE_MPI=1 but mpicc or mpirun is missing" >&2
  exit 1
else
  echo "note: no Open MPI (mpicc, mpirun): kiln is built without MPI and the multi-process DDP tests do not run"
fi
cargo test --workspace --locked "${features[@]}"
bash scripts/python-deps.sh
# KILN_TEST_WHEEL=shared (what CI sets) builds the package with the settings of the test build
# above (the dev profile at the test profile's opt-level 1, kiln's nccl feature) so that it
# reuses every crate that build compiled: 33 s against 7 minutes for the release build of the
# whole tree on 2 cores, and the Python suites took as long on either (249 and 246 s). The
# default is the release build, as a plain `pip install ./python` makes it.
wheel_args=()
if [ "${KILN_TEST_WHEEL:-release}" = shared ]; then
  export CARGO_PROFILE_DEV_OPT_LEVEL=1
  wheel_args=(--config-settings=build-args="--profile dev --features kiln/nccl")
fi
python3 -m pip install --quiet --disable-pip-version-check --root-user-action=ignore \
  --no-build-isolation "${wheel_args[@]}" ./python
# one pytest process per core, at most 4 (each holds torch and transformers, ~1.3 GB): the
# OpInfo sweep and the model tests take 4.5 instead of 8.5 minutes on 2 cores
workers=$(nproc 2>/dev/null || echo 1)
[ "$workers" -le 4 ] || workers=4
python3 -m pytest -q -p no:cacheprovider -n "$workers" python/tests
