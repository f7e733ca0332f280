#!/usr/bin/env bash
# Where the timer figures' run-to-run spread comes from (docs/probe.md,
# "Host-dependent figures"): wake-up latency with 50 us and 1 ns timer slack,
# and the spin strategies' median error at requests in 0-100 ms against 0-10 ms.
#   docs/experiments/results/probe_repeat_quiet/timer_checks.sh > timer_checks.txt
set -euo pipefail
BIN=${HWQOS:-${CARGO_TARGET_DIR:-target}/release/hwqos}
D=$(dirname "$0")
echo "# $(date -u +%FT%TZ), load $(cut -d' ' -f1-3 /proc/loadavg)"
taskset -c 1 python3 "$D/wake_latency.py"
for round in 1 2; do
  for ms in 100 10; do
    printf 'hwqos probe timer --timer-requests 25 --timer-max-ms %s: median AE us ' "$ms"
    "$BIN" probe timer --timer-requests 25 --timer-max-ms "$ms" --json 2>/dev/null | python3 -c '
import json, sys
t = json.load(sys.stdin)["measured"]["timer"]
print(", ".join("%s %.2f" % (s["strategy"], s["ae_median_ns"] / 1e3) for s in t["strategies"]))'
  done
done
