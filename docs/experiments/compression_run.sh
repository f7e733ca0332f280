#!/usr/bin/env bash
# Compression experiments (thesis 7.4.1-7.4.4) on network namespaces, veth
# and tc netem (or a user-space link emulator). Writes docs/experiments/results/compression_*.
#
#   sudo docs/experiments/compression_run.sh            # ~10 minutes
#   sudo SCALE=5 docs/experiments/compression_run.sh    # 5x the messages (content change at 5,000)
#   sudo PARTS=burner docs/experiments/compression_run.sh   # only some parts: rtt change burner
#
# Only loopback and the namespaces hwqos-c-a / hwqos-c-b (10.231.77.1-2 on a
# veth pair) are used; everything is removed on exit.
#
# Link profiles (rate, one-way delay; the base RTT is twice the delay): with
# netem (CONFIG_NET_SCH_NETEM) on the veth pair; kernels without netem (this
# VM's 6.18 kernel has it unset) use the user-space emulator `rtt_experiment
# linkemu` in front of the veth pair. The script says which it used.
set -euo pipefail

SCALE="${SCALE:-1}"
PARTS=" ${PARTS:-rtt change burner} "
root="$(cd "$(dirname "$0")/../.." && pwd)"
out="$root/docs/experiments/results"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$root/target}"
cargo build --release -q -p hwqos-compress --example rtt_experiment
bin="$CARGO_TARGET_DIR/release/examples/rtt_experiment"
work="$(mktemp -d)"
A=hwqos-c-a
B=hwqos-c-b
pids=()

cleanup() {
    for p in "${pids[@]:-}"; do [ -n "$p" ] && kill "$p" 2>/dev/null || true; done
    [ -f "$work/burner.pid" ] && kill "$(cat "$work/burner.pid")" 2>/dev/null || true
    ip netns del "$A" 2>/dev/null || true
    ip netns del "$B" 2>/dev/null || true
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
mbit() { case "$1" in 10mbit) echo 10 ;; 100mbit) echo 100 ;; 1gbit) echo 1000 ;; esac; }
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
[ "$PARTS" = " rtt change burner " ] && : > "$rtt_json" && : > "$out/compression_load.tsv"
# A partial run replaces its own lines only.
for part in change burner; do
    if [[ "$PARTS" == *" $part "* ]] && [ -f "$rtt_json" ]; then
        grep -v "\"label\":\"$part\"" "$rtt_json" > "$work/keep" || true
        cp "$work/keep" "$rtt_json"
    fi
done
# Per-message CSVs stay in $work; results keep one line per 100 messages.
downsample() { python3 "$root/docs/experiments/compression_report.py" --downsample "$1" "$2"; }
run() { # LABEL NS ADDR MESSAGES POLICY DATASET [extra client args]
    local label=$1 ns=$2 addr=$3 n=$4 policy=$5 set=$6
    shift 6
    printf '%s\t%s\t%s\t%s\n' "$label" "$policy" "$set" "$(cut -d' ' -f1-3 /proc/loadavg)" >>"$out/compression_load.tsv"
    ip netns exec "$ns" "$bin" client --connect "$addr" --policy "$policy" --dataset "$set" \
        --messages "$n" --label "$label" "$@" 2>>"$work/client.log" >>"$rtt_json"
}

# 7.4.1/7.4.2: mean RTT per link profile, data set and policy. Policies are
# interleaved per data set so slow drift on the shared VM hits all alike.
profiles=("loopback|$B|127.0.0.1:47401|-|-|2000"
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

# 7.4.3 + bandwidth change: D1 -> Dp at message 1000*SCALE, 100 -> 10 Mbit/s at 2000*SCALE.
if [[ "$PARTS" == *" change "* ]]; then
link 100mbit 1ms
change=$((1000 * SCALE)); bw=$((2000 * SCALE)); total=$((2600 * SCALE))
mkdir -p "$out/compression_change"
for p in "${policies[@]}"; do
    echo "compression_run: change run $p"
    link 100mbit 1ms
    run "change" "$A" "$target" "$total" "$p" d1 --change-at "$change" --change-to dp \
        --at "$bw:$(link_cmd 10mbit 5ms)" --csv "$work/change.csv"
    downsample "$work/change.csv" "$out/compression_change/${p//:/_}.csv"
done
fi

# 7.4.4: CPU burner. Messages paced at one per 500 us on loopback (30,000,
# 15 s); policy one:bzip2-1 so that compression alone could load a CPU;
# throttle target 0.5; one busy process (half of this 2-CPU VM) from message
# 10,000 to 20,000.
if [[ "$PARTS" == *" burner "* ]]; then
mkdir -p "$out/compression_burner"
start_burner="sh -c 'while :; do :; done' >/dev/null 2>&1 & echo \$! > $work/burner.pid"
stop_burner="kill \$(cat $work/burner.pid); rm -f $work/burner.pid"
for p in one:bzip2-1 adaptive; do
    echo "compression_run: burner run $p"
    run "burner" "$B" 127.0.0.1:47401 30000 "$p" dp --cpu-target 0.5 --pace-us 500 \
        --at "10000:$start_burner" --at "20000:$stop_burner" \
        --csv "$work/burner.csv"
    downsample "$work/burner.csv" "$out/compression_burner/${p//:/_}.csv"
done
fi

python3 "$root/docs/experiments/compression_report.py" "$out" > "$out/compression_report.md"
echo "compression_run: done; see $out/compression_report.md"
