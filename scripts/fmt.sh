#!/usr/bin/env bash
# Formats all the source: the Rust with cargo fmt, the Lua (lua/, plugin/, build.lua) with StyLua and
# .stylua.toml. scripts/test.sh fails on anything this would change.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/ensure-lua-tools.sh
cargo fmt
node scripts/lua-tools/stylua.mjs --write lua plugin build.lua
