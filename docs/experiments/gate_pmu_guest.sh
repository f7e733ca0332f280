#!/usr/bin/env bash
# The release gate under replayed load on the emulated PMU (docs/experiments/gate.md,
# "On the emulated PMU"): hwqos-loadgen gate in the qemu aarch64 guest of
# scripts/pmu-guest (-cpu max -icount shift=0 -smp 1, Armv8 PMUv3: exact
# instruction counts, cycles == instructions), with every command wrapped in
# `hwqos stat -e instructions:u,instructions,cycles` so each run's hardware
# counts are kept next to the gate's report.
#
# The guest has one vCPU, so the 2-CPU case of gate_under_load.sh (a helper
# that takes the idle second CPU) cannot be built. Its one-CPU analogue: the
# work is a paced request loop (REQ requests of ITER shell-loop iterations,
# each followed by a SLEEP_US sleep: idle time), and the candidate adds a
# background helper of HELPER iterations at nice 19 that the command waits
# for at the end (deferred housekeeping). Bare, the helper runs in the
# request loop's idle time and costs (almost) nothing; under the replayed
# load (SHARE of the CPU) that idle time is the load's, and the command
# waits for its helper.
#
#   docs/experiments/gate_pmu_guest.sh             # a few minutes (the guest is slow)
#   REPS=6 SHARE=0.7 docs/experiments/gate_pmu_guest.sh
#
# x is the wall time in the guest: under -icount shift=0 the guest clock
# advances 1 ns per instruction the vCPU executes (of any task, the kernel
# included) and in real time while the vCPU idles, so x is the
# instructions retired on the CPU while the command ran plus its idle time.
# Output (OUT, default a new temporary directory): report.json, runs.txt,
# gate.svg (hwqos-loadgen gate --plot), hw.csv (per run: version, condition,
# x, instructions:u, instructions, cycles), table.md, guest.log.
# PMU_GUEST: the pmu-guest script to use (default: this checkout's).
set -euo pipefail

REPS="${REPS:-6}"
REQ="${REQ:-10}"
ITER="${ITER:-400}"
SLEEP_US="${SLEEP_US:-30000}"
HELPER="${HELPER:-10000}"
SHARE="${SHARE:-0.7}"
SETTLE="${SETTLE:-0.3}"
root="$(cd "$(dirname "$0")/../.." && pwd)"
PMU_GUEST="${PMU_GUEST:-$root/scripts/pmu-guest}"
OUT="${OUT:-$(mktemp -d /tmp/gate_pmu_guest.XXXXXX)}"
mkdir -p "$OUT"
tmp=$(mktemp -d /tmp/gate_pmu_guest_cmd.XXXXXX)
trap 'rm -rf "$tmp"' EXIT

work="j=0; while [ \$j -lt $REQ ]; do i=0; while [ \$i -lt $ITER ]; do i=\$((i+1)); done; usleep $SLEEP_US; j=\$((j+1)); done"
helper="sh -c 'renice -n 19 -p \$\$ >/dev/null; i=0; while [ \$i -lt $HELPER ]; do i=\$((i+1)); done' & h=\$!"
baseline="$work"
candidate="$helper; $work; wait \$h"
# Each command under hwqos stat (one file per run, named by the shell's PID,
# which grows run by run in the fresh guest).
wrap() { printf "hwqos stat -x, -o /tmp/hw/%s.\$\$ -e instructions:u,instructions,cycles -- sh -c '%s'" "$1" "${2//\'/\'\\\'\'}"; }
b_cmd=$(wrap baseline "$baseline")
c_cmd=$(wrap candidate "$candidate")
printf 'baseline:  %s\ncandidate: %s\n' "$b_cmd" "$c_cmd" | tee "$OUT/commands.txt"

cat >"$tmp/gate-guest.sh" <<EOF
set -e
mkdir -p /tmp/hw /tmp/g
echo "guest: \$(uname -r), \$(nproc) CPU"
hwqos-loadgen targets cpu_util@0=$SHARE -o /tmp/g/targets.json >/dev/null
hwqos-loadgen synthesize /tmp/g/targets.json -o /tmp/g/model.json --measure-processes self --timeout 60 --hold 8 2>/tmp/g/synth.err | tail -1
hwqos-loadgen gate /tmp/g/model.json -r $REPS --settle $SETTLE \\
    --baseline "\$(cat /work/b.cmd)" --candidate "\$(cat /work/c.cmd)" \\
    --record-dir /tmp/g/rec --plot /tmp/g/gate.svg --json >/tmp/g/report.json 2>/tmp/g/runs.txt || { cat /tmp/g/runs.txt; exit 1; }
cat /tmp/g/runs.txt
echo "@@report"; cat /tmp/g/report.json; echo "@@end"
echo "@@svg"; cat /tmp/g/gate.svg; echo; echo "@@end"
for f in \$(ls /tmp/hw | sed 's/.*\\.//' | sort -n); do
    n=\$(ls /tmp/hw/*.\$f); echo "@@hw \$(basename \$n)"; cat \$n
done
echo "@@done"
EOF
printf '%s' "$b_cmd" >"$tmp/b.cmd"
printf '%s' "$c_cmd" >"$tmp/c.cmd"
start=$(date -u +%Y-%m-%dT%H:%M:%SZ)
"$PMU_GUEST" --timeout 1500 --add "$tmp/gate-guest.sh" --add "$tmp/b.cmd" --add "$tmp/c.cmd" \
    -- sh gate-guest.sh >"$OUT/guest.log" 2>&1 || { tail -30 "$OUT/guest.log"; exit 1; }
echo "date: $start; host: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'); guest: $(grep 'pmu-guest: guest ran' "$OUT/guest.log")" >"$OUT/machine.txt"
sed -n '/^@@report/,/^@@end/p' "$OUT/guest.log" | sed '1d;$d' >"$OUT/report.json"
sed -n '/^@@svg/,/^@@end/p' "$OUT/guest.log" | sed '1d;$d' >"$OUT/gate.svg"
sed -n '/^run /p' "$OUT/guest.log" >"$OUT/runs.txt"
python3 - "$OUT" <<'PY' | tee "$OUT/table.md"
import json, re, sys, statistics as st
out = sys.argv[1]
r = json.load(open(f"{out}/report.json"))
log = open(f"{out}/guest.log").read()
# hwqos stat's CSV per run, in the order the runs started (PIDs grow).
hw = {"baseline": [], "candidate": []}
for m in re.finditer(r"^@@hw (\w+)\.(\d+)\n(.*?)(?=^@@)", log, re.M | re.S):
    counts = {}
    for line in m.group(3).splitlines():
        f = line.split(",")
        if len(f) >= 3 and f[0].strip().isdigit():
            counts[f[2].strip()] = int(f[0])
    hw[m.group(1)].append(counts)
rows = []
seen = {"baseline": 0, "candidate": 0}
for run in r["runs"]:
    v = run["version"]
    c = hw[v][seen[v]] if seen[v] < len(hw[v]) else {}
    seen[v] += 1
    rows.append((v, run["condition"], run["x"], c.get("instructions:u"), c.get("instructions"), c.get("cycles")))
with open(f"{out}/hw.csv", "w") as f:
    f.write("version,condition,x_s,instructions_u,instructions,cycles\n")
    for row in rows:
        f.write(",".join(str(v) for v in row) + "\n")
print(f"x: {r['x']} in the guest (virtual time), {r['repetitions']} runs per version and condition, {r['level']*100:.0f} % Welch intervals; counters: emulated PMU (hwqos stat per run)")
print()
print("| condition | baseline x (s) | candidate x (s) | effect | 95 % interval | verdict | instructions:u per run (b -> c) | instructions (u+k) per run (b -> c) |")
print("|---|---|---|---|---|---|---|---|")
for c in r["conditions"]:
    e = c["effect_pct"]
    def mean_of(v, i):
        vals = [row[i] for row in rows if row[0] == v and row[1] == c["condition"] and row[i] is not None]
        return st.mean(vals) if vals else float("nan")
    print(f"| {c['condition']} | {c['baseline_mean']:.3f} ± {c['stddev'][0]:.3f} | "
          f"{c['candidate_mean']:.3f} ± {c['stddev'][1]:.3f} | {e[0]:+.1f} % | "
          f"[{e[1]:+.1f} %, {e[2]:+.1f} %] | {c['verdict']} | "
          f"{mean_of('baseline', 3)/1e6:.1f} M -> {mean_of('candidate', 3)/1e6:.1f} M | "
          f"{mean_of('baseline', 4)/1e6:.1f} M -> {mean_of('candidate', 4)/1e6:.1f} M |")
bad = [row for row in rows if row[5] is not None and row[4] is not None and row[5] != row[4]]
print()
print(f"cycles == instructions (u+k) in {len(rows) - len(bad)} of {len(rows)} runs (icount: one cycle per instruction)")
PY
echo "results in $OUT"
