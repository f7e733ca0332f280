#!/usr/bin/env bash
# Compression experiments (thesis 7.4.1-7.4.4) on network namespaces, veth
# and tc shaping. Writes docs/experiments/results/compression_*.
#
#   sudo docs/experiments/compression_run.sh            # ~10 minutes
#   sudo SCALE=5 docs/experiments/compression_run.sh    # 5x the messages (content change at 5,000)
#
# Only loopback and the namespaces hwqos-c-a / hwqos-c-b (10.231.77.1-2 on a
# veth pair) are used; everything is removed on exit.
#
# Link profiles: with `netem` (CONFIG_NET_SCH_NETEM) the rate and a delay per
# direction are set with netem, so the base RTT is twice the profile's delay.
# Kernels without netem (this VM's 6.18 kernel has CONFIG_NET_SCH_NETEM unset)
# get the rate from `tbf` and no added delay; the script says which it used.
set -euo pipefail

SCALE="${SCALE:-1}"
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

# Shaping on both ends: netem (rate + per-direction delay) where the kernel
# has it, else tbf (rate only).
if tc -n "$A" qdisc replace dev hwqos-c-va root netem delay 1ms 2>/dev/null; then
    shaper=netem
else
    shaper=tbf
fi
echo "compression_run: shaping with $shaper" | tee "$out/compression_shaper.txt"
qdisc() { # RATE DELAY -> the qdisc arguments
    if [ "$shaper" = netem ]; then
        echo "netem rate $1 delay $2 limit 100000"
    else
        case "$1" in
            10mbit) burst=5kb ;; 100mbit) burst=20kb ;; *) burst=200kb ;;
        esac
        echo "tbf rate $1 burst $burst latency 1s"
    fi
}
link_cmd() { # RATE DELAY -> shell command setting both ends (also for --at hooks)
    echo "tc -n $A qdisc replace dev hwqos-c-va root $(qdisc "$1" "$2"); tc -n $B qdisc replace dev hwqos-c-vb root $(qdisc "$1" "$2")"
}
link() { sh -c "$(link_cmd "$1" "$2")"; }

ip netns exec "$B" "$bin" server --listen 10.231.77.2:47400 2>/dev/null &
pids+=($!)
ip netns exec "$B" "$bin" server --listen 127.0.0.1:47401 2>/dev/null &
pids+=($!)
sleep 0.5

policies=(one:none one:lz4 one:snappy one:zstd-1 one:zstd-3 one:zstd-9 one:lzma-0 one:lzma-6
          one:bzip2-1 one:bzip2-9 one:deflate round-robin majority adaptive)

rtt_json="$out/compression_rtt.jsonl"
: > "$rtt_json"
run() { # LABEL NS ADDR MESSAGES POLICY DATASET [extra client args]
    local label=$1 ns=$2 addr=$3 n=$4 policy=$5 set=$6
    shift 6
    ip netns exec "$ns" "$bin" client --connect "$addr" --policy "$policy" --dataset "$set" \
        --messages "$n" --label "$label" "$@" 2>>"$work/client.log" >>"$rtt_json"
}

# 7.4.1/7.4.2: mean RTT per link profile, data set and policy. Policies are
# interleaved per data set so slow drift on the shared VM hits all alike.
profiles=("loopback|$B|127.0.0.1:47401|-|-|2000"
          "1gbit-0.2ms|$A|10.231.77.2:47400|1gbit|0.2ms|1500"
          "100mbit-1ms|$A|10.231.77.2:47400|100mbit|1ms|800"
          "10mbit-5ms|$A|10.231.77.2:47400|10mbit|5ms|300")
for prof in "${profiles[@]}"; do
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
link 100mbit 1ms
change=$((1000 * SCALE)); bw=$((2000 * SCALE)); total=$((2600 * SCALE))
mkdir -p "$out/compression_change"
for p in "${policies[@]}"; do
    echo "compression_run: change run $p"
    link 100mbit 1ms
    run "change" "$A" 10.231.77.2:47400 "$total" "$p" d1 --change-at "$change" --change-to dp \
        --at "$bw:$(link_cmd 10mbit 5ms)" --csv "$out/compression_change/${p//:/_}.csv"
done

# 7.4.4: CPU burner (one busy process = half of this 2-CPU VM) from message
# 1000*SCALE to 2000*SCALE, throttle target 0.5.
link 100mbit 1ms
mkdir -p "$out/compression_burner"
start_burner="sh -c 'while :; do :; done' >/dev/null 2>&1 & echo \$! > $work/burner.pid"
stop_burner="kill \$(cat $work/burner.pid); rm -f $work/burner.pid"
for p in one:zstd-9 adaptive; do
    echo "compression_run: burner run $p"
    run "burner" "$A" 10.231.77.2:47400 $((3000 * SCALE)) "$p" dp --cpu-target 0.5 \
        --at "$((1000 * SCALE)):$start_burner" --at "$((2000 * SCALE)):$stop_burner" \
        --csv "$out/compression_burner/${p//:/_}.csv"
done

python3 "$root/docs/experiments/compression_report.py" "$out" > "$out/compression_report.md"
echo "compression_run: done; see $out/compression_report.md"
