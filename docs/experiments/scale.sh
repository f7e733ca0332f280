#!/usr/bin/env bash
# Issue 22, item 5: the sampler and the monitor's database as the number of
# monitored processes and CPUs grows. Simulated PMU (4 events per process and
# per CPU, 10 Hz of virtual time, database filled to its default bound) at
# 125/8, 250/16, 500/32 and 1,000/64 processes/CPUs, each in its own process
# (peak RSS is per run); then this node's perf_event backend on 50, 100 and
# 200 real processes (4 software events; no hardware PMU here), 100 ticks at
# 10 Hz. One JSON line per run into OUT (default
# docs/experiments/results/scale.jsonl). Run on demand, not in CI:
#
#   docs/experiments/scale.sh [OUT]
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=${1:-docs/experiments/results/scale.jsonl}
cargo build -q --release -p hwqos-benches --bin hwqos-scale
BIN=target/release/hwqos-scale
: > "$OUT"
for pc in "125 8" "250 16" "500 32" "1000 64"; do
  # shellcheck disable=SC2086
  "$BIN" --sim $pc | tee -a "$OUT"
done
for n in 50 100 200; do
  "$BIN" --real "$n" --ticks 100 | tee -a "$OUT"
done
