#!/usr/bin/env bash
# Installs the pinned Python packages kiln's PyTorch backend (python/) and its tests need
# (python/requirements-test.txt) from PyPI; quick when they are already there.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m pip install --quiet --disable-pip-version-check --root-user-action=ignore \
  -r python/requirements-test.txt
