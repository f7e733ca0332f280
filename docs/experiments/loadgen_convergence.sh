#!/usr/bin/env bash
# Convergence time and steady-state error of hwqos-loadgen's closed loop per
# software metric on CPU 1 (docs/loadgen.md, "Convergence").
#
# For each target set, `hwqos-loadgen synthesize` runs REPEATS times; the model
# records the convergence time (first interval start to the 8th consecutive
# sample within tolerance) and the mean measured value over the 24-sample hold
# window after convergence (the steady-state error). Measurement covers the
# loadgen process only (--measure-processes self; this VM is shared), counted by
# kernel software events (task-clock, page-faults, context-switches).
#
# Usage: docs/experiments/loadgen_convergence.sh [REPEATS]   (from the repo root, as root for nice -20)
set -euo pipefail
cd "$(dirname "$0")/../.."
repeats=${1:-5}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-target}
cargo build --release --quiet -p hwqos-loadgen
bin=$CARGO_TARGET_DIR/release/hwqos-loadgen
out=docs/experiments/results/loadgen_convergence
mkdir -p "$out"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
echo 'nice = -20' > "$tmp/nice.toml"
csv=$out/convergence.csv
echo "set,run,metric,target,measured_hold,error_pct,convergence_s,samples" > "$csv"
sets=(
  "cpu:cpu_util@1=0.35"
  "faults:page_fault_rate@1=20000"
  "switches:context_switch_rate@1=5000"
  "all3:cpu_util@1=0.35 page_fault_rate@1=20000 context_switch_rate@1=5000"
)
for s in "${sets[@]}"; do
  name=${s%%:*}; targets=${s#*:}
  # shellcheck disable=SC2086
  "$bin" targets $targets -o "$tmp/$name.json"
  for r in $(seq "$repeats"); do
    if "$bin" --config "$tmp/nice.toml" synthesize "$tmp/$name.json" -o "$tmp/m.json" \
         --measure-processes self --timeout 60 >/dev/null 2>"$tmp/err"; then
      python3 - "$tmp/m.json" "$name" "$r" >> "$csv" <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))
for e in m["entries"]:
    err = 100 * (e["measured"] - e["target"]) / e["target"]
    print(f'{sys.argv[2]},{sys.argv[3]},{e["metric"]},{e["target"]},{e["measured"]:.6g},{err:.3f},{m["convergence_s"]:.2f},{m["samples"]}')
PY
    else
      echo "$name,$r,,,,,timeout,$(tr '\n' ' ' < "$tmp/err")" >> "$csv"
    fi
  done
done
{
  echo "# hwqos-loadgen convergence ($(date -u +%FT%TZ))"
  echo "machine: $(nproc)-vCPU $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), kernel $(uname -r), load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "command: docs/experiments/loadgen_convergence.sh $repeats"
  python3 - "$csv" <<'PY'
import csv, sys, statistics as st
rows = [r for r in csv.DictReader(open(sys.argv[1])) if r["metric"]]
print("| set | metric | runs | convergence s (median, max) | |steady-state error| % (median, max) |")
print("|---|---|---|---|---|")
keys = sorted({(r["set"], r["metric"]) for r in rows})
for s, m in keys:
    sel = [r for r in rows if r["set"] == s and r["metric"] == m]
    c = [float(r["convergence_s"]) for r in sel]; e = [abs(float(r["error_pct"])) for r in sel]
    print(f"| {s} | {m} | {len(sel)} | {st.median(c):.2f}, {max(c):.2f} | {st.median(e):.2f}, {max(e):.2f} |")
PY
} > "$out/summary.md"
cat "$out/summary.md"
