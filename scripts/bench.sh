#!/usr/bin/env bash
# Prints the performance figures: stream parsing, request latency, how long :LooprPlan blocks
# Neovim, plan-loop latency and the host's memory. Figures only; nothing here passes or fails
# on time.
set -euo pipefail
cd "$(dirname "$0")/.."

usage() {
    cat <<'EOF'
Usage: scripts/bench.sh [--build-time]

Runs the benches in benches/ and prints their figures.

  --build-time  Also time a clean `cargo build --release --locked` (what a plugin manager
                runs on install) in a temporary target directory, and print
                  clean release build: N s on C cores (load L)
                where C is the number of parallel jobs cargo used and L the 1-minute load
                average just before the build (how busy the machine already was; compare
                figures taken at similar loads). Off by default because it compiles every
                dependency again, which takes minutes. LOOPR_BENCH_BUILD_TIME=1 does the same.
EOF
}

build_time=${LOOPR_BENCH_BUILD_TIME:-0}
for arg in "$@"; do
    case $arg in
        --build-time) build_time=1 ;;
        -h | --help)
            usage
            exit 0
            ;;
        *)
            echo "bench.sh: unknown option '$arg'" >&2
            usage >&2
            exit 2
            ;;
    esac
done

cargo bench --locked --bench anthropic_stream --bench host --bench edits --bench editor

if [[ $build_time == 1 ]]; then
    target=$(mktemp -d "${TMPDIR:-/tmp}/loopr-clean-build.XXXXXX")
    trap 'rm -rf "$target"' EXIT
    jobs=${CARGO_BUILD_JOBS:-$(nproc)}
    load=$(cut -d ' ' -f 1 /proc/loadavg)
    start=$(date +%s.%N)
    CARGO_TARGET_DIR=$target cargo build --release --locked --quiet --jobs "$jobs"
    end=$(date +%s.%N)
    awk -v start="$start" -v end="$end" -v jobs="$jobs" -v load="$load" \
        'BEGIN { printf "clean release build: %.0f s on %d cores (load %s)\n", end - start, jobs, load }'
fi
