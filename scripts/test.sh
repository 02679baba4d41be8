#!/usr/bin/env bash
# Runs every check and test: formatting, clippy, unit tests, and the end-to-end tests that
# drive a real headless Neovim against a fake Anthropic server on loopback.
set -euo pipefail
cd "$(dirname "$0")/.."

LOOPR_TEST_NVIM=$(scripts/ensure-nvim.sh)
export LOOPR_TEST_NVIM
echo "Neovim: $("$LOOPR_TEST_NVIM" --version | head -n 1) ($LOOPR_TEST_NVIM)"

cargo fmt --check
cargo clippy --all-targets --locked -- -D warnings
cargo test --locked --lib --bins --tests
