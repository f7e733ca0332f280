#!/usr/bin/env bash
# Builds the `hwqos` Debian package: release binaries, generated man pages and
# completions (hwqos-dist-assets), then `cargo deb` with the metadata in
# deploy/package/Cargo.toml. Prints the .deb's path on the last line.
#
# Usage: deploy/build-deb.sh [OUT_DIR]   (default: $CARGO_TARGET_DIR/debian)
set -euo pipefail
cd "$(dirname "$0")/.."

target=${CARGO_TARGET_DIR:-target}
out=${1:-$target/debian}

if ! command -v cargo-deb >/dev/null 2>&1; then
  cargo install cargo-deb --locked
fi

# Every binary the package ships (adding an agent: add its package here).
cargo build --release --locked -p hwqos-monitor -p hwqos-relay -p hwqos-loadgen -p hwqos-sra -p hwqos-cli
cargo run --release --locked -q -p hwqos-dist --bin hwqos-dist-assets -- deploy/package/target/hwqos-dist >/dev/null
mkdir -p "$out"
cargo deb --locked -p hwqos-dist --no-build -o "$out" | tail -1
