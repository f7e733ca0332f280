#!/usr/bin/env bash
# Builds Debian's linux-source-6.1 with the SCHED_SRA patch series, boots it
# in qemu (TCG, 2 CPUs) with kernel-patch/sra-test.c as /init, and prints
# one result line per scenario. Exits non-zero on any failure or timeout.
#
# Environment:
#   HWQOS_KERNEL_CACHE  build cache (default ${XDG_CACHE_HOME:-$HOME/.cache}/hwqos-kernel)
#   HWQOS_KERNEL_JOBS   make -j value (default 2)
#   HWQOS_KERNEL_BOOT_TIMEOUT  seconds the guest may run (default 420)
#   HWQOS_KERNEL_STRICT_OVERHEAD=1  also fail scenario 7 when the SRA
#                       throughput is below 97% of CFS (a speed assertion;
#                       off by default, the ratio is always printed)
#   HWQOS_SRA_AGENT     a statically linked hwqos-sra for scenario 8 (default:
#                       built here with cargo, -C target-feature=+crt-static)
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cache=${HWQOS_KERNEL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/hwqos-kernel}
jobs=${HWQOS_KERNEL_JOBS:-2}
boot_timeout=${HWQOS_KERNEL_BOOT_TIMEOUT:-420}
# tsc=reliable: under TCG the TSC follows the host clock; without it the
# clocksource watchdog may compare it against lost-tick jiffies on a busy
# host and fall back to a 1 ms jiffies clock.
append="console=ttyS0 panic=-1 tsc=reliable"
[[ ${HWQOS_KERNEL_STRICT_OVERHEAD:-0} == 1 ]] && append+=" sra_strict_overhead=1"
tested_version=6.1.192-2
tarball=/usr/src/linux-source-6.1.tar.xz
packages=(linux-source-6.1 qemu-system-x86 build-essential flex bison bc
	libelf-dev libssl-dev cpio xz-utils patch)

log() { printf '%s\n' "$*" >&2; }
die() { log "kernel-patch/test.sh: $*"; exit 1; }

missing=0
for tool in qemu-system-x86_64 gcc make flex bison bc cpio xz patch; do
	command -v "$tool" >/dev/null || missing=1
done
[[ -f $tarball && -f /usr/include/gelf.h && -f /usr/include/openssl/ssl.h ]] || missing=1
if (( missing )); then
	[[ $(id -u) -eq 0 ]] || die "build tools missing; run as root or install: ${packages[*]}"
	log "installing ${packages[*]}"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq >&2
	apt-get install -y -qq "${packages[@]}" >&2
fi

version=$(dpkg-query -W -f='${Version}' linux-source-6.1 2>/dev/null || echo unknown)
[[ $version == "$tested_version" ]] ||
	log "note: linux-source-6.1 is $version; the series was made against $tested_version"

# The kernel's style checker first (seconds): the series must pass
# checkpatch.pl --strict, and the check must catch a known defect (a copy of
# patch 1 with trailing whitespace added).
log "checkpatch.pl --strict on the series"
"$here/checkpatch.sh" >&2 || die "checkpatch.pl --strict: see above"
control=$(mktemp)
sed 's/^+#define SCHED_SRA\t\t8$/&  /' "$here"/patches/0001-*.patch >"$control"
if "$here/checkpatch.sh" "$control" >/dev/null 2>&1; then
	rm -f "$control"
	die "checkpatch.sh passed a patch with trailing whitespace (negative control)"
fi
rm -f "$control"

# The cache key covers everything that goes into bzImage.
key=$( (echo "$version"; cat "$here"/patches/*.patch "$here/sra.config") | sha256sum | cut -c1-16)
build=$cache/build-$key
mkdir -p "$cache"
start=$SECONDS

if [[ ! -f $build/bzImage ]]; then
	log "building kernel $version + SCHED_SRA series in $build (make -j$jobs; takes several minutes)"
	rm -rf "$cache"/build-*
	mkdir -p "$build"
	tar -C "$build" -xf "$tarball"
	src=$build/linux-source-6.1
	for p in "$here"/patches/*.patch; do
		patch -d "$src" -p1 --quiet --forward < "$p" || die "patch $(basename "$p") does not apply"
	done
	obj=$build/obj
	mkdir -p "$obj"
	make -C "$src" O="$obj" tinyconfig >/dev/null
	"$src"/scripts/kconfig/merge_config.sh -m -O "$obj" "$obj/.config" "$here/sra.config" >/dev/null
	make -C "$src" O="$obj" olddefconfig >/dev/null
	while read -r line; do
		[[ $line == CONFIG_* ]] || continue
		grep -qx "$line" "$obj/.config" || die "config fragment line not in final .config: $line"
	done < "$here/sra.config"
	make -C "$src" O="$obj" -j"$jobs" bzImage >"$build/build.log" 2>&1 ||
		{ tail -30 "$build/build.log" >&2; die "kernel build failed (log: $build/build.log)"; }
	gcc -O2 -o "$build/gen_init_cpio" "$src/usr/gen_init_cpio.c"
	cp "$obj/arch/x86/boot/bzImage" "$build/bzImage.tmp"
	# The sources and objects are not needed once bzImage exists.
	rm -rf "$src" "$obj"
	mv "$build/bzImage.tmp" "$build/bzImage"
	log "kernel built in $((SECONDS - start)) s"
else
	log "using cached kernel $build/bzImage"
fi

run=$(mktemp -d)
trap 'rm -rf "$run"' EXIT
gcc -static -O2 -Wall -Wextra -Werror -o "$run/init" "$here/sra-test.c"
# Scenario 8 runs the real agent: hwqos-sra linked statically against glibc
# (no other Rust target can be downloaded here), so the initramfs needs no
# loader or libraries.
agent=${HWQOS_SRA_AGENT:-}
if [[ -z $agent ]]; then
	command -v cargo >/dev/null || die "cargo is needed to build the static hwqos-sra for scenario 8"
	root=$(cd "$here/.." && pwd)
	host=$(rustc -vV | sed -n 's/^host: //p')
	log "building a static hwqos-sra ($host, +crt-static)"
	(cd "$root" && RUSTFLAGS="-C target-feature=+crt-static" cargo build --quiet --release --locked \
		-p hwqos-sra --target "$host" --target-dir "$root/target/static")
	agent="$root/target/static/$host/release/hwqos-sra"
fi
readelf -l "$agent" | grep -q 'Requesting program interpreter' && die "$agent is dynamically linked"
cat >"$run/initramfs.list" <<EOF
dir /dev 0755 0 0
nod /dev/console 0600 0 0 c 5 1
nod /dev/null 0666 0 0 c 1 3
dir /proc 0555 0 0
dir /sys 0555 0 0
dir /run 0755 0 0
file /init $run/init 0755 0 0
file /hwqos-sra $agent 0755 0 0
EOF
"$build/gen_init_cpio" "$run/initramfs.list" >"$run/initramfs.cpio"

log "booting the guest (qemu TCG, 2 CPUs; timeout ${boot_timeout}s)"
boot_start=$SECONDS
status=0
timeout "$boot_timeout" qemu-system-x86_64 -accel tcg -smp 2 -m 512M \
	-nographic -no-reboot -kernel "$build/bzImage" -initrd "$run/initramfs.cpio" \
	-append "$append" >"$run/guest.log" 2>&1 || status=$?
cp "$run/guest.log" "$cache/last-guest.log"

grep -E '^(PASS|FAIL) |^  agent: ' "$run/guest.log" | tr -d '\r' || true
failed=0
if (( status == 124 )); then
	echo "FAIL guest timed out after ${boot_timeout}s"
	failed=1
fi
grep -q '^SRA-TEST done failures=0' "$run/guest.log" || failed=1
grep -q '^FAIL ' "$run/guest.log" && failed=1
passes=$(grep -c '^PASS ' "$run/guest.log" || true)
if (( passes != 9 )); then
	echo "FAIL expected 9 passing scenarios, got $passes"
	failed=1
fi
cpus=$(grep -o 'Brought up [0-9]* node[s]*, [0-9]* CPUs' "$run/guest.log" || true)
if [[ $cpus != *", 2 CPUs" ]]; then
	echo "FAIL guest did not bring up 2 CPUs (${cpus:-no smp line})"
	failed=1
fi
if splat=$(grep -E 'WARNING:|BUG:|Oops|circular locking|inconsistent lock state|possible recursive locking|sleeping function called from invalid context|detected stall' "$run/guest.log"); then
	echo "FAIL kernel-log reported:"
	printf '%s\n' "$splat" | head -5
	failed=1
else
	echo "PASS kernel-log no warnings, lockdep reports or stalls ($cpus)"
fi
log "guest ran $((SECONDS - boot_start)) s; total $((SECONDS - start)) s; full log: $cache/last-guest.log"
if (( failed )); then
	tail -40 "$run/guest.log" >&2
	exit 1
fi
