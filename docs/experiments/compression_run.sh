#!/usr/bin/env bash
# Compression experiments (thesis 7.4.1-7.4.4) on network namespaces, veth
# and tc netem (or a user-space link emulator). Writes docs/experiments/results/compression_*.
#
#   sudo docs/experiments/compression_run.sh            # ~12 minutes
#   sudo SCALE=3 docs/experiments/compression_run.sh    # 3x the messages of the link x data-set runs
#   (CHANGE_SCALE does the same for the change run)
#   sudo PARTS=burner docs/experiments/compression_run.sh   # only some parts: il rtt ab ab1g ab100m ab10m change changeab burner
#
# Only loopback and the namespaces hwqos-c-a / hwqos-c-b (10.231.77.1-2 on a
# veth pair) are used; the burner part runs on 127.0.0.1 in the root
# namespace inside its own cgroup (v1 cpu + cpuacct `hwqos-c-burn`, or v2),
# limited to one CPU. Everything is removed on exit.
#
# Link profiles (rate, one-way delay; the base RTT is twice the delay): with
# netem (CONFIG_NET_SCH_NETEM) on the veth pair; kernels without netem (this
# VM's 6.18 kernel has it unset) use the user-space emulator `rtt_experiment
# linkemu` in front of the veth pair. The script says which it used.
set -euo pipefail

SCALE="${SCALE:-1}"
PARTS=" ${PARTS:-rtt ab ab1g change changeab burner} "
REPS="${REPS:-5}"
root="$(cd "$(dirname "$0")/../.." && pwd)"
out="$root/docs/experiments/results"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$root/target}"
cargo build --release -q -p hwqos-compress --features full --example rtt_experiment
bin="$CARGO_TARGET_DIR/release/examples/rtt_experiment"
work="$(mktemp -d)"
A=hwqos-c-a
B=hwqos-c-b
pids=()

CG=hwqos-c-burn
cg_dirs() {
    if [ -d /sys/fs/cgroup/cpuacct ] && [ -d /sys/fs/cgroup/cpu ]; then
        echo "/sys/fs/cgroup/cpu/$CG /sys/fs/cgroup/cpuacct/$CG"
    else
        echo "/sys/fs/cgroup/$CG"
    fi
}
cleanup() {
    for p in "${pids[@]:-}"; do [ -n "$p" ] && kill "$p" 2>/dev/null || true; done
    [ -f "$work/burner.pid" ] && kill "$(cat "$work/burner.pid")" 2>/dev/null || true
    ip netns del "$A" 2>/dev/null || true
    ip netns del "$B" 2>/dev/null || true
    for d in $(cg_dirs); do
        for i in $(seq 20); do [ -d "$d" ] || break; rmdir "$d" 2>/dev/null || sleep 0.3; done
    done
    rm -rf "$work"
}
trap cleanup EXIT INT TERM

ip netns add "$A"
ip netns add "$B"
ip link add hwqos-c-va type veth peer name hwqos-c-vb
ip link set hwqos-c-va netns "$A"
ip link set hwqos-c-vb netns "$B"
ip -n "$A" addr add 10.231.77.1/30 dev hwqos-c-va
ip -n "$B" addr add 10.231.77.2/30 dev hwqos-c-vb
for ns in "$A" "$B"; do ip -n "$ns" link set lo up; done
ip -n "$A" link set hwqos-c-va up
ip -n "$B" link set hwqos-c-vb up

# Link emulation: netem on both veth ends (rate + per-direction delay) where
# the kernel has it; otherwise the user-space emulator (`rtt_experiment
# linkemu`, in namespace A, forwarding over the veth pair), because tbf/htb
# only limit sustained throughput and do not delay an isolated message.
if tc -n "$A" qdisc replace dev hwqos-c-va root netem delay 1ms 2>/dev/null; then
    shaper=netem
    tc -n "$A" qdisc del dev hwqos-c-va root
    target=10.231.77.2:47400
else
    shaper=linkemu
    target=127.0.0.1:47500
fi
echo "compression_run: link emulation with $shaper" | tee "$out/compression_shaper.txt"
mbit() { case "$1" in 10mbit) echo 10 ;; 100mbit) echo 100 ;; 1gbit) echo 1000 ;; 10gbit) echo 10000 ;; esac; }
usec() { echo "$1" | sed -e 's/ms$//' | awk '{print $1 * 1000}'; }
link_cmd() { # RATE DELAY -> shell command (also used by --at hooks)
    if [ "$shaper" = netem ]; then
        echo "tc -n $A qdisc replace dev hwqos-c-va root netem rate $1 delay $2 limit 100000; tc -n $B qdisc replace dev hwqos-c-vb root netem rate $1 delay $2 limit 100000"
    else
        echo "echo $(mbit "$1") $(usec "$2") > $work/link; sleep 0.3"
    fi
}
link() { sh -c "$(link_cmd "$1" "$2")"; }

ip netns exec "$B" "$bin" server --listen 10.231.77.2:47400 2>/dev/null &
pids+=($!)
ip netns exec "$B" "$bin" server --listen 127.0.0.1:47401 2>/dev/null &
pids+=($!)
if [ "$shaper" = linkemu ]; then
    echo "1000 0" > "$work/link"
    ip netns exec "$A" "$bin" linkemu --listen 127.0.0.1:47500 --connect 10.231.77.2:47400 \
        --rate-mbit 1000 --delay-us 0 --control "$work/link" 2>/dev/null &
    pids+=($!)
fi
sleep 0.5

policies=(one:none one:lz4 one:snappy one:zstd-1 one:zstd-3 one:zstd-9 one:lzma-0 one:lzma-6
          one:bzip2-1 one:bzip2-9 one:deflate round-robin majority adaptive)

rtt_json="$out/compression_rtt.jsonl"
[ "$PARTS" = " rtt ab ab1g change changeab burner " ] && : > "$rtt_json" && : > "$out/compression_load.tsv"
# A partial run replaces its own lines only.
part_labels() { case "$1" in rtt) echo "loopback 1gbit-0.2ms 100mbit-1ms 10mbit-5ms" ;; ab) echo loopback-ab ;; ab1g) echo 1gbit-ab ;; ab100m) echo 100mbit-ab ;; ab10m) echo 10mbit-ab ;; changeab) echo change-ab ;; *) echo "$1" ;; esac; }
for part in rtt ab ab1g ab100m ab10m change changeab burner; do
    if [[ "$PARTS" == *" $part "* ]] && [ -f "$rtt_json" ]; then
        for l in $(part_labels "$part"); do
            grep -v "\"label\":\"$l\"" "$rtt_json" > "$work/keep" || true
            cp "$work/keep" "$rtt_json"
        done
    fi
done
# The policies "$@" rotated left by $1 (repetition r starts at another
# policy, so no policy always runs first or last: the load drifts).
rotated() { local k=$1; shift; local a=("$@"); local n=${#a[@]}; for ((i = 0; i < n; i++)); do echo "${a[$(((i + k) % n))]}"; done; }
# Per-message CSVs stay in $work; results keep one line per 100 messages.
downsample() { python3 "$root/docs/experiments/compression_report.py" --downsample "$1" "$2"; }
run() { # LABEL NS ADDR MESSAGES POLICY DATASET [extra client args]
    local label=$1 ns=$2 addr=$3 n=$4 policy=$5 set=$6
    shift 6
    printf '%s\t%s\t%s\t%s\n' "$label" "$policy" "$set" "$(cut -d' ' -f1-3 /proc/loadavg)" >>"$out/compression_load.tsv"
    ip netns exec "$ns" "$bin" client --connect "$addr" --policy "$policy" --dataset "$set" \
        --messages "$n" --label "$label" "$@" 2>>"$work/client.log" >>"$rtt_json"
}

# Interleaved (the verdicts on the 2% and 3% targets): per repetition, link
# and data set, one process runs a stream per policy (all 14) and takes them
# in a new random order in every cycle, so the VM's drift, which moves a
# whole run's mean by a few percent, hits every policy alike. Client, server
# and emulator run pinned to CPU 0: unpinned, which stream's server thread
# sat on the other, idle vCPU (woken by an IPI through the hypervisor, tens
# of microseconds) decided a stream's RTT — two `one:none` streams measured
# 18.7 and 52.8 µs medians on loopback; pinned, four measured within 0.1 µs.
# IL_POLICIES (comma-separated) replaces the 14 policies: the slow codecs
# (lzma, bzip2, deflate), never the best fixed codec on these links, allocate
# megabytes per message and change the process's allocator and cache state
# for every other stream in it. IL_OUT names the output file (under results/).
# Loopback runs 20,000 messages per stream: at 3,000, two `one:none` streams
# in the same run differed by up to 2 % in their means (rare slow round trips
# dominate a 20 µs mean); IL_LOOPBACK_MESSAGES changes that.
il_json="$out/${IL_OUT:-compression_interleaved.jsonl}"
IL_SCALE="${IL_SCALE:-1}"
IL_POLICIES="${IL_POLICIES:-$(IFS=,; echo "${policies[*]}")}"
if [[ "$PARTS" == *" il "* ]]; then
    pin="taskset -c 0"
    ip netns exec "$B" $pin "$bin" server --listen 10.231.77.2:47410 2>/dev/null &
    pids+=($!)
    ip netns exec "$B" $pin "$bin" server --listen 127.0.0.1:47411 2>/dev/null &
    pids+=($!)
    il_target=10.231.77.2:47410
    if [ "$shaper" = linkemu ]; then
        ip netns exec "$A" $pin "$bin" linkemu --listen 127.0.0.1:47510 --connect 10.231.77.2:47410 \
            --rate-mbit 1000 --delay-us 0 --control "$work/link" 2>/dev/null &
        pids+=($!)
        il_target=127.0.0.1:47510
    fi
    sleep 0.5
    il_profiles=("loopback|$B|127.0.0.1:47411|-|-|${IL_LOOPBACK_MESSAGES:-20000}"
                 "1gbit-0.2ms|$A|$il_target|1gbit|0.2ms|3000"
                 "100mbit-1ms|$A|$il_target|100mbit|1ms|800"
                 "10mbit-5ms|$A|$il_target|10mbit|5ms|300")
    : > "$il_json"
    for r in $(seq "$REPS"); do
        for prof in "${il_profiles[@]}"; do
            IFS='|' read -r label ns addr rate delay n <<<"$prof"
            [ "$rate" != "-" ] && link "$rate" "$delay"
            n=$((n * IL_SCALE))
            for set in d0 d1 dp; do
                echo "compression_run: interleaved $label $set, repetition $r ($n messages per policy)"
                printf '%s\t%s\t%s\t%s\n' "il-$label" all "$set" "$(cut -d' ' -f1-3 /proc/loadavg)" >>"$out/compression_load.tsv"
                ip netns exec "$ns" $pin "$bin" interleave --connect "$addr" --dataset "$set" \
                    --policies "$IL_POLICIES" --messages "$n" \
                    --label "il-$label" --seed "$r" 2>>"$work/client.log" >>"$il_json"
            done
        done
    done
fi

# 7.4.1/7.4.2: mean RTT per link profile, data set and policy. Policies are
# interleaved per data set so slow drift on the shared VM hits all alike.
profiles=("loopback|$B|127.0.0.1:47401|-|-|5000"
          "1gbit-0.2ms|$A|$target|1gbit|0.2ms|1500"
          "100mbit-1ms|$A|$target|100mbit|1ms|800"
          "10mbit-5ms|$A|$target|10mbit|5ms|300")
[[ "$PARTS" == *" rtt "* ]] && for prof in "${profiles[@]}"; do
    IFS='|' read -r label ns addr rate delay n <<<"$prof"
    [ "$rate" != "-" ] && link "$rate" "$delay"
    n=$((n * SCALE))
    for set in d0 d1 dp; do
        echo "compression_run: $label $set ($n messages per policy)"
        for p in "${policies[@]}"; do
            run "$label" "$ns" "$addr" "$n" "$p" "$set"
        done
    done
done

# Loopback A/B (target: adaptive within 3% of uncompressed): REPS
# interleaved repetitions of uncompressed, adaptive and majority, 20,000
# messages each, so one slow repetition does not decide.
if [[ "$PARTS" == *" ab "* ]]; then
for r in $(seq "$REPS"); do
    for set in d0 d1 dp; do
        for p in one:none adaptive majority; do
            run "loopback-ab" "$B" 127.0.0.1:47401 20000 "$p" "$set"
        done
    done
done
fi

# Link A/B: the policies that matter on a link, interleaved per repetition
# (the link x data-set runs above go through the policies in a fixed order,
# so a drift of the VM's load over a data set's minute biases them).
ablink() { # LABEL RATE DELAY MESSAGES
    local label=$1 rate=$2 delay=$3 n=$4
    link "$rate" "$delay"
    for r in $(seq "$REPS"); do
        for set in d0 d1 dp; do
            for p in $(rotated "$r" one:none one:lz4 one:snappy one:zstd-9 majority adaptive); do
                run "$label" "$A" "$target" "$n" "$p" "$set"
            done
        done
    done
}
[[ "$PARTS" == *" ab1g "* ]] && ablink 1gbit-ab 1gbit 0.2ms 3000
[[ "$PARTS" == *" ab100m "* ]] && ablink 100mbit-ab 100mbit 1ms 800
[[ "$PARTS" == *" ab10m "* ]] && ablink 10mbit-ab 10mbit 5ms 300

# 7.4.3 + bandwidth change, designed so that no single codec is best
# throughout, in three phases of 2 KiB messages:
#   1. pseudo-random payloads (Dr) on 10 Mbit/s, 5 ms: nothing compresses,
#      the strong codecs only waste CPU;
#   2. content change at message CHANGE_K1: batches of Dp on the same link,
#      where the strong codecs beat `none` by ~15% and the fast ones by ~5%;
#   3. bandwidth change at message CHANGE_K2: a 10 Gbit/s, 0 ms link (the
#      emulator's own forwarding latency remains), where compressing costs
#      more than it saves.
# Phase 3 has as many messages as take about as long as phase 2 (an RTT of
# ~12 ms there, ~0.1 ms here), so that a codec's loss in either phase
# weighs alike in the run's mean RTT. (The fourth and fifth rounds' design,
# Dp on 10 Mbit/s then Dr on 1 Gbit/s, had phase 2 take 4% of the run and
# let zstd-3, which stores random data raw almost for free, be near-best
# in both phases: in git history.)
CHANGE_SCALE="${CHANGE_SCALE:-1}"
change_k1=$((200 * CHANGE_SCALE)); change_k2=$((1000 * CHANGE_SCALE))
change_total=$((change_k2 + ${CHANGE_FAST:-60000} * CHANGE_SCALE))
change_batch="${CHANGE_BATCH:-8192}"
read -r -a change_policies <<< "${CHANGE_POLICIES:-one:none one:lz4 one:snappy one:zstd-1 one:zstd-3 majority adaptive}"
change_run() { # LABEL POLICY [extra client args]
    local label=$1 p=$2
    shift 2
    link 10mbit 5ms
    run "$label" "$A" "$target" "$change_total" "$p" dr --batch "$change_batch" --size 2048 \
        --change-at "$change_k1" --change-to dp \
        --at "$change_k2:$(link_cmd 10gbit 0ms)" "$@"
}
if [[ "$PARTS" == *" change "* ]]; then
mkdir -p "$out/compression_change"
rm -f "$out"/compression_change/*.csv
for p in "${change_policies[@]}"; do
    echo "compression_run: change run $p"
    change_run change "$p" --csv "$work/change.csv"
    downsample "$work/change.csv" "$out/compression_change/${p//:/_}.csv"
done
fi

# The change run's leaders differ by little: REPS interleaved repetitions of
# adaptive, majority and the best fixed codecs of the change run
# (CHANGE_POLICIES; per-message CSVs are not kept).
if [[ "$PARTS" == *" changeab "* ]]; then
for r in $(seq "$REPS"); do
    for p in $(rotated "$r" "${change_policies[@]}"); do
        echo "compression_run: change A/B $r $p"
        change_run change-ab "$p"
    done
done
fi

# 7.4.4: CPU burner, in a cgroup limited to one CPU (cpu.cfs_quota_us =
# cfs_period_us = 10 ms, so that quota throttling averages out within one
# 100 ms reading of the throttle; cpu.shares raised so that the other jobs on the VM do not
# take its CPU) holding client, server and burner; the throttle's input is
# the cgroup's CPU use against its limit (cpu_aggregate = cgroup), target
# 0.8. Messages (batches of Dp, >= 4 KiB) paced at one per 500 us on
# 127.0.0.1 (root namespace: `ip netns exec` remounts /sys and hides the
# cgroup files), 30,000 messages; policy one:bzip2-1 so that compression
# alone can load the CPU; a burner busy 5 ms of every 10 ms (half a CPU)
# from message 10,000 to 20,000.
if [[ "$PARTS" == *" burner "* ]]; then
mkdir -p "$out/compression_burner"
dirs=$(cg_dirs)
for d in $dirs; do mkdir -p "$d"; done
if [ -d /sys/fs/cgroup/cpu/$CG ]; then
    echo 10000 > /sys/fs/cgroup/cpu/$CG/cpu.cfs_period_us
    echo 10000 > /sys/fs/cgroup/cpu/$CG/cpu.cfs_quota_us
    echo 262144 > /sys/fs/cgroup/cpu/$CG/cpu.shares
else
    echo "10000 10000" > /sys/fs/cgroup/$CG/cpu.max
    echo 10000 > /sys/fs/cgroup/$CG/cpu.weight
fi
join_cg() { for d in $dirs; do echo "$1" > "$d/cgroup.procs"; done; }
( join_cg $BASHPID; exec "$bin" server --listen 127.0.0.1:47402 ) 2>/dev/null &
pids+=($!)
sleep 0.3
start_burner="python3 -c 'import time
while True:
    t = time.monotonic()
    while time.monotonic() - t < 0.005: pass
    time.sleep(0.005)' >/dev/null 2>&1 & echo \$! > $work/burner.pid"
stop_burner="kill \$(cat $work/burner.pid); rm -f $work/burner.pid"
for p in one:bzip2-1 adaptive; do
    echo "compression_run: burner run $p"
    printf '%s\t%s\t%s\t%s\n' burner "$p" dp "$(cut -d' ' -f1-3 /proc/loadavg)" >>"$out/compression_load.tsv"
    ( join_cg $BASHPID; exec "$bin" client --connect 127.0.0.1:47402 --policy "$p" --dataset dp \
        --batch 4096 --cpu-target 0.8 --cpu-aggregate cgroup --pace-us 500 --messages 30000 \
        --label burner --at "10000:$start_burner" --at "20000:$stop_burner" \
        --csv "$work/burner.csv" ) 2>>"$work/client.log" >>"$rtt_json"
    downsample "$work/burner.csv" "$out/compression_burner/${p//:/_}.csv"
done
fi

python3 "$root/docs/experiments/compression_report.py" "$out" > "$out/compression_report.md"
echo "compression_run: done; see $out/compression_report.md"
