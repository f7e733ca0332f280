#!/usr/bin/env bash
# Experiment (a), thesis 8.4.1 shape: two memory-bound and two CPU-bound
# processes, first co-located by hand (both memory-bound ones on CPU 0, both
# CPU-bound ones on CPU 1), then placed by the hwqos-sra decision engine on
# this machine's topology; x per process (leech work units per second) in
# each phase. The sensitivities are given in the model by hand (this VM has
# no PMU, so no cache counters to correlate): the memory-bound leeches are
# sensitive to L1D misses, the CPU-bound ones to nothing.
# Needs root (affinity of other processes). Writes
# docs/experiments/results/sra_allocation.{txt,json}.
# Usage: docs/experiments/sra_allocation.sh [SECONDS] [REPS]
set -euo pipefail
cd "$(dirname "$0")/../.."
SECS=${1:-10}
REPS=${2:-3}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-target}
cargo build --release -q -p hwqos-sra
B=$CARGO_TARGET_DIR/release/hwqos-sra
OUT=docs/experiments/results
TMP=$(mktemp -d /tmp/sra-alloc.XXXXXX)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$TMP"; }
trap cleanup EXIT
# 384 KiB working sets, 64-byte stride: one fits this EPYC's 512 KiB L2, two do not.
MEM=(memory --working-set 393216 --stride 64)
CPU=(cpu)

start() { # name cpu-or-empty args...
  local name=$1 cpu=$2; shift 2
  if [ -n "$cpu" ]; then "$B" leech "$@" --cpu "$cpu" --duration-s "$SECS" > "$TMP/$name.out" 2>&1 &
  else "$B" leech "$@" --duration-s "$SECS" > "$TMP/$name.out" 2>&1 & fi
  pids+=("$!"); eval "pid_$name=$!"
}

: > "$TMP/rows.jsonl"
for rep in $(seq 1 "$REPS"); do
  # Phase 1: co-located by hand.
  start mem1 0 "${MEM[@]}"; start mem2 0 "${MEM[@]}"; start cpu1 1 "${CPU[@]}"; start cpu2 1 "${CPU[@]}"
  wait "$pid_mem1" "$pid_mem2" "$pid_cpu1" "$pid_cpu2"
  for n in mem1 mem2 cpu1 cpu2; do
    echo "{\"rep\":$rep,\"phase\":\"co-located\",\"process\":\"$n\",\"x\":$(sed -n 's/.*(\([0-9]*\)\/s).*/\1/p' "$TMP/$n.out")}" >> "$TMP/rows.jsonl"
  done
  # Phase 2: decision engine.
  start mem1 "" "${MEM[@]}"; start mem2 "" "${MEM[@]}"; start cpu1 "" "${CPU[@]}"; start cpu2 "" "${CPU[@]}"
  cat > "$TMP/model.json" <<JSON
{"schema":"hwqos.sensitivity/1","processes":[
 {"process":"pid:$pid_mem1","sensitive_to":[{"resource":"L1-dcache-load-misses","correlation":0.9}]},
 {"process":"pid:$pid_mem2","sensitive_to":[{"resource":"L1-dcache-load-misses","correlation":0.9}]},
 {"process":"pid:$pid_cpu1"},{"process":"pid:$pid_cpu2"}]}
JSON
  "$B" decide --model "$TMP/model.json" --out "$TMP/contract.json" > "$TMP/decide.txt"
  "$B" apply "$TMP/contract.json" --state-dir "$TMP/state" --duration-s "$SECS" 2> "$TMP/apply.log" &
  ap=$!
  wait "$pid_mem1" "$pid_mem2" "$pid_cpu1" "$pid_cpu2"; wait "$ap" || true
  for n in mem1 mem2 cpu1 cpu2; do
    echo "{\"rep\":$rep,\"phase\":\"decision engine\",\"process\":\"$n\",\"x\":$(sed -n 's/.*(\([0-9]*\)\/s).*/\1/p' "$TMP/$n.out")}" >> "$TMP/rows.jsonl"
  done
done
cp "$TMP/decide.txt" "$TMP/decide.keep"
python3 - "$TMP" "$OUT" "$SECS" "$REPS" <<'PY'
import json, sys, statistics as st
tmp, out, secs, reps = sys.argv[1:5]
rows = [json.loads(l) for l in open(f"{tmp}/rows.jsonl")]
lines = [f"experiment (a): {reps} repetitions x {secs} s per phase; x = leech work units/s (memory: 64-byte strided writes over 384 KiB; cpu: xorshift steps)"]
res = {}
for p in ("mem1", "mem2", "cpu1", "cpu2"):
    a = [r["x"] for r in rows if r["process"] == p and r["phase"] == "co-located"]
    b = [r["x"] for r in rows if r["process"] == p and r["phase"] == "decision engine"]
    res[p] = {"co_located": a, "decision_engine": b}
    lines.append(f"{p}: co-located mean {st.mean(a):.4g}/s, decision engine mean {st.mean(b):.4g}/s, change {100 * (st.mean(b) / st.mean(a) - 1):+.1f} %")
lines.append("placement chosen by the decision engine (last repetition):")
lines += ["  " + l for l in open(f"{tmp}/decide.keep").read().splitlines()]
open(f"{out}/sra_allocation.txt", "w").write("\n".join(lines) + "\n")
json.dump(res, open(f"{out}/sra_allocation.json", "w"), indent=1)
print("\n".join(lines))
PY
