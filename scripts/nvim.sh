#!/usr/bin/env bash
# Builds the host in release mode and opens Neovim in the current directory with Loopr loaded,
# ready for `:LooprPlan <task>`. Takes ANTHROPIC_API_KEY from the environment, or from
# `:let $ANTHROPIC_API_KEY = '...'` inside Neovim.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
(cd "$root" && cargo build --release --locked)
nvim=$("$root/scripts/ensure-nvim.sh")
if [ -z "${ANTHROPIC_API_KEY:-}" ]; then
  echo "warning: ANTHROPIC_API_KEY is not set; set it in Neovim with :let \$ANTHROPIC_API_KEY = '<key>' before :LooprPlan" >&2
fi
exec "$nvim" --cmd "set rtp^=$root" -c "lua require('loopr').setup()" "$@"
