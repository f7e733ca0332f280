#!/usr/bin/env bash
# Runs the hwqos-compress fuzz targets (crates/compress/fuzz) for a bounded
# time each, starting from the checked-in seed corpus.
#
#   scripts/fuzz.sh [SECONDS_PER_TARGET]      (default 30)
#
# Works on the stable toolchain: cargo-fuzz passes nightly-only `-Z` flags to
# rustc, which stable accepts with RUSTC_BOOTSTRAP=1. The sanitizer is off
# (`-s none`): the targets are safe Rust plus the C codec libraries, which the
# Rust sanitizer flags would not instrument anyway; libFuzzer still finds
# panics, aborts, timeouts and out-of-memory (-rss_limit_mb).
# New inputs go to a temporary corpus, so the checked-in one stays unchanged;
# a crash leaves its input under crates/compress/fuzz/artifacts/<target>/ and
# the script exits 1 (turn it into a test in crates/compress/tests/fuzz_regressions.rs).
set -euo pipefail

secs="${1:-30}"
root="$(cd "$(dirname "$0")/.." && pwd)"
fuzz_dir="$root/crates/compress/fuzz"

if ! command -v cargo-fuzz >/dev/null 2>&1; then
    echo "fuzz.sh: installing cargo-fuzz"
    cargo install --locked cargo-fuzz
fi

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

export RUSTC_BOOTSTRAP=1
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$root/target}/fuzz"
status=0
cd "$fuzz_dir"
for target in decode_frame stream_parser codecs stream_contexts; do
    echo "fuzz.sh: $target for ${secs}s"
    mkdir -p "$work/$target"
    if ! cargo fuzz run -s none "$target" "$work/$target" "corpus/$target" -- \
        -max_total_time="$secs" -rss_limit_mb=2048 -max_len=65536 -print_final_stats=1; then
        echo "fuzz.sh: $target FAILED; inputs under $fuzz_dir/artifacts/$target/" >&2
        status=1
    fi
done
exit "$status"
