#!/usr/bin/env bash
# Issue 25's short comparison, part of the test suite: one compressible
# payload (24 MB of generated text, docs/experiments/gentext.py) from one
# network namespace to another over a veth pair limited to 100 Mbit/s (tc
# htb), through the adaptive relay pair and through `zstd --adapt | socat`,
# 5 interleaved repetitions each, every output checked by sha256. Fails when
# the relay's median time is more than 15 % above zstd --adapt's.
#
# The relay is the release build (a debug build's codecs are several times
# slower: that would measure the compiler, which is why this is a script and
# not a cargo test) with its default configuration but for one key:
# cpu_target = 0 (zstd has no CPU throttle, and on a node busy with other
# work the throttle rightly stops compressing; its behaviour has its own
# tests). Its default chunk_bytes (256 KiB, reached by doubling from 16 KiB
# while reads fill the buffer) is what this checks too: 16 KiB messages of
# this text compress to 34 % where a zstd stream gets 30 %, which alone is
# 1.13x; docs/compression.md, "Relay vs stream compressors". Bounded: about 30 s after the build, 300 s at most.
#
# Needs root, ip netns, veth, tc htb, zstd, socat, ss and python3. Where one
# is missing it fails and says which, unless HWQOS_ALLOW_SKIP_NETNS=1, with
# which it prints the reason and skips.
set -euo pipefail
cd "$(dirname "$0")/.."

reason=""
if [ "$(id -u)" -ne 0 ]; then
  reason="not root (network namespaces need root)"
else
  for c in ip tc zstd socat ss python3; do
    command -v "$c" >/dev/null 2>&1 || reason="$reason missing $c;"
  done
  if [ -z "$reason" ]; then
    ns="hwqprobe$$"
    if ip netns add "$ns" 2>/dev/null; then
      if ! { ip -n "$ns" link add p0 type veth peer name p1 \
        && tc -n "$ns" qdisc add dev p0 root handle 1: htb default 10; } 2>/dev/null; then
        reason="veth or tc htb unavailable"
      fi
      ip netns del "$ns"
    else
      reason="ip netns add failed"
    fi
  fi
fi
if [ -n "$reason" ]; then
  if [ "${HWQOS_ALLOW_SKIP_NETNS:-}" = 1 ]; then
    echo "relay-vs-zstd: SKIPPED (HWQOS_ALLOW_SKIP_NETNS=1): $reason"
    exit 0
  fi
  echo "relay-vs-zstd: cannot run: $reason (HWQOS_ALLOW_SKIP_NETNS=1 skips)" >&2
  exit 1
fi

cargo build --release --locked -q -p hwqos-relay
timeout 300 docs/experiments/relay_vs_cli.sh --rates 100mbit --payloads gentext \
  --size-mb 24 --reps 5 --tools "zstd-adapt relay" \
  --relay "adaptive=$(pwd)/target/release/hwqos-relay" \
  --relay-opt 'cpu_target = 0.0' \
  --check 1.15
