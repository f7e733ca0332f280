#!/usr/bin/env bash
# Experiment (b), thesis 8.4.2 TC2-TC4 shape: a message round-trip victim
# (UDP ping-pong over loopback, client and echo server pinned to CPU 1, one
# message per millisecond)
#   TC2: alone;
#   TC3: with a CPU leech and a memory leech (64 MiB, 64-byte stride) on CPU 1;
#   TC4: the same leeches with quotas enforced by hwqos-sra (task-clock
#        2 ms per 10 ms each, userspace backend, direct route).
# Mean RTT and jitter span (max - min, and p99 - p1) per phase.
# Needs root. Writes docs/experiments/results/sra_qos.{txt,json}.
# Usage: docs/experiments/sra_qos.sh [MESSAGES]
# Environment: SRA_QUOTA_EVENT / SRA_QUOTA (default sw.task_clock / 2000000
# per 10 ms) choose the leeches' quota; SRA_RESULT (default sra_qos) the
# result file name (scripts/hw-validate-sra runs it with L1D replacements).
set -euo pipefail
cd "$(dirname "$0")/../.."
N=${1:-5000}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-target}
cargo build --release -q -p hwqos-sra
B=$CARGO_TARGET_DIR/release/hwqos-sra
OUT=docs/experiments/results
EVENT=${SRA_QUOTA_EVENT:-sw.task_clock}
QUOTA=${SRA_QUOTA:-2000000}
RESULT=${SRA_RESULT:-sra_qos}
TMP=$(mktemp -d /tmp/sra-qos.XXXXXX)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$TMP"; }
trap cleanup EXIT

cat > "$TMP/victim.py" <<'PY'
import json, os, socket, sys, time
n, label, out = int(sys.argv[1]), sys.argv[2], sys.argv[3]
os.sched_setaffinity(0, {1})
srv = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); srv.bind(("127.0.0.1", 0))
port = srv.getsockname()[1]
pid = os.fork()
if pid == 0:
    while True:
        data, addr = srv.recvfrom(64)
        if data == b"q":
            os._exit(0)
        srv.sendto(data, addr)
cli = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
rtts = []
for i in range(n):
    t0 = time.perf_counter_ns()
    cli.sendto(b"x" * 32, ("127.0.0.1", port))
    cli.recvfrom(64)
    rtts.append((time.perf_counter_ns() - t0) / 1e3)
    time.sleep(0.001)
cli.sendto(b"q", ("127.0.0.1", port)); os.waitpid(pid, 0)
with open(out, "a") as f:
    f.write(json.dumps({"phase": label, "rtt_us": rtts}) + "\n")
PY
: > "$TMP/rtt.jsonl"
python3 "$TMP/victim.py" "$N" "TC2 alone" "$TMP/rtt.jsonl"

"$B" leech cpu --cpu 1 >/dev/null 2>&1 & l1=$!; pids+=("$l1")
"$B" leech memory --working-set 67108864 --stride 64 --cpu 1 >/dev/null 2>&1 & l2=$!; pids+=("$l2")
sleep 0.5
python3 "$TMP/victim.py" "$N" "TC3 with leeches" "$TMP/rtt.jsonl"

cat > "$TMP/contract.json" <<JSON
{"schema":"hwqos.contract/1","entries":[
 {"name":"cpu leech","process":"pid:$l1","period_us":10000,"quotas":{"$EVENT":$QUOTA}},
 {"name":"memory leech","process":"pid:$l2","period_us":10000,"quotas":{"$EVENT":$QUOTA}}]}
JSON
"$B" apply "$TMP/contract.json" --state-dir "$TMP/state" 2> "$TMP/apply.log" & ap=$!; pids+=("$ap")
sleep 1
python3 "$TMP/victim.py" "$N" "TC4 leeches with quotas" "$TMP/rtt.jsonl"
kill "$ap"; wait "$ap" || true
kill "$l1" "$l2"; wait "$l1" "$l2" 2>/dev/null || true

python3 - "$TMP" "$OUT" "$N" "$EVENT" "$QUOTA" "$RESULT" <<'PY'
import json, sys, statistics as st
tmp, out, n, event, quota, result = sys.argv[1:7]
def pct(xs, p):
    xs = sorted(xs); return xs[min(len(xs) - 1, max(0, round(p / 100 * len(xs) + 0.5) - 1))]
lines = [f"experiment (b): {n} UDP round trips over loopback per phase, victim client+server on CPU 1, 1 ms between messages; TC4 quota {quota} {event} per 10 ms per leech"]
res = {}
for l in open(f"{tmp}/rtt.jsonl"):
    d = json.loads(l); r = d["rtt_us"]
    res[d["phase"]] = {"mean_us": st.mean(r), "p50_us": pct(r, 50), "p99_us": pct(r, 99), "min_us": min(r), "max_us": max(r),
                       "span_us": max(r) - min(r), "span_p1_p99_us": pct(r, 99) - pct(r, 1)}
    x = res[d["phase"]]
    lines.append(f"{d['phase']}: mean {x['mean_us']:.1f} us, p50 {x['p50_us']:.1f}, p99 {x['p99_us']:.1f}, "
                 f"jitter span max-min {x['span_us']:.0f} us, p99-p1 {x['span_p1_p99_us']:.1f} us")
open(f"{out}/{result}.txt", "w").write("\n".join(lines) + "\n")
json.dump(res, open(f"{out}/{result}.json", "w"), indent=1)
print("\n".join(lines))
PY
