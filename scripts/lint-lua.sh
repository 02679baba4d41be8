#!/usr/bin/env bash
# Checks the plugin's Lua (lua/, plugin/, build.lua) as cargo fmt --check and clippy check the Rust:
# StyLua's formatting (.stylua.toml) and luacheck's lint (.luacheckrc). Both run, whatever the
# first finds; the exit code is 1 when either found something. scripts/fmt.sh fixes the
# formatting. (The tests hold Lua only inside Rust strings, which neither tool reads.)
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/ensure-lua-tools.sh

status=0
node scripts/lua-tools/stylua.mjs --check lua plugin build.lua || status=1
luacheck --quiet --codes --formatter plain lua plugin build.lua || {
  echo "luacheck: fix the warnings above (.luacheckrc says which checks are off, and why)" >&2
  status=1
}
[ "$status" = 0 ] && echo "Lua: formatted and lint-free (lua/, plugin/, build.lua)"
exit "$status"
