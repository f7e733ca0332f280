#!/usr/bin/env bash
# Stop latency of hwqos-loadgen: time from SIGTERM to process exit with CPU,
# page-fault, context-switch, data-cache, TLB and I/O generators running on
# CPU 0 and 1 (docs/loadgen.md, "Safety"). The exit includes joining every
# generator thread and unmapping its memory. Wall-clock times from `date +%s%N`.
#
# Usage: docs/experiments/loadgen_stop.sh [REPEATS]
set -euo pipefail
cd "$(dirname "$0")/../.."
repeats=${1:-10}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-target}
cargo build --release --quiet -p hwqos-loadgen
bin=$CARGO_TARGET_DIR/release/hwqos-loadgen
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
printf '[io]\ndir = "%s"\n' "$tmp" > "$tmp/c.toml"
out=docs/experiments/results/loadgen_stop.txt
{
  echo "# SIGTERM to exit (wall clock) ($(date -u +%FT%TZ)); machine: $(nproc)-vCPU $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), kernel $(uname -r)"
  echo "# command: docs/experiments/loadgen_stop.sh $repeats"
  for r in $(seq "$repeats"); do
    "$bin" --config "$tmp/c.toml" generate \
      --knob cpu_util@0=0.3 --knob page_fault_rate@0=5000 --knob context_switch_rate@1=5000 \
      --knob l1d_miss_ratio@1=0.2 --knob llc_miss_ratio@1=0.5 --knob dtlb_miss_ratio@0=0.1 \
      --knob io_write_rate@1=1000000 &
    p=$!; sleep 2
    t0=$(date +%s%N); kill -TERM $p; wait $p; t1=$(date +%s%N)
    echo "run $r: $(( (t1 - t0) / 1000 )) us, exit 0, leftover files: $(ls "$tmp" | grep -c hwqos-loadgen-io || true)"
  done
} | tee "$out"
