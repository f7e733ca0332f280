#!/usr/bin/env bash
# Checks every systemd unit in deploy/systemd/ with systemd's own tools:
#   systemd-analyze verify                       (must pass)
#   systemd-analyze security --offline=true      (exposure must be <= 4.0)
# The units are checked inside a scratch root that holds them at
# /usr/lib/systemd/system and the agent binaries at /usr/bin, so `verify`
# also proves each ExecStart= binary exists and is executable.
#
# Usage: deploy/verify-units.sh [BIN_DIR]
#   BIN_DIR: where the built agent binaries are (default: the first of
#   $CARGO_TARGET_DIR/release, $CARGO_TARGET_DIR/debug, target/release,
#   target/debug that has them all).
# Prints one "SCORE <unit> <exposure>" line per unit; exit 1 on any failure.
set -euo pipefail
cd "$(dirname "$0")/.."

MAX_EXPOSURE=4.0

if ! command -v systemd-analyze >/dev/null 2>&1; then
  if [ "$(id -u)" -eq 0 ]; then
    DEBIAN_FRONTEND=noninteractive apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends systemd >/dev/null
  else
    echo "verify-units.sh: systemd-analyze missing; install the systemd package" >&2
    exit 1
  fi
fi

units=(deploy/systemd/*.service)
# The binaries the units start: /usr/bin/NAME in ExecStart=.
mapfile -t bins < <(sed -n 's|^ExecStart=/usr/bin/\([^ ]*\).*|\1|p' "${units[@]}" | sort -u)

have_all() {
  local d=$1 b
  for b in "${bins[@]}"; do [ -x "$d/$b" ] || return 1; done
}
bin_dir=${1:-}
if [ -z "$bin_dir" ]; then
  for d in "${CARGO_TARGET_DIR:-target}/release" "${CARGO_TARGET_DIR:-target}/debug" target/release target/debug; do
    if have_all "$d"; then bin_dir=$d; break; fi
  done
fi
if [ -z "$bin_dir" ] || ! have_all "$bin_dir"; then
  echo "verify-units.sh: build the agents first (cargo build -p ...): need ${bins[*]} in one of the target directories" >&2
  exit 1
fi

root=$(mktemp -d /tmp/hwqos-verify-units.XXXXXX)
trap 'rm -rf "$root"' EXIT
mkdir -p "$root/usr/lib/systemd/system" "$root/usr/bin" "$root/bin" "$root/etc/hwqos"
# The distribution's own units (sysinit.target, ...) that ours depend on.
cp -a /usr/lib/systemd/system/. "$root/usr/lib/systemd/system/"
cp "${units[@]}" "$root/usr/lib/systemd/system/"
for b in "${bins[@]}"; do cp "$bin_dir/$b" "$root/usr/bin/"; done
cp "$(type -P kill)" "$root/bin/kill"

fail=0
echo "== systemd-analyze verify ($(systemd-analyze --version | head -1))"
for u in "${units[@]}"; do
  name=$(basename "$u")
  if out=$(systemd-analyze verify --man=no --generators=no --root="$root" "$root/usr/lib/systemd/system/$name" 2>&1) && [ -z "$out" ]; then
    echo "VERIFY $name ok"
  else
    echo "VERIFY $name FAILED"; echo "$out" | sed 's/^/  /'; fail=1
  fi
done

echo "== systemd-analyze security --offline=true (exposure must be <= $MAX_EXPOSURE)"
for u in "${units[@]}"; do
  name=$(basename "$u")
  out=$(systemd-analyze security --offline=true --root="$root" --no-pager "$root/usr/lib/systemd/system/$name" 2>&1 || true)
  score=$(echo "$out" | sed -n 's/.*Overall exposure level for [^:]*: \([0-9.]*\).*/\1/p' | tail -1)
  if [ -z "$score" ]; then
    echo "SECURITY $name: no score"; echo "$out" | tail -5 | sed 's/^/  /'; fail=1; continue
  fi
  echo "SCORE $name $score"
  if awk -v s="$score" -v m="$MAX_EXPOSURE" 'BEGIN { exit !(s > m) }'; then
    echo "  $name: exposure $score is above $MAX_EXPOSURE"; echo "$out" | grep '✗' | sed 's/^/  /'; fail=1
  fi
done

# The sysusers.d file must parse (dry run into the scratch root).
if command -v systemd-sysusers >/dev/null 2>&1; then
  for s in deploy/systemd/*.sysusers; do
    if systemd-sysusers --dry-run --root="$root" "$PWD/$s" >/dev/null 2>"$root/sysusers.err"; then
      echo "SYSUSERS $(basename "$s") ok"
    else
      echo "SYSUSERS $(basename "$s") FAILED"; sed 's/^/  /' "$root/sysusers.err"; fail=1
    fi
  done
fi
exit $fail
