#!/usr/bin/env python3
# Paced request loop: every PERIOD_MS a request of fixed CPU work (ITERS loop
# iterations); each 100 ms the mean request latency (µs) goes to LOG as
# "- VALUE" (hwqos-monitor tail_file: "-" is now).
import sys, time
log, secs, period_ms, iters = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])
out = open(log, "a", buffering=1)
period = period_ms / 1000.0
start = time.monotonic()
deadline, win, lats = start, start, []
while True:
    now = time.monotonic()
    if now - start >= secs:
        break
    t0 = time.perf_counter()
    s = 0
    for i in range(iters):
        s += i
    lats.append((time.perf_counter() - t0) * 1e6)
    now = time.monotonic()
    if now - win >= 0.1 and lats:
        out.write(f"- {sum(lats) / len(lats):.1f}\n")
        lats, win = [], now
    deadline += period
    if deadline > now:
        time.sleep(deadline - now)
    else:
        deadline = now
