#!/usr/bin/env bash
# Builds the host in release mode and opens Neovim in the current directory with Loopr loaded,
# ready for `:LooprPlan <task>`. Needs ANTHROPIC_API_KEY in the environment.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
(cd "$root" && cargo build --release --locked)
nvim=$("$root/scripts/ensure-nvim.sh")
if [ -z "${ANTHROPIC_API_KEY:-}" ]; then
  echo "warning: ANTHROPIC_API_KEY is not set; :LooprPlan will ask for it" >&2
fi
exec "$nvim" --cmd "set rtp^=$root" -c "lua require('loopr').setup()" "$@"
