#!/bin/sh
# The paced request loop of predict_victim.py for a shell without python
# (the emulated-PMU guest's busybox sh): every PERIOD_US a request of ITERS
# shell-loop iterations; each 100 ms the mean request latency (us) goes to
# LOG as "- VALUE" (hwqos-monitor tail_file: "-" is now). Times from
# $EPOCHREALTIME (microseconds; busybox ash and bash have it).
#   predict_victim.sh LOG SECONDS PERIOD_US ITERS
log=$1 secs=$2 period=$3 iters=$4
t=$EPOCHREALTIME
start=${t%.*}${t#*.}
end=$((start + secs * 1000000))
deadline=$start win=$start sum=0 n=0
while :; do
	t=$EPOCHREALTIME
	now=${t%.*}${t#*.}
	[ "$now" -ge "$end" ] && break
	i=0
	while [ $i -lt "$iters" ]; do i=$((i + 1)); done
	t=$EPOCHREALTIME
	t1=${t%.*}${t#*.}
	sum=$((sum + t1 - now)) n=$((n + 1))
	if [ $((t1 - win)) -ge 100000 ]; then
		echo "- $((sum / n))" >>"$log"
		sum=0 n=0 win=$t1
	fi
	deadline=$((deadline + period))
	if [ "$deadline" -gt "$t1" ]; then usleep $((deadline - t1)); else deadline=$t1; fi
done
