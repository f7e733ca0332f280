#!/usr/bin/env bash
# The release gate under replayed load (thesis 6.4.3; docs/experiments/gate.md):
# a change that hurts only under load. The candidate adds a helper that
# spin-waits while the work runs (a spin-wait instead of a blocking wait).
# On an idle 2-CPU node the helper takes the CPU the work does not use, and
# costs nothing. The replayed load is a production node where one CPU is
# busy with another tenant (SHARE of CPU 0). There the baseline's one thread
# still finds a free CPU, but work and helper together need two, and one of
# them shares CPU 0 with the load. The bare run must understate the
# regression, the loaded run must show it.
#
#   sudo docs/experiments/gate_under_load.sh                # ~2 minutes
#   sudo REPS=12 ITER=400000 SHARE=0.9 CPUS="0" docs/experiments/gate_under_load.sh
#
# REPS: repetitions per version and condition; ITER: iterations of the
# work (a shell loop, ~1.5 us each here); SHARE: the replayed CPU share on
# each of CPUS. The model is synthesized here, one CPU at a time, measuring
# only the generator process (--measure-processes self, so whatever else
# runs on the node does not count), and the per-CPU models are merged.
# Output: the gate's report (text and JSON), its recordings, its plot
# (gate.svg: x per run) and the machine description in $OUT (default: a new temporary directory, printed at the
# end).
set -euo pipefail

REPS="${REPS:-8}"
ITER="${ITER:-300000}"
SHARE="${SHARE:-0.9}"
CPUS="${CPUS:-0}"
root="$(cd "$(dirname "$0")/../.." && pwd)"
OUT="${OUT:-$(mktemp -d /tmp/gate_under_load.XXXXXX)}"
mkdir -p "$OUT"
LOADGEN="${LOADGEN:-$root/target/debug/hwqos-loadgen}"
if [ ! -x "$LOADGEN" ]; then
    (cd "$root" && cargo build -q -p hwqos-loadgen)
fi
# On a shared machine (other sessions building, as where gate.md's numbers
# were taken), "bare" is not bare. As root, and where the cgroup-v1 cpu
# controller is mounted, this script moves itself (and so everything it
# starts) into a cpu cgroup `hwqos-gate` with cpu.shares 262144 (256 times
# a default group or session) for the run, and removes it on exit. Nice
# alone would not do: with autogroups, nice weighs only within a session.
CG=/sys/fs/cgroup/cpu/hwqos-gate
shares="none (no cgroup: other work on the node counts)"
if [ "$(id -u)" = 0 ] && [ -w /sys/fs/cgroup/cpu/cgroup.procs ]; then
    mkdir -p "$CG"
    echo 262144 >"$CG/cpu.shares"
    echo $$ >"$CG/cgroup.procs"
    trap 'echo $$ > /sys/fs/cgroup/cpu/cgroup.procs; rmdir "$CG" 2>/dev/null || true' EXIT
    shares="cgroup $CG, cpu.shares $(cat "$CG/cpu.shares")"
fi

{
    echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')"
    echo "cpus: $(nproc) online"
    echo "kernel: $(uname -r)"
    echo "memory: $(grep MemTotal /proc/meminfo | awk '{print $2 " kB"}')"
    echo "loadavg before: $(cat /proc/loadavg)"
    echo "cpu share of this run: $shares"
} | tee "$OUT/machine.txt"

# The model: SHARE on each of CPUS, synthesized one CPU at a time.
cpus=$CPUS
for c in $cpus; do
    "$LOADGEN" targets "cpu_util@$c=$SHARE" -o "$OUT/targets-$c.json" >/dev/null
    "$LOADGEN" synthesize "$OUT/targets-$c.json" -o "$OUT/model-$c.json" \
        --measure-processes self --timeout 60 | tail -1
done
python3 - "$OUT" $cpus <<'EOF'
import json, sys
out, cpus = sys.argv[1], sys.argv[2:]
models = [json.load(open(f"{out}/model-{c}.json")) for c in cpus]
merged = models[0]
for m in models[1:]:
    merged["entries"] += m["entries"]
json.dump(merged, open(f"{out}/model.json", "w"), indent=1)
EOF

work="i=0; while [ \$i -lt $ITER ]; do i=\$((i+1)); done"
baseline="$work"
# The helper spins until the work is done; it is killed and reaped, so its
# CPU time is in the counters.
candidate="while :; do :; done & s=\$!; $work; kill \$s; wait \$s 2>/dev/null; true"
echo "baseline:  $baseline" | tee "$OUT/commands.txt"
echo "candidate: $candidate" | tee -a "$OUT/commands.txt"

"$LOADGEN" gate "$OUT/model.json" -r "$REPS" \
    --baseline "$baseline" --candidate "$candidate" \
    --record-dir "$OUT/recordings" --plot "$OUT/gate.svg" --json >"$OUT/report.json" 2>"$OUT/runs.txt"
python3 - "$OUT/report.json" <<'EOF' | tee "$OUT/table.md"
import json, sys
r = json.load(open(sys.argv[1]))
print(f"x: {r['x']}, {r['repetitions']} runs per version and condition, {r['level']*100:.0f} % Welch intervals")
print()
print("| condition | baseline x (s) | candidate x (s) | effect | 95 % interval | verdict | CPU s per run (b -> c) |")
print("|---|---|---|---|---|---|---|")
for c in r["conditions"]:
    e = c["effect_pct"]
    b, k = c["counters"]
    print(f"| {c['condition']} | {c['baseline_mean']:.3f} ± {c['stddev'][0]:.3f} | "
          f"{c['candidate_mean']:.3f} ± {c['stddev'][1]:.3f} | {e[0]:+.1f} % | "
          f"[{e[1]:+.1f} %, {e[2]:+.1f} %] | {c['verdict']} | "
          f"{b['task_clock_ns']/1e9:.2f} -> {k['task_clock_ns']/1e9:.2f} |")
EOF
echo "loadavg after: $(cat /proc/loadavg)" | tee -a "$OUT/machine.txt"
echo "results in $OUT (hwqos diff $OUT/recordings/baseline-loaded.jsonl $OUT/recordings/candidate-loaded.jsonl)"
