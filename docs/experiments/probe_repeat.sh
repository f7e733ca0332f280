#!/usr/bin/env bash
# Repeatability and run time of `hwqos probe` (issue 3 acceptance):
# N default runs and N --quick runs, each writing its JSON model and its wall
# time; then probe_spread.py compares the medians across runs.
#
#   docs/experiments/probe_repeat.sh [N] [OUTDIR]
#
# Needs a release build: cargo build --release -p hwqos-cli
# Results: OUTDIR/{default,quick}-K.json, runs.tsv (kind, run, wall s, load),
# spread.md (per-figure spread across runs).
set -euo pipefail
N=${1:-5}
OUT=${2:-docs/experiments/results/probe_repeat}
BIN=${HWQOS:-${CARGO_TARGET_DIR:-target}/release/hwqos}
mkdir -p "$OUT"
printf 'kind\trun\twall_s\tload1_before\n' > "$OUT/runs.tsv"
for kind in default quick; do
  for k in $(seq 1 "$N"); do
    load=$(cut -d' ' -f1 /proc/loadavg)
    args=()
    [ "$kind" = quick ] && args=(--quick)
    start=$(date +%s.%N)
    "$BIN" probe "${args[@]}" --json -o "$OUT/$kind-$k.json" 2>/dev/null
    end=$(date +%s.%N)
    wall=$(awk -v a="$start" -v b="$end" 'BEGIN { printf "%.1f", b - a }')
    printf '%s\t%s\t%.1f\t%s\n' "$kind" "$k" "$wall" "$load" | tee -a "$OUT/runs.tsv"
  done
done
"$BIN" probe --diff "$OUT/default-1.json" "$OUT/default-2.json" > "$OUT/diff-default-1-2.txt" || true
python3 "$(dirname "$0")/probe_spread.py" "$OUT" > "$OUT/spread.md"
cat "$OUT/spread.md"
