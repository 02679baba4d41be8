#!/usr/bin/env bash
# Runs every check and test: formatting (Rust and Lua), clippy, luacheck, unit tests, and the
# end-to-end tests that drive a real headless Neovim against a fake Anthropic server on loopback.
set -euo pipefail
cd "$(dirname "$0")/.."

# Installs apt package $2 when command $1 is missing (as root, with apt-get); else says what
# happens without it ($3).
install_missing() {
  local command=$1 package=$2 without=$3
  command -v "$command" >/dev/null && return
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "installing $package (apt-get)"
    { apt-get install -y -q "$package" >/dev/null 2>&1 ||
      { apt-get update -q >/dev/null 2>&1 && apt-get install -y -q "$package" >/dev/null 2>&1; }; } ||
      echo "could not install $package; $without"
  else
    echo "$package ($command) is missing; $without (apt install $package)"
  fi
}

# The command sandbox's tests run under bubblewrap where it can be installed (they say why
# they skip where it cannot).
install_missing bwrap bubblewrap "the bubblewrap sandbox tests will skip"
# A test draws Neovim in a real terminal (tmux), where what it shows as it exits goes with
# the screen.
install_missing tmux tmux "the terminal test will fail"

# Where bubblewrap can set up a sandbox, its tests must run: a skip would pass untested.
if command -v bwrap >/dev/null &&
  bwrap --die-with-parent --unshare-pid --ro-bind / / --dev /dev --proc /proc true 2>/dev/null; then
  export LOOPR_REQUIRE_SANDBOX=bubblewrap
else
  echo "bubblewrap cannot set up a sandbox here; its tests will skip"
fi

LOOPR_TEST_NVIM=$(scripts/ensure-nvim.sh)
export LOOPR_TEST_NVIM
echo "Neovim: $("$LOOPR_TEST_NVIM" --version | head -n 1) ($LOOPR_TEST_NVIM)"

# On CI (a clean clone, built once) incremental compilation only writes caches that nothing
# reads again: without it the crate's lib and its unit tests build in 82-87 s of CPU instead
# of 103-104 s (clean, 2 samples each).
if [ "${CI:-}" = true ]; then
  export CARGO_INCREMENTAL=0
fi

cargo fmt --check
scripts/lint-lua.sh
cargo clippy --all-targets --features test-mcp-server --locked -- -D warnings
# The host as macOS builds it (no Linux sandbox: build.rs), linted here; `portable-check` keeps
# it a build of its own, so it rebuilds nothing the other commands use.
LOOPR_CHECK_PORTABLE=1 cargo clippy --lib --bin loopr --features test-mcp-server,portable-check \
  --locked -- -D warnings
# `--bin loopr`, not `--bins`: the test peers' binaries (test = false) have no tests, and
# `--bins` would build an empty test harness for each of them.
cargo test --locked --features test-mcp-server --lib --bin loopr --tests
