#!/usr/bin/env bash
# `hwqos probe bandwidth` alone, two builds alternating run by run (A1 B1 A2 B2 ...):
# A = 4 KiB-page buffers, 2 passes per repetition; B = huge-page buffers,
# 9 passes per repetition. Prints per run the headline and best pass (GB/s).
#   bandwidth_ab.sh A_BINARY B_BINARY N > bandwidth_ab.txt
set -euo pipefail
A=$1; B=$2; N=${3:-10}
echo "# $(date -u +%FT%TZ), load $(cut -d' ' -f1-3 /proc/loadavg)"
printf 'build\trun\tread\tread_best\twrite\twrite_best\tcopy\tcopy_best\n'
for k in $(seq 1 "$N"); do
  for side in a b; do
    bin=$A; [ "$side" = b ] && bin=$B
    "$bin" probe bandwidth --json 2>/dev/null | python3 -c '
import json, sys
b = json.load(sys.stdin)["measured"]["bandwidth"]
print("\t".join(["'"$side"'", "'"$k"'"] + ["%.2f\t%.2f" % (b[k]["median"], b[k]["max"]) for k in ("read_gbs", "write_gbs", "copy_gbs")]))'
  done
done
