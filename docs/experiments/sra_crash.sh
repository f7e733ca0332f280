#!/usr/bin/env bash
# Crash safety of hwqos-sra: SIGKILL the agent while it holds a process
# stopped (page-fault quota 20 per 500 ms, the victim is stopped almost all the
# time) and time how long until the victim runs again (its /proc state leaves
# `T`, polled every 1 ms by python). REPS repetitions.
# Needs root. Writes docs/experiments/results/sra_crash.{txt,json}.
# Usage: docs/experiments/sra_crash.sh [REPS]
set -euo pipefail
cd "$(dirname "$0")/../.."
REPS=${1:-20}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-target}
cargo build --release -q -p hwqos-sra
B=$CARGO_TARGET_DIR/release/hwqos-sra
OUT=docs/experiments/results
TMP=$(mktemp -d /tmp/sra-crash.XXXXXX)
lp=
trap '[ -n "$lp" ] && kill "$lp" 2>/dev/null; rm -rf "$TMP"' EXIT
"$B" leech faults --working-set 1048576 >/dev/null 2>&1 & lp=$!
sleep 0.3
echo "{\"schema\":\"hwqos.contract/1\",\"entries\":[{\"name\":\"victim\",\"process\":\"pid:$lp\",\"period_us\":500000,\"quotas\":{\"sw.page_faults\":20}}]}" > "$TMP/c.json"
python3 - "$B" "$TMP/c.json" "$lp" "$REPS" "$OUT" "$TMP" <<'PY'
import json, os, signal, statistics as st, subprocess, sys, time
b, contract, pid, reps, out, tmp = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5], sys.argv[6]
def state():
    s = open(f"/proc/{pid}/stat").read()
    return s[s.rfind(")") + 2]
lat = []
for i in range(reps):
    agent = subprocess.Popen([b, "apply", contract, "--state-dir", f"{tmp}/state"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 10
    while state() != "T":
        if time.monotonic() > deadline:
            sys.exit("victim never stopped")
        time.sleep(0.001)
    time.sleep(0.05)
    t0 = time.monotonic()
    os.kill(agent.pid, signal.SIGKILL)
    while state() == "T":
        time.sleep(0.0005)
    lat.append((time.monotonic() - t0) * 1e3)
    agent.wait()
    time.sleep(0.2)  # let the guardian exit
lat.sort()
res = {"reps": reps, "ms": lat, "p50_ms": lat[len(lat) // 2], "max_ms": lat[-1], "mean_ms": st.mean(lat)}
line = (f"kill -9 of the agent while the victim is stopped -> victim running again: {reps} runs, "
        f"p50 {res['p50_ms']:.2f} ms, mean {res['mean_ms']:.2f} ms, max {res['max_ms']:.2f} ms (python poll every 0.5 ms)")
open(f"{out}/sra_crash.txt", "w").write(line + "\n")
json.dump(res, open(f"{out}/sra_crash.json", "w"), indent=1)
print(line)
PY
