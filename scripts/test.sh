#!/usr/bin/env bash
# Every test of kiln: the Rust workspace, then the PyTorch backend (python/) built by maturin,
# installed, and its pytest suites (backend, models, FX translation, the OpInfo sweep).
# Python packages come pinned from PyPI (scripts/python-deps.sh). The MiniLM and NVRTC tests
# skip unless scripts/fetch-minilm.sh and scripts/fetch-cuda-tools.sh ran (see .ci/run).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo test --workspace --locked
bash scripts/python-deps.sh
python3 -m pip install --quiet --disable-pip-version-check --root-user-action=ignore \
  --no-build-isolation ./python
python3 -m pytest -q -p no:cacheprovider python/tests
