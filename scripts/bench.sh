#!/usr/bin/env bash
# Prints the performance figures: stream parsing, request latency, how long :LooprPlan blocks
# Neovim, plan-loop latency, the host's memory and cold start, Neovim's responsiveness while
# loops stream into open transcripts (Neovim's TUI in tmux), and a whole hierarchy against the
# dependency critical path, and the tokens a verification of a 200-line diff sends; then a
# summary of the ratios. Figures only; nothing here passes or fails on time, and nothing runs
# it in CI.
set -euo pipefail
cd "$(dirname "$0")/.."

usage() {
    cat <<'EOF'
Usage: scripts/bench.sh [--build-time]

Runs the benches in benches/ and prints their figures, then a summary (each bench's
`summary:` lines). Installs tmux with apt-get when it is missing (the responsiveness bench runs
Neovim's terminal UI in it); Neovim is $LOOPR_TEST_NVIM, else what scripts/ensure-nvim.sh
installs. The host bench measures the release build, or the binary $LOOPR_BENCH_HOST names
(the release workflow's: `cargo build --profile dist --bin loopr`, then target/dist/loopr),
and prints its size and cold start beside the `loopr --version` floor.

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

if ! command -v tmux >/dev/null; then
    echo "bench.sh: installing tmux" >&2
    sudo=""
    [[ $(id -u) == 0 ]] || sudo=sudo
    $sudo apt-get install -y tmux >&2 || { $sudo apt-get update >&2 && $sudo apt-get install -y tmux >&2; }
fi
export LOOPR_TEST_NVIM=$(scripts/ensure-nvim.sh)

output=$(mktemp "${TMPDIR:-/tmp}/loopr-bench.XXXXXX")
cleanup() { rm -f "$output"; }
trap cleanup EXIT
cargo bench --locked --bench anthropic_stream --bench host --bench edits --bench editor \
    --bench responsiveness --bench hierarchy --bench verification | tee "$output"
echo
echo "Summary ($(nproc) cores, load $(cut -d ' ' -f 1-3 /proc/loadavg)):"
sed -n 's/^summary: /  /p' "$output"

if [[ $build_time == 1 ]]; then
    target=$(mktemp -d "${TMPDIR:-/tmp}/loopr-clean-build.XXXXXX")
    trap 'cleanup; rm -rf "$target"' EXIT
    jobs=${CARGO_BUILD_JOBS:-$(nproc)}
    load=$(cut -d ' ' -f 1 /proc/loadavg)
    start=$(date +%s.%N)
    CARGO_TARGET_DIR=$target cargo build --release --locked --quiet --jobs "$jobs"
    end=$(date +%s.%N)
    awk -v start="$start" -v end="$end" -v jobs="$jobs" -v load="$load" \
        'BEGIN { printf "clean release build: %.0f s on %d cores (load %s)\n", end - start, jobs, load }'
fi
