#!/usr/bin/env bash
# Prints the performance figures: stream parsing, request latency, plan-loop latency and the
# host's memory. Figures only; nothing here passes or fails on time.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo bench --locked --bench anthropic_stream --bench host --bench edits
