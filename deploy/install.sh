#!/usr/bin/env bash
# Installs hwqos on a systemd distribution without the Debian package: the
# agent binaries and the `hwqos` CLI, their systemd units, the hwqos user
# (sysusers.d), default configs in /etc/hwqos (never overwritten), man pages
# and shell completions when generated. Enables and starts the agents listed
# in ENABLE. `--uninstall` removes what it installed and keeps /etc/hwqos,
# /var/lib/hwqos and the user; `--uninstall --purge` removes those too.
#
# Usage (as root, from a checkout):
#   deploy/install.sh [--bin-dir DIR] [--assets DIR] [--prefix PREFIX] [--no-start]
#   deploy/install.sh --uninstall [--purge] [--prefix PREFIX]
#   --bin-dir DIR  built binaries (default: $CARGO_TARGET_DIR/release or
#                  target/release; built with `cargo build --release` if missing)
#   --assets DIR   generated man pages and completions (hwqos-dist-assets
#                  output; default deploy/package/target/hwqos-dist if present)
#   --prefix P     default /usr/local: binaries in P/bin, units in
#                  P/lib/systemd/system, sysusers in P/lib/sysusers.d
#   --no-start     install and enable, but do not start
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)

# Adding an agent: add it to AGENTS (binary hwqos-NAME, unit
# deploy/systemd/hwqos-NAME.service, config deploy/config/NAME.toml) and to
# ENABLE if it should run without further configuration.
AGENTS=(monitor relay)
ENABLE=(monitor)
TOOLS=(hwqos)

prefix=/usr/local
bin_dir=""
assets=""
uninstall=0
purge=0
start=1
while [ $# -gt 0 ]; do
  case $1 in
    --bin-dir) bin_dir=$2; shift 2 ;;
    --assets) assets=$2; shift 2 ;;
    --prefix) prefix=$2; shift 2 ;;
    --uninstall) uninstall=1; shift ;;
    --purge) purge=1; shift ;;
    --no-start) start=0; shift ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "install.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
if [ "$(id -u)" -ne 0 ]; then
  echo "install.sh: run as root" >&2
  exit 1
fi
if [ "$purge" -eq 1 ] && [ "$uninstall" -eq 0 ]; then
  echo "install.sh: --purge only goes with --uninstall" >&2
  exit 2
fi

units_dir=$prefix/lib/systemd/system
sysusers_dir=$prefix/lib/sysusers.d
man_dir=$prefix/share/man/man1
systemd_running=0
[ -d /run/systemd/system ] && systemd_running=1
sctl() { if [ "$systemd_running" -eq 1 ]; then systemctl "$@"; fi; }

if [ "$uninstall" -eq 1 ]; then
  for a in "${AGENTS[@]}"; do
    sctl disable --now "hwqos-$a.service" >/dev/null 2>&1 || true
    rm -f "$units_dir/hwqos-$a.service" "$prefix/bin/hwqos-$a" "$man_dir/hwqos-$a.1"
    rm -f "$prefix/share/bash-completion/completions/hwqos-$a" \
      "$prefix/share/zsh/site-functions/_hwqos-$a" "$prefix/share/fish/vendor_completions.d/hwqos-$a.fish"
  done
  for t in "${TOOLS[@]}"; do
    rm -f "$prefix/bin/$t" "$man_dir/$t".1 "$man_dir/$t"-*.1
    rm -f "$prefix/share/bash-completion/completions/$t" \
      "$prefix/share/zsh/site-functions/_$t" "$prefix/share/fish/vendor_completions.d/$t.fish"
  done
  rm -f "$sysusers_dir/hwqos.conf" "$prefix/lib/sysctl.d/50-hwqos.conf"
  sctl daemon-reload
  if [ "$purge" -eq 1 ]; then
    rm -rf /etc/hwqos /var/lib/hwqos
    if getent passwd hwqos >/dev/null; then userdel hwqos; fi
    if getent group hwqos >/dev/null; then groupdel hwqos; fi
    echo "install.sh: hwqos removed, with its configuration, data and user"
  else
    echo "install.sh: hwqos removed; kept /etc/hwqos, /var/lib/hwqos and the user hwqos (--purge removes them)"
  fi
  exit 0
fi

# --- binaries -----------------------------------------------------------
if [ -z "$bin_dir" ]; then
  bin_dir=${CARGO_TARGET_DIR:-$repo/target}/release
fi
missing=0
for b in "${AGENTS[@]/#/hwqos-}" "${TOOLS[@]}"; do [ -x "$bin_dir/$b" ] || missing=1; done
if [ "$missing" -eq 1 ]; then
  command -v cargo >/dev/null || { echo "install.sh: no binaries in $bin_dir and no cargo to build them" >&2; exit 1; }
  (cd "$repo" && cargo build --release --locked -p hwqos-cli $(printf -- '-p hwqos-%s ' "${AGENTS[@]}"))
fi
install -d -m 0755 "$prefix/bin" "$units_dir" "$sysusers_dir"
for b in "${AGENTS[@]/#/hwqos-}" "${TOOLS[@]}"; do
  install -m 0755 "$bin_dir/$b" "$prefix/bin/$b"
done

# --- user ----------------------------------------------------------------
install -m 0644 "$here/systemd/hwqos.sysusers" "$sysusers_dir/hwqos.conf"
if command -v systemd-sysusers >/dev/null; then
  systemd-sysusers "$sysusers_dir/hwqos.conf"
elif ! getent passwd hwqos >/dev/null; then
  useradd --system --user-group --home-dir /var/lib/hwqos --no-create-home \
    --shell "$(command -v nologin || echo /bin/false)" --comment "hwqos node agents" hwqos
fi

# --- kernel.perf_event_paranoid = 2 (see deploy/systemd/hwqos-perf.sysctl) --
install -d -m 0755 "$prefix/lib/sysctl.d"
install -m 0644 "$here/systemd/hwqos-perf.sysctl" "$prefix/lib/sysctl.d/50-hwqos.conf"
if [ -x /lib/systemd/systemd-sysctl ]; then
  /lib/systemd/systemd-sysctl 50-hwqos.conf || true
elif command -v sysctl >/dev/null; then
  sysctl -q -p "$prefix/lib/sysctl.d/50-hwqos.conf" || true
fi

# --- units (paths rewritten to the prefix) -------------------------------
for a in "${AGENTS[@]}"; do
  sed "s|/usr/bin/hwqos-|$prefix/bin/hwqos-|g; s|file:/usr/share/doc/hwqos/|file:$repo/docs/|" \
    "$here/systemd/hwqos-$a.service" >"$units_dir/hwqos-$a.service"
  chmod 0644 "$units_dir/hwqos-$a.service"
done

# --- configs: never overwrite a local one --------------------------------
install -d -m 0755 /etc/hwqos
for a in "${AGENTS[@]}"; do
  src=$here/config/$a.toml
  [ -f "$src" ] || continue
  if [ -e "/etc/hwqos/$a.toml" ]; then
    if ! cmp -s "$src" "/etc/hwqos/$a.toml"; then
      install -m 0644 "$src" "/etc/hwqos/$a.toml.new"
      echo "install.sh: kept /etc/hwqos/$a.toml; the shipped default is /etc/hwqos/$a.toml.new"
    fi
  else
    install -m 0644 "$src" "/etc/hwqos/$a.toml"
  fi
done

# --- man pages and completions (if generated) ----------------------------
[ -n "$assets" ] || assets=$here/package/target/hwqos-dist
if [ -d "$assets/man" ]; then
  install -d -m 0755 "$man_dir" "$prefix/share/bash-completion/completions" \
    "$prefix/share/zsh/site-functions" "$prefix/share/fish/vendor_completions.d"
  install -m 0644 "$assets"/man/*.1 "$man_dir/"
  install -m 0644 "$assets"/completions/bash/* "$prefix/share/bash-completion/completions/"
  install -m 0644 "$assets"/completions/zsh/* "$prefix/share/zsh/site-functions/"
  install -m 0644 "$assets"/completions/fish/* "$prefix/share/fish/vendor_completions.d/"
else
  echo "install.sh: no man pages or completions at $assets (run: cargo run -p hwqos-dist --bin hwqos-dist-assets -- $assets)"
fi

# --- enable and start -----------------------------------------------------
if [ "$systemd_running" -eq 1 ]; then
  systemctl daemon-reload
  for a in "${ENABLE[@]}"; do
    if [ "$start" -eq 1 ]; then
      systemctl enable --now "hwqos-$a.service"
    else
      systemctl enable "hwqos-$a.service"
    fi
  done
  echo "install.sh: installed; enabled: ${ENABLE[*]/#/hwqos-} (others: systemctl enable --now hwqos-NAME)"
else
  echo "install.sh: installed; systemd is not running here, nothing enabled or started"
fi
