#!/usr/bin/env bash
# Coverage-guided fuzzing of kiln's input paths with cargo fuzz (libFuzzer):
#   parse_verify        the .kir parser, printer, verifier and interpreter on arbitrary text
#   safetensors_inputs  the safetensors reader behind `kiln run --inputs` on arbitrary bytes
#   tokenizer_text      kiln::nn::Tokenizer (a small BERT tokenizer.json) on arbitrary text
# Usage: bash tests/fuzz/run.sh [SECONDS per target, default 60] [TARGET...]
# Seeds are the committed test corpora (passes/tests/corpus, tests/regressions,
# tests/fuzz/tokenizer/seeds), read in place; what libFuzzer adds goes to
# $KILN_FUZZ_WORK (default target/fuzz-corpus). A crash
# or a hang (10 s per input) stops the run with the input in tests/fuzz/artifacts/ and a
# non-zero exit. Needs cargo-fuzz (`cargo install cargo-fuzz --locked`); on a stable
# toolchain RUSTC_BOOTSTRAP=1 lets it pass its -Z flags (no sanitizer: `-s none`).
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$root"
seconds="${1:-60}"
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(parse_verify safetensors_inputs tokenizer_text)
work="${KILN_FUZZ_WORK:-$root/target/fuzz-corpus}"
export RUSTC_BOOTSTRAP=1
export CARGO_TARGET_DIR="${KILN_FUZZ_TARGET_DIR:-$root/target/fuzz}"
for t in "${targets[@]}"; do
  case "$t" in
    parse_verify) seeds=(passes/tests/corpus tests/regressions) ;;
    safetensors_inputs) seeds=(tests/regressions) ;;
    tokenizer_text) seeds=(tests/fuzz/tokenizer/seeds) ;;
    *) echo "unknown fuzz target $t" >&2; exit 2 ;;
  esac
  mkdir -p "$work/$t"
  echo "== cargo fuzz: $t for ${seconds} s =="
  log="$work/$t.log"
  set +e
  cargo fuzz run --fuzz-dir tests/fuzz -s none -O "$t" "$work/$t" "${seeds[@]}" -- \
    -max_total_time="$seconds" -timeout=10 -rss_limit_mb=4096 -print_final_stats=1 >"$log" 2>&1
  status=$?
  set -e
  grep -E "^(#[0-9]+ +DONE|stat::number_of_executed_units|stat::peak_rss_mb|INFO: seed corpus)" "$log" || true
  if [ "$status" -ne 0 ]; then
    tail -40 "$log"
    echo "cargo fuzz $t failed (status $status); the input is under tests/fuzz/artifacts/$t/" >&2
    exit "$status"
  fi
done
