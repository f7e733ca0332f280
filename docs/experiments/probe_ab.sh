#!/usr/bin/env bash
# A/B repeatability of two `hwqos probe` builds under the same conditions:
# N default runs of each, alternating (A1 B1 A2 B2 …), so both see the same
# machine load; then probe_spread.py on each set.
#
#   docs/experiments/probe_ab.sh A_BINARY B_BINARY [N] [OUTDIR]
#
# Results: OUTDIR/{a,b}/default-K.json, runs.tsv, spread.md.
set -euo pipefail
A=$1
B=$2
N=${3:-5}
OUT=${4:-docs/experiments/results/probe_ab}
for side in a b; do
  mkdir -p "$OUT/$side"
  printf 'kind\trun\twall_s\tload1_before\n' > "$OUT/$side/runs.tsv"
done
for k in $(seq 1 "$N"); do
  for side in a b; do
    bin=$A
    [ "$side" = b ] && bin=$B
    load=$(cut -d' ' -f1 /proc/loadavg)
    start=$(date +%s.%N)
    "$bin" probe --json -o "$OUT/$side/default-$k.json" 2>/dev/null
    end=$(date +%s.%N)
    wall=$(awk -v a="$start" -v b="$end" 'BEGIN { printf "%.1f", b - a }')
    printf 'default\t%s\t%.1f\t%s\n' "$k" "$wall" "$load" | tee -a "$OUT/$side/runs.tsv"
  done
done
for side in a b; do
  python3 "$(dirname "$0")/probe_spread.py" "$OUT/$side" > "$OUT/$side/spread.md"
done
