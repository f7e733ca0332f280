#!/usr/bin/env bash
# Issue 25: the hwqos relay pair against stream compressors, as a user would
# compare them. Each payload goes from one network namespace to another over
# a veth pair whose sending side is rate-limited by tc htb (this kernel has
# no netem: no added delay), byte-for-byte verified (sha256), tools
# interleaved within each repetition; prints one line per run and a median
# table. Run as root, on demand (not in CI):
#
#   docs/experiments/relay_vs_cli.sh [--rates "100mbit 1gbit"] [--payloads "gentext text"]
#       [--reps 3] [--size-mb 48] [--tools "raw zstd-adapt zstd-1 lz4 relay"]
#       [--relay NAME=BINARY]... [--relay-opt 'KEY = VALUE']...
#       [--relay-policy NAME=POLICY]... [--out FILE] [--check FACTOR]
#       [--codecs FILE]
#
# --check FACTOR: exit 1 when some relay's median is more than FACTOR times
# zstd --adapt's median on some link and payload (scripts/relay-vs-zstd.sh,
# the test suite's short version, uses 1.15).
# --codecs FILE: after each relay run, append the compressing relay's
# messages per codec, samples, throttled messages and bytes (its /metrics)
# to FILE; with RELAY_RUST_LOG set, the compressing relay runs with that
# RUST_LOG and its log is kept beside FILE.
#
# Tools: raw (socat), zstd-adapt (zstd --adapt), zstd-1, zstd-3, lz4 (CLI
# streams piped through socat), relay (every --relay binary; default
# target/release/hwqos-relay as "relay", its default configuration plus the
# --relay-opt lines; --relay-policy NAME=POLICY adds "relay-NAME": the first
# --relay binary (or the default) with `policy = "POLICY"` added to its
# configuration, e.g. --relay-policy lz4=one:lz4 for a fixed codec). Payloads: gentext (generated text, deterministic: what
# the test suite's comparison uses), text (tar of /usr/share/doc and
# /usr/share/man), libs (tar of the shared libraries in /usr/lib), random,
# mix (text, libs and random switching every 8 MB). Needs ip, tc, socat,
# zstd, lz4, python3.
set -euo pipefail

RATES="100mbit 1gbit"
PAYLOADS="gentext"
REPS=3
SIZE_MB=48
TOOLS="raw zstd-adapt relay"
RELAYS=()
RELAY_OPTS=()
RELAY_POLICIES=()
OUT=""
CHECK=""
CODECS=""
while [ $# -gt 0 ]; do
  case "$1" in
    --rates) RATES="$2"; shift 2 ;;
    --payloads) PAYLOADS="$2"; shift 2 ;;
    --reps) REPS="$2"; shift 2 ;;
    --size-mb) SIZE_MB="$2"; shift 2 ;;
    --tools) TOOLS="$2"; shift 2 ;;
    --relay) RELAYS+=("$2"); shift 2 ;;
    --relay-opt) RELAY_OPTS+=("$2"); shift 2 ;;
    --relay-policy) RELAY_POLICIES+=("$2"); shift 2 ;;
    --out) OUT="$2"; shift 2 ;;
    --check) CHECK="$2"; shift 2 ;;
    --codecs) CODECS="$2"; shift 2 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
[ ${#RELAYS[@]} -gt 0 ] || RELAYS=("relay=$(pwd)/target/release/hwqos-relay")

W=$(mktemp -d /tmp/relay_vs_cli.XXXXXX)
NA="hwqA$$"; NB="hwqB$$"
cleanup() {
  local p
  for p in $(jobs -p); do kill "$p" 2>/dev/null || true; done
  ip netns pids "$NA" 2>/dev/null | xargs -r kill 2>/dev/null || true
  ip netns pids "$NB" 2>/dev/null | xargs -r kill 2>/dev/null || true
  ip netns del "$NA" 2>/dev/null || true
  ip netns del "$NB" 2>/dev/null || true
  [ -n "${KEEP:-}" ] || rm -rf "$W"
}
trap cleanup EXIT

ip netns add "$NA"; ip netns add "$NB"
ip link add vA netns "$NA" type veth peer name vB netns "$NB"
ip -n "$NA" addr add 10.77.0.1/24 dev vA
ip -n "$NB" addr add 10.77.0.2/24 dev vB
for n in "$NA" "$NB"; do ip -n "$n" link set lo up; done
ip -n "$NA" link set vA up; ip -n "$NB" link set vB up
A() { ip netns exec "$NA" "$@"; }
B() { ip netns exec "$NB" "$@"; }

set_rate() {
  tc -n "$NA" qdisc del dev vA root 2>/dev/null || true
  tc -n "$NA" qdisc add dev vA root handle 1: htb default 10 r2q 1000
  tc -n "$NA" class add dev vA parent 1: classid 1:10 htb rate "$1"
}

payload() { # name -> file of SIZE_MB MB
  local f="$W/payload-$1" n=$((SIZE_MB * 1024 * 1024))
  [ -f "$f" ] && { echo "$f"; return; }
  case "$1" in
    gentext) python3 "$(dirname "$0")/gentext.py" "$n" > "$f" ;;
    text) (tar -cf - /usr/share/doc /usr/share/man 2>/dev/null || true) | head -c "$n" > "$f" ;;
    libs) (find /usr/lib -name '*.so*' -type f -print0 | tar --null -cf - -T - 2>/dev/null || true) | head -c "$n" > "$f" ;;
    random) head -c "$n" /dev/urandom > "$f" ;;
    mix)
      local t l r i; t=$(payload text); l=$(payload libs); r=$(payload random)
      : > "$f"
      for ((i = 0; i * 8 < SIZE_MB; i++)); do
        case $((i % 3)) in 0) src=$t ;; 1) src=$l ;; 2) src=$r ;; esac
        dd if="$src" bs=1M skip=$((i * 8)) count=8 status=none >> "$f"
      done ;;
    *) echo "unknown payload $1" >&2; exit 2 ;;
  esac
  echo "$f"
}

wait_listen() { # ns port
  local i
  for i in $(seq 1 200); do
    ip netns exec "$1" ss -ltnH "sport = :$2" | grep -q . && return 0
    sleep 0.02
  done
  echo "nothing listens on $2 in $1" >&2; return 1
}

wait_free() { # ns port: the previous run's listener is gone
  local i
  for i in $(seq 1 250); do
    ip netns exec "$1" ss -ltnH "sport = :$2" | grep -q . || return 0
    sleep 0.02
  done
  echo "port $2 in $1 still taken" >&2; return 1
}

relay_conf() { # mode listen connect file [extra line] [metrics listen]
  {
    [ -z "${5:-}" ] || echo "$5"
    echo "mode = \"$1\""; echo "listen = \"$2\""; echo "connect = \"$3\""
    echo "[metrics]"; echo "listen = \"${6:-}\""
  } > "$4"
  local o
  for o in "${RELAY_OPTS[@]+"${RELAY_OPTS[@]}"}"; do sed -i "1i $o" "$4"; done
}

# One run: prints seconds; fails when the output differs.
run_tool() { # tool file label (rate payload rep, for --codecs)
  local tool=$1 f=$2 run_label=${3:-} want sink_pid t0 t1 got port=7600
  want=$(sha256sum < "$f" | cut -d' ' -f1)
  case "$tool" in
    raw|zstd-*|lz4)
      local dec="cat" enc="cat"
      case "$tool" in
        zstd-adapt) enc="zstd -q --adapt -c"; dec="zstd -q -dc" ;;
        zstd-1) enc="zstd -q -1 -c"; dec="zstd -q -dc" ;;
        zstd-3) enc="zstd -q -3 -c"; dec="zstd -q -dc" ;;
        lz4) enc="lz4 -q -c"; dec="lz4 -q -dc" ;;
      esac
      B bash -c "socat -u TCP-LISTEN:$port,reuseaddr STDOUT | $dec | sha256sum | cut -d' ' -f1 > $W/got" &
      sink_pid=$!
      wait_listen "$NB" $port
      t0=$(date +%s.%N)
      A bash -c "$enc < $f | socat -u STDIN TCP:10.77.0.2:$port"
      wait $sink_pid
      t1=$(date +%s.%N) ;;
    relay:*)
      local name=${tool#relay:} pa pb
      local bin=${relay_bin[$name]} extra=${relay_extra[$name]}
      local metrics=""
      [ -z "$CODECS" ] || metrics=127.0.0.1:9477
      relay_conf compress 127.0.0.1:7400 10.77.0.2:7401 "$W/a.toml" "$extra" "$metrics"
      relay_conf decompress 10.77.0.2:7401 127.0.0.1:$port "$W/b.toml" "$extra"
      # Newer relays refuse non-loopback listens unless allowed.
      if ! "$bin" --config "$W/b.toml" --check-config >/dev/null 2>&1; then
        sed -i '1i allow_non_loopback = true' "$W/b.toml"
      fi
      # Its stdio is not the caller's $(...) pipe, which would otherwise
      # wait for it forever when a relay fails to start.
      B bash -c "socat -u TCP-LISTEN:$port,reuseaddr STDOUT | sha256sum | cut -d' ' -f1 > $W/got" </dev/null >/dev/null 2>&1 &
      sink_pid=$!
      # Not through A/B: $! must be the relay (ip netns exec execs it), not
      # a subshell whose death leaves the relay listening.
      ip netns exec "$NB" "$bin" --config "$W/b.toml" >"$W/b.log" 2>&1 & pb=$!
      ip netns exec "$NA" env ${RELAY_RUST_LOG:+RUST_LOG=$RELAY_RUST_LOG} "$bin" --config "$W/a.toml" >"$W/a.log" 2>&1 & pa=$!
      wait_listen "$NB" $port; wait_listen "$NB" 7401; wait_listen "$NA" 7400
      if ! { kill -0 $pa && kill -0 $pb; } 2>/dev/null; then
        echo "a relay did not start: $(cat "$W"/[ab].log)" >&2
        kill -KILL $pa $pb 2>/dev/null || true
        A socat -u /dev/null TCP:10.77.0.2:$port 2>/dev/null || true # ends the sink
        wait $sink_pid 2>/dev/null || true
        return 1
      fi
      t0=$(date +%s.%N)
      A socat -u "OPEN:$f" TCP:127.0.0.1:7400
      wait $sink_pid
      t1=$(date +%s.%N)
      if [ -n "$CODECS" ]; then
        A curl -s http://127.0.0.1:9477/metrics |
          grep -E '^hwqos_relay_(messages|samples|throttled_messages|bytes)[{ ]' |
          sed "s|^|$run_label $tool |" >> "$CODECS" || true
        [ -z "${RELAY_RUST_LOG:-}" ] || cp "$W/a.log" "$CODECS.${run_label// /-}-${tool#relay:}.log"
      fi
      kill -KILL $pa $pb 2>/dev/null || true; wait $pa $pb 2>/dev/null || true
      wait_free "$NA" 7400; wait_free "$NB" 7401 ;;
  esac
  got=$(cat "$W/got")
  [ "$got" = "$want" ] || { echo "$tool: output differs" >&2; return 1; }
  echo "$t1 - $t0" | bc -l
}

declare -A label relay_bin relay_extra
tools=()
for t in $TOOLS; do
  if [ "$t" = relay ]; then
    for r in "${RELAYS[@]}"; do
      n=${r%%=*}
      tools+=("relay:$n"); label["relay:$n"]="relay-$n"
      relay_bin[$n]=${r#*=}; relay_extra[$n]=""
    done
    for r in "${RELAY_POLICIES[@]+"${RELAY_POLICIES[@]}"}"; do
      n=${r%%=*}
      tools+=("relay:$n"); label["relay:$n"]="relay-$n"
      relay_bin[$n]=${RELAYS[0]#*=}; relay_extra[$n]="policy = \"${r#*=}\""
    done
  else
    tools+=("$t")
  fi
done

results="$W/results"
: > "$results"
for rate in $RATES; do
  set_rate "$rate"
  for p in $PAYLOADS; do
    f=$(payload "$p")
    for rep in $(seq 1 "$REPS"); do
      # A new random order of the tools every repetition.
      for t in $(printf '%s\n' "${tools[@]}" | shuf); do
        s=$(run_tool "$t" "$f" "$rate $p $rep")
        name=${label[$t]:-$t}
        line="$rate $p $name $rep $s"
        echo "$line"; echo "$line" >> "$results"
        [ -z "$OUT" ] || echo "$line" >> "$OUT"
      done
    done
  done
done
echo
echo "median seconds (rate payload tool):"
python3 - "$results" "$CHECK" <<'EOF'
import sys, statistics, collections
d = collections.defaultdict(list)
for l in open(sys.argv[1]):
    r, p, t, _, s = l.split()
    d[(r, p, t)].append(float(s))
med = {k: statistics.median(v) for k, v in d.items()}
for k in sorted(d):
    print(*k, f"{med[k]:.3f}", "runs", len(d[k]))
if sys.argv[2]:
    factor, bad = float(sys.argv[2]), 0
    for (r, p, t), m in sorted(med.items()):
        z = med.get((r, p, "zstd-adapt"))
        if t.startswith("relay-") and z:
            ok = m <= factor * z
            bad += not ok
            print(f"check {r} {p} {t}: {m:.3f} s = {m / z:.2f} x zstd --adapt {z:.3f} s"
                  f" (limit {factor:.2f} x): {'ok' if ok else 'FAILED'}")
    sys.exit(1 if bad else 0)
EOF
