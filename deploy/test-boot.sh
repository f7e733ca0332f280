#!/usr/bin/env bash
# Installs the built `hwqos` .deb into a booted Debian guest with systemd as
# PID 1 and checks the agents as systemd runs them:
#   - dpkg -i works (user from sysusers.d, units enabled and started);
#   - every unit the package enables becomes active;
#   - the monitor's API answers on /run/hwqos/monitor.sock and /metrics on
#     loopback, counting with perf_event under CAP_PERFMON only;
#   - `systemctl reload` keeps the agent's data (same pid, database kept,
#     new config applied), and a broken config fails the reload harmlessly;
#   - hwqos-relay (installed, not enabled) starts, reloads and stops cleanly;
#   - `systemctl stop` is clean (exit 0, final flush written, socket gone);
#   - `dpkg --purge` removes it; deploy/install.sh installs, starts,
#     uninstalls and purges the same binaries.
#   - hwqos-sra (installed, not enabled) throttles a victim of another user
#     under a page-fault quota; `kill -9` of the agent leaves the victim
#     running (its guardian SIGCONTs it), and so does `systemctl stop`.
#
# The guest: debootstrap bookworm (cached in $HWQOS_BOOT_CACHE, default
# /var/cache/hwqos-test-boot) booted with its own Debian kernel in
# qemu-system-x86_64 (KVM when /dev/kvm works, TCG otherwise), no network.
# The checks run inside the guest as a systemd service (guest/check.sh), print
# to the serial console and power the guest off; this script reads the verdict.
#
# Usage: deploy/test-boot.sh [--deb PATH] [--keep]
#   --deb PATH  the package to test (default: build it with deploy/build-deb.sh)
#   --keep      keep the work directory (disk image, console log)
# Needs root (debootstrap, mkfs.ext4 -d of a root-owned tree). Prints the time
# each phase took; exit 0 only when every check passed.
set -euo pipefail
cd "$(dirname "$0")/.."

deb=""
keep=0
while [ $# -gt 0 ]; do
  case $1 in
    --deb) deb=$2; shift 2 ;;
    --keep) keep=1; shift ;;
    *) echo "test-boot.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done

if [ "$(id -u)" -ne 0 ]; then
  echo "test-boot.sh: run as root (debootstrap and the guest image need it)" >&2
  exit 1
fi

start_all=$(date +%s)
phase_start=$start_all
phase() {
  local now; now=$(date +%s)
  echo "test-boot: [$((now - phase_start)) s] $1"
  phase_start=$now
}

need=()
command -v debootstrap >/dev/null || need+=(debootstrap)
command -v qemu-system-x86_64 >/dev/null || need+=(qemu-system-x86)
command -v mkfs.ext4 >/dev/null || need+=(e2fsprogs)
command -v debugfs >/dev/null || need+=(e2fsprogs)
if [ ${#need[@]} -gt 0 ]; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
phase "host tools ready"

cache=${HWQOS_BOOT_CACHE:-/var/cache/hwqos-test-boot}
rootfs=$cache/rootfs
if [ ! -x "$rootfs/usr/bin/socat" ] || [ ! -e "$rootfs/vmlinuz" ]; then
  mkdir -p "$cache"
  rm -rf "$rootfs.tmp"
  # minbase + what a node has: systemd as init, the Debian kernel (its
  # initramfs has the virtio drivers), and curl/socat for the checks.
  debootstrap --variant=minbase \
    --include=systemd-sysv,udev,linux-image-amd64,curl,socat,procps,kmod \
    bookworm "$rootfs.tmp" http://deb.debian.org/debian >"$cache/debootstrap.log" 2>&1 \
    || { tail -20 "$cache/debootstrap.log"; exit 1; }
  mv "$rootfs.tmp" "$rootfs"
  phase "guest root file system bootstrapped (cached in $rootfs)"
else
  phase "guest root file system from the cache ($rootfs)"
fi

if [ -z "$deb" ]; then
  deb=$(./deploy/build-deb.sh | tail -1)
  phase "package built: $deb"
fi
[ -f "$deb" ] || { echo "test-boot.sh: no package at $deb" >&2; exit 1; }

work=$(mktemp -d /var/tmp/hwqos-test-boot.XXXXXX)
qemu_pid=""
cleanup() {
  if [ -n "$qemu_pid" ] && kill -0 "$qemu_pid" 2>/dev/null; then
    kill "$qemu_pid" 2>/dev/null || true
    wait "$qemu_pid" 2>/dev/null || true
  fi
  if [ "$keep" -eq 1 ]; then
    echo "test-boot: work directory kept: $work"
  else
    rm -rf "$work"
  fi
}
trap cleanup EXIT

# The guest tree: the cached root plus the package and the check service.
cp -a "$rootfs" "$work/root"
g=$work/root
echo hwqos-guest >"$g/etc/hostname"
cp "$deb" "$g/root/hwqos.deb"
# For the install.sh check: the deploy tree and the package's binaries.
mkdir -p "$g/root/hwqos-src/bin"
tar -C . --exclude=deploy/package/target -cf - deploy | tar -C "$g/root/hwqos-src" -xf -
dpkg-deb -x "$deb" "$work/debroot"
cp "$work/debroot"/usr/bin/* "$g/root/hwqos-src/bin/"
install -m 0755 deploy/guest/check.sh "$g/usr/local/sbin/hwqos-boot-check"
cat >"$g/etc/systemd/system/hwqos-boot-check.service" <<'UNIT'
[Unit]
Description=hwqos boot test (deploy/test-boot.sh)
After=multi-user.target

[Service]
Type=simple
ExecStart=/usr/local/sbin/hwqos-boot-check
StandardOutput=journal+console
StandardError=journal+console
UNIT
mkdir -p "$g/etc/systemd/system/multi-user.target.wants"
ln -s /etc/systemd/system/hwqos-boot-check.service \
  "$g/etc/systemd/system/multi-user.target.wants/hwqos-boot-check.service"
kernel=$(readlink -f "$g/vmlinuz")
initrd=$(readlink -f "$g/initrd.img")
cp "$kernel" "$work/vmlinuz"
cp "$initrd" "$work/initrd.img"
truncate -s 3G "$work/disk.img"
mkfs.ext4 -q -F -L hwqos-root -d "$g" "$work/disk.img"
rm -rf "$g"
phase "guest disk image written"

# KVM only if a guest kernel really boots with it: on nested-virtualization
# hosts /dev/kvm can exist yet hang the guest (seen on this project's VM).
# The smoke boot has no root file system, so the kernel panics at once and
# -no-reboot ends qemu. HWQOS_BOOT_ACCEL=tcg|kvm skips the probe.
accel=(-accel tcg -cpu max)
case ${HWQOS_BOOT_ACCEL:-auto} in
  kvm) accel=(-accel kvm -cpu host) ;;
  tcg) ;;
  auto)
    if [ -r /dev/kvm ] && [ -w /dev/kvm ]; then
      # In a child shell, so its report of qemu's abort (seen with nested
      # KVM) does not reach this script's output.
      bash -c 'timeout 60 qemu-system-x86_64 -accel kvm -cpu host -machine q35 -m 256 \
        -display none -nodefaults -no-reboot -kernel "$1" \
        -append "console=ttyS0 panic=-1" -serial "file:$2"; true' \
        probe "$work/vmlinuz" "$work/kvm-probe.log" >/dev/null 2>&1
      if grep -q 'Kernel panic' "$work/kvm-probe.log" 2>/dev/null; then
        accel=(-accel kvm -cpu host)
      fi
    fi ;;
  *) echo "test-boot.sh: HWQOS_BOOT_ACCEL must be auto, kvm or tcg" >&2; exit 2 ;;
esac
phase "accelerator chosen"
echo "test-boot: booting the guest with ${accel[1]}"

# The guest powers itself off after its checks; the limit catches a hang.
timeout --foreground 1200 qemu-system-x86_64 "${accel[@]}" -machine q35 -m 2048 -smp 2 \
  -display none -nodefaults -no-reboot \
  -kernel "$work/vmlinuz" -initrd "$work/initrd.img" \
  -append "root=LABEL=hwqos-root rw console=ttyS0 panic=-1 systemd.show_status=false" \
  -drive "file=$work/disk.img,format=raw,if=virtio" \
  -serial "file:$work/console.log" &
qemu_pid=$!
rc=0
wait "$qemu_pid" || rc=$?
qemu_pid=""
phase "guest booted, checked and powered off (qemu exit $rc)"

# The check's own log, read from the powered-off disk.
debugfs -R "cat /root/hwqos-boot-check.log" "$work/disk.img" 2>/dev/null >"$work/check.log" || true
if [ -s "$work/check.log" ]; then
  sed 's/^/guest: /' "$work/check.log"
else
  echo "test-boot: no check log in the guest; console:"
  tail -60 "$work/console.log"
fi
total=$(( $(date +%s) - start_all ))
if grep -q '^HWQOS-BOOT-RESULT: PASS' "$work/check.log"; then
  echo "test-boot: PASS (${total} s in all)"
  exit 0
fi
echo "test-boot: FAIL (${total} s in all); console tail:"
tail -40 "$work/console.log"
exit 1
