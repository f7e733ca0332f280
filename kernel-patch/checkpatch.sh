#!/usr/bin/env bash
# Runs the kernel's own style checker, scripts/checkpatch.pl --strict, from
# Debian's linux-source-6.1 tarball on the SCHED_SRA series. Fails on any
# ERROR or WARNING; CHECKs are printed (the one the series has is a false
# positive, see kernel-patch/README.md). Called by kernel-patch/test.sh.
#
# --ignore FILE_PATH_CHANGES: "does MAINTAINERS need updating?" is about
# submitting upstream; this series is carried out of tree by hwqos.
#
# Usage: kernel-patch/checkpatch.sh [PATCH...]   (default: the whole series)
#
# Environment: HWQOS_KERNEL_CACHE as for test.sh (checkpatch.pl is unpacked
# there once per linux-source version).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cache=${HWQOS_KERNEL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/hwqos-kernel}
tarball=/usr/src/linux-source-6.1.tar.xz
[[ -f $tarball ]] || { echo "kernel-patch/checkpatch.sh: $tarball missing (apt-get install linux-source-6.1)" >&2; exit 1; }
command -v perl >/dev/null || { echo "kernel-patch/checkpatch.sh: perl is needed" >&2; exit 1; }

version=$(dpkg-query -W -f='${Version}' linux-source-6.1 2>/dev/null || echo unknown)
dir=$cache/checkpatch-$version
if [[ ! -f $dir/scripts/checkpatch.pl ]]; then
	mkdir -p "$dir"
	tar -C "$dir" --strip-components=1 -xJf "$tarball" \
		linux-source-6.1/scripts/checkpatch.pl \
		linux-source-6.1/scripts/spelling.txt \
		linux-source-6.1/scripts/const_structs.checkpatch
fi

patches=("$@")
(( ${#patches[@]} )) || patches=("$here"/patches/*.patch)
status=0
for p in "${patches[@]}"; do
	out=$(perl "$dir/scripts/checkpatch.pl" --strict --no-tree --terse --show-types \
		--ignore FILE_PATH_CHANGES "$p" || true)
	printf '%s\n' "$out" | grep -E ': (ERROR|WARNING|CHECK):' || true
	if printf '%s\n' "$out" | grep -qE ': (ERROR|WARNING):'; then
		status=1
	fi
	printf '%s: %s\n' "$(basename "$p")" "$(printf '%s\n' "$out" | grep '^total:' || echo 'clean')"
done
if (( status )); then
	echo "kernel-patch/checkpatch.sh: checkpatch.pl --strict found errors or warnings" >&2
fi
exit "$status"
