#!/usr/bin/env bash
# The whole hwqos test suite: installs the system packages the tests use as
# oracles (perf from linux-perf, promtool and prometheus from prometheus,
# systemd-analyze from systemd), then runs format, lint and every test of the
# workspace, the relay-vs-zstd comparison on a rate-limited veth link, the
# systemd unit checks, a bounded fuzzing run of the wire
# decoders, and the boot test of the Debian package in a guest with systemd.
# The scripts it calls install their own packages (cargo-fuzz; debootstrap and
# qemu for the guest).
set -euo pipefail
cd "$(dirname "$0")/.."

need=()
command -v perf >/dev/null 2>&1 || need+=(linux-perf)
command -v promtool >/dev/null 2>&1 || need+=(prometheus)
command -v systemd-analyze >/dev/null 2>&1 || need+=(systemd)
# The load generator's cache test runs it under cachegrind (external cache model).
command -v valgrind >/dev/null 2>&1 || need+=(valgrind)
# The relay-vs-zstd comparison pipes zstd through socat between namespaces.
command -v zstd >/dev/null 2>&1 || need+=(zstd)
command -v socat >/dev/null 2>&1 || need+=(socat)
# hwqos top's interactive view is tested in a real terminal under tmux.
command -v tmux >/dev/null 2>&1 || need+=(tmux)
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" -eq 0 ]; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
  else
    echo "test.sh: missing ${need[*]}; run as root or install them" >&2
    exit 1
  fi
fi

# Free disk space first: a full disk shows up later as a linker dying with
# SIGBUS, far from its cause.
df -h . "${TMPDIR:-/tmp}" >&2 || true

cargo fmt --all -- --check
cargo clippy --workspace --all-targets --locked -- -D warnings
# docs/architecture.md's crate graph must match cargo metadata.
python3 scripts/check-architecture
cargo test --workspace --locked
# Every public item documented and every intra-doc link resolving (issue 23): docs/embedding.md.
RUSTDOCFLAGS="-D missing_docs -D warnings" cargo doc --workspace --no-deps --locked
# The library crates' public API against docs/api/*.txt: a removed item fails (issue 23): docs/embedding.md.
python3 scripts/api-check
# A crate outside the workspace embedding the libraries by path, built and run (issue 23): docs/embedding.md.
cargo run --locked --manifest-path examples/embedding/Cargo.toml --target-dir target
# Instruction counts of the hot paths under callgrind against the committed
# baseline (issue 22): fails when one grew by > 2 % (and > 1,000 instructions):
# docs/performance.md.
./scripts/bench-gate
# The adaptive relay against zstd --adapt on a 100 Mbit/s veth link between
# two network namespaces (issue 25): fails when the relay is >15% slower.
./scripts/relay-vs-zstd.sh
# perf's own CSV and JSON output linters on `hwqos stat` (built by cargo test).
./scripts/perf-output-lint target/debug/hwqos
# Hardware known answers on an emulated Armv8 PMU (qemu aarch64, -icount shift=0): docs/hardware-validation.md.
./scripts/pmu-guest --add scripts/pmu-guest-checks -- sh pmu-guest-checks --emulated
# The agents attacked on loopback, outcomes asserted (binaries from cargo test): docs/reliability.md.
./scripts/reliability
# Three netns nodes -> Prometheus -> federated Prometheus, series of every node asserted: docs/fleet.md.
./scripts/fleet-test
./deploy/verify-units.sh
./scripts/fuzz.sh 30
./kernel-patch/test.sh
./deploy/test-boot.sh
